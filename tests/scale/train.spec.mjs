// Full fine-tuning at full size in wasm32 (issue 39's memory acceptance; npm run test:scale):
// the 124M shape (.models/124m-f16.gguf and 124m-f32.gguf from bench/make_models.sh, or
// GGWEB_SCALE_TRAIN_MODEL, a comma list), every weight trained with AdamW at seqLen 128, batch 4,
// in headless Chromium on web/pkg (1 thread, plain SIMD, on the page: `worker: false`, so the
// page's core is the model's). The weights are F32 (0.5 GB: the F16 file's converted, the F32
// file's trained where the load put them), the gradients and AdamW's m and v take three times that, and
// the training graph's activations come on top: the run is planned against the wasm32 heap
// and two updates run, the loss finite and lower on the repeated batch. The peak of the wasm
// heap (the linear memory's size after the run: it only grows) is printed ("peak wasm memory")
// and must be under 4 GiB. An optimizer checkpoint of the run (save({ optimizer: true }), F32
// weights with m and v: ~1.5 GB) does not fit in wasm32 beside the weights and state as bytes:
// refused with the sizes; `to: 'opfs'` writes it a chunk at a time (its time and the wasm
// memory's growth printed: "checkpoint"), the wasm memory growing by less than 64 MiB, and a
// fresh page loads it back with 'opfs:name' and resumes at update 3 with a finite loss.
//   node --test tests/scale/train.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, DOT_MODELS, openPage, serve } from '../e2e/helpers.mjs';
import { MIB } from '../e2e/native-vs-wasm.mjs';

// F16 (trained as F32 copies of its weights) and F32 (trained where the load put them).
const MODELS = (process.env.GGWEB_SCALE_TRAIN_MODEL ?? '124m-f16.gguf,124m-f32.gguf').split(',');
const WASM32 = 4 * 1024 * MIB;
for (const m of MODELS) assert.ok(existsSync(`${DOT_MODELS}/${m}`), `.models/${m} is missing (bench/make_models.sh)`);

// A profile on disk, not the off-the-record context `browser.newPage()` makes: there OPFS lives
// in memory and a 1.5 GB checkpoint fails with QuotaExceededError whatever
// navigator.storage.estimate() says (seen 2026-12-06), which no user's normal profile does.
const web = { server: null, browser: null, dir: null };
before(async () => {
  web.server = await serve();
  web.dir = mkdtempSync(join(tmpdir(), 'ggweb-scale-train-'));
  web.browser = await chromium.launchPersistentContext(web.dir, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
});
after(async () => {
  await web.browser?.close();
  await web.server?.close();
  if (web.dir) rmSync(web.dir, { recursive: true, force: true });
});

for (const MODEL of MODELS) {
  test(`${MODEL}: full AdamW training at seqLen 128, batch 4 fits and runs in wasm32 in Chromium`, { timeout: 30 * 60_000 }, async () => {
    const { page, problems } = await openPage(web.browser, `${web.server.url}e2e/harness.html`);
    let r;
    try {
      r = await page.evaluate(async ({ url }) => {
        try {
          const { Model } = await import('/ggweb.js');
          const m = await Model.load(url, { nCtx: 128, nThreads: 1, relaxedSimd: false, worker: false, backend: 'cpu' });
          const core = await import('/pkg/ggweb_core.js');
          const afterLoad = core.wasm_memory_bytes();
          // Four sequences of 128 ids spread over the vocabulary: every update trains on all four.
          const seqs = Array.from({ length: 4 }, (_, k) => Uint32Array.from({ length: 128 }, (_, i) => ((k * 128 + i) * 7919 + 13) % 50257));
          const steps = [];
          const t = performance.now();
          const run = m.train(seqs, { seqLen: 128, batchSize: 4, steps: 2, optimizer: { type: 'adamw', lr: 1e-4 } });
          for await (const s of run) steps.push({ ...s, ms: performance.now() - t });
          const stats = await run.stats;
          const peak = core.wasm_memory_bytes();
          const after = (await m.logits([1, 2, 3])).length; // the model runs on afterwards
          // The optimizer checkpoint of the whole model as bytes does not fit in wasm32 after the
          // run (refused with the sizes); to OPFS it is written a chunk at a time.
          const code = (p) => p.then(() => 'ok', (e) => `${e.code}: ${e.message}`);
          const whole = await code(m.save({ type: 'f32', optimizer: true }));
          const beforeSave = core.wasm_memory_bytes();
          const t1 = performance.now();
          const saved = await m.save({ type: 'f32', optimizer: true, to: 'opfs', name: 'scale-124m' });
          const save = { ...saved, ms: performance.now() - t1, grew: core.wasm_memory_bytes() - beforeSave };
          const stored = (await (await navigator.storage.getDirectory()).getDirectoryHandle('ggweb-checkpoints', { create: true }).then(async (d) => { const n = []; for await (const k of d.keys()) n.push(k); return n; }));
          const still = (await m.logits([1, 2, 3])).length;
          await m.dispose();
          return { ok: true, afterLoad, peak, steps, stats, after, whole, save, stored, still };
        } catch (e) {
          return { ok: false, message: `${e.code}: ${e.message}` };
        }
      }, { url: `/dot-models/${MODEL}` });
    } catch (e) {
      await page.close();
      throw e;
    }
    assert.ok(r.ok, r.message);
    assert.deepEqual(problems.filter((p) => !p.includes('/favicon.ico')), []);
    const mb = (x) => `${(x / MIB).toFixed(1)} MiB`;
    console.log(`${MODEL} wasm32, full AdamW seqLen 128 batch 4: wasm memory ${mb(r.afterLoad)} after load, ` +
      `peak wasm memory ${mb(r.peak)} (${r.peak} B); losses ${r.steps.map((s) => s.loss.toFixed(4)).join(', ')}; ` +
      `updates done at ${r.steps.map((s) => (s.ms / 1000).toFixed(1)).join(', ')} s`);
    assert.deepEqual(r.stats, { stop: 'steps', steps: 2, tokens: 1024 });
    assert.ok(r.steps.every((s) => Number.isFinite(s.loss)));
    assert.ok(r.steps[1].loss < r.steps[0].loss, `losses ${r.steps.map((s) => s.loss)}`);
    assert.ok(r.peak <= WASM32);
    assert.equal(r.after, 50257);
    console.log(`save({ optimizer: true }) after the run as bytes: ${r.whole}`);
    console.log(`checkpoint to OPFS: ${r.save.bytes} bytes in ${(r.save.ms / 1000).toFixed(1)} s, wasm memory +${mb(r.save.grew)}`);
    assert.match(r.whole, /^unsupported: save: .*-byte file does not fit in memory/);
    assert.equal(r.save.to, 'opfs');
    assert.ok(r.save.bytes > 3 * 124e6 * 4, `the checkpoint is ${r.save.bytes} bytes`);
    assert.ok(r.save.grew < 64 * MIB, `the wasm memory grew by ${r.save.grew} bytes writing the checkpoint`);
    assert.deepEqual(r.stored, ['scale-124m'], 'the checkpoint alone, no .part');
    assert.equal(r.still, 50257, 'the model runs after the save');

    // The page reloaded (a fresh wasm memory, the same origin's OPFS) loads it back and resumes
    // at update 3.
    let b;
    try {
      await page.goto(`${web.server.url}e2e/harness.html`);
      b = await page.evaluate(async () => {
        try {
          const { Model } = await import('/ggweb.js');
          const m = await Model.load('opfs:scale-124m', { nCtx: 128, nThreads: 1, relaxedSimd: false, worker: false, backend: 'cpu' });
          const seqs = Array.from({ length: 4 }, (_, k) => Uint32Array.from({ length: 128 }, (_, i) => ((k * 128 + i) * 7919 + 13) % 50257));
          const steps = [];
          for await (const s of m.train(seqs, { seqLen: 128, batchSize: 4, steps: 1, optimizer: { type: 'adamw', lr: 1e-4 } })) steps.push(s);
          await m.dispose();
          await (await navigator.storage.getDirectory()).removeEntry('ggweb-checkpoints', { recursive: true });
          return { ok: true, steps };
        } catch (e) {
          return { ok: false, message: `${e.code}: ${e.message}` };
        }
      });
    } finally {
      await page.close();
    }
    assert.ok(b.ok, b.message);
    console.log(`resumed from OPFS: update ${b.steps[0].step}, loss ${b.steps[0].loss.toFixed(4)} (the run's: ${r.steps.map((s) => s.loss.toFixed(4)).join(', ')})`);
    assert.equal(b.steps[0].step, 3);
    assert.equal(b.steps[0].tokens, 3 * 512);
    assert.ok(Number.isFinite(b.steps[0].loss) && b.steps[0].loss < r.steps[0].loss);
  });
}

