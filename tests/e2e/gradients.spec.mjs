// The gradient calls (issue 37) in headless Chromium against PyTorch autograd through
// TransformerLens 3.x (tests/fixtures/tiny-f32.grad-ref.json + .bin, made by
// tests/fixtures/make_grad_ref.py; the checks in grad-checks.mjs, shared with Firefox's
// tests/engines/firefox-gradients.spec.mjs): model.run's `grad` for the three metrics with
// and without forward hooks, saliency's three methods, patch's method 'attribution' — on the
// CPU (web/pkg, one thread) and with the model on WebGPU (SwiftShader here); bad specs are
// 'invalid' naming what is wrong and leave the model usable. The same bounds as
// tests/model/grad.rs.
//   node --test tests/e2e/gradients.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { useHarness } from './helpers.mjs';
import { BOUNDS, REF, assertGrads, gradArg, gradPage } from './grad-checks.mjs';

const web = useHarness();

test('on the CPU: grad (three metrics, with and without hooks), saliency and attribution patching equal PyTorch autograd', async () => {
  const r = await web.page.evaluate(gradPage, gradArg({ worker: true, relaxedSimd: false, nThreads: 1 }));
  assert.equal(r.backend, 'cpu');
  const w = assertGrads(r);
  console.log(`CPU: ${w.points} gradients, worst relative error ${w.gradRel.toExponential(2)}; worst metric/cell/score/delta difference ${w.value.toExponential(2)}`);
});

test('on WebGPU (SwiftShader): the same calls within the same bounds', async () => {
  // Integrated gradients only for the fixture's 7-step case here: a step is one gradient run,
  // about 1 s each on SwiftShader, and the 32-step cases run the same kernels 32 times
  // (70 of this test's 90 s). The CPU test above and Firefox's run every case.
  const r = await web.page.evaluate(gradPage, gradArg({ worker: true, relaxedSimd: false, nThreads: 1, backend: 'webgpu' }, { igMaxSteps: 8 }));
  assert.equal(r.backend, 'webgpu');
  const w = assertGrads(r, BOUNDS);
  console.log(`WebGPU: ${w.points} gradients, worst relative error ${w.gradRel.toExponential(2)}; worst metric/cell/score/delta difference ${w.value.toExponential(2)}`);
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
