// "Inside GPT-2" in headless Chromium, in a Web Worker and on the page thread: score,
// trace and generation logprobs of the real wasm module (web/pkg) against Hugging Face
// (tests/fixtures/tiny-gpt2.inside-ref.json, made by tests/fixtures/make_inside_ref.py),
// the prompt cache, stop strings split across tokens, and strict options.
//   node --test tests/e2e/inside.spec.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { MODELS_DIR, ROOT, launch, openPage, serve } from './helpers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f32.gguf) are needed: set GGWEB_MODELS_DIR');
const F32 = '/shared-models/tiny-gpt2-f32.gguf';
const REF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-gpt2.inside-ref.json`, 'utf8'));
// f32 in the browser against HF's f32: summation order only (the bound).
const TOL = 1e-4;

let server;
let browser;
let page;

before(async () => {
  server = await serve();
  browser = await launch();
  ({ page } = await openPage(browser, `${server.url}e2e/harness.html`));
  await page.evaluate(async () => {
    window.G = await import('/ggweb.js');
  });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Runs `body` in the page with `Model`, `opts` (load options) and `arg` in scope. */
async function inPage(worker, body, arg) {
  return page.evaluate(
    async ({ worker, body, arg }) => {
      // The plain build on one thread: the results do not depend on the machine's SIMD.
      const opts = { worker, nBatch: 4, relaxedSimd: false, nThreads: 1 };
      // eslint-disable-next-line no-new-func
      const fn = new Function('G', 'Model', 'opts', 'arg', `return (async () => { ${body} })()`);
      try {
        return { ok: true, value: await fn(window.G, window.G.Model, opts, arg) };
      } catch (e) {
        return { ok: false, code: e.code, message: e.message };
      }
    },
    { worker, body, arg },
  );
}

const worst = (a, b) => {
  assert.equal(a.length, b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
};

for (const worker of [true, false]) {
  describe(`inside GPT-2 ${worker ? 'in a worker' : 'on the page thread'}`, () => {
    test('score and trace equal Hugging Face', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg.url, opts);
        const out = [];
        for (const p of arg.prompts) {
          const s = await m.score(p.ids, { topK: 5 });
          const byText = await m.score(p.text, { topK: 5 });
          const t = await m.trace(p.ids, { taps: ['attn', 'hidden', 'l1.ffn_gelu'] });
          out.push({
            types: [s.tokens.constructor.name, s.logprobs.constructor.name, s.ranks.constructor.name, t.attn[0].constructor.name],
            tokens: Array.from(s.tokens), textTokens: Array.from(byText.tokens), cached: byText.cachedTokens,
            logprobs: Array.from(s.logprobs), entropies: Array.from(s.entropies), ranks: Array.from(s.ranks), top: s.top,
            attn: t.attn.map((a) => Array.from(a)), hidden: t.hidden.map((h) => Array.from(h)),
            gelu: { shape: t.nodes['l1.ffn_gelu'].shape, n: t.nodes['l1.ffn_gelu'].data.length }, compute: t.memory.compute,
          });
        }
        await m.dispose();
        return out;
      `, { url: F32, prompts: REF.prompts.map(({ ids, text }) => ({ ids, text })) });
      assert.ok(r.ok, r.message);
      r.value.forEach((got, i) => {
        const want = REF.prompts[i];
        assert.deepEqual(got.types, ['Uint32Array', 'Float32Array', 'Uint32Array', 'Float32Array']);
        assert.deepEqual(got.tokens, want.ids);
        assert.deepEqual(got.textTokens, want.ids, 'a string is tokenized as HF does');
        assert.equal(got.cached, want.ids.length, 'the same text again comes from the prompt cache');
        assert.ok(worst(got.logprobs, want.logprobs) <= TOL, `${want.key} logprobs`);
        assert.ok(worst(got.entropies, want.entropies) <= TOL, `${want.key} entropies`);
        got.ranks.forEach((rank, j) => assert.ok(want.rank_lo[j] <= rank && rank <= want.rank_hi[j], `${want.key} rank ${j}: ${rank}`));
        got.top.forEach((row, j) => {
          assert.equal(row.length, 5);
          row.forEach((e, k) => assert.ok(Math.abs(e.logprob - want.top5[j][k][1]) <= TOL, `${want.key} top ${j}.${k}`));
        });
        got.attn.forEach((a, l) => assert.ok(worst(a, want.attentions[l]) <= TOL, `${want.key} attn ${l}`));
        assert.equal(got.hidden.length, want.hidden.length);
        got.hidden.forEach((h, l) => assert.ok(worst(h, want.hidden[l]) <= TOL, `${want.key} hidden ${l}`));
        assert.deepEqual(got.gelu, { shape: [want.ids.length, 256], n: want.ids.length * 256 });
        assert.ok(got.compute > 0);
      });
    });

    test('generate: logprobs equal score, the prompt cache equals a fresh run, stop strings cut exactly', async () => {
      const r = await inPage(worker, `
        const m = await Model.load(arg.url, opts);
        const greedy = { temperature: 0, maxTokens: 8 };
        const collect = async (input, o) => {
          const it = m.generate(input, { ...greedy, ...o });
          const items = [];
          for await (const t of it) items.push(t);
          return { items, stats: await it.stats };
        };
        const first = await collect(arg.ids, { topLogprobs: 3 });
        const all = [...arg.ids, ...first.items.map((t) => t.token)];
        const score = await m.score(all, { topK: 3 });
        const second = await collect(all, {});
        const fresh = await Model.load(arg.url, opts);
        const it = fresh.generate(all, greedy);
        const freshIds = [];
        for await (const t of it) freshIds.push(t.token);
        await fresh.dispose();
        const texts = first.items.map((t) => t.text);
        let k = 2;
        while (!(texts[k].length >= 2 && texts[k + 1].length >= 2)) k++;
        const stop = texts[k].slice(-2) + texts[k + 1].slice(0, 2);
        const cut = await collect(arg.ids, { stop: [stop] });
        await m.dispose();
        return { first, score: { logprobs: Array.from(score.logprobs), top: score.top }, second, freshIds, texts, stop, cut, k };
      `, { url: F32, ids: REF.prompts[0].ids });
      assert.ok(r.ok, r.message);
      const { first, score, second, freshIds, texts, stop, cut, k } = r.value;
      const p = REF.prompts[0].ids.length;
      first.items.forEach((t, i) => {
        // One token at a time against one batched pass: summation order only.
        assert.ok(Math.abs(t.logprob - score.logprobs[p - 1 + i]) <= 1e-5, `token ${i}`);
        assert.deepEqual(t.top.map((e) => e.token), score.top[p - 1 + i].map((e) => e.token));
        assert.equal(typeof t.top[0].text, 'string');
      });
      assert.equal(first.stats.cachedTokens, 0);
      assert.ok(second.stats.cachedTokens >= p + 8 - 1, `cachedTokens ${second.stats.cachedTokens}`);
      assert.deepEqual(second.items.map((t) => t.token), freshIds, 'a continuation from the cache equals a fresh model');
      const full = texts.join('');
      assert.equal(cut.items.map((t) => t.text).join(''), full.slice(0, full.indexOf(stop)), `stop ${JSON.stringify(stop)}`);
      assert.equal(cut.items.length, k + 1);
      assert.equal(cut.stats.stop, 'stop');
    });

    test('unknown options are refused naming the key; logitBias -Infinity bans', async () => {
      const r = await inPage(worker, `
        const code = async (f) => { try { await f(); return null; } catch (e) { return [e.code, e.message]; } };
        const res = {};
        res.load = await code(() => Model.load(arg.url, { ...opts, ctx: 512 }));
        const m = await Model.load(arg.url, opts);
        res.gen = await code(async () => { for await (const t of m.generate('Hi', { threads: 1 })) {} });
        res.score = await code(() => m.score('Hi', { topk: 2 }));
        res.trace = await code(() => m.trace('Hi', { taps: ['attn'], layers: [0] }));
        res.node = await code(() => m.trace('Hi', { taps: ['l9.nothing'] }));
        const one = async (o) => { for await (const t of m.generate(arg.ids, { temperature: 0, maxTokens: 1, ...o })) return t.token; };
        const plain = await one({});
        res.banned = [plain, await one({ logitBias: { [plain]: -Infinity } })];
        await m.dispose();
        return res;
      `, { url: F32, ids: REF.prompts[0].ids });
      assert.ok(r.ok, r.message);
      const v = r.value;
      assert.equal(v.load[0], 'invalid');
      assert.match(v.load[1], /^Model\.load: unknown option "ctx"/);
      assert.equal(v.gen[0], 'invalid');
      assert.match(v.gen[1], /generation options: unknown option "threads"/);
      assert.equal(v.score[0], 'invalid');
      assert.match(v.score[1], /score options: unknown option "topk"/);
      assert.match(v.trace[1], /trace options: unknown option "layers"/);
      assert.equal(v.node[0], 'invalid');
      assert.match(v.node[1], /no graph node named 'l9\.nothing'/);
      assert.notEqual(v.banned[0], v.banned[1]);
    });
  });
}
