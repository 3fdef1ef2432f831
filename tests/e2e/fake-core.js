// A test double of the wasm-bindgen glue (web/pkg/ggweb_core.js), with the same surface as
// crate/bindings: the module functions (version, init_panic_hook, available_backends,
// cpu_threads, load_options, live_gpu_buffers, methods, wasm_memory_bytes, wasm_heap_base, debug_set_host_headroom), WasmLoader (its
// constructor, the async WasmLoader.create and warm_up), WasmModel (prompt_step, next, logits,
// call (the method table's score and trace; the rest unsupported) async as in the real glue, stats, _debugLoseDevice, n_ctx, eos) and WasmInspector (Model.inspect's header reader). It lets
// tests/e2e/api.spec.mjs drive the real JS layer (streaming, progress, errors, abort,
// worker messages, cache) in Chromium without a model, through the same calls it makes on
// the real module (api.spec checks the two surfaces are the same). It checks what a loader
// must: the GGUF magic, the bytes in order (FNV-1a of all bytes fed), and that nothing is
// fed after finish() or free().
//
// Tokens: one per UTF-16 code unit (id = code unit). Generation yields ids 97, 98, ...
// ('a', 'b', ...) up to maxTokens. logits(ids)[i] = (sum(ids) % 1000) / 10 + i for i < 8.
export const stats = { loaders: 0, freed: 0, models: 0, modelsFreed: 0 };

/**
 * What a trap inside an async export does in the real glue (wasm-bindgen-futures polls the
 * Rust future in a microtask): the RuntimeError is thrown in a microtask of its own, uncaught,
 * and the promise the export returned never settles (web/wasm-trap.js turns it into a rejection).
 */
function trapLater() {
  queueMicrotask(() => { throw new WebAssembly.RuntimeError('unreachable'); });
  return new Promise(() => {});
}

export default async function init() {}
export function initSync() {}
export function init_panic_hook() {}
export function version() { return 'fake'; }
/** Like a build without the webgpu feature: "auto" runs on the CPU without asking for an adapter. */
export function available_backends() { return ['cpu']; }
export function cpu_threads() { return { supported: false, workersRunning: 0, jobs: [0, 0] }; }
/** A refusal as the wasm side's option parser words it (code 'invalid', naming the option and the value). */
const refused = (message) => Object.assign(new Error(message), { code: 'invalid' });
/**
 * The real one's defaults (crate/common/options.rs LoadOptions), and its refusal of the values
 * api.spec.mjs passes (engine.js leaves ranges to the wasm side): nCtx below 1, an unknown backend.
 */
export function load_options(o) {
  if (o?.nCtx !== undefined && !(Number.isInteger(o.nCtx) && o.nCtx >= 1)) throw refused(`WasmLoader options: nCtx must be an integer from 1 to 4294967295, got ${o.nCtx}`);
  if (o?.backend !== undefined && !['cpu', 'webgpu', 'auto'].includes(o.backend)) throw refused(`WasmLoader options: backend must be "cpu", "webgpu" or "auto", got ${JSON.stringify(o.backend)}`);
  return { nCtx: o?.nCtx ?? 0, nBatch: o?.nBatch ?? 32, backend: o?.backend ?? 'cpu', gpuLayers: o?.gpuLayers ?? null, nThreads: o?.nThreads ?? 1, kvType: o?.kvType ?? 'f32' };
}
export function live_gpu_buffers() { return 0; }
export function methods() {
  return ['score', 'trace', 'run', 'patch', 'logitLens', 'attribute', 'saeEncode']
    .map((name) => ({ name, public: name === 'saeEncode' ? 'sae.encode' : name, inputs: name === 'patch' ? ['clean', 'corrupted'] : ['input'], sae: name === 'saeEncode' }));
}
export function wasm_memory_bytes() { return 16 * 65536; }
export function wasm_heap_base() { return 65536; }
export function debug_set_host_headroom() {}
// bench/wasm-decode.mjs's hidden exports (crate/bindings/bench.rs): the profiler switch and a kernel timer.
export function _debugProfileNext() {}
export function _debugProfile() { return []; }
export function _benchMatvec() { return 0; }

export class WasmLoader {
  /** The real factory opens the WebGPU device; this build has none, so it is the constructor. */
  static async create(opts) {
    // nBatch 4242: a browser that takes 1.5 s to answer (engine.js's stall timeout must fire).
    if (opts.nBatch === 4242) await new Promise((r) => setTimeout(r, 1500));
    // nBatch 4243: the first create (per test server) blocks its thread for good, as Firefox's
    // `new Worker()` for the thread pool now and then does (ggweb.js OPEN_GUARD_MS); the
    // server's request counter says which call is the first.
    if (opts.nBatch === 4243 && typeof XMLHttpRequest !== 'undefined') {
      const get = (u) => { const x = new XMLHttpRequest(); x.open('GET', u, false); x.send(); return x.responseText; };
      get('/__test/counted/open-hang/e2e/fake-core.js');
      if (JSON.parse(get('/__test/tally/open-hang')).requests === 1) for (;;) { /* blocked */ }
    }
    if (opts.backend === 'webgpu') {
      throw Object.assign(new Error('backend "webgpu": this build has no WebGPU backend'), { code: 'unsupported' });
    }
    return new WasmLoader(opts);
  }
  constructor(opts) {
    this.opts = { ...opts, backend: opts?.backend ?? 'cpu' };
    if (this.opts.nCtx !== undefined && this.opts.nCtx > 4096) throw new Error(`nCtx ${this.opts.nCtx} exceeds the model's context length 4096`);
    this.bytes = 0;
    this.hash = 0x811c9dc5;
    this.head = [];
    this.state = 'open';
    stats.loaders++;
  }
  feed(chunk) {
    if (this.state !== 'open') throw new Error(`feed after ${this.state}`);
    for (let i = 0; i < chunk.length; i++) {
      if (this.bytes + i < 4) {
        this.head.push(chunk[i]);
        if (this.head.length === 4 && String.fromCharCode(...this.head) !== 'GGUF') {
          throw new Error(`not a GGUF file: magic bytes ${JSON.stringify(String.fromCharCode(...this.head))} at offset 0`);
        }
      }
      this.hash = Math.imul(this.hash ^ chunk[i], 0x01000193) >>> 0;
    }
    this.bytes += chunk.length;
  }
  bytes_consumed() { return this.bytes; }
  total_expected() { return -1; }
  /** No kernels to warm: finished at once (2), as the real one is for a WebGPU model. */
  warm_up() { return 2; }
  finish() {
    if (this.state !== 'open') throw new Error(`finish after ${this.state}`);
    this.state = 'finished';
    if (this.bytes < 4) throw new Error(`truncated GGUF: ${this.bytes} bytes`);
    return new WasmModel(this.opts, this.bytes, this.hash);
  }
  free() {
    if (this.state === 'freed') throw new Error('double free');
    this.state = 'freed';
    stats.freed++;
  }
}

export class WasmModel {
  constructor(opts, bytes, hash) {
    this.opts = opts;
    this.bytes = bytes;
    this.hash = hash;
    this.freed = false;
    this.slowMs = 0;
    stats.models++;
  }
  #alive() { if (this.freed) throw new Error('use after free'); }
  tokenize(text, special) { this.#alive(); return Array.from(text, (c) => c.charCodeAt(0)); }
  detokenize(ids) {
    this.#alive();
    for (const id of ids) if (id > 0xffff) throw new Error(`token id ${id} is out of range (vocab 65536)`);
    return String.fromCharCode(...ids);
  }
  logits(ids) {
    this.#alive();
    // Token 4244 first: a trap in the async export (trapLater).
    if (ids[0] === 4244) return trapLater();
    return this.#logits(ids);
  }
  async #logits(ids) {
    const s = ids.reduce((a, b) => a + b, 0) % 1000;
    return Float32Array.from({ length: 8 }, (_, i) => s / 10 + i);
  }
  start(ids, params) {
    this.#alive();
    // The real parser's refusals of the values api.spec.mjs passes.
    if (params.topP !== undefined && !(params.topP >= 0 && params.topP <= 1)) throw refused(`generation options: topP must be a number from 0 to 1, got ${params.topP}`);
    if (params.reusePrompt !== undefined && typeof params.reusePrompt !== 'boolean') throw refused(`generation options: reusePrompt must be true or false, got ${params.reusePrompt}`);
    this.stop = undefined;
    // Absent options take the real parser's defaults (crate/model/session.rs GenerateOptions::default()).
    this.params = { maxTokens: 128, ...params };
    this.prompt = Array.from(ids);
    this.pos = 0;
    this.produced = 0;
    // A prompt starting with "slow" makes every step take 20 ms (for cancel tests).
    this.slowMs = String.fromCharCode(...this.prompt.slice(0, 4)) === 'slow' ? 20 : 0;
  }
  #spin() { const t = performance.now(); while (performance.now() - t < this.slowMs) { /* busy, like real compute */ } }
  async prompt_step() {
    this.#alive();
    this.#spin();
    this.pos = Math.min(this.prompt.length, this.pos + (this.opts.nBatch ?? 2));
    return this.pos >= this.prompt.length;
  }
  /** The next item, or undefined at the end. No distribution: no logprobs (as the real one without topLogprobs). */
  async next() {
    this.#alive();
    if (this.pos < this.prompt.length) throw new Error('next before the prompt was evaluated');
    if (this.produced >= this.params.maxTokens) {
      this.stop = 'maxTokens';
      return undefined;
    }
    this.#spin();
    const token = 97 + (this.produced++ % 26);
    return { seq: 0, token, text: String.fromCharCode(token) };
  }
  /** The run's counters; `stop` (the real one also says 'eos', 'contextFull' and 'stop') once it ended. */
  stats() {
    return { promptTokens: this.prompt?.length ?? 0, cachedTokens: 0, tokens: this.produced ?? 0, stop: this.stop ?? null, webgpu: null };
  }
  /** The method table's long calls (crate/common/methods.rs), as the real glue dispatches them. */
  async call(method, inputs, opts, checkpoint) {
    this.#alive();
    switch (method) {
      case 'score': return this.#score(...inputs);
      case 'trace': return this.#trace(...inputs);
      case 'run': case 'patch': case 'logitLens': case 'attribute':
        // No graph, no hook points: the looking-inside calls are not this fake's to answer.
        throw Object.assign(new Error(`${method}: the fake core has no graph`), { code: 'unsupported' });
      default: throw Object.assign(new Error(`unknown method ${JSON.stringify(method)}`), { code: 'invalid' });
    }
  }
  async callSae() { this.#alive(); throw Object.assign(new Error('sae.encode: the fake core has no graph'), { code: 'unsupported' }); }
  /** Each position predicts the next id with logprob -1 at rank 0 (entropy 0, no top-k). */
  #score(ids) {
    const n = Math.max(ids.length - 1, 0);
    return {
      tokens: Uint32Array.from(ids), logprobs: new Float32Array(n).fill(-1), ranks: new Uint32Array(n),
      entropies: new Float32Array(n), top: Array.from({ length: n }, () => []), cachedTokens: 0,
    };
  }
  /** No graph to tap: the tokens, no named nodes, no compute memory. */
  #trace(ids) {
    return { tokens: Uint32Array.from(ids), nodes: {}, memory: { compute: 0 } };
  }
  checkSae() { this.#alive(); }
  // model.train: no graph to train.
  train_start() { this.#alive(); throw Object.assign(new Error('train: the fake core has no graph'), { code: 'unsupported' }); }
  async train_step() { this.#alive(); return undefined; }
  train_end() { return null; }
  train_run_tokens() { return 0; }
  // LoRA: no adapter to drop, save or load.
  drop_lora() { this.#alive(); return false; }
  async save() { this.#alive(); throw Object.assign(new Error('save: the fake core has no weights'), { code: 'unsupported' }); }
  async save_lora() { this.#alive(); throw Object.assign(new Error('saveLora: the model has no LoRA adapter'), { code: 'invalid' }); }
  save_stream() { this.#alive(); throw Object.assign(new Error('save: the fake core has no weights'), { code: 'unsupported' }); }
  save_lora_stream() { this.#alive(); throw Object.assign(new Error('saveLora: the model has no LoRA adapter'), { code: 'invalid' }); }
  load_lora() { this.#alive(); throw Object.assign(new Error('Model.load: lora: the fake core has no graph'), { code: 'unsupported' }); }
  n_ctx() { return this.opts.nCtx ?? 4096; }
  eos() { return -1; }
  _debugLoseDevice() {
    this.#alive();
    throw Object.assign(new Error('the model runs on the cpu backend, which has no device to lose'), { code: 'unsupported' });
  }
  info() {
    return { arch: 'fake', bytes: this.bytes, fnv1a: this.hash, backend: this.opts.backend, opts: this.opts };
  }
  free() {
    if (this.freed) throw new Error('double free');
    this.freed = true;
    stats.modelsFreed++;
  }
}

/** An SAE the fake cannot read. */
export class WasmSae {
  constructor() { throw Object.assign(new Error('loadSae: the fake core reads no SAE'), { code: 'unsupported' }); }
  info() { return {}; }
  decoderRow() { return new Float32Array(0); }
  free() {}
}

/** The SAE stream reader: as WasmSae, the fake reads none. */
export class WasmSaeLoader {
  constructor() { throw Object.assign(new Error('loadSae: the fake core reads no SAE'), { code: 'unsupported' }); }
  feed() {}
  received() { return 0; }
  finish() { return new WasmSae(); }
  free() {}
}

/** Model.inspect's header reader: done once the GGUF magic and 24 more bytes are in; no plan. */
export class WasmInspector {
  constructor(opts, fileSize) {
    this.opts = opts;
    this.fileSize = fileSize;
    this.bytes = 0;
  }
  feed(chunk) {
    if (this.bytes < 4 && chunk.length > 0) {
      const head = String.fromCharCode(...chunk.slice(0, 4 - this.bytes));
      if (!'GGUF'.startsWith(head)) throw new Error(`not a GGUF file: magic bytes ${JSON.stringify(head)} at offset 0`);
    }
    this.bytes += chunk.length;
    return this.bytes >= 28;
  }
  bytes_consumed() { return this.bytes; }
  /** The fake has no model to plan: refused as a build without the planner would be. */
  plan() {
    // nBatch 4244: a trap in the async export (trapLater).
    if (this.opts?.nBatch === 4244) return trapLater();
    return Promise.reject(this.#refusal());
  }
  #refusal() {
    return Object.assign(new Error('the fake core cannot plan a model'), { code: 'unsupported' });
  }
  free() {}
}

/** save_stream / save_lora_stream's answer in the real glue; the fake core never makes one. */
export class WasmSaveStream {
  size() { return 0; }
  async next_chunk() { return undefined; }
  free() {}
}
