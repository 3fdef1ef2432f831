// Hugging Face Hub ids: Model.load('QuantFactory/gpt2-GGUF', { file: 'gpt2.Q8_0.gguf' }) reads
// {hubUrl}/{owner}/{name}/resolve/{revision}/{file}, the URL the Hub answers with a redirect
// to its CDN (fetch follows it). Only with `file`: without it, "owner/name" stays a relative
// URL, as it always was, so no existing page changes meaning.
import { GgwebError } from './errors.js';
import { show } from './input.js';

export const DEFAULT_HUB_URL = 'https://huggingface.co';
export const DEFAULT_REVISION = 'main';

/**
 * "owner/name" as the Hub allows them: letters, digits, '-', '_', '.', each part starting
 * with a letter or digit (so no '.', '..' or '/' prefix, which a relative URL would have),
 * at most 96 characters; no scheme, exactly one slash.
 */
const HUB_ID = /^[A-Za-z0-9][\w.-]{0,95}\/[A-Za-z0-9][\w.-]{0,95}$/;

export const isHubId = (s) => typeof s === 'string' && HUB_ID.test(s) && !s.includes('..') && !s.includes('--');

/**
 * The options `file`, `revision`, `hubUrl` checked (`what`: 'Model.load' or 'Model.inspect'),
 * and, when `source` is a Hub id with `file`, the URL it names; null when no Hub option was
 * given (the source is read as before). `base` resolves a relative `hubUrl` (a local mirror).
 */
export function hubSource(source, o, what, base) {
  const { file, revision, hubUrl } = o;
  const given = (v) => v !== undefined && v !== null;
  if (!given(file)) {
    for (const [k, v] of [['revision', revision], ['hubUrl', hubUrl]]) {
      if (given(v)) throw new GgwebError('invalid', `${what}: ${k} is for a Hub id with \`file\` ("owner/name" plus { file }); no file was given`);
    }
    return null;
  }
  if (typeof file !== 'string' || !file || file.startsWith('/') || /[\\?#\0]/.test(file) || file.split('/').some((p) => !p || p === '.' || p === '..')) {
    throw new GgwebError('invalid', `${what}: file must be a path in the repository such as "gpt2.Q8_0.gguf", got ${show(file)}`);
  }
  if (!isHubId(source)) {
    throw new GgwebError('invalid', `${what}: with \`file\`, the source must be a Hub id "owner/name" (letters, digits, - _ .), got ${show(source)}`);
  }
  if (given(revision) && (typeof revision !== 'string' || !revision || /[\0?#]/.test(revision))) {
    throw new GgwebError('invalid', `${what}: revision must be a branch, tag or commit such as "main", got ${show(revision)}`);
  }
  let hub;
  if (given(hubUrl)) {
    if (typeof hubUrl !== 'string' && !(hubUrl instanceof URL)) throw new GgwebError('invalid', `${what}: hubUrl must be a URL string, got ${show(hubUrl)}`);
    try {
      hub = new URL(String(hubUrl), base);
    } catch {
      throw new GgwebError('invalid', `${what}: hubUrl is not a valid URL: ${show(String(hubUrl))}`);
    }
    if (!/^https?:$/.test(hub.protocol) || hub.search || hub.hash) {
      throw new GgwebError('invalid', `${what}: hubUrl must be an http(s) URL without query or fragment, got ${show(String(hubUrl))}`);
    }
  } else {
    hub = new URL(DEFAULT_HUB_URL);
  }
  const rev = revision ?? DEFAULT_REVISION;
  // A revision such as "refs/pr/1" is one path segment on the Hub (its own clients encode the '/').
  const url = `${hub.href.replace(/\/+$/, '')}/${source}/resolve/${encodeURIComponent(rev)}/${file.split('/').map(encodeURIComponent).join('/')}`;
  return { url, hub: { repo: source, file, revision: rev } };
}
