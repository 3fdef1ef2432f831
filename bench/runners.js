// One benchmark row per call, run in a fresh page (scripts/bench.mjs opens a new browser context
// for each). Every runner measures the same way, from JS, around its runtime's public API:
//   load      from the load call to a usable model (fetching the file over localhost included)
//   ttft      from the generate call to the first generated token (prompt evaluation + one sample)
//   decode    from the first to the last generated token: (tokens - 1) / that time
// Each runner does one short warm-up generation, then `reps` timed ones on the same prompt.
//
//   const r = await RUNNERS.wllama({ model: '/models/124m-q8_0.gguf', threads: 2, prompt, tokens: 64, reps: 3 });

const now = () => performance.now();

function summarize(reps, extra) {
  // Prefill and decode are each their own median over the reps (the decode median's rep
  // gives the tokens); all reps are kept for the JSON. One rep's prefill and decode vary
  // independently on a shared machine, so the median rep by one says little of the other.
  const mid = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  const sorted = [...reps].sort((a, b) => (a.t2 - a.t1) - (b.t2 - b.t1));
  const m = sorted[Math.floor((sorted.length - 1) / 2)];
  return {
    ok: true,
    promptTokens: m.promptTokens,
    tokens: m.nTokens ?? m.ids.length,
    ttftMs: mid(reps.map((r) => r.t1 - r.t0)),
    // Generation #1 (the warm-up, right after load) and the last timed one (#4 with 3 reps).
    firstTtftMs: reps.first ? +(reps.first.t1 - reps.first.t0).toFixed(1) : null,
    lastTtftMs: +(reps.at(-1).t1 - reps.at(-1).t0).toFixed(1),
    decodeMs: m.t2 - m.t1,
    ids: m.ids,
    text: m.text,
    reps: reps.map((r) => ({ ttftMs: +(r.t1 - r.t0).toFixed(1), decodeMs: +(r.t2 - r.t1).toFixed(1), tokens: r.nTokens ?? r.ids.length })),
    ...extra,
  };
}

/** The warm-up and the timed generations; an error says which one failed. The warm-up (the
 *  first generation after load) is kept as `reps.first`: its prompt time against the last
 *  rep's is the "generate #1 vs #4" row (kernels still in V8's baseline tier, or not). */
async function timed(gen, cfg) {
  const reps = [];
  for (let i = -1; i < cfg.reps; i++) {
    try {
      const r = await gen(i < 0 ? 4 : cfg.tokens);
      if (i >= 0) reps.push(r);
      else reps.first = r;
    } catch (e) {
      const where = i < 0 ? 'warm-up generation' : `timed generation ${i + 1}`;
      throw Object.assign(new Error(`${where}: ${e?.message ?? e}`), { name: e?.name ?? 'Error', code: e?.code });
    }
  }
  return reps;
}

/** ggweb through its JS API (web/ggweb.js, mounted at /ggweb/). */
async function ggweb(cfg) {
  const { Model } = await import('/ggweb/ggweb.js');
  const t0 = now();
  const m = await Model.load(cfg.model, {
    backend: cfg.backend ?? 'cpu', worker: true, nCtx: cfg.nCtx, nBatch: cfg.nCtx, nThreads: cfg.threads ?? 1, relaxedSimd: cfg.relaxedSimd,
  });
  const loadMs = now() - t0;
  // The session keeps the previous run's tokens in its KV cache and would reuse 63 of the 64
  // prompt tokens (stats.cachedTokens): one untimed token that is not the prompt's first
  // replaces them, so every timed run evaluates the whole prompt, as the first one does.
  // (Not before the first run: nothing is cached then, and that run is the one right after load.)
  const first = (await m.tokenize(cfg.prompt))[0] ?? 0;
  let runs = 0;
  const gen = async (maxTokens) => {
    const r = { ids: [], text: '' };
    if (runs++ > 0) await m.logits([first === 0 ? 1 : 0]);
    r.t0 = now();
    const it = m.generate(cfg.prompt, { maxTokens, temperature: 0, seed: 1 });
    for await (const t of it) {
      if (r.ids.length === 0) r.t1 = now();
      r.ids.push(t.token);
      r.text += t.text;
    }
    r.t2 = now();
    r.stats = await it.stats;
    r.promptTokens = r.stats?.promptTokens;
    return r;
  };
  const reps = await timed(gen, cfg);
  const info = m.info();
  await m.dispose();
  return summarize(reps, {
    loadMs,
    backend: info.load?.backend,
    threadInfo: info.threads, // { n, running, build, reason }: what ran, not what was asked
    internal: reps.map((r) => r.stats),
    firstStats: reps.first?.stats,
    loadInfo: info.load,
    stop: reps.at(-1).stats?.stop,
  });
}

/** wllama (llama.cpp in wasm), one wasm file, threads chosen at load time. */
async function wllama(cfg) {
  const { Wllama } = await import('/node_modules/@wllama/wllama/esm/index.js');
  const w = new Wllama({ default: '/node_modules/@wllama/wllama/esm/wasm/wllama.wasm' }, { suppressNativeLog: true });
  const t0 = now();
  await w.loadModelFromUrl(new URL(cfg.model, location.href).href, {
    n_threads: cfg.threads, n_gpu_layers: 0, ...(cfg.nCtx ? { n_ctx: cfg.nCtx } : {}), n_batch: 512, useCache: false,
  });
  const loadMs = now() - t0;
  // The stream has one chunk per token (text only, no ids; a character split across tokens
  // comes out whole), then a last chunk with finish_reason, usage and llama.cpp's own timings.
  const gen = async (maxTokens) => {
    const r = { ids: null, text: '', chunks: 0 };
    r.t0 = now();
    const stream = await w.createCompletion({
      prompt: cfg.prompt, max_tokens: maxTokens, temperature: 0, top_k: 1, ignore_eos: true,
      cache_prompt: false, stream: true, seed: 1,
    });
    for await (const c of stream) {
      const t = now();
      const ch = c.choices?.[0];
      if (ch && !ch.finish_reason) {
        r.t1 ??= t;
        r.chunks++;
      }
      r.t2 = t;
      r.text += ch?.text ?? '';
      if (c.timings) r.timings = c.timings;
      if (c.usage) r.usage = c.usage;
    }
    r.nTokens = r.usage?.completion_tokens ?? r.chunks;
    r.promptTokens = r.usage?.prompt_tokens ?? r.timings?.prompt_n;
    return r;
  };
  let reps;
  try {
    reps = await timed(gen, cfg);
  } catch (e) {
    if (/Invalid typed array length/.test(e.message)) {
      e.message += ' (wllama fails so when the generated text is not valid UTF-8)';
    }
    throw e;
  }
  const info = w.getLoadedContextInfo?.();
  await w.exit();
  return summarize(reps, { loadMs, internal: reps.map((r) => r.timings), nThreads: info?.n_threads });
}

/** transformers.js (ONNX Runtime Web, wasm execution provider), set up as its "Use custom
 *  models" docs say: local models only, and `wasmPaths` pointed at a folder holding ONNX
 *  Runtime Web's dist files (here the installed onnxruntime-web, instead of the CDN copy of the
 *  same version it uses by default). Given a folder, ORT loads its default build from there
 *  (ort-wasm-simd-threaded.asyncify.{mjs,wasm} for 4.3.2, as from the CDN); `numThreads` is the
 *  count asked for (its default would be min(4, cores / 2)). */
async function transformers(cfg) {
  const tjs = await import('/node_modules/@huggingface/transformers/dist/transformers.js');
  const { env, AutoModelForCausalLM, AutoTokenizer, BaseStreamer } = tjs;
  env.allowLocalModels = true;
  env.allowRemoteModels = false;
  env.useBrowserCache = false; // every row fetches its files, as every other runtime's does
  env.localModelPath = '/models/';
  env.backends.onnx.wasm.wasmPaths = '/node_modules/onnxruntime-web/dist/';
  env.backends.onnx.wasm.numThreads = cfg.threads;
  if (cfg.tjsWasmPaths) env.backends.onnx.wasm.wasmPaths = cfg.tjsWasmPaths; // BENCH_TJS_WASMPATHS: another ORT build

  const t0 = now();
  const tok = await AutoTokenizer.from_pretrained(cfg.model);
  const model = await AutoModelForCausalLM.from_pretrained(cfg.model, { dtype: cfg.dtype, device: 'wasm' });
  const loadMs = now() - t0;

  class Timing extends BaseStreamer {
    constructor(r) {
      super();
      this.r = r;
      this.first = true;
    }
    put(value) {
      if (this.first) { this.first = false; return; } // the prompt
      const t = now();
      if (this.r.ids.length === 0) this.r.t1 = t;
      this.r.t2 = t;
      for (const row of value) for (const id of row) this.r.ids.push(Number(id));
    }
    end() {}
  }
  const inputs = tok(cfg.prompt);
  const gen = async (maxTokens) => {
    const r = { ids: [] };
    r.promptTokens = inputs.input_ids.dims.at(-1);
    r.t0 = now();
    await model.generate({
      ...inputs, max_new_tokens: maxTokens, min_new_tokens: maxTokens, do_sample: false,
      streamer: new Timing(r),
    });
    r.t2 ??= now();
    r.text = tok.decode(r.ids);
    return r;
  };
  const reps = await timed(gen, cfg);
  await model.dispose?.();
  return summarize(reps, { loadMs, version: tjs.env.version, ortWasm: ortBuild() });
}

/** The ORT wasm file the page fetched (its resource timing), for the row's note. */
function ortBuild() {
  const e = performance.getEntriesByType('resource').find((x) => /ort-wasm[^/]*\.wasm$/.test(x.name));
  return e ? e.name.split('/').pop() : null;
}

/** `ggweb bench`'s fixed prompt ids (crate/bin/run.rs bench_ids): no tokenizer involved. */
function benchIds(n, nVocab) {
  return Array.from({ length: n }, (_, i) => (i * 2654435761 + 12345) % nVocab);
}

/** `maxTokens` greedy tokens after `ids`, timed: t0 (start), t1 (first token), t2 (end), n, stats. */
async function timedGreedy(m, ids, maxTokens) {
  const r = { n: 0 };
  r.t0 = now();
  const it = m.generate(ids, { maxTokens, temperature: 0, seed: 1, ignoreEos: true });
  for await (const _ of it) {
    if (r.n++ === 0) r.t1 = now();
  }
  r.t2 = now();
  r.stats = await it.stats;
  return r;
}

/** Decode cost against context depth (`ggweb bench --n-past` in the browser). Per depth D
 *  (increasing): generate after D fixed ids, `tokens` greedy tokens; decode = (tokens - 1) ÷
 *  the time from the first to the last, so it covers positions D+1 .. D+tokens-1. The prompt
 *  cache reuses the previous depth's ids (they are a prefix), which shortens the fill only;
 *  the median of `reps` generations per depth (each rep re-decodes from depth D). */
async function ggwebDepths(cfg) {
  const { Model } = await import('/ggweb/ggweb.js');
  const m = await Model.load(cfg.model, {
    backend: 'cpu', worker: true, nCtx: cfg.nCtx, nBatch: 256, nThreads: cfg.threads ?? 1, kvType: cfg.kvType,
    relaxedSimd: cfg.relaxedSimd,
  });
  const info = m.info();
  const nVocab = info.tokenizer?.n_vocab ?? info.hparams?.n_vocab;
  const gen = (ids, maxTokens) => timedGreedy(m, ids, maxTokens);
  await gen(benchIds(cfg.depths[0], nVocab), 8); // warm-up: V8's tiers, first touch of the cache
  const mid = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  const depths = [];
  for (const d of cfg.depths) {
    const ids = benchIds(d, nVocab);
    const reps = [];
    for (let i = 0; i < cfg.reps; i++) {
      // An untimed other token first: each rep then fills from the shared prefix and decodes
      // the same positions (the cache would otherwise hold the previous rep's output).
      if (i > 0) await m.logits(ids.slice(0, d - 1).concat([(ids[d - 1] + 1) % nVocab]));
      const r = await gen(ids, cfg.tokens);
      reps.push({ decodeTps: (r.n - 1) / ((r.t2 - r.t1) / 1000), fillMs: r.t1 - r.t0, tokens: r.n, cached: r.stats?.cachedTokens });
    }
    depths.push({ nPast: d, decodeTps: mid(reps.map((r) => r.decodeTps)), reps });
  }
  const out = { ok: true, kvType: info.memory?.kvType, nCtx: info.hparams?.n_ctx, threadInfo: info.threads, depths };
  await m.dispose();
  return out;
}

/** The browser half of the `native` section (scripts/bench-ggweb.mjs): `ggweb bench`'s
 *  measure in a page, on the same file and the same fixed ids (`-p 64 -n 64`): per rep, the
 *  prefill of `prompt` bench ids, then `tokens` greedy tokens; decode = (tokens - 1) ÷ the time
 *  from the first token to the last (one decode step per token, as the native tg counts). */
async function ggwebNative(cfg) {
  const { Model } = await import('/ggweb/ggweb.js');
  const m = await Model.load(cfg.model, {
    backend: 'cpu', worker: true, nCtx: cfg.nCtx, nBatch: cfg.nBatch, nThreads: cfg.threads ?? 1, relaxedSimd: cfg.relaxedSimd,
  });
  const info = m.info();
  const nVocab = info.hparams?.nVocab ?? info.hparams?.n_vocab;
  const ids = benchIds(cfg.prompt, nVocab);
  const gen = async (maxTokens) => {
    // One untimed other token first: the prompt cache then holds nothing of ids, and every
    // rep evaluates the whole prompt, as `ggweb bench` does.
    await m.logits([(ids[0] + 1) % nVocab]);
    return timedGreedy(m, ids, maxTokens);
  };
  await gen(8); // warm-up: V8's tiers, the graphs' first allocation
  const reps = [];
  for (let i = 0; i < cfg.reps; i++) {
    const r = await gen(cfg.tokens);
    reps.push({ prefillTps: cfg.prompt / ((r.t1 - r.t0) / 1000), decodeTps: (r.n - 1) / ((r.t2 - r.t1) / 1000), tokens: r.n });
  }
  const mid = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  await m.dispose();
  return {
    ok: true, threadInfo: info.threads, reps,
    prefillTps: mid(reps.map((r) => r.prefillTps)), decodeTps: mid(reps.map((r) => r.decodeTps)),
  };
}

/** Several sequences per decode step (`generate(ids, { n })`, issue #26): per rep, a
 *  generation of 1 sequence and one of `n`, alternately (so both see the same machine), each
 *  after the same fixed ids and sampled with the same settings (`n` needs sampling; greedy
 *  would be the same cost). A step evaluates one token per sequence as one batch; steps/s =
 *  (steps - 1) ÷ the time from the first item to the last, items arriving n per step. */
async function ggwebSeqs(cfg) {
  const { Model } = await import('/ggweb/ggweb.js');
  const m = await Model.load(cfg.model, {
    backend: 'cpu', worker: true, nCtx: cfg.nCtx, nBatch: 64, nThreads: cfg.threads ?? 1, relaxedSimd: cfg.relaxedSimd,
  });
  const info = m.info();
  const ids = benchIds(64, info.hparams?.nVocab ?? info.hparams?.n_vocab);
  const gen = async (n, maxTokens) => {
    const r = { items: 0 };
    // The prompt cache would skip the fill after the first run: not timed here anyway.
    const it = m.generate(ids, { n, maxTokens, temperature: 0.8, seed: 7, ignoreEos: true });
    for await (const _ of it) {
      if (r.items++ === 0) r.t1 = now();
    }
    r.t2 = now();
    r.steps = r.items / n;
    r.stepsPerS = (r.steps - 1) / ((r.t2 - r.t1) / 1000);
    return r;
  };
  await gen(cfg.n, 8); // warm-up: V8's tiers, the batched graph's first allocation
  const reps = [];
  for (let i = 0; i < cfg.reps; i++) {
    const one = await gen(1, cfg.tokens);
    const many = await gen(cfg.n, cfg.tokens);
    reps.push({ one: one.stepsPerS, many: many.stepsPerS, cost: one.stepsPerS / many.stepsPerS, steps: many.steps });
  }
  const mid = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
  await m.dispose();
  return { ok: true, threadInfo: info.threads, n: cfg.n, cost: mid(reps.map((r) => r.cost)), reps };
}

/** Training speed (`model.train`, issue #38 item 5; `ggweb bench --train` natively): AdamW
 *  updates of `batchSize` sequences of `seqLen` fixed ids (benchIds, as natively), full or
 *  with `lora: { rank }`; one warm-up update (V8's tiers, the compute buffers' first touch),
 *  then `steps` timed ones, each timed from the previous item to its own (one update). */
async function ggwebTrain(cfg) {
  const { Model } = await import('/ggweb/ggweb.js');
  const t0 = now();
  const m = await Model.load(cfg.model, {
    backend: 'cpu', worker: true, nCtx: cfg.seqLen, nBatch: cfg.seqLen, nThreads: cfg.threads ?? 1, relaxedSimd: cfg.relaxedSimd,
  });
  const loadMs = now() - t0;
  const info = m.info();
  const ids = benchIds(cfg.seqLen * cfg.batchSize, info.hparams?.nVocab ?? info.hparams?.n_vocab);
  const data = Array.from({ length: cfg.batchSize }, (_, i) => ids.slice(i * cfg.seqLen, (i + 1) * cfg.seqLen));
  const opts = { seqLen: cfg.seqLen, batchSize: cfg.batchSize, steps: cfg.steps + 1, ...(cfg.lora ? { lora: { rank: cfg.lora } } : {}) };
  const perStep = cfg.seqLen * cfg.batchSize;
  const tokS = [];
  const losses = [];
  let t = now();
  let warmupMs = 0;
  for await (const s of m.train(data, opts)) {
    const t1 = now();
    if (s.step === 1) warmupMs = t1 - t;
    else tokS.push(perStep / ((t1 - t) / 1000));
    losses.push(s.loss);
    t = t1;
  }
  await m.dispose();
  const sorted = [...tokS].sort((a, b) => a - b);
  return {
    ok: true, threadInfo: info.threads, loadMs, warmupMs, losses, tokS,
    trainTokS: sorted[Math.floor((sorted.length - 1) / 2)], spread: [sorted[0], sorted.at(-1)],
  };
}

export const RUNNERS = { ggweb, wllama, transformers, ggwebDepths, ggwebSeqs, ggwebNative, ggwebTrain };

/** Load against transfer, one step per call so scripts/bench.mjs can count the bytes the
 *  server sent for each: `fetch` + reading the whole body of `url` (the page's raw transfer
 *  speed; not stored in the HTTP cache), or `Model.load(url, { cache })` until the model is usable (then disposed). */
export async function loadStep(step) {
  const t0 = now();
  if (step.kind === 'fetch') {
    const res = await fetch(step.url, { cache: 'no-store' }); // leaves the HTTP cache to Model.load
    if (!res.ok) throw new Error(`HTTP ${res.status} fetching ${step.url}`);
    const reader = res.body.getReader();
    let bytes = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      bytes += value.byteLength;
    }
    return { ms: now() - t0, bytes };
  }
  const { Model } = await import('/ggweb/ggweb.js');
  const m = await Model.load(step.url, {
    backend: 'cpu', worker: true, nThreads: step.threads ?? 1, relaxedSimd: step.relaxedSimd, nCtx: step.nCtx,
    ...(step.cache ? { cache: step.cache } : {}),
  });
  const ms = now() - t0;
  const load = m.info().load;
  await m.dispose();
  return { ms, bytes: load.bytes, via: load.via, cached: load.cached, engineMs: load.ms, warmUp: load.warmUp, phases: load.phases };
}

/** Environment facts the table header reports. */
export async function probe() {
  let webgpu = null;
  if (navigator.gpu) {
    try {
      const a = await navigator.gpu.requestAdapter();
      if (a) {
        const i = a.info ?? {};
        webgpu = { vendor: i.vendor, architecture: i.architecture, description: i.description, fallback: !!(a.isFallbackAdapter ?? i.isFallbackAdapter) };
      }
    } catch { /* no adapter */ }
  }
  return {
    userAgent: navigator.userAgent,
    hardwareConcurrency: navigator.hardwareConcurrency,
    crossOriginIsolated: globalThis.crossOriginIsolated === true,
    webgpu,
  };
}

export async function run(cfg) {
  const f = RUNNERS[cfg.runtime];
  if (!f) return { ok: false, error: `unknown runtime ${cfg.runtime}` };
  try {
    return await f(cfg);
  } catch (e) {
    return { ok: false, error: `${e?.name ?? 'Error'}${e?.code ? ` (${e.code})` : ''}: ${e?.message ?? e}` };
  }
}
