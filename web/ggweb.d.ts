// Types for ggweb's JS API (web/ggweb.js): the classes, their docs, and the options only JS
// has (signal, special). The options and results the wasm side parses and writes are
// generated from their Rust structs into ggweb.types.d.ts (scripts/gen-types.mjs), re-exported here.
import type {
  AttributeParams, Beam, GenerateParams, Item, PatchParams, RunParams, SaliencyParams, TopKParams,
  ScoreResult, TraceResult, RunResult, PatchResult, LogitLensResult, AttributeResult, SaeEncoded, SaliencyResult,
  WebGpuStats, WasmModelInfo, WasmInspectResult, LoadParams, GenerationStats, ScoreParams, TraceParams, TrainParams, TrainItem, TrainStats, SaveParams,
  SaveLoraParams,
} from './ggweb.types.js';
export * from './ggweb.types.js';

/** What a GgwebError's `code` says went wrong. */
export type GgwebErrorCode =
  /** The server answered with an HTTP error status (`details.status`, `details.url`). */
  | 'http'
  /** The request failed or the connection dropped mid-download (`details.loaded`, `details.total`). */
  | 'network'
  /** A download sent nothing for `stallTimeoutMs`; the message and `details` name the bytes
   *  received (`loaded`, `total`) and the `url`. The runtime is usable at once: load again. */
  | 'timeout'
  /** The caller's AbortSignal fired. */
  | 'aborted'
  /** The bytes are not a valid GGUF model this runtime can read (the message names what and where). */
  | 'format'
  /** The model was disposed. */
  | 'disposed'
  /** Another call (a generation, logits, score, trace, tokenize or detokenize) is running on
   *  this model (on a shared model, another call of this tab: other tabs' calls wait their turn). */
  | 'busy'
  /** A bad argument or option (the message names it and the value): token ids outside the
   *  vocabulary, negative, not integers, or not in an array; a prompt longer than the context. */
  | 'invalid'
  /** Not possible here: no WebGPU, no wasm module, a source the browser cannot pass to a
   *  worker, no Cache API (Model.cache in Node or an insecure page); or the model does not
   *  fit: its weights, KV cache and compute buffer exceed the memory budget (what is left of
   *  wasm32's 4 GiB, a WebGPU buffer limit), found before anything is allocated. Then the
   *  message names the sizes ("model too large: needs N bytes (weights …, KV cache …), the
   *  memory budget is M bytes") and `details.needed` / `details.budget` give them in bytes. */
  | 'unsupported'
  /** A bug or a wasm trap; the model cannot be used further. (A model too big for memory is
   *  'unsupported', refused before any allocation.) */
  | 'internal'
  /** The Web Worker failed to start or crashed; with `shared: true`, the shared worker (or no
   *  SharedWorker or Web Locks in this browser). */
  | 'worker'
  /** The model's WebGPU device was lost (a driver reset, the browser reclaimed it, or
   *  `_debugLoseDevice()`): the generation in progress and every later call on this model
   *  fail with it. Dispose it and load again; backend 'auto' takes a working device or the CPU. */
  | 'device_lost';

export declare const ERROR_CODES: readonly GgwebErrorCode[];

export declare class GgwebError extends Error {
  readonly name: 'GgwebError';
  readonly code: GgwebErrorCode;
  readonly details?: {
    status?: number; url?: string; loaded?: number; total?: number | null;
    /** 'unsupported' for a model over the memory budget: the bytes it needs, and the budget. */
    needed?: number; budget?: number;
  };
}

export type LoadPhase =
  /** Bytes arriving from the network. */
  | 'download'
  /** Bytes read from the Cache API (a model stored by an earlier load with `cache`). */
  | 'cache'
  /** Bytes read from a File, Blob or byte array. */
  | 'file'
  /** Bytes read from a ReadableStream or Response. */
  | 'stream'
  /** All bytes in; building the model (backend buffers, graph plan). */
  | 'build'
  /** Loaded. */
  | 'ready';

export interface LoadProgress {
  /** Bytes fed to the loader so far. */
  loaded: number;
  /** Total bytes, when known (Content-Length, file size, or the GGUF header); null otherwise. */
  total: number | null;
  phase: LoadPhase;
}

/**
 * A URL, a Hugging Face Hub id, or the model's bytes. A string "owner/name" (no scheme, not
 * starting with '/' or '.', exactly one '/', letters, digits, '-', '_', '.') is a Hub id only
 * when `file` is given (LoadOptions.file); without it, it stays a URL relative to the page,
 * as before. In Node.js a string that is not an http(s)/blob/data URL, or a file: URL, is a
 * file path.
 */
/** A string is a URL (relative to the page), or `'opfs:name'`: a checkpoint written by
 *  save / saveLora({ to: 'opfs', name }) ('invalid' when there is none, 'unsupported' without OPFS). */
export type ModelSource = string | URL | Blob | File | ReadableStream<Uint8Array> | Response | ArrayBuffer | ArrayBufferView;

/** The model options (LoadParams: the wasm side parses them) and what JS does with a load.
 *  Unknown keys fail with code 'invalid' naming the key. */
export interface LoadOptions extends LoadParams {
  /** Use the builds with relaxed SIMD's fused multiply-add (pkg-relaxed/, pkg-threads-relaxed/)
   *  where the browser has it (default true): faster matrix products on F32/F16 weights.
   *  Fused and unfused results differ in the last bits, and relaxed SIMD lets each CPU pick,
   *  so pass false for results identical on every machine. info().threads.build says which. */
  relaxedSimd?: boolean;
  /** The Memory64 builds (pkg-m64/: wasm64, up to 16 GiB of CPU memory; pkg-m64-threads/, its
   *  threaded twin, where threads can run as for pkg-threads/): 'auto'
   *  (the default) uses it where the browser validates a Memory64 module (Chrome 133+,
   *  Firefox 134+) and the file is 3 GiB or more, where wasm32's 4 GiB would not leave room
   *  for the KV cache; true requires it ('unsupported' without Memory64); false never (for
   *  comparisons). info().memory64 says which ran, info().memory64Reason why not. */
  memory64?: 'auto' | boolean;
  onProgress?: (progress: LoadProgress) => void;
  /** A llama.cpp LoRA adapter GGUF for this base (a URL, fetched after the model loads, a
   *  checkpoint `'opfs:name'` written by saveLora({ to: 'opfs', name }), or its bytes,
   *  copied), put on the model as `train(data, { lora })` leaves one: every call
   *  runs it until dropLora(). Its pairs must adapt block matrices (attn_qkv, attn_output,
   *  ffn_up, ffn_down) with one rank; CPU backend only. A bad file is 'format' naming what
   *  ('unsupported' for what ggweb does not apply), the load failing and the model freed. */
  lora?: string | URL | ArrayBuffer | Uint8Array;
  /** Aborting rejects with GgwebError code 'aborted' and frees everything the load held. */
  signal?: AbortSignal;
  /** Store URL downloads in the Cache API and load from there next time: true (cache
   *  'ggweb-models') or a cache name. The key is the model's absolute URL (a Hub id's
   *  /resolve/ URL). Only complete downloads of valid models are kept. A stored copy is
   *  revalidated: a conditional request (If-None-Match / If-Modified-Since from the stored
   *  ETag / Last-Modified); 304 loads the stored copy, 200 loads the new file and replaces
   *  it. If the server cannot be asked (offline, an error status, no validator stored, or a
   *  cross-origin server whose CORS refuses those headers), the stored copy is loaded and
   *  info().load.cacheNote says why. A write that fails (the storage quota) leaves the load
   *  successful, warns on the console and in cacheNote. See Model.cache.
   *  'opfs' stores it in the Origin Private File System instead (not a Cache API name): the
   *  download is written into a file as it arrives, under a temporary name renamed only when
   *  its length and the load (the GGUF parse) are complete, so a partial file is never taken
   *  for the model; later loads stream from the file (info().load.via 'opfs'), revalidated
   *  as above. Where OPFS is missing the load goes on without it, cacheNote saying why. */
  cache?: boolean | 'opfs' | string;
  /** With `cache`: load a stored copy without asking the server (downloading only when none
   *  is stored). Without `cache`, code 'invalid'. */
  offline?: boolean;
  /** Ask navigator.storage.persist() (so the browser does not evict the cache under storage
   *  pressure); the answer is info().load.persisted. On the calling thread: a Window only. */
  persist?: boolean;
  /** A file in the Hub repository named by the source "owner/name", e.g. 'gpt2.Q8_0.gguf'
   *  or 'q8/model.gguf': the model is read from {hubUrl}/{owner}/{name}/resolve/{revision}/{file}
   *  (the Hub redirects that to its CDN; fetch follows). Makes the source a Hub id. */
  file?: string;
  /** With `file`: a branch, tag or commit (default 'main'; 'refs/pr/1' is sent encoded): a
   *  valid git ref name (`git check-ref-format --allow-onelevel`: no '..', no part starting
   *  with '.', no space, ~ ^ : ? * [ \\ or control characters, ...) or a commit hash;
   *  anything else ('.', '..') is code 'invalid'. */
  revision?: string;
  /** With `file`: the Hub's address (default 'https://huggingface.co'; a mirror, or a path
   *  relative to the page). */
  hubUrl?: string | URL;
  /** Milliseconds a URL download may send nothing before it fails with code 'timeout'
   *  (default 30000; 0, Infinity or anything beyond 2^31-1, setTimeout's range, for no
   *  limit). It bounds the wait for the response's headers as well as each read of the
   *  body. Files, byte arrays and streams you pass are not timed. */
  stallTimeoutMs?: number;
  /** Run the model in a Web Worker (default true where Worker exists). */
  worker?: boolean;
  /** One model for every tab of this origin (default false): the model lives in a
   *  SharedWorker named by the source's absolute URL, the model options above and `coreUrl`;
   *  a tab that loads the same with `shared: true` joins it (it downloads nothing and starts
   *  no worker of its own; info().load.shared). Calls from different tabs run one at a time
   *  in arrival order ('busy' within a tab as on a private model); a generation nobody reads
   *  for `stallTimeoutMs` fails with 'timeout' so other tabs go on; a tab that closes cancels
   *  its calls; dispose() drops this tab's handle and the last one ends the worker. train()
   *  and dropLora() change the weights every tab uses. One CPU thread where the browser gives
   *  a shared worker no Web Workers or shared memory (info().threads.reason). A URL source
   *  only, not with `worker: false` or `lora` ('invalid'); no SharedWorker or Web Locks here,
   *  or a shared worker that fails to start: code 'worker'. */
  shared?: boolean;
  /** Advanced: URL of a custom build's wasm-bindgen glue module (default: the package's own builds, web/builds.js, wherever a bundler put them). */
  coreUrl?: string | URL;
}

export interface GenerateOptions extends GenerateParams {
  /** Parse special tokens such as <|endoftext|> in the prompt (default false). */
  special?: boolean;
  /** Aborting makes the iteration throw GgwebError code 'aborted'. */
  signal?: AbortSignal;
}

/** A generated token: `seq` is the sequence (0..n-1) it continues, 0 with one sequence. */
export type GeneratedToken = Item;

/** A string (tokenized without special tokens unless `special`) or token ids. */
/**
 * Text, or token ids: an array, a typed array (not a DataView) or an array-like object of
 * integers 0..2^32-1 (a BigInt, a fraction or NaN is refused with code 'invalid', naming
 * its index), each below the vocabulary's size.
 */
export type ModelInput = string | ArrayLike<number>;

export interface ScoreOptions extends ScoreParams {
  /** Stops the call at its next step (between chunks of the pass): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  /** With a string input: parse special tokens. */
  special?: boolean;
}

/** `taps` is required (at least one). */
export interface TraceOptions extends Required<TraceParams> {
  /** Stops the call at its next step (between chunks of the pass): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  special?: boolean;
}

/** A TransformerLens hook point name: 'hook_embed', 'blocks.3.hook_resid_pre', 'blocks.0.attn.hook_pattern',
 *  'ln_final.hook_normalized', ... (README "Look inside"). */
export type HookName = string;

/** An intervention at a hook point, as a TransformerLens forward hook returning the modified
 *  tensor. The slice: `head` along the head axis, `pos` along positions (the query axis of
 *  attention scores/pattern; negative counts from the end), `index` along the last axis.
 *  A LayerNorm's `hook_scale` takes 'scale' and 'zero' only (the normalized values are
 *  divided by the hooked scale); 'add' and 'set' there are refused ('invalid'). */
export interface Hook {
  at: HookName;
  op: 'zero' | 'scale' | 'add' | 'set';
  head?: number | number[];
  pos?: number | number[];
  index?: number | number[];
  /** scale: a number; add: a number or the slice at one position; set: the whole slice. */
  value?: number | ArrayLike<number>;
}


export interface RunOptions extends RunParams {
  /** Stops the call at its next step (between chunks of the pass): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  special?: boolean;
}

export interface SaliencyOptions extends SaliencyParams {
  /** Stops the call at its next step (between the passes of integrated gradients): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  special?: boolean;
}

export interface PatchOptions extends PatchParams {
  /** Stops the call at its next step (between patched cells): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  special?: boolean;
}

/** `topK`: top entries per position and layer (default 5). */
export interface LogitLensOptions extends TopKParams {
  /** Stops the call at its next step (between layers and chunks): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  special?: boolean;
}

export interface AttributeOptions extends AttributeParams {
  /** Stops the call at its next step (between chunks of the pass): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  special?: boolean;
}

export interface LoadSaeOptions {
  signal?: AbortSignal;
  stallTimeoutMs?: number;
}

/** `topK`: default 5. */
export interface SaeEncodeOptions extends TopKParams {
  /** Stops the call at its next step (between chunks of the pass): it then fails with code 'aborted' and
   *  the model stays usable. An already aborted signal fails the call before any work. */
  signal?: AbortSignal;
  special?: boolean;
}

/** A sparse autoencoder in SAELens's format (Model.loadSae). */
export declare class Sae {
  readonly dIn: number;
  readonly dSae: number;
  readonly hookName: HookName;
  readonly applyBDecToInput: boolean;
  /** @throws GgwebError 'invalid', 'busy', 'aborted' (options.signal), 'disposed' (this SAE
   *  or its model, also when disposed during the call), 'unsupported' (its hooks or captures need more memory than is left), 'device_lost'. */
  encode(input: ModelInput, options?: SaeEncodeOptions | null): Promise<SaeEncoded>;
  /** Feature `i`'s decoder row (dIn values).
   *  @throws GgwebError 'invalid' (not an integer in 0..dSae-1), 'disposed'. */
  decoderRow(i: number): Promise<Float32Array>;
  /** Frees the SAE; again, or after the model's dispose(), it does nothing. */
  dispose(): Promise<void>;
}

/** A generation's stats: the wasm side's counts (`GenerationStats`), this run's timings, and why it ended. */
export interface GenerateStats extends Pick<GenerationStats, 'promptTokens' | 'cachedTokens' | 'tokens'> {
  promptMs: number;
  genMs: number;
  /** `GenerationStats.stop` once ended, or cancelled (break, return(), abort). */
  stop: NonNullable<GenerationStats['stop']> | 'cancelled';
  /** Diagnostics: jobs of the CPU's matrix products split over threads during this run, and
   *  how many of them the extra threads ran (both 0 on one thread). Absent when a run is
   *  cancelled before its prompt is in. */
  cpuJobs?: { split: number; onWorkers: number };
  /** This run's WebGPU work (prompt and tokens); only when the model runs on WebGPU. */
  webgpu?: WebGpuStats;
  /** After a beam search (numBeams > 1): the k beams, best first, as Hugging Face's
   *  `sequences` (generated part, with a closing end-of-text token when a beam ended on it)
   *  and `sequences_scores`. */
  beams?: Beam[];
}


/** `model.train`'s options: TrainParams (`steps` required; `lora` trains an adapter instead of
 *  the weights) and a `signal` that stops the run after the update in progress. */
export interface TrainOptions extends TrainParams {
  signal?: AbortSignal;
}

/** Training data: token-id sequences of exactly `seqLen` tokens each (one training sequence
 *  each), or text (a string or strings: tokenized, joined with the end-of-text token, cut into
 *  consecutive windows of `seqLen`, the remainder dropped). Update k (from 0) trains on
 *  sequences `(k·batchSize + i) mod n`, i = 0..batchSize−1. */
export type TrainData = string | string[] | Array<Uint32Array | number[]>;

/** One optimizer update of `model.train`: the wasm side's item and its rate. */
export interface TrainStep extends TrainItem {
  /** `tokens` over the seconds since the first update began. */
  tokensPerSecond: number;
}

/**
 * A running training run: an async iterator of updates. An update is computed only after the
 * previous one was read, and every other call on the model is 'busy' until the run ends.
 */
export interface Training extends AsyncIterableIterator<TrainStep> {
  /** Resolves when the run has ended (also after break, return(), the signal, dispose()):
   *  its stats; null if it failed (an error, a bad argument). */
  readonly stats: Promise<TrainStats | null>;
  /** Stops the run after the update in progress, as `break` does. */
  return(value?: unknown): Promise<IteratorResult<TrainStep>>;
  /** return(), then rejects with `e`. */
  throw(e?: unknown): Promise<IteratorResult<TrainStep>>;
  /** The same items as a ReadableStream, pulled one at a time. */
  toReadableStream(): ReadableStream<TrainStep>;
}

/**
 * A running generation: an async iterator of tokens. The model computes at most 4 tokens
 * ahead of what was read (flow control): a reader that pauses pauses the model, and a
 * generation nobody reads holds the model (calls are 'busy') until it is stopped with
 * `break`, `return()`, its signal or dispose().
 */
export interface Generation extends AsyncIterableIterator<GeneratedToken> {
  /** Resolves when the generation has ended: its stats, also after `break`, `return()` or
   *  an abort (`stop: 'cancelled'` with the counts so far); null if it failed (an error,
   *  a bad argument) or never started (a signal aborted before). */
  readonly stats: Promise<GenerateStats | null>;
  /** Stops the generation, as `break` does: the model stops at its next step, `stats`
   *  resolves with stop 'cancelled', a next() still pending ends (done). */
  return(value?: unknown): Promise<IteratorResult<GeneratedToken>>;
  /** return(), then rejects with `e`. */
  throw(e?: unknown): Promise<IteratorResult<GeneratedToken>>;
  /** The same items as a ReadableStream, pulled one at a time (flow control holds);
   *  cancelling the stream cancels the generation, a failure errors the stream. Read the
   *  generation either this way or as an iterator, not both. */
  toReadableStream(): ReadableStream<GeneratedToken>;
}

/** What `model.info()` returns: exactly these fields (the wasm side's, then `threads` and `load`). */
export interface ModelInfo extends WasmModelInfo {
  /** CPU threads: how many the CPU backend uses (`n`), how many were running when the load
   *  ended (`running`: the rest join as they start), which build was loaded ('pkg',
   *  'pkg-threads', or their '-relaxed' twins: see LoadOptions.relaxedSimd; 'pkg-m64': the
   *  Memory64 build, 'pkg-m64-threads' its threaded twin), and why a single thread (null when threads were granted). */
  threads: { n: number; running: number; build: 'pkg' | 'pkg-threads' | 'pkg-relaxed' | 'pkg-threads-relaxed' | 'pkg-m64' | 'pkg-m64-threads'; reason: string | null };
  /** Whether the Memory64 build (wasm64, up to 16 GiB) runs the model: LoadOptions.memory64. */
  memory64: boolean;
  /** Why not (the option, the browser, the file's size), null when it runs. */
  memory64Reason: string | null;
  /** How this load went. */
  load: {
    bytes: number;
    ms: number;
    /** 'opfs': a model stored by `cache: 'opfs'`, or a checkpoint (`Model.load('opfs:name')`). */
    via: 'download' | 'cache' | 'opfs' | 'file' | 'stream';
    cached: boolean;
    /** Why the Cache API did not do what `cache` asks (a failed write: the quota; a stored
     *  copy used without revalidation, and why), or why `persist` got no answer; else null. */
    cacheNote: string | null;
    /** With `persist`: navigator.storage.persist()'s answer; null when it had not answered by
     *  the end of the load (a browser asking the user). */
    persisted?: boolean | null;
    backend: 'cpu' | 'webgpu';
    worker: boolean;
    /** How many times the load started again in a new worker (0 or 1): a worker that does
     *  not answer within 5 s of opening the CPU backend is ended and replaced once (Firefox
     *  now and then blocks a worker starting the thread pool's Web Workers; not for stream
     *  sources, which the first worker consumed). */
    workerRestarts: number;
    /** With `shared: true`: whether this tab joined a model another tab had loaded (its
     *  `bytes`, `ms`, `via` are that load's), and how many tabs held it then (this one included). */
    shared?: { joined: boolean; tabs: number };
    /** The kernel warm-up run while the file streamed (CPU models; results are the same
     *  without it): main-thread ms it took, gaps between chunks it ran in, whether it finished. */
    warmUp: { ms: number; slices: number; done: boolean };
    /** Where the engine's part of `ms` went, in ms (the worker's start is outside it):
     *  importing and instantiating the wasm build, opening the backend (WasmLoader.create:
     *  the WebGPU device, the thread pool), waiting for the next chunk of the stream, copying
     *  chunks into the loader (`chunks` of them), the warm-up between chunks, waiting after
     *  the stream for the JS engine to free the stream's chunks before the model's buffers are
     *  written (`gcWaitMs`, at most 50, or 70 when the collection came; ~25 in Chromium), building the model
     *  (WasmLoader.finish) and waiting for the pool's threads to start. */
    phases: {
      wasmMs: number; openMs: number; readWaitMs: number; feedMs: number; chunks: number;
      gcWaitMs: number; buildMs: number; threadsMs: number; warmMs: number;
    };
  };
}

/** Model.inspect's options: the model options of LoadOptions (unknown keys: code 'invalid'). */
export type InspectOptions = Pick<LoadOptions, 'backend' | 'gpuLayers' | 'nCtx' | 'nBatch' | 'nThreads' | 'kvType' | 'memory64' | 'signal' | 'stallTimeoutMs' | 'coreUrl' | 'file' | 'revision' | 'hubUrl'>;

/** One model stored by a load with `cache`. */
export interface CachedModel {
  /** The cache key: the model's absolute URL (for a Hub id, its /resolve/ URL). */
  url: string;
  /** Its size. */
  bytes: number;
  /** When it was stored (ms since the epoch); null for an entry ggweb did not write. */
  storedAt: number | null;
  /** The server's ETag (revalidation sends it as If-None-Match); null when it sent none. */
  etag: string | null;
  /** Where it is stored: the Cache API (`cache: true` or a name) or OPFS (`cache: 'opfs'`). */
  store: 'cache' | 'opfs';
}

/** Which store a Model.cache call looks in: `store` 'cache' (the Cache API cache `cache`:
 *  true or absent for 'ggweb-models', or a name) or 'opfs'. Without `store` and `cache`,
 *  both (a store missing here is skipped); `cache` with `store: 'opfs'` is 'invalid'. */
export interface CacheNameOption {
  cache?: true | string;
  store?: 'cache' | 'opfs';
}

/** Model.cache.estimate's answer. */
export interface StorageEstimateResult {
  usage?: number;
  quota?: number;
  usageDetails?: Record<string, number>;
  persisted: boolean | null;
}

/** Where save / saveLora put the file: `to: 'opfs'` writes it into the Origin Private File
 *  System as `name` (a file name: no '/', '\\', '.' or '..'), replacing one of that name, in
 *  pieces under a temporary name renamed when whole; `Model.load('opfs:' + name)` and
 *  Model.load's `{ lora: 'opfs:' + name }` read it back. */
export interface SaveToOpfs {
  to: 'opfs';
  name: string;
}

/** What save / saveLora with `to: 'opfs'` resolve to: the checkpoint's name and size. */
export interface SavedCheckpoint {
  to: 'opfs';
  name: string;
  bytes: number;
}

/** The key of a URL or Hub id, as Model.load computes it. */
export type CacheKeyOptions = CacheNameOption & Pick<LoadOptions, 'file' | 'revision' | 'hubUrl'>;

/** Model.cache: the models loads with `cache` stored (the Cache API, and OPFS for `cache:
 *  'opfs'`). Code 'unsupported' where the store asked for is missing (no Cache API: Node, a
 *  page that is not https or localhost; no OPFS: the same, or a browser without
 *  navigator.storage.getDirectory), naming why. */
export interface ModelCache {
  /** Every stored model, each store's in the order stored (the Cache API's first). */
  list(options?: CacheNameOption | null): Promise<CachedModel[]>;
  /** Whether a copy of `source` (a URL, relative to the page, or a Hub id with { file }) is stored. */
  has(source: string | URL, options?: CacheKeyOptions | null): Promise<boolean>;
  /** Removes the stored copy of `source`; true when there was one. */
  delete(source: string | URL, options?: CacheKeyOptions | null): Promise<boolean>;
  /** Deletes the whole cache (and/or OPFS's stored models); true when one existed. */
  clear(options?: CacheNameOption | null): Promise<boolean>;
  /** navigator.storage.estimate() for this origin (bytes used and allowed, for all its storage),
   *  with navigator.storage.persisted() (null where absent); with `store`, also the bytes the
   *  models stored there take. */
  estimate(): Promise<StorageEstimateResult>;
  estimate(options: { store: 'cache' | 'opfs' }): Promise<StorageEstimateResult & { store: 'cache' | 'opfs'; bytes: number }>;
}

/** What Model.inspect read of a GGUF header, before any weight is downloaded (the wasm side's report, then `source`). */
export interface InspectResult extends WasmInspectResult {
  /** How it was read: bytes fetched or sliced, requests made, whether Range was honoured. */
  source: { via: 'download' | 'file' | 'bytes' | 'stream'; bytesRead: number; size: number | null; requests: number; ranged: boolean | null; complete: boolean };
  /** Whether `fits` was planned against the Memory64 build (as a load with the same
   *  `memory64` option would run it: LoadOptions.memory64), else against wasm32's 4 GiB. */
  memory64: boolean;
}

/**
 * Every method checks on the calling thread that its arguments can cross to the worker and
 * into wasm (below), and the wasm side's parser checks their values (ranges, names; a
 * message naming the option and the value); it fails with a GgwebError only, with the codes
 * listed under @throws. An options argument may be omitted, `undefined` or `null` (no options); any
 * other non-object, an unknown key (symbol keys and `__proto__` included) or a value of
 * the wrong type is 'invalid', named. Values are plain data: a function, symbol, BigInt,
 * class instance (an AbortSignal outside `signal`), a cyclic object or a non-finite number
 * is 'invalid'; so is any argument whose reading throws (a getter or Proxy trap that
 * throws, a revoked Proxy), naming it. Each value is read once, when checked.
 * The long calls (score, trace, run, patch, logitLens, attribute, sae.encode) take a
 * `signal`: aborting it stops the call at its next step with 'aborted'; dispose() during
 * one stops it the same way, with 'disposed'.
 * Calls made while a load, generation, logits, score or trace call is running on the
 * model fail with 'busy' (tokenize and detokenize too); after a generation is stopped
 * (`break`, `return()`, abort) the next call waits for its last step instead. Every method
 * of a disposed model fails with 'disposed'.
 */
export declare class Model {
  /**
   * Streams a GGUF model in and builds it; never holds the whole file in JS memory.
   * @throws GgwebError 'invalid' (a bad source, option or value), 'http', 'network',
   *   'timeout' (no headers or no data for stallTimeoutMs), 'format' (not a model this
   *   runtime reads), 'unsupported' (no WebGPU, no wasm module, over the memory budget:
   *   details.needed and details.budget), 'aborted', 'worker'.
   */
  static load(source: ModelSource, options?: LoadOptions | null): Promise<Model>;
  /** The models stored by loads with `cache`: list, has, delete, clear, estimate. */
  static readonly cache: ModelCache;
  /**
   * Reads only the header (Range requests where the server allows them, else the download
   * is cancelled after the tensor infos): hyperparameters, tensors, memory plan, and fit.
   * A bad or truncated header rejects with code 'format', as Model.load does.
   * @throws GgwebError 'invalid', 'http', 'network', 'timeout', 'format', 'unsupported', 'aborted'.
   */
  static inspect(source: ModelSource, options?: InspectOptions | null): Promise<InspectResult>;
  private constructor();
  readonly disposed: boolean;
  readonly inWorker: boolean;
  /** @throws GgwebError 'disposed'. */
  info(): ModelInfo;
  /**
   * 'busy' while a generation or another call runs on the model: a page that tokenizes
   * meanwhile keeps a `Tokenizer` (`ggweb/tokenizer`, the same ids, no model).
   * @throws GgwebError 'invalid' (not a string, a bad option), 'busy', 'disposed'.
   */
  tokenize(text: string, options?: { special?: boolean } | null): Promise<Uint32Array>;
  /** @throws GgwebError 'invalid' (not token ids, an id outside the vocabulary), 'busy', 'disposed'. */
  detokenize(ids: ArrayLike<number>): Promise<string>;
  /** Next-token logits after `ids`. Uses the prompt cache (equal to a fresh evaluation
   *  within 1e-4) and leaves `ids` in it.
   *  @throws GgwebError 'invalid' (bad or no ids, longer than the context), 'busy', 'disposed', 'device_lost'. */
  logits(ids: ArrayLike<number>): Promise<Float32Array>;
  /** The GGUF file of the current weights (after `train`, the trained ones) in llama.cpp's GPT-2
   *  layout and metadata (tokenizer included), which llama.cpp and `Model.load` read. `type`
   *  (default 'f32') is the matrices' type; norms, biases and `position_embd` stay F32.
   *  @throws GgwebError 'invalid' (an unknown key, a bad type), 'busy' (a training run or
   *  another call runs), 'disposed', 'unsupported' (the file does not fit in memory; weights on WebGPU;
   *  with `to: 'opfs'`: no OPFS, or a write over the quota, nothing left behind).
   *  With `{ to: 'opfs', name }` the file goes into the Origin Private File System instead (see
   *  SaveToOpfs), copied out of wasm memory and written 4 MiB at a time on the engine's side
   *  (never whole in JS memory; in a worker it never crosses to the page).
   *  `optimizer: true` (type 'f32' or 'f16') adds the optimizer state of the model's last
   *  `train` (a ggweb checkpoint: llama.cpp refuses it; save without it for llama.cpp);
   *  `Model.load` of that file resumes it on the next `train` ('invalid' when the model has
   *  no optimizer state, or only its adapter's: saveLora({ optimizer: true })). */
  save(options: SaveParams & SaveToOpfs): Promise<SavedCheckpoint>;
  save(options?: SaveParams | null): Promise<Uint8Array>;
  /** One batched pass, no sampling: how likely the model found each token of `input`.
   *  @throws GgwebError 'invalid', 'busy', 'aborted' (options.signal), 'disposed',
   *  'unsupported' (its hooks or captures need more memory than is left), 'device_lost'. */
  score(input: ModelInput, options?: ScoreOptions | null): Promise<ScoreResult>;
  /** One pass from position 0 keeping the requested taps (and only those) alive.
   *  @throws GgwebError 'invalid' (an unknown tap, no taps), 'busy', 'aborted' (options.signal), 'disposed',
   *  'unsupported' (the taps need more memory than is left), 'device_lost'. */
  trace(input: ModelInput, options: TraceOptions): Promise<TraceResult>;
  /** One forward pass from position 0 with hooks and captures (TransformerLens's names and
   *  meanings). @throws GgwebError 'invalid' (a hook or capture that names nothing, out of
   *  range or listed twice, a value of the wrong length, more than 2^28 hooked values),
   *  'busy', 'aborted' (options.signal), 'disposed', 'unsupported' (its hooks or captures
   *  need more memory than is left), 'device_lost'.
   *  With `grad: { of, wrt }` the same pass runs backward too: the result gains `metric` and
   *  `grads` (d metric / d each `wrt` hook point's output, after the `hooks` at that point, in
   *  TransformerLens's shape; `'*'` is every hook point); a bad `of` or `wrt` (an unknown hook
   *  point or metric, a token out of the vocabulary, `wrt` empty or missing) is 'invalid'
   *  naming it, and a pass whose gradients do not fit in the memory left is 'unsupported'. */
  run(input: ModelInput, options?: RunOptions | null): Promise<RunResult>;
  /** Input attribution on the token embeddings (`hook_embed`; position embeddings unchanged):
   *  per token, 'gradient' (‖∂m/∂e‖₂), 'gradientXInput' (Σ e·∂m/∂e) or 'integratedGradients'
   *  (`steps` passes, default 32, midpoint rule from the baseline 0; `delta` is the completeness gap).
   *  @throws GgwebError 'invalid' (an unknown method or metric, a token out of the vocabulary),
   *  'busy', 'aborted' (options.signal), 'disposed', 'unsupported' (the gradient pass needs more
   *  memory than is left), 'device_lost'. */
  saliency(input: ModelInput, options: SaliencyOptions): Promise<SaliencyResult>;
  /** An activation patching sweep; clean and corrupted must have the same length.
   *  `method: 'attribution'` estimates every cell to first order (attribution patching: two
   *  forward passes and one backward pass) instead of running it ('exact', the default).
   *  @throws GgwebError 'invalid', 'busy', 'aborted' (options.signal), 'disposed',
   *  'unsupported' (its hooks or captures need more memory than is left), 'device_lost'. */
  patch(clean: ModelInput, corrupted: ModelInput, options: PatchOptions): Promise<PatchResult>;
  /** The logit lens: every layer's residual through ln_final (its own statistics) and the unembedding.
   *  @throws GgwebError 'invalid', 'busy', 'aborted' (options.signal), 'disposed',
   *  'unsupported' (its hooks or captures need more memory than is left), 'device_lost'. */
  logitLens(input: ModelInput, options?: LogitLensOptions | null): Promise<LogitLensResult>;
  /** Direct logit attribution through the final LayerNorm's cached scale.
   *  @throws GgwebError 'invalid', 'busy', 'aborted' (options.signal), 'disposed',
   *  'unsupported' (its hooks or captures need more memory than is left), 'device_lost'. */
  attribute(input: ModelInput, options: AttributeOptions): Promise<AttributeResult>;
  /** A folder URL ending in '/' (cfg.json, sae_weights.safetensors) or { cfg, weights }.
   *  From a URL the weights stream chunk by chunk into the model's wasm side (never held
   *  whole in JS memory); a bad file fails as soon as its bytes show it.
   *  @throws GgwebError 'format' (a bad file, naming what), 'http' (a file the server answered
   *  with an error status: `status` and `url` in its details), 'network', 'timeout' (no data for
   *  stallTimeoutMs), 'aborted', 'invalid' (a folder URL that is not http(s), a cfg object
   *  that is not plain data, detached weights; also an SAE made for another model: its hook
   *  is not a hook point of this one, or has another number of values than `d_in`),
   *  'disposed' (also when the model is disposed during the load: at once, the requests
   *  ended). */
  loadSae(source: string | { cfg: object | string; weights: ArrayBuffer | Uint8Array }, options?: LoadSaeOptions | null): Promise<Sae>;
  /** Streams a continuation; the KV cache is reused for the longest prefix shared with the
   *  tokens it holds (stats.cachedTokens; `reusePrompt: false` turns that off). The model
   *  runs at most 4 tokens ahead of the reader (see Generation). Unknown option keys fail
   *  with code 'invalid'.
   *  A bad argument makes the first next() reject (a `signal` that is not an AbortSignal
   *  throws at once).
   *  @throws GgwebError 'invalid' (bad prompt or option, longer than the context), 'busy',
   *    'aborted', 'disposed', 'unsupported' (its hooks need more memory than is left), 'device_lost'. */
  generate(prompt: ModelInput, options?: GenerateOptions | null): Generation;
  /** Full fine-tuning: trains every weight tensor of the model (as the file has them: a tied
   *  head is `token_embd`, one tensor) on `data` with PyTorch's AdamW or SGD, gradient clipping
   *  and Hugging Face's warmup schedules, one item per update; on the CPU backend. The weights
   *  become F32 (F16/BF16 files are converted once) and stay trained for every later call.
   *  Aborting `signal`, `break`, return() or dispose() stop it after the update in progress
   *  (the loop ends without an error; `stats` says 'cancelled').
   *  A bad argument makes the first next() reject.
   *  With `lora: { rank, alpha = rank, targets = ['attn_qkv'] }` (targets from 'attn_qkv',
   *  'attn_output', 'ffn_up', 'ffn_down') it trains a LoRA adapter instead, on any file,
   *  quantized included: each targeted block matrix computes `W·x + (alpha/rank)·B·A·x`, A
   *  Kaiming-uniform from `seed` as PEFT draws it, B zero (so the first loss is the base
   *  model's); the weights are never written. The adapter stays on the model for every later
   *  call until dropLora(); a later `lora` run of the same rank, alpha and targets trains it on.
   *  @throws GgwebError 'invalid' (unknown option, steps missing, lr not a finite number,
   *    seqLen > nCtx, empty data, sequences not seqLen long; lora: rank 0 or above n_embd,
   *    alpha not a finite number above 0, an unknown or repeated target; a `lora` of another
   *    shape than the model's adapter, or full training while it has one: dropLora() first;
   *    resuming a checkpoint's optimizer state with another optimizer, adapter or tensor set),
   *    'unsupported' (full training of a quantized weight, named; a WebGPU model; a plan over
   *    the memory budget, with the sizes), 'busy', 'disposed'. */
  train(data: TrainData, options: TrainOptions): Training;
  /** The model's LoRA adapter as a llama.cpp LoRA adapter GGUF (`general.type` 'adapter',
   *  `adapter.type` 'lora', `adapter.lora.alpha`, `blk.N.<target>.weight.lora_a` [n_in, rank] /
   *  `.lora_b` [rank, n_out]) that `llama-cli --lora`, llama-cpp-python's `lora_path` and
   *  `Model.load(base, { lora })` apply to the base file; `type` 'f32' (default) or 'f16'.
   *  @throws GgwebError 'invalid' (no adapter on the model, an unknown option or type),
   *  'busy', 'disposed'. With `{ to: 'opfs', name }`: into OPFS, as save. `optimizer: true`
   *  adds the adapter's optimizer state (a ggweb checkpoint, which llama.cpp refuses), resumed
   *  by the next `train` of a model that `Model.load(base, { lora })` puts it on. */
  saveLora(options: SaveLoraParams & SaveToOpfs): Promise<SavedCheckpoint>;
  saveLora(options?: SaveLoraParams | null): Promise<Uint8Array>;
  /** Removes the model's LoRA adapter: later calls run the base weights (the base model's
   *  logits exactly). Resolves to whether there was one.
   *  @throws GgwebError 'busy' (while a call or a training run holds the model), 'disposed'. */
  dropLora(): Promise<boolean>;
  /** For tests of the recovery path: destroys a WebGPU model's device as a driver reset
   *  would (a running generation fails at its next step). Code 'unsupported' on the CPU. */
  _debugLoseDevice(): Promise<boolean>;
  /** Frees the model and ends its worker (and the worker's CPU threads); safe to call
   *  again or during any other call, which then fails with 'disposed' or ends. */
  dispose(): Promise<void>;
}

export declare function formatBytes(n: number | null): string;

export default Model;
