// The part of ggweb that talks to the wasm module. It runs inside the Web Worker
// (worker.js) or, with `Model.load(src, { worker: false })`, on the page's own thread;
// ggweb.js gives both the same API.
//
//   const engine = new Engine(null); // or the URL of a custom build's glue
//   const info = await engine.load({ kind: 'url', url }, { nCtx: 512 }, { onProgress, signal });
//   for await (const { token, text } of engine.generate('Hello', { maxTokens: 8 }, () => false)) ...
//
// Loading streams: each chunk a fetch (or File, or stream) delivers goes straight to
// WasmLoader.feed, so the whole file is never held in JS memory. Every wasm call is
// awaited, so the Rust side may later turn any of them async (WebGPU readbacks) freely.

import { MAX_THREADS, hasMemory64, hasRelaxedSimd, loadCore, memory64Option, planMemory64, planThreads, relaxedSimdOption, variantCoreUrl } from './builds.js';
import { GgwebError, abortedError, toGgwebError } from './errors.js';
import { boolOption, hookList, isPlainObject, modelInput, optionsObject, passOptions, plainData, reading, show, tokenIds, without } from './input.js';
import { checkpointName, writeCheckpoint } from './opfs.js';
import { DEFAULT_STALL_TIMEOUT_MS, collectChunks, formatBytes, openSource, readHeader, readWithin, stallTimeout } from './source.js';
import { METHODS } from './methods.js';
import { guardWasm } from './wasm-trap.js';

/**
 * `promise`, or `onLate`'s error when it has not settled within `ms`; a value that arrives
 * after that is handed to `dispose` (nobody else will see it).
 */
function settleWithin(promise, ms, onLate, dispose) {
  if (!Number.isFinite(ms)) return promise;
  let timer;
  let late = false;
  return Promise.race([
    promise.then((v) => {
      if (late) dispose(v);
      return v;
    }),
    new Promise((_, reject) => {
      timer = setTimeout(() => {
        late = true;
        reject(onLate());
      }, ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

const now = () => (typeof performance !== 'undefined' ? performance.now() : Date.now());

/** How long a long call runs between two yields to the event loop (Engine._checkpoint). */
export const CHECKPOINT_YIELD_MS = 15;

// A macrotask boundary: lets the worker see 'cancel' messages (and the page repaint)
// between tokens. One shared channel; setTimeout would be clamped to 4 ms when nested.
let yieldChannel = null;
const yieldWaiters = [];
export function yieldNow() {
  // Node: setImmediate is the macrotask boundary there, and a listening MessagePort would keep
  // the process alive after the caller is done.
  if (typeof setImmediate === 'function') return new Promise((r) => setImmediate(r));
  if (typeof MessageChannel === 'undefined') return new Promise((r) => setTimeout(r, 0));
  if (!yieldChannel) {
    yieldChannel = new MessageChannel();
    yieldChannel.port1.onmessage = () => yieldWaiters.shift()?.();
  }
  return new Promise((r) => {
    yieldWaiters.push(r);
    yieldChannel.port2.postMessage(0);
  });
}

/** Load options the wasm side reads (crate/common/options.rs LoadOptions). */
const LOADER_KEYS = ['nCtx', 'nBatch', 'backend', 'gpuLayers', 'nThreads', 'kvType'];

/**
 * WasmLoader's options as they cross, absent and null ones left out. Only what must be known
 * before crossing is checked here: that each is plain data (plainData: a finite number, a
 * string, ...), and nThreads, which picks the wasm build before the wasm side can read
 * anything. Their ranges and defaults are the Rust parser's (`load_options` resolves them; a
 * bad value is 'invalid', naming the option and the value).
 */
export function loaderOptions(opts = {}) {
  const out = {};
  for (const k of LOADER_KEYS) if (opts[k] !== undefined && opts[k] !== null) out[k] = plainData(opts[k], k);
  const n = out.nThreads;
  if (n !== undefined && !(Number.isInteger(n) && n >= 1 && n <= MAX_THREADS)) {
    throw new GgwebError('invalid', `nThreads must be an integer >= 1 and <= ${MAX_THREADS}, got ${show(n)}`);
  }
  return out;
}

/** How long load() waits for the pool's Web Workers to come up before it reports. */
const THREAD_START_MS = 5000;
/**
 * Kernel warm-up while the file streams (WasmLoader.warm_up, crate/bindings/warmup.rs): each
 * gap between chunks runs steps of it for at most `sliceMs`, so a download is delayed by no
 * more than that per chunk (the browser keeps receiving meanwhile); steps left when the
 * stream ends run then, while the warm-up's total stays under `tailMs`. Exported for the
 * tests and the bench (0 and 0: no warm-up); the results are the same either way.
 */
export const warmUp = { sliceMs: 6, tailMs: 60 };

/** Keys of generate's options that the JS side takes itself; the rest go to the wasm side. */
const GENERATE_JS_KEYS = ['special'];

/**
 * Sampling parameters as they cross to WasmModel.start (crate/common/options.rs
 * GenerateParams): plain data (plainData), hooks with typed arrays as arrays (hookList), and
 * logitBias's -Infinity written as the string "-Infinity" (the JSON data model the options
 * pass through has no infinities). Values, ranges, defaults and unknown keys are the wasm
 * side's strict parser's (code 'invalid', naming the key and the value).
 */
export function generateParams(opts = {}) {
  const src = optionsObject(opts, 'generate');
  // A null-prototype object: an own "__proto__" key stays a key (and the wasm side's strict
  // parser refuses it by name) instead of becoming the object's prototype.
  const out = without(src, [...GENERATE_JS_KEYS, 'logitBias', 'hooks']);
  for (const k of Object.keys(out)) out[k] = plainData(out[k], k);
  if (src.hooks !== undefined && src.hooks !== null) out.hooks = hookList(src.hooks, 'generate');
  if (src.logitBias !== undefined && src.logitBias !== null) {
    const bias = reading('logitBias', () => {
      if (!isPlainObject(src.logitBias)) {
        throw new GgwebError('invalid', `logitBias must be an object { [tokenId]: bias }, got ${show(src.logitBias)}`);
      }
      const bias = Object.create(null);
      for (const id of Object.keys(src.logitBias)) {
        const b = src.logitBias[id];
        if (b === -Infinity) bias[id] = '-Infinity';
        else if (typeof b === 'number' && Number.isFinite(b)) bias[id] = b;
        else throw new GgwebError('invalid', `logitBias[${id}] must be a finite number or -Infinity, got ${show(b)}`);
      }
      return bias;
    });
    Object.defineProperty(out, 'logitBias', { value: bias, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/**
 * Flow control: the tokens a generation may run ahead of its reader. The engine computes the
 * next token only while fewer than this many yielded ones are unread (not yet handed out by
 * the page's iterator), so a consumer that stops reading stops the model.
 */
export const GENERATE_AHEAD = 4;

/**
 * Training's flow control: an update is computed only once the reader has taken the one
 * before, so a `break` stops the run after the update in progress (driveGeneration's `ahead`).
 */
export const TRAIN_AHEAD = 1;

/**
 * train's data as it crosses to the wasm side: `{ texts }` (a string or an array of strings:
 * tokenized there, joined with end-of-text, cut into windows of seqLen) or `{ ids, n }` (n
 * token-id sequences of one length, concatenated). 'invalid' naming what is wrong.
 */
export function trainData(data) {
  if (typeof data === 'string') return { texts: [data] };
  // Already in this form (checked on the page, crossed to the worker).
  if (data !== null && typeof data === 'object' && !Array.isArray(data) &&
      ((Array.isArray(data.texts) && data.texts.every((t) => typeof t === 'string')) || (data.ids instanceof Uint32Array && Number.isInteger(data.n) && data.n > 0))) {
    return data;
  }
  if (!Array.isArray(data)) {
    throw new GgwebError('invalid', `train: data must be a string, an array of strings or an array of token-id arrays, got ${show(data)}`);
  }
  if (data.length === 0) throw new GgwebError('invalid', 'train: data is empty');
  if (data.every((d) => typeof d === 'string')) return { texts: [...data] };
  const seqs = data.map((d, i) => {
    if (typeof d === 'string') throw new GgwebError('invalid', `train: data[${i}] is a string among token-id arrays`);
    return tokenIds(d, `train: data[${i}]`);
  });
  const len = seqs[0].length;
  const odd = seqs.findIndex((q) => q.length !== len);
  if (odd >= 0) {
    throw new GgwebError('invalid', `train: data[${odd}] has ${seqs[odd].length} tokens and data[0] ${len}: each sequence must have exactly seqLen tokens`);
  }
  if (len === 0) throw new GgwebError('invalid', 'train: data[0] is empty: each sequence must have exactly seqLen tokens');
  const ids = new Uint32Array(len * seqs.length);
  seqs.forEach((q, i) => ids.set(q, i * len));
  return { ids, n: seqs.length };
}

/**
 * train's options for the wasm side (which refuses unknown keys by name and checks each
 * value, `lora`'s included): a plain-data copy without `signal`.
 */
export function trainParams(opts = {}) {
  const o = optionsObject(opts, 'train');
  return plainData(without(o, ['signal']), 'train: options');
}

/**
 * Runs engine.generate for a transport (worker-session.js, or ggweb.js on the page thread): sends
 * { type: 'token', data } per item and then { type: 'done', value: stats }, or throws.
 * Returns { done, cancel(), read(n) }: `read(n)` says the reader has taken n tokens; the run
 * waits while `ahead` sent ones are unread, until read, cancelled or disposed. With
 * `readerStallMs` (a shared worker's tabs), a reader that takes nothing for that long stops
 * the run: `done` then rejects with 'timeout', after the tokens already sent.
 */
export function driveGeneration(engine, prompt, opts, send, method = 'generate', ahead = GENERATE_AHEAD, readerStallMs = null) {
  const s = { cancelled: false, stalled: false, read: 0, wake: null };
  const wake = () => {
    const w = s.wake;
    s.wake = null;
    if (w) { engine.wakers.delete(w); w(); }
  };
  const done = (async () => {
    const it = engine[method](prompt, opts, () => s.cancelled);
    for (let sent = 0; ;) {
      const r = await it.next();
      if (r.done) {
        if (s.stalled) {
          throw new GgwebError('timeout', `${method}: stopped after ${sent} tokens: nobody read one for ${readerStallMs} ms ` +
            '(stallTimeoutMs), and other tabs share this model');
        }
        return send({ type: 'done', value: r.value });
      }
      send({ type: 'token', data: r.value });
      sent++;
      // engine.dispose() wakes this through engine.wakers; the generator then sees it and ends.
      while (sent - s.read >= ahead && !s.cancelled && !engine.disposed) {
        let timer = null;
        await new Promise((r) => {
          s.wake = r;
          engine.wakers.add(r);
          if (Number.isFinite(readerStallMs)) timer = setTimeout(() => { s.stalled = s.cancelled = true; wake(); }, readerStallMs);
        });
        clearTimeout(timer);
      }
    }
  })();
  return {
    done,
    cancel() { s.cancelled = true; wake(); },
    read(n) { s.read = Math.max(s.read, n); wake(); },
  };
}

/**
 * save / saveLora's `to` and `name` (`to: 'opfs'` writes a checkpoint into OPFS, which
 * `Model.load('opfs:name')` reads back), and the options the wasm side checks.
 */
function saveTarget(o, what) {
  const { to, name, ...rest } = o;
  if (to === undefined) {
    if (name !== undefined) throw new GgwebError('invalid', `${what}: name goes with to: 'opfs'`);
    return { to: null, name: null, rest };
  }
  if (to !== 'opfs') throw new GgwebError('invalid', `${what}: to must be 'opfs' (or absent: the bytes), got ${show(to)}`);
  return { to, name: checkpointName(name, `${what}: to: 'opfs'`), rest };
}

export class Engine {
  /** @param {string|null} coreUrl absolute URL of a custom build's wasm-bindgen glue, or null for the package's builds (builds.js) */
  constructor(coreUrl) {
    this.coreUrl = coreUrl;
    this.core = null;
    this.model = null;
    this.info = null;
    this.disposed = false;
    this.busy = null; // what is running: 'load' | 'generate' | 'logits'
    this.current = null; // { cancelled, done: Promise } of the running generation
    this.wakers = new Set(); // generations waiting for their reader (driveGeneration); dispose wakes them
    this.lost = null; // the 'device_lost' GgwebError, once the WebGPU device is gone
  }

  _check(what) {
    if (this.disposed) throw new GgwebError('disposed', `${what}: the model was disposed`);
    if (!this.model) throw new GgwebError('invalid', `${what}: no model is loaded`);
    // Weights and KV cache went with the device: every later call says so, in the same words.
    if (this.lost) throw new GgwebError('device_lost', `${what}: ${this.lost.message}`);
  }

  /** Remembers a device loss (from any call) so that every later call repeats it. */
  _noteLost(e) {
    if (e.code === 'device_lost' && !this.lost) this.lost = e;
    return e;
  }

  /** The module's CPU thread counters ({ workersRunning, jobs: [total, onWorkers] }), or null. */
  _cpuThreads() {
    return this.core ? this.core.cpu_threads() : null;
  }

  /** Threads running in the CPU pool (the caller and the started Web Workers). */
  _threadsRunning() {
    return 1 + (this._cpuThreads()?.workersRunning ?? 0);
  }

  /** Waits (awaiting, so the pool's Web Workers can start) until `n` threads run, or a timeout. */
  async _threadsUp(n, signal) {
    const t0 = now();
    while (this._threadsRunning() < n && now() - t0 < THREAD_START_MS && !signal?.aborted) {
      await new Promise((r) => setTimeout(r, 5));
    }
    return this._threadsRunning();
  }

  /**
   * Streams `src` into a WasmLoader and builds the model. Returns the model's info object.
   * onProgress({ loaded, total, phase }) — phase: 'download' | 'cache' | 'file' | 'stream' | 'build' | 'ready'.
   */
  async load(src, opts = {}, { signal, onProgress, cache, stallTimeoutMs, onStage } = {}) {
    if (this.disposed) throw new GgwebError('disposed', 'load: the engine was disposed');
    if (this.model || this.busy) throw new GgwebError('busy', 'load: this engine already holds a model; create another');
    const loaderOpts = loaderOptions(opts);
    const stallMs = stallTimeout(stallTimeoutMs);
    const t0 = now();
    // Where the load's time went (info().load.phases), for the bench and for users who ask.
    const phases = { wasmMs: 0, openMs: 0, readWaitMs: 0, feedMs: 0, chunks: 0, gcWaitMs: 0, buildMs: 0, threadsMs: 0 };
    this.busy = 'load';
    let source = null;
    let sourceP = null;
    let loader = null;
    let ok = false;
    const emit = (p) => { try { onProgress?.(p); } catch (e) { console.error('ggweb: onProgress threw', e); } };
    const onAbort = () => source?.reader.cancel().catch(() => {});
    signal?.addEventListener('abort', onAbort);
    try {
      if (signal?.aborted) throw abortedError('loading the model');
      const threads = planThreads(loaderOpts.nThreads);
      const relaxed = relaxedSimdOption(opts.relaxedSimd) && hasRelaxedSimd();
      // The request goes out now, while the wasm build is imported and the backend opened:
      // its first bytes (and the connection's latency) then overlap with that work.
      sourceP = openSource(src, { signal, cache, stallMs });
      sourceP.then((s) => { source = s; }, () => {});
      let build = 'pkg';
      // A sibling build: BUILDS' folder, or beside a custom `coreUrl` (null when none is known).
      const sibling = (folder) => (this.coreUrl ? variantCoreUrl(this.coreUrl, folder) : folder);
      const threadsUrl = sibling('pkg-threads');
      if (threads.threaded && !threadsUrl) {
        Object.assign(threads, { n: 1, threaded: false, reason: `no threaded build is known beside ${this.coreUrl} (it is not in a folder named pkg)` });
      }
      // The relaxed-SIMD twin of the chosen build when the browser has it; a missing twin
      // (a custom deployment without it) only costs the fused multiply-add.
      const tryRelaxed = async (folder) => {
        const url = relaxed ? sibling(`${folder}-relaxed`) : null;
        if (!url) return null;
        try {
          const core = await loadCore(url);
          build = `${folder}-relaxed`;
          return core;
        } catch (e) {
          console.warn(`ggweb: the relaxed-SIMD build ${folder}-relaxed could not be loaded (${e.message}); using ${folder}`);
          return null;
        }
      };
      let core = null;
      // The Memory64 build: decided by the file's size (the response's length), so the
      // request is awaited first where the browser has Memory64 and it is not refused.
      const m64Opt = memory64Option(opts.memory64);
      if (m64Opt !== false && hasMemory64()) source = await sourceP;
      const m64 = planMemory64(m64Opt, source?.total ?? null, loaderOpts.backend);
      const m64Url = m64.use ? sibling('pkg-m64') : null;
      if (m64.use && !m64Url) {
        if (m64Opt === true) throw new GgwebError('unsupported', `memory64: true, but no Memory64 build is known beside ${this.coreUrl} (it is not in a folder named pkg)`);
        Object.assign(m64, { use: false, reason: `no Memory64 build is known beside ${this.coreUrl}` });
      }
      if (m64.use) {
        // Its threaded twin where threads can run (as pkg-threads: a worker of a cross-origin
        // isolated page); without it (GGWEB_THREADS=0, a failed load) pkg-m64 runs one thread.
        let noTwin = null;
        if (threads.threaded) {
          try {
            core = await loadCore(sibling('pkg-m64-threads'));
            build = 'pkg-m64-threads';
          } catch (e) {
            noTwin = `the threaded Memory64 build could not be loaded (${e.message})`;
          }
        }
        if (!core) {
          try {
            core = await loadCore(m64Url);
            build = 'pkg-m64';
            if (noTwin) {
              Object.assign(threads, { n: 1, threaded: false, reason: noTwin });
              console.warn(`ggweb: ${noTwin}; using one thread`);
            }
          } catch (e) {
            if (m64Opt === true) throw e;
            Object.assign(m64, { use: false, reason: `the Memory64 build could not be loaded (${e.message})` });
            console.warn(`ggweb: ${m64.reason}; using the wasm32 builds`);
          }
        }
      }
      if (!core && threads.threaded) {
        core = await tryRelaxed('pkg-threads');
        if (!core) {
          try {
            core = await loadCore(threadsUrl);
            build = 'pkg-threads';
          } catch (e) {
            Object.assign(threads, { n: 1, threaded: false, reason: `the threaded wasm build could not be loaded (${e.message})` });
            console.warn(`ggweb: ${threads.reason}; using one thread`);
          }
        }
      }
      core ??= await tryRelaxed('pkg');
      this.core = core ?? await loadCore(this.coreUrl ?? 'pkg');
      phases.wasmMs = now() - t0;
      // Sent only when > 1: the single-thread build's options stay what they always were.
      if (threads.n > 1) loaderOpts.nThreads = threads.n;
      else delete loaderOpts.nThreads;
      if (typeof this.core.WasmLoader !== 'function' || typeof this.core.load_options !== 'function') {
        throw new GgwebError('unsupported', `the wasm module at ${this.coreUrl ?? build} has no WasmLoader (built before the model bindings existed?)`);
      }
      // The backend asked for, its default filled in by the Rust side (the one policy: crate/common/options.rs).
      let asked;
      try {
        asked = this.core.load_options(loaderOpts).backend;
      } catch (e) {
        // The Rust parser's message names the options ("WasmLoader options: nCtx ...").
        throw toGgwebError(e, 'invalid');
      }
      source = await sourceP;
      if (signal?.aborted) throw abortedError('loading the model');
      const tOpen = now();
      // Told to worker.js's parent (ggweb.js), which can watch a blocked worker (see OPEN_GUARD_MS).
      const stage = (s) => { try { onStage?.(s); } catch { /* only a watchdog */ } };
      stage({ stage: 'opening', backend: asked });
      try {
        // The async factory picks the backend (falling back from "auto" to the CPU, saying
        // why), opens the WebGPU device (the constructor cannot), and starts the CPU pool's
        // Web Workers. It gets the stall timeout too: a device request or a thread start the
        // browser never answers (seen in Firefox under load, docs/engines.md) then
        // fails the load with code 'timeout' instead of leaving it pending.
        loader = await settleWithin(guardWasm(this.core.WasmLoader.create(loaderOpts), `opening the ${asked} backend`), stallMs,
          () => new GgwebError('timeout', `opening the ${asked} backend: no answer from the browser within ${stallMs} ms`),
          (late) => late.free());
      } catch (e) {
        throw toGgwebError(e, 'invalid', e?.code === 'unsupported' ? 'opening the backend' : 'WasmLoader options');
      }
      phases.openMs = now() - tOpen;
      stage({ stage: 'opened' });
      const what = source.url ?? (source.name ? `file ${source.name}` : 'the model stream');
      let loaded = 0;
      let lastEmit = -Infinity;
      const totalNow = () => {
        if (source.total) return source.total;
        const t = Number(loader.total_expected());
        return t >= 0 ? t : null;
      };
      emit({ loaded: 0, total: source.total, phase: source.via });
      // The warm-up's bookkeeping, reported in info().load.warmUp.
      const warm = { done: false, ms: 0, slices: 0 };
      const warmFor = (ms) => {
        const t = now();
        let n = 0;
        while (!warm.done && now() - t < ms) {
          let state;
          try {
            state = loader.warm_up(); // 0: no header yet, 1: a step ran, 2: finished
          } catch (e) {
            // Only a trap gets here (warm_up reports its own errors and stops); loading goes on.
            console.warn('ggweb: kernel warm-up failed', e);
            state = 2;
          }
          warm.done = state === 2;
          if (state === 0) break;
          n++;
        }
        warm.ms += now() - t;
        if (n) warm.slices++;
      };
      // Only network downloads can stall; a caller's own stream may be as slow as it likes.
      const read = () => {
        const p = readWithin(source.reader, source.via === 'download' ? stallMs : Infinity);
        p.catch(() => {}); // awaited below; this only keeps an early rejection from being reported as unhandled
        return p;
      };
      // The stream's own chunks, let go before the model is built (source.js collectChunks).
      const chunks = collectChunks();
      let ahead = null;
      for (;;) {
        let r;
        try {
          const next = ahead ?? read();
          ahead = null;
          if (!warm.done && loaded > 0 && warmUp.sliceMs > 0) warmFor(warmUp.sliceMs);
          const tWait = now();
          r = await next;
          phases.readWaitMs += now() - tWait;
        } catch (e) {
          if (signal?.aborted) throw abortedError('loading the model');
          throw new GgwebError('network',
            `reading ${what} failed after ${formatBytes(loaded)}${source.total ? ` of ${formatBytes(source.total)}` : ''}: ${e.message}`,
            { loaded, total: source.total, url: source.url });
        }
        if (signal?.aborted) throw abortedError('loading the model');
        if (r.stalled) {
          // The finally below cancels the reader, which ends the request.
          throw new GgwebError('timeout',
            `${what} stalled: no data for ${stallMs} ms after ${formatBytes(loaded)} (${loaded} bytes)` +
            `${source.total ? ` of ${formatBytes(source.total)}` : ''}; the server or the connection stopped sending`,
            { loaded, total: source.total, url: source.url });
        }
        if (r.done) break;
        const chunk = r.value instanceof Uint8Array ? r.value : new Uint8Array(r.value);
        // The next read is asked for before this chunk goes into wasm, so the stream is
        // never idle while the loader copies (load time was 1.8-2.7x the page's raw fetch).
        ahead = read();
        const tFeed = now();
        try {
          await loader.feed(chunk);
        } catch (e) {
          throw toGgwebError(e, 'format', `${what} at byte ${loaded}`);
        }
        phases.feedMs += now() - tFeed;
        phases.chunks++;
        loaded += chunk.byteLength;
        const t = now();
        if (t - lastEmit >= 32) {
          lastEmit = t;
          emit({ loaded, total: totalNow(), phase: source.via });
        }
      }
      if (source.total && loaded < source.total) {
        throw new GgwebError('network', `${what} ended after ${formatBytes(loaded)} of ${formatBytes(source.total)}`,
          { loaded, total: source.total, url: source.url });
      }
      emit({ loaded, total: loaded, phase: source.via });
      if (!warm.done && warm.ms < warmUp.tailMs) warmFor(warmUp.tailMs - warm.ms);
      phases.gcWaitMs = (await chunks.settle()) ?? 0;
      if (signal?.aborted) throw abortedError('loading the model');
      emit({ loaded, total: loaded, phase: 'build' });
      const l = loader;
      loader = null; // finish() consumes it, whatever the outcome
      const tBuild = now();
      try {
        this.model = await guardWasm(l.finish(), `${what}: building the model`);
      } catch (e) {
        throw toGgwebError(e, 'format', what);
      }
      phases.buildMs = now() - tBuild;
      const info = this.model.info();
      ok = true;
      const cached = source.cacheDone ? await source.cacheDone(true) : false;
      // "auto" is resolved by WasmLoader.create: the backend it picked is info.backend.
      const backend = info.backend;
      // A CPU backend (and its thread pool) exists on 'cpu' and in a split with CPU layers.
      const cpuRuns = backend === 'cpu' || (info.split?.backends ?? []).includes('CPU');
      if (threads.n > 1 && cpuRuns) {
        const tThreads = now();
        threads.running = await this._threadsUp(threads.n, signal);
        phases.threadsMs = now() - tThreads;
        if (threads.running < threads.n) {
          threads.reason = `only ${threads.running} of ${threads.n} threads started within ${THREAD_START_MS} ms (the rest join when they start)`;
        }
      } else if (threads.n > 1) {
        // The loader made no CPU backend, so no pool either.
        Object.assign(threads, { n: 1, reason: `backend "${backend}" runs the model on the GPU` });
      }
      this.info = {
        ...info,
        backendNote: info.backendNote ?? null,
        threads: { n: threads.n, running: threads.running ?? 1, build, reason: threads.reason },
        memory64: m64.use,
        memory64Reason: m64.reason,
        load: {
          bytes: loaded, ms: Math.round(now() - t0), via: source.via, cached, cacheNote: source.cacheNote ?? null, backend,
          warmUp: { ms: Math.round(warm.ms), slices: warm.slices, done: warm.done },
          phases: Object.fromEntries(Object.entries({ ...phases, warmMs: warm.ms })
            .map(([k, v]) => [k, k === 'chunks' ? v : Math.round(v * 10) / 10])),
        },
      };
      emit({ loaded, total: loaded, phase: 'ready' });
      return this.info;
    } catch (e) {
      throw signal?.aborted ? abortedError('loading the model') : toGgwebError(e, 'internal', 'load');
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.busy = null;
      if (!ok) {
        // The source may still be opening (a failure before it was awaited): end it when it is.
        sourceP?.then((s) => {
          s.cacheDone?.(false).catch(() => {});
          s.reader.cancel().catch(() => {});
        }, () => {});
        try { loader?.free(); } catch { /* already consumed */ }
      }
    }
  }

  /**
   * Waits while the running generation is a cancelled one still finishing its step (a
   * `break` or abort a moment ago): the next call then finds the model free instead of
   * 'busy'. A live generation is not waited for: calls during it are 'busy'.
   */
  async _idle() {
    while (this.current?.poll()) await this.current.done;
  }

  /** Text → ids; like every call, refused ('busy') while a load, generation or pass runs. */
  async tokenize(text, special = false) {
    this._check('tokenize');
    if (typeof text !== 'string') throw new GgwebError('invalid', `tokenize: text must be a string, got ${show(text)}`);
    await this._idle();
    this._check('tokenize');
    if (this.busy) throw new GgwebError('busy', `tokenize: the model is busy (${this.busy})`);
    return this._tokenize(text, special);
  }

  /** tokenize for the engine's own calls, which hold the model already. */
  _tokenize(text, special) {
    try {
      return Uint32Array.from(this.model.tokenize(text, !!special));
    } catch (e) {
      throw toGgwebError(e, 'invalid', 'tokenize');
    }
  }

  /** Removes the model's LoRA adapter (a training run's, or Model.load's): later calls run
   *  the base weights. Resolves to whether there was one. */
  async dropLora() {
    this._check('dropLora');
    await this._idle();
    this._check('dropLora');
    if (this.busy) throw new GgwebError('busy', `dropLora: the model is busy (${this.busy})`);
    if (typeof this.model.drop_lora !== 'function') {
      throw new GgwebError('unsupported', 'dropLora: this wasm module was built before LoRA adapters existed');
    }
    return this.model.drop_lora();
  }

  /** The model's LoRA adapter as a llama.cpp LoRA GGUF: `opts` SaveLoraParams ({ type }). */
  async saveLora(opts) {
    this._check('saveLora');
    await this._idle();
    this._check('saveLora');
    if (this.busy) throw new GgwebError('busy', `saveLora: the model is busy (${this.busy})`);
    if (typeof this.model.save_lora !== 'function') {
      throw new GgwebError('unsupported', 'saveLora: this wasm module was built before LoRA adapters existed');
    }
    const { to, name, rest } = saveTarget(opts ?? {}, 'saveLora');
    return this._save('saveLora', to, name, rest);
  }

  /** Puts the adapter of a llama.cpp LoRA GGUF (`bytes`) on the model (Model.load's `lora`). */
  async loadLora(bytes) {
    this._check('Model.load: lora');
    await this._idle();
    if (this.busy) throw new GgwebError('busy', `Model.load: lora: the model is busy (${this.busy})`);
    if (typeof this.model.load_lora !== 'function') {
      throw new GgwebError('unsupported', 'Model.load: lora: this wasm module was built before LoRA adapters existed');
    }
    try {
      this.model.load_lora(bytes);
    } catch (e) {
      throw toGgwebError(e, 'format', '');
    }
  }

  async detokenize(ids) {
    this._check('detokenize');
    const a = tokenIds(ids, 'detokenize');
    await this._idle();
    this._check('detokenize');
    if (this.busy) throw new GgwebError('busy', `detokenize: the model is busy (${this.busy})`);
    try {
      return this.model.detokenize(a);
    } catch (e) {
      throw toGgwebError(e, 'invalid', 'detokenize');
    }
  }

  logits(ids) {
    try {
      this._check('logits');
    } catch (e) {
      return Promise.reject(e);
    }
    const model = this.model;
    const p = (async () => {
      const a = tokenIds(ids, 'logits');
      if (a.length === 0) throw new GgwebError('invalid', 'logits: needs at least one token id');
      await this._idle();
      this._check('logits');
      if (this.busy) throw new GgwebError('busy', `logits: the model is busy (${this.busy})`);
      const release = this._take('logits');
      try {
        const out = await guardWasm(model.logits(a), 'logits');
        return out instanceof Float32Array ? out : Float32Array.from(out);
      } catch (e) {
        throw this._noteLost(toGgwebError(e, 'invalid', 'logits'));
      } finally {
        release();
      }
    })();
    return p;
  }

  /**
   * `model.save`: the GGUF file of the model's current weights (after training, the trained
   * ones) as a Uint8Array. `opts` is SaveParams (`{ type: 'f32' | 'f16' | 'q8_0' }`), checked
   * on the wasm side (an unknown key or type is 'invalid'); 'busy' while anything else runs,
   * a training run included.
   */
  async save(opts = {}) {
    this._check('save');
    const o = plainData(optionsObject(opts, 'save'), 'save: options');
    await this._idle();
    this._check('save');
    if (this.busy) throw new GgwebError('busy', `save: the model is busy (${this.busy})`);
    if (typeof this.model.save !== 'function') {
      throw new GgwebError('unsupported', 'save: this wasm module was built before model.save existed');
    }
    const { to, name, rest } = saveTarget(o, 'save');
    return this._save('save', to, name, rest);
  }

  /**
   * save / saveLora after their checks: the bytes (gathered in wasm, WebGPU memory read back
   * awaited), or with `to: 'opfs'` the file written to OPFS a chunk at a time as wasm makes
   * it (WasmSaveStream: never whole in wasm or JS memory), the model busy until it is written.
   */
  async _save(what, to, name, rest) {
    const release = this._take(what);
    const fn = what === 'save' ? 'save' : 'save_lora';
    try {
      if (!to) return await guardWasm(this.model[fn](rest), what);
      let stream;
      if (typeof this.model[`${fn}_stream`] === 'function') {
        stream = this.model[`${fn}_stream`](rest);
      } else {
        stream = await guardWasm(this.model[fn](rest), what); // an older core: the bytes
      }
      return { to, name, bytes: await writeCheckpoint(name, stream, what, guardWasm) };
    } catch (e) {
      throw this._noteLost(toGgwebError(e, what === 'save' ? 'internal' : 'invalid', what));
    } finally {
      release();
    }
  }

  /**
   * Marks the model busy with `method` (logits, or a long call in wasm) until the returned
   * release(); `callDone` resolves then: dispose() and saeDispose() free what that call
   * uses only after it. (Set when the call takes the model, not when it is made: a call
   * refused as 'busy' meanwhile must not stand for the one running.)
   */
  _take(method) {
    this.busy = method;
    let release;
    this.callDone = new Promise((r) => { release = r; });
    return () => {
      this.busy = null;
      release();
    };
  }

  /** Token ids of a string or an id array (`what` names the call in errors). */
  _input(input, special, what) {
    if (typeof input === 'string') {
      const ids = this._tokenize(input, special);
      if (ids.length === 0) throw new GgwebError('invalid', `${what}: the input is empty (it has no tokens)`);
      return ids;
    }
    return tokenIds(input, what);
  }

  /**
   * The `checkpoint` a long wasm call (score, trace, run, patch, logitLens, attribute,
   * saeEncode) calls between its steps (patched cells, lens layers, score chunks, passes):
   * true stops the call (it rejects with code 'aborted'). It answers at once, except every
   * CHECKPOINT_YIELD_MS, when it first yields a macrotask (a MessageChannel round trip, not a
   * clamped setTimeout), so that an abort event on the page thread or a 'cancel' or
   * 'dispose' message in the worker can arrive. Stops: `stop()` true, or this engine disposed.
   */
  _checkpoint(stop) {
    let last = now();
    const stopped = () => this.disposed || !!stop();
    return () => {
      if (stopped()) return true;
      if (now() - last < CHECKPOINT_YIELD_MS) return false;
      return yieldNow().then(() => {
        last = now();
        return stopped();
      });
    };
  }

  /**
   * A long call of the method table (web/methods.js: score, trace, run, patch, logitLens,
   * attribute, saeEncode): WasmModel.call(method, the token ids of `inputs`, opts, checkpoint),
   * or callSae with `sae`'s WasmSae first (looked up when the call starts: one disposed
   * meanwhile is 'disposed', never a freed handle). `ctl.cancelled()` true stops it at its
   * next step (code 'aborted'; 'disposed' when the model or the SAE was disposed meanwhile).
   */
  _inspect(method, inputs, opts, ctl, sae = null) {
    const what = METHODS[method]?.public ?? method;
    try {
      this._check(what);
    } catch (e) {
      return Promise.reject(e);
    }
    const model = this.model;
    const cancelled = () => !!ctl?.cancelled?.();
    const p = (async () => {
      const { special, rest } = passOptions(opts, what);
      if (cancelled()) throw new GgwebError('aborted', `${what}: aborted`);
      await this._idle();
      this._check(what);
      if (this.busy) throw new GgwebError('busy', `${what}: the model is busy (${this.busy})`);
      const ids = inputs.map((input) => this._input(input, special, what));
      if (typeof model.call !== 'function' || !this.core.methods?.().some((m) => m.name === method)) {
        throw new GgwebError('unsupported', `${what}: this wasm module has no ${method}`);
      }
      if (this.busy) throw new GgwebError('busy', `${what}: the model is busy (${this.busy})`);
      const lead = sae === null ? [] : [this._sae(sae, what)];
      if (cancelled()) throw new GgwebError('aborted', `${what}: aborted`);
      const release = this._take(method);
      // An SAE disposed during the call is freed when it ends (saeDispose).
      this.saeInUse = sae;
      const gone = () => this.disposed || (sae !== null && !this.saes?.has(sae));
      try {
        const checkpoint = this._checkpoint(() => cancelled() || gone());
        return await guardWasm(sae === null ? model.call(method, ids, rest, checkpoint) : model.callSae(method, ...lead, ids, rest, checkpoint), what);
      } catch (e) {
        if (gone()) throw new GgwebError('disposed', `${what}: the ${this.disposed ? 'model' : 'SAE'} was disposed`);
        throw this._noteLost(toGgwebError(e, 'invalid', what));
      } finally {
        this.saeInUse = null;
        release();
      }
    })();
    return p;
  }

  /**
   * The method table's long calls (web/methods.js), as the transports call them: `(...inputs,
   * opts, ctl)`, or `(saeId, ...inputs, opts, ctl)` for a call on an SAE.
   */
  static {
    for (const [name, m] of Object.entries(METHODS)) {
      const n = m.inputs.length;
      const f = m.sae
        ? function (id, ...args) {
          try {
            this._sae(id, m.public);
          } catch (e) {
            return Promise.reject(e);
          }
          return this._inspect(name, args.slice(0, n), args[n] ?? {}, args[n + 1] ?? null, id);
        }
        : function (...args) {
          return this._inspect(name, args.slice(0, n), args[n] ?? {}, args[n + 1] ?? null);
        };
      Object.defineProperty(Engine.prototype, name, { value: f, writable: true, configurable: true });
    }
  }

  /** Checks and keeps an SAE (SAELens's cfg.json text and safetensors bytes): `{ id, dIn, dSae, hookName, applyBDecToInput }`. */
  loadSae(cfg, weights) {
    this._check('loadSae');
    let sae;
    try {
      sae = new this.core.WasmSae(cfg, weights);
    } catch (e) {
      throw toGgwebError(e, 'format', 'loadSae');
    }
    return this._keepSae(sae);
  }

  _keepSae(sae) {
    // An SAE made for another model size or hook is refused now, not at its first encode.
    try {
      this.model.checkSae(sae);
    } catch (e) {
      sae.free();
      throw toGgwebError(e, 'invalid', 'loadSae');
    }
    this.saes ??= new Map();
    const id = (this.saeIds = (this.saeIds ?? 0) + 1);
    this.saes.set(id, sae);
    return { id, ...sae.info() };
  }

  /**
   * Starts streaming an SAE (cfg.json's text, checked now); `saeFeed` each chunk of
   * sae_weights.safetensors, then `saeFinish` (→ loadSae's info) or `saeAbort`. Only the
   * chunk in hand crosses into wasm: the file is never held whole in JS memory.
   */
  saeOpen(cfg) {
    this._check('loadSae');
    let loader;
    try {
      loader = new this.core.WasmSaeLoader(cfg);
    } catch (e) {
      throw toGgwebError(e, 'format', 'loadSae');
    }
    this.saeLoads ??= new Map();
    const id = (this.saeIds = (this.saeIds ?? 0) + 1);
    this.saeLoads.set(id, loader);
    return id;
  }

  _saeLoad(id) {
    this._check('loadSae');
    const l = this.saeLoads?.get(id);
    if (!l) throw new GgwebError('invalid', `loadSae: no SAE stream ${id} (finished or aborted)`);
    return l;
  }

  saeFeed(id, chunk) {
    const l = this._saeLoad(id);
    try {
      l.feed(chunk);
    } catch (e) {
      this.saeAbort(id);
      throw toGgwebError(e, 'format', 'loadSae');
    }
  }

  saeFinish(id) {
    const l = this._saeLoad(id);
    this.saeLoads.delete(id); // finish() consumes it, whatever the outcome
    let sae;
    try {
      sae = l.finish();
    } catch (e) {
      throw toGgwebError(e, 'format', 'loadSae');
    }
    return this._keepSae(sae);
  }

  saeAbort(id) {
    const l = this.saeLoads?.get(id);
    this.saeLoads?.delete(id);
    try { l?.free(); } catch { /* consumed */ }
  }

  _sae(id, what) {
    const sae = this.saes?.get(id);
    if (!sae) throw new GgwebError('disposed', `${what}: the SAE was disposed`);
    return sae;
  }

  saeDecoderRow(id, i) {
    try {
      return this._sae(id, 'sae.decoderRow').decoderRow(i);
    } catch (e) {
      throw toGgwebError(e, 'invalid', 'sae.decoderRow');
    }
  }

  /** Forgets SAE `id`; frees it now, or when the call using it (an encode) has stopped. */
  saeDispose(id) {
    const sae = this.saes?.get(id);
    this.saes?.delete(id);
    const free = () => { try { sae?.free(); } catch { /* already freed */ } };
    if (sae && this.saeInUse === id) return this.callDone.then(free);
    free();
  }

  /**
   * Generates from `prompt` (a string or token ids): yields { token, text } (plus logprob
   * and top with topLogprobs) and returns stats. `isCancelled()` is
   * polled between prompt chunks and tokens; a cancelled run just ends (the caller decides
   * whether that is an error).
   */
  async *generate(prompt, opts = {}, isCancelled = () => false) {
    const input = modelInput(prompt, 'generate');
    const params = generateParams(opts);
    const special = boolOption(optionsObject(opts, 'generate').special, 'special', false);
    // A cancelled run may still be finishing its step; a new one waits for it. Several calls
    // may wait on the same run: each that was itself cancelled meanwhile leaves without
    // taking the model, so a later live call is not refused as 'busy' by a dead one.
    while (this.current?.poll()) {
      await this.current.done;
      if (isCancelled()) {
        return { promptTokens: 0, cachedTokens: 0, tokens: 0, promptMs: 0, genMs: 0, stop: 'cancelled' };
      }
    }
    this._check('generate');
    const model = this.model; // dispose() clears this.model but frees only after this run ends
    if (this.busy) throw new GgwebError('busy', `generate: the model is busy (${this.busy}); stop it first`);
    this.busy = 'generate';
    let finish;
    const run = { cancelled: false, done: new Promise((r) => (finish = r)) };
    const cancelled = () => run.cancelled || (run.cancelled = !!isCancelled() || this.disposed);
    run.poll = cancelled;
    this.current = run;
    const stats = { promptTokens: 0, cachedTokens: 0, tokens: 0, promptMs: 0, genMs: 0, stop: 'eos' };
    // This run's WebGPU counters (dispatches, submits, read-backs, encode time), on WebGPU only.
    const withWebgpu = () => {
      const { webgpu, beams } = model.stats();
      if (webgpu) stats.webgpu = webgpu;
      // After a beam search (numBeams): [{ tokens: Uint32Array, score }], best first.
      if (beams) stats.beams = beams;
      return stats;
    };
    const jobs0 = this._cpuThreads()?.jobs;
    try {
      const ids = typeof input === 'string' ? this._tokenize(input, special) : input;
      if (ids.length === 0) throw new GgwebError('invalid', 'generate: the prompt is empty (it has no tokens)');
      stats.promptTokens = ids.length;
      const t0 = now();
      try {
        // The prompt cache's reuse; older modules return nothing.
        stats.cachedTokens = Number(await model.start(ids, params)) || 0;
      } catch (e) {
        throw this._noteLost(toGgwebError(e, 'invalid', 'generate'));
      }
      for (;;) {
        if (cancelled()) { stats.stop = 'cancelled'; return withWebgpu(); }
        let promptDone;
        try {
          this._loseDeviceNow(run, model);
          promptDone = await guardWasm(model.prompt_step(), 'evaluating the prompt');
        } catch (e) {
          throw this._noteLost(toGgwebError(e, 'internal', 'evaluating the prompt'));
        }
        if (promptDone) break;
        await yieldNow();
      }
      const t1 = now();
      stats.promptMs = t1 - t0;
      for (;;) {
        await yieldNow();
        if (cancelled()) { stats.stop = 'cancelled'; break; }
        let item;
        try {
          this._loseDeviceNow(run, model);
          // { token, text } (logprob and top under topLogprobs, seq with n > 1), or undefined at the end.
          item = await guardWasm(model.next(), `generating token ${stats.tokens + 1}`);
        } catch (e) {
          throw this._noteLost(toGgwebError(e, 'internal', `generating token ${stats.tokens + 1}`));
        }
        if (item === undefined) {
          stats.stop = model.stats().stop;
          break;
        }
        stats.tokens++;
        yield item;
      }
      stats.genMs = now() - t1;
      const jobs1 = this._cpuThreads()?.jobs;
      // Matrix-product jobs split over the CPU threads in this run, and those the workers ran.
      if (jobs0 && jobs1) stats.cpuJobs = { split: jobs1[0] - jobs0[0], onWorkers: jobs1[1] - jobs0[1] };
      return withWebgpu();
    } finally {
      this.busy = null;
      run.cancelled = true; // a generator closed early (return()) counts as cancelled
      if (this.current === run) this.current = null;
      finish();
    }
  }

  /**
   * Trains the model's weights on `data` (trainData): yields `{ step, loss, tokens,
   * tokensPerSecond }` per update and returns `{ stop: 'steps' | 'cancelled', steps, tokens }`.
   * `isCancelled()` is polled between updates; a cancelled run ends after the update in
   * progress, the model keeping the weights of the last finished one. Every other call is
   * 'busy' meanwhile (this.busy = 'train', this.current = the run, as for generate).
   */
  async *train(data, opts = {}, isCancelled = () => false) {
    const d = trainData(data);
    const params = trainParams(opts);
    while (this.current?.poll()) {
      await this.current.done;
      if (isCancelled()) return { stop: 'cancelled', steps: 0, tokens: 0 };
    }
    this._check('train');
    const model = this.model; // dispose() frees it only after this run ends
    if (this.busy) throw new GgwebError('busy', `train: the model is busy (${this.busy}); stop it first`);
    if (typeof model.train_start !== 'function') {
      throw new GgwebError('unsupported', 'train: this wasm module was built before model.train existed');
    }
    this.busy = 'train';
    let finish;
    const run = { cancelled: false, done: new Promise((r) => (finish = r)) };
    const cancelled = () => run.cancelled || (run.cancelled = !!isCancelled() || this.disposed);
    run.poll = cancelled;
    this.current = run;
    let started = false;
    try {
      try {
        if (d.texts) model.train_start(new Uint32Array(0), 0, d.texts, params);
        else model.train_start(d.ids, d.n, undefined, params);
        started = true;
      } catch (e) {
        throw this._noteLost(toGgwebError(e, 'invalid', 'train'));
      }
      const t0 = now();
      for (let step = 1; ; step++) {
        await yieldNow();
        if (cancelled()) break;
        let item;
        try {
          item = await guardWasm(model.train_step(), `train: update ${step}`);
        } catch (e) {
          throw this._noteLost(toGgwebError(e, 'internal', `train: update ${step}`));
        }
        if (item === undefined) break;
        const secs = (now() - t0) / 1000;
        // This run's tokens (a run resumed from a checkpoint counts the checkpoint's in item.tokens).
        const ran = typeof model.train_run_tokens === 'function' ? model.train_run_tokens() : item.tokens;
        yield { ...item, tokensPerSecond: secs > 0 ? ran / secs : 0 };
      }
      started = false;
      return model.train_end(); // TrainStats: { stop, steps, tokens }
    } finally {
      if (started) {
        try { model.train_end(); } catch { /* the run's state goes with the model */ }
      }
      this.busy = null;
      run.cancelled = true; // a generator closed early (return()) counts as cancelled
      if (this.current === run) this.current = null;
      finish();
    }
  }

  /**
   * Debug: destroys the model's WebGPU device, as a driver reset would, to test recovery.
   * Works while a generation runs (its next step fails with 'device_lost').
   */
  _debugLoseDevice() {
    if (this.disposed) throw new GgwebError('disposed', '_debugLoseDevice: the model was disposed');
    if (!this.model) throw new GgwebError('invalid', '_debugLoseDevice: no model is loaded');
    // A wasm call in flight holds the model (wasm-bindgen refuses a second borrow): a
    // running generation destroys the device itself before its next step.
    if (this.current) {
      this.current.loseDevice = true;
      return true;
    }
    if (this.busy) throw new GgwebError('busy', `_debugLoseDevice: the model is busy (${this.busy})`);
    try {
      this.model._debugLoseDevice();
    } catch (e) {
      throw toGgwebError(e, 'internal', '_debugLoseDevice');
    }
    return true;
  }

  /** Applies a _debugLoseDevice() that arrived during generation `run`, between two steps. */
  _loseDeviceNow(run, model) {
    if (!run.loseDevice) return;
    run.loseDevice = false;
    model._debugLoseDevice();
  }

  cancelGeneration() {
    if (this.current) this.current.cancelled = true;
  }

  /** Frees the model: now, or when the step running ends. Returns when it was freed. */
  dispose() {
    if (this.disposed) return this.freed;
    this.disposed = true;
    this.cancelGeneration();
    for (const w of this.wakers) w();
    this.wakers.clear();
    for (const id of [...(this.saes?.keys() ?? [])]) this.saeDispose(id);
    for (const id of [...(this.saeLoads?.keys() ?? [])]) this.saeAbort(id);
    const m = this.model;
    this.model = null;
    // Free now unless a generation is mid-step; then free when it ends.
    const free = () => { try { m?.free(); } catch { /* consumed */ } };
    if (this.current) this.freed = this.current.done.then(free);
    // logits or a long call (score ... saeEncode) in wasm: it stops at its next checkpoint.
    else if (this.busy && this.busy !== 'load') this.freed = this.callDone.then(free);
    else this.freed = Promise.resolve(free());
    return this.freed;
  }

}

// --- Model.inspect: the header only --------------------------------------------------------

/**
 * Reads `src` (a describeSource descriptor) until its GGUF header is in, then stops, and
 * returns WasmInspector's report (ggweb.d.ts InspectResult) plus `source`: how it was read.
 * Runs the single-thread build on the calling thread: no worker, no thread pool.
 * `opts`: Model.load's model options (backend, gpuLayers, nCtx, nBatch, nThreads, kvType).
 */
export async function inspectSource(src, opts, { signal, coreUrl = null, stallMs = DEFAULT_STALL_TIMEOUT_MS } = {}) {
  const lopts = loaderOptions(opts);
  const m64Opt = memory64Option(opts.memory64);
  const inspect = async (build) => {
    const core = await loadCore(build);
    if (typeof core.WasmInspector !== 'function') {
      throw new GgwebError('unsupported', `the wasm module at ${build} has no WasmInspector (built before Model.inspect existed?)`);
    }
    // Options are checked before anything is read (code 'invalid').
    new core.WasmInspector(lopts, -1).free();
    const { sink: ins, stats, complete } = await readHeader(src, { signal, stallMs, what: 'Model.inspect' }, (total) => new core.WasmInspector(lopts, total));
    const report = await guardWasm(ins.plan(), 'Model.inspect'); // consumes the inspector; an incomplete header is 'format'
    report.source = { via: stats.via, bytesRead: stats.bytesRead, size: stats.total, requests: stats.requests, ranged: stats.ranged, complete };
    return report;
  };
  const report = await inspect(coreUrl ?? 'pkg');
  // A file a load would put on the Memory64 build is planned against that build's limit
  // (its `fits`): the header is read once more, by that build's inspector.
  const m64 = planMemory64(m64Opt, report.source.size, lopts.backend);
  const m64Url = m64.use ? (coreUrl ? variantCoreUrl(coreUrl, 'pkg-m64') : 'pkg-m64') : null;
  if (m64Url && src.kind !== 'stream') {
    const r = await inspect(m64Url);
    r.source.requests += report.source.requests;
    r.source.bytesRead += report.source.bytesRead;
    return { ...r, memory64: true };
  }
  return { ...report, memory64: false };
}
