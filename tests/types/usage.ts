// Uses every export, method, option and result field of ggweb's public API as an app
// would, through the package's own name (package.json "exports" -> web/ggweb.d.ts).
// Compiled by tests/types/types.test.mjs with `tsc --strict --noEmit` in npm test; never run.
// The mapped types below (Required<…>, { [K in keyof …] }) make this file stop compiling
// when an option, method or field is added to ggweb.d.ts and not exercised here.
import ggwebDefault, {
  ERROR_CODES, GgwebError, Model, formatBytes,
  type GenerateOptions, type GenerateStats, type GeneratedToken, type Generation, type GgwebErrorCode,
  type Hparams, type InspectOptions, type InspectResult, type LoadOptions, type LoadProgress, type ModelInfo,
  type ModelInput, type ModelSource, type ScoreOptions, type ScoreResult, type TraceOptions, type TraceResult,
  type WebGpuStats, type CachedModel, type SavedCheckpoint, type SaveToOpfs, type StorageEstimateResult,
  type Hook, type RunOptions, type RunResult, type PatchOptions, type PatchResult, type LogitLensOptions,
  type LogitLensResult, type AttributeOptions, type AttributeResult, type LoadSaeOptions, type SaeEncodeOptions,
  type SaeEncoded, Sae, type Metric, type GradSpec, type SaliencyOptions, type SaliencyResult,
  type TrainOptions, type Training, type TrainStep, type TrainStats, type TrainData,
} from 'ggweb';
import {
  Tokenizer, GgwebError as TokenizerGgwebError,
  type EncodeOptions, type EncodeOffsetsOptions, type EncodedWithOffsets, type TokenizerLoadOptions,
} from 'ggweb/tokenizer';

const ac = new AbortController();

const allLoad: Required<LoadOptions> = {
  backend: 'auto', gpuLayers: -1, nCtx: 256, nBatch: 32, nThreads: 2, kvType: 'f16', relaxedSimd: false, memory64: 'auto',
  onProgress: (p: LoadProgress) => console.log(p.phase, p.loaded, p.total ?? 'unknown'),
  signal: ac.signal, cache: 'my-models', offline: false, persist: true, stallTimeoutMs: 30_000, worker: true,
  coreUrl: new URL('https://example.com/pkg/ggweb_core.js'), file: 'gpt2.Q8_0.gguf', revision: 'main', hubUrl: 'https://huggingface.co',
  lora: 'https://example.com/adapter.gguf', shared: false,
};
const allInspect: Required<InspectOptions> = {
  backend: 'cpu', gpuLayers: 0, nCtx: 128, nBatch: 8, nThreads: 1, kvType: 'f32', memory64: true, signal: ac.signal, stallTimeoutMs: 0, coreUrl: 'pkg.js',
  file: 'gpt2.Q8_0.gguf', revision: 'v1.0', hubUrl: new URL('https://hub.example.com'),
};
const allGenerate: Required<GenerateOptions> = {
  maxTokens: 8, temperature: 0.7, topK: 40, topP: 0.95, seed: 42, repeatPenalty: 1.1, repeatLastN: 64, minP: 0.05,
  logitBias: { 50256: -Infinity, 13: 2.5 }, ignoreEos: true, stop: ['\n'], topLogprobs: 3, special: false,
  reusePrompt: false, signal: ac.signal, n: 1, numBeams: 1, lengthPenalty: 1,
  hooks: [{ at: 'blocks.3.hook_resid_pre', op: 'add', value: new Float32Array(768) }],
};
const allHook: Required<Hook> = { at: 'blocks.0.attn.hook_z', op: 'set', head: [1, 2], pos: -1, index: 0, value: [1, 2] };
const metrics: Metric[] = [
  { logitDiff: { answer: 5335, against: 1757, pos: -1 } }, { logitDiff: { answer: 5335, against: 1757 } },
  { logprob: { token: 13, pos: 2 } }, { logprob: { token: 13 } }, { loss: 'mean' },
];
const allGrad: Required<GradSpec> = { of: metrics[0], wrt: ['hook_embed', 'blocks.*.attn.hook_z'] };
const everyGrad: GradSpec = { of: metrics[4], wrt: '*' };
const allRun: Required<RunOptions> = { capture: ['blocks.*.hook_resid_post'], hooks: [allHook, { at: 'hook_embed', op: 'zero' }], grad: allGrad, special: false, signal: ac.signal };
const allPatch: Required<PatchOptions> = { at: 'resid_pre', answer: 5335, against: 1757, method: 'attribution', special: false, signal: ac.signal };
const allSaliency: Required<SaliencyOptions> = { of: metrics[2], method: 'integratedGradients', steps: 16, special: false, signal: ac.signal };
const allLens: Required<LogitLensOptions> = { topK: 5, special: false, signal: ac.signal };
const allAttribute: Required<AttributeOptions> = { answer: 5335, against: 1757, pos: -1, special: false, signal: ac.signal };
const allLoadSae: Required<LoadSaeOptions> = { signal: ac.signal, stallTimeoutMs: 10_000 };
const allSaeEncode: Required<SaeEncodeOptions> = { topK: 3, special: false, signal: ac.signal };

function readRun(r: RunResult): number {
  const c = r.cache['blocks.0.hook_resid_post'];
  const g = r.grads?.['hook_embed'];
  return r.tokens[0] + r.logits[0] + (c ? c.shape[0] + c.data[0] : 0) + (r.metric ?? 0) + (g ? g.shape[0] + g.data[0] : 0);
}
function readSaliency(r: SaliencyResult): number {
  return r.tokens[0] + r.scores[0] + r.metric + (r.delta ?? 0);
}
function readPatch(r: PatchResult): number {
  return r.shape[0] + r.cells[0] + r.cleanDiff + r.corruptedDiff;
}
function readLens(r: LogitLensResult): number {
  return r.tokens[0] + r.layers + r.top[0][0][0].token + r.top[0][0][0].logprob + r.logprobs[0][0];
}
function readAttribution(r: AttributeResult): number {
  return r.embed + r.posEmbed + r.heads[0] + r.attnBias[0] + r.mlps[0] + r.lnBias + r.total;
}
async function useSae(sae: Sae): Promise<number> {
  const e: SaeEncoded = await sae.encode('Hello', allSaeEncode);
  const row: Float32Array = await sae.decoderRow(3);
  const n = sae.dIn + sae.dSae + sae.hookName.length + (sae.applyBDecToInput ? 1 : 0);
  await sae.dispose();
  return e.tokens[0] + e.top[0][0].index + e.top[0][0].value + e.l0[0] + e.mse[0] + row[0] + n;
}
const allScore: Required<ScoreOptions> = { topK: 5, special: true, hooks: [{ at: 'blocks.9.attn.hook_z', op: 'zero', head: 6 }, { at: 'blocks.0.ln1.hook_scale', op: 'scale', value: 2 }], signal: ac.signal };
const allTrace: Required<TraceOptions> = { taps: ['attn', 'hidden', 'l0.ffn_gelu'], special: false, signal: ac.signal };

const sources: ModelSource[] = [
  'https://example.com/gpt2.gguf', new URL('https://example.com/gpt2.gguf'), new Blob([]), new Uint8Array(4), new ArrayBuffer(4),
  new Response(new Uint8Array(4)), new ReadableStream<Uint8Array>(),
];
const inputs: ModelInput[] = ['Hello', [15496, 11], new Uint32Array([15496])];

// Every field of the results: a Record over keyof makes a new field a compile error here.
function readHparams(h: Hparams): number[] {
  const camel: Record<Exclude<keyof Hparams, `${string}_${string}`>, number> = {
    nVocab: h.nVocab, nCtx: h.nCtx, nCtxTrain: h.nCtxTrain, nEmbd: h.nEmbd, nHead: h.nHead, nLayer: h.nLayer, nFf: h.nFf,
    nBatch: h.nBatch, eps: h.eps,
  };
  // The deprecated duplicates still type-check (editors strike them through).
  const snake: Record<Extract<keyof Hparams, `${string}_${string}`>, number> = {
    n_vocab: h.n_vocab, n_ctx: h.n_ctx, n_ctx_train: h.n_ctx_train, n_embd: h.n_embd, n_head: h.n_head, n_layer: h.n_layer,
    n_ff: h.n_ff, n_batch: h.n_batch,
  };
  return [...Object.values(camel), ...Object.values(snake)];
}

function readInfo(info: ModelInfo): unknown[] {
  const all: Record<keyof ModelInfo, unknown> = {
    arch: info.arch satisfies 'gpt2',
    hparams: readHparams(info.hparams),
    backend: info.backend satisfies 'cpu' | 'webgpu',
    memory: info.memory.weights + info.memory.kv + info.memory.compute + info.memory.kvType.length,
    split: [info.split.gpuLayers, info.split.embeddingsOnGpu, info.split.backends.join(), info.split.splits,
      info.split.copiesPerToken, info.split.copyBytesPerToken,
      Object.values(info.split.bytesPerBackend).map((b) => b.weights + b.kv + b.compute)],
    backendNote: info.backendNote?.toUpperCase() ?? null,
    tokenizer: [info.tokenizer.nVocab, info.tokenizer.n_vocab, info.tokenizer.bos ?? -1, info.tokenizer.eos ?? -1],
    wasmMemory: info.wasmMemory.heapBase + info.wasmMemory.atLoaderStart + info.wasmMemory.afterLoad + info.wasmMemory.now,
    // Every build a load can run on, the Memory64 twins included (a narrowing switch over them).
    threads: [info.threads.n, info.threads.running, info.threads.build satisfies string, info.threads.reason ?? '',
      info.threads.build === 'pkg-m64-threads' || info.threads.build === 'pkg-m64' ? 64 : 32],
    memory64: info.memory64 satisfies boolean,
    memory64Reason: info.memory64Reason ?? '',
    load: [info.load.bytes, info.load.ms, info.load.via, info.load.cached, info.load.backend, info.load.worker,
      info.load.workerRestarts, info.load.cacheNote ?? '', info.load.persisted ?? null, info.load.warmUp.ms, info.load.warmUp.slices, info.load.warmUp.done,
      info.load.phases.wasmMs, info.load.phases.openMs, info.load.phases.readWaitMs, info.load.phases.feedMs,
      info.load.phases.chunks, info.load.phases.gcWaitMs, info.load.phases.buildMs, info.load.phases.threadsMs, info.load.phases.warmMs,
      info.load.shared?.joined ?? false, info.load.shared?.tabs ?? 0],
  };
  return Object.values(all);
}

function readWebgpu(w: WebGpuStats | undefined): number {
  return w ? w.dispatches + w.submits + w.readbacks + w.readbackBytes + w.encodeMs : 0;
}

function readStats(s: GenerateStats | null): string {
  if (!s) return 'failed';
  const all: Record<keyof GenerateStats, unknown> = {
    promptTokens: s.promptTokens, cachedTokens: s.cachedTokens, tokens: s.tokens, promptMs: s.promptMs, genMs: s.genMs,
    stop: s.stop satisfies 'eos' | 'maxTokens' | 'contextFull' | 'stop' | 'cancelled',
    cpuJobs: (s.cpuJobs?.split ?? 0) + (s.cpuJobs?.onWorkers ?? 0), webgpu: readWebgpu(s.webgpu),
    beams: (s.beams ?? []).map((b) => (b.tokens satisfies Uint32Array)[0] + b.score),
  };
  return JSON.stringify(all);
}

function readScore(r: ScoreResult): number {
  const all: Record<keyof ScoreResult, number> = {
    tokens: r.tokens[0], logprobs: r.logprobs[0], ranks: r.ranks[0], entropies: r.entropies[0],
    top: r.top[0][0].token + r.top[0][0].logprob, cachedTokens: r.cachedTokens, webgpu: readWebgpu(r.webgpu),
  };
  return Object.values(all).reduce((a, b) => a + b, 0);
}

function readTrace(t: TraceResult): number {
  const all: Record<keyof TraceResult, number> = {
    tokens: t.tokens.length, attn: t.attn?.[0].length ?? 0, hidden: t.hidden?.[0][0] ?? 0,
    nodes: Object.values(t.nodes).reduce((n, v) => n + v.shape.length + v.data.length, 0), memory: t.memory.compute,
  };
  return Object.values(all).reduce((a, b) => a + b, 0);
}

function readInspect(r: InspectResult): unknown[] {
  const all: Record<keyof InspectResult, unknown> = {
    arch: r.arch, hparams: readHparams(r.hparams), backend: r.backend, backendNote: r.backendNote,
    file: r.file.dataOffset + (r.file.size ?? 0) + r.file.alignment,
    tensors: r.tensors.map((t) => `${t.name} ${t.type} ${t.ne.join('x')} ${t.bytes}`),
    types: Object.entries(r.types).map(([k, v]) => `${k} ${v.count} ${v.bytes}`),
    memory: [r.memory.weights, r.memory.kv, r.memory.compute ?? 0, r.memory.gradient ?? 0, r.memory.total, r.memory.kvType,
      Object.values(r.memory.byBackend).map((b) => b.weights + b.kv + b.compute)],
    fits: [r.fits.ok, r.fits.reason, r.fits.wasmSpaceLeft, Object.values(r.fits.limits).map((l) => (l.budget ?? 0) + l.maxBufferSize)],
    source: [r.source.via, r.source.bytesRead, r.source.size, r.source.requests, r.source.ranged, r.source.complete],
    memory64: r.memory64 satisfies boolean,
  };
  return Object.values(all);
}

function readToken(t: GeneratedToken): string {
  return `${t.seq satisfies number} ${t.token} ${t.text} ${t.logprob ?? ''} ${(t.top ?? []).map((e) => `${e.token}:${e.text}:${e.logprob}`).join()}`;
}

// Every instance member, called or read: a new method is a compile error until it is here.
const members: { [K in keyof Model]: (m: Model) => unknown } = {
  disposed: (m) => m.disposed satisfies boolean,
  inWorker: (m) => m.inWorker satisfies boolean,
  info: (m) => readInfo(m.info()),
  tokenize: async (m) => (await m.tokenize('Hello', { special: true })) satisfies Uint32Array,
  detokenize: async (m) => (await m.detokenize([15496])) satisfies string,
  logits: async (m) => (await m.logits(new Uint32Array([15496]))) satisfies Float32Array,
  score: async (m) => readScore(await m.score(inputs[0], allScore)),
  trace: async (m) => readTrace(await m.trace(inputs[1], allTrace)),
  run: async (m) => readRun(await m.run(inputs[1], allRun)) + readRun(await m.run(inputs[1], { grad: everyGrad })),
  saliency: async (m) => readSaliency(await m.saliency(inputs[0], allSaliency)) + readSaliency(await m.saliency('Hi', { of: metrics[1], method: 'gradient' })),
  patch: async (m) => readPatch(await m.patch('When Mary and John', 'When John and Mary', allPatch)),
  logitLens: async (m) => readLens(await m.logitLens(inputs[0], allLens)),
  attribute: async (m) => readAttribution(await m.attribute(inputs[0], allAttribute)),
  loadSae: async (m) => useSae(await m.loadSae('https://example.com/sae/', allLoadSae)),
  generate: (m) => m.generate(inputs[2], allGenerate),
  train: (m) => training(m),
  save: async (m) => (await m.save({ type: 'q8_0' })) satisfies Uint8Array,
  dropLora: async (m) => (await m.dropLora()) satisfies boolean,
  saveLora: async (m) => (await m.saveLora({ type: 'f16' })) satisfies Uint8Array,
  _debugLoseDevice: async (m) => (await m._debugLoseDevice()) satisfies boolean,
  dispose: async (m) => (await m.dispose()) satisfies void,
};
// And every static one.
const statics: { [K in Exclude<keyof typeof Model, 'prototype'>]: () => Promise<unknown> } = {
  load: () => Model.load(sources[0], allLoad),
  inspect: async () => readInspect(await Model.inspect(sources[1], allInspect)),
  cache: async () => {
    const stored: CachedModel[] = await Model.cache.list({ cache: 'my-models' });
    const rows = stored.map((m) => [m.url, m.bytes, m.storedAt ?? 0, m.etag ?? '', m.store] satisfies [string, number, number, string, 'cache' | 'opfs']);
    const inOpfs: CachedModel[] = await Model.cache.list({ store: 'opfs' });
    const hasOpfs: boolean = await Model.cache.has('https://example.com/gpt2.gguf', { store: 'opfs' });
    const gone: boolean = await Model.cache.delete('https://example.com/gpt2.gguf', { store: 'cache', cache: 'my-models' });
    const wiped: boolean = await Model.cache.clear({ store: 'opfs' });
    const byStore = await Model.cache.estimate({ store: 'opfs' });
    const opfsBytes: [number, 'cache' | 'opfs'] = [byStore.bytes, byStore.store];
    const plain: StorageEstimateResult = byStore;
    const opfsLoad = await Model.load('https://example.com/gpt2.gguf', { cache: 'opfs', offline: true });
    const via: 'download' | 'cache' | 'opfs' | 'file' | 'stream' = opfsLoad.info().load.via;
    const has: boolean = await Model.cache.has('QuantFactory/gpt2-GGUF', { file: 'gpt2.Q8_0.gguf', revision: 'main', hubUrl: 'https://huggingface.co' });
    const deleted: boolean = await Model.cache.delete(new URL('https://example.com/gpt2.gguf'), null);
    const cleared: boolean = await Model.cache.clear({ cache: true });
    const e = await Model.cache.estimate();
    return [rows, has, deleted, cleared, e.usage ?? 0, e.quota ?? 0, e.persisted ?? false, await Model.cache.list(),
      inOpfs, hasOpfs, gone, wiped, opfsBytes, plain.persisted, via];
  },
};

export async function app(): Promise<string> {
  const model: Model = await ggwebDefault.load('https://example.com/gpt2.gguf', { nCtx: 512 });
  await Model.load(sources[2]);
  await Model.load(sources[3], null);
  await Model.inspect(sources[4], null);
  for (const f of Object.values<(m: Model) => unknown>(members)) await f(model);
  for (const f of Object.values(statics)) await f();

  // Streaming, the documented ways.
  let out = '';
  const gen: Generation = model.generate('Hello, my name is', { maxTokens: 32 });
  for await (const { text } of gen) out += text;
  out += readStats(await gen.stats);
  const g2 = model.generate([15496, 11], null);
  const first: IteratorResult<GeneratedToken> = await g2.next();
  if (!first.done) out += readToken(first.value);
  await g2.return(undefined);
  const cancelled: GenerateStats | null = await g2.stats;
  out += cancelled?.stop === 'cancelled' ? cancelled.tokens : 0;
  const stream: ReadableStream<GeneratedToken> = model.generate('Hi', { reusePrompt: false }).toReadableStream();
  const texts = stream.pipeThrough(new TransformStream<GeneratedToken, string>({ transform: (t, c) => c.enqueue(t.text) }));
  const reader = texts.getReader();
  const r = await reader.read();
  if (!r.done) out += r.value;
  await reader.cancel();
  await model.generate('x').throw(new Error('stop')).catch(() => undefined);

  // Errors.
  try {
    await Model.load('https://example.com/missing.gguf');
  } catch (e) {
    if (e instanceof GgwebError) {
      const code: GgwebErrorCode = e.code;
      out += `${e.name} ${code} ${e.message} ${e.details?.status ?? ''} ${e.details?.url ?? ''} ${e.details?.loaded ?? ''} ${e.details?.total ?? ''}`;
      if (ERROR_CODES.includes(code)) out += formatBytes(e.details?.loaded ?? null) + formatBytes(1024);
    }
  }
  await model.dispose();
  return out;
}

// model.train (issue 39): full fine-tuning, its items and stats.
export async function training(model: Model): Promise<number> {
  const opts: TrainOptions = {
    seqLen: 16, batchSize: 2, steps: 20, seed: 1, gradClip: 1,
    optimizer: { type: 'adamw', lr: 3e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 },
    lrSchedule: { warmup: 3, decay: 'cosine' }, signal: new AbortController().signal,
  };
  const run: Training = model.train([new Uint32Array(16), [1, 2, 3]], opts);
  let last = 0;
  for await (const s of run) {
    const item: TrainStep = s;
    last = item.loss + item.step + item.tokens + item.tokensPerSecond;
  }
  const stats: TrainStats | null = await run.stats;
  const sgd = model.train(['some text', 'more'], { steps: 1, optimizer: { type: 'sgd', lr: 0.1, momentum: 0.9 } });
  const stream: ReadableStream<TrainStep> = sgd.toReadableStream();
  const d: TrainData = 'text';
  const lora: TrainOptions = { steps: 2, lora: { rank: 4, alpha: 8, targets: ['attn_qkv', 'attn_output', 'ffn_up', 'ffn_down'] } };
  for await (const s of model.train(d, lora)) last += s.loss;
  const adapter: Uint8Array = await model.saveLora();
  const again = await Model.load('https://example.com/gpt2.gguf', { lora: adapter, backend: 'cpu' });
  await Model.load('https://example.com/gpt2.gguf', { lora: 'https://example.com/adapter.gguf' });
  const dropped: boolean = await again.dropLora();
  // Checkpoints in OPFS (issue 39 item 3).
  const to: SaveToOpfs = { to: 'opfs', name: 'tuned' };
  const ck: SavedCheckpoint = await model.save({ type: 'f16', ...to });
  const ckLora: SavedCheckpoint = await model.saveLora({ to: 'opfs', name: 'adapter' });
  // Optimizer checkpoints: the optimizer state beside the weights / adapter, resumed by train.
  const ckOpt: SavedCheckpoint = await model.save({ type: 'f32', optimizer: true, ...to });
  const loraOpt: Uint8Array = await model.saveLora({ type: 'f32', optimizer: true });
  const fromOpfs = await Model.load(`opfs:${ck.name}`, { lora: `opfs:${ckLora.name}` });
  last += ck.bytes + ckLora.bytes + ckOpt.bytes + loraOpt.length + (ck.to === 'opfs' ? 1 : 0) + (fromOpfs ? 1 : 0);
  if (dropped) last += 1;
  return last + (stats?.steps ?? 0) + (stats?.stop === 'cancelled' ? 1 : 0) + (stream ? 1 : 0) + d.length;
}

// ggweb/tokenizer (issue 40): every static, member and option of Tokenizer.
const allTokenizerLoad: Required<TokenizerLoadOptions> = {
  signal: ac.signal, stallTimeoutMs: 0, file: 'gpt2.Q8_0.gguf', revision: 'main', hubUrl: 'https://huggingface.co',
};
const tokenizerMembers: { [K in keyof Tokenizer]: (t: Tokenizer) => unknown } = {
  nVocab: (t) => t.nVocab satisfies number,
  eos: (t) => t.eos satisfies number | null,
  encode: (t) => {
    const ids: Uint32Array = t.encode('Hello world');
    const opts: Required<EncodeOptions> = { special: true, offsets: false };
    const withOffsets: EncodedWithOffsets = t.encode('Hello world', { offsets: true, special: false } satisfies EncodeOffsetsOptions);
    return ids.length + t.encode('x', opts).length + t.encode('y', null).length + withOffsets.ids.length + withOffsets.offsets[1];
  },
  count: (t) => t.count('Hello') satisfies number,
  decode: (t) => t.decode([15496, 995]) satisfies string,
  dispose: (t) => t.dispose() satisfies void,
};
export async function tokenizerEntry(bytes: Uint8Array): Promise<number> {
  const a = await Tokenizer.gpt2();
  const b = await Tokenizer.load(bytes, allTokenizerLoad);
  const c = await Tokenizer.load('gpt2/gpt2.gguf', { file: 'model.gguf' });
  await Tokenizer.gpt2({ signal: ac.signal });
  try {
    await Tokenizer.load(new Blob([]));
  } catch (e) {
    if (e instanceof TokenizerGgwebError && e instanceof GgwebError) return e.code.length;
  }
  return Object.values(tokenizerMembers).map((f) => f(a)).length + b.nVocab + c.count('x');
}
