// The model checks every browser engine gets (tests/engines/*.spec.mjs), as one function run in
// the page: one page load per engine does them all, and the spec files assert on the parts.
// `pageChecks` is sent to the browser as source text (Puppeteer and Selenium both take a
// string), so it must not use anything from this module's scope.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { HF, MODELS_DIR } from '../e2e/helpers.mjs';

export const F16 = '/shared-models/tiny-gpt2-f16.gguf';
export const F32 = '/shared-models/tiny-gpt2-f32.gguf';
export const F16_SIZE = MODELS_DIR ? statSync(`${MODELS_DIR}/tiny-gpt2-f16.gguf`).size : 0;
export const GREEDY = { maxTokens: 20, temperature: 0, seed: 1 };

/** What the page needs: the model URLs, HF's prompts (ids, greedy ids), the sampling options. */
export const CHECK_ARG = { f16: F16, f32: F32, prompts: HF.prompts, greedy: GREEDY };

/** The reason planThreads gives on a page's main thread (web/engine.js). */
export const MAIN_THREAD_REASON = "the model runs on the page's main thread ({ worker: false }), which must not block";

/**
 * Runs in the page (an isolated one: serve.mjs sends COOP/COEP). Returns plain JSON: what the
 * engine has, then each check's observations (never logits themselves, only their distance).
 */
export async function pageChecks(arg) {
  const errors = [];
  self.addEventListener('error', (e) => errors.push(`error: ${e.message}`));
  self.addEventListener('unhandledrejection', (e) => errors.push(`unhandledrejection: ${e.reason}`));
  const G = await import('/ggweb.js');
  const E = await import('/builds.js');
  const { Model } = G;
  const code = async (f) => { try { await f(); return 'ok'; } catch (e) { return [e.code, e.message, e instanceof G.GgwebError]; } };
  const greedyIds = async (m, text, o) => { const ids = []; for await (const t of m.generate(text, o)) ids.push(t.token); return ids; };
  // Sections 3-5 run one thread: in Firefox a threaded load now and then never settles
  // after failed ones (docs/engines.md, "Known problem"); sections 1 and 2 check the threads.
  const one = { nThreads: 1 };
  // Where the checks are, with the ms since they began: a hung page reports it (drivers.mjs).
  const t0 = performance.now();
  const at = (s) => { self.__checksAt = `${s} (at ${Math.round(performance.now() - t0)} ms)`; };
  const out = {
    engine: {
      isolated: self.crossOriginIsolated,
      sab: typeof SharedArrayBuffer,
      relaxedSimd: E.hasRelaxedSimd(),
      gpu: typeof navigator.gpu !== 'undefined',
      cores: navigator.hardwareConcurrency,
      ua: navigator.userAgent,
    },
  };

  at('1: load');
  // 1. In a worker with 2 threads asked for: the F16 file over HTTP with progress, HF's token
  //    ids, the detokenized text, HF's greedy tokens streamed with their text.
  {
    const events = [];
    const m = await Model.load(arg.f16, { nThreads: 2, nBatch: 32, onProgress: (p) => { events.push(p); at(`1: load, ${p.phase} ${p.loaded}`); } });
    const prompts = [];
    for (const p of arg.prompts) {
      at(`1: ${p.key}: tokenize`);
      const ids = Array.from(await m.tokenize(p.text));
      const text = await m.detokenize(ids);
      const tokens = [];
      let pieces = '';
      const it = m.generate(p.text, arg.greedy);
      at(`1: ${p.key}: generate`);
      for await (const t of it) { tokens.push(t.token); pieces += t.text; at(`1: ${p.key}: generated ${tokens.length}`); }
      const s = await it.stats;
      prompts.push({ ids, text, tokens, pieces, stop: s.stop, n: s.tokens, promptTokens: s.promptTokens, jobs: s.cpuJobs });
    }
    at('1: dispose');
    const info = m.info();
    out.load = {
      inWorker: m.inWorker, threads: info.threads, backend: info.load.backend, via: info.load.via, bytes: info.load.bytes,
      phases: [...new Set(events.map((e) => e.phase))], last: events.at(-1),
      growing: events.filter((e) => e.phase === 'download').every((e, i, a) => i === 0 || e.loaded >= a[i - 1].loaded),
      prompts,
    };
    await m.dispose();
  }

  at('2: logits');
  // 2. F32 logits against HF's rows (tests/fixtures/tiny-gpt2.hf-rows.bin), in the worker with
  //    2 threads and on the page thread (one thread by design).
  {
    const rows = new Float32Array(await (await fetch('/tests/fixtures/tiny-gpt2.hf-rows.bin')).arrayBuffer());
    const n = 50257;
    const top5 = (a) => Array.from(a.keys()).sort((x, y) => a[y] - a[x] || x - y).slice(0, 5);
    out.logits = {};
    for (const worker of [true, false]) {
      at(`2: load (worker: ${worker})`);
      const m = await Model.load(arg.f32, { worker, nThreads: 2, nBatch: 32 });
      at(`2: logits (worker: ${worker})`);
      const r = { threads: m.info().threads, prompts: [] };
      for (const p of arg.prompts) {
        const l = await m.logits(p.ids);
        const ref = rows.subarray(p.row.index * n, (p.row.index + 1) * n);
        let d = 0;
        for (let i = 0; i < n; i++) d = Math.max(d, Math.abs(l[i] - ref[i]));
        r.prompts.push({ len: l.length, type: l.constructor.name, maxDiff: d, top5: top5(l) });
      }
      r.greedy = await greedyIds(m, arg.prompts[0].text, arg.greedy);
      await m.dispose();
      out.logits[worker ? 'worker' : 'page'] = r;
    }
  }

  at('3: abort');
  // 3. Abort mid-load (a slow download: 16 KiB per 20 ms, aborted after 200 kB), a connection
  //    dropped at 1 MB, abort mid-generation after 3 tokens, then generate again and reload.
  {
    const r = {};
    const ac = new AbortController();
    const t0 = performance.now();
    try {
      await Model.load('/__test/slow/20' + arg.f16, { ...one, signal: ac.signal, onProgress: (e) => { if (e.loaded > 200000) ac.abort(); } });
      r.load = 'loaded?';
    } catch (e) { r.load = [e.code, performance.now() - t0 < 5000]; }
    try { await Model.load('/__test/drop/1000000' + arg.f16, one); r.drop = 'loaded?'; } catch (e) { r.drop = e.code; }
    const m = await Model.load(arg.f16, { ...one, nBatch: 32 });
    const gen = new AbortController();
    r.beforeAbort = [];
    try {
      for await (const t of m.generate(arg.prompts[0].text, { ...arg.greedy, maxTokens: 100, signal: gen.signal })) {
        r.beforeAbort.push(t.token);
        if (r.beforeAbort.length === 3) gen.abort();
      }
      r.abort = 'finished?';
    } catch (e) { r.abort = e.code; }
    r.afterAbort = await greedyIds(m, arg.prompts[0].text, arg.greedy);
    await m.dispose();
    r.disposed = await code(() => m.tokenize('x'));
    const m2 = await Model.load(arg.f16, { ...one, nBatch: 32 });
    r.fresh = await greedyIds(m2, arg.prompts[0].text, arg.greedy);
    await m2.dispose();
    out.abort = r;
  }

  at('4: errors');
  // 4. Errors with codes: not a GGUF, a truncated file, a context over the model's, token ids
  //    out of range, a full context.
  {
    const r = {};
    r.notGguf = await code(() => Model.load('/e2e/harness.html', one));
    const head = new Uint8Array(await (await fetch(arg.f16, { headers: { Range: 'bytes=0-4194303' } })).arrayBuffer());
    r.truncated = await code(() => Model.load(head, one));
    r.bigCtx = await code(() => Model.load(arg.f16, { ...one, nCtx: 4096 }));
    const m = await Model.load(arg.f16, { ...one, nCtx: 8 });
    r.detok = await code(() => m.detokenize([15496, 50257]));
    r.logits = await code(() => m.logits(new Array(9).fill(11)));
    r.negative = await code(() => m.logits([1, -1]));
    await m.dispose();
    out.errors = r;
  }

  at('5: webgpu');
  // 5. WebGPU: 'auto' falls back to the CPU and says why; 'webgpu' fails with 'unsupported'.
  {
    const r = {};
    for (const worker of [true, false]) {
      const m = await Model.load(arg.f16, { ...one, worker, backend: 'auto', nCtx: 16 });
      const info = m.info();
      r[worker ? 'autoWorker' : 'autoPage'] = {
        backend: info.backend, loadBackend: info.load.backend, note: info.backendNote,
        ids: await greedyIds(m, arg.prompts[0].text, { maxTokens: 4, temperature: 0 }),
      };
      await m.dispose();
    }
    r.webgpu = await code(() => Model.load(arg.f16, { ...one, backend: 'webgpu' }));
    out.webgpu = r;
  }

  at('6: look inside');
  // 6. TransformerLens's workflow (README "Look inside") against TransformerLens/SAELens's
  // fixtures, every check of tests/e2e/look-inside.spec.mjs and tl-hooks.spec.mjs: each hook
  // point's capture, every hook case, the four patching sweeps, the logit lens, attribution,
  // an SAE, steered greedy generation. The page reports the largest difference per part.
  {
    const REF = await (await fetch('/tests/fixtures/tiny-f32.tl-ref.json')).json();
    const bin = new Float32Array(await (await fetch(`/tests/fixtures/${REF.bin}`)).arrayBuffer());
    const block = (name) => { const { offset, shape } = REF.blocks[name]; return bin.subarray(offset, offset + shape.reduce((x, y) => x * y, 1)); };
    // Masked attention scores are -Infinity in both (TransformerLens's meaning), not a difference.
    const maxDelta = (got, want) => want.reduce((d, w, i) => Math.max(d, w === -Infinity && got[i] === -Infinity ? 0 : Math.abs(got[i] - w)),
      got.length === want.length ? 0 : Infinity);
    const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { ...one });
    const nVocab = m.info().hparams.nVocab;
    const pick = (logits) => {
      const picked = [];
      for (let p = 0; p < REF.prompt.length; p++) for (const c of REF.logit_ids) picked.push(logits[p * nVocab + c]);
      return picked;
    };
    let hooked = 0;
    for (let i = 0; i < REF.hooks.length; i++) {
      const hooks = REF.hooks[i].hooks.map((h) => (Array.isArray(h.value) ? { ...h, value: new Float32Array(h.value) } : h));
      hooked = Math.max(hooked, maxDelta(pick((await m.run(REF.prompt, { hooks })).logits), block(`hooks/${i}/logits`)));
    }
    const cache = (await m.run(REF.prompt, { capture: REF.hook_names })).cache;
    let captured = Object.keys(cache).length === REF.hook_names.length ? 0 : Infinity;
    for (const name of REF.hook_names) captured = Math.max(captured, maxDelta(cache[name]?.data ?? [], block(`capture/${name}`)));
    let patch = 0;
    for (const at of ['resid_pre', 'attn_out', 'mlp_out', 'z']) {
      const r = await m.patch(REF.clean, REF.corrupted, { at, answer: REF.answer, against: REF.against });
      patch = Math.max(patch, maxDelta(Array.from(r.cells), block(`patch/${at}`)));
    }
    const lens = await m.logitLens(REF.prompt, { topK: REF.lens.top_k });
    const a = await m.attribute(REF.clean, { answer: REF.answer, against: REF.against });
    const A = REF.attribution;
    const attribution = Math.max(
      maxDelta([a.embed, a.posEmbed, a.lnBias, a.total], [A.embed, A.posEmbed, A.lnBias, A.logit_diff]),
      maxDelta(Array.from(a.heads), block('attribution/heads')), maxDelta(Array.from(a.attnBias), block('attribution/attn_bias')),
      maxDelta(Array.from(a.mlps), block('attribution/mlps')));
    const sae = await m.loadSae('/tests/fixtures/tiny-sae/');
    const enc = await sae.encode(REF.prompt, { topK: REF.sae.top_k });
    await sae.dispose();
    const steered = [];
    for (const st of REF.steer) {
      const toks = [];
      for await (const t of m.generate(st.prompt, { hooks: st.hooks, maxTokens: st.tokens.length, temperature: 0, ignoreEos: true })) toks.push(t.token);
      steered.push(JSON.stringify(toks) === JSON.stringify(st.tokens));
    }
    await m.dispose();
    out.inside = {
      hooked, captured, patch, attribution,
      lensIds: JSON.stringify(lens.top.map((l) => l.map((p) => p.map((t) => t.token)))) === JSON.stringify(REF.lens.top_ids),
      lensLogprobs: maxDelta(lens.logprobs.flatMap((l) => Array.from(l)), block('lens/logprobs')),
      saeIds: JSON.stringify(enc.top.map((p) => p.map((t) => t.index))) === JSON.stringify(REF.sae.top_ids),
      saeValues: maxDelta(enc.top.flatMap((p) => p.map((t) => t.value)), block('sae/top_values')),
      saeL0: JSON.stringify(Array.from(enc.l0)) === JSON.stringify(Array.from(block('sae/l0'))),
      saeMse: maxDelta(Array.from(enc.mse), block('sae/mse')),
      steered,
    };
  }

  out.errorsSeen = errors;
  return out;
}

/**
 * Registers the node:test tests that read one engine's `pageChecks` result. `get()` returns
 * { value, problems }; `expect` is what this engine gets:
 *   { threads: info().threads in a worker with nThreads 2, pageBuild: the build on the page
 *     thread, relaxedSimd, sab, webgpuNote: info().backendNote of 'auto', webgpuError }.
 */
export function assertChecks(get, expect) {
  const HELLO = HF.prompts[0];
  const v = () => {
    const r = get();
    assert.ok(r?.value && !r.value.fatal, `the page's checks did not finish: ${r?.value?.fatal ?? 'no result'}`);
    return r.value;
  };

  test('the engine has what the table in README.md says', () => {
    const e = v().engine;
    console.log(`engine: ${e.ua}; ${e.cores} cores`);
    assert.deepEqual(
      { isolated: e.isolated, sab: e.sab, relaxedSimd: e.relaxedSimd, gpu: e.gpu },
      { isolated: true, sab: expect.sab, relaxedSimd: expect.relaxedSimd, gpu: expect.gpu });
  });

  test('loads the F16 GGUF over HTTP in a worker with progress; threads as documented', () => {
    const l = v().load;
    assert.equal(l.inWorker, true);
    assert.deepEqual(l.threads, expect.threads);
    assert.equal(l.backend, 'cpu');
    assert.equal(l.via, 'download');
    assert.equal(l.bytes, F16_SIZE);
    assert.deepEqual(l.phases, ['download', 'build', 'ready']);
    assert.deepEqual(l.last, { loaded: F16_SIZE, total: F16_SIZE, phase: 'ready' });
    assert.equal(l.growing, true, 'download progress never goes back');
  });

  test("tokenizes as HF does and generates HF's greedy tokens", () => {
    const l = v().load;
    HF.prompts.forEach((p, i) => {
      const o = l.prompts[i];
      assert.deepEqual(o.ids, p.ids, `${p.key}: token ids`);
      assert.equal(o.text, p.text, `${p.key}: detokenized`);
      assert.deepEqual(o.tokens, p.greedy_ids, `${p.key}: greedy ids`);
      assert.equal(o.pieces, p.greedy_text, `${p.key}: streamed text`);
      assert.deepEqual([o.stop, o.n, o.promptTokens], ['maxTokens', 20, p.ids.length]);
      if (expect.threads.n === 1) assert.deepEqual(o.jobs, { split: 0, onWorkers: 0 });
      else assert.ok(o.jobs.split > 0, `${p.key}: jobs ${JSON.stringify(o.jobs)}`);
    });
    // With 2 threads the second one really ran part of the products: summed over the prompts,
    // as the caller takes the jobs a descheduled helper has not claimed (on a loaded machine
    // it can miss a whole short prompt).
    if (expect.threads.n > 1) assert.ok(l.prompts.some((o) => o.jobs.onWorkers > 0), `jobs: ${JSON.stringify(l.prompts.map((o) => o.jobs))}`);
  });

  test('F32 logits are within 1e-4 of HF, in the worker and on the page thread', () => {
    const { worker, page } = v().logits;
    assert.deepEqual(worker.threads, expect.threads);
    assert.deepEqual(page.threads, { n: 1, running: 1, build: expect.pageBuild, reason: MAIN_THREAD_REASON });
    for (const [where, r] of [['worker', worker], ['page', page]]) {
      HF.prompts.forEach((p, i) => {
        const o = r.prompts[i];
        console.log(`${where} ${p.key}: max |logit - HF| ${o.maxDiff.toExponential(2)}`);
        assert.deepEqual([o.len, o.type], [50257, 'Float32Array']);
        // HF's rows are F32 PyTorch on the CPU; the kernels sum in another order (and fuse
        // multiply-adds in the relaxed builds): ~1e-6 here, 1e-4 is the project's bound.
        assert.ok(o.maxDiff <= 1e-4, `${where} ${p.key}: max diff ${o.maxDiff}`);
        assert.deepEqual(o.top5, p.last_top5_ids, `${where} ${p.key}: top 5`);
      });
      assert.deepEqual(r.greedy, HELLO.greedy_ids, `${where}: F32 greedy ids`);
    }
  });

  test('abort mid-load and mid-generation, a dropped connection, dispose: it recovers each time', () => {
    const a = v().abort;
    assert.deepEqual(a.load, ['aborted', true]);
    assert.equal(a.drop, 'network');
    assert.equal(a.abort, 'aborted');
    assert.deepEqual(a.beforeAbort, HELLO.greedy_ids.slice(0, 3));
    assert.deepEqual(a.afterAbort, HELLO.greedy_ids);
    assert.equal(a.disposed[0], 'disposed');
    assert.deepEqual(a.fresh, HELLO.greedy_ids);
  });

  test('errors carry codes and say what and where', () => {
    const e = v().errors;
    assert.deepEqual(e.notGguf.slice(0, 1), ['format']);
    assert.match(e.notGguf[1], /e2e\/harness\.html at byte 0: GGUF: not a GGUF file: magic \[3c, 21, 64, 6f\], expected "GGUF", at byte 0$/);
    assert.equal(e.truncated[0], 'format');
    assert.match(e.truncated[1], new RegExp(`^the model stream: GGUF: truncated: needed at least ${F16_SIZE} bytes, the stream ended after 4194304, in tensor '[^']+', at byte 4194304$`));
    assert.equal(e.bigCtx[0], 'invalid');
    assert.match(e.bigCtx[1], /invalid options: n_ctx 4096 exceeds the model's context length 128$/);
    assert.deepEqual(e.detok, ['invalid', 'detokenize: tokenizer: token id 50257 at position 1 is out of range (vocabulary of 50257)', true]);
    assert.deepEqual(e.logits, ['invalid', 'logits: context full: 9 positions needed, n_ctx is 8', true]);
    assert.deepEqual(e.negative, ['invalid', 'logits: token id at index 1 is -1, not a non-negative integer', true]);
    for (const k of ['notGguf', 'truncated', 'bigCtx']) assert.equal(e[k][2], true, `${k}: a GgwebError`);
  });

  test("without WebGPU: 'auto' runs on the CPU and says why, 'webgpu' fails with 'unsupported'", () => {
    const w = v().webgpu;
    for (const k of ['autoWorker', 'autoPage']) {
      assert.deepEqual(w[k], { backend: 'cpu', loadBackend: 'cpu', note: expect.webgpuNote, ids: HELLO.greedy_ids.slice(0, 4) }, k);
    }
    assert.deepEqual(w.webgpu, ['unsupported', expect.webgpuError, true]);
  });

  test('looking inside: every hook point, hook case, patching sweep, the lens, attribution, an SAE and steering equal TransformerLens and SAELens', () => {
    const i = v().inside;
    console.log(`look inside: ${JSON.stringify(i)}`);
    // The bounds: captures 2e-5; hooked logits, patching cells, lens logprobs,
    // attribution and SAE values 1e-4.
    assert.ok(i.captured <= 2e-5, `captures: ${i.captured}`);
    for (const k of ['hooked', 'patch', 'attribution', 'lensLogprobs', 'saeValues', 'saeMse']) assert.ok(i[k] <= 1e-4, `${k}: ${i[k]}`);
    assert.deepEqual([i.lensIds, i.saeIds, i.saeL0], [true, true, true]);
    assert.deepEqual(i.steered, [true, true], 'steered greedy generations equal TransformerLens');
  });

  test('the page saw no uncaught errors', () => {
    const r = get();
    assert.deepEqual([...v().errorsSeen, ...r.problems.filter((p) => !/favicon\.ico/.test(p))], []);
  });
}
