// The demo's "Fine-tune" panel (web/demo-tune.js, issue 39 item 5) in headless Chromium with
// the real wasm module and the tiny test model (tests/fixtures/tiny-f16.gguf): a dropped text
// file fills the box; training draws a point per step whose losses are model.train's for the
// same options called directly in the page; the original's greedy text is Hugging Face's on
// this file (tests/fixtures/tiny.ref.json) and the tuned one differs; the downloaded adapter
// (Model.load(base, { lora })) or GGUF (Model.load(bytes)) loads and gives the tuned text's
// tokens; Stop ends a run after the step in progress; bad input is a typed error in the panel.
//   node --test tests/e2e/demo-tune.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ARTIFACTS, ROOT, openPage, useServerAndBrowser } from './helpers.mjs';

const web = useServerAndBrowser();
const ref = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny.ref.json`, 'utf8'));
const PROMPT = ref.prompts[0].text;
const GREEDY = ref.dtypes.f16.prompts[0];
const TEXT = 'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of ' +
  'foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it was ' +
  'the season of Darkness, it was the spring of hope, it was the winter of despair.\n';

async function loadTiny(worker) {
  const { page, problems } = await openPage(web.browser, web.server.url);
  await page.waitForSelector('body[data-ready="1"]');
  await page.check('input[name="source"][value="tiny"]');
  if (!worker) await page.uncheck('#use-worker');
  assert.equal(await page.isDisabled('#tune-btn'), true, 'no model: Train is disabled');
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));
  assert.equal(await page.isDisabled('#tune-btn'), false);
  return { page, problems };
}

/** Presses Train and waits for the run's end: { stop, losses }. */
async function trainInPanel(page) {
  await page.click('#tune-btn');
  await page.waitForFunction(() => !!document.getElementById('tune-stats').dataset.stop ||
    !document.getElementById('tune-error').hidden);
  assert.equal(await page.isHidden('#tune-error'), true, `error: ${await page.textContent('#tune-error')}`);
  return page.evaluate(() => ({
    stop: document.getElementById('tune-stats').dataset.stop,
    losses: JSON.parse(document.getElementById('tune-curve').dataset.losses),
    points: [...document.querySelectorAll('#tune-curve circle')].map((c) => Number(c.dataset.loss)),
  }));
}

/** model.train with `opts` on the tiny model loaded afresh in the page (same worker setting): its losses. */
const directLosses = (page, opts, worker) => page.evaluate(async ({ text, opts, worker }) => {
  const { Model } = await import(new URL('ggweb.js', document.baseURI).href);
  const m = await Model.load(new URL('../tests/fixtures/tiny-f16.gguf', document.baseURI).href, { worker });
  const out = [];
  for await (const { loss } of m.train(text, opts)) out.push(loss);
  await m.dispose();
  return out;
}, { text: TEXT.repeat(4), opts, worker });

/** Presses "Generate (greedy)": { original, tuned } as { text, tokens }. */
async function compareInPanel(page) {
  await page.fill('#tune-prompt', PROMPT);
  await page.fill('#tune-max', String(GREEDY.greedy_ids.length));
  await page.click('#tune-gen-btn');
  await page.waitForFunction(() => !!document.getElementById('tune-tuned').dataset.tokens &&
    !document.getElementById('tune-gen-btn').disabled);
  const box = (id) => page.$eval(`#${id}`, (b) => ({ text: b.textContent, tokens: b.dataset.tokens.split(',').map(Number) }));
  return { original: await box('tune-original'), tuned: await box('tune-tuned') };
}

/** Presses Download; fetches the link's bytes and loads them (an adapter: on the base): the greedy tokens. */
async function downloadAndLoad(page, worker) {
  await page.click('#tune-save-btn');
  await page.waitForSelector('#tune-link:not([hidden])');
  return page.evaluate(async ({ prompt, n, worker }) => {
    const { Model } = await import(new URL('ggweb.js', document.baseURI).href);
    const link = document.getElementById('tune-link');
    const bytes = new Uint8Array(await (await fetch(link.href)).arrayBuffer());
    const base = new URL('../tests/fixtures/tiny-f16.gguf', document.baseURI).href;
    const m = link.dataset.kind === 'adapter'
      ? await Model.load(base, { lora: bytes, worker })
      : await Model.load(bytes, { worker });
    const tokens = [];
    for await (const { token } of m.generate(prompt, { maxTokens: n, temperature: 0 })) tokens.push(token);
    await m.dispose();
    return { kind: link.dataset.kind, name: link.download, size: bytes.length, shown: Number(link.dataset.bytes),
      magic: String.fromCharCode(...bytes.subarray(0, 4)), tokens };
  }, { prompt: PROMPT, n: GREEDY.greedy_ids.length, worker });
}

test('fine-tune panel, LoRA in a Web Worker: a dropped text, a loss point per step equal to model.train\'s, original (HF\'s greedy) beside tuned, the adapter loads', async () => {
  const { page, problems } = await loadTiny(true);

  // Typed errors in the panel, the model usable afterwards.
  await page.fill('#tune-text', 'Too short.');
  await page.click('#tune-btn');
  await page.waitForSelector('#tune-error:not([hidden])');
  assert.equal(await page.getAttribute('#tune-error', 'data-code'), 'invalid');
  assert.match(await page.textContent('#tune-error'), /^invalid: .*data is empty/);
  await page.fill('#tune-text', TEXT.repeat(4));
  await page.fill('#tune-rank', '33');
  await page.click('#tune-btn');
  await page.waitForFunction(() => /lora\.rank/.test(document.getElementById('tune-error').textContent));
  assert.match(await page.textContent('#tune-error'), /^invalid: .*lora\.rank must be from 1 to the model's n_embd \(32\), got 33/);
  assert.equal(await page.isHidden('#tune-result'), true, 'nothing trained: no comparison yet');

  // A text file dropped on the box fills it (and is not taken for a model).
  await page.fill('#tune-text', '');
  await page.evaluate((text) => {
    const dt = new DataTransfer();
    dt.items.add(new File([text], 'dickens.txt', { type: 'text/plain' }));
    document.getElementById('tune-text').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, TEXT.repeat(4));
  await page.waitForFunction((n) => document.getElementById('tune-text').value.length === n, TEXT.length * 4);
  assert.equal(await page.isChecked('input[name="source"][value="tiny"]'), true, 'the page did not take the text for a model');

  await page.selectOption('#tune-mode', 'lora');
  await page.fill('#tune-rank', '4');
  await page.fill('#tune-steps', '6');
  await page.fill('#tune-lr', '0.02');
  await page.fill('#tune-seq-len', '32');
  const run = await trainInPanel(page);
  assert.equal(run.stop, 'steps');
  assert.equal(run.points.length, 6, 'a point per step');
  assert.deepEqual(run.points, run.losses);
  const want = await directLosses(page, { steps: 6, seqLen: 32, seed: 1, optimizer: { type: 'adamw', lr: 0.02 },
    lora: { rank: 4, targets: ['attn_qkv', 'attn_output', 'ffn_up', 'ffn_down'] } }, true);
  assert.deepEqual(run.losses, want, 'the panel\'s losses are model.train\'s');
  assert.ok(want[5] < want[0], `the loss falls: ${want}`);
  assert.match(await page.textContent('#tune-stats'), /^done: 6 steps, 192 tokens, last loss \d+\.\d{4}$/);

  const gen = await compareInPanel(page);
  assert.equal(gen.original.text, GREEDY.greedy_text, 'the original is the untouched file: HF\'s greedy text');
  assert.deepEqual(gen.original.tokens, GREEDY.greedy_ids);
  assert.notDeepEqual(gen.tuned.tokens, gen.original.tokens, 'the adapter changed the greedy text');

  const dl = await downloadAndLoad(page, true);
  assert.equal(dl.kind, 'adapter');
  assert.equal(dl.name, 'lora-adapter-f32.gguf');
  assert.equal(dl.magic, 'GGUF');
  assert.equal(dl.size, dl.shown);
  assert.deepEqual(dl.tokens, gen.tuned.tokens, 'the downloaded adapter on the base gives the tuned text');
  await page.setViewportSize({ width: 1100, height: 900 });
  await page.screenshot({ path: `${ARTIFACTS}demo-tune-lora.png`, fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

test('fine-tune panel, every weight on the page thread: Stop ends a run after a step; the downloaded GGUF loads with the tuned text', async () => {
  const { page, problems } = await loadTiny(false);
  await page.fill('#tune-text', TEXT.repeat(4));
  await page.selectOption('#tune-mode', 'full');
  assert.equal(await page.isDisabled('#tune-rank'), true, 'rank is LoRA\'s');
  await page.fill('#tune-seq-len', '32');
  await page.fill('#tune-lr', '0.01');

  // Stop, pressed from the page as soon as the second point is drawn.
  await page.fill('#tune-steps', '500');
  await page.evaluate(() => {
    const curve = document.getElementById('tune-curve');
    const obs = new MutationObserver(() => {
      if (curve.querySelectorAll('circle').length >= 2) {
        obs.disconnect();
        document.getElementById('tune-stop-btn').click();
      }
    });
    obs.observe(curve, { childList: true });
  });
  const stopped = await trainInPanel(page);
  assert.equal(stopped.stop, 'cancelled');
  assert.ok(stopped.losses.length >= 2 && stopped.losses.length < 500, `${stopped.losses.length} steps`);
  assert.match(await page.textContent('#tune-stats'), new RegExp(`^stopped: ${stopped.losses.length} steps, `));

  // A second run of 4 steps from the weights the first left: compared and downloaded.
  await page.fill('#tune-steps', '4');
  const run = await trainInPanel(page);
  assert.equal(run.stop, 'steps');
  assert.equal(run.points.length, 4);
  const gen = await compareInPanel(page);
  assert.equal(gen.original.text, GREEDY.greedy_text);
  assert.notDeepEqual(gen.tuned.tokens, gen.original.tokens, 'training changed the greedy text');
  const dl = await downloadAndLoad(page, false);
  assert.equal(dl.kind, 'model');
  assert.equal(dl.name, 'fine-tuned-f32.gguf');
  assert.equal(dl.magic, 'GGUF');
  assert.deepEqual(dl.tokens, gen.tuned.tokens, 'the downloaded GGUF gives the tuned text');
  // The main Generate panel runs the tuned model too.
  await page.fill('#prompt', PROMPT);
  await page.fill('#max-tokens', String(GREEDY.greedy_ids.length));
  await page.fill('#temperature', '0');
  await page.click('#gen-btn');
  await page.waitForFunction(() =>
    !document.getElementById('gen-btn').disabled && /tokens\/s/.test(document.getElementById('gen-stats').textContent));
  assert.equal(await page.textContent('#out-text'), gen.tuned.text);
  assert.deepEqual(problems, []);
  await page.close();
});
