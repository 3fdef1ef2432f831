// TransformerLens hook names as `trace` taps in headless Chromium (web/pkg, CPU, one thread):
// every hook point of tests/fixtures/tiny-f32.gguf against TransformerLens 3.x itself
// (tests/fixtures/tiny-f32.tl-ref.json + .bin, made by tests/fixtures/make_tl_ref.py), with
// TransformerLens's shape without the batch axis; a hook name that does not exist is `invalid`.
//   node --test tests/e2e/tl-hooks.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ROOT, launch, openPage, serve } from './helpers.mjs';

const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.tl-ref.json`, 'utf8'));
const BIN = readFileSync(`${ROOT}tests/fixtures/${REF.bin}`);
const BLOCKS = new Float32Array(BIN.buffer, BIN.byteOffset, BIN.byteLength / 4);
// The bound for captures (two correct f32 implementations differ by ~1e-5).
const TOL = 2e-5;

let server;
let browser;
let page;

before(async () => {
  server = await serve();
  browser = await launch();
  ({ page } = await openPage(browser, `${server.url}e2e/harness.html`));
});

after(async () => {
  await browser?.close();
  await server?.close();
});

test('every TransformerLens hook point traced by its name equals TransformerLens', async () => {
  const r = await page.evaluate(async ({ ids, names }) => {
    const { Model } = await import('/ggweb.js');
    const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { worker: true, relaxedSimd: false, nThreads: 1 });
    const t = await m.trace(ids, { taps: names });
    const out = {};
    for (const [k, v] of Object.entries(t.nodes)) out[k] = { shape: v.shape, data: Array.from(v.data, (x) => (x === -Infinity ? '-inf' : x)) };
    let bad;
    try {
      await m.trace(ids, { taps: ['blocks.3.hook_resid_pre'] });
    } catch (e) {
      bad = { code: e.code, message: e.message };
    }
    // The model is usable afterwards.
    const again = await m.trace(ids, { taps: ['blocks.0.attn.hook_pattern', 'attn'] });
    const same = Array.from(again.nodes['blocks.0.attn.hook_pattern'].data).every((x, i) => x === again.attn[0][i]);
    await m.dispose();
    return { out, bad, same };
  }, { ids: REF.prompt, names: REF.hook_names });
  assert.deepEqual(Object.keys(r.out).sort(), [...REF.hook_names].sort());
  let masked = 0;
  for (const name of REF.hook_names) {
    const { offset, shape } = REF.blocks[`capture/${name}`];
    const got = r.out[name];
    assert.deepEqual(got.shape, shape, `${name}: shape`);
    const n = shape.reduce((a, b) => a * b, 1);
    assert.equal(got.data.length, n, `${name}: size`);
    for (let i = 0; i < n; i++) {
      const want = BLOCKS[offset + i];
      if (want === -Infinity) {
        assert.equal(got.data[i], '-inf', `${name}[${i}]: masked`);
        masked++;
      } else {
        assert.ok(Math.abs(got.data[i] - want) <= TOL, `${name}[${i}]: ${got.data[i]} vs ${want}`);
      }
    }
  }
  assert.equal(masked, 3 * 4 * 45, 'masked attention scores: 3 layers × 4 heads × 45');
  assert.equal(r.bad?.code, 'invalid');
  assert.match(r.bad.message, /'blocks\.3\.hook_resid_pre'/);
  assert.ok(r.same, 'hook_pattern is the attention tap');
});
