// The gradient calls (issue 37) in headless Chromium (web/pkg, CPU, one thread) against
// PyTorch autograd through TransformerLens 3.x (tests/fixtures/tiny-f32.grad-ref.json + .bin,
// made by tests/fixtures/make_grad_ref.py): model.run's `grad` for the three metrics with and
// without forward hooks, saliency's three methods, patch's method 'attribution'; bad specs are
// 'invalid' naming what is wrong and leave the model usable. The same bounds as
// tests/model/grad.rs.
//   node --test tests/e2e/gradients.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ROOT, useHarness } from './helpers.mjs';

const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.grad-ref.json`, 'utf8'));
const BIN = readFileSync(`${ROOT}tests/fixtures/${REF.bin}`);
const BLOCKS = new Float32Array(BIN.buffer, BIN.byteOffset, BIN.byteLength / 4);
const block = (name) => {
  const b = REF.blocks[name];
  assert.ok(b, `no block ${name}`);
  return { shape: b.shape, data: BLOCKS.subarray(b.offset, b.offset + b.shape.reduce((a, c) => a * c, 1)) };
};

const web = useHarness();

/** The bound per wrt point: ‖g − r‖₂ ≤ 1e-4·‖r‖₂, or every element within 1e-5. */
function closeGrad(what, got, want) {
  assert.equal(got.length, want.length, `${what}: length`);
  let d2 = 0, r2 = 0, dmax = 0;
  for (let i = 0; i < want.length; i++) {
    const d = got[i] - want[i];
    d2 += d * d;
    r2 += want[i] * want[i];
    dmax = Math.max(dmax, Math.abs(d));
  }
  const rel = r2 > 0 ? Math.sqrt(d2 / r2) : 0;
  assert.ok(rel <= 1e-4 || dmax <= 1e-5, `${what}: relative ${rel}, largest ${dmax}`);
  return rel;
}

test('model.run with grad equals PyTorch autograd for three metrics, with and without hooks', async () => {
  const r = await web.page.evaluate(async (cases) => {
    const { Model } = await import('/ggweb.js');
    const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { worker: true, relaxedSimd: false, nThreads: 1 });
    const out = [];
    for (const c of cases) {
      const hooks = c.hooks.map((h) => (Array.isArray(h.value) ? { ...h, value: new Float32Array(h.value) } : h));
      const run = await m.run(c.tokens, { hooks, grad: c.grad });
      const grads = {};
      for (const [k, v] of Object.entries(run.grads)) grads[k] = { shape: v.shape, data: Array.from(v.data), typed: v.data instanceof Float32Array };
      out.push({ metric: run.metric, grads });
    }
    await m.dispose();
    return out;
  }, REF.grad);
  let points = 0, worst = 0;
  REF.grad.forEach((c, i) => {
    const got = r[i];
    assert.ok(Math.abs(got.metric - c.metric) <= 1e-4, `${c.name}: metric ${got.metric} vs ${c.metric}`);
    const names = c.grad.wrt === '*' ? REF.hook_names : c.grad.wrt;
    assert.deepEqual(Object.keys(got.grads).sort(), [...names].sort(), c.name);
    for (const name of names) {
      const want = block(`grad/${c.name}/${name}`);
      assert.deepEqual(got.grads[name].shape, want.shape, `${c.name}/${name}: shape`);
      assert.ok(got.grads[name].typed, `${c.name}/${name}: a Float32Array`);
      worst = Math.max(worst, closeGrad(`${c.name}/${name}`, got.grads[name].data, want.data));
      points++;
    }
  });
  assert.equal(points, 3 * REF.hook_names.length + 3 * 21);
  console.log(`${points} gradients, worst relative error ${worst.toExponential(2)}`);
});

test('saliency (three methods) and attribution patching equal PyTorch autograd', async () => {
  const r = await web.page.evaluate(async ({ sal, atp }) => {
    const { Model } = await import('/ggweb.js');
    const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { worker: true, relaxedSimd: false, nThreads: 1 });
    const s = [];
    for (const c of sal) {
      for (const method of ['gradient', 'gradientXInput', 'integratedGradients']) {
        const x = await m.saliency(c.tokens, { of: c.of, method, steps: c.steps });
        s.push({ name: c.name, method, scores: Array.from(x.scores), metric: x.metric, delta: x.delta, tokens: Array.from(x.tokens) });
      }
    }
    const p = {};
    for (const at of ['resid_pre', 'attn_out', 'mlp_out', 'z']) {
      const x = await m.patch(atp.clean, atp.corrupted, { at, answer: atp.answer, against: atp.against, method: 'attribution' });
      p[at] = { shape: x.shape, cells: Array.from(x.cells), cleanDiff: x.cleanDiff, corruptedDiff: x.corruptedDiff };
    }
    await m.dispose();
    return { s, p };
  }, { sal: REF.saliency, atp: REF.atp });
  for (const x of r.s) {
    const c = REF.saliency.find((c) => c.name === x.name);
    assert.deepEqual(x.tokens, c.tokens);
    const want = block(`saliency/${x.name}/${x.method}`).data;
    assert.equal(x.scores.length, want.length);
    x.scores.forEach((v, i) => assert.ok(Math.abs(v - want[i]) <= 1e-4, `${x.name}/${x.method}[${i}]: ${v} vs ${want[i]}`));
    assert.ok(Math.abs(x.metric - c.metric) <= 1e-4, `${x.name}: metric`);
    if (x.method === 'integratedGradients') assert.ok(Math.abs(x.delta - c.delta) <= 1e-4, `${x.name}: delta ${x.delta} vs ${c.delta}`);
    else assert.equal(x.delta, undefined);
  }
  for (const [at, x] of Object.entries(r.p)) {
    const want = block(`atp/${at}`);
    assert.deepEqual(x.shape, want.shape, at);
    x.cells.forEach((v, i) => assert.ok(Math.abs(v - want.data[i]) <= 1e-4, `atp/${at}[${i}]: ${v} vs ${want.data[i]}`));
    assert.ok(Math.abs(x.cleanDiff - REF.atp.clean_diff) <= 1e-4 && Math.abs(x.corruptedDiff - REF.atp.corrupted_diff) <= 1e-4, at);
  }
});

test('bad grad specs, methods and metrics are invalid by name; the model is usable afterwards', async () => {
  const r = await web.page.evaluate(async (ids) => {
    const { Model } = await import('/ggweb.js');
    const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { worker: true, relaxedSimd: false, nThreads: 1 });
    const before = Array.from((await m.run(ids)).logits);
    const attempt = async (f) => {
      try {
        await f();
        return 'ok';
      } catch (e) {
        return { code: e.code, message: e.message };
      }
    };
    const errors = {
      unknownHook: await attempt(() => m.run(ids, { grad: { of: { loss: 'mean' }, wrt: ['blocks.0.hook_nope'] } })),
      misspelt: await attempt(() => m.run(ids, { grad: { of: { logitDif: { answer: 1, against: 2 } }, wrt: '*' } })),
      lossSum: await attempt(() => m.run(ids, { grad: { of: { loss: 'sum' }, wrt: '*' } })),
      token: await attempt(() => m.run(ids, { grad: { of: { logprob: { token: 50257 } }, wrt: '*' } })),
      wrtEmpty: await attempt(() => m.run(ids, { grad: { of: { loss: 'mean' }, wrt: [] } })),
      wrtMissing: await attempt(() => m.run(ids, { grad: { of: { loss: 'mean' } } })),
      method: await attempt(() => m.saliency(ids, { of: { loss: 'mean' }, method: 'gradients' })),
      patchMethod: await attempt(() => m.patch(ids, ids, { at: 'z', answer: 1, against: 2, method: 'attributions' })),
    };
    const after = Array.from((await m.run(ids)).logits);
    await m.dispose();
    return { errors, same: before.length === after.length && before.every((x, i) => x === after[i]) };
  }, REF.grad[0].tokens);
  const want = {
    unknownHook: /'blocks\.0\.hook_nope'/, misspelt: /logitDif/, lossSum: /sum/, token: /50257/,
    wrtEmpty: /wrt is empty/, wrtMissing: /wrt/, method: /'gradients'/, patchMethod: /'attributions'/,
  };
  for (const [k, re] of Object.entries(want)) {
    assert.equal(r.errors[k]?.code, 'invalid', `${k}: ${JSON.stringify(r.errors[k])}`);
    assert.match(r.errors[k].message, re, k);
  }
  assert.ok(r.same, 'the model runs as before');
});
