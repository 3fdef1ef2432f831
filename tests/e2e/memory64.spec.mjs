// The Memory64 builds (web/pkg-m64/: wasm64, one thread, plain SIMD128; web/pkg-m64-threads/,
// its threaded twin; scripts/build-wasm.sh) in headless Chromium (Memory64 since Chrome 133).
// They run the same Rust as web/pkg/ with 64-bit pointers, so their tokens and logits must be
// web/pkg/'s bit for bit (`relaxedSimd: false` on both: the plain kernels), with 2 threads too. 'auto' picks it only for files of 3 GiB and more
// (engine.js planMemory64: below that the wasm32 builds are faster), so a small file takes
// `memory64: true`. Past 4 GiB — GPT-2 XL at F32, 6.2 GB — is npm run test:scale's
// tests/scale/memory64.spec.mjs (minutes of loading).
//   node --test tests/e2e/memory64.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { HF, MODELS_DIR, ROOT, openPage, useServerAndBrowser, writeHugeCtx } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f32.gguf) are needed: set GGWEB_MODELS_DIR');
assert.ok(existsSync(`${ROOT}web/pkg-m64/ggweb_core.js`), 'web/pkg-m64 is missing: run scripts/build-wasm.sh');
const F32 = '/shared-models/tiny-gpt2-f32.gguf';
const Q8 = '/shared-models/tiny-gpt2-q8_0.gguf';
const GREEDY = { maxTokens: 20, temperature: 0, seed: 1 };

const web = useServerAndBrowser();

/** Opens the harness (in a worker by default) and runs `body` with `Model` and `arg` in scope. */
async function inPage(body, arg) {
  const { page, problems } = await openPage(web.browser, `${web.server.url}e2e/harness.html`);
  try {
    const r = await page.evaluate(async ({ body, arg }) => {
      const G = await import('/ggweb.js');
      const fn = new Function('Model', 'arg', `return (async () => { ${body} })()`);
      try {
        return { ok: true, value: await fn(G.Model, arg) };
      } catch (e) {
        return { ok: false, code: e.code, message: e.message };
      }
    }, { body, arg });
    return { ...r, problems: problems.filter((m) => !m.includes('/favicon.ico')) };
  } finally {
    await page.close();
  }
}

// Per model and [memory64, nThreads] (arg.runs): info()'s threads and memory64, greedy
// tokens of every HF prompt with the CPU pool's jobs, and the logits of every prompt's ids.
const RUN = `
  const out = {};
  for (const url of arg.urls) {
    for (const [memory64, nThreads] of arg.runs) {
      const m = await Model.load(url, { nThreads, nBatch: 32, relaxedSimd: false, memory64 });
      const info = m.info();
      const r = { threads: info.threads, memory64: info.memory64, memory64Reason: info.memory64Reason, greedy: [], logits: [], jobs: [] };
      for (const p of arg.prompts) {
        const ids = [];
        const it = m.generate(p.text, arg.greedy);
        for await (const t of it) ids.push(t.token);
        r.greedy.push(ids);
        r.jobs.push((await it.stats).cpuJobs);
        r.logits.push(Array.from(await m.logits(p.ids)));
      }
      await m.dispose();
      out[url + '@' + memory64 + (nThreads === 1 ? '' : '@' + nThreads)] = r;
    }
  }
  return out;
`;

test('memory64: true runs pkg-m64 and gives web/pkg\'s tokens and logits bit for bit', async () => {
  const r = await inPage(RUN, { urls: [F32, Q8], prompts: HF.prompts, greedy: GREEDY, runs: [[true, 1], [false, 1]] });
  assert.ok(r.ok, r.message);
  assert.deepEqual(r.problems, []);
  for (const url of [F32, Q8]) {
    const m64 = r.value[`${url}@true`];
    const w32 = r.value[`${url}@false`];
    assert.equal(m64.memory64, true);
    assert.equal(m64.memory64Reason, null);
    assert.deepEqual(m64.threads, { n: 1, running: 1, build: 'pkg-m64', reason: 'nThreads: 1 was asked for' });
    assert.equal(w32.memory64, false);
    assert.equal(w32.memory64Reason, 'memory64: false was asked for');
    assert.equal(w32.threads.build, 'pkg');
    assert.deepEqual(m64.greedy, w32.greedy, `${url}: greedy tokens`);
    // The F32 model's greedy ids are Hugging Face's (tests/fixtures/tiny-gpt2.hf-rows.json).
    if (url === F32) assert.deepEqual(m64.greedy, HF.prompts.map((p) => p.greedy_ids.slice(0, GREEDY.maxTokens)));
    for (let i = 0; i < m64.logits.length; i++) {
      const at = m64.logits[i].findIndex((x, j) => !Object.is(x, w32.logits[i][j]));
      assert.equal(at, -1, `${url} prompt ${i}: logit ${at} differs (${m64.logits[i][at]} vs ${w32.logits[i][at]})`);
    }
  }
});

test('with 2 threads (an isolated page\'s worker) memory64: true runs pkg-m64-threads and gives web/pkg\'s tokens and logits bit for bit', async () => {
  assert.ok(existsSync(`${ROOT}web/pkg-m64-threads/ggweb_core.js`), 'web/pkg-m64-threads is missing: run scripts/build-wasm.sh');
  const r = await inPage(RUN, { urls: [F32, Q8], prompts: HF.prompts, greedy: GREEDY, runs: [[true, 2], [false, 1]] });
  assert.ok(r.ok, r.message);
  // Nothing on the console: no pool thread failed to start or instantiate the wasm64 module.
  assert.deepEqual(r.problems, []);
  for (const url of [F32, Q8]) {
    const m64 = r.value[`${url}@true@2`];
    const w32 = r.value[`${url}@false`];
    assert.equal(m64.memory64, true);
    assert.deepEqual(m64.threads, { n: 2, running: 2, build: 'pkg-m64-threads', reason: null });
    assert.equal(w32.threads.build, 'pkg');
    assert.deepEqual(m64.greedy, w32.greedy, `${url}: greedy tokens`);
    if (url === F32) assert.deepEqual(m64.greedy, HF.prompts.map((p) => p.greedy_ids.slice(0, GREEDY.maxTokens)));
    for (let i = 0; i < m64.logits.length; i++) {
      // The second thread really ran part of the work (the output projection is split).
      assert.ok(m64.jobs[i].split > 0 && m64.jobs[i].onWorkers > 0, `${url} prompt ${i}: jobs ${JSON.stringify(m64.jobs[i])}`);
      const at = m64.logits[i].findIndex((x, j) => !Object.is(x, w32.logits[i][j]));
      assert.equal(at, -1, `${url} prompt ${i}: logit ${at} differs (${m64.logits[i][at]} vs ${w32.logits[i][at]})`);
    }
  }
});

test("memory64: 'auto' keeps a small file on wasm32 and says why; a bad value is 'invalid'", async () => {
  const r = await inPage(`
    const m = await Model.load(arg.url, { nThreads: 1 });
    const info = m.info();
    await m.dispose();
    let bad = null;
    try { await Model.load(arg.url, { memory64: 'yes' }); } catch (e) { bad = { code: e.code, message: e.message }; }
    const again = await Model.load(arg.url, { memory64: 'auto', nThreads: 1 });
    const ok = (await again.logits([1, 2, 3])).length;
    await again.dispose();
    // The Memory64 builds run on the CPU only: WebGPU asked for with memory64: true is refused
    // before anything loads, and backend 'auto' on pkg-m64 runs on the CPU and says why.
    let gpu = null;
    try { await Model.load(arg.url, { memory64: true, backend: 'webgpu' }); } catch (e) { gpu = { code: e.code, message: e.message }; }
    const cpu = await Model.load(arg.url, { memory64: true, backend: 'auto', nThreads: 1 });
    const ci = cpu.info();
    await cpu.dispose();
    return { memory64: info.memory64, reason: info.memory64Reason, build: info.threads.build, bad, ok, gpu,
             auto: { memory64: ci.memory64, backend: ci.backend, note: ci.backendNote } };
  `, { url: F32 });
  assert.ok(r.ok, r.message);
  assert.equal(r.value.memory64, false);
  assert.match(r.value.reason, /^the file \(\d+ bytes\) is under 3221225472 bytes: the wasm32 builds are faster$/);
  assert.equal(r.value.build, 'pkg-relaxed');
  assert.deepEqual(r.value.bad, { code: 'invalid', message: "memory64 must be 'auto', true or false, got \"yes\"" });
  assert.ok(r.value.ok > 0, 'a load after the refused one works');
  assert.deepEqual(r.value.gpu, { code: 'unsupported', message: "memory64: true with backend 'webgpu': the Memory64 builds have no WebGPU backend (the wasm32 builds put the weights in GPU buffers)" });
  assert.equal(r.value.auto.memory64, true);
  assert.equal(r.value.auto.backend, 'cpu');
  assert.match(r.value.auto.note, /this build of the wasm module has no WebGPU backend; running on the CPU/);
});

test('Model.inspect with memory64: true plans against the Memory64 build (on the page thread)', async () => {
  const r = await inPage(`
    const a = await Model.inspect(arg.url, { memory64: true });
    const b = await Model.inspect(arg.url, { memory64: false });
    return { a: { m64: a.memory64, fits: a.fits, weights: a.memory.weights }, b: { m64: b.memory64, fits: b.fits, weights: b.memory.weights } };
  `, { url: Q8 });
  assert.ok(r.ok, r.message);
  const { a, b } = r.value;
  assert.equal(a.m64, true);
  assert.equal(b.m64, false);
  assert.equal(a.fits.ok, true, a.fits.reason);
  assert.equal(a.weights, b.weights, 'the same plan on either build');
  // The Memory64 build's budget is what is left of 16 GiB; wasm32's of 4 GiB.
  assert.ok(a.fits.wasmSpaceLeft > 4 * 2 ** 30 && a.fits.wasmSpaceLeft <= 16 * 2 ** 30, `${a.fits.wasmSpaceLeft}`);
  assert.ok(b.fits.wasmSpaceLeft < 4 * 2 ** 30, `${b.fits.wasmSpaceLeft}`);
  assert.equal(a.fits.limits.CPU.maxBufferSize, 16 * 2 ** 30 - 64);
  assert.equal(b.fits.limits.CPU.maxBufferSize, 2 ** 31 - 1 - 64);
});

test("the demo's hostile 4.3 GB file (n_ctx 2^22): inspect and load settle with memory64 true and 'auto' (issue #40)", async () => {
  // Its plan once trapped in pkg-m64 (the gradient pass over all 2^22 positions allocated
  // 843 GB of metric weights) and left the promise pending: now a plan that fits 16 GiB,
  // whose gradient over the whole context is refused (null), and on wasm32 a typed misfit.
  writeHugeCtx();
  const r = await inPage(`
    const url = '/artifacts/huge-ctx.gguf';
    // A hang fails the test; reading 4.3 GB takes 30-90 s on 2 loaded cores.
    const bound = (p, what, s) => Promise.race([p, new Promise((_, no) => setTimeout(() => no(new Error(what + ' did not settle in ' + s + ' s')), s * 1000))]);
    const plans = {};
    for (const memory64 of [true, 'auto', false]) {
      const p = await bound(Model.inspect(url, { memory64 }), 'Model.inspect', 60);
      plans[memory64] = { m64: p.memory64, fits: p.fits.ok, reason: p.fits.reason, memory: p.memory };
    }
    // nCtx 1024: the weights (1 GiB of them the 2^22 positions' embeddings) on pkg-m64, which
    // 'auto' picks for a file this size; the whole 4.3 GB is read.
    const t0 = performance.now();
    const m = await bound(Model.load(url, { memory64: 'auto', nCtx: 1024, nThreads: 1 }), 'Model.load', 300);
    const loadMs = Math.round(performance.now() - t0);
    const ids = [];
    for await (const t of m.generate('Hello', { maxTokens: 8, temperature: 0 })) ids.push(t.token);
    const info = m.info();
    await m.dispose();
    return { plans, ids, m64: info.memory64, build: info.threads.build, loadMs };
  `);
  console.log(`huge-ctx.gguf (4.3 GB) loaded on pkg-m64 in ${r.value?.loadMs} ms`);
  assert.ok(r.ok, r.message);
  assert.deepEqual(r.problems, []);
  const { plans } = r.value;
  for (const m64 of ['true', 'auto']) {
    assert.deepEqual(plans[m64], {
      m64: true, fits: true, reason: null,
      // As native `ggweb inspect` plans it (tests/loader/model_plan.rs): weights, the f32 KV
      // cache for 2^22 positions, the compute buffers for n_batch 32.
      memory: {
        weights: 1080688512, kv: 4294967296, compute: 2684371200, gradient: null, total: 8060027008, kvType: 'f32',
        byBackend: { CPU: { weights: 1080688512, kv: 4294967296, compute: 2684371200 } },
      },
    }, `memory64: ${m64}`);
  }
  assert.equal(plans.false.m64, false);
  assert.equal(plans.false.fits, false);
  assert.match(plans.false.reason, /^model too large: needs 2147483648 bytes \(its largest tensor/);
  assert.equal(r.value.m64, true);
  assert.equal(r.value.build, 'pkg-m64');
  // Native `ggweb generate -m huge-ctx.gguf -c 1024 -p Hello -n 8 --temperature 0`'s ids
  // (the tiny Q8_0 model with zero position embeddings).
  assert.deepEqual(r.value.ids, [20870, 20870, 25544, 46407, 46407, 46407, 46407, 46407]);
});
