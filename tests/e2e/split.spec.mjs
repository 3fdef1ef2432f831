// The model split between WebGPU and the CPU by `gpuLayers` (issue #7), through the public
// API in headless Chromium (WebGPU on SwiftShader): for 0, 1 and n_layer GPU layers, and -1
// (everything), logits within 1e-3 of the all-CPU model and the same greedy tokens, and
// info().split exactly: blocks on the GPU, splits and copies per token, and each backend's
// weight and KV bytes, computed here from the hyperparameters and the adapter's alignment.
// Then a browser without a WebGPU adapter (issue #6): 'auto' runs on the CPU and says why,
// 'webgpu' fails with code 'unsupported' naming the reason, and loading still works after.
//   node --test tests/e2e/split.spec.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, HF, MODELS_DIR, launch, openPage, serve } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f32.gguf) are needed: set GGWEB_MODELS_DIR');
const F32 = '/shared-models/tiny-gpt2-f32.gguf';
const [HELLO] = HF.prompts;
// SwiftShader is slow: a short context, a small batch, a few tokens.
const BASE = { nCtx: 16, nBatch: 8 };
const N_GEN = 3;

let server;
before(async () => {
  server = await serve();
});
after(async () => {
  await server?.close();
});

/** Loads `opts` in the page, returns { info, logits (HELLO's last row), greedy ids } or the error. */
async function loadAndRun(page, opts) {
  return page.evaluate(async ({ url, opts, ids, text, nGen }) => {
    const G = await import('/ggweb.js');
    try {
      const m = await G.Model.load(url, opts);
      const info = m.info();
      const logits = Array.from(await m.logits(ids));
      const greedy = [];
      for await (const t of m.generate(text, { maxTokens: nGen, temperature: 0, seed: 1 })) greedy.push(t.token);
      await m.dispose();
      return { ok: true, info, logits, greedy };
    } catch (e) {
      return { ok: false, code: e.code, message: e.message };
    }
  }, { url: F32, opts, ids: HELLO.ids, text: HELLO.text, nGen: N_GEN });
}

const maxDiff = (a, b) => a.reduce((d, x, i) => Math.max(d, Math.abs(x - b[i])), 0);
const alignUp = (n, a) => Math.ceil(n / a) * a;

/**
 * What `gpuLayers` should give for GPT-2 with hyperparameters `hp` (the llama.cpp tensor
 * list: blocks, output norm and projection, embeddings): bytes of each backend's weights
 * (each F32 tensor padded to the buffer type's alignment) and KV cache, and the splits and
 * copies of one token: the CPU alone; CPU then GPU, crossing as the last CPU block's two
 * [n_embd] residual rows; or the GPU alone, with the token id and position (i32) copied up.
 */
function expectedSplit(hp, nCtx, gpuLayers, align) {
  const { n_embd: e, n_ff: f, n_vocab: v, n_ctx_train: t, n_layer: L } = hp;
  const all = gpuLayers < 0 || gpuLayers > L;
  const onGpu = all ? L : gpuLayers;
  const sum = (elems, a) => elems.reduce((s, n) => s + alignUp(alignUp(4 * n, 4), a), 0);
  const block = [e, e, 3 * e * e, 3 * e, e * e, e, e, e, e * f, f, f * e, e];
  const head = [e, e, e * v];
  const embd = [e * v, e * t];
  const bytes = (gpu, a) => {
    const blocks = gpu ? onGpu : L - onGpu;
    const parts = [...Array(blocks).fill(block).flat()];
    if ((onGpu > 0) === gpu) parts.push(...head);
    if (all === gpu) parts.push(...embd);
    return { weights: sum(parts, a), kv: blocks * 2 * alignUp(4 * e * nCtx, a) };
  };
  // One token at position 0: its id and position (all on the GPU) or the two boundary rows, and the
  // KQ mask (an input, on the CPU: one f32 for one cell).
  const [splits, copies, copyBytes] = onGpu === 0 ? [1, 0, 0] : all ? [1, 3, 2 * 4 + 4] : [2, 3, 2 * 4 * e + 4];
  return { gpuLayers: onGpu, embeddingsOnGpu: all, splits, copies, copyBytes, gpu: bytes(true, align.gpu), cpu: bytes(false, align.cpu) };
}

describe('gpuLayers on WebGPU (SwiftShader)', () => {
  let browser;
  let page;
  let problems;
  let cpu;
  let align;

  before(async () => {
    browser = await launch();
    ({ page, problems } = await openPage(browser, `${server.url}e2e/harness.html`));
    cpu = await loadAndRun(page, { ...BASE, backend: 'cpu' });
    assert.ok(cpu.ok, cpu.message);
    // Tensors in a WebGPU buffer start at minStorageBufferOffsetAlignment. The CPU's
    // alignment is a divisor of 256 and every tensor here is a multiple of 256 B: no padding.
    const gpuAlign = await page.evaluate(async () => (await navigator.gpu.requestAdapter()).limits.minStorageBufferOffsetAlignment);
    align = { gpu: Math.max(gpuAlign, 4), cpu: 1 };
  });
  after(async () => {
    await browser?.close();
  });

  test('the CPU model: one split, no copies, everything on the CPU', () => {
    const s = cpu.info.split;
    const want = expectedSplit(cpu.info.hparams, BASE.nCtx, 0, align);
    assert.deepEqual(s.backends, ['CPU']);
    assert.deepEqual([s.gpuLayers, s.embeddingsOnGpu, s.splits, s.copiesPerToken, s.copyBytesPerToken], [0, false, 1, 0, 0]);
    assert.deepEqual(Object.keys(s.bytesPerBackend), ['CPU']);
    assert.equal(s.bytesPerBackend.CPU.weights, want.cpu.weights + want.gpu.weights);
    assert.equal(s.bytesPerBackend.CPU.weights, cpu.info.memory.weights);
    assert.equal(s.bytesPerBackend.CPU.kv, 2 * 2 * 64 * 16 * 4);
    assert.deepEqual(cpu.greedy, HELLO.greedy_ids.slice(0, N_GEN));
  });

  const L = 2; // the tiny model's n_layer (checked below)
  for (const n of [0, 1, L, -1]) {
    test(`gpuLayers ${n}: logits within 1e-3 of the CPU, the same greedy tokens, info().split exact`, async () => {
      const r = await loadAndRun(page, { ...BASE, backend: 'webgpu', gpuLayers: n });
      assert.ok(r.ok, r.message);
      const { info } = r;
      assert.equal(info.hparams.n_layer, L);
      const d = maxDiff(r.logits, cpu.logits);
      console.log(`gpuLayers ${n}: max |logit - cpu| ${d.toExponential(2)}; split ${JSON.stringify(info.split)}`);
      assert.equal(r.logits.length, 50257);
      assert.ok(d <= 1e-3, `gpuLayers ${n}: max diff ${d}`);
      assert.deepEqual(r.greedy, cpu.greedy, `gpuLayers ${n}: greedy tokens`);

      const want = expectedSplit(info.hparams, BASE.nCtx, n, align);
      const s = info.split;
      assert.equal(info.backend, 'webgpu');
      assert.equal(info.load.backend, 'webgpu');
      assert.equal(info.backendNote, null);
      assert.deepEqual(s.backends, ['WebGPU', 'CPU']);
      assert.deepEqual(
        [s.gpuLayers, s.embeddingsOnGpu, s.splits, s.copiesPerToken, s.copyBytesPerToken],
        [want.gpuLayers, want.embeddingsOnGpu, want.splits, want.copies, want.copyBytes]);
      const { WebGPU: g, CPU: c } = s.bytesPerBackend;
      assert.deepEqual(Object.keys(s.bytesPerBackend), ['WebGPU', 'CPU']);
      assert.deepEqual([g.weights, g.kv], [want.gpu.weights, want.gpu.kv], 'WebGPU weights, kv');
      assert.deepEqual([c.weights, c.kv], [want.cpu.weights, want.cpu.kv], 'CPU weights, kv');
      // The parts add up to the totals, and the logits of a full batch (reserved at load)
      // sit in the compute buffer of the backend that runs the head.
      assert.equal(g.weights + c.weights, info.memory.weights);
      assert.equal(g.kv + c.kv, info.memory.kv);
      assert.equal(g.compute + c.compute, info.memory.compute);
      const logitsBytes = 50257 * BASE.nBatch * 4;
      if (want.gpuLayers === 0) {
        assert.equal(g.compute, 0, 'nothing runs on WebGPU');
        assert.ok(c.compute >= logitsBytes, `CPU compute ${c.compute}`);
      } else {
        assert.ok(g.compute >= logitsBytes, `WebGPU compute ${g.compute}`);
      }
      // Everything on the GPU: the CPU holds only the inputs, token ids and positions
      // (n_batch i32 each, 64-byte aligned).
      // The token ids, positions and the KQ mask ([nCtx, nBatch] f32 in the worst case reserved).
      const inputs = 2 * alignUp(4 * BASE.nBatch, 64) + alignUp(4 * BASE.nCtx * BASE.nBatch, 64);
      if (want.embeddingsOnGpu) assert.equal(c.compute, inputs, 'CPU: the inputs only');
      else assert.ok(c.compute > 0);
    });
  }

  test('the page saw no uncaught errors', () => {
    assert.deepEqual(problems.filter((p) => !/favicon\.ico$/.test(p)), []);
  });
});

describe('no WebGPU adapter (Chromium without --enable-unsafe-webgpu)', () => {
  let browser;
  let page;
  const console_ = [];
  let problems;

  before(async () => {
    const args = CHROMIUM_ARGS.filter((a) => a !== '--enable-unsafe-webgpu');
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args });
    ({ page, problems } = await openPage(browser, `${server.url}e2e/harness.html`));
    page.on('console', (m) => console_.push(`${m.type()}: ${m.text()}`));
  });
  after(async () => {
    await browser?.close();
  });

  test('navigator.gpu is there but gives no adapter', async () => {
    const r = await page.evaluate(async () => ({ gpu: !!navigator.gpu, adapter: await navigator.gpu.requestAdapter() }));
    assert.deepEqual(r, { gpu: true, adapter: null });
  });

  for (const worker of [false, true]) {
    test(`${worker ? 'in a worker' : 'on the page thread'}: 'auto' runs on the CPU and says why`, async () => {
      const r = await loadAndRun(page, { ...BASE, backend: 'auto', gpuLayers: 1, worker });
      assert.ok(r.ok, r.message);
      console.log(`backendNote: ${r.info.backendNote}`);
      assert.equal(r.info.backend, 'cpu');
      assert.equal(r.info.load.backend, 'cpu');
      assert.match(r.info.backendNote, /^backend "auto": WebGPU is not usable \(backend unavailable: no WebGPU adapter: .+\); running on the CPU$/);
      assert.deepEqual(r.info.split.backends, ['CPU']);
      assert.equal(r.info.split.gpuLayers, 0);
      assert.deepEqual(r.greedy, HELLO.greedy_ids.slice(0, N_GEN));
      if (!worker) {
        assert.ok(console_.some((l) => l.startsWith('warning: ggweb: backend "auto": WebGPU is not usable')), console_.join('\n'));
      }
    });
  }

  test("'webgpu' fails with code 'unsupported' naming the reason; a CPU load works after", async () => {
    const r = await loadAndRun(page, { ...BASE, backend: 'webgpu', worker: true });
    assert.equal(r.ok, false);
    console.log(`'webgpu' without an adapter: ${r.code}: ${r.message}`);
    assert.equal(r.code, 'unsupported');
    assert.match(r.message, /^opening the backend: backend "webgpu": backend unavailable: no WebGPU adapter: .*webgpu found no adapters$/);
    const again = await loadAndRun(page, { ...BASE, backend: 'cpu' });
    assert.ok(again.ok, again.message);
    assert.deepEqual(again.greedy, HELLO.greedy_ids.slice(0, N_GEN));
  });

  test('the page saw no uncaught errors', () => {
    assert.deepEqual(problems.filter((p) => !/favicon\.ico$/.test(p)), []);
  });
});
