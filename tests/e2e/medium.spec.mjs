// GPT-2 medium's shape (24 × 1024, 16 heads, Q8_0, ~440 MB) in headless Chromium through
// the package: the model and the native CLI's reference are written by the cargo test
// tests/model/scale_medium.rs (npm test runs it in the step before this one) into
// target/tmp/scale-models/. On the plain builds (relaxedSimd: false), 1 thread (pkg/) and 2
// threads (pkg-threads/): the native greedy tokens exactly, the prompt's logits within
// LOGIT_BOUND of native, Model.inspect's plan equal to info().memory and to the native plan,
// and the wasm heap after the load within the plan + 16 MiB. 1 and 2 threads give the same
// bits; native and wasm do not: natively the f32 products use AVX2's fused multiply-add, the
// plain wasm builds multiply then add, and every Q8_0 product re-quantizes its activations,
// so a last-bit difference that moves one activation across a rounding step shifts a dot
// product by a whole step. Measured on this model: max |wasm - native| 0.022 (for scale: an
// F16 KV cache moves the same logits by 0.05-0.06). The XL, large and Q4_K_M versions are
// tests/scale/ (npm run test:scale).
//   cargo test --test model scale_medium && node --test tests/e2e/medium.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { ROOT, launch, serve } from './helpers.mjs';
import { MIB, browserRun, logitDiff, planBytes } from './native-vs-wasm.mjs';

const DIR = `${process.env.CARGO_TARGET_DIR ?? `${ROOT}target`}/tmp/scale-models`;
const REF_FILE = `${DIR}/bench-medium-q8_0.native.json`;
assert.ok(existsSync(REF_FILE), `${REF_FILE} is missing: run \`cargo test --test model scale_medium\` first (it writes the model and the native reference)`);
const REF = JSON.parse(readFileSync(REF_FILE, 'utf8'));
REF.logits = REF.logits.map(Math.fround);
// Measured 0.022 (see the header): about twice that.
const LOGIT_BOUND = 0.05;

let server;
let browser;

before(async () => {
  server = await serve([['/scale-models/', DIR]]);
  browser = await launch();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

for (const [nThreads, build] of [[1, 'pkg'], [2, 'pkg-threads']]) {
  test(`medium Q8_0 on ${build} (${nThreads} thread${nThreads > 1 ? 's' : ''}): native tokens and logits, heap within the plan`, async () => {
    const opts = { nThreads, nBatch: 32, relaxedSimd: false };
    const r = await browserRun(browser, server, `/scale-models/${REF.file}`, opts, REF.prompt, REF.prompt_ids, REF.n_predict);
    assert.ok(r.ok, r.message);
    assert.deepEqual(r.problems, []);
    assert.deepEqual(r.info.threads, { n: nThreads, running: nThreads, build, reason: nThreads === 1 ? 'nThreads: 1 was asked for' : null });
    assert.deepEqual([r.info.hparams.n_layer, r.info.hparams.n_embd, r.info.hparams.n_head, r.info.hparams.n_ctx], [24, 1024, 16, 1024]);
    assert.deepEqual(r.ids, REF.prompt_ids, 'the prompt tokenizes as natively');
    assert.deepEqual(r.tokens, REF.tokens, 'greedy tokens: the native CLI\'s');
    const d = logitDiff(r.logits, REF.logits);
    const { weights, kv, compute } = r.info.memory;
    assert.deepEqual({ weights, kv, compute }, REF.memory, 'info().memory: the native plan');
    assert.deepEqual({ weights: r.plan.memory.weights, kv: r.plan.memory.kv, compute: r.plan.memory.compute }, REF.memory, 'Model.inspect: the same plan');
    assert.equal(r.plan.fits.ok, true, r.plan.fits.reason);
    const w = r.info.wasmMemory;
    const plan = planBytes(r.info.memory);
    console.log(`medium q8_0 ${build}: logits max |wasm - native| ${d.max} (${d.differ} of ${r.logits.length} differ); ` +
      `wasm memory ${(w.afterLoad / MIB).toFixed(1)} MiB after load (heap base ${(w.heapBase / MIB).toFixed(1)}, plan ${(plan / MIB).toFixed(1)} MiB); ` +
      `load ${Math.round(r.loadMs)} ms, ${REF.n_predict} tokens in ${Math.round(r.genMs)} ms`);
    assert.ok(d.max <= LOGIT_BOUND, `max |wasm - native| = ${d.max} over ${d.differ} logits`);
    assert.ok(w.afterLoad <= w.heapBase + plan + 16 * MIB, `after load ${w.afterLoad} > heap base ${w.heapBase} + plan ${plan} + 16 MiB`);
    assert.ok(r.after.now <= w.heapBase + plan + 16 * MIB, `after generating ${r.after.now}`);
  });
}
