// The gradient calls (issue 37) in Firefox (Debian's firefox-esr, headless, over WebDriver
// BiDi: drivers.mjs) against PyTorch autograd through TransformerLens 3.x: the checks of
// tests/e2e/grad-checks.mjs, as in Chromium (tests/e2e/gradients.spec.mjs), on web/pkg with
// one thread (Firefox here has no WebGPU adapter by default: the CPU's kernels in Gecko's
// wasm engine), within the bounds.
//   node --test tests/engines/firefox-gradients.spec.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { serve } from '../e2e/helpers.mjs';
import { assertGrads, gradArg, gradPage } from '../e2e/grad-checks.mjs';
import { launchFirefox } from './drivers.mjs';

let server;
let firefox;

before(async () => {
  server = await serve();
  firefox = await launchFirefox();
  console.log(`browser: ${firefox.version}`);
});

after(async () => {
  await firefox?.close();
  await server?.close();
});

describe('Firefox gradients', () => {
  test('grad (three metrics, with and without hooks), saliency and attribution patching equal PyTorch autograd', async () => {
    const r = await firefox.run(`${server.url}e2e/harness.html`, gradPage.toString(), gradArg({ worker: true, relaxedSimd: false, nThreads: 1 }));
    assert.deepEqual(r.problems.filter((p) => !/favicon\.ico/.test(p)), []);
    assert.equal(r.value.backend, 'cpu');
    const w = assertGrads(r.value);
    console.log(`Firefox: ${w.points} gradients, worst relative error ${w.gradRel.toExponential(2)}; worst metric/cell/score/delta difference ${w.value.toExponential(2)}`);
  });
});
