// ggweb: GPT-2 in the browser. The public JS API.
//
//   import { Model } from './ggweb.js';
//   const model = await Model.load('https://…/gpt2.Q8_0.gguf', {
//     nCtx: 512, onProgress: ({ loaded, total, phase }) => console.log(phase, loaded, total),
//   });
//   for await (const { text } of model.generate('Hello, my name is', { maxTokens: 32 })) out.textContent += text;
//   await model.dispose();
//
// By default the model lives in a Web Worker (worker.js), so the page stays responsive;
// `{ worker: false }` runs the same code on the calling thread (tests, environments
// without module workers). Both give the same API and the same errors (GgwebError).
import { Engine, TRAIN_AHEAD, driveGeneration, generateParams, inspectSource, loaderOptions, trainData, trainParams } from './engine.js';
import { ERROR_CODES, GgwebError, abortedError, toGgwebError } from './errors.js';
import { memory64Option, relaxedSimdOption } from './builds.js';
import { baseUrl, describeSource, fetchWithin, formatBytes, readWithin, stallTimeout } from './source.js';
import { DEFAULT_CACHE_NAME, askPersist, modelCache } from './cache.js';
import { OPFS_PREFIX, checkpointFile, checkpointName } from './opfs.js';
import { hubSource } from './hub.js';
import { METHODS } from './methods.js';
import { boolOption, checkSignal, modelInput, optionsObject, passOptions, plainData, show, tokenIds, without } from './input.js';

export { GgwebError, ERROR_CODES, formatBytes };

/**
 * Starts the module worker. The URL is written out in the `new Worker(…)` call itself: that
 * literal form is what Vite and webpack recognize, so they bundle worker.js (with engine.js
 * and the wasm builds it imports) and emit it; a URL kept in a variable they would not follow.
 */
function startWorker() {
  return new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'ggweb' });
}

/** Connects to the shared worker named `name` (started by the first tab to ask), literally as startWorker. */
function startSharedWorker(name) {
  return new SharedWorker(new URL('./shared-worker.js', import.meta.url), { type: 'module', name });
}

/**
 * How long the worker may take to open a CPU backend (WasmLoader.create: a few ms, the thread
 * pool's Web Workers started) before the page ends it. In Firefox a worker's `new Worker()`
 * for the pool now and then never returns (about 1 threaded load in 15 under load here,
 * docs/engines.md): the worker is then blocked, so its own timers cannot fire, and
 * only its parent can notice. Model.load then runs the load once more in a new worker.
 */
const OPEN_GUARD_MS = 5000;

/** Runs the Engine on this thread. */
class LocalTransport {
  constructor(coreUrl) {
    this.engine = new Engine(coreUrl);
  }
  load(src, opts, ctl) {
    return this.engine.load(src, opts, ctl);
  }
  /** `signal` (a long call's, checked): aborting it stops the call at its next step ('aborted'). */
  async call(method, args, transfer, { signal } = {}) {
    if (!signal) return this.engine[method](...args);
    if (signal.aborted) throw new GgwebError('aborted', `${PUBLIC_NAME[method] ?? method}: aborted`);
    return this.engine[method](...args, { cancelled: () => signal.aborted });
  }
  generate(prompt, opts, push) {
    const run = driveGeneration(this.engine, prompt, opts, push);
    run.done.catch((e) => push({ type: 'error', error: toGgwebError(e, 'internal') }));
    return { cancel: () => run.cancel(), read: (n) => run.read(n) };
  }
  train(data, opts, push) {
    const run = driveGeneration(this.engine, data, opts, push, 'train', TRAIN_AHEAD);
    run.done.catch((e) => push({ type: 'error', error: toGgwebError(e, 'internal') }));
    return { cancel: () => run.cancel(), read: (n) => run.read(n) };
  }
  async dispose() {
    this.engine.dispose();
  }
}

/** Runs the Engine in a dedicated module worker and talks to it by messages. */
class WorkerTransport {
  constructor(coreUrl) {
    this.coreUrl = coreUrl;
    this.pending = new Map(); // id → { resolve, reject, onEvent }
    this.nextId = 1;
    this.dead = null; // the GgwebError every later call fails with
    this._open();
  }

  _open() {
    try {
      this.worker = startWorker();
    } catch (e) {
      throw new GgwebError('worker', `could not start the ggweb worker (worker.js): ${e.message}; try { worker: false }`);
    }
    this.worker.onmessage = (ev) => this._onMessage(ev.data);
    this.worker.onerror = (ev) => {
      ev.preventDefault?.();
      const what = ev.message ? `: ${ev.message}` : ' (could not run worker.js: is it served, as text/javascript?)';
      this._kill(new GgwebError('worker', `the ggweb worker failed${what}`));
    };
    this.worker.onmessageerror = () => this._kill(new GgwebError('worker', 'a message from the ggweb worker could not be read'));
  }

  _post(msg, transfer) {
    this.worker.postMessage(msg, transfer ?? []);
  }

  _end() {
    this.worker.terminate();
  }

  _onMessage(m) {
    const p = this.pending.get(m.id);
    if (!p) return;
    if (m.type === 'result') {
      this.pending.delete(m.id);
      p.resolve(m.value);
    } else if (m.type === 'error') {
      this.pending.delete(m.id);
      const err = GgwebError.fromJSON(m.error);
      if (p.onEvent) p.onEvent({ type: 'error', error: err });
      else p.reject(err);
    } else {
      if (m.type === 'done') this.pending.delete(m.id);
      p.onEvent?.(m);
    }
  }

  _kill(err) {
    if (this.dead) return;
    this.dead = err;
    this._end();
    for (const [, p] of this.pending) {
      if (p.onEvent) p.onEvent({ type: 'error', error: err });
      else p.reject(err);
    }
    this.pending.clear();
  }

  _send(msg, transfer, onEvent) {
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onEvent });
      try {
        this._post({ ...msg, id }, transfer);
      } catch (e) {
        this.pending.delete(id);
        reject(e.name === 'DataCloneError'
          ? new GgwebError('unsupported', `this browser cannot pass that source to a worker (${e.message}); pass a URL or File, or use { worker: false }`)
          : toGgwebError(e, 'worker', 'posting to the worker'));
      }
    });
  }

  load(src, opts, { signal, onProgress, cache, stallTimeoutMs, transfer }) {
    let guard = null;
    const unguard = () => { clearTimeout(guard); guard = null; };
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        // The worker holds nothing else: ending it is the surest way to free a half-built model.
        this._kill(abortedError('loading the model'));
        reject(abortedError('loading the model'));
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      const onEvent = (m) => {
        if (m.type === 'progress') {
          try { onProgress?.(m.data); } catch (e) { console.error('ggweb: onProgress threw', e); }
        } else if (m.type === 'stage') {
          unguard();
          if (m.data?.stage === 'opening' && m.data.backend === 'cpu') {
            guard = setTimeout(() => {
              const e = new GgwebError('timeout', `opening the cpu backend: the ggweb worker did not answer within ${OPEN_GUARD_MS} ms ` +
                '(blocked starting the CPU thread pool\'s Web Workers)');
              this._kill(Object.assign(e, { restartable: true }));
            }, OPEN_GUARD_MS);
          }
        } else if (m.type === 'error') {
          signal?.removeEventListener('abort', onAbort);
          reject(m.error);
        }
      };
      // The result resolves _send's promise; errors and progress arrive through onEvent.
      this._send({ type: 'load', src, opts, cache, stallTimeoutMs, coreUrl: this.coreUrl, lock: this.lock }, transfer, onEvent)
        .then(resolve, reject)
        .finally(() => signal?.removeEventListener('abort', onAbort));
    }).finally(unguard);
  }

  /**
   * `signal` (a long call's, checked): when it aborts, the worker is told ('cancel' for this
   * call's id) and stops the call at its next step, which then fails with 'aborted'.
   */
  call(method, args, transfer, { signal } = {}) {
    if (!signal) return this._send({ type: 'call', method, args }, transfer);
    if (signal.aborted) return Promise.reject(new GgwebError('aborted', `${PUBLIC_NAME[method] ?? method}: aborted`));
    const id = this.nextId; // the id _send gives this call
    const onAbort = () => { if (!this.dead) this._post({ type: 'cancel', id }); };
    signal.addEventListener('abort', onAbort, { once: true });
    return this._send({ type: 'call', method, args }, transfer).finally(() => signal.removeEventListener('abort', onAbort));
  }

  generate(prompt, opts, push) {
    const id = this.nextId;
    this._send({ type: 'generate', prompt, opts }, [], push).catch((e) => push({ type: 'error', error: e }));
    return {
      cancel: () => { if (!this.dead) this._post({ type: 'cancel', id }); },
      read: (n) => { if (!this.dead) this._post({ type: 'read', id, n }); },
    };
  }

  train(data, opts, push) {
    const id = this.nextId;
    this._send({ type: 'train', data, opts }, [], push).catch((e) => push({ type: 'error', error: e }));
    return {
      cancel: () => { if (!this.dead) this._post({ type: 'cancel', id }); },
      read: (n) => { if (!this.dead) this._post({ type: 'read', id, n }); },
    };
  }

  async dispose() {
    if (this.dead) return;
    const bye = this._send({ type: 'dispose' }).catch(() => {});
    await Promise.race([bye, new Promise((r) => setTimeout(r, 1000))]);
    this._kill(new GgwebError('disposed', 'the model was disposed'));
  }
}

/**
 * A model shared by this origin's tabs (`shared: true`): the Engine lives in shared-worker.js,
 * named by `key` (the source URL and the model options), and this tab talks to it over its
 * port, as WorkerTransport does to a dedicated worker. The tab holds a Web Lock while it
 * lives; the shared worker waits for that lock, so it learns when the tab is gone (closed,
 * crashed or disposed: the browser releases the lock in every case).
 */
class SharedTransport extends WorkerTransport {
  constructor(coreUrl, key) {
    super(coreUrl);
    this.key = key;
    this.lock = null; // the lock's name, sent with 'load'
    this.unlock = null;
  }

  _open() {
    // The port opens in load(): WorkerTransport's constructor calls this before `key` is set.
  }

  _connect() {
    if (typeof SharedWorker === 'undefined') {
      throw new GgwebError('worker', 'shared: true needs SharedWorker, which this browser does not have here; load without shared');
    }
    if (!globalThis.navigator?.locks) {
      throw new GgwebError('worker', 'shared: true needs Web Locks (navigator.locks) to tell the shared worker when this tab closes; load without shared');
    }
    try {
      this.worker = startSharedWorker(`ggweb ${this.key}`);
    } catch (e) {
      throw new GgwebError('worker', `could not start the ggweb shared worker (shared-worker.js): ${e.message}; load without shared`);
    }
    this.port = this.worker.port;
    this.port.onmessage = (ev) => this._onMessage(ev.data);
    this.port.onmessageerror = () => this._kill(new GgwebError('worker', 'a message from the ggweb shared worker could not be read'));
    this.worker.onerror = (ev) => {
      ev.preventDefault?.();
      const what = ev.message ? `: ${ev.message}` : ' (could not run shared-worker.js: is it served, as text/javascript?)';
      this._kill(new GgwebError('worker', `the ggweb shared worker failed${what}`));
    };
  }

  async load(src, opts, ctl) {
    this._connect();
    const id = typeof crypto !== 'undefined' && crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
    this.lock = `ggweb-tab-${id}`;
    await new Promise((held, failed) => {
      navigator.locks.request(this.lock, () => {
        held();
        return new Promise((r) => { this.unlock = r; });
      }).catch(failed);
    });
    return super.load(src, opts, ctl);
  }

  _post(msg, transfer) {
    this.port.postMessage(msg, transfer ?? []);
  }

  /** Leaves the shared worker: this tab's handle only (the worker ends with the last one). */
  _end() {
    this.port?.close();
    this.unlock?.();
  }

  async dispose() {
    if (!this.port) return this._kill(new GgwebError('disposed', 'the model was disposed'));
    return super.dispose();
  }
}

/**
 * An async iterator over pushed events, ending on 'done', failing on 'error' or abort.
 * `start(push)` begins the run and returns its controls `{ cancel(), read(n) }`; if it throws
 * (a bad argument), the first next() rejects with that error. Every token handed to the
 * reader is reported with read(n) (flow control: the run waits while GENERATE_AHEAD are
 * unread). `stats` resolves with the run's own stats once it has ended, also after a
 * `break`, return() or abort (stop 'cancelled'); null when it failed or never started.
 */
function tokenStream(start, signal, { what = 'generate', abortEnds = false } = {}) {
  const queue = [];
  let waiter = null;
  let finished = false;
  let failure = null;
  let resolveStats;
  const stats = new Promise((r) => (resolveStats = r));
  let ctl = { cancel() {}, read() {} };
  let handedOut = 0;

  // The next queued token, counted as read.
  const take = () => {
    ctl.read(++handedOut);
    return { value: queue.shift(), done: false };
  };
  const wake = () => {
    if (!waiter) return;
    const w = waiter;
    waiter = null;
    if (queue.length) w.resolve(take());
    else if (failure) w.reject(failure);
    else if (finished) w.resolve({ value: undefined, done: true });
    else waiter = w;
  };
  const push = (m) => {
    // The run's outcome settles stats even after the reader left (break, return(), abort).
    if (m.type === 'done') resolveStats(m.value);
    else if (m.type === 'error') resolveStats(null);
    if (finished || failure) return;
    if (m.type === 'token') queue.push(m.data);
    else if (m.type === 'done') {
      finished = true;
      if (m.value?.stop === 'cancelled' && signal?.aborted && !abortEnds) failure = abortedError('generation');
    } else if (m.type === 'error') {
      failure = m.error;
    }
    wake();
  };
  const onAbort = () => {
    ctl.cancel();
    // A training run's loop ends after the update in progress (its stats say 'cancelled').
    if (finished || abortEnds) return;
    failure = abortedError('generation');
    queue.length = 0;
    wake();
  };

  if (signal?.aborted && abortEnds) {
    finished = true;
    resolveStats({ stop: 'cancelled', steps: 0, tokens: 0 });
  } else if (signal?.aborted) {
    failure = abortedError('generation');
    resolveStats(null);
  } else {
    try {
      ctl = start(push);
      signal?.addEventListener('abort', onAbort, { once: true });
    } catch (e) {
      failure = toGgwebError(e, 'invalid', what);
      resolveStats(null);
    }
  }
  const cleanup = () => signal?.removeEventListener('abort', onAbort);
  stats.then(cleanup);

  const it = {
    stats,
    next() {
      if (queue.length) return Promise.resolve(take());
      if (failure) {
        const f = failure;
        failure = null;
        finished = true;
        return Promise.reject(f);
      }
      if (finished) return Promise.resolve({ value: undefined, done: true });
      // One reader at a time: a next() called while another waits queues behind it.
      if (waiter) {
        const ahead = waiter;
        return new Promise((resolve, reject) => {
          waiter = {
            resolve: (v) => { ahead.resolve(v); it.next().then(resolve, reject); },
            reject: (e) => { ahead.reject(e); it.next().then(resolve, reject); },
          };
        });
      }
      return new Promise((resolve, reject) => { waiter = { resolve, reject }; });
    },
    return(value) {
      if (!finished) {
        // The run ends at its next step and then settles stats (stop 'cancelled').
        ctl.cancel();
        finished = true;
        queue.length = 0;
      }
      // A next() still pending (asked for before return()) ends with the iterator, as
      // for a generator: it would otherwise wait for a token that will never be pushed.
      failure = null;
      wake();
      return Promise.resolve({ value, done: true });
    },
    throw(e) {
      it.return();
      return Promise.reject(e);
    },
    /**
     * The items as a ReadableStream (pulled one at a time, so flow control still holds);
     * cancelling the stream cancels the generation, an error errors it.
     */
    toReadableStream() {
      return new ReadableStream({
        async pull(c) {
          try {
            const r = await it.next();
            if (r.done) c.close();
            else c.enqueue(r.value);
          } catch (e) {
            c.error(e);
          }
        },
        async cancel() {
          await it.return();
        },
      }, { highWaterMark: 0 });
    },
    [Symbol.asyncIterator]() {
      return it;
    },
  };
  return it;
}

/** Every key Model.load reads; any other is refused (a misspelt option would be ignored silently). */
const LOAD_KEYS = [
  'backend', 'gpuLayers', 'nCtx', 'nBatch', 'nThreads', 'kvType', 'relaxedSimd', 'memory64', 'onProgress', 'signal', 'cache',
  'stallTimeoutMs', 'worker', 'coreUrl', 'offline', 'persist', 'file', 'revision', 'hubUrl', 'lora', 'shared',
];

/** Every key Model.inspect reads: the options that decide the memory plan, a signal, the stall limit, coreUrl. */
const INSPECT_KEYS = ['backend', 'gpuLayers', 'nCtx', 'nBatch', 'nThreads', 'kvType', 'memory64', 'signal', 'stallTimeoutMs', 'coreUrl', 'file', 'revision', 'hubUrl'];

/** Model.load's `lora`: `{ url }` (absolute), `{ opfs: name }` (a checkpoint) or `{ bytes }` (a copy), null when absent. */
function loraSource(lora) {
  if (lora === undefined || lora === null) return null;
  if (typeof lora === 'string' && lora.startsWith(OPFS_PREFIX)) {
    return { opfs: checkpointName(lora.slice(OPFS_PREFIX.length), `Model.load: lora ${show(lora)}`) };
  }
  if (typeof lora === 'string' || lora instanceof URL) {
    try {
      return { url: new URL(String(lora), baseUrl()).href };
    } catch {
      throw new GgwebError('invalid', `Model.load: lora: not a valid URL: ${JSON.stringify(String(lora))}`);
    }
  }
  const view = lora instanceof ArrayBuffer ? new Uint8Array(lora)
    : ArrayBuffer.isView(lora) ? new Uint8Array(lora.buffer, lora.byteOffset, lora.byteLength) : null;
  if (!view) throw new GgwebError('invalid', `Model.load: lora must be a URL or the adapter's bytes (ArrayBuffer, Uint8Array), got ${show(lora)}`);
  if ((view.buffer).detached) throw new GgwebError('invalid', 'Model.load: lora: the ArrayBuffer is detached (transferred elsewhere)');
  return { bytes: view.slice() };
}

/** A custom build's glue URL (`coreUrl`), absolute; null for the package's own builds. */
function coreUrlOption(coreUrl) {
  if (coreUrl === undefined || coreUrl === null) return null;
  if (typeof coreUrl !== 'string' && !(coreUrl instanceof URL)) throw new GgwebError('invalid', `coreUrl must be a URL string, got ${show(coreUrl)}`);
  try {
    return new URL(coreUrl, baseUrl()).href;
  } catch {
    throw new GgwebError('invalid', `coreUrl: not a valid URL: ${show(String(coreUrl))}`);
  }
}

/** The `cache` option: false, true (the cache 'ggweb-models'), 'opfs' (the Origin Private File System) or a Cache API name. */
function cacheOption(v) {
  if (v === undefined || v === null) return false;
  if (typeof v === 'boolean' || (typeof v === 'string' && v.length > 0)) return v;
  throw new GgwebError('invalid', `cache must be true, false, 'opfs' or a cache name, got ${show(v)}`);
}

/** The public names of the methods whose wasm-side name differs, for error messages. */
const PUBLIC_NAME = {
  ...Object.fromEntries(Object.entries(METHODS).map(([name, m]) => [name, m.public])),
  saeDecoderRow: 'sae.decoderRow', saeDispose: 'sae.dispose',
};

/**
 * A long call's options (score, trace, run, patch, logitLens, attribute, sae.encode): `signal`
 * taken out and checked (it cannot cross to the worker, and the wasm side's parser refuses
 * keys it does not know), the rest checked here (passOptions) and sent as given, special and
 * all. An already aborted signal fails the call now, before anything is read or run.
 */
function callOptions(options, what) {
  const o = optionsObject(options, what);
  const signal = checkSignal(o.signal);
  const { special, rest } = passOptions(without(o, ['signal']), what);
  if (signal?.aborted) throw new GgwebError('aborted', `${what}: aborted`);
  return { opts: { ...rest, special }, ctl: { signal } };
}

/**
 * Reads response `r`'s body chunk by chunk into `onChunk` (awaited before the next read):
 * a body that sends nothing for `stallMs` is 'timeout', one that fails 'network', the
 * signal 'aborted'. The reader is cancelled when anything fails.
 */
async function readBody(r, { signal, stallMs }, onChunk) {
  const url = r.url;
  const reader = r.body ? r.body.getReader() : null;
  let loaded = 0;
  let ok = false;
  try {
    while (reader) {
      let x;
      try {
        x = await readWithin(reader, stallMs);
      } catch (e) {
        if (signal?.aborted) throw abortedError('loadSae');
        throw new GgwebError('network', `loadSae: reading ${url} failed after ${formatBytes(loaded)}: ${e.message}`, { url, loaded });
      }
      if (signal?.aborted) throw abortedError('loadSae');
      if (x.stalled) {
        throw new GgwebError('timeout', `loadSae: ${url} stalled: no data for ${stallMs} ms after ${formatBytes(loaded)}`, { url, loaded });
      }
      if (x.done) break;
      const chunk = x.value instanceof Uint8Array ? x.value : new Uint8Array(x.value);
      loaded += chunk.byteLength;
      await onChunk(chunk);
    }
    ok = true;
  } finally {
    if (!ok) reader?.cancel().catch(() => {});
  }
}

/**
 * loadSae's folder URL (a string ending in '/'), resolved against the page: http(s) only, the
 * scheme its files can be fetched by name from (a `javascript:`, `data:` or `blob:` URL has no
 * folder: `new URL('cfg.json', it)` fails). 'invalid' otherwise.
 */
function saeFolder(source) {
  if (!source.endsWith('/')) throw new GgwebError('invalid', `loadSae: a folder URL must end in '/', got ${show(source)}`);
  let url;
  try {
    url = new URL(source, baseUrl());
  } catch {
    throw new GgwebError('invalid', `loadSae: not a valid folder URL: ${show(source)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new GgwebError('invalid', `loadSae: the folder URL must be http(s), got ${show(source)}`);
  }
  return url.href;
}

// Brand checks that ask no Proxy trap and that a changed prototype cannot fool.
const arrayBufferLength = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'byteLength').get;
const arrayBufferDetached = Object.getOwnPropertyDescriptor(ArrayBuffer.prototype, 'detached')?.get;
const typedArrayTag = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(Uint8Array.prototype), Symbol.toStringTag).get;
const isArrayBuffer = (v) => { try { arrayBufferLength.call(v); return true; } catch { return false; } };
const isDetached = (buf) => { try { return !!arrayBufferDetached?.call(buf); } catch { return false; } };

/** loadSae's `weights`: an ArrayBuffer or a Uint8Array, not detached, as a Uint8Array. */
function saeWeights(w) {
  if (isArrayBuffer(w)) {
    if (isDetached(w)) throw new GgwebError('invalid', 'loadSae: weights is a detached ArrayBuffer (transferred elsewhere)');
    return new Uint8Array(w);
  }
  if (typedArrayTag.call(w) === 'Uint8Array') {
    if (isDetached(w.buffer)) throw new GgwebError('invalid', 'loadSae: weights is a Uint8Array over a detached ArrayBuffer (transferred elsewhere)');
    return w;
  }
  throw new GgwebError('invalid', `loadSae: weights must be an ArrayBuffer or Uint8Array, got ${show(w)}`);
}

/** A signal that aborts when `a` (may be absent) or `b` does; `done()` drops the listeners. */
function eitherSignal(a, b) {
  const c = new AbortController();
  const abort = () => c.abort();
  a?.addEventListener('abort', abort, { once: true });
  b.addEventListener('abort', abort, { once: true });
  if (a?.aborted || b.aborted) c.abort();
  return { signal: c.signal, done: () => { a?.removeEventListener('abort', abort); b.removeEventListener('abort', abort); } };
}

/** generateParams's logitBias back as numbers (its "-Infinity" strings are for the wasm side's JSON data model). */
function biasValues(bias) {
  const out = Object.create(null);
  for (const k of Object.keys(bias)) out[k] = bias[k] === '-Infinity' ? -Infinity : bias[k];
  return out;
}

/** A sparse autoencoder loaded by `Model.loadSae`. */
export class Sae {
  #call;
  #id;
  #dSae;
  #disposed = false;

  constructor(call, info) {
    this.#call = call;
    this.#id = info.id;
    this.#dSae = info.dSae;
    this.dIn = info.dIn;
    this.dSae = info.dSae;
    this.hookName = info.hookName;
    this.applyBDecToInput = info.applyBDecToInput;
  }

  #live(what) {
    if (this.#disposed) throw new GgwebError('disposed', `${what}: the SAE was disposed`);
  }

  /** Features of `input` at the SAE's hook: `{ tokens, top: [pos][k] { index, value }, l0, mse }`. */
  async encode(input, options = undefined) {
    this.#live('sae.encode');
    const ids = modelInput(input, 'sae.encode');
    const { opts, ctl } = callOptions(options, 'sae.encode');
    return this.#call('saeEncode', [this.#id, ids, opts], ctl);
  }

  /** Feature `i`'s decoder direction (`dIn` values), e.g. for a steering hook `{ op: 'add', value }`. */
  async decoderRow(i) {
    this.#live('sae.decoderRow');
    // Checked in full here, before it crosses as a u32: 2^32 + 7 must not become row 7.
    if (!Number.isInteger(i) || i < 0) throw new GgwebError('invalid', `sae.decoderRow: i must be a whole number, got ${show(i)}`);
    if (i >= this.#dSae || i > 0xffffffff) {
      throw new GgwebError('invalid', `sae.decoderRow: feature ${show(i)} is out of range (the SAE has ${this.#dSae} features: 0..${this.#dSae - 1})`);
    }
    return this.#call('saeDecoderRow', [this.#id, i]);
  }

  /** Frees the SAE's weights; again, or after the model's dispose(), it does nothing. */
  async dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    try {
      await this.#call('saeDispose', [this.#id]);
    } catch {
      // The model (and every SAE with it) was disposed already: nothing left to free.
    }
  }
}

export class Model {
  #t;
  #info;
  #disposed = false;
  #worker;
  #saeLoads = new Set(); // AbortControllers of the loadSae(url) calls running: dispose() aborts them

  /** Use Model.load. */
  constructor(transport, info, worker) {
    if (!transport) throw new GgwebError('invalid', 'use Model.load(source, options) to create a Model');
    this.#t = transport;
    this.#info = info;
    this.#worker = worker;
  }

  /** The models stored by loads with `cache`: list, has, delete, clear, estimate (cache.js). */
  static cache = modelCache;

  /**
   * Streams a GGUF model from a URL, File/Blob, ReadableStream, Response or bytes.
   * See ggweb.d.ts for the options. `options` may be omitted or null.
   */
  static async load(source, options = undefined) {
    const o = optionsObject(options, 'Model.load', LOAD_KEYS);
    const { onProgress } = o;
    const signal = checkSignal(o.signal);
    const cacheName = cacheOption(o.cache);
    const offline = boolOption(o.offline, 'offline', false);
    if (offline && !cacheName) throw new GgwebError('invalid', 'Model.load: offline: true reads the stored copy, so it needs cache (true or a cache name)');
    // What crosses to the worker: the cache's name and whether to skip revalidation.
    const cache = cacheName ? { name: cacheName === true ? DEFAULT_CACHE_NAME : cacheName, offline } : false;
    const persist = boolOption(o.persist, 'persist', false);
    const hub = hubSource(source, o, 'Model.load', baseUrl());
    const shared = boolOption(o.shared, 'shared', false);
    const worker = boolOption(o.worker, 'worker', shared || typeof Worker !== 'undefined');
    if (shared && !worker) throw new GgwebError('invalid', 'Model.load: shared: true runs the model in a shared worker, so it cannot go with worker: false');
    if (shared && o.lora !== undefined && o.lora !== null) {
      throw new GgwebError('invalid', 'Model.load: lora changes the weights every tab of a shared model uses: load it without shared');
    }
    // Checked here, on the calling thread, so a bad value fails before a worker starts and
    // reads the same in a worker and on the page thread.
    const { stallTimeoutMs } = o;
    stallTimeout(stallTimeoutMs);
    relaxedSimdOption(o.relaxedSimd);
    memory64Option(o.memory64);
    const lora = loraSource(o.lora);
    const opts = {
      backend: o.backend, gpuLayers: o.gpuLayers, nCtx: o.nCtx, nBatch: o.nBatch, nThreads: o.nThreads, kvType: o.kvType,
      relaxedSimd: o.relaxedSimd, memory64: o.memory64,
    };
    loaderOptions(opts);
    if (onProgress !== undefined && typeof onProgress !== 'function') {
      throw new GgwebError('invalid', `onProgress must be a function, got ${show(onProgress)}`);
    }
    // No coreUrl: the package's own builds (builds.js), wherever a bundler put them.
    const core = coreUrlOption(o.coreUrl);
    if (signal?.aborted) throw abortedError('loading the model');
    const { src, transfer } = await describeSource(source, hub);
    if (shared && src.kind !== 'url') {
      throw new GgwebError('invalid', `Model.load: shared: true needs a URL source (the tabs find the model by its URL), got a ${src.kind} source`);
    }
    // The shared worker's name: every tab asking for this file with these options reaches the same one.
    const key = shared ? JSON.stringify([src.url, opts, core]) : null;
    // Asked alongside the load (Window only); a browser that asks the user may answer later.
    let persisted = null;
    const persistP = persist ? askPersist().then((r) => { persisted = r; }) : null;
    // A worker found blocked while opening the CPU backend (OPEN_GUARD_MS) is replaced once,
    // for every source that can be sent again (a stream was handed to the first worker).
    for (let restarts = 0; ; restarts++) {
      const t = shared ? new SharedTransport(core, key) : worker ? new WorkerTransport(core) : new LocalTransport(core);
      try {
        const info = await t.load(src, opts, { signal, onProgress, cache, stallTimeoutMs, transfer });
        info.load = { ...info.load, worker, workerRestarts: restarts };
        if (persistP) {
          await Promise.race([persistP, new Promise((r) => setTimeout(r, 100))]);
          info.load.persisted = persisted?.persisted ?? null;
          const note = persisted ? persisted.note : 'navigator.storage.persist() had not answered when the load finished (the browser may be asking the user)';
          if (note) info.load.cacheNote = info.load.cacheNote ? `${info.load.cacheNote}; ${note}` : note;
        }
        const model = new Model(t, info, worker);
        if (lora) await model.#applyLora(lora, { signal, stallMs: stallTimeout(stallTimeoutMs) });
        return model;
      } catch (e) {
        await t.dispose().catch(() => {});
        if (e?.restartable && restarts === 0 && src.kind !== 'stream' && !signal?.aborted) {
          console.warn(`ggweb: ${e.message}; loading again in a new worker`);
          continue;
        }
        throw toGgwebError(e, 'internal', 'Model.load');
      }
    }
  }

  /**
   * Reads only the GGUF header of `source` (a URL with Range requests where the server
   * allows them, else the download is cancelled once the tensor infos are in; a File/Blob,
   * bytes, a ReadableStream or Response, or a path in Node) and returns the hyperparameters,
   * tensors, the memory plan a load with these options would make, and whether it fits
   * here. Runs on the calling thread; no worker starts. See ggweb.d.ts InspectResult.
   */
  static async inspect(source, options = undefined) {
    const o = optionsObject(options, 'Model.inspect', INSPECT_KEYS);
    const signal = checkSignal(o.signal);
    const stallMs = stallTimeout(o.stallTimeoutMs);
    const opts = without(o, ['signal', 'coreUrl', 'stallTimeoutMs', 'file', 'revision', 'hubUrl']);
    loaderOptions(opts);
    const core = coreUrlOption(o.coreUrl);
    const hub = hubSource(source, o, 'Model.inspect', baseUrl());
    if (signal?.aborted) throw abortedError('Model.inspect');
    try {
      const { src } = await describeSource(source, hub, 'Model.inspect');
      return await inspectSource(src, { ...opts }, { signal, coreUrl: core, stallMs });
    } catch (e) {
      throw toGgwebError(e, 'internal', 'Model.inspect');
    }
  }

  #live(what) {
    if (this.#disposed) throw new GgwebError('disposed', `${what}: the model was disposed`);
  }

  /** True once dispose() was called. */
  get disposed() {
    return this.#disposed;
  }

  /** Whether the model runs in a Web Worker. */
  get inWorker() {
    return this.#worker;
  }

  /** Architecture, hyperparameters, backend and memory plan (from WasmModel.info), plus load stats. */
  info() {
    this.#live('info');
    return structuredClone(this.#info);
  }

  /** Text → token ids. `special: true` parses special tokens such as <|endoftext|>. */
  async tokenize(text, options = undefined) {
    this.#live('tokenize');
    const special = boolOption(optionsObject(options, 'tokenize', ['special']).special, 'special', false);
    if (typeof text !== 'string') throw new GgwebError('invalid', `tokenize: text must be a string, got ${show(text)}`);
    return this.#t.call('tokenize', [text, special]);
  }

  /** Token ids → text. */
  async detokenize(ids) {
    this.#live('detokenize');
    return this.#t.call('detokenize', [tokenIds(ids, 'detokenize')]);
  }

  /**
   * Next-token logits after `ids`, one per vocabulary entry. Uses the prompt cache (the
   * values equal a fresh evaluation's within 1e-4) and leaves `ids` in it.
   */
  async logits(ids) {
    this.#live('logits');
    return this.#t.call('logits', [tokenIds(ids, 'logits')]);
  }

  /**
   * The GGUF file of the current weights (after `train`, the trained ones) in llama.cpp's
   * GPT-2 layout, which llama.cpp and `Model.load` read: `{ type: 'f32' | 'f16' | 'q8_0' }`
   * (default 'f32': norms, biases and `position_embd` stay F32 in every type). 'busy' while
   * a training run or another call runs.
   */
  async save(options = undefined) {
    this.#live('save');
    const o = plainData(optionsObject(options, 'save'), 'save: options');
    return this.#t.call('save', [o]);
  }

  /**
   * The method table's long calls (web/methods.js; their docs and types in ggweb.d.ts): score,
   * trace, run, patch, logitLens, attribute. Each takes its token inputs (a string or token
   * ids, checked here), then its options: `signal` taken out and checked (it cannot cross),
   * the rest sent as given for the wasm side's strict parser, which names a bad key.
   */
  static {
    for (const [name, m] of Object.entries(METHODS)) {
      if (m.sae) continue; // sae.encode is the Sae's
      const n = m.inputs.length;
      const f = {
        async [name](...args) {
          this.#live(name);
          const inputs = args.slice(0, n).map((input) => modelInput(input, name));
          const { opts, ctl } = callOptions(args[n], name);
          return this.#t.call(name, [...inputs, opts], [], ctl);
        },
      }[name];
      Object.defineProperty(Model.prototype, name, { value: f, writable: true, configurable: true });
    }
  }

  /**
   * A sparse autoencoder in SAELens's saved format: a folder URL ending in `/` (its
   * `cfg.json` and `sae_weights.safetensors`), or `{ cfg, weights }` (the cfg object or its
   * text, the safetensors bytes). Options: `signal`, `stallTimeoutMs`.
   */
  async loadSae(source, options = undefined) {
    this.#live('loadSae');
    const o = optionsObject(options, 'loadSae', ['signal', 'stallTimeoutMs']);
    const signal = checkSignal(o.signal);
    const stallMs = stallTimeout(o.stallTimeoutMs);
    let folder = null;
    let cfg;
    let weights;
    if (typeof source === 'string') {
      folder = saeFolder(source);
    } else if (source !== null && typeof source === 'object' && !ArrayBuffer.isView(source)) {
      const s = optionsObject(source, 'loadSae source', ['cfg', 'weights'], 'key');
      // A cfg object crosses as JSON text: plain data only (a cyclic one, a BigInt, a getter
      // that throws is 'invalid'), as every other value a call takes.
      cfg = typeof s.cfg === 'string' ? s.cfg : JSON.stringify(plainData(s.cfg ?? null, 'loadSae: cfg'));
      weights = saeWeights(s.weights);
    } else {
      throw new GgwebError('invalid', `loadSae: the source must be a folder URL or { cfg, weights }, got ${show(source)}`);
    }
    if (signal?.aborted) throw abortedError('loadSae');
    // dispose() settles this load at once ('disposed') and ends its requests.
    const mine = new AbortController();
    this.#saeLoads.add(mine);
    const gone = new Promise((_, reject) => {
      mine.signal.addEventListener('abort', () => reject(new GgwebError('disposed', 'loadSae: the model was disposed')), { once: true });
    });
    const sig = eitherSignal(signal, mine.signal);
    const work = (async () => {
      if (!folder) return this.#sae(await this.#t.call('loadSae', [cfg, weights]));
      const get = async (name) => {
        const url = new URL(name, folder).href;
        const r = await fetchWithin(url, { signal: sig.signal, stallMs, what: 'loadSae' });
        if (!r.ok) {
          r.body?.cancel().catch(() => {});
          throw new GgwebError('http', `loadSae: HTTP ${r.status}${r.statusText ? ' ' + r.statusText : ''} fetching ${url}`, { status: r.status, url });
        }
        return r;
      };
      const parts = [];
      await readBody(await get('cfg.json'), { signal: sig.signal, stallMs }, (c) => { parts.push(c); });
      const text = await new Blob(parts).text();
      const r = await get('sae_weights.safetensors');
      return this.#sae(await this.#streamSae(text, r, { signal: sig.signal, stallMs }));
    })();
    work.catch(() => {}); // after a dispose, `gone` answers and this one ends unobserved
    try {
      return await Promise.race([work, gone]);
    } catch (e) {
      if (this.#disposed) throw new GgwebError('disposed', 'loadSae: the model was disposed');
      throw e;
    } finally {
      sig.done();
      this.#saeLoads.delete(mine);
    }
  }

  #sae(info) {
    return new Sae((method, args, ctl) => {
      this.#live(PUBLIC_NAME[method] ?? method);
      return this.#t.call(method, args, [], ctl);
    }, info);
  }

  /**
   * sae_weights.safetensors from response `r`, chunk by chunk into the model's wasm side
   * (saeOpen / saeFeed / saeFinish): the file is never held whole in JS memory.
   */
  async #streamSae(cfg, r, { signal, stallMs }) {
    const id = await this.#t.call('saeOpen', [cfg]);
    let ok = false;
    try {
      await readBody(r, { signal, stallMs }, async (chunk) => {
        this.#live('loadSae');
        // The chunk's memory moves to the worker (a whole-buffer view; else it is copied).
        const whole = chunk.byteOffset === 0 && chunk.byteLength === chunk.buffer.byteLength;
        await this.#t.call('saeFeed', [id, chunk], whole ? [chunk.buffer] : []);
      });
      this.#live('loadSae');
      const info = await this.#t.call('saeFinish', [id]);
      ok = true;
      return info;
    } finally {
      if (!ok) this.#t.call('saeAbort', [id]).catch(() => {});
    }
  }

  /**
   * Streams a continuation of `prompt` (a string or token ids):
   * `for await (const { token, text } of model.generate(...))`. The KV cache is reused for
   * the longest prefix it shares with the previous call's tokens (`stats.cachedTokens`)
   * unless `reusePrompt: false`. The model runs at most GENERATE_AHEAD (4) tokens ahead of
   * the reader. Aborting `signal` makes the iteration throw GgwebError('aborted'); `break`
   * stops quietly. The returned iterator's `stats` promise resolves to timing and stop
   * reason when the run ends ('cancelled' after break/return()/abort), and
   * `toReadableStream()` gives the items as a ReadableStream.
   * A bad argument makes the first next() reject with code 'invalid'.
   */
  generate(prompt, options = undefined) {
    this.#live('generate');
    let o;
    try {
      o = optionsObject(options, 'generate');
    } catch (e) {
      return tokenStream(() => { throw e; });
    }
    const signal = checkSignal(o.signal); // a bad signal throws at once: it could not be watched
    return tokenStream((push) => {
      // Checked here, on the calling thread, so that what crosses to a worker is plain data
      // and the errors read the same on both transports.
      const input = modelInput(prompt, 'generate');
      const opts = without(o, ['signal']);
      // What crosses is the checked copy (a Proxy or getter in the options is read once, here).
      const params = generateParams(opts);
      const special = boolOption(opts.special, 'special', false);
      return this.#t.generate(input, { ...params, ...(params.logitBias ? { logitBias: biasValues(params.logitBias) } : {}), special }, push);
    }, signal);
  }
  /**
   * Trains the model's weights (full fine-tuning, on the CPU), or with `lora: { rank, alpha,
   * targets }` a low-rank adapter beside them on any file (quantized too) that stays on the
   * model until dropLora(): `for await (const { step, loss,
   * tokens, tokensPerSecond } of model.train(data, { steps, ... }))`, one item per update.
   * `break`, return(), aborting `signal` or dispose() stop it after the update in progress
   * (the loop ends; `await run.stats` gives `{ stop: 'steps' | 'cancelled', steps, tokens }`);
   * the model keeps the weights of the last finished update. Every other call is 'busy'
   * while it runs. A bad argument makes the first next() reject ('invalid', or 'unsupported'
   * for a quantized weight or a plan over the memory budget).
   */
  train(data, options = undefined) {
    this.#live('train');
    const how = { what: 'train', abortEnds: true };
    let o;
    try {
      o = optionsObject(options, 'train');
    } catch (e) {
      return tokenStream(() => { throw e; }, undefined, how);
    }
    const signal = checkSignal(o.signal); // a bad signal throws at once: it could not be watched
    // Checked here, on the calling thread, so that what crosses to a worker is plain data.
    return tokenStream((push) => this.#t.train(trainData(data), trainParams(o), push), signal, how);
  }

  /**
   * Removes the model's LoRA adapter (trained by `train(data, { lora })`): later calls run the
   * base weights, with the base model's logits exactly. Resolves to whether there was one.
   */
  async dropLora() {
    this.#live('dropLora');
    return this.#t.call('dropLora', []);
  }

  /**
   * The model's LoRA adapter (trained by `train(data, { lora })`, or Model.load's) as a
   * llama.cpp LoRA adapter GGUF (`general.type` 'adapter', `adapter.type` 'lora',
   * `adapter.lora.alpha`, `*.lora_a` / `*.lora_b`), which `llama-cli --lora` and
   * `Model.load(base, { lora })` apply to the base file. `type`: 'f32' (default) or 'f16'.
   * `optimizer: true`: a ggweb checkpoint, the adapter's optimizer state beside it (which
   * llama.cpp refuses), resumed by the next `train` of a model it is loaded onto.
   */
  async saveLora(options = undefined) {
    this.#live('saveLora');
    const o = optionsObject(options, 'saveLora', ['type', 'optimizer', 'to', 'name']);
    return this.#t.call('saveLora', [plainData(o, 'saveLora: options')]);
  }

  /** Model.load's `lora`: the adapter's bytes (fetched when a URL), put on the model. */
  async #applyLora(lora, { signal, stallMs }) {
    let bytes = lora.bytes;
    if (lora.opfs) bytes = new Uint8Array(await (await checkpointFile(lora.opfs, 'Model.load: lora')).arrayBuffer());
    if (lora.url) {
      const r = await fetchWithin(lora.url, { signal, stallMs, what: 'Model.load: lora' });
      if (!r.ok) {
        r.body?.cancel().catch(() => {});
        throw new GgwebError('http', `Model.load: lora: HTTP ${r.status}${r.statusText ? ' ' + r.statusText : ''} fetching ${lora.url}`, { status: r.status, url: lora.url });
      }
      bytes = new Uint8Array(await r.arrayBuffer());
    }
    if (signal?.aborted) throw abortedError('loading the LoRA adapter');
    await this.#t.call('loadLora', [bytes], [bytes.buffer]);
  }

  /**
   * Debug, for tests of the recovery path: destroys the model's WebGPU device as a driver
   * reset would. A generation in progress then fails with code 'device_lost', and so does
   * every later call on this model; load it again. Code 'unsupported' on the CPU backend.
   */
  async _debugLoseDevice() {
    this.#live('_debugLoseDevice');
    return this.#t.call('_debugLoseDevice', []);
  }

  /** Frees the model (and ends its worker). Later calls fail with code 'disposed'. */
  async dispose() {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const c of this.#saeLoads) c.abort();
    await this.#t.dispose();
  }
}

export default Model;
