// Several sequences and beam search through the JS API in headless Chromium (web/pkg), in a
// Web Worker and on the page thread: generate(prompt, { n }) yields { seq, token, text }
// whose sequence i equals generate(prompt, { seed: seed + i }); generate(prompt, { numBeams,
// lengthPenalty, maxTokens }) equals Hugging Face's beam search
// (tests/fixtures/tiny-gpt2.beam-ref.json, made by tests/fixtures/make_beam_ref.py), its
// beams in stats.beams; bad values are refused with code 'invalid'.
//   node --test tests/e2e/nseq.spec.mjs
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { MODELS_DIR, ROOT, useHarness } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f32.gguf) are needed: set GGWEB_MODELS_DIR');
const F32 = '/shared-models/tiny-gpt2-f32.gguf';
const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-gpt2.beam-ref.json`, 'utf8'));

const web = useHarness({ nBatch: 4, relaxedSimd: false, nThreads: 1 });
const inPage = (worker, body, arg) => web.inPage(worker, body, arg);

for (const worker of [true, false]) {
  describe(`several sequences ${worker ? 'in a worker' : 'on the page thread'}`, () => {
    test('n sequences: sequence i equals a one-sequence run seeded seed + i', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg.url, opts);
        const o = { maxTokens: 6, temperature: 1, topK: 0, topP: 1, ignoreEos: true };
        const g = m.generate('Hello, my name is', { ...o, n: 3, seed: 11 });
        const items = [];
        for await (const it of g) items.push({ seq: it.seq, token: it.token, text: it.text });
        const stats = await g.stats;
        const singles = [];
        for (let i = 0; i < 3; i++) {
          const s = [];
          for await (const it of m.generate('Hello, my name is', { ...o, seed: 11 + i })) s.push({ token: it.token, text: it.text, seq: it.seq });
          singles.push(s);
        }
        await m.dispose();
        return { items, singles, stats: { tokens: stats.tokens, stop: stats.stop, beams: stats.beams } };
      `, { url: F32 });
      assert.ok(r.ok, r.message);
      const { items, singles, stats } = r.value;
      assert.equal(items.length, 18);
      assert.equal(stats.tokens, 18);
      assert.equal(stats.stop, 'maxTokens');
      assert.equal(stats.beams, undefined);
      for (let i = 0; i < 3; i++) {
        const mine = items.filter((it) => it.seq === i);
        assert.ok(singles[i].every((it) => it.seq === 0), 'one sequence: seq 0 on every item');
        assert.deepEqual(mine.map((it) => it.token), singles[i].map((it) => it.token), `sequence ${i}`);
        assert.equal(mine.map((it) => it.text).join(''), singles[i].map((it) => it.text).join(''));
      }
      assert.notDeepEqual(singles[0].map((it) => it.token), singles[1].map((it) => it.token));
    });

    test('beam search equals Hugging Face; stats.beams holds the k beams', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg.url, opts);
        const out = [];
        for (const c of arg.cases) {
          const bias = c.eos_bias ? { logitBias: { 50256: c.eos_bias } } : {};
          const g = m.generate(c.ids, { numBeams: c.num_beams, lengthPenalty: c.length_penalty, maxTokens: c.max_new_tokens, ...bias });
          const tokens = [];
          for await (const it of g) tokens.push(it.token);
          const s = await g.stats;
          out.push({ tokens, stop: s.stop, type: s.beams[0].tokens.constructor.name,
            beams: s.beams.map((b) => ({ tokens: Array.from(b.tokens), score: b.score })) });
        }
        await m.dispose();
        return out;
      `, { url: F32, cases: REF.cases });
      assert.ok(r.ok, r.message);
      r.value.forEach((got, i) => {
        const want = REF.cases[i].beams;
        assert.equal(got.type, 'Uint32Array');
        const best = want[0].tokens;
        const eos = best[best.length - 1] === 50256;
        assert.equal(got.stop, eos ? 'eos' : 'maxTokens');
        assert.equal(got.beams.length, want.length);
        got.beams.forEach((b, j) => {
          assert.deepEqual(b.tokens, want[j].tokens, `case ${i} beam ${j}`);
          assert.ok(Math.abs(b.score - want[j].score) <= 1e-4, `case ${i} beam ${j}: ${b.score} vs ${want[j].score}`);
        });
        assert.deepEqual(got.tokens, eos ? best.slice(0, -1) : best, 'the items are the best beam (without its closing eos)');
        assert.notDeepEqual(got.tokens, REF.cases[i].greedy);
      });
    });

    test('bad n, numBeams and lengthPenalty are refused with code invalid', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg.url, opts);
        const out = [];
        for (const o of [{ n: 0 }, { n: 65 }, { numBeams: 0 }, { n: 2, numBeams: 2 }, { lengthPenalty: 'x' }, { n: 1.5 }]) {
          try {
            for await (const _ of m.generate('Hi', { maxTokens: 1, ...o })) { /* none */ }
            out.push('accepted');
          } catch (e) {
            out.push(e.code + ': ' + e.message);
          }
        }
        await m.dispose();
        return out;
      `, { url: F32 });
      assert.ok(r.ok, r.message);
      const [n0, n65, b0, both, lp, frac] = r.value;
      assert.match(n0, /^invalid: .*n must be an integer from 1 to 64, got 0/);
      assert.match(n65, /^invalid: .*n must be an integer from 1 to 64, got 65/);
      assert.match(b0, /^invalid: .*numBeams must be an integer from 1 to 64, got 0/);
      assert.match(both, /^invalid: .*n \(2\) and numBeams \(2\) cannot both be above 1/);
      assert.match(lp, /^invalid: .*lengthPenalty must be a number from -100 to 100/);
      assert.match(frac, /^invalid: .*n must be an integer from 1 to 64, got 1.5/);
    });
  });
}
