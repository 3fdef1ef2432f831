// Firefox (Debian's firefox-esr, headless, driven over WebDriver BiDi by puppeteer-core) runs
// the model checks of tests/engines/checks.mjs on an isolated page: the threaded relaxed-SIMD
// build with 2 threads, HF's tokens and logits, aborts, coded errors; it has no navigator.gpu
// by default, so WebGPU falls back as documented. Then a page without COOP/COEP: 1 thread, and why.
//   node --test tests/engines/firefox.spec.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { HF, MODELS_DIR, serve } from '../e2e/helpers.mjs';
import { CHECK_ARG, F32, GREEDY, assertChecks, pageChecks } from './checks.mjs';
import { launchFirefox } from './drivers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f16.gguf) are needed: set GGWEB_MODELS_DIR');
const NO_GPU = 'WebGPU is not available here (navigator.gpu is missing)';

let server;
let firefox;
let result;
let plain;

before(async () => {
  server = await serve();
  firefox = await launchFirefox();
  console.log(`browser: ${firefox.version}`);
  result = await firefox.run(`${server.url}e2e/harness.html`, pageChecks.toString(), CHECK_ARG);
  plain = await firefox.run(`${server.url}__test/noisolation/e2e/harness.html`, `async (arg) => {
    const { Model } = await import('/ggweb.js');
    const m = await Model.load(arg.url, { nThreads: 2 });
    const ids = [];
    for await (const t of m.generate(arg.text, arg.greedy)) ids.push(t.token);
    const threads = m.info().threads;
    await m.dispose();
    return { isolated: self.crossOriginIsolated, threads, ids };
  }`, { url: F32, text: HF.prompts[0].text, greedy: GREEDY });
});

after(async () => {
  await firefox?.close();
  await server?.close();
});

describe('Firefox', () => {
  assertChecks(() => result, {
    sab: 'function',
    relaxedSimd: true,
    gpu: false,
    threads: { n: 2, running: 2, build: 'pkg-threads-relaxed', reason: null },
    pageBuild: 'pkg-relaxed',
    webgpuNote: `backend "auto": ${NO_GPU}; running on the CPU`,
    webgpuError: `${NO_GPU}; use backend "cpu"`,
  });

  test('without COOP/COEP, nThreads 2 runs 1 thread (pkg-relaxed) and says why', () => {
    assert.deepEqual(plain.value, {
      isolated: false,
      threads: {
        n: 1, running: 1, build: 'pkg-relaxed',
        reason: 'the page is not cross-origin isolated: serve it with the headers ' +
          'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp',
      },
      ids: HF.prompts[0].greedy_ids,
    });
    assert.deepEqual(plain.problems.filter((p) => !/favicon\.ico/.test(p)), []);
  });
});
