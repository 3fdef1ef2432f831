// The kernel warm-up during loading (WasmLoader.warm_up, crate/bindings/warmup.rs; engine.js
// runs it between chunks) changes no result: a model loaded with it gives bit-identical
// logits, the same greedy tokens and the same prompt-cache stats as one loaded without it
// (engine.js's `warmUp` knobs at 0), on the relaxed-SIMD and the plain single-thread builds,
// for Q8_0, F16 and a llama.cpp Q4_K_M mix.
//   node --test tests/e2e/warmup.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { HF, MODELS_DIR, launch, openPage, serve } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the reference models (tests/fixtures/llamacpp) are needed');
const [HELLO] = HF.prompts;

let server;
let browser;
let page;
let problems;

before(async () => {
  server = await serve();
  browser = await launch();
  ({ page, problems } = await openPage(browser, `${server.url}e2e/harness.html`));
  // warm_up reports a failure to build or step its model as a console warning, not an error.
  page.on('console', (m) => {
    if (m.type() === 'warning' && /warm-up/.test(m.text())) problems.push(`console.warn: ${m.text()}`);
  });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Loads `url` on the page thread (so the page's engine.js is the one loading), with or
 *  without the warm-up; returns what it did, the logits after `prompt` and a greedy run. */
function loadAndRun(url, warm, relaxedSimd, prompt) {
  return page.evaluate(async ({ url, warm, relaxedSimd, prompt }) => {
    const { Model } = await import('/ggweb.js');
    const { warmUp } = await import('/engine.js');
    const saved = { ...warmUp };
    if (!warm) Object.assign(warmUp, { sliceMs: 0, tailMs: 0 });
    let m;
    try {
      m = await Model.load(url, { worker: false, nCtx: 64, nBatch: 32, relaxedSimd });
    } finally {
      Object.assign(warmUp, saved);
    }
    const info = m.info();
    const ids = Array.from(await m.tokenize(prompt));
    // The first generation after load: nothing may be cached (the warm-up has its own KV cache).
    const it = m.generate(prompt, { maxTokens: 12, temperature: 0, seed: 1 });
    const tokens = [];
    for await (const t of it) tokens.push(t.token);
    const stats = await it.stats;
    // Logits of the prompt from scratch, then through the prompt cache (a prefix reused).
    const logits = Array.from(await m.logits([...ids, ...tokens.slice(0, 3)]));
    const again = Array.from(await m.logits([...ids, tokens[0]]));
    await m.dispose();
    return {
      build: info.threads.build, warmUp: info.load.warmUp, ids, tokens,
      cachedTokens: stats.cachedTokens, promptTokens: stats.promptTokens, logits, again,
    };
  }, { url, warm, relaxedSimd, prompt });
}

// The Q4_K_M mix: K-quant matrices (Q4_K, Q6_K), which the crate cannot quantize, so the
// warm-up model's weights of those types are made from bytes (crate/bindings/warmup.rs).
for (const url of ['/shared-models/tiny-gpt2-q8_0.gguf', '/shared-models/tiny-gpt2-f16.gguf', '/tests/fixtures/mixes/gpt2-mini-q4_k_m.gguf']) {
  const file = url.split('/').pop();
  for (const relaxedSimd of [true, false]) {
    test(`${file}, ${relaxedSimd ? 'relaxed-SIMD' : 'plain'} build: the load-time warm-up changes no logit, token or cache stat`, async () => {
      const on = await loadAndRun(url, true, relaxedSimd, HELLO.text);
      const off = await loadAndRun(url, false, relaxedSimd, HELLO.text);
      // The mix has a small vocabulary of its own; the tiny models have GPT-2's.
      if (!url.includes('mixes')) assert.deepEqual(on.ids, HELLO.ids);
      assert.deepEqual(off.ids, on.ids);
      assert.equal(on.build, relaxedSimd ? 'pkg-relaxed' : 'pkg');
      assert.equal(off.build, on.build);
      // It ran: the warm-up model was built and stepped (slices > 0) and finished.
      // (The mix's file is small beside its warm-up model, whose K-quant rows need 256 columns:
      // its download ends before the warm-up's last step, so there "ran" is built and stepped,
      // and the last test below sees no "warm-up skipped" warning.)
      assert.ok(on.warmUp && on.warmUp.slices > 0 && (on.warmUp.done || url.includes('mixes')), `warm-up did not run: ${JSON.stringify(on.warmUp)}`);
      assert.equal(off.warmUp.slices, 0);
      assert.equal(on.cachedTokens, 0, 'the first generation after load reuses nothing');
      assert.equal(off.cachedTokens, 0);
      assert.equal(on.promptTokens, off.promptTokens);
      assert.deepEqual(on.tokens, off.tokens);
      assert.equal(on.tokens.length, 12);
      // Bit-identical: the same kernels on the same data in the same order, so no tolerance.
      assert.equal(on.logits.length, off.logits.length);
      assert.ok(on.logits.length > 0);
      assert.deepEqual(on.logits, off.logits);
      assert.deepEqual(on.again, off.again);
    });
  }
}

test('the page saw no uncaught errors or warm-up warnings', () => {
  assert.deepEqual(problems.filter((p) => !/Failed to load resource/.test(p)), []);
});
