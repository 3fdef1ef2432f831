// The real thing in headless Chromium: the release wasm module (web/pkg, built by
// scripts/build-wasm.sh) behind the JS API, in a Web Worker and on the page thread, loading
// llama.cpp-made tiny GPT-2 GGUFs over HTTP (tests/fixtures/llamacpp, served at /shared-models/),
// checked against Hugging Face's outputs (tests/fixtures/tiny-gpt2.hf-rows.*): token ids,
// greedy continuations, logits. Then aborts mid-load and mid-generation with recovery, the
// real module's errors, and the wasm memory a load takes.
//   node --test tests/e2e/model.spec.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { DOT_MODELS, HF, MODELS_DIR, launch, openPage, serve } from './helpers.mjs';
import { declaredShape, shapeDiff } from '../types/shape.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f16.gguf) are needed: set GGWEB_MODELS_DIR');
const F16 = '/shared-models/tiny-gpt2-f16.gguf';
const F32 = '/shared-models/tiny-gpt2-f32.gguf';
const F16_SIZE = statSync(`${MODELS_DIR}/tiny-gpt2-f16.gguf`).size;
const F32_SIZE = statSync(`${MODELS_DIR}/tiny-gpt2-f32.gguf`).size;
const [HELLO] = HF.prompts;

let server;
let browser;
let page;
let problems;

before(async () => {
  server = await serve();
  browser = await launch();
  ({ page, problems } = await openPage(browser, `${server.url}e2e/harness.html`));
  await page.evaluate(async () => {
    window.G = await import('/ggweb.js');
    window.run = async (fn) => {
      try {
        return { ok: true, value: await fn() };
      } catch (e) {
        return { ok: false, name: e.name, code: e.code, message: e.message, isGgweb: e instanceof window.G.GgwebError };
      }
    };
  });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Runs `body` in the page with `G` (ggweb.js), `Model`, `opts` (base load options), `arg` in scope. */
function inPage(worker, body, arg, p = page) {
  return p.evaluate(
    async ({ worker, body, arg }) => {
      const G = window.G;
      const opts = { worker, nBatch: 32 };
      // eslint-disable-next-line no-new-func
      const fn = new Function('G', 'Model', 'opts', 'arg', `return (async () => { ${body} })()`);
      return window.run(() => fn(G, G.Model, opts, arg));
    },
    { worker, body, arg },
  );
}

const GREEDY = { maxTokens: 20, temperature: 0, seed: 1 };

for (const worker of [true, false]) {
  describe(`real wasm ${worker ? 'in a worker' : 'on the page thread'}`, () => {
    test('loads the F16 GGUF over HTTP, tokenizes as HF does, and generates HF\'s greedy tokens', async () => {
      const r = await inPage(worker, `
        const events = [];
        const m = await Model.load(arg.url, { ...opts, onProgress: (p) => events.push(p) });
        const info = m.info();
        const out = [];
        for (const p of arg.prompts) {
          const ids = Array.from(await m.tokenize(p.text));
          const text = await m.detokenize(ids);
          const tokens = [];
          let pieces = '';
          const it = m.generate(p.text, arg.greedy);
          for await (const t of it) { tokens.push(t.token); pieces += t.text; }
          out.push({ ids, text, tokens, pieces, stats: await it.stats });
        }
        await m.dispose();
        return { info, out, phases: [...new Set(events.map((e) => e.phase))], last: events.at(-1), inWorker: m.inWorker };
      `, { url: F16, prompts: HF.prompts, greedy: GREEDY });
      assert.ok(r.ok, r.message);
      const { info, out, phases, last } = r.value;
      assert.equal(r.value.inWorker, worker);
      assert.equal(info.arch, 'gpt2');
      assert.equal(info.backend, 'cpu');
      assert.deepEqual(
        [info.hparams.n_vocab, info.hparams.n_ctx, info.hparams.n_embd, info.hparams.n_head, info.hparams.n_layer, info.hparams.n_ff, info.hparams.n_batch],
        [50257, 128, 64, 4, 2, 256, 32]);
      assert.equal(info.memory.kv, 2 * 2 * 64 * 128 * 4);
      assert.ok(info.memory.weights > 12.8e6 && info.memory.weights < 13.2e6, `weights ${info.memory.weights}`);
      assert.equal(info.load.bytes, F16_SIZE);
      assert.deepEqual(phases, ['download', 'build', 'ready']);
      assert.deepEqual(last, { loaded: F16_SIZE, total: F16_SIZE, phase: 'ready' });
      HF.prompts.forEach((p, i) => {
        const o = out[i];
        assert.deepEqual(o.ids, p.ids, `${p.key}: token ids`);
        assert.equal(o.text, p.text);
        assert.deepEqual(o.tokens, p.greedy_ids, `${p.key}: greedy ids`);
        assert.equal(o.pieces, p.greedy_text, `${p.key}: streamed text`);
        assert.equal(o.stats.stop, 'maxTokens');
        assert.equal(o.stats.tokens, 20);
        assert.equal(o.stats.promptTokens, p.ids.length);
      });
    });

    test('abort mid-load and mid-generation, break, dispose: the page recovers each time', async () => {
      const r = await inPage(worker, `
        const res = {};
        // A download at 16 KiB per 20 ms, aborted after 200 kB.
        const ac = new AbortController();
        const t0 = performance.now();
        try {
          await Model.load('/__test/slow/20' + arg.url, { ...opts, signal: ac.signal,
            onProgress: (e) => { if (e.loaded > 200000) ac.abort(); } });
          res.load = 'loaded?';
        } catch (e) { res.load = [e.code, Math.round(performance.now() - t0) < 5000]; }
        // A connection dropped at 1 MB.
        try { await Model.load('/__test/drop/1000000' + arg.url, opts); res.drop = 'loaded?'; } catch (e) { res.drop = e.code; }

        const m = await Model.load(arg.url, opts);
        const run = async (o) => { const ids = []; for await (const t of m.generate(arg.text, o)) ids.push(t.token); return ids; };
        // Abort after 3 tokens.
        const gen = new AbortController();
        const got = [];
        try {
          for await (const t of m.generate(arg.text, { ...arg.greedy, maxTokens: 100, signal: gen.signal })) {
            got.push(t.token);
            if (got.length === 3) gen.abort();
          }
          res.abort = 'finished?';
        } catch (e) { res.abort = e.code; }
        res.beforeAbort = got;
        res.afterAbort = await run(arg.greedy);
        // break after 2: quiet; the next run starts from scratch.
        let n = 0;
        for await (const t of m.generate(arg.text, { ...arg.greedy, maxTokens: 100 })) if (++n === 2) break;
        res.afterBreak = await run(arg.greedy);
        await m.dispose();
        try { await m.tokenize('x'); } catch (e) { res.disposed = e.code; }
        // A fresh load after all that.
        const m2 = await Model.load(arg.url, opts);
        res.fresh = await (async () => { const ids = []; for await (const t of m2.generate(arg.text, arg.greedy)) ids.push(t.token); return ids; })();
        await m2.dispose();
        return res;
      `, { url: F16, text: HELLO.text, greedy: GREEDY });
      assert.ok(r.ok, r.message);
      const v = r.value;
      assert.deepEqual(v.load, ['aborted', true]);
      assert.equal(v.drop, 'network');
      assert.equal(v.abort, 'aborted');
      assert.deepEqual(v.beforeAbort, HELLO.greedy_ids.slice(0, 3));
      assert.deepEqual(v.afterAbort, HELLO.greedy_ids);
      assert.deepEqual(v.afterBreak, HELLO.greedy_ids);
      assert.equal(v.disposed, 'disposed');
      assert.deepEqual(v.fresh, HELLO.greedy_ids);
    });
  });
}

for (const worker of [true, false]) {
  test(`generation control and result shapes ${worker ? 'in a worker' : 'on the page thread'}: reusePrompt false, stats after break, info/stats/score/inspect exactly as ggweb.d.ts declares`, async () => {
    const r = await inPage(worker, `
      const m = await Model.load(arg, opts);
      const out = {};
      const run = async (o) => {
        const it = m.generate('Hello, my name is', { maxTokens: 6, temperature: 0, ...o });
        const ids = [];
        for await (const t of it) ids.push(t.token);
        return { ids, stats: await it.stats };
      };
      out.first = await run({});
      out.reused = await run({});
      out.fresh = await run({ reusePrompt: false });
      out.again = await run({ reusePrompt: true });
      // Read 2 tokens, pause, break: the model ran 4 ahead and stopped there.
      const it = m.generate('Hello', { maxTokens: 50, temperature: 0, ignoreEos: true });
      let n = 0;
      for await (const t of it) { if (++n === 2) { await new Promise((r) => setTimeout(r, 300)); break; } }
      out.broken = await it.stats;
      out.info = m.info();
      out.score = await m.score('Hello world', { topK: 2 });
      await m.dispose();
      out.inspect = await Model.inspect(arg, { nBatch: 32 });
      return out;
    `, F16);
    assert.ok(r.ok, r.message);
    const v = r.value;
    assert.equal(v.first.stats.cachedTokens, 0);
    // 'Hello, my name is' is 5 tokens: the same prompt again reuses all but the last.
    assert.equal(v.reused.stats.cachedTokens, 4);
    assert.equal(v.fresh.stats.cachedTokens, 0);
    assert.equal(v.fresh.stats.promptTokens, 5);
    assert.equal(v.again.stats.cachedTokens, 4);
    for (const k of ['reused', 'fresh', 'again']) assert.deepEqual(v[k].ids, v.first.ids, k);
    assert.equal(v.first.ids.length, 6);
    assert.equal(v.broken.stop, 'cancelled');
    assert.equal(v.broken.promptTokens, 1);
    assert.equal(v.broken.tokens, 2 + 4);
    // Exactly the declared fields: none undeclared, none missing.
    assert.deepEqual(shapeDiff(v.info, declaredShape('ModelInfo')), []);
    assert.deepEqual(shapeDiff(v.first.stats, declaredShape('GenerateStats')), []);
    assert.deepEqual(shapeDiff(v.broken, declaredShape('GenerateStats')), []);
    assert.deepEqual(shapeDiff(v.score, declaredShape('ScoreResult')), []);
    assert.deepEqual(shapeDiff(v.inspect, declaredShape('InspectResult')), []);
    // camelCase names, and the deprecated snake_case ones with the same values.
    const h = v.info.hparams;
    assert.deepEqual([h.nVocab, h.nCtx, h.nCtxTrain, h.nEmbd, h.nHead, h.nLayer, h.nFf, h.nBatch], [50257, 128, 128, 64, 4, 2, 256, 32]);
    assert.deepEqual([h.n_vocab, h.n_ctx, h.n_ctx_train, h.n_embd, h.n_head, h.n_layer, h.n_ff, h.n_batch], [50257, 128, 128, 64, 4, 2, 256, 32]);
    assert.deepEqual([v.info.tokenizer.nVocab, v.info.tokenizer.n_vocab], [50257, 50257]);
    assert.deepEqual(v.inspect.hparams, h);
  });
}

test('every kind of source streams into the real loader and gives the same model', async () => {
  const r = await inPage(true, `
    const row = async (m) => { const l = await m.logits(arg.ids); await m.dispose(); return Array.from(l.subarray(0, 64)); };
    const buf = new Uint8Array(await (await fetch(arg.url)).arrayBuffer());
    const sources = {
      url: () => arg.url,
      chunked: () => '/__test/nolength' + arg.url,
      file: () => new File([buf], 'tiny.gguf'),
      stream: () => new Blob([buf]).stream(),
      response: () => new Response(buf),
      bytes: () => buf,
    };
    const out = {};
    for (const [k, make] of Object.entries(sources)) {
      const m = await Model.load(make(), opts);
      out[k] = { via: m.info().load.via, bytes: m.info().load.bytes, row: await row(m) };
    }
    return out;
  `, { url: F16, ids: HELLO.ids });
  assert.ok(r.ok, r.message);
  const v = r.value;
  assert.deepEqual(Object.fromEntries(Object.entries(v).map(([k, o]) => [k, [o.via, o.bytes]])), {
    url: ['download', F16_SIZE], chunked: ['download', F16_SIZE], file: ['file', F16_SIZE],
    stream: ['stream', F16_SIZE], response: ['stream', F16_SIZE], bytes: ['file', F16_SIZE],
  });
  for (const k of Object.keys(v)) assert.deepEqual(v[k].row, v.url.row, `${k}: same logits as the URL load`);
});

test('the release module\'s F32 logits are within 1e-4 of HF; F16\'s keep HF\'s top 5', async () => {
  const r = await inPage(false, `
    const rows = new Float32Array(await (await fetch('/tests/fixtures/tiny-gpt2.hf-rows.bin')).arrayBuffer());
    const n = 50257;
    const top5 = (a) => Array.from(a.keys()).sort((x, y) => a[y] - a[x] || x - y).slice(0, 5);
    const out = {};
    for (const url of [arg.f32, arg.f16]) {
      const m = await Model.load(url, opts);
      out[url] = [];
      for (const p of arg.prompts) {
        const l = await m.logits(p.ids);
        const ref = rows.subarray(p.row.index * n, (p.row.index + 1) * n);
        let d = 0;
        for (let i = 0; i < n; i++) d = Math.max(d, Math.abs(l[i] - ref[i]));
        out[url].push({ len: l.length, type: l.constructor.name, maxDiff: d, top5: top5(l) });
      }
      await m.dispose();
    }
    return out;
  `, { f32: F32, f16: F16, prompts: HF.prompts });
  assert.ok(r.ok, r.message);
  HF.prompts.forEach((p, i) => {
    const a = r.value[F32][i];
    const b = r.value[F16][i];
    console.log(`${p.key}: max |logit - HF| F32 ${a.maxDiff.toExponential(2)}, F16 ${b.maxDiff.toExponential(2)}`);
    assert.equal(a.len, 50257);
    assert.equal(a.type, 'Float32Array');
    assert.ok(a.maxDiff <= 1e-4, `${p.key}: F32 max diff ${a.maxDiff}`);
    assert.deepEqual(a.top5, p.last_top5_ids);
    assert.deepEqual(b.top5, p.last_top5_ids);
    // F16 weights move logits by rounding only (2^-11 relative per weight).
    assert.ok(b.maxDiff <= 1e-2, `${p.key}: F16 max diff ${b.maxDiff}`);
  });
});

test('kvType \'f16\': half the KV bytes in info(), logits within tests/model/kv_type.rs\'s bound of HF; a bad kvType, nCtx, topP or seed is "invalid" in the Rust parser\'s words', async () => {
  const r = await inPage(true, `
    const rows = new Float32Array(await (await fetch('/tests/fixtures/tiny-gpt2.hf-rows.bin')).arrayBuffer());
    const n = 50257;
    const out = {};
    for (const kvType of ['f32', 'f16']) {
      const m = await Model.load(arg.f32, { ...opts, kvType });
      const d = [];
      for (const p of arg.prompts) {
        const l = await m.logits(p.ids);
        const ref = rows.subarray(p.row.index * n, (p.row.index + 1) * n);
        let x = 0;
        for (let i = 0; i < n; i++) x = Math.max(x, Math.abs(l[i] - ref[i]));
        d.push(x);
      }
      out[kvType] = { memory: m.info().memory, maxDiff: d };
      await m.dispose();
    }
    try { await Model.load(arg.f32, { ...opts, kvType: 'q8_0' }); out.bad = 'loaded'; } catch (e) { out.bad = [e.code, e.message]; }
    // Ranges are the Rust parser's (engine.js checks only what crosses): its messages come through.
    try { await Model.load(arg.f32, { ...opts, nCtx: -4 }); out.badCtx = 'loaded'; } catch (e) { out.badCtx = [e.code, e.message]; }
    const m = await Model.load(arg.f32, opts);
    try { for await (const t of m.generate('x', { topP: 2 })) {} out.badTopP = 'ran'; } catch (e) { out.badTopP = [e.code, e.message]; }
    try { for await (const t of m.generate('x', { seed: -1 })) {} out.badSeed = 'ran'; } catch (e) { out.badSeed = [e.code, e.message]; }
    await m.dispose();
    return out;
  `, { f32: F32, prompts: HF.prompts });
  assert.ok(r.ok, r.message);
  const v = r.value;
  // 2 tensors x 2 layers x n_embd 64 x n_ctx 128 x 4 or 2 bytes.
  assert.equal(v.f32.memory.kv, 131072);
  assert.equal(v.f32.memory.kvType, 'f32');
  assert.equal(v.f16.memory.kv, 65536);
  assert.equal(v.f16.memory.kvType, 'f16');
  assert.equal(v.f16.memory.weights, v.f32.memory.weights);
  HF.prompts.forEach((p, i) => {
    console.log(`${p.key}: max |logit - HF| F32 KV ${v.f32.maxDiff[i].toExponential(2)}, F16 KV ${v.f16.maxDiff[i].toExponential(2)}`);
    assert.ok(v.f32.maxDiff[i] <= 1e-4, `${p.key}: F32 KV max diff ${v.f32.maxDiff[i]}`);
    // The bound measured natively (tests/model/kv_type.rs: 3.7e-3 measured over every position).
    assert.ok(v.f16.maxDiff[i] <= 8e-3, `${p.key}: F16 KV max diff ${v.f16.maxDiff[i]}`);
  });
  assert.equal(v.bad[0], 'invalid');
  assert.match(v.bad[1], /WasmLoader options: kvType must be "f16" or "f32", got "q8_0"$/);
  assert.deepEqual(v.badCtx, ['invalid', 'WasmLoader options: nCtx must be an integer from 1 to 4294967295, got -4']);
  assert.deepEqual(v.badTopP, ['invalid', 'generate: generation options: topP must be a number from 0 to 1, got 2']);
  assert.deepEqual(v.badSeed, ['invalid', 'generate: generation options: seed must be an integer from 0 to 18446744073709551615, got -1']);
});

test('the wasm seam: next() is the whole item or undefined, stats() says why it ended, load_options() holds the defaults', async () => {
  const r = await page.evaluate(async ({ url, ids }) => {
    const core = await import('/pkg/ggweb_core.js');
    await core.default();
    const code = (f) => { try { f(); return null; } catch (e) { return [e.code, e.message]; } };
    const out = {
      defaults: core.load_options({}),
      given: core.load_options({ nCtx: 64, backend: 'auto', gpuLayers: -1, kvType: 'f16' }),
      unknown: code(() => core.load_options({ ctx: 1 })),
      threads: core.cpu_threads(),
      backends: core.available_backends(),
    };
    const loader = await core.WasmLoader.create({ nBatch: 32 });
    loader.feed(new Uint8Array(await (await fetch(url)).arrayBuffer()));
    const model = loader.finish();
    const info = model.info();
    out.info = { backend: info.backend, eps: info.hparams.eps, note: info.backendNote, kvType: info.memory.kvType };
    const run = async (params) => {
      model.start(Uint32Array.from(ids), params);
      while (!(await model.prompt_step()));
      const items = [];
      for (let it; (it = await model.next()) !== undefined;) items.push(it);
      return { items, stats: model.stats() };
    };
    out.plain = await run({ maxTokens: 3, temperature: 0 });
    out.top = await run({ maxTokens: 2, temperature: 0, topLogprobs: 2 });
    out.badStart = code(() => model.start(Uint32Array.from(ids), { maxTokens: 1, top_k: 3 }));
    const sc = await model.call('score', [Uint32Array.from(ids)], { topK: 1 });
    out.score = { tokens: sc.tokens.constructor.name, logprobs: sc.logprobs.constructor.name, top: sc.top[0] };
    model.free();
    return out;
  }, { url: F32, ids: HELLO.ids });
  assert.deepEqual(r.defaults, { nCtx: 0, nBatch: 32, backend: 'cpu', gpuLayers: null, nThreads: 1, kvType: 'f32' });
  assert.deepEqual(r.given, { nCtx: 64, nBatch: 32, backend: 'auto', gpuLayers: -1, nThreads: 1, kvType: 'f16' });
  assert.equal(r.unknown[0], 'invalid');
  assert.match(r.unknown[1], /^WasmLoader options: unknown option "ctx" \(known: nCtx, nBatch, backend, gpuLayers, nThreads, kvType\)$/);
  assert.deepEqual(r.threads, { supported: false, workersRunning: 0, jobs: [0, 0] });
  assert.deepEqual(r.backends, ['cpu', 'webgpu']);
  assert.deepEqual(r.info, { backend: 'cpu', eps: 1e-5, note: null, kvType: 'f32' });
  // Greedy: HF's tokens, each item whole ({ seq, token, text } without topLogprobs; seq 0 with one sequence).
  assert.deepEqual(r.plain.items.map((t) => t.token), HELLO.greedy_ids.slice(0, 3));
  assert.deepEqual(r.plain.items.map((t) => Object.keys(t)), [['seq', 'token', 'text'], ['seq', 'token', 'text'], ['seq', 'token', 'text']]);
  assert.deepEqual(r.plain.items.map((t) => t.seq), [0, 0, 0]);
  assert.equal(r.plain.items.map((t) => t.text).join(''), HELLO.greedy_text.slice(0, r.plain.items.map((t) => t.text).join('').length));
  assert.deepEqual(r.plain.stats, { promptTokens: HELLO.ids.length, cachedTokens: 0, tokens: 3, stop: 'maxTokens', webgpu: null });
  // With topLogprobs: logprob and the top 2 ({ token, text, logprob }), the greedy token first.
  const [first] = r.top.items;
  assert.deepEqual(Object.keys(first), ['seq', 'token', 'text', 'logprob', 'top']);
  assert.equal(first.top.length, 2);
  assert.equal(first.top[0].token, first.token);
  assert.ok(first.logprob < 0 && Math.abs(first.logprob - first.top[0].logprob) < 1e-6, JSON.stringify(first));
  assert.equal(r.top.stats.cachedTokens, HELLO.ids.length - 1, 'the prompt cache reused the prompt');
  assert.equal(r.badStart[0], 'invalid');
  assert.match(r.badStart[1], /^generation options: unknown option "top_k" \(known: maxTokens, /);
  assert.deepEqual(r.score.tokens + r.score.logprobs, 'Uint32ArrayFloat32Array');
  assert.deepEqual(Object.keys(r.score.top[0]), ['token', 'logprob']);
});

test('the real module\'s errors carry codes and say what and where', async () => {
  const r = await inPage(true, `
    const res = {};
    const code = async (f) => { try { await f(); return 'ok'; } catch (e) { return [e.code, e.message]; } };
    res.notGguf = await code(() => Model.load('/e2e/harness.html', opts));
    const head = new Uint8Array(await (await fetch(arg.url, { headers: { Range: 'bytes=0-4194303' } })).arrayBuffer());
    res.truncated = await code(() => Model.load(head, opts));
    res.bigCtx = await code(() => Model.load(arg.url, { ...opts, nCtx: 4096 }));
    const gpu = await Model.load(arg.url, { ...opts, backend: 'webgpu', nCtx: 16 });
    res.gpuBackend = gpu.info().load.backend;
    const git = gpu.generate(arg.text, { maxTokens: 4, temperature: 0 });
    res.gpuIds = [];
    for await (const t of git) res.gpuIds.push(t.token);
    res.gpuStats = await git.stats;
    await gpu.dispose();
    const auto = await Model.load(arg.url, { ...opts, backend: 'auto', nCtx: 8 });
    res.autoBackend = auto.info().load.backend;
    res.detok = await code(() => auto.detokenize([15496, 50257]));
    res.logits = await code(() => auto.logits(new Array(9).fill(11)));
    res.longPrompt = await code(async () => { for await (const t of auto.generate('a b c d e f g h i j k')) {} });
    // A run that fills the 8-position context ends cleanly: 5 prompt tokens, 3 generated
    // (prompt and output fit the context, so the text can be scored whole).
    const it = auto.generate(arg.text, { maxTokens: 100, temperature: 0 });
    const ids = [];
    for await (const t of it) ids.push(t.token);
    const fullStats = await it.stats;
    res.full = { ids, stop: fullStats.stop };
    res.autoWebgpu = fullStats.webgpu;
    await auto.dispose();
    return res;
  `, { url: F16, text: HELLO.text });
  assert.ok(r.ok, r.message);
  const v = r.value;
  assert.equal(v.notGguf[0], 'format');
  assert.match(v.notGguf[1], /e2e\/harness\.html at byte 0: GGUF: not a GGUF file: magic \[3c, 21, 64, 6f\], expected "GGUF", at byte 0$/);
  assert.equal(v.truncated[0], 'format');
  assert.match(v.truncated[1], new RegExp(`^the model stream: GGUF: truncated: needed at least ${F16_SIZE} bytes, the stream ended after 4194304, in tensor '[^']+', at byte 4194304$`));
  // Refused as soon as the header has arrived (before any weight is allocated): the message
  // names the byte where the stream was when the check ran.
  assert.equal(v.bigCtx[0], 'invalid');
  assert.match(v.bigCtx[1], new RegExp(`^http://localhost:${server.port}${F16} at byte \\d+: invalid options: n_ctx 4096 exceeds the model's context length 128$`));
  assert.equal(v.gpuBackend, 'webgpu');
  assert.deepEqual(v.gpuIds, HELLO.greedy_ids.slice(0, 4), 'greedy tokens on WebGPU are the HF ones');
  assert.equal(v.autoBackend, 'webgpu', 'auto picks WebGPU where an adapter exists (SwiftShader here)');
  // stats.webgpu: the prompt (one chunk) and 3 of the 4 tokens evaluated (the last is only
  // sampled), each one submit and one read-back of n_vocab floats.
  const w = v.gpuStats.webgpu;
  assert.deepEqual([w.submits, w.readbacks, w.readbackBytes], [4, 4, 4 * 50257 * 4], JSON.stringify(w));
  assert.ok(w.dispatches > 0 && w.encodeMs > 0, JSON.stringify(w));
  assert.equal(v.autoWebgpu.submits, 3, 'the full-context run: the prompt and 2 of its 3 tokens');
  assert.deepEqual(v.detok, ['invalid', 'detokenize: tokenizer: token id 50257 at position 1 is out of range (vocabulary of 50257)']);
  assert.deepEqual(v.logits, ['invalid', 'logits: context full: 9 positions needed, n_ctx is 8']);
  assert.deepEqual(v.longPrompt, ['invalid', 'generate: the prompt: context full: 11 positions needed, n_ctx is 8']);
  assert.deepEqual(v.full, { ids: HELLO.greedy_ids.slice(0, 3), stop: 'contextFull' });
});

/**
 * Streams `url` into the glue's WasmLoader in a fresh page (a fresh wasm instance), and reads
 * memory.buffer.byteLength before and after, with the heap base and the model's memory plan.
 */
async function measureLoad(url, opts, text, n) {
  const { page: p } = await openPage(browser, `${server.url}e2e/harness.html`);
  try {
    return await p.evaluate(async ({ url, opts, text, n }) => {
      const core = await import('/pkg/ggweb_core.js');
      const wasm = await core.default();
      const mem = () => wasm.memory.buffer.byteLength;
      const atInit = mem();
      const heapBase = core.wasm_heap_base();
      const loader = new core.WasmLoader(opts);
      const reader = (await fetch(url)).body.getReader();
      let chunks = 0;
      let biggest = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        loader.feed(value);
        chunks++;
        biggest = Math.max(biggest, value.byteLength);
      }
      const model = loader.finish();
      const afterLoad = mem();
      const info = model.info();
      const t0 = performance.now();
      model.start(model.tokenize(text, false), { maxTokens: n, temperature: 0 });
      while (!(await model.prompt_step()));
      const greedy = [];
      for (let t; (t = await model.next());) greedy.push(t.token);
      const ms = performance.now() - t0;
      const afterRun = mem();
      model.free();
      return { atInit, heapBase, afterLoad, afterRun, memory: info.memory, greedy, ms, chunks, biggest };
    }, { url, opts, text, n });
  } finally {
    await p.close();
  }
}

const MIB = 1024 * 1024;
const FOX = HF.prompts[1];
// [url, load options, prompt, greedy ids to expect (HF)]
const models = [[F16, { nBatch: 32 }, FOX.text, FOX.greedy_ids.slice(0, 16)]];
// The 124M-shape F16 model, when `make_fixtures.py --shape 124m` has made it (into the
// git-ignored .models/: 330 MB, too big to commit); its reference is 124m.ref.json.
if (existsSync(`${DOT_MODELS}/124m-f16.gguf`)) {
  const ref = JSON.parse(readFileSync(`${DOT_MODELS}/124m.ref.json`, 'utf8'));
  const i = ref.prompts.findIndex((p) => p.key === 'fox');
  models.push(['/dot-models/124m-f16.gguf', { nBatch: 32 }, ref.prompts[i].text, ref.dtypes.f16.prompts[i].greedy_ids]);
}

for (const [url, opts, text, greedy] of models) {
  test(`memory: loading ${url.split('/').pop()} grows the wasm memory by at most weights + KV + compute + 16 MiB`, async () => {
    const m = await measureLoad(url, opts, text, greedy.length);
    assert.deepEqual(m.greedy, greedy, 'greedy ids (Hugging Face)');
    const plan = m.memory.weights + m.memory.kv + m.memory.compute;
    const f = (x) => (x / MIB).toFixed(2);
    console.log(`${url}: memory.buffer.byteLength ${f(m.atInit)} MiB at instantiation (heap base ${f(m.heapBase)} MiB), ` +
      `${f(m.afterLoad)} MiB after load, ${f(m.afterRun)} MiB after ${m.greedy.length} tokens; plan ${f(plan)} MiB ` +
      `(weights ${m.memory.weights}, kv ${m.memory.kv}, compute ${m.memory.compute}); ` +
      `beyond the plan and the heap base: ${f(m.afterLoad - m.heapBase - plan)} MiB; ${m.chunks} chunks, largest ${m.biggest} B; ` +
      `prompt + ${m.greedy.length} greedy tokens in ${Math.round(m.ms)} ms`);
    assert.ok(m.atInit < 4 * MIB, `the module starts with ${m.atInit} bytes`);
    assert.ok(m.afterLoad <= m.heapBase + plan + 16 * MIB, `after load ${m.afterLoad} > heap base ${m.heapBase} + plan ${plan} + 16 MiB`);
    assert.ok(m.afterLoad <= m.atInit + plan + 16 * MIB);
    assert.equal(m.afterRun, m.afterLoad, 'generating allocates nothing beyond what the load reserved');
  });
}

/** A fresh page (a fresh wasm instance) with `G` loaded; its problems are kept apart. */
async function freshPage() {
  const { page: p, problems: pp } = await openPage(browser, `${server.url}e2e/harness.html`);
  await p.evaluate(async () => {
    window.G = await import('/ggweb.js');
    // The instance engine.js uses on the page thread (same URL: the relaxed-SIMD build where
    // the browser has it); initialised here so it can be read before a load (engine.js's
    // init then finds it ready).
    const E = await import('/builds.js');
    window.coreBuild = E.hasRelaxedSimd() ? 'pkg-relaxed' : 'pkg';
    window.core = await import(`/${window.coreBuild}/ggweb_core.js`);
    await window.core.default();
    window.run = async (fn) => {
      try {
        return { ok: true, value: await fn() };
      } catch (e) {
        return { ok: false, name: e.name, code: e.code, message: e.message, isGgweb: e instanceof window.G.GgwebError };
      }
    };
  });
  return { p, pp };
}

for (const worker of [true, false]) {
  test(`WebGPU device lost mid-generation ${worker ? 'in a worker' : 'on the page thread'}: 'device_lost' now and on every later call; backend 'auto' loads and generates after`, async () => {
    const { p, pp } = await freshPage();
    const r = await inPage(worker, `
      const res = {};
      const code = async (f) => { try { await f(); return 'ok'; } catch (e) { return [e.code, e.message, e instanceof G.GgwebError]; } };
      res.cpuLose = await code(async () => { const c = await Model.load(arg.url, opts); try { await c._debugLoseDevice(); } finally { await c.dispose(); } });
      const m = await Model.load(arg.url, { ...opts, backend: 'webgpu' });
      res.backend = m.info().load.backend;
      const got = [];
      try {
        for await (const t of m.generate(arg.text, { ...arg.greedy, maxTokens: 100 })) {
          got.push(t.token);
          // Generation runs ahead of this loop: the loss lands a few tokens later, between two steps.
          if (got.length === 2) await m._debugLoseDevice();
        }
        res.gen = 'finished?';
      } catch (e) { res.gen = [e.code, e.message, e instanceof G.GgwebError]; }
      res.got = got;
      res.later = [];
      for (let i = 0; i < 2; i++) {
        res.later.push({
          generate: await code(async () => { for await (const t of m.generate(arg.text, arg.greedy)) {} }),
          logits: await code(() => m.logits(arg.ids)),
          tokenize: await code(() => m.tokenize('x')),
          detokenize: await code(() => m.detokenize([1])),
          info: m.info().load.backend,
        });
      }
      await m.dispose();
      const a = await Model.load(arg.url, { ...opts, backend: 'auto' });
      res.autoBackend = a.info().load.backend;
      res.auto = [];
      for await (const t of a.generate(arg.text, arg.greedy)) res.auto.push(t.token);
      await a.dispose();
      return res;
    `, { url: F16, text: HELLO.text, ids: HELLO.ids, greedy: GREEDY }, p);
    assert.ok(r.ok, r.message);
    const v = r.value;
    assert.deepEqual(v.cpuLose, ['unsupported', '_debugLoseDevice: the model runs on the cpu backend, which has no device to lose', true]);
    assert.equal(v.backend, 'webgpu');
    assert.equal(v.gen[0], 'device_lost', v.gen[1]);
    assert.equal(v.gen[2], true, 'a GgwebError');
    const n = v.got.length;
    assert.ok(n >= 2 && n < 100, `${n} tokens before the loss`);
    assert.deepEqual(v.got.slice(0, 20), HELLO.greedy_ids.slice(0, Math.min(n, 20)), 'tokens before the loss are the greedy ones');
    // The loss is found before the next step touches the device (the bindings check first).
    const said = 'the WebGPU device was lost (Destroyed: the device was destroyed (WebGpuBackend::destroy_device)); ' +
      'this model cannot run any more: load it again (backend "auto" picks a working device or the CPU)';
    assert.equal(v.gen[1], `generating token ${n + 1}: ${said}`);
    for (const later of v.later) {
      for (const k of ['generate', 'logits', 'tokenize', 'detokenize']) {
        assert.equal(later[k][0], 'device_lost', `${k}: ${later[k][1]}`);
        assert.equal(later[k][2], true);
        // Every later call repeats the first error, named after the call.
        assert.equal(later[k][1], `${k}: generating token ${n + 1}: ${said}`, k);
      }
      assert.equal(later.info, 'webgpu');
    }
    assert.equal(v.autoBackend, 'webgpu', 'auto: a fresh SwiftShader device');
    assert.deepEqual(v.auto, HELLO.greedy_ids);
    assert.deepEqual(pp.filter((x) => !/Failed to load resource/.test(x)), []);
    await p.close();
  });
}

for (const backend of ['cpu', 'webgpu']) {
  // 20 cycles on the CPU (4 s); 8 on WebGPU, where a cycle takes 4 s on SwiftShader: from
  // cycle 3 on, a leaked KV cache (131 KiB) per cycle would still grow the memory by 655 KiB,
  // ten times the one page allowed below, and the GPU buffer count is checked every cycle.
  const CYCLES = backend === 'webgpu' ? 8 : 20;
  test(`no leaks on ${backend}: ${CYCLES} load → generate → dispose cycles keep the wasm memory and the live GPU buffers flat`, async () => {
    const { p, pp } = await freshPage();
    const r = await inPage(false, `
      const core = window.core;
      const base = { mem: core.wasm_memory_bytes(), gpu: core.live_gpu_buffers() };
      const cycles = [];
      for (let i = 0; i < arg.cycles; i++) {
        const m = await Model.load(arg.url, { ...opts, backend: arg.backend });
        const loadedGpu = core.live_gpu_buffers();
        const ids = [];
        for await (const t of m.generate(arg.text, { ...arg.greedy, maxTokens: 4 })) ids.push(t.token);
        const build = m.info().threads.build;
        await m.dispose();
        cycles.push({ ids, loadedGpu, gpu: core.live_gpu_buffers(), mem: core.wasm_memory_bytes(), build });
      }
      return { base, cycles, coreBuild: window.coreBuild };
    `, { url: F16, text: HELLO.text, greedy: GREEDY, backend, cycles: CYCLES }, p);
    assert.ok(r.ok, r.message);
    const { base, cycles } = r.value;
    console.log(`${backend}: wasm memory ${base.mem} B before, after each cycle: ${cycles.map((c) => c.mem).join(' ')}; ` +
      `live GPU buffers ${base.gpu} before, ${cycles[0].loadedGpu} while loaded`);
    for (const [i, c] of cycles.entries()) {
      // The counters read are the model's own module's.
      assert.equal(c.build, r.value.coreBuild, `cycle ${i}: the model ran on the module the test reads`);
      assert.deepEqual(c.ids, HELLO.greedy_ids.slice(0, 4), `cycle ${i}: greedy ids`);
      // Every buffer a model made is released by its dispose.
      assert.equal(c.gpu, base.gpu, `cycle ${i}: live GPU buffers after dispose`);
      assert.equal(c.loadedGpu, cycles[0].loadedGpu, `cycle ${i}: live GPU buffers while loaded`);
    }
    if (backend === 'webgpu') assert.ok(cycles[0].loadedGpu > base.gpu, 'a WebGPU model holds GPU buffers (the counter counts)');
    else assert.equal(cycles[0].loadedGpu, base.gpu, 'a CPU model holds no GPU buffer');
    // wasm memory never shrinks, so "flat" is: no growth after the first cycles. The first
    // load grows memory to fit one model; the allocator may need a second cycle to settle
    // (a freed region reused for a differently-sized request). From cycle 3 on, a leak of
    // even one model's KV cache per cycle (131 KiB here) would grow it by 2 MiB over the 17
    // cycles (655 KiB over WebGPU's 5); at most one 64 KiB page of allocator growth is allowed in all of them (seen once,
    // at cycle 10 or 13, on WebGPU, where the load's measured plan and the device's own buffers
    // interleave allocations; never a second page).
    const PAGE = 65536;
    for (let i = 2; i < cycles.length; i++) {
      assert.ok(cycles[i].mem - cycles[2].mem <= PAGE, `cycle ${i}: wasm memory grew from ${cycles[2].mem} to ${cycles[i].mem}`);
      assert.ok(cycles[i].mem >= cycles[i - 1].mem, 'wasm memory never shrinks');
    }
    assert.deepEqual(pp.filter((x) => !/Failed to load resource/.test(x)), []);
    await p.close();
  });
}

test('a download that stalls fails with code "timeout" naming the bytes and the URL; the next load works', async () => {
  for (const worker of [true, false]) {
    const r = await inPage(worker, `
      const res = {};
      const t0 = performance.now();
      try {
        await Model.load('/__test/stall/100000' + arg.url, { ...opts, stallTimeoutMs: 400 });
        res.stall = 'loaded?';
      } catch (e) { res.stall = [e.code, e.message, e.details]; }
      res.ms = performance.now() - t0;
      try { await Model.load(arg.url, { ...opts, stallTimeoutMs: -1 }); } catch (e) { res.bad = [e.code, e.message]; }
      const m = await Model.load(arg.url, { ...opts, stallTimeoutMs: 400 });
      res.after = [];
      for await (const t of m.generate(arg.text, arg.greedy)) res.after.push(t.token);
      await m.dispose();
      return res;
    `, { url: F16, text: HELLO.text, greedy: GREEDY });
    assert.ok(r.ok, r.message);
    const v = r.value;
    assert.equal(v.stall[0], 'timeout', v.stall[1]);
    assert.equal(v.stall[1], `http://localhost:${server.port}/__test/stall/100000${F16} stalled: no data for 400 ms after 97.7 KiB (100000 bytes) of ${(F16_SIZE / 1024 / 1024).toFixed(1)} MiB; the server or the connection stopped sending`);
    assert.deepEqual(v.stall[2], { loaded: 100000, total: F16_SIZE, url: `http://localhost:${server.port}/__test/stall/100000${F16}` });
    assert.ok(v.ms < 5000, `gave up after ${v.ms} ms`);
    assert.deepEqual(v.bad, ['invalid', 'stallTimeoutMs must be a number of milliseconds >= 0 (0: no limit), got -1']);
    assert.deepEqual(v.after, HELLO.greedy_ids);
  }
});

test('token ids: out of range, negative, non-integer, not numbers, not an array: "invalid" errors naming the id', async () => {
  const r = await inPage(true, `
    const m = await Model.load(arg.url, opts);
    const code = async (f) => { try { const v = await f(); return ['ok', v]; } catch (e) { return [e.code, e.message]; } };
    const out = {};
    const cases = { range: [15496, 50257], huge: [2 ** 32], negative: [1, -1], fraction: [1.5], nan: [NaN], string: ['7'], nul: [null] };
    for (const [k, ids] of Object.entries(cases)) {
      out['detokenize ' + k] = await code(() => m.detokenize(ids));
      out['logits ' + k] = await code(() => m.logits(ids));
    }
    for (const [k, v] of Object.entries({ number: 5, nothing: null, object: { 0: 1 } })) {
      out['detokenize ' + k] = await code(() => m.detokenize(v));
      out['logits ' + k] = await code(() => m.logits(v));
    }
    out['detokenize empty'] = await code(() => m.detokenize([]));
    out['logits empty'] = await code(() => m.logits([]));
    out['typed'] = await code(() => m.detokenize(new Uint32Array([15496])));
    await m.dispose();
    return out;
  `, { url: F16 });
  assert.ok(r.ok, r.message);
  const notInt = (what, i, v) => ['invalid', `${what}: token id at index ${i} is ${v}, not a non-negative integer`];
  const notArray = (what, t) => ['invalid', `${what}: token ids must be an array (or typed array) of integers, got ${t}`];
  assert.deepEqual(r.value, {
    'detokenize range': ['invalid', 'detokenize: tokenizer: token id 50257 at position 1 is out of range (vocabulary of 50257)'],
    'logits range': ['invalid', 'logits: token id 50257 at index 1 is outside the vocabulary (n_vocab 50257)'],
    'detokenize huge': notInt('detokenize', 0, 4294967296),
    'logits huge': notInt('logits', 0, 4294967296),
    'detokenize negative': notInt('detokenize', 1, -1),
    'logits negative': notInt('logits', 1, -1),
    'detokenize fraction': notInt('detokenize', 0, 1.5),
    'logits fraction': notInt('logits', 0, 1.5),
    'detokenize nan': notInt('detokenize', 0, 'NaN'),
    'logits nan': notInt('logits', 0, 'NaN'),
    'detokenize string': notInt('detokenize', 0, '"7"'),
    'logits string': notInt('logits', 0, '"7"'),
    'detokenize nul': notInt('detokenize', 0, 'null'),
    'logits nul': notInt('logits', 0, 'null'),
    'detokenize number': notArray('detokenize', '5'),
    'logits number': notArray('logits', '5'),
    'detokenize nothing': notArray('detokenize', 'null'),
    'logits nothing': notArray('logits', 'null'),
    // An object without a length is not array-like.
    'detokenize object': notArray('detokenize', '{"0":1}'),
    'logits object': notArray('logits', '{"0":1}'),
    'detokenize empty': ['ok', ''],
    'logits empty': ['invalid', 'logits: needs at least one token id'],
    typed: ['ok', 'Hello'],
  });
});

test('the page saw no uncaught errors', () => {
  assert.deepEqual(problems.filter((p) => !/Failed to load resource/.test(p)), []);
});
