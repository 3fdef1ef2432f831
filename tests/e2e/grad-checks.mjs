// The gradient calls' checks against PyTorch autograd through TransformerLens 3.x
// (tests/fixtures/tiny-f32.grad-ref.json + .bin, made by tests/fixtures/make_grad_ref.py),
// shared by every browser that runs them: Chromium on the CPU and on WebGPU
// (tests/e2e/gradients.spec.mjs) and Firefox (tests/engines/firefox-gradients.spec.mjs).
// `gradPage` runs in the page (self-contained: engines pass it as source text) and returns
// plain data; `assertGrads` checks it with the bounds.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ROOT } from './helpers.mjs';

export const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.grad-ref.json`, 'utf8'));
const BIN = readFileSync(`${ROOT}tests/fixtures/${REF.bin}`);
const BLOCKS = new Float32Array(BIN.buffer, BIN.byteOffset, BIN.byteLength / 4);
export const block = (name) => {
  const b = REF.blocks[name];
  assert.ok(b, `no block ${name}`);
  return { shape: b.shape, data: BLOCKS.subarray(b.offset, b.offset + b.shape.reduce((a, c) => a * c, 1)) };
};

/** The bounds: gradients, then metric / patching cells / saliency scores / delta. */
export const BOUNDS = { gradRel: 1e-4, gradAbs: 1e-5, value: 1e-4 };

/** What the page needs: the model's URL, its load options and the reference's cases. */
// igMaxSteps: null runs every case (Infinity would not survive JSON to Firefox's page).
export const gradArg = (loadOpts, { igMaxSteps = null } = {}) => ({
  url: '/tests/fixtures/tiny-f32.gguf', loadOpts, grad: REF.grad, sal: REF.saliency, atp: REF.atp, igMaxSteps,
});

/**
 * In the page: model.run's grad for every case, saliency's three methods, patch's method
 * 'attribution' at the four points, and info().load.backend (what really ran).
 */
export async function gradPage(arg) {
  const { Model } = await import('/ggweb.js');
  const m = await Model.load(arg.url, arg.loadOpts);
  const backend = m.info().load.backend;
  const grad = [];
  for (const c of arg.grad) {
    const hooks = c.hooks.map((h) => (Array.isArray(h.value) ? { ...h, value: new Float32Array(h.value) } : h));
    const run = await m.run(c.tokens, { hooks, grad: c.grad });
    const grads = {};
    for (const [k, v] of Object.entries(run.grads)) grads[k] = { shape: v.shape, data: Array.from(v.data), typed: v.data instanceof Float32Array };
    grad.push({ metric: run.metric, grads });
  }
  const sal = [];
  for (const c of arg.sal) {
    for (const method of ['gradient', 'gradientXInput', 'integratedGradients']) {
      if (method === 'integratedGradients' && arg.igMaxSteps != null && c.steps > arg.igMaxSteps) continue;
      const x = await m.saliency(c.tokens, { of: c.of, method, steps: c.steps });
      sal.push({ name: c.name, method, scores: Array.from(x.scores), metric: x.metric, delta: x.delta, tokens: Array.from(x.tokens) });
    }
  }
  const atp = {};
  for (const at of ['resid_pre', 'attn_out', 'mlp_out', 'z']) {
    const x = await m.patch(arg.atp.clean, arg.atp.corrupted, { at, answer: arg.atp.answer, against: arg.atp.against, method: 'attribution' });
    atp[at] = { shape: x.shape, cells: Array.from(x.cells), cleanDiff: x.cleanDiff, corruptedDiff: x.corruptedDiff };
  }
  await m.dispose();
  return { backend, grad, sal, atp };
}

/** ‖g − r‖₂ / ‖r‖₂ and the largest |g − r|. */
function errors(what, got, want) {
  assert.equal(got.length, want.length, `${what}: length`);
  let d2 = 0, r2 = 0, dmax = 0;
  for (let i = 0; i < want.length; i++) {
    const d = got[i] - want[i];
    d2 += d * d;
    r2 += want[i] * want[i];
    dmax = Math.max(dmax, Math.abs(d));
  }
  return { rel: r2 > 0 ? Math.sqrt(d2 / r2) : 0, dmax };
}

/**
 * Checks gradPage's result against the reference with `bounds` (BOUNDS unless a backend
 * needs looser, said where it is passed); returns the worst errors seen, to print.
 */
export function assertGrads(r, bounds = BOUNDS) {
  const worst = { gradRel: 0, value: 0 };
  let points = 0;
  REF.grad.forEach((c, i) => {
    const got = r.grad[i];
    assert.ok(Math.abs(got.metric - c.metric) <= bounds.value, `${c.name}: metric ${got.metric} vs ${c.metric}`);
    worst.value = Math.max(worst.value, Math.abs(got.metric - c.metric));
    const names = c.grad.wrt === '*' ? REF.hook_names : c.grad.wrt;
    assert.deepEqual(Object.keys(got.grads).sort(), [...names].sort(), c.name);
    for (const name of names) {
      const want = block(`grad/${c.name}/${name}`);
      assert.deepEqual(got.grads[name].shape, want.shape, `${c.name}/${name}: shape`);
      assert.ok(got.grads[name].typed, `${c.name}/${name}: a Float32Array`);
      const e = errors(`${c.name}/${name}`, got.grads[name].data, want.data);
      assert.ok(e.rel <= bounds.gradRel || e.dmax <= bounds.gradAbs, `${c.name}/${name}: relative ${e.rel}, largest ${e.dmax}`);
      worst.gradRel = Math.max(worst.gradRel, e.rel);
      points++;
    }
  });
  assert.equal(points, 3 * REF.hook_names.length + 3 * 21);
  // Every saliency case ran, integrated gradients for at least one of them.
  assert.equal(r.sal.filter((x) => x.method !== 'integratedGradients').length, 2 * REF.saliency.length);
  assert.ok(r.sal.some((x) => x.method === 'integratedGradients'), 'integrated gradients ran');
  for (const x of r.sal) {
    const c = REF.saliency.find((c) => c.name === x.name);
    assert.deepEqual(x.tokens, c.tokens);
    const want = block(`saliency/${x.name}/${x.method}`).data;
    assert.equal(x.scores.length, want.length);
    x.scores.forEach((v, i) => {
      assert.ok(Math.abs(v - want[i]) <= bounds.value, `${x.name}/${x.method}[${i}]: ${v} vs ${want[i]}`);
      worst.value = Math.max(worst.value, Math.abs(v - want[i]));
    });
    assert.ok(Math.abs(x.metric - c.metric) <= bounds.value, `${x.name}: metric`);
    if (x.method === 'integratedGradients') {
      assert.ok(Math.abs(x.delta - c.delta) <= bounds.value, `${x.name}: delta ${x.delta} vs ${c.delta}`);
      worst.value = Math.max(worst.value, Math.abs(x.delta - c.delta));
    } else {
      assert.equal(x.delta, undefined);
    }
  }
  for (const [at, x] of Object.entries(r.atp)) {
    const want = block(`atp/${at}`);
    assert.deepEqual(x.shape, want.shape, at);
    x.cells.forEach((v, i) => {
      assert.ok(Math.abs(v - want.data[i]) <= bounds.value, `atp/${at}[${i}]: ${v} vs ${want.data[i]}`);
      worst.value = Math.max(worst.value, Math.abs(v - want.data[i]));
    });
    assert.ok(Math.abs(x.cleanDiff - REF.atp.clean_diff) <= bounds.value && Math.abs(x.corruptedDiff - REF.atp.corrupted_diff) <= bounds.value, at);
  }
  return { points, ...worst };
}
