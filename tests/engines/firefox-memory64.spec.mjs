// The Memory64 build (web/pkg-m64/, issue 40 item 3) in Firefox (Debian's firefox-esr, headless,
// over WebDriver BiDi: drivers.mjs; Memory64 since Firefox 134): `memory64: true` runs it in
// a worker, and its greedy tokens and logits are web/pkg/'s bit for bit (the same Rust, the
// plain SIMD128 kernels, 64-bit pointers), the F32 model's tokens Hugging Face's. Chromium's
// side: tests/e2e/memory64.spec.mjs.
//   node --test tests/engines/firefox-memory64.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { HF, MODELS_DIR, ROOT, serve } from '../e2e/helpers.mjs';
import { F32, GREEDY } from './checks.mjs';
import { launchFirefox } from './drivers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f32.gguf) are needed: set GGWEB_MODELS_DIR');
assert.ok(existsSync(`${ROOT}web/pkg-m64/ggweb_core.js`), 'web/pkg-m64 is missing: run scripts/build-wasm.sh');

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

/** In the page: each build's info, greedy ids per prompt and logits of each prompt's ids. */
async function bothBuilds(arg) {
  const { Model } = await import('/ggweb.js');
  const out = {};
  for (const memory64 of [true, false]) {
    const m = await Model.load(arg.url, { nThreads: 1, nBatch: 32, relaxedSimd: false, memory64 });
    const info = m.info();
    const r = { build: info.threads.build, memory64: info.memory64, greedy: [], logits: [] };
    for (const p of arg.prompts) {
      const ids = [];
      for await (const t of m.generate(p.text, arg.greedy)) ids.push(t.token);
      r.greedy.push(ids);
      r.logits.push(Array.from(await m.logits(p.ids)));
    }
    await m.dispose();
    out[memory64] = r;
  }
  return out;
}

test('memory64: true runs pkg-m64 in Firefox with web/pkg\'s tokens and logits bit for bit', async () => {
  const r = await firefox.run(`${server.url}e2e/harness.html`, bothBuilds.toString(), { url: F32, prompts: HF.prompts, greedy: GREEDY });
  assert.deepEqual(r.problems.filter((p) => !/favicon\.ico/.test(p)), []);
  const { true: m64, false: w32 } = r.value;
  assert.deepEqual([m64.build, m64.memory64], ['pkg-m64', true]);
  assert.deepEqual([w32.build, w32.memory64], ['pkg', false]);
  assert.deepEqual(m64.greedy, HF.prompts.map((p) => p.greedy_ids.slice(0, GREEDY.maxTokens)));
  assert.deepEqual(m64.greedy, w32.greedy);
  for (let i = 0; i < m64.logits.length; i++) {
    assert.ok(m64.logits[i].length > 0);
    const at = m64.logits[i].findIndex((x, j) => !Object.is(x, w32.logits[i][j]));
    assert.equal(at, -1, `prompt ${i}: logit ${at} differs (${m64.logits[i][at]} vs ${w32.logits[i][at]})`);
  }
});
