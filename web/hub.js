// Hugging Face Hub ids: Model.load('QuantFactory/gpt2-GGUF', { file: 'gpt2.Q8_0.gguf' }) reads
// {hubUrl}/{owner}/{name}/resolve/{revision}/{file}, the URL the Hub answers with a redirect
// to its CDN (fetch follows it). Only with `file`: without it, "owner/name" stays a relative
// URL, as it always was, so no existing page changes meaning.
import { GgwebError } from './errors.js';
import { reading, show } from './input.js';

export const DEFAULT_HUB_URL = 'https://huggingface.co';
export const DEFAULT_REVISION = 'main';

/**
 * "owner/name" as the Hub allows them: letters, digits, '-', '_', '.', each part starting
 * and ending with a letter, digit or '_' (so no '.' or '..' part, which a URL would
 * resolve away), at most 96 characters, no '..' or '--'; no scheme, exactly one slash.
 */
const HUB_PART = '[A-Za-z0-9](?:[\\w.-]{0,94}\\w)?';
const HUB_ID = new RegExp(`^${HUB_PART}/${HUB_PART}$`);

export const isHubId = (s) => typeof s === 'string' && HUB_ID.test(s) && !s.includes('..') && !s.includes('--');

/**
 * Whether `rev` is a revision the Hub can name: a branch or tag name valid under
 * `git check-ref-format --allow-onelevel` (so "refs/pr/1" too) or a commit hash. Git's
 * rules: no part (between '/') empty, starting with '.' or ending in '.lock'; no '..', '@{',
 * '\\', control characters, space, ~ ^ : ? * [; not ending in '/' or '.'; not "@". Beyond
 * git's: well-formed UTF-16 (a lone surrogate has no URL encoding), at most 255 characters.
 * Such a name never makes a URL path segment '.' or '..', so the URL stays under /resolve/.
 */
export function isRevision(rev) {
  if (typeof rev !== 'string' || rev.length === 0 || rev.length > 255 || rev === '@') return false;
  if (typeof rev.isWellFormed === 'function' ? !rev.isWellFormed() : /[\ud800-\udfff]/.test(rev)) return false;
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x20\x7f~^:?*[\\]|\.\.|@\{/.test(rev) || rev.endsWith('.') || rev.endsWith('/')) return false;
  return rev.split('/').every((part) => part.length > 0 && !part.startsWith('.') && !part.endsWith('.lock'));
}

/** A file path in a repository: parts separated by '/', none empty, '.' or '..', no control characters or \\ ? #, well-formed. */
export function isRepoFile(file) {
  if (typeof file !== 'string' || !file || file.length > 1024) return false;
  if (typeof file.isWellFormed === 'function' ? !file.isWellFormed() : /[\ud800-\udfff]/.test(file)) return false;
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f\\?#]/.test(file)) return false;
  return file.split('/').every((p) => p && p !== '.' && p !== '..');
}

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
  if (!isRepoFile(file)) {
    throw new GgwebError('invalid', `${what}: file must be a path in the repository such as "gpt2.Q8_0.gguf", got ${show(file)}`);
  }
  if (!isHubId(source)) {
    throw new GgwebError('invalid', `${what}: with \`file\`, the source must be a Hub id "owner/name" (letters, digits, - _ .), got ${show(source)}`);
  }
  if (given(revision) && !isRevision(revision)) {
    throw new GgwebError('invalid', `${what}: revision must be a branch, tag or commit such as "main" (a valid git ref name), got ${show(revision)}`);
  }
  let hub;
  if (given(hubUrl)) {
    const isUrl = reading(`${what}: hubUrl`, () => hubUrl instanceof URL);
    if (typeof hubUrl !== 'string' && !isUrl) throw new GgwebError('invalid', `${what}: hubUrl must be a URL string, got ${show(hubUrl)}`);
    try {
      hub = new URL(isUrl ? hubUrl.href : hubUrl, base);
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
  const resolve = `${hub.href.replace(/\/+$/, '')}/${source}/resolve/${encodeURIComponent(rev)}/`;
  const url = `${resolve}${file.split('/').map(encodeURIComponent).join('/')}`;
  // The checks above keep every part a plain path segment; this holds it whatever they miss.
  if (!new URL(url).href.startsWith(resolve)) {
    throw new GgwebError('invalid', `${what}: the Hub id, revision and file make a URL outside the repository's /resolve/ (${show(url)})`);
  }
  return { url, hub: { repo: source, file, revision: rev } };
}
