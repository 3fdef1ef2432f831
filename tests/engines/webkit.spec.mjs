// WebKit, Safari's engine (Debian's WebKitGTK MiniBrowser, driven by WebKitWebDriver through
// selenium-webdriver, headless under Xvfb), runs the model checks of tests/engines/checks.mjs.
// WebKitGTK has no relaxed SIMD and no SharedArrayBuffer even on an isolated page, so ggweb
// loads the plain pkg/ build on one thread and says why; it has no navigator.gpu, so WebGPU
// falls back as documented.
//   node --test tests/engines/webkit.spec.mjs
import { after, before, describe } from 'node:test';
import assert from 'node:assert/strict';
import { MODELS_DIR, serve } from '../e2e/helpers.mjs';
import { CHECK_ARG, assertChecks, pageChecks } from './checks.mjs';
import { launchWebKit } from './drivers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f16.gguf) are needed: set GGWEB_MODELS_DIR');
const NO_GPU = 'WebGPU is not available here (navigator.gpu is missing)';

let server;
let webkit;
let result;

before(async () => {
  server = await serve();
  webkit = await launchWebKit();
  console.log(`browser: ${webkit.version}`);
  result = await webkit.run(`${server.url}e2e/harness.html`, pageChecks.toString(), CHECK_ARG);
});

after(async () => {
  await webkit?.close();
  await server?.close();
});

describe('WebKit', () => {
  assertChecks(() => result, {
    sab: 'undefined',
    relaxedSimd: false,
    gpu: false,
    threads: { n: 1, running: 1, build: 'pkg', reason: 'this browser has no SharedArrayBuffer' },
    pageBuild: 'pkg',
    webgpuNote: `backend "auto": ${NO_GPU}; running on the CPU`,
    webgpuError: `opening the backend: backend "webgpu": backend unavailable: ${NO_GPU}; use backend "cpu"`,
  });
});
