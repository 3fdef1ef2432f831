// Firefox (Debian's firefox-esr, headless, puppeteer-core over WebDriver BiDi) with
// Model.load(source, { shared: true }): two tabs of one profile share one model
// (web/shared-worker.js): one request for the file, HF's greedy tokens in both, one thread
// and why, a tab closing mid-generation does not hold the other (its Web Lock is released),
// dispose drops one handle. Chromium's side, with CDP's target list: tests/e2e/shared.spec.mjs.
//   node --test tests/engines/firefox-shared.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { HF, MODELS_DIR, serve } from '../e2e/helpers.mjs';
import { F32 } from './checks.mjs';
import { launchFirefox } from './drivers.mjs';

assert.ok(MODELS_DIR, 'the shared models (tiny-gpt2-f32.gguf) are needed: set GGWEB_MODELS_DIR');
const PROMPT = HF.prompts[0];
const GREEDY = { maxTokens: PROMPT.greedy_ids.length, temperature: 0 };

let server;
let firefox;
before(async () => {
  server = await serve();
  firefox = await launchFirefox();
  console.log(`browser: ${firefox.version}`);
});
after(async () => {
  await firefox?.close();
  await server?.close();
});

async function tab() {
  const page = await firefox.browser.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`pageerror: ${e.message}`));
  await page.goto(`${server.url}e2e/harness.html`);
  await page.evaluate(async () => {
    window.G = await import('/ggweb.js');
    window.greedy = async (prompt, opts) => {
      const ids = [];
      for await (const t of window.M.generate(prompt, opts)) ids.push(t.token);
      return ids;
    };
  });
  return page;
}

const load = (page, url) => page.evaluate(async (url) => {
  try {
    window.M = await window.G.Model.load(url, { shared: true });
    const i = window.M.info();
    return { shared: i.load.shared, threads: i.threads };
  } catch (e) {
    return { code: e.code, message: e.message };
  }
}, url);

test('two Firefox tabs share one model: one download, HF tokens, a closed tab does not hold the other, dispose', async () => {
  const [a, b] = [await tab(), await tab()];
  const url = `/__test/counted/ff-shared${F32}`;
  const ia = await load(a, url);
  const ib = await load(b, url);
  assert.deepEqual([ia.shared, ib.shared], [{ joined: false, tabs: 1 }, { joined: true, tabs: 2 }], JSON.stringify([ia, ib]));
  const counted = await (await fetch(`${server.url}__test/tally/ff-shared`)).json();
  assert.equal(counted.requests, 1, JSON.stringify(counted));
  for (const i of [ia, ib]) {
    assert.equal(i.threads.n, 1);
    assert.match(i.threads.reason, /shared worker \(shared: true\)/);
  }
  for (const p of [a, b]) assert.deepEqual(await p.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]), PROMPT.greedy_ids);
  // Tab b holds the model with a generation it stopped reading, then closes.
  await b.evaluate(([t, o]) => window.M.generate(t, o)[Symbol.asyncIterator]().next(), [PROMPT.text, { ...GREEDY, maxTokens: 200 }]);
  const pa = a.evaluate(([t, o]) => window.greedy(t, o), [PROMPT.text, GREEDY]);
  await new Promise((r) => setTimeout(r, 300));
  const closed = Date.now();
  await b.close();
  assert.deepEqual(await pa, PROMPT.greedy_ids);
  assert.ok(Date.now() - closed < 10000, `tab a waited ${Date.now() - closed} ms after tab b closed (stallTimeoutMs is 30 s)`);
  // The last tab's dispose ends the worker: a new load starts again (joined false).
  const again = await a.evaluate(async (url) => {
    await window.M.dispose();
    const m = await window.G.Model.load(url, { shared: true });
    const s = m.info().load.shared;
    await m.dispose();
    return s;
  }, F32);
  assert.deepEqual(again, { joined: false, tabs: 1 });
  assert.deepEqual(a.problems, []);
  await a.close();
});
