// A gradient pass at full size in wasm32 (issue 37's memory acceptance; npm run test:scale):
// the 124M shape at Q8_0 (.models/124m-q8_0.gguf from bench/make_models.sh, or
// GGWEB_SCALE_GRAD_MODEL), 256 tokens, in headless Chromium on web/pkg (1 thread, plain
// SIMD). Model.inspect with nCtx 256 states
// `memory.gradient`, the plan of a gradient run over 256 tokens (the loss over every position,
// backward to hook_embed), and it equals `ggweb inspect --json`'s; model.run with that grad
// fits and runs; its metric and gradient agree with the native CLI's on the same file; and
// the peak of the wasm heap — the size of the linear memory after the call (the core's
// `wasm_memory_bytes()`, the module run on the page: `worker: false`; a linear memory only
// grows, so its size is its high-water mark; `info().wasmMemory` is a snapshot of the load) —
// stays within what was there after the load plus the plan (+16 MiB for the allocator and
// the transfer). The peak is printed ("peak wasm memory").
//   GGWEB_GGWEB=target/release/ggweb node --test tests/scale/gradient.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { DOT_MODELS, ROOT, openPage, useServerAndBrowser } from '../e2e/helpers.mjs';
import { MIB } from '../e2e/native-vs-wasm.mjs';

const GGWEB = process.env.GGWEB_GGWEB ?? `${process.env.CARGO_TARGET_DIR ?? `${ROOT}target`}/release/ggweb`;
const MODEL = process.env.GGWEB_SCALE_GRAD_MODEL ?? '124m-q8_0.gguf';
const N = 256;
const WASM32 = 4 * 1024 * MIB;
// Q8_0 in wasm against native (tests/scale/scale.spec.mjs's header: FMA natively, the
// activations' re-quantization): logits differ by up to ~0.05, the loss by far less.
const METRIC_BOUND = 1e-2;
const GRAD_REL_BOUND = 5e-2;

assert.ok(existsSync(GGWEB), `${GGWEB} is missing: cargo build --release --bin ggweb`);
assert.ok(existsSync(`${DOT_MODELS}/${MODEL}`), `.models/${MODEL} is missing (bench/make_models.sh)`);

const web = useServerAndBrowser();
// 256 ids spread over the vocabulary (any sequence: the plan depends on the count only).
const IDS = Array.from({ length: N }, (_, i) => (i * 7919 + 13) % 50257);
const GRAD = { of: { loss: 'mean' }, wrt: ['hook_embed'] };

test(`${MODEL}: a gradient run over ${N} tokens fits wasm32 in Chromium, within Model.inspect's plan`, async () => {
  const file = `${DOT_MODELS}/${MODEL}`;
  const t0 = Date.now();
  const nativePlan = JSON.parse(execFileSync(GGWEB, ['inspect', '--model', file, '--n-ctx', String(N), '--json'], { encoding: 'utf8', maxBuffer: 1 << 26 })).plan;
  const nat = JSON.parse(execFileSync(GGWEB, ['run', '--model', file, '--n-ctx', String(N), '--ids', IDS.join(','), '--grad', JSON.stringify(GRAD)], { encoding: 'utf8', maxBuffer: 1 << 28 }));
  console.log(`native: plan ${nativePlan.gradient} B for a gradient run, metric ${nat.metric} (${Date.now() - t0} ms)`);
  const { page, problems } = await openPage(web.browser, `${web.server.url}e2e/harness.html`);
  let r;
  try {
    r = await page.evaluate(async ({ url, ids, grad, n }) => {
      try {
        const { Model } = await import('/ggweb.js');
        const plan = await Model.inspect(url, { nCtx: n, nThreads: 1 });
        // On the page (worker: false), so the page's import of the core is its instance.
        const m = await Model.load(url, { nCtx: n, nThreads: 1, relaxedSimd: false, worker: false });
        const core = await import('/pkg/ggweb_core.js');
        const afterLoad = core.wasm_memory_bytes();
        if (afterLoad !== m.info().wasmMemory.afterLoad) throw new Error(`not the model's instance: ${afterLoad} vs ${m.info().wasmMemory.afterLoad}`);
        const t = performance.now();
        const run = await m.run(ids, { grad });
        const ms = performance.now() - t;
        const peak = core.wasm_memory_bytes();
        // The model runs as before afterwards (a plain pass over the same tokens).
        const plain = await m.run(ids);
        const g = run.grads.hook_embed;
        const same = plain.logits.length === run.logits.length && plain.logits.every((x, i) => x === run.logits[i]);
        await m.dispose();
        return { ok: true, plan: plan.memory, fits: plan.fits, afterLoad, peak, ms, metric: run.metric, shape: g.shape, grad: Array.from(g.data), same };
      } catch (e) {
        return { ok: false, message: `${e.code}: ${e.message}` };
      }
    }, { url: `/dot-models/${MODEL}`, ids: IDS, grad: GRAD, n: N });
  } finally {
    await page.close();
  }
  assert.ok(r.ok, r.message);
  assert.deepEqual(problems.filter((p) => !p.includes('/favicon.ico')), []);
  const mb = (x) => `${(x / MIB).toFixed(1)} MiB`;
  console.log(`${MODEL} wasm32, ${N} tokens: Model.inspect's memory.gradient ${r.plan.gradient} B (${mb(r.plan.gradient)}); ` +
    `wasm memory ${mb(r.afterLoad)} after load, peak wasm memory ${mb(r.peak)} (${r.peak} B, the linear memory's size after the call: ` +
    `+${mb(r.peak - r.afterLoad)}); forward + backward ${(r.ms / 1000).toFixed(1)} s; metric ${r.metric} (native ${nat.metric})`);
  assert.equal(r.fits.ok, true, r.fits.reason);
  assert.equal(r.plan.gradient, nativePlan.gradient, 'the same plan as `ggweb inspect`');
  assert.ok(r.peak <= WASM32);
  assert.ok(r.peak - r.afterLoad <= r.plan.gradient + 16 * MIB, `the call grew the heap by ${r.peak - r.afterLoad} B, planned ${r.plan.gradient}`);
  assert.ok(r.same, 'a plain run afterwards gives the gradient run\'s logits');
  assert.deepEqual(r.shape, [N, 768]);
  assert.ok(Math.abs(r.metric - nat.metric) <= METRIC_BOUND, `metric ${r.metric} vs native ${nat.metric}`);
  const want = nat.grads.hook_embed.data;
  let d2 = 0;
  let w2 = 0;
  for (let i = 0; i < want.length; i++) {
    d2 += (r.grad[i] - want[i]) ** 2;
    w2 += want[i] ** 2;
  }
  const rel = Math.sqrt(d2 / w2);
  console.log(`‖g_wasm − g_native‖ / ‖g_native‖ = ${rel.toExponential(2)}`);
  assert.ok(w2 > 0 && rel <= GRAD_REL_BOUND, `relative ${rel}`);
});
