// Model.load(source, { shared: true }): one model in a SharedWorker for every tab of an origin
// (web/shared-worker.js). Several pages of one browser context, as tabs of one profile: one
// SharedWorker and no dedicated worker (CDP's target list), one download, HF's greedy tokens
// in every tab, work from different tabs one at a time, a tab closing or not reading does not
// hold the others, dispose drops one tab's handle and the last one ends the worker.
//   node --test tests/e2e/shared.spec.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { HF, launch, serve } from './helpers.mjs';

const F32 = '/shared-models/tiny-gpt2-f32.gguf';
const PROMPT = HF.prompts[0];
const GREEDY = { maxTokens: PROMPT.greedy_ids.length, temperature: 0 };

let server;
let browser;
before(async () => {
  server = await serve();
  browser = await launch();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

/** `n` pages (tabs) of a new browser context, each with `window.G` (ggweb.js) and `window.run`. */
async function tabs(n) {
  const ctx = await browser.newContext();
  const pages = [];
  for (let i = 0; i < n; i++) {
    const page = await ctx.newPage();
    page.problems = [];
    page.on('pageerror', (e) => page.problems.push(`pageerror: ${e.message}`));
    await page.goto(`${server.url}e2e/harness.html`);
    await page.evaluate(async () => {
      window.G = await import('/ggweb.js');
      window.run = async (f) => {
        try {
          return { ok: true, value: await f() };
        } catch (e) {
          return { ok: false, code: e?.code, message: String(e?.message) };
        }
      };
      // Greedy tokens of the tab's model (window.M).
      window.greedy = async (prompt, opts) => {
        const ids = [];
        for await (const t of window.M.generate(prompt, opts)) ids.push(t.token);
        return ids;
      };
    });
    pages.push(page);
  }
  return { ctx, pages };
}

/** Loads `url` shared in `page` as window.M; returns run()'s { ok, value: info } or the error. */
const loadShared = (page, url, opts = {}) => page.evaluate(({ url, opts }) => window.run(async () => {
  window.M = await window.G.Model.load(url, { ...opts, shared: true });
  return window.M.info();
}), { url, opts });

/** Workers alive in the browser: { shared: SharedWorker URLs, dedicated: dedicated worker URLs }. */
async function workers() {
  const cdp = await browser.newBrowserCDPSession();
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    const of = (type) => targetInfos.filter((t) => t.type === type).map((t) => t.url.replace(/^.*\//, ''));
    return { shared: of('shared_worker'), dedicated: of('worker') };
  } finally {
    await cdp.detach();
  }
}

/** Waits (up to `ms`) until no SharedWorker is alive; returns those left. */
async function sharedGone(ms = 5000) {
  const t0 = Date.now();
  let w = await workers();
  while (w.shared.length && Date.now() - t0 < ms) {
    await new Promise((r) => setTimeout(r, 50));
    w = await workers();
  }
  return w.shared;
}

const tally = async (key) => (await fetch(`${server.url}__test/tally/${key}`)).json();

describe('shared: true', () => {
  test('three tabs: one SharedWorker, no dedicated worker, one download, HF greedy tokens in each, equal to a private model', async () => {
    const { ctx, pages } = await tabs(3);
    const url = `/__test/counted/shared-three${F32}`;
    const infos = await Promise.all(pages.map((p) => loadShared(p, url)));
    for (const i of infos) assert.ok(i.ok, JSON.stringify(i));
    // The first tab to reach the worker loaded; the two others joined its load.
    assert.deepEqual(infos.map((i) => i.value.load.shared.joined).sort(), [false, true, true]);
    const counted = await tally('shared-three');
    assert.equal(counted.requests, 1, JSON.stringify(counted));
    assert.equal(counted.bytes, infos[0].value.load.bytes);
    assert.deepEqual(await workers(), { shared: ['shared-worker.js'], dedicated: [] });
    for (const i of infos) {
      assert.equal(i.value.load.worker, true);
      assert.equal(i.value.threads.n, 1);
      assert.match(i.value.threads.reason, /shared worker \(shared: true\)/);
    }
    const ids = await Promise.all(pages.map((p) => p.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY])));
    for (const got of ids) assert.deepEqual(got, PROMPT.greedy_ids);
    // A private model (its own dedicated worker) gives the same tokens.
    const mine = await pages[0].evaluate(async ([url, t, o]) => {
      const m = await window.G.Model.load(url);
      const out = [];
      for await (const x of m.generate(t, o)) out.push(x.token);
      await m.dispose();
      return out;
    }, [F32, PROMPT.text, GREEDY]);
    assert.deepEqual(mine, PROMPT.greedy_ids);
    for (const p of pages) assert.deepEqual(p.problems, []);
    await ctx.close();
    assert.deepEqual(await sharedGone(), []);
  });

  test("tabs' calls run one at a time in arrival order; within a tab, busy by its own rule", async () => {
    const { ctx, pages: [a, b] } = await tabs(2);
    assert.ok((await loadShared(a, F32)).ok);
    assert.ok((await loadShared(b, F32)).ok);
    // Tab a's generation holds the model (its reader has taken one token and waits).
    await a.evaluate(([t, o]) => {
      window.it = window.M.generate(t, o)[Symbol.asyncIterator]();
      return window.it.next();
    }, [PROMPT.text, GREEDY]);
    // Tab b's calls wait for it (not 'busy'), in the order b made them.
    await b.evaluate(() => {
      window.order = [];
      window.p1 = window.M.logits([15496]).then((v) => { window.order.push('logits'); return v.length; });
      window.p2 = window.M.tokenize('Hello').then((v) => { window.order.push('tokenize'); return [...v]; });
    });
    await new Promise((r) => setTimeout(r, 400));
    assert.deepEqual(await b.evaluate(() => window.order), []);
    // In tab a, a call during its own generation is 'busy', as on a private model.
    const busy = await a.evaluate(() => window.run(() => window.M.logits([15496])));
    assert.equal(busy.code, 'busy', JSON.stringify(busy));
    const rest = await a.evaluate(async () => {
      const ids = [];
      for (let r = await window.it.next(); !r.done; r = await window.it.next()) ids.push(r.value.token);
      return ids;
    });
    assert.deepEqual(rest, PROMPT.greedy_ids.slice(1));
    const got = await b.evaluate(async () => [await window.p1, await window.p2, window.order]);
    assert.deepEqual(got, [HF.n_vocab, [15496], ['logits', 'tokenize']]);
    await ctx.close();
    assert.deepEqual(await sharedGone(), []);
  });

  test('a tab closing mid-generation does not disturb the others (its lock tells the worker)', async () => {
    const { ctx, pages: [a, b, c] } = await tabs(3);
    for (const p of [a, b, c]) assert.ok((await loadShared(p, F32)).ok);
    // Tab c generates and stops reading after one token: its run holds the model.
    await c.evaluate(([t, o]) => window.M.generate(t, o)[Symbol.asyncIterator]().next(), [PROMPT.text, { ...GREEDY, maxTokens: 200 }]);
    const pa = a.evaluate(async ([t, o]) => {
      const t0 = Date.now();
      return { ids: await window.greedy(t, o), at: Date.now() - t0 };
    }, [PROMPT.text, GREEDY]);
    await new Promise((r) => setTimeout(r, 300));
    const closed = Date.now();
    await c.close();
    const got = await pa;
    assert.deepEqual(got.ids, PROMPT.greedy_ids);
    // Well before stallTimeoutMs (30 s by default) would have stopped c's run.
    assert.ok(Date.now() - closed < 10000, `tab a waited ${Date.now() - closed} ms after tab c closed`);
    assert.deepEqual(await b.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]), PROMPT.greedy_ids);
    assert.deepEqual((await workers()).shared, ['shared-worker.js']);
    await ctx.close();
    assert.deepEqual(await sharedGone(), []);
  });

  test('a generation nobody reads for stallTimeoutMs stops (timeout) so other tabs go on', async () => {
    const { ctx, pages: [a, b] } = await tabs(2);
    assert.ok((await loadShared(a, F32, { stallTimeoutMs: 1000 })).ok);
    assert.ok((await loadShared(b, F32)).ok);
    await a.evaluate(([t, o]) => {
      window.it = window.M.generate(t, o)[Symbol.asyncIterator]();
      return window.it.next();
    }, [PROMPT.text, { ...GREEDY, maxTokens: 200 }]);
    const t0 = Date.now();
    assert.deepEqual(await b.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]), PROMPT.greedy_ids);
    const waited = Date.now() - t0;
    assert.ok(waited >= 900 && waited < 10000, `tab b waited ${waited} ms`);
    // Tab a reads what was sent before the stop (GENERATE_AHEAD at most), then the error.
    const late = await a.evaluate(() => window.run(async () => {
      let n = 0;
      for (let r = await window.it.next(); !r.done; r = await window.it.next()) n++;
      return n;
    }));
    assert.equal(late.code, 'timeout', JSON.stringify(late));
    assert.match(late.message, /nobody read one for 1000 ms/);
    // Tab a's model is still usable.
    assert.deepEqual(await a.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]), PROMPT.greedy_ids);
    await ctx.close();
    assert.deepEqual(await sharedGone(), []);
  });

  test("one tab's dispose drops only its handle; the last one ends the worker", async () => {
    const { ctx, pages: [a, b] } = await tabs(2);
    assert.ok((await loadShared(a, F32)).ok);
    assert.ok((await loadShared(b, F32)).ok);
    const gone = await a.evaluate(async () => {
      await window.M.dispose();
      return window.run(() => window.M.tokenize('Hello'));
    });
    assert.equal(gone.code, 'disposed');
    assert.deepEqual((await workers()).shared, ['shared-worker.js']);
    assert.deepEqual(await b.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]), PROMPT.greedy_ids);
    // The last handle's dispose is answered (not left to the page's 1 s limit) and ends the worker.
    const ms = await b.evaluate(async () => {
      const t0 = performance.now();
      await window.M.dispose();
      return performance.now() - t0;
    });
    assert.ok(ms < 900, `the last dispose took ${ms} ms`);
    assert.deepEqual(await sharedGone(), []);
    // A later shared load starts a new worker, which loads again.
    const again = await loadShared(a, F32);
    assert.equal(again.value?.load.shared.joined, false, JSON.stringify(again));
    assert.deepEqual(await a.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]), PROMPT.greedy_ids);
    await a.evaluate(() => window.M.dispose());
    assert.deepEqual(await sharedGone(), []);
    await ctx.close();
  });

  test('typed errors: no SharedWorker → worker; worker: false, a bytes source or lora with shared → invalid; loads work afterwards', async () => {
    const { ctx, pages: [a] } = await tabs(1);
    const errs = await a.evaluate(async (url) => {
      const { Model } = window.G;
      const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
      const out = {
        noWorker: await window.run(() => Model.load(url, { shared: true, worker: false })),
        bytes: await window.run(() => Model.load(bytes, { shared: true })),
        lora: await window.run(() => Model.load(url, { shared: true, lora: new Uint8Array(8) })),
        notBool: await window.run(() => Model.load(url, { shared: 'yes' })),
      };
      const sw = window.SharedWorker;
      delete window.SharedWorker;
      out.noShared = await window.run(() => Model.load(url, { shared: true }));
      window.SharedWorker = sw;
      return out;
    }, F32);
    for (const k of ['noWorker', 'bytes', 'lora', 'notBool']) assert.equal(errs[k].code, 'invalid', `${k}: ${JSON.stringify(errs[k])}`);
    assert.match(errs.bytes.message, /needs a URL source/);
    assert.equal(errs.noShared.code, 'worker', JSON.stringify(errs.noShared));
    assert.match(errs.noShared.message, /SharedWorker/);
    assert.ok((await loadShared(a, F32)).ok);
    assert.deepEqual(await a.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]), PROMPT.greedy_ids);
    await ctx.close();
    assert.deepEqual(await sharedGone(), []);
  });
});
