// Where a model's bytes come from: a URL (fetch, the Cache API, the stall timer), a File or
// Blob, a stream or bytes, read to the end for a load (openSource) or only as far as its
// GGUF header for Model.inspect (headerChunks: Range requests of growing size where the
// server allows them). engine.js feeds what these yield to the wasm side.
import { GgwebError, abortedError } from './errors.js';
import { reading, show } from './input.js';
import { nodeFs } from './node-fs.js';
import { cacheSpec, conditionalHeaders, storedHeaders } from './cache.js';
import { OPFS_MODELS, OPFS_PREFIX, checkpointFile, checkpointName, opfsBeginStore, opfsDir, opfsStored } from './opfs.js';

/** How long a URL download may go without a byte before it fails with code 'timeout' (ms). */
export const DEFAULT_STALL_TIMEOUT_MS = 30000;

/**
 * The longest delay setTimeout keeps: a larger one overflows its 32-bit signed count and
 * fires at once (a `stallTimeoutMs` of 2**31 timed a download out after its first chunk).
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Checks a stallTimeoutMs option: a number of ms >= 0; 0, Infinity, and anything beyond
 * setTimeout's range (MAX_TIMER_MS, 24.8 days) mean no limit.
 */
export function stallTimeout(v) {
  if (v === undefined || v === null) return DEFAULT_STALL_TIMEOUT_MS;
  if (typeof v !== 'number' || Number.isNaN(v) || v < 0) {
    throw new GgwebError('invalid', `stallTimeoutMs must be a number of milliseconds >= 0 (0: no limit), got ${show(v)}`);
  }
  return v === 0 || v > MAX_TIMER_MS ? Infinity : v;
}

/** reader.read(), or a 'stalled' marker when nothing arrives for `ms` (the read is left pending). */
export function readWithin(reader, ms) {
  if (!Number.isFinite(ms)) return reader.read();
  let timer;
  return Promise.race([
    reader.read(),
    new Promise((r) => { timer = setTimeout(() => r({ stalled: true }), ms); }),
  ]).finally(() => clearTimeout(timer));
}

export function formatBytes(n) {
  if (n == null || n < 0) return '?';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

// --- What the caller passed ------------------------------------------------------------------

/** The page's base URL, for relative model and core URLs; undefined outside a page or worker (Node). */
export const baseUrl = () => (typeof document !== 'undefined' ? document.baseURI : globalThis.location?.href);

/**
 * In Node: a `file:` URL, or a string that is not an http(s)/blob/data URL, names a local file;
 * it is opened as a Blob backed by the file (fs.openAsBlob), so it streams like a File does.
 */
async function localFile(source) {
  if (baseUrl() !== undefined) return null;
  const fs = await nodeFs();
  if (!fs) return null;
  const s = String(source);
  if (/^(https?|blob|data):/i.test(s)) return null;
  const path = /^file:/i.test(s) ? new URL(s) : s;
  try {
    if (typeof fs.openAsBlob === 'function') return { src: { kind: 'blob', blob: await fs.openAsBlob(path) } };
    return { src: { kind: 'bytes', bytes: new Uint8Array(await fs.promises.readFile(path)) } };
  } catch (e) {
    throw new GgwebError('invalid', `could not open the model file ${JSON.stringify(s)}: ${e.message}`);
  }
}

/** What kind of model source `source` is: 'url', 'blob', 'stream', 'response', 'bytes' or null. */
function sourceKind(source) {
  if (typeof source === 'string') return 'url';
  if (source === null || typeof source !== 'object') return null;
  if (source instanceof URL) return 'url';
  if (typeof Blob !== 'undefined' && source instanceof Blob) return 'blob';
  if (typeof ReadableStream !== 'undefined' && source instanceof ReadableStream) return 'stream';
  if (typeof Response !== 'undefined' && source instanceof Response) return 'response';
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) return 'bytes';
  return null;
}

/** Turns what the caller passed (`what`: the call, for errors) into a source descriptor a worker can receive; `hub`: hubSource's answer. */
export async function describeSource(source, hub = null, what = 'Model.load') {
  if (hub) return { src: { kind: 'url', url: hub.url, hub: hub.hub } };
  // The type tests (instanceof) ask a Proxy's traps: one that throws is 'invalid' (input.js reading).
  const kind = reading(`${what}: the source`, () => sourceKind(source));
  if (kind === 'bytes' && (source.buffer ?? source).detached) {
    throw new GgwebError('invalid', `${what}: the source's ArrayBuffer is detached (transferred elsewhere)`);
  }
  if (kind === 'url' && String(source).startsWith(OPFS_PREFIX)) {
    return { src: { kind: 'opfs', name: checkpointName(String(source).slice(OPFS_PREFIX.length), `${what}: ${show(String(source))}`) } };
  }
  if (kind === 'url') {
    const file = await localFile(source);
    if (file) return file;
    let url;
    try {
      url = new URL(String(source), baseUrl()).href;
    } catch {
      throw new GgwebError('invalid', `not a valid model URL: ${JSON.stringify(String(source))}`);
    }
    return { src: { kind: 'url', url } };
  }
  if (kind === 'blob') return { src: { kind: 'blob', blob: source } };
  if (kind === 'stream') return { src: { kind: 'stream', stream: source }, transfer: [source] };
  if (kind === 'response') {
    if (!source.ok) throw new GgwebError('http', `HTTP ${source.status} for ${source.url || 'the given Response'}`, { status: source.status, url: source.url });
    if (!source.body) throw new GgwebError('invalid', 'the given Response has no body');
    const len = Number(source.headers.get('Content-Length'));
    const stream = source.body;
    return { src: { kind: 'stream', stream, total: len > 0 ? len : undefined }, transfer: [stream] };
  }
  if (kind === 'bytes') {
    const view = source instanceof ArrayBuffer ? new Uint8Array(source) : new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
    return { src: { kind: 'bytes', bytes: view.slice() } };
  }
  throw new GgwebError('invalid', `${what}: the source must be a URL, a File/Blob, a ReadableStream, a Response or bytes, got ${show(source)}`);
}

/**
 * fetch(url), failing with 'timeout' when the response's headers have not come within
 * `stallMs` (a server that accepts the connection and then says nothing would otherwise
 * leave the call pending for good: the stall timer of the body's reads starts only after
 * fetch() resolves). The caller's `signal` aborts it as 'aborted'; other failures are
 * 'network'. `headers` are the request's.
 */
export async function fetchWithin(url, { signal, stallMs = Infinity, headers, what }) {
  const ctl = new AbortController();
  const onAbort = () => ctl.abort();
  if (signal?.aborted) throw abortedError(what);
  signal?.addEventListener('abort', onAbort, { once: true });
  let timedOut = false;
  const timer = Number.isFinite(stallMs) ? setTimeout(() => { timedOut = true; ctl.abort(); }, stallMs) : null;
  try {
    // The body keeps this controller's signal: a caller's abort later ends the download too.
    return await fetch(url, headers ? { signal: ctl.signal, headers } : { signal: ctl.signal });
  } catch (e) {
    if (timedOut) {
      throw new GgwebError('timeout', `${url}: no response within ${stallMs} ms (the server accepted the request but sent no headers)`,
        { url, loaded: 0, total: null });
    }
    if (signal?.aborted) throw abortedError(what);
    throw new GgwebError('network', `could not fetch ${url}: ${e.message} (offline, blocked by CORS, a redirect loop, or the server is unreachable)`, { url });
  } finally {
    clearTimeout(timer);
  }
}

/** The 'http' error for `res`, naming the URL (and, for a Hub id, what may be wrong). */
function httpError(res, src) {
  let hint = '';
  if (src.hub) {
    const { repo, file, revision } = src.hub;
    hint = res.status === 401 || res.status === 403
      ? ` (Hub repo ${repo}: missing, private or gated; ggweb sends no token)`
      : ` (Hub repo ${repo}, file ${JSON.stringify(file)}, revision ${JSON.stringify(revision)}: is each spelt right?)`;
  }
  return new GgwebError('http', `HTTP ${res.status}${res.statusText ? ' ' + res.statusText : ''} fetching ${src.url}${hint}`, { status: res.status, url: src.url });
}

/**
 * Opens a model source for streaming. A source descriptor is one of
 *   { kind: 'url', url }  { kind: 'blob', blob }  { kind: 'stream', stream, total? }  { kind: 'bytes', bytes }
 * `cache`: false, true, a cache name or { name, offline } (cache.js cacheSpec). Returns { reader,
 * total (bytes or null), via ('download'|'cache'|'file'|'stream'), cacheNote, cacheDone(ok) }.
 */
export async function openSource(src, { signal, cache, stallMs = Infinity }) {
  if (src.kind === 'blob') {
    return { reader: src.blob.stream().getReader(), total: src.blob.size, via: 'file', name: src.blob.name };
  }
  if (src.kind === 'bytes') {
    const blob = new Blob([src.bytes]);
    return { reader: blob.stream().getReader(), total: blob.size, via: 'file' };
  }
  if (src.kind === 'stream') {
    return { reader: src.stream.getReader(), total: src.total ?? null, via: 'stream' };
  }
  if (src.kind === 'opfs') {
    const file = await checkpointFile(src.name, `Model.load('${OPFS_PREFIX}${src.name}')`);
    return { reader: file.stream().getReader(), total: file.size, via: 'opfs', name: `${OPFS_PREFIX}${src.name}` };
  }
  if (src.kind !== 'url') throw new GgwebError('invalid', `unknown model source kind ${show(src.kind)}`);

  const url = src.url;
  const spec = cacheSpec(cache);
  const notes = []; // what info().load.cacheNote says
  let store = null; // the Cache API's cache, or with spec.store 'opfs' the OPFS folder
  let stored = null; // the stored copy: { headers, open() → { reader, total } }
  if (spec && /^https?:/.test(url) && spec.store === 'opfs') {
    try {
      store = await opfsDir(OPFS_MODELS, 'cache: \'opfs\'');
      const hit = await opfsStored(store, url);
      if (hit) stored = { headers: hit.headers, open: () => ({ reader: hit.file.stream().getReader(), total: hit.total }), drop() {} };
    } catch (e) {
      notes.push(`${e instanceof GgwebError ? e.message : `the Origin Private File System is unavailable (${e?.name}: ${e?.message})`}; loaded without it`);
      store = null;
    }
  } else if (spec && /^https?:/.test(url)) {
    if (typeof caches === 'undefined') {
      notes.push('the Cache API is not available here (Node, or a page that is not https or localhost); loaded without it');
    } else {
      try {
        store = await caches.open(spec.name);
        const hit = await store.match(url);
        if (hit?.body) {
          stored = {
            headers: hit.headers,
            open() {
              const len = Number(hit.headers.get('Content-Length'));
              return { reader: hit.body.getReader(), total: len > 0 ? len : null };
            },
            drop() { hit.body.cancel().catch(() => {}); },
          };
        }
      } catch (e) {
        notes.push(`the Cache API is unavailable (${e.message}); loaded without it`);
        store = null;
      }
    }
  }
  const note = () => (notes.length ? notes.join('; ') : null);
  const fromStore = () => ({ ...stored.open(), via: spec.store, url, cacheNote: note() });
  let res;
  if (stored) {
    // Revalidated with the server unless `offline`: a 304 keeps the stored copy, a 200 replaces it.
    const conditional = conditionalHeaders(stored);
    if (spec.offline) return fromStore();
    if (!conditional) {
      notes.push(`the stored copy of ${url} has no ETag or Last-Modified to revalidate with; used as stored`);
      return fromStore();
    }
    try {
      res = await fetchWithin(url, { signal, stallMs, headers: conditional, what: `loading ${url}` });
    } catch (e) {
      if (e.code === 'aborted') throw e;
      notes.push(`could not revalidate with the server (${e.message}); used the stored copy`);
      return fromStore();
    }
    if (res.status === 304 || !res.ok || !res.body) {
      res.body?.cancel().catch(() => {});
      if (res.status !== 304) notes.push(`the server answered HTTP ${res.status} when revalidating ${url}; used the stored copy`);
      return fromStore();
    }
    stored.drop(); // a new version: the download below replaces it
  } else {
    res = await fetchWithin(url, { signal, stallMs, what: `loading ${url}` });
  }
  if (!res.ok) throw httpError(res, src);
  if (!res.body) throw new GgwebError('network', `the response for ${url} has no body`, { url });
  // Content-Length counts encoded bytes; with a compressed transfer it says nothing about ours.
  const enc = res.headers.get('Content-Encoding');
  const len = Number(res.headers.get('Content-Length'));
  const total = len > 0 && (!enc || enc === 'identity') ? len : null;

  if (!store) return { reader: reusedBufferReader(res.body), total, via: 'download', url, cacheNote: note() };
  if (spec.store === 'opfs') return opfsDownload(res, store, { url, total, notes, note });

  // Tee: one branch feeds the loader, the other goes into the cache. If loading stops early,
  // the cache branch is errored, so a partial file is never stored.
  const [forLoader, forCacheRaw] = res.body.tee();
  const cacheReader = forCacheRaw.getReader();
  let cacheCtrl;
  const forCache = new ReadableStream({
    start(c) { cacheCtrl = c; },
    async pull(c) {
      const { done, value } = await cacheReader.read();
      if (done) c.close();
      else c.enqueue(value);
    },
    cancel(r) { return cacheReader.cancel(r); },
  });
  let putError = null;
  const put = store.put(url, new Response(forCache, { headers: storedHeaders(res, total) })).then(() => true, (e) => {
    putError = e;
    // A refused write (the quota) must not leave the tee buffering the rest of the file for it.
    cacheReader.cancel().catch(() => {});
    return false;
  });
  const out = {
    reader: forLoader.getReader(),
    total,
    via: 'download',
    url,
    cacheNote: note(),
    /** Settles the cache write (`ok`: the load succeeded); true when stored, else says why in cacheNote. */
    async cacheDone(ok) {
      if (!ok) {
        try { cacheCtrl.error(new Error('load failed')); } catch { /* already closed */ }
        cacheReader.cancel().catch(() => {});
      }
      const done = await put;
      if (done && !ok) await store.delete(url).catch(() => {});
      if (ok && !done) {
        const why = `could not store ${url} in the cache "${spec.name}" (${putError?.name ?? 'Error'}: ${putError?.message ?? putError}); ` +
          `${putError?.name === 'QuotaExceededError' ? 'the storage quota is full, ' : ''}the next load downloads it again`;
        console.warn(`ggweb: ${why}`);
        notes.push(why);
        out.cacheNote = note();
      }
      return done && ok;
    },
  };
  return out;
}

/**
 * The size of each of a download's two read buffers (reusedBufferReader): 256 KiB, which
 * the loader copies into wasm memory in four of its 64 KiB pieces. 1 MiB buffers held 1.5 MB
 * more of the worker's memory for no faster load (BENCHMARKS.md "Load memory in Chromium").
 */
export const READ_BUFFER_BYTES = 256 * 1024;

/**
 * A reader of `body` (fetch's byte stream) that reads into two buffers in turn (a BYOB
 * reader) instead of a new chunk per read: a default reader's chunks, once the loader has
 * copied them into wasm memory, wait for V8's GC, which collects them when external memory
 * grows, not per chunk (0-90 MB of them at the peak of a 124M load: BENCHMARKS.md "Load
 * memory in Chromium"). A chunk is valid until the read after next: engine.js asks for one
 * chunk ahead and feeds each before asking for the next. A stream without BYOB reads gets its
 * default reader. Only a plain download uses it: the Cache API's tee and the OPFS writer keep
 * chunks after the loader is done with them.
 */
export function reusedBufferReader(body) {
  let byob;
  try {
    byob = body.getReader({ mode: 'byob' });
  } catch {
    return body.getReader();
  }
  const buffers = [null, null];
  let turn = 0;
  return {
    async read() {
      const i = turn;
      turn ^= 1;
      // A read moves (transfers) the buffer it is given; its answer's view holds it again.
      const buf = buffers[i] ?? new ArrayBuffer(READ_BUFFER_BYTES);
      buffers[i] = null;
      const r = await byob.read(new Uint8Array(buf));
      if (r.done) return { done: true, value: undefined };
      buffers[i] = r.value.buffer;
      return r;
    },
    cancel: (reason) => byob.cancel(reason),
    releaseLock: () => byob.releaseLock(),
  };
}

/** How much collectChunks claims (never touches) to make V8 collect: its external-memory step. */
export const GC_NUDGE_BYTES = 64 * 1024 * 1024;
/**
 * The longest collectChunks waits for that collection before the model is built anyway. In
 * Chromium 156 it came within 2-14 ms; Firefox 153 made none within 150 ms after a 124M load
 * (its small loads' markers within ~3 ms), so this is what a load there pays for nothing.
 */
export const GC_WAIT_MS = 50;
/**
 * How long collectChunks waits after the collection, for its freed pages to leave the process:
 * the marker's callback comes right after the GC's pause, before V8's tasks have swept and
 * released them (one thread, 124M: transients of 3-23 MB without this wait, ≤ 3.7 MB with it).
 */
export const GC_SETTLE_MS = 20;

/**
 * What a stream leaves in the JS heap, let go before the model's buffers are built. Chromium
 * hands a fetch body's bytes to JS in ArrayBuffers of its own, one per piece that arrives,
 * even to a BYOB reader (which then copies them into the reader's buffer): reading the 177.7 MB
 * 124M file on a page that way left 32-48 MB in the renderer. V8 frees them at its next full
 * GC, which its external-memory accounting starts about every 64 MB, so when a stream ends
 * 0-64 MB of them are still resident, and building the model (the KV cache and the compute
 * buffer written into fresh wasm memory) then raised the tab's peak by as much: transients
 * of 0-88 MB on the 124M load (BENCHMARKS.md "Load memory: the transient was the stream's
 * chunks"). Call it when the stream opens and `await settle()` when the stream has ended:
 * settle makes and drops an ArrayBuffer of GC_NUDGE_BYTES (fresh zero pages, never written,
 * so never resident: Chromium's and Firefox's renderers grew < 1 MB for it), which takes V8
 * past that accounting's step, then waits until an object made here is collected and
 * GC_SETTLE_MS more, or GC_WAIT_MS without a collection: ~25 ms in Chromium, 50 in Firefox.
 * (After a long stream that object has outlived the young generation, so only a full GC
 * collects it; after a short one a young collection may, which ends the wait early.) It
 * resolves to the ms waited, or null where there is no FinalizationRegistry.
 */
export function collectChunks() {
  if (typeof FinalizationRegistry !== 'function') return { settle: async () => null };
  let collected;
  const seen = new Promise((r) => { collected = r; });
  let registry = new FinalizationRegistry(() => collected());
  let marker = {};
  registry.register(marker, 0);
  return {
    async settle() {
      const t = Date.now();
      marker = null;
      try {
        // Dropped as soon as made: only its size, counted by the engine, matters.
        void new ArrayBuffer(GC_NUDGE_BYTES);
      } catch {
        // Refused (a small address space): the wait below still lets a running GC finish.
      }
      let timer;
      const ran = await Promise.race([seen.then(() => true), new Promise((r) => { timer = setTimeout(r, GC_WAIT_MS, false); })]);
      clearTimeout(timer);
      if (ran) await new Promise((r) => setTimeout(r, GC_SETTLE_MS));
      registry = null;
      return Date.now() - t;
    },
  };
}

/**
 * A download that is written into OPFS as the loader reads it (a temporary file, renamed by
 * cacheDone(true) once its length and the load, i.e. the GGUF parse, are complete). A failed
 * write (the quota) stops the writing only: the load goes on, and cacheNote says why.
 */
async function opfsDownload(res, dir, { url, total, notes, note }) {
  const body = res.body.getReader();
  let w = null;
  try {
    w = await opfsBeginStore(dir, url, res);
  } catch (e) {
    notes.push(`could not start storing ${url} in the Origin Private File System (${e?.name}: ${e?.message}); loaded without it`);
  }
  let seen = 0;
  const out = {
    reader: {
      async read() {
        const r = await body.read();
        if (!r.done) {
          seen += r.value.byteLength;
          w?.write(r.value);
        }
        return r;
      },
      cancel: (why) => body.cancel(why),
    },
    total,
    via: 'download',
    url,
    cacheNote: note(),
    /** Settles the OPFS write (`ok`: the load succeeded); true when stored, else says why in cacheNote. */
    async cacheDone(ok) {
      if (!w) return false;
      const whole = ok && (total == null || seen === total);
      try {
        return await w.finish(whole, seen);
      } catch (e) {
        if (!ok) return false;
        const why = `could not store ${url} in the Origin Private File System (${e?.name ?? 'Error'}: ${e?.message ?? e}); ` +
          `${e?.name === 'QuotaExceededError' ? 'the storage quota is full, ' : ''}the next load downloads it again`;
        console.warn(`ggweb: ${why}`);
        notes.push(why);
        out.cacheNote = note();
        return false;
      }
    },
  };
  return out;
}

// --- Model.inspect: the header only --------------------------------------------------------

/**
 * The first range an inspection asks for. A GPT-2 header is its tokenizer (about 1.7 MB for
 * the 50257-token vocabulary and its merges) plus the tensor infos, so 2 MiB takes one
 * request; a bigger header takes further ranges, each twice the last.
 */
export const INSPECT_FIRST_RANGE = 2 << 20;

/** The total length in a `Content-Range: bytes a-b/total` header, or null. */
function rangeTotal(res) {
  const m = /\/(\d+)\s*$/.exec(res.headers.get('Content-Range') ?? '');
  return m ? Number(m[1]) : null;
}

/**
 * Yields the reader's chunks; cancels it when the consumer stops early (the header is in).
 * With `stallMs` (a download), a read that brings nothing for that long fails 'timeout'.
 */
async function* readerChunks(reader, stallMs = Infinity, url = undefined) {
  let done = false;
  let got = 0;
  try {
    for (;;) {
      const r = await readWithin(reader, stallMs);
      if (r.stalled) {
        throw new GgwebError('timeout', `${url} stalled: no data for ${stallMs} ms after ${got} bytes; the server or the connection stopped sending`,
          { url, loaded: got, total: null });
      }
      if (r.done) {
        done = true;
        return;
      }
      got += r.value.length;
      yield r.value;
    }
  } finally {
    if (!done) reader.cancel().catch(() => {});
  }
}

/**
 * The start of a model source, chunk by chunk, for as long as the consumer reads. `stats`
 * gets `total` (when known) before the first chunk, and the requests made. A URL is read
 * with `Range` requests of growing size where the server allows them, else streamed (the
 * consumer's stop cancels the download); a Blob in growing slices.
 */
export async function* headerChunks(src, signal, stats, stallMs = Infinity) {
  if (src.kind === 'bytes') {
    stats.total = src.bytes.length;
    stats.via = 'bytes';
    yield src.bytes;
    return;
  }
  if (src.kind === 'blob') {
    stats.total = src.blob.size;
    stats.via = 'file';
    for (let off = 0, n = INSPECT_FIRST_RANGE; off < src.blob.size; off += n, n *= 2) {
      yield new Uint8Array(await src.blob.slice(off, off + n).arrayBuffer());
    }
    return;
  }
  if (src.kind === 'stream') {
    stats.total = src.total ?? null;
    stats.via = 'stream';
    yield* readerChunks(src.stream.getReader());
    return;
  }
  if (src.kind !== 'url') throw new GgwebError('invalid', `unknown model source kind ${show(src.kind)}`);
  const url = src.url;
  stats.via = 'download';
  let off = 0;
  for (let n = INSPECT_FIRST_RANGE; ; n *= 2) {
    const res = await fetchWithin(url, { signal, stallMs, headers: { Range: `bytes=${off}-${off + n - 1}` }, what: `inspecting ${url}` });
    stats.requests += 1;
    if (res.status === 416) return; // the file ended exactly at `off`
    if (!res.ok) throw httpError(res, src);
    if (!res.body) throw new GgwebError('network', `the response for ${url} has no body`, { url });
    if (res.status !== 206) {
      // No ranges here: the whole file comes; the consumer's stop cancels it after the header.
      stats.ranged = false;
      const enc = res.headers.get('Content-Encoding');
      const len = Number(res.headers.get('Content-Length'));
      stats.total = len > 0 && (!enc || enc === 'identity') ? len : null;
      let skip = off; // a server that stopped honouring ranges part-way sends from byte 0
      for await (const chunk of readerChunks(res.body.getReader(), stallMs, url)) {
        if (skip >= chunk.length) {
          skip -= chunk.length;
          continue;
        }
        yield skip ? chunk.subarray(skip) : chunk;
        skip = 0;
      }
      return;
    }
    stats.ranged = true;
    stats.total = rangeTotal(res) ?? stats.total ?? null;
    let got = 0;
    for await (const chunk of readerChunks(res.body.getReader(), stallMs, url)) {
      got += chunk.length;
      yield chunk;
    }
    off += got;
    if (got === 0 || (stats.total !== null && off >= stats.total)) return;
  }
}

/**
 * Feeds the start of `src` to a header reader until it says the GGUF header is in (its
 * `feed(chunk)` returns true), then stops reading: Model.inspect's WasmInspector, the
 * tokenizer entry's WasmTokenizerReader. `open(total)` makes the reader (total: the file's
 * length, or -1), once the length is known or the source proves empty. Returns the reader
 * (the caller's to consume or free), `stats` (how the source was read) and whether the
 * header completed; a failure frees the reader.
 */
export async function readHeader(src, { signal, stallMs = Infinity, what }, open) {
  const stats = { via: null, total: null, bytesRead: 0, requests: 0, ranged: null };
  let sink = null;
  let complete = false;
  try {
    for await (const chunk of headerChunks(src, signal, stats, stallMs)) {
      if (signal?.aborted) throw abortedError(what);
      sink ??= open(stats.total ?? -1);
      stats.bytesRead += chunk.length;
      if (sink.feed(chunk)) {
        complete = true;
        break;
      }
    }
    sink ??= open(stats.total ?? -1);
    return { sink, stats, complete };
  } catch (e) {
    sink?.free();
    throw e;
  }
}
