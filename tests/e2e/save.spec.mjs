// model.save (issue 39: GGUF export) in headless Chromium (web/pkg, CPU, one thread): a model
// trained 3 AdamW updates on tiny-f32 saved as F32 loads back (Model.load of the bytes) with the
// tuned model's held-prompt logits within 1e-4; an untrained fixture saved in its own type is
// the fixture byte for byte (F32, F16, Q8_0: llama.cpp's layout and metadata, the crate's
// quantizers); 'busy' while a training run runs, 'invalid' for a bad type or key, 'disposed'
// after dispose, the model usable after each. Through the worker and on the page thread.
//   node --test tests/e2e/save.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ROOT, useHarness } from './helpers.mjs';

const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.train-ref.json`, 'utf8'));

const web = useHarness();

test('a trained model saved as F32 loads back with its logits; fixtures save as themselves; refusals', async () => {
  const r = await web.page.evaluate(async ({ sequences, held }) => {
    const { Model } = await import('/ggweb.js');
    const code = async (f) => { try { await f(); return 'ok'; } catch (e) { return `${e.code}: ${e.message}`; } };
    const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
    const out = {};
    for (const worker of [true, false]) {
      const o = (out[worker ? 'worker' : 'page'] = {});
      const opts = { worker, relaxedSimd: false, nThreads: 1 };
      const m = await Model.load('/tests/fixtures/tiny-f32.gguf', opts);
      const before = Array.from(await m.logits(held));
      const run = m.train(sequences.map((s) => new Uint32Array(s)), {
        seqLen: 16, batchSize: 2, steps: 3, optimizer: { type: 'adamw', lr: 3e-3 },
      });
      for await (const s of run) if (s.step === 1) o.busy = await code(() => m.save());
      o.stats = await run.stats;
      const tuned = Array.from(await m.logits(held));
      o.moved = Math.max(...tuned.map((x, i) => Math.abs(x - before[i])));
      const bytes = await m.save({ type: 'f32' });
      o.isBytes = bytes instanceof Uint8Array;
      o.magic = String.fromCharCode(...bytes.subarray(0, 4));
      o.size = bytes.length;
      const back = await Model.load(bytes, opts);
      const got = Array.from(await back.logits(held));
      o.worst = Math.max(...got.map((x, i) => Math.abs(x - tuned[i])));
      await back.dispose();
      o.bad = {
        type: await code(() => m.save({ type: 'q4_0' })),
        key: await code(() => m.save({ type: 'f32', dest: 'opfs' })),
        notObject: await code(() => m.save('f16')),
      };
      // Smaller types of the trained model load back too.
      for (const type of ['f16', 'q8_0']) {
        const b = await m.save({ type });
        const q = await Model.load(b, opts);
        o[type] = { size: b.length, n: (await q.logits(held)).length };
        await q.dispose();
      }
      o.after = (await m.logits([1, 2, 3])).length;
      await m.dispose();
      o.disposed = await code(() => m.save());
    }
    // Untrained, each fixture saved in its own type is the fixture (the wasm build's exporter
    // and quantizers; the native test checks the same).
    out.itself = {};
    for (const [file, type] of [['tiny-f32.gguf', 'f32'], ['tiny-f16.gguf', 'f16'], ['tiny-q8_0.gguf', 'q8_0']]) {
      const url = `/tests/fixtures/${file}`;
      const want = new Uint8Array(await (await fetch(url)).arrayBuffer());
      const m = await Model.load(url, { worker: true, relaxedSimd: false, nThreads: 1 });
      out.itself[file] = same(await m.save({ type }), want);
      await m.dispose();
    }
    return out;
  }, { sequences: REF.sequences, held: REF.held });
  for (const where of ['worker', 'page']) {
    const o = r[where];
    assert.match(o.busy, /^busy: save: /, `${where}: save while training`);
    assert.deepEqual(o.stats, { stop: 'steps', steps: 3, tokens: 96 }, where);
    assert.ok(o.moved > 0.05, `${where}: training moved the logits by ${o.moved}`);
    assert.equal(o.isBytes, true, where);
    assert.equal(o.magic, 'GGUF', where);
    assert.equal(o.size, 8387552, `${where}: the tied tiny model's F32 file`);
    assert.ok(o.worst <= 1e-4, `${where}: the saved file's logits differ from the tuned model's by ${o.worst}`);
    assert.match(o.bad.type, /^invalid: .*'f32', 'f16' or 'q8_0'.*q4_0/, where);
    assert.match(o.bad.key, /^invalid: .*unknown option "dest"/, where);
    assert.match(o.bad.notObject, /^invalid: save: options must be an object/, where);
    assert.ok(o.f16.size < o.size && o.q8_0.size < o.f16.size, `${where}: sizes f32 ${o.size}, f16 ${o.f16.size}, q8_0 ${o.q8_0.size}`);
    assert.equal(o.f16.n, 50257, where);
    assert.equal(o.q8_0.n, 50257, where);
    assert.equal(o.after, 50257, `${where}: the model runs after saving and the refusals`);
    assert.match(o.disposed, /^disposed: /, where);
    console.log(`${where}: saved F32 (${o.size} bytes) loaded back within ${o.worst.toExponential(2)} of the tuned logits; f16 ${o.f16.size}, q8_0 ${o.q8_0.size} bytes`);
  }
  assert.deepEqual(r.itself, { 'tiny-f32.gguf': true, 'tiny-f16.gguf': true, 'tiny-q8_0.gguf': true });
});
