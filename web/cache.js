// The models `Model.load(url, { cache })` keeps in the Cache API, and Model.cache: list, has,
// delete, clear, estimate. One cache (default 'ggweb-models'), keyed by the model's absolute
// URL (a Hub id's /resolve/ URL, never the CDN's signed one it redirects to). Each stored
// response carries the server's ETag / Last-Modified (for revalidation), its length and when
// it was stored (X-Ggweb-Stored-At, ms since the epoch).
import { GgwebError } from './errors.js';
import { hubSource } from './hub.js';
import { optionsObject, reading, show } from './input.js';

export const DEFAULT_CACHE_NAME = 'ggweb-models';
const STORED_AT = 'X-Ggweb-Stored-At';

/** The `cache` value (true, a name, or { name, offline } as ggweb.js sends it) → { name, offline }, or null. */
export function cacheSpec(cache) {
  if (cache === true) return { name: DEFAULT_CACHE_NAME, offline: false };
  if (typeof cache === 'string' && cache) return { name: cache, offline: false };
  if (cache && typeof cache === 'object' && cache.name) return { name: cache.name, offline: !!cache.offline };
  return null;
}

/** The headers a model is stored with: its length, the server's validators, the time. */
export function storedHeaders(res, total) {
  const h = { 'Content-Type': 'application/octet-stream', [STORED_AT]: String(Date.now()) };
  if (total) h['Content-Length'] = String(total);
  for (const k of ['ETag', 'Last-Modified']) {
    const v = res.headers.get(k);
    if (v) h[k] = v;
  }
  return h;
}

/** The conditional request's headers for a stored copy, or null when it has no validator. */
export function conditionalHeaders(stored) {
  const etag = stored.headers.get('ETag');
  const modified = stored.headers.get('Last-Modified');
  if (!etag && !modified) return null;
  const h = {};
  if (etag) h['If-None-Match'] = etag;
  if (modified) h['If-Modified-Since'] = modified;
  return h;
}

const base = () => (typeof document !== 'undefined' ? document.baseURI : globalThis.location?.href);

function cacheStorage(what) {
  if (typeof caches === 'undefined') {
    throw new GgwebError('unsupported', `${what}: the Cache API is not available here (Node, or a page that is not a secure context: https or localhost)`);
  }
  return caches;
}

/** Runs a Cache API call; a refusal (an opaque origin's SecurityError) is 'unsupported'. */
async function guarded(what, fn) {
  try {
    return await fn(cacheStorage(what));
  } catch (e) {
    if (e instanceof GgwebError) throw e;
    throw new GgwebError('unsupported', `${what}: the Cache API refused: ${e?.name ?? 'Error'}: ${e?.message ?? e}`);
  }
}

/** The `cache` option of a Model.cache method: a cache name, or true / absent for 'ggweb-models'. */
function nameOption(o, what) {
  const v = o.cache;
  if (v === undefined || v === true) return DEFAULT_CACHE_NAME;
  if (typeof v === 'string' && v) return v;
  throw new GgwebError('invalid', `${what}: cache must be a cache name (a non-empty string) or true, got ${show(v)}`);
}

/** The cache key of `source` (a URL, or a Hub id with { file, revision, hubUrl }), as a load stores it. */
function keyOf(source, o, what) {
  const hub = hubSource(source, o, what, base());
  if (hub) return hub.url;
  const isUrl = typeof source !== 'string' && reading(`${what}: the model`, () => source instanceof URL);
  if (typeof source !== 'string' && !isUrl) {
    throw new GgwebError('invalid', `${what}: the model must be a URL (or a Hub id with { file }), got ${show(source)}`);
  }
  try {
    return new URL(isUrl ? source.href : source, base()).href;
  } catch {
    throw new GgwebError('invalid', `${what}: not a valid URL: ${show(String(source))}`);
  }
}

const KEY_OPTIONS = ['cache', 'file', 'revision', 'hubUrl'];

/** Model.cache: the models stored by loads with `cache` (see ggweb.d.ts ModelCache). */
export const modelCache = Object.freeze({
  /** Every stored model: [{ url, bytes, storedAt, etag }], in the order they were stored. */
  async list(options = undefined) {
    const what = 'Model.cache.list';
    const name = nameOption(optionsObject(options, what, ['cache']), what);
    return guarded(what, async (cs) => {
      if (!(await cs.has(name))) return []; // open() would create an empty cache
      const c = await cs.open(name);
      const out = [];
      for (const req of await c.keys()) {
        const res = await c.match(req);
        if (!res) continue; // deleted meanwhile
        const len = Number(res.headers.get('Content-Length'));
        // A download without Content-Length was stored without it: measure the stored body.
        const bytes = len > 0 ? len : (await res.blob()).size;
        const at = Number(res.headers.get(STORED_AT));
        out.push({ url: req.url, bytes, storedAt: at > 0 ? at : null, etag: res.headers.get('ETag') });
      }
      return out;
    });
  },

  /** Whether `source` (a URL, or a Hub id with { file }) is stored. */
  async has(source, options = undefined) {
    const what = 'Model.cache.has';
    const o = optionsObject(options, what, KEY_OPTIONS);
    const name = nameOption(o, what);
    const key = keyOf(source, o, what);
    return guarded(what, async (cs) => (await cs.has(name)) && !!(await (await cs.open(name)).match(key)));
  },

  /** Removes `source`'s stored copy; true when there was one. */
  async delete(source, options = undefined) {
    const what = 'Model.cache.delete';
    const o = optionsObject(options, what, KEY_OPTIONS);
    const name = nameOption(o, what);
    const key = keyOf(source, o, what);
    return guarded(what, async (cs) => (await cs.has(name)) && (await cs.open(name)).delete(key));
  },

  /** Deletes the whole cache; true when it existed. */
  async clear(options = undefined) {
    const what = 'Model.cache.clear';
    const name = nameOption(optionsObject(options, what, ['cache']), what);
    return guarded(what, (cs) => cs.delete(name));
  },

  /**
   * navigator.storage.estimate() for this origin ({ usage, quota } in bytes, Chromium adds
   * usageDetails), and navigator.storage.persisted() as `persisted` (null where absent).
   */
  async estimate(options = undefined) {
    const what = 'Model.cache.estimate';
    if (Object.keys(optionsObject(options, what)).length) throw new GgwebError('invalid', `${what} takes no options, got ${show(options)}`);
    const s = typeof navigator !== 'undefined' ? navigator.storage : undefined;
    if (typeof s?.estimate !== 'function') {
      throw new GgwebError('unsupported', `${what}: navigator.storage.estimate() is not available here (Node, or not a secure context)`);
    }
    const e = await s.estimate();
    const persisted = typeof s.persisted === 'function' ? await s.persisted().catch(() => null) : null;
    return { ...e, persisted };
  },
});

/**
 * Asks navigator.storage.persist() (Window only: a worker or Node has none). Resolves to
 * { persisted, note }: the browser's answer, and why there is none.
 */
export async function askPersist() {
  const s = typeof navigator !== 'undefined' ? navigator.storage : undefined;
  if (typeof s?.persist !== 'function') {
    const persisted = typeof s?.persisted === 'function' ? await s.persisted().catch(() => false) : false;
    return { persisted, note: 'navigator.storage.persist() is not available here (a worker, Node, or not a secure context); storage stays best-effort' };
  }
  try {
    return { persisted: await s.persist(), note: null };
  } catch (e) {
    return { persisted: false, note: `navigator.storage.persist() failed: ${e?.message ?? e}` };
  }
}
