// TransformerLens hook names as `trace` taps in headless Chromium (web/pkg, CPU, one thread):
// every hook point of tests/fixtures/tiny-f32.gguf against TransformerLens 3.x itself
// (tests/fixtures/tiny-f32.tl-ref.json + .bin, made by tests/fixtures/make_tl_ref.py), with
// TransformerLens's shape without the batch axis; a hook name that does not exist is `invalid`.
//   node --test tests/e2e/tl-hooks.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ROOT, useHarness } from './helpers.mjs';

const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.tl-ref.json`, 'utf8'));
const BIN = readFileSync(`${ROOT}tests/fixtures/${REF.bin}`);
const BLOCKS = new Float32Array(BIN.buffer, BIN.byteOffset, BIN.byteLength / 4);
// The bound for captures (two correct f32 implementations differ by ~1e-5).
const TOL = 2e-5;

const web = useHarness();

test('every TransformerLens hook point traced by its name equals TransformerLens', async () => {
  const r = await web.page.evaluate(async ({ ids, names }) => {
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

// score with hooks (every position, no `pos`) and hooks on the LayerNorm scales, against
// TransformerLens (tests/fixtures/tiny-f32.tl-score-ref.json, make_tl_ref.py --only score).
const SREF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-f32.tl-score-ref.json`, 'utf8'));

test('score with hooks and LayerNorm scale hooks equal TransformerLens; bad ones are invalid', async () => {
  const r = await web.page.evaluate(async (SREF) => {
    const { Model } = await import('/ggweb.js');
    const m = await Model.load('/tests/fixtures/tiny-f32.gguf', { worker: true, relaxedSimd: false, nThreads: 1 });
    const nVocab = m.info().hparams.nVocab;
    const typed = (hooks) => hooks.map((h) => (Array.isArray(h.value) ? { ...h, value: new Float32Array(h.value) } : h));
    const plain = await m.score(SREF.prompt, { topK: SREF.top_k });
    const scores = [];
    for (const c of SREF.score) {
      const s = await m.score(SREF.prompt, { topK: SREF.top_k, hooks: typed(c.hooks) });
      const again = await m.score(SREF.prompt, { topK: SREF.top_k, hooks: c.hooks });
      scores.push({
        logprobs: Array.from(s.logprobs), entropies: Array.from(s.entropies), ranks: Array.from(s.ranks),
        top: s.top, cached: s.cachedTokens, againCached: again.cachedTokens, same: again.logprobs.every((x, i) => x === s.logprobs[i]),
      });
    }
    const back = await m.score(SREF.prompt, { topK: SREF.top_k });
    const errors = [];
    for (const opts of [
      { hooks: [{ at: 'blocks.0.hook_resid_pre', op: 'zero', pos: 0 }] },
      { hooks: [{ at: 'blocks.0.ln1.hook_scale', op: 'add', value: 1 }] },
      { hooks: [{ at: 'hook_embed', op: 'zero', heads: 0 }] },
      { hooks: 'nope' },
      { topk: 3 },
    ]) {
      try {
        await m.score(SREF.prompt, opts);
        errors.push('scored');
      } catch (e) {
        errors.push({ code: e.code, message: e.message });
      }
    }
    const after = await m.score(SREF.prompt);
    const ln = [];
    for (const c of SREF.ln_scale) {
      const run = await m.run(SREF.prompt, { hooks: c.hooks, capture: Object.keys(c.capture) });
      const logits = [];
      for (let p = 0; p < SREF.prompt.length; p++) logits.push(c.logit_ids.map((id) => run.logits[p * nVocab + id]));
      ln.push({ logits, cache: Object.fromEntries(Object.entries(run.cache).map(([k, v]) => [k, Array.from(v.data)])) });
    }
    await m.dispose();
    return { plain: Array.from(plain.logprobs), scores, back: Array.from(back.logprobs), backCached: back.cachedTokens, ln, errors, after: after.cachedTokens };
  }, SREF);
  const close = (got, want, what, tol = 1e-4) => {
    assert.equal(got.length, want.length, `${what}: length`);
    for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i] - want[i]) <= tol, `${what}[${i}]: ${got[i]} vs ${want[i]}`);
  };
  const n = SREF.prompt.length;
  SREF.score.forEach((c, i) => {
    const s = r.scores[i];
    close(s.logprobs, c.logprobs, `score ${i} logprobs`);
    close(s.entropies, c.entropies, `score ${i} entropies`);
    assert.deepEqual(s.ranks, c.ranks, `score ${i} ranks`);
    s.top.forEach((row, p) => {
      assert.deepEqual(row.map((t) => t.token), c.top_ids[p], `score ${i} top ids ${p}`);
      close(row.map((t) => t.logprob), c.top_logprobs[p], `score ${i} top logprobs ${p}`);
    });
    assert.ok(s.logprobs.some((x, j) => Math.abs(x - r.plain[j]) > 1e-3), `score ${i}: the hooks change the scores`);
    // Other hooks than the cache's: nothing reused; the same hooks again: every row reused.
    assert.deepEqual([s.cached, s.againCached, s.same], [0, n, true], `score ${i} cache`);
  });
  assert.equal(r.backCached, 0, 'no reuse from a hooked cache without hooks');
  close(r.back, r.plain, 'unhooked again', 1e-6);
  SREF.ln_scale.forEach((c, i) => {
    r.ln[i].logits.forEach((row, p) => close(row, c.logits[p], `ln case ${i} logits ${p}`));
    for (const [k, v] of Object.entries(c.capture)) close(r.ln[i].cache[k], v, `ln case ${i} ${k}`, 2e-5);
  });
  const [pos, lnAdd, typo, notArray, unknown] = r.errors;
  assert.deepEqual(r.errors.map((e) => e.code), Array(5).fill('invalid'), JSON.stringify(r.errors));
  assert.match(pos.message, /'pos' is not allowed here/);
  assert.match(lnAdd.message, /a LayerNorm scale can be captured, and changed only by 'scale' or 'zero'/);
  assert.match(typo.message, /unknown option "heads"/);
  assert.match(notArray.message, /hooks must be an array/);
  assert.match(unknown.message, /score options: unknown option "topk" \(known: topK, hooks\)/);
  assert.equal(r.after, n, 'the refused calls left the cache; the model is usable');
});
