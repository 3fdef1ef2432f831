// A model loaded wholly on WebGPU in headless Chromium (SwiftShader): each fetched chunk's
// weight bytes go straight to GPUQueue.writeBuffer (crate/gguf/loader.rs), so the wasm memory
// after the load does not grow with the weights. Measured in a fresh page per load (a fresh
// wasm instance): memory.buffer.byteLength after `finish()` minus at instantiation, for a
// small and a larger model; the CPU load of the larger one shows the measure sees weights.
//   node --test tests/e2e/webgpu-memory.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { DOT_MODELS, HF, MODELS_DIR, openPage, useServerAndBrowser } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f16.gguf) are needed: set GGWEB_MODELS_DIR');
const MIB = 1024 * 1024;
const [HELLO] = HF.prompts;
// The wasm memory a WebGPU load may take whatever its weights: the tokenizer (50257 tokens and
// their merges) and the GGUF metadata it is built from, the loader's 64 KiB feed scratch, and
// the allocator's slack (measured: 9.75 MiB, as a CPU load takes beyond its plan, ARCHITECTURE.md).
const BOUND = 12 * MIB;
// How much more the larger model's load may take than the smaller's (same tokenizer).
const DIFF_BOUND = 1 * MIB;

const web = useServerAndBrowser();

/** Streams `url` into a WasmLoader on `backend` in a fresh page; memory before and after, info(), greedy ids. */
async function measure(url, backend) {
  const { page, problems } = await openPage(web.browser, `${web.server.url}e2e/harness.html`);
  try {
    const r = await page.evaluate(async ({ url, backend, ids }) => {
      const core = await import('/pkg/ggweb_core.js');
      const wasm = await core.default();
      const mem = () => wasm.memory.buffer.byteLength;
      const atInit = mem();
      const loader = await core.WasmLoader.create({ backend, nCtx: 32 });
      const reader = (await fetch(url)).body.getReader();
      let fed = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        loader.feed(value);
        fed += value.byteLength;
      }
      const model = loader.finish();
      const afterLoad = mem();
      const info = model.info();
      model.start(new Uint32Array(ids), { maxTokens: 4, temperature: 0 });
      while (!(await model.prompt_step()));
      const greedy = [];
      for (let t; (t = await model.next());) greedy.push(t.token);
      model.free();
      return { atInit, afterLoad, fed, info, greedy };
    }, { url, backend, ids: HELLO.ids });
    assert.deepEqual(problems.filter((p) => !p.includes('favicon.ico')), []);
    return r;
  } finally {
    await page.close();
  }
}

const small = '/shared-models/tiny-gpt2-f16.gguf';
// The larger: the 124M-shaped F16 bench model when it was made (.models/, git-ignored, 250 MB:
// `cargo run --release --example make_bench_models -- tests/fixtures/llamacpp/tiny-gpt2-f32.gguf .models/`),
// else the tiny F32 file (13 MB more weights than the F16 one).
const larger = existsSync(`${DOT_MODELS}/bench-124m-f16.gguf`) ? '/dot-models/bench-124m-f16.gguf' : '/shared-models/tiny-gpt2-f32.gguf';

test(`WebGPU: the wasm memory after loading ${larger.split('/').pop()} is that of ${small.split('/').pop()}, not its weights`, async () => {
  const a = await measure(small, 'webgpu');
  const b = await measure(larger, 'webgpu');
  const f = (x) => (x / MIB).toFixed(2);
  for (const [url, m] of [[small, a], [larger, b]]) {
    console.log(`${url} on ${m.info.backend}: weights ${f(m.info.memory.weights)} MiB (fed ${f(m.fed)} MiB); ` +
      `wasm memory ${f(m.atInit)} MiB at instantiation, ${f(m.afterLoad)} MiB after load (+${f(m.afterLoad - m.atInit)})`);
    assert.equal(m.info.backend, 'webgpu');
    assert.ok(m.afterLoad - m.atInit <= BOUND, `${url}: the load grew the wasm memory by ${m.afterLoad - m.atInit} bytes`);
    assert.equal(m.greedy.length, 4);
  }
  // The fixtures are llama.cpp's conversions of one model: Hugging Face's greedy tokens.
  if (larger.startsWith('/shared-models/')) assert.deepEqual(b.greedy, HELLO.greedy_ids.slice(0, 4));
  assert.deepEqual(a.greedy, HELLO.greedy_ids.slice(0, 4));
  const more = b.info.memory.weights - a.info.memory.weights;
  assert.ok(more > 10 * MIB, `the larger model has ${more} more bytes of weights`);
  assert.ok(b.afterLoad - b.atInit <= a.afterLoad - a.atInit + DIFF_BOUND,
    `${f(more)} MiB more weights grew the wasm memory by ${b.afterLoad - b.atInit} bytes vs ${a.afterLoad - a.atInit}`);

  // The same measure on the CPU sees the weights (they are in the wasm heap there).
  const c = await measure(larger, 'cpu');
  console.log(`${larger} on cpu: wasm memory +${f(c.afterLoad - c.atInit)} MiB after load`);
  assert.ok(c.afterLoad - c.atInit >= c.info.memory.weights, 'a CPU load holds its weights in the wasm heap');
  assert.deepEqual(c.greedy, b.greedy, 'the CPU and WebGPU greedy tokens');
});
