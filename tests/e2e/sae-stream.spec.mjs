// model.loadSae(folderUrl) streams sae_weights.safetensors into the wasm side chunk by chunk
// (saeOpen / saeFeed / saeFinish: the file is never held whole in JS memory), in headless
// Chromium (web/pkg, CPU): an SAE that arrives in 16 KiB pieces (scripts/serve.mjs's
// /__test/slow route) equals the one read at once; a body that stalls is 'timeout', one cut
// short 'network', a file whose bytes are bad 'format' (from { cfg, weights } too); the model
// and its other SAEs stay usable after each.
//   node --test tests/e2e/sae-stream.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { useHarness } from './helpers.mjs';

const web = useHarness();

for (const worker of [true, false]) {
  test(`loadSae streams the weights; stalls, cuts and bad bytes are typed errors (${worker ? 'worker' : 'page thread'})`, async () => {
    const r = await web.page.evaluate(async (worker) => {
      const { Model } = await import('/ggweb.js');
      const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { worker, relaxedSimd: false, nThreads: 1 });
      const ids = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13];
      const plain = await m.loadSae('/tests/fixtures/tiny-sae/');
      // 17048 bytes in 16 KiB pieces, 30 ms apart: two chunks cross separately.
      const slow = await m.loadSae('/__test/slow/30/tests/fixtures/tiny-sae/');
      const a = await plain.encode(ids, { topK: 5 });
      const b = await slow.encode(ids, { topK: 5 });
      const same = JSON.stringify(a.top) === JSON.stringify(b.top) && a.l0.every((x, i) => x === b.l0[i]) && a.mse.every((x, i) => x === b.mse[i]);
      const rowSame = (await plain.decoderRow(7)).every((x, i, arr) => x === arr[i]) &&
        (await slow.decoderRow(7)).join() === (await plain.decoderRow(7)).join();
      const errors = [];
      const tryLoad = async (src, opts) => {
        try {
          await m.loadSae(src, opts);
          errors.push('loaded');
        } catch (e) {
          errors.push({ code: e.code, message: e.message });
        }
      };
      // cfg.json: 100 of its 341 bytes, then nothing (read with the same stall timer as the
      // weights; the route keeps its connection busy, so the weights cannot be the stalled one).
      await tryLoad('/__test/stall/100/tests/fixtures/tiny-sae/', { stallTimeoutMs: 400 });
      // The weights end after 9000 of their 17048 bytes (the connection closes).
      await tryLoad('/__test/short/9000/tests/fixtures/tiny-sae/');
      const cfg = await (await fetch('/tests/fixtures/tiny-sae/cfg.json')).text();
      const w = new Uint8Array(await (await fetch('/tests/fixtures/tiny-sae/sae_weights.safetensors')).arrayBuffer());
      await tryLoad({ cfg, weights: w.slice(0, w.length - 4) });
      const huge = w.slice();
      new DataView(huge.buffer).setBigUint64(0, 2n ** 62n, true);
      await tryLoad({ cfg, weights: huge });
      const ctl = new AbortController();
      const p = m.loadSae('/__test/slow/300/tests/fixtures/tiny-sae/', { signal: ctl.signal });
      setTimeout(() => ctl.abort(), 100);
      try {
        await p;
        errors.push('loaded');
      } catch (e) {
        errors.push({ code: e.code, message: e.message });
      }
      // Usable afterwards: the model, and the SAEs loaded before.
      const again = await slow.encode(ids, { topK: 5 });
      const scored = (await m.score(ids)).logprobs.length;
      await plain.dispose();
      await slow.dispose();
      await m.dispose();
      return { same, rowSame, info: { dIn: slow.dIn, dSae: slow.dSae, hookName: slow.hookName }, errors, againSame: JSON.stringify(again.top) === JSON.stringify(b.top), scored, l0: Array.from(b.l0) };
    }, worker);
    assert.deepEqual(r.info, { dIn: 32, dSae: 64, hookName: 'blocks.1.hook_resid_pre' });
    assert.ok(r.same && r.rowSame, 'the streamed SAE equals the one read at once');
    assert.ok(r.l0.some((x) => x > 0), 'features fire');
    const [stall, cut, truncated, huge, aborted] = r.errors;
    assert.equal(stall.code, 'timeout', JSON.stringify(stall));
    assert.match(stall.message, /cfg\.json stalled: no data for 400 ms after 100 B/);
    assert.equal(cut.code, 'network', JSON.stringify(cut));
    assert.equal(truncated.code, 'format', JSON.stringify(truncated));
    assert.match(truncated.message, /tensor 'b_enc': data_offsets \[16512, 16768\] past the end of the data \(16764 bytes\): the file is truncated/);
    assert.equal(huge.code, 'format', JSON.stringify(huge));
    assert.match(huge.message, /the header claims 4611686018427387904 bytes \(at most 104857600\)/);
    assert.equal(aborted.code, 'aborted', JSON.stringify(aborted));
    assert.ok(r.againSame, 'an SAE loaded before the errors still encodes the same');
    assert.equal(r.scored, 9, 'the model is usable afterwards');
  });
}
