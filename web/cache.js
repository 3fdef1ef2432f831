// The models `Model.load(url, { cache })` keeps in the Cache API, and Model.cache: list, has,
// delete, clear, estimate. One cache (default 'ggweb-models'), keyed by the model's absolute
// URL (a Hub id's /resolve/ URL, never the CDN's signed one it redirects to). Each stored
// response carries the server's ETag / Last-Modified (for revalidation), its length and when
// it was stored (X-Ggweb-Stored-At, ms since the epoch).
import { GgwebError } from './errors.js';
import { hubSource } from './hub.js';
import { optionsObject, reading, show } from './input.js';
import { OPFS_MODELS, opfsClear, opfsMissingWhy, opfsDelete, opfsDir, opfsList, opfsStored } from './opfs.js';

export const DEFAULT_CACHE_NAME = 'ggweb-models';
const STORED_AT = 'X-Ggweb-Stored-At';

/**
 * The `cache` value (true, a name, 'opfs', or { name, offline } as ggweb.js sends it) →
 * { name, store: 'cache' | 'opfs', offline }, or null. 'opfs' is OPFS, never a Cache API name.
 */
export function cacheSpec(cache) {
  const store = (name) => (name === 'opfs' ? 'opfs' : 'cache');
  if (cache === true) return { name: DEFAULT_CACHE_NAME, store: 'cache', offline: false };
  if (typeof cache === 'string' && cache) return { name: cache, store: store(cache), offline: false };
  if (cache && typeof cache === 'object' && cache.name) return { name: cache.name, store: store(cache.name), offline: !!cache.offline };
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

const KEY_OPTIONS = ['cache', 'store', 'file', 'revision', 'hubUrl'];

/**
 * The stores a Model.cache call looks in: `store` 'cache' (the Cache API, the cache `cache`
 * names) or 'opfs'; absent, both (an explicit `cache` name means the Cache API alone).
 * Returns { cache: name | null, opfs: 'required' | 'if-present' | null }.
 */
function stores(o, what) {
  const { store } = o;
  if (store !== undefined && store !== 'cache' && store !== 'opfs') {
    throw new GgwebError('invalid', `${what}: store must be 'cache' or 'opfs', got ${show(store)}`);
  }
  if (store === 'opfs' && o.cache !== undefined) throw new GgwebError('invalid', `${what}: cache names a Cache API cache; it does not go with store: 'opfs'`);
  const name = store === 'opfs' ? null : nameOption(o, what);
  const opfs = store === 'opfs' ? 'required' : store === undefined && o.cache === undefined ? 'if-present' : null;
  // Over both stores, a missing one is skipped; with neither here, the Cache API's refusal says why.
  if (opfs === 'if-present' && !hasCacheApi() && opfsMissingWhy()) cacheStorage(what);
  return { cache: name, opfs };
}

/** The OPFS model folder (null when none exists yet); where OPFS is missing, 'unsupported' when `need` is 'required', else null. */
async function opfsModels(need, what) {
  if (!need) return null;
  try {
    return await opfsDir(OPFS_MODELS, what, false);
  } catch (e) {
    if (need === 'required') throw e;
    return null;
  }
}

/** Whether the Cache API can be asked here (a call over both stores skips it where it is missing). */
const hasCacheApi = () => typeof caches !== 'undefined';

/** Model.cache: the models stored by loads with `cache` (see ggweb.d.ts ModelCache). */
export const modelCache = Object.freeze({
  /** Every stored model: [{ url, bytes, storedAt, etag, store }], the Cache API's first, each store in the order stored. */
  async list(options = undefined) {
    const what = 'Model.cache.list';
    const s = stores(optionsObject(options, what, ['cache', 'store']), what);
    const out = [];
    if (s.cache && (s.opfs !== 'if-present' || hasCacheApi())) {
      out.push(...await guarded(what, async (cs) => {
        if (!(await cs.has(s.cache))) return []; // open() would create an empty cache
        const c = await cs.open(s.cache);
        const found = [];
        for (const req of await c.keys()) {
          const res = await c.match(req);
          if (!res) continue; // deleted meanwhile
          const len = Number(res.headers.get('Content-Length'));
          // A download without Content-Length was stored without it: measure the stored body.
          const bytes = len > 0 ? len : (await res.blob()).size;
          const at = Number(res.headers.get(STORED_AT));
          found.push({ url: req.url, bytes, storedAt: at > 0 ? at : null, etag: res.headers.get('ETag'), store: 'cache' });
        }
        return found;
      }));
    }
    const dir = await opfsModels(s.opfs, what);
    if (dir) out.push(...await opfsList(dir));
    return out;
  },

  /** Whether `source` (a URL, or a Hub id with { file }) is stored (in either store when `store` is absent). */
  async has(source, options = undefined) {
    const what = 'Model.cache.has';
    const o = optionsObject(options, what, KEY_OPTIONS);
    const s = stores(o, what);
    const key = keyOf(source, o, what);
    if (s.cache && (s.opfs !== 'if-present' || hasCacheApi())
      && await guarded(what, async (cs) => (await cs.has(s.cache)) && !!(await (await cs.open(s.cache)).match(key)))) return true;
    const dir = await opfsModels(s.opfs, what);
    return dir ? !!(await opfsStored(dir, key)) : false;
  },

  /** Removes `source`'s stored copy (from both stores when `store` is absent); true when there was one. */
  async delete(source, options = undefined) {
    const what = 'Model.cache.delete';
    const o = optionsObject(options, what, KEY_OPTIONS);
    const s = stores(o, what);
    const key = keyOf(source, o, what);
    let had = false;
    if (s.cache && (s.opfs !== 'if-present' || hasCacheApi())) {
      had = await guarded(what, async (cs) => (await cs.has(s.cache)) && (await cs.open(s.cache)).delete(key));
    }
    const dir = await opfsModels(s.opfs, what);
    if (dir) had = (await opfsDelete(dir, key)) || had;
    return had;
  },

  /** Deletes the whole cache and/or OPFS's model folder; true when one existed. */
  async clear(options = undefined) {
    const what = 'Model.cache.clear';
    const s = stores(optionsObject(options, what, ['cache', 'store']), what);
    let had = false;
    if (s.cache && (s.opfs !== 'if-present' || hasCacheApi())) had = await guarded(what, (cs) => cs.delete(s.cache));
    if (s.opfs && (await opfsModels(s.opfs, what))) had = (await opfsClear(what)) || had;
    return had;
  },

  /**
   * navigator.storage.estimate() for this origin ({ usage, quota } in bytes, Chromium adds
   * usageDetails), and navigator.storage.persisted() as `persisted` (null where absent). With
   * `store`, also `store` and `bytes`: what the models stored there take.
   */
  async estimate(options = undefined) {
    const what = 'Model.cache.estimate';
    const o = optionsObject(options, what, ['store']);
    const s = typeof navigator !== 'undefined' ? navigator.storage : undefined;
    if (typeof s?.estimate !== 'function') {
      throw new GgwebError('unsupported', `${what}: navigator.storage.estimate() is not available here (Node, or not a secure context)`);
    }
    const e = await s.estimate();
    const persisted = typeof s.persisted === 'function' ? await s.persisted().catch(() => null) : null;
    if (o.store === undefined) return { ...e, persisted };
    const listed = await modelCache.list({ store: o.store });
    return { ...e, persisted, store: o.store, bytes: listed.reduce((n, m) => n + m.bytes, 0) };
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
