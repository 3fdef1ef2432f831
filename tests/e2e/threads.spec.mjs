// The threaded wasm build (web/pkg-threads/, scripts/build-wasm.sh) in headless Chromium:
// a cross-origin isolated page (serve.mjs sends COOP/COEP) loads the tiny GPT-2s with
// nThreads 2 — the model's worker starts one more Web Worker on the same shared memory —
// and must give exactly what one thread (web/pkg/) gives: mul_mat is split by rows of the
// weights, each output element computed by the same code, so the tolerance is zero. A page
// served without COOP/COEP (/__test/noisolation/...) and a model on the page's own thread
// fall back to web/pkg/ with one thread, and info().threads says why. Chromium has relaxed
// SIMD, so by default the '-relaxed' twins of both builds load; relaxedSimd: false loads
// the plain ones, whose logits differ from the fused multiply-add's only in the last bits.
//   node --test tests/e2e/threads.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { HF, MODELS_DIR, ROOT, openPage, useServerAndBrowser } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f32.gguf) are needed: set GGWEB_MODELS_DIR');
assert.ok(existsSync(`${ROOT}web/pkg-threads/ggweb_core.js`), 'web/pkg-threads is missing: run scripts/build-wasm.sh');
const F32 = '/shared-models/tiny-gpt2-f32.gguf';
const Q8 = '/shared-models/tiny-gpt2-q8_0.gguf';
const GREEDY = { maxTokens: 20, temperature: 0, seed: 1 };

const web = useServerAndBrowser();

/** Opens `path` and runs `body` there with `Model` and `arg` in scope. */
async function inPage(path, body, arg) {
  const { page, problems } = await openPage(web.browser, `${web.server.url}${path}`);
  try {
    const r = await page.evaluate(async ({ body, arg }) => {
      const G = await import('/ggweb.js');
      const fn = new Function('Model', 'arg', `return (async () => { ${body} })()`);
      try {
        return { ok: true, value: await fn(G.Model, arg), isolated: self.crossOriginIsolated };
      } catch (e) {
        return { ok: false, code: e.code, message: e.message };
      }
    }, { body, arg });
    return { ...r, problems };
  } finally {
    await page.close();
  }
}

// Per model and thread count: info().threads, greedy tokens of every HF prompt, and the
// logits of every prompt's ids.
const RUN = `
  const out = {};
  for (const url of arg.urls) {
    for (const n of [1, 2]) {
      const m = await Model.load(url, { nThreads: n, nBatch: 32, relaxedSimd: arg.relaxedSimd });
      const r = { threads: m.info().threads, greedy: [], logits: [], jobs: [] };
      for (const p of arg.prompts) {
        const ids = [];
        const it = m.generate(p.text, arg.greedy);
        for await (const t of it) ids.push(t.token);
        r.greedy.push(ids);
        r.jobs.push((await it.stats).cpuJobs);
        r.logits.push(Array.from(await m.logits(p.ids)));
      }
      await m.dispose();
      out[url + '@' + n] = r;
    }
  }
  return out;
`;

test('an isolated page runs 2 threads (pkg-threads-relaxed) and gets 1 thread\'s exact tokens and logits', async () => {
  const r = await inPage('e2e/harness.html', RUN, { urls: [F32, Q8], prompts: HF.prompts, greedy: GREEDY });
  assert.ok(r.ok, r.message);
  assert.equal(r.isolated, true, 'serve.mjs sends COOP/COEP: the harness is cross-origin isolated');
  // Nothing on the console but the harness's missing favicon: no worker thread failed.
  assert.deepEqual(r.problems.filter((m) => !m.includes('/favicon.ico')), []);
  for (const url of [F32, Q8]) {
    const one = r.value[`${url}@1`];
    const two = r.value[`${url}@2`];
    assert.deepEqual(one.threads, { n: 1, running: 1, build: 'pkg-relaxed', reason: 'nThreads: 1 was asked for' });
    assert.deepEqual(two.threads, { n: 2, running: 2, build: 'pkg-threads-relaxed', reason: null });
    HF.prompts.forEach((p, i) => {
      // Q8_0 weights change the continuation; F32's is HF's.
      if (url === F32) assert.deepEqual(one.greedy[i], p.greedy_ids, `${url} ${p.key}: 1 thread, HF's greedy ids`);
      assert.equal(one.greedy[i].length, 20);
      assert.deepEqual(two.greedy[i], one.greedy[i], `${url} ${p.key}: 2 threads, 1 thread's greedy ids`);
      assert.equal(two.logits[i].length, 50257);
      // The second thread really ran part of the work (the output projection is split).
      assert.deepEqual(one.jobs[i], { split: 0, onWorkers: 0 });
      assert.ok(two.jobs[i].split > 0 && two.jobs[i].onWorkers > 0, `${url} ${p.key}: jobs ${JSON.stringify(two.jobs[i])}`);
      // Tolerance 0: the same bits, element by element.
      const diff = two.logits[i].findIndex((x, j) => !Object.is(x, one.logits[i][j]));
      assert.equal(diff, -1, `${url} ${p.key}: logit ${diff} differs: ${two.logits[i][diff]} vs ${one.logits[i][diff]}`);
    });
  }
});

test('relaxedSimd: false loads the plain builds: the same tokens, logits within 1e-4 of the fused ones and not all equal', async () => {
  const fused = await inPage('e2e/harness.html', RUN, { urls: [F32], prompts: HF.prompts, greedy: GREEDY });
  const plain = await inPage('e2e/harness.html', RUN, { urls: [F32], prompts: HF.prompts, greedy: GREEDY, relaxedSimd: false });
  assert.ok(fused.ok, fused.message);
  assert.ok(plain.ok, plain.message);
  assert.deepEqual(plain.problems.filter((m) => !m.includes('/favicon.ico')), []);
  assert.equal(plain.value[`${F32}@1`].threads.build, 'pkg');
  assert.equal(plain.value[`${F32}@2`].threads.build, 'pkg-threads');
  let differ = 0;
  for (const n of [1, 2]) {
    const a = fused.value[`${F32}@${n}`];
    const b = plain.value[`${F32}@${n}`];
    HF.prompts.forEach((p, i) => {
      assert.deepEqual(b.greedy[i], p.greedy_ids, `${p.key}: plain build, ${n} thread(s): HF's greedy ids`);
      assert.deepEqual(a.greedy[i], p.greedy_ids, `${p.key}: relaxed build, ${n} thread(s): HF's greedy ids`);
      // A fused multiply-add rounds once where mul + add rounds twice: over K = 64..256
      // products of unit-scale values that moves a logit by ~1e-6, far under 1e-4.
      const worst = Math.max(...a.logits[i].map((x, j) => Math.abs(x - b.logits[i][j])));
      assert.ok(worst < 1e-4, `${p.key}: ${n} thread(s): max |fused - plain| = ${worst}`);
      differ += a.logits[i].filter((x, j) => !Object.is(x, b.logits[i][j])).length;
    });
  }
  // Some bits differ: the relaxed builds really multiply-add fused.
  assert.ok(differ > 0, 'the relaxed and plain builds gave identical logits: is the fused multiply-add in use?');
});

test('relaxedSimd must be a boolean', async () => {
  const r = await inPage('e2e/harness.html', `
    try { await Model.load(arg.url, { relaxedSimd: 'no' }); return 'loaded?'; } catch (e) { return [e.code, e.message]; }
  `, { url: F32 });
  assert.ok(r.ok, r.message);
  assert.deepEqual(r.value, ['invalid', 'relaxedSimd must be true or false, got "no"']);
});

test('the default thread count on an isolated page is min(hardwareConcurrency, 4)', async () => {
  const r = await inPage('e2e/harness.html', `
    const m = await Model.load(arg.url);
    const t = m.info().threads;
    await m.dispose();
    return { t, cores: navigator.hardwareConcurrency };
  `, { url: F32 });
  assert.ok(r.ok, r.message);
  const want = Math.min(r.value.cores, 4);
  assert.equal(r.value.t.n, want);
  assert.equal(r.value.t.build, want > 1 ? 'pkg-threads-relaxed' : 'pkg-relaxed');
  assert.equal(r.value.t.running, want);
});

test('without COOP/COEP, or on the page thread, nThreads 2 falls back to pkg/ with 1 thread and says why', async () => {
  const plain = await inPage('__test/noisolation/e2e/harness.html', `
    const m = await Model.load(arg.url, { nThreads: 2 });
    const ids = [];
    for await (const t of m.generate(arg.p.text, arg.greedy)) ids.push(t.token);
    const t = m.info().threads;
    await m.dispose();
    return { t, ids, sab: typeof SharedArrayBuffer };
  `, { url: F32, p: HF.prompts[0], greedy: GREEDY });
  assert.ok(plain.ok, plain.message);
  assert.equal(plain.isolated, false);
  assert.deepEqual(plain.value.t, {
    n: 1, running: 1, build: 'pkg-relaxed',
    reason: 'the page is not cross-origin isolated: serve it with the headers ' +
      'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp',
  });
  assert.deepEqual(plain.value.ids, HF.prompts[0].greedy_ids);

  const local = await inPage('e2e/harness.html', `
    const m = await Model.load(arg.url, { nThreads: 2, worker: false });
    const t = m.info().threads;
    await m.dispose();
    return t;
  `, { url: F32 });
  assert.ok(local.ok, local.message);
  assert.equal(local.isolated, true);
  assert.deepEqual(local.value, {
    n: 1, running: 1, build: 'pkg-relaxed',
    reason: "the model runs on the page's main thread ({ worker: false }), which must not block",
  });
});

test('nThreads must be an integer from 1 to 64', async () => {
  const r = await inPage('e2e/harness.html', `
    const out = [];
    for (const n of [0, 1.5, 65, '2']) {
      try { await Model.load(arg.url, { nThreads: n }); out.push('loaded?'); } catch (e) { out.push([e.code, e.message]); }
    }
    return out;
  `, { url: F32 });
  assert.ok(r.ok, r.message);
  assert.deepEqual(r.value, [
    ['invalid', 'nThreads must be an integer >= 1 and <= 64, got 0'],
    ['invalid', 'nThreads must be an integer >= 1 and <= 64, got 1.5'],
    ['invalid', 'nThreads must be an integer >= 1 and <= 64, got 65'],
    ['invalid', 'nThreads must be an integer >= 1 and <= 64, got "2"'],
  ]);
});

test('backend "webgpu" also runs from the threaded build (same tokens), with 1 CPU thread and the reason', async () => {
  const r = await inPage('e2e/harness.html', `
    const out = {};
    for (const n of [1, 2]) {
      const m = await Model.load(arg.url, { backend: 'webgpu', nThreads: n });
      const ids = [];
      for await (const t of m.generate(arg.p.text, arg.greedy)) ids.push(t.token);
      out[n] = { ids, threads: m.info().threads, backend: m.info().load.backend };
      await m.dispose();
    }
    return out;
  `, { url: F32, p: HF.prompts[0], greedy: GREEDY });
  assert.ok(r.ok, r.message);
  assert.equal(r.value[1].backend, 'webgpu');
  assert.equal(r.value[2].backend, 'webgpu');
  assert.deepEqual(r.value[1].threads, { n: 1, running: 1, build: 'pkg-relaxed', reason: 'nThreads: 1 was asked for' });
  assert.deepEqual(r.value[2].threads, { n: 1, running: 1, build: 'pkg-threads-relaxed', reason: 'backend "webgpu" runs the model on the GPU' });
  assert.deepEqual(r.value[1].ids, HF.prompts[0].greedy_ids);
  assert.deepEqual(r.value[2].ids, r.value[1].ids);
});
