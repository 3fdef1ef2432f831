// The demo page (web/index.html) in headless Chromium: it renders with the real wasm
// module, shows no error, its controls match what the browser has; with the real module,
// it loads a tiny GPT-2 by URL and generates Hugging Face's greedy text, stops, cancels a
// load and recovers; and, with the stand-in core (?core=/e2e/fake-core.js), fault injection
// through the UI: progress, errors in words, dropped connections, drag and drop. The
// interpretability panels (web/demo-inside.js) against the API called directly in the page
// (window.ggwebDemo.model): attention axes, logit lens, head ablation, patching, steering.
// Screenshots go to tests/artifacts/.
//   node --test tests/e2e/demo.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { ARTIFACTS, HF, MODELS_DIR, ROOT, makeFakeModel, openPage, useServerAndBrowser, writeHugeCtx } from './helpers.mjs';

const fake = makeFakeModel();
const web = useServerAndBrowser();

// The tiny fixture model may be absent from a checkout; its HEAD probe 404 is expected then.
const real = (problems) => problems.filter((p) => !/tests\/fixtures\/tiny-f16\.gguf$/.test(p));

/** Counts distinct colours in a PNG by decoding it in the page (no image library needed). */
async function pngStats(page, png) {
  return page.evaluate(async (b64) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const c = new OffscreenCanvas(img.width, img.height);
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, img.width, img.height).data;
    const colours = new Set();
    let dark = 0;
    for (let i = 0; i < d.length; i += 4) {
      colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      if (d[i] + d[i + 1] + d[i + 2] < 200) dark++;
    }
    return { width: img.width, height: img.height, colours: colours.size, dark };
  }, png.toString('base64'));
}

test('the demo renders with the real wasm module, without errors, and is not blank', async () => {
  const { page, problems } = await openPage(web.browser, web.server.url);
  await page.waitForSelector('body[data-ready="1"]');
  assert.equal(await page.title(), 'ggweb — GPT-2 in the browser');
  assert.equal(await page.textContent('h1'), 'ggweb');
  assert.match(await page.textContent('#version'), /^v\d+\.\d+\.\d+$/);
  assert.equal(await page.isHidden('#error'), true, `error shown: ${await page.textContent('#error')}`);
  assert.equal(await page.inputValue('#model-url'), 'https://huggingface.co/QuantFactory/gpt2-GGUF/resolve/main/gpt2.Q8_0.gguf');
  assert.equal(await page.isDisabled('#gen-btn'), true, 'no model: Generate is disabled');
  assert.equal(await page.evaluate(() => crossOriginIsolated), true, 'COOP/COEP headers make the page cross-origin isolated');

  // GPU controls follow navigator.gpu (headless Chromium with --enable-unsafe-webgpu has it).
  const hasGpu = await page.evaluate(() => !!navigator.gpu);
  assert.equal(await page.isDisabled('#backend option[value="webgpu"]'), !hasGpu);
  assert.equal(await page.isDisabled('#gpu-layers'), true, 'CPU backend: slider disabled');
  if (hasGpu) {
    await page.selectOption('#backend', 'webgpu');
    assert.equal(await page.isDisabled('#gpu-layers'), false);
    await page.fill('#gpu-layers', '5');
    assert.equal(await page.textContent('#gpu-layers-out'), '5');
    await page.selectOption('#backend', 'cpu');
  } else {
    assert.match(await page.textContent('#gpu-note'), /WebGPU is not available/);
  }

  await page.setViewportSize({ width: 1100, height: 900 });
  const png = await page.screenshot({ path: `${ARTIFACTS}demo.png`, fullPage: true });
  const s = await pngStats(page, png);
  assert.ok(s.width >= 1100 && s.height >= 700, `screenshot ${s.width}x${s.height}`);
  assert.ok(s.colours > 20, `screenshot has only ${s.colours} colours: blank?`);
  assert.ok(s.dark > 2000, `only ${s.dark} dark pixels: no text rendered?`);
  assert.deepEqual(real(problems), []);
  await page.close();
});

test('with the real wasm: load the tiny GPT-2 by URL, generate HF\'s greedy text, stop, cancel a load, recover', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
  const [hello] = HF.prompts;
  const model = '/shared-models/tiny-gpt2-f16.gguf';
  const { page, problems } = await openPage(web.browser, `${web.server.url}?model=${model}`);
  await page.waitForSelector('body[data-ready="1"]');
  const status = () => page.textContent('#load-status');
  const loaded = () => page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));
  const generated = () => page.waitForFunction(() =>
    !document.getElementById('gen-btn').disabled && /tokens\/s/.test(document.getElementById('gen-stats').textContent));

  await page.click('#load-btn');
  await loaded();
  assert.match(await status(), /^Loaded tiny-gpt2-f16\.gguf: 14\.2 MiB in \d+\.\d s, CPU, in a Web Worker\.$/);
  const info = await page.textContent('#info-list');
  assert.match(info, /architecturegpt2/);
  assert.match(info, /hyperparametersnVocab=50257 nCtx=128 nCtxTrain=128 nEmbd=64 nHead=4 nLayer=2 nFf=256 nBatch=32 eps=0\.00001memory/);
  assert.match(info, /memory planweights 12\.5 MiB · kv 128\.0 KiB · compute [\d.]+ MiB · total [\d.]+ MiB/);

  // Greedy: the text HF's GPT-2 gives for this prompt.
  await page.fill('#prompt', hello.text);
  await page.fill('#max-tokens', '20');
  await page.fill('#temperature', '0');
  await page.click('#gen-btn');
  await generated();
  assert.equal(await page.textContent('#out-prompt'), hello.text);
  assert.equal(await page.textContent('#out-text'), hello.greedy_text);
  assert.match(await page.textContent('#gen-stats'), /^20 tokens · \d+\.\d tokens\/s · first token after \d+ ms$/);
  await page.setViewportSize({ width: 1100, height: 900 });
  const png = await page.screenshot({ path: `${ARTIFACTS}demo-real-model.png`, fullPage: true });
  const s = await pngStats(page, png);
  assert.ok(s.colours > 20 && s.dark > 2000, `screenshot: ${JSON.stringify(s)}`);

  // Stop: pressed from the page as soon as 3 tokens are shown.
  await page.fill('#max-tokens', '100');
  await page.evaluate(() => {
    const stats = document.getElementById('gen-stats');
    const obs = new MutationObserver(() => {
      if (/^3 tokens/.test(stats.textContent)) {
        obs.disconnect();
        document.getElementById('stop-btn').click();
      }
    });
    obs.observe(stats, { childList: true, characterData: true, subtree: true });
  });
  await page.click('#gen-btn');
  await page.waitForFunction(() => / · stopped$/.test(document.getElementById('gen-stats').textContent));
  const partial = await page.textContent('#out-text');
  assert.ok(partial.length > 0 && hello.greedy_text.startsWith(partial), `stopped output ${JSON.stringify(partial)}`);
  // A token already delivered when Stop was pressed may still be shown.
  assert.match(await page.textContent('#gen-stats'), /^[34] tokens · /);
  assert.equal(await page.isHidden('#error'), true);

  // Cancel a slow load (it replaces the loaded model), then load again and generate again.
  await page.fill('#model-url', `/__test/slow/30${model}`);
  await page.click('#load-btn');
  await page.waitForFunction(() => /downloading$/.test(document.getElementById('load-status').textContent));
  await page.click('#cancel-load-btn');
  await page.waitForFunction(() => document.getElementById('load-status').textContent === 'Loading cancelled.');
  assert.equal(await page.isDisabled('#gen-btn'), true);
  await page.fill('#model-url', model);
  await page.click('#load-btn');
  await loaded();
  await page.fill('#max-tokens', '20');
  await page.click('#gen-btn');
  await generated();
  assert.equal(await page.textContent('#out-text'), hello.greedy_text);
  await page.screenshot({ path: `${ARTIFACTS}demo-real-model-again.png`, fullPage: true });
  assert.deepEqual(real(problems), []);
  await page.close();
});

test('the GPU-layers slider splits the model: the page shows the split from info()', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
  const { page, problems } = await openPage(web.browser, `${web.server.url}?model=/shared-models/tiny-gpt2-f32.gguf`);
  await page.waitForSelector('body[data-ready="1"]');
  assert.equal(await page.evaluate(() => !!navigator.gpu), true, 'headless Chromium with --enable-unsafe-webgpu');
  await page.selectOption('#backend', 'webgpu');
  await page.fill('#n-ctx', '16');
  // Each load replaces the last; the status line changes from "Loaded" only when it is done.
  const load = async (layers) => {
    await page.fill('#gpu-layers', String(layers));
    await page.evaluate(() => { document.getElementById('load-status').textContent = ''; });
    await page.click('#load-btn');
    await page.waitForFunction(() => /^Loaded |failed/.test(document.getElementById('load-status').textContent));
    assert.equal(await page.isHidden('#error'), true, `error shown: ${await page.textContent('#error')}`);
    return page.textContent('dd[data-key="split"]');
  };
  // n_embd 64, n_ctx 16: a layer's KV cache is 2 x 64 x 16 x 4 B = 8 KiB.
  assert.match(await load(1), /^1 of 2 layers on WebGPU · 2 splits · 3 copies per token \(516 B\) · WebGPU: weights 12\.5 MiB, KV 8\.0 KiB, compute [\d.]+ MiB · CPU: weights 12\.5 MiB, KV 8\.0 KiB, compute [\d.]+ KiB$/);
  assert.equal(await page.textContent('#gpu-layers-out'), '1');
  assert.match(await page.textContent('#load-status'), /, WEBGPU, in a Web Worker\.$/);
  assert.match(await load(0), /^0 of 2 layers on WebGPU · 1 split · 0 copies per token \(0 B\) · WebGPU: weights 0 B, KV 0 B, compute 0 B · CPU: weights 25\.0 MiB, KV 16\.0 KiB, compute [\d.]+ MiB$/);
  // The slider's end is "all": everything on the GPU, the token ids, positions and KQ mask
  // copied up (the CPU's compute buffer holds those inputs: 2 x 64 B and the mask's 16 x 16 x 4 B).
  const max = await page.getAttribute('#gpu-layers', 'max');
  assert.match(await load(max), /^2 of 2 layers on WebGPU \(embeddings too\) · 1 split · 3 copies per token \(12 B\) · WebGPU: weights 25\.0 MiB, KV 16\.0 KiB, compute [\d.]+ MiB · CPU: weights 0 B, KV 0 B, compute 1\.1 KiB$/);
  assert.equal(await page.textContent('#gpu-layers-out'), 'all');
  assert.deepEqual(real(problems), []);
  await page.close();
});

test('the offline "tiny test model" (tests/fixtures/tiny-f16.gguf) gives the fixture\'s greedy text', async () => {
  // tests/fixtures/tiny.ref.json (make_fixtures.py): Hugging Face on this GGUF's own weights.
  const ref = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny.ref.json`, 'utf8'));
  const want = ref.dtypes.f16.prompts[0];
  const text = ref.prompts[0].text;
  const { page, problems } = await openPage(web.browser, web.server.url);
  await page.waitForSelector('body[data-ready="1"]');
  assert.match(await page.textContent('#tiny-status'), /^\(7\.9 MiB, served by this page's server\)$/);
  await page.check('input[name="source"][value="tiny"]');
  await page.uncheck('#use-worker');
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));
  assert.match(await page.textContent('#load-status'), /^Loaded tiny test model: 7\.9 MiB in \d+\.\d s, CPU\.$/);
  assert.match(await page.textContent('#info-list'), /nCtx=256 nCtxTrain=256 nEmbd=32 nHead=4 nLayer=3 nFf=128/);
  await page.fill('#prompt', text);
  await page.fill('#max-tokens', String(want.greedy_ids.length));
  await page.fill('#temperature', '0');
  await page.click('#gen-btn');
  await page.waitForFunction(() =>
    !document.getElementById('gen-btn').disabled && /tokens\/s/.test(document.getElementById('gen-stats').textContent));
  assert.equal(await page.textContent('#out-text'), want.greedy_text);
  assert.match(await page.textContent('#gen-stats'), new RegExp(`^${want.greedy_ids.length} tokens · `));
  await page.screenshot({ path: `${ARTIFACTS}demo-tiny-fixture.png`, fullPage: true });
  assert.deepEqual(problems, []);
  await page.close();
});

async function fakePage() {
  const r = await openPage(web.browser, `${web.server.url}?core=/e2e/fake-core.js&model=${fake.url}`);
  await r.page.waitForSelector('body[data-ready="1"]');
  return r;
}

test('UI flow: load with progress and info, stream a generation, stop one', async () => {
  const { page, problems } = await fakePage();
  assert.equal(await page.textContent('#version'), 'vfake');
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));
  assert.equal(await page.evaluate(() => document.getElementById('load-progress').value), 1);
  assert.match(await page.textContent('#load-status'), /^Loaded fake-model\.gguf: 3\.0 MiB in \d+\.\d s, CPU, in a Web Worker\.$/);
  assert.equal(await page.isVisible('#model-info'), true);
  assert.match(await page.textContent('#info-list'), /architecturefake/);
  assert.equal(await page.isDisabled('#gen-btn'), false);

  await page.fill('#prompt', 'Once');
  await page.fill('#max-tokens', '5');
  await page.click('#gen-btn');
  await page.waitForFunction(() => document.getElementById('gen-btn').disabled === false && /tokens\/s/.test(document.getElementById('gen-stats').textContent));
  assert.equal(await page.textContent('#out-prompt'), 'Once');
  assert.equal(await page.textContent('#out-text'), 'abcde');
  assert.match(await page.textContent('#gen-stats'), /^5 tokens · \d+\.\d tokens\/s · first token after \d+ ms$/);

  // "slow…" prompts take 20 ms a step in the stand-in: stop after a few tokens.
  await page.fill('#prompt', 'slow and steady');
  await page.fill('#max-tokens', '500');
  await page.click('#gen-btn');
  await page.waitForFunction(() => document.getElementById('out-text').textContent.length >= 3);
  await page.click('#stop-btn');
  await page.waitForFunction(() => / · stopped$/.test(document.getElementById('gen-stats').textContent));
  const n = (await page.textContent('#out-text')).length;
  assert.ok(n >= 3 && n < 200, `${n} tokens before stop`);
  assert.equal(await page.isDisabled('#stop-btn'), true);
  assert.equal(await page.isHidden('#error'), true);
  await page.screenshot({ path: `${ARTIFACTS}demo-generated.png`, fullPage: true });
  assert.deepEqual(real(problems), []);
  await page.close();
});

test('errors are shown in words; a load can be cancelled', async () => {
  const { page, problems } = await fakePage();
  await page.fill('#model-url', '');
  await page.click('#load-btn');
  assert.equal(await page.textContent('#error'), 'A setting is out of range.Enter a model URL first.');

  await page.fill('#model-url', '/__test/status/404');
  await page.click('#load-btn');
  await page.waitForFunction(() => document.getElementById('error').dataset.code === 'http');
  assert.match(await page.textContent('#error'), /^The server refused the download\. Check the URL\.HTTP 404 Not Found fetching http:\/\/localhost:\d+\/__test\/status\/404$/);
  assert.equal(await page.textContent('#load-status'), 'Loading failed.');

  await page.fill('#model-url', `/__test/drop/100000${fake.url}`);
  await page.click('#load-btn');
  await page.waitForFunction(() => document.getElementById('error').dataset.code === 'network');
  assert.match(await page.textContent('#error'), /^The download failed\./);

  await page.fill('#model-url', `/__test/slow/30${fake.url}`);
  await page.click('#load-btn');
  await page.waitForFunction(() => /downloading$/.test(document.getElementById('load-status').textContent));
  assert.match(await page.textContent('#load-status'), /^[\d.]+ (KiB|B) \/ 3\.0 MiB · [\d.]+ MB\/s · downloading$/);
  await page.click('#cancel-load-btn');
  await page.waitForFunction(() => document.getElementById('load-status').textContent === 'Loading cancelled.');
  assert.equal(await page.isHidden('#error'), true);
  assert.equal(await page.isDisabled('#gen-btn'), true);
  assert.deepEqual(real(problems).filter((p) => !/Failed to load resource/.test(p)), []);
  await page.close();
});

/** The error box as the user sees it: words, never a stack trace or an "Error:" dump. */
async function shownError(page) {
  const text = await page.innerText('#error');
  assert.doesNotMatch(text, /\n\s*at |\bat \S+ \(|:\d+:\d+\)?$|@http/m, `a stack frame in the error box: ${text}`);
  assert.doesNotMatch(text, /\b(\w*Error|Uncaught|RuntimeError|panicked|wasm-function|unreachable)\b:?/, `a raw error in the error box: ${text}`);
  return text;
}

test('with the real wasm, errors are words: a 404 URL, a hostile file, then a good load', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
  const { page, problems } = await openPage(web.browser, `${web.server.url}?model=/__test/status/404`);
  await page.waitForSelector('body[data-ready="1"]');
  await page.click('#load-btn');
  await page.waitForFunction(() => document.getElementById('error').dataset.code === 'http');
  assert.match(await shownError(page), /^The server refused the download\. Check the URL\.\nHTTP 404 Not Found fetching http:\/\/localhost:\d+\/__test\/status\/404$/);

  // GGUF magic, version 3, then 2^60 tensors and 2^60 metadata pairs: a file built to make a
  // loader allocate without bounds.
  const hostile = Buffer.alloc(64);
  hostile.write('GGUF', 0, 'latin1');
  hostile.writeUInt32LE(3, 4);
  hostile.writeBigUInt64LE(1n << 60n, 8);
  hostile.writeBigUInt64LE(1n << 60n, 16);
  await page.setInputFiles('#model-file', { name: 'hostile.gguf', mimeType: 'application/octet-stream', buffer: hostile });
  assert.equal(await page.isChecked('input[name="source"][value="file"]'), true);
  await page.click('#load-btn');
  await page.waitForFunction(() => document.getElementById('error').dataset.code === 'format');
  const text = await shownError(page);
  assert.equal(text, 'This file is not a GGUF model that ggweb can read.\n' +
    'file hostile.gguf at byte 0: GGUF: too many tensors: 1152921504606846976 (limit 65536), at byte 8');
  assert.equal(await page.textContent('#load-status'), 'Loading failed.');

  // The page is still usable: the real model loads after both failures.
  await page.check('input[name="source"][value="url"]');
  await page.fill('#model-url', '/shared-models/tiny-gpt2-f16.gguf');
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));
  assert.equal(await page.isHidden('#error'), true);
  assert.deepEqual(real(problems).filter((p) => !/Failed to load resource/.test(p)), []);
  await page.close();
});

test('a dropped .gguf file loads (on the page thread)', async () => {
  const { page, problems } = await fakePage();
  await page.uncheck('#use-worker');
  await page.evaluate(async (url) => {
    const buf = await (await fetch(url)).arrayBuffer();
    const dt = new DataTransfer();
    dt.items.add(new File([buf], 'dropped.gguf'));
    document.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, fake.url);
  assert.equal(await page.textContent('#load-status'), 'Dropped dropped.gguf (3.0 MiB). Press "Load model".');
  assert.equal(await page.isChecked('input[name="source"][value="file"]'), true);
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));
  assert.match(await page.textContent('#load-status'), /^Loaded dropped\.gguf: 3\.0 MiB in \d+\.\d s, CPU\.$/);
  assert.deepEqual(real(problems), []);
  await page.close();
});

test('with the real wasm: "Look inside" colours tokens by rank as HF ranks them and draws attention', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
  const ref = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-gpt2.inside-ref.json`, 'utf8'));
  const [hello, fox] = ref.prompts;
  const { page, problems } = await openPage(web.browser, `${web.server.url}?model=/shared-models/tiny-gpt2-f32.gguf`);
  await page.waitForSelector('body[data-ready="1"]');
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));

  // After a generation the panel holds the prompt and the output.
  await page.fill('#prompt', hello.text);
  await page.fill('#max-tokens', '6');
  await page.fill('#temperature', '0');
  await page.click('#gen-btn');
  await page.waitForFunction(() => !document.getElementById('gen-btn').disabled && /tokens\/s/.test(document.getElementById('gen-stats').textContent));
  assert.equal(await page.inputValue('#inside-text'), hello.text + (await page.textContent('#out-text')));

  // Pasted text: the ranks shown are HF's (up to ties within 2e-4), the buckets GLTR's.
  await page.fill('#inside-text', fox.text);
  await page.click('#inside-btn');
  await page.waitForFunction(() => /^\d+ tokens/.test(document.getElementById('inside-stats').textContent));
  const spans = await page.$$eval('#gltr span', (s) => s.map((x) => ({ text: x.textContent, cls: x.className, rank: x.dataset.rank, title: x.title })));
  assert.equal(spans.length, fox.ids.length);
  assert.equal(spans.map((s) => s.text).join(''), fox.text);
  assert.equal(spans[0].cls, '', 'nothing predicts the first token');
  const bucket = (r) => (r < 10 ? 'r10' : r < 100 ? 'r100' : r < 1000 ? 'r1000' : 'rest');
  spans.slice(1).forEach((s, i) => {
    const r = Number(s.rank);
    assert.ok(fox.rank_lo[i] <= r && r <= fox.rank_hi[i], `token ${i + 1}: rank ${r}`);
    assert.equal(s.cls, bucket(r));
    assert.match(s.title, /p = [\d.e+-]+%, rank \d+, entropy [\d.]+ nats · top 5: /);
  });
  await page.hover('#gltr span[data-i="3"]');
  assert.match(await page.textContent('#token-detail'), /^" fox": p = .*top 5: /);

  // The heatmap of layer 1, head 2: the HF weights, darker where higher; future keys blank.
  await page.selectOption('#attn-layer', '1');
  await page.selectOption('#attn-head', '2');
  const heat = await page.evaluate((n) => {
    const c = document.getElementById('attn-canvas');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const cell = c.width / n;
    const red = (q, k) => d[((Math.floor((q + 0.5) * cell) * c.width) + Math.floor((k + 0.5) * cell)) * 4];
    const cells = [];
    for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) cells.push(red(q, k));
    return { w: c.width, cells };
  }, fox.ids.length);
  const n = fox.ids.length;
  const a = fox.attentions[1];
  for (let q = 0; q < n; q++) {
    for (let k = 0; k < n; k++) {
      const want = k > q ? 255 : Math.round(255 * (1 - Math.sqrt(a[(2 * n + q) * n + k])));
      // One colour step for rounding.
      assert.ok(Math.abs(heat.cells[q * n + k] - want) <= 1, `cell ${q},${k}: ${heat.cells[q * n + k]} vs ${want}`);
    }
  }
  await page.setViewportSize({ width: 1100, height: 900 });
  await page.locator('#inside-section').scrollIntoViewIfNeeded();
  const png = await page.screenshot({ path: `${ARTIFACTS}demo-inside.png`, fullPage: true });
  const s = await pngStats(page, png);
  assert.ok(s.colours > 20 && s.dark > 2000, `screenshot: ${JSON.stringify(s)}`);
  assert.deepEqual(real(problems), []);
  await page.close();
});

test('with the real wasm: a chosen URL shows its header at once; one that cannot fit is warned about before the download', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed');
  const bytes = writeHugeCtx();
  // The demo on the wasm32 builds (?memory64=0): where the browser has Memory64, 'auto' would
  // plan a file this size (4.3 GB) on pkg-m64 instead.
  const { page, problems } = await openPage(web.browser, `${web.server.url}?memory64=0`);
  await page.waitForSelector('body[data-ready="1"]');
  await page.fill('#model-url', `${web.server.url}shared-models/tiny-gpt2-q8_0.gguf`);
  await page.waitForSelector('#inspect-result[data-fits="true"]');
  assert.match(await page.textContent('#inspect-result'),
    /^tiny-gpt2-q8_0\.gguf: GPT-2, 2 layers × \d+, \d+ heads, n_ctx \d+ · .*q8_0 ×\d+.* · needs .* on CPU .* · fits here/);
  assert.equal(await page.isHidden('#inspect-warning'), true);

  await page.fill('#model-url', `${web.server.url}__test/counted/demo-huge/artifacts/huge-ctx.gguf`);
  await page.waitForSelector('#inspect-warning:not([hidden])');
  assert.match(await page.textContent('#inspect-warning'), /^This model will not fit: model too large: needs \d+ bytes/);
  await page.click('#load-btn');
  assert.equal(await page.textContent('#load-btn'), 'Load anyway');
  assert.equal(await page.textContent('#load-status'), 'No model loaded.');
  // The server was asked for the header's range only: no download started.
  const t = await (await fetch(`${web.server.url}__test/tally/demo-huge`)).json();
  assert.equal(t.requests, 1);
  assert.match(t.ranges[0], /^bytes=0-\d+$/);
  assert.ok(t.bytes < bytes.length / 3, `${t.bytes} of ${bytes.length}`);
  assert.deepEqual(real(problems).filter((p) => !/favicon\.ico/.test(p)), []);
  await page.close();
});

test('with the real wasm: a model over the memory budget fails as unsupported, and the demo says what does not fit and by how much', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed');
  writeHugeCtx();
  // The wasm32 builds (memory64: false, ?memory64=0): their 4 GiB is the budget under test.
  const { page, problems } = await openPage(web.browser, `${web.server.url}?memory64=0`);
  await page.waitForSelector('body[data-ready="1"]');
  // n_ctx 3 x 2^20: each KV tensor under 2 GiB, weights and KV cache together over wasm32's
  // 4 GiB: refused by the first, cheap check, before any compute buffer is planned.
  const nCtx = 3 << 20;
  const url = `${web.server.url}artifacts/huge-ctx.gguf`;
  for (const worker of [true, false]) {
    const e = await page.evaluate(async ({ url, nCtx, worker }) => {
      const { Model } = await import('/ggweb.js');
      try {
        await Model.load(url, { nCtx, worker, memory64: false });
        return 'loaded';
      } catch (err) {
        return { code: err.code, message: err.message, details: err.details };
      }
    }, { url, nCtx, worker });
    assert.equal(e.code, 'unsupported', e.message);
    // The byte is the end of the chunk the header completed in (the download's chunking).
    assert.equal(e.message.replace(/ at byte \d+: /, ' at byte N: '), `${url} at byte N: model too large: needs 4301913984 bytes (weights 1080688512 bytes + ` +
      'KV cache 3221225472 bytes for n_ctx 3145728 x 2 layers x n_embd 64, before any compute buffer for n_batch 32), ' +
      'the memory budget is 4294967296 bytes');
    assert.deepEqual(e.details, { needed: 4301913984, budget: 4294967296 });
  }

  await page.fill('#n-ctx', String(nCtx));
  await page.fill('#model-url', url);
  await page.waitForSelector('#inspect-warning:not([hidden])');
  await page.click('#load-btn');
  assert.equal(await page.textContent('#load-btn'), 'Load anyway');
  await page.click('#load-btn');
  await page.waitForFunction(() => document.getElementById('error').dataset.code === 'unsupported');
  const [head, detail] = (await page.innerText('#error')).split('\n');
  assert.equal(head, 'The model does not fit in memory here: it needs 4.01 GiB, the budget is 4.00 GiB (6.6 MiB over). ' +
    'Pick a smaller model or context, or the GPU.');
  assert.match(detail, /model too large: needs 4301913984 bytes .* the memory budget is 4294967296 bytes$/);
  assert.equal(await page.textContent('#load-status'), 'Loading failed.');
  assert.deepEqual(real(problems).filter((p) => !/favicon\.ico/.test(p)), []);
  await page.close();
});

// --- the interpretability panels (web/demo-inside.js), each compared with the API called directly in the page

/** The demo with `model` loaded (URL, or the offline tiny model), on `backend`. */
async function loadedDemo(model, backend = 'cpu') {
  const r = await openPage(web.browser, model === 'tiny' ? web.server.url : `${web.server.url}?model=${model}`);
  const { page } = r;
  await page.waitForSelector('body[data-ready="1"]');
  if (model === 'tiny') await page.check('input[name="source"][value="tiny"]');
  await page.selectOption('#backend', backend);
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));
  assert.match(await page.textContent('#load-status'), new RegExp(`, ${backend.toUpperCase()}, in a Web Worker\\.$`));
  return r;
}

/** The `k` highest logits at the last position, by a full sort (not the page's selection). */
const TOP_LAST = `(logits, nVocab, k = 5) => {
  const row = Array.from(logits.subarray(logits.length - nVocab), (logit, token) => ({ token, logit }));
  row.sort((a, b) => b.logit - a.logit || a.token - b.token);
  return row.slice(0, k);
}`;

const idle = (page, btn) => page.waitForFunction((b) => !document.getElementById(b).disabled, btn);
const noError = async (page) => assert.equal(await page.isHidden('#error'), true, `error shown: ${await page.textContent('#error')}`);

for (const backend of ['cpu', 'webgpu']) {
  test(`with the real wasm (${backend}): the attention axes are the tokens, the logit-lens grid is logitLens's, head ablation is run() with hook_z zeroed`, async () => {
    assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
    const { page, problems } = await loadedDemo('/shared-models/tiny-gpt2-f32.gguf', backend);
    const text = 'The quick brown fox jumps over the lazy dog.';
    await page.fill('#inside-text', text);
    await page.click('#inside-btn');
    await page.waitForFunction(() => /^\d+ tokens/.test(document.getElementById('inside-stats').textContent));
    await noError(page);
    const direct = await page.evaluate(async ({ text, TOP_LAST }) => {
      const m = window.ggwebDemo.model;
      const topLast = eval(TOP_LAST); // eslint-disable-line no-eval
      const ids = Array.from(await m.tokenize(text));
      const pieces = await Promise.all(ids.map((id) => m.detokenize([id])));
      const lens = await m.logitLens(ids, { topK: 5 });
      const { nVocab } = m.info().hparams;
      const run = await m.run(ids);
      const argmax = [];
      for (let p = 0; p < ids.length; p++) {
        const row = run.logits.subarray(p * nVocab, (p + 1) * nVocab);
        argmax.push(row.indexOf(Math.max(...row)));
      }
      const next = await m.logits(ids);
      const ablated = async (hooks) => topLast((await m.run(ids, { hooks })).logits, nVocab);
      return {
        ids, pieces, argmax, nVocab, lastArgmax: next.indexOf(Math.max(...next)), layers: lens.layers,
        lens: lens.top.map((layer) => layer.map((pos) => ({ token: pos[0].token, logprob: pos[0].logprob, k: pos.length }))),
        base: topLast(run.logits, nVocab),
        l1h2: await ablated([{ at: 'blocks.1.attn.hook_z', op: 'zero', head: 2 }]),
        both: await ablated([{ at: 'blocks.0.attn.hook_z', op: 'zero', head: 0 }, { at: 'blocks.1.attn.hook_z', op: 'zero', head: 2 }]),
      };
    }, { text, TOP_LAST });
    const n = direct.ids.length;
    assert.equal(n, 10);
    assert.equal(direct.pieces.join(''), text);

    // Attention: a key label above each column and a query label beside each row, in order, each
    // the token's text, centred on its cell.
    const axes = await page.evaluate(() => {
      const c = document.getElementById('attn-canvas').getBoundingClientRect();
      const labels = (id) => [...document.querySelectorAll(`#${id} span`)].map((s) => {
        const r = s.getBoundingClientRect();
        return { text: s.dataset.text, shown: s.textContent, x: (r.left + r.right) / 2 - c.left, y: (r.top + r.bottom) / 2 - c.top, h: r.height };
      });
      return { keys: labels('attn-keys'), queries: labels('attn-queries'), w: c.width, cell: Number(document.getElementById('attn-canvas').dataset.cell) };
    });
    assert.equal(axes.cell, 48, '480 px / 10 tokens');
    for (const [axis, labels] of [['keys', axes.keys], ['queries', axes.queries]]) {
      assert.deepEqual(labels.map((l) => l.text), direct.pieces, axis);
      assert.deepEqual(labels.map((l) => l.shown), direct.pieces, `${axis}: no whitespace to make visible here`);
      labels.forEach((l, i) => {
        const centre = (i + 0.5) * axes.cell + 1; // the canvas's 1 px border
        if (axis === 'keys') assert.ok(Math.abs(l.x - centre) <= 2 && l.y < 0, `key ${i} at ${l.x},${l.y}, cell centre ${centre}`);
        else assert.ok(Math.abs(l.y - centre) <= 2 && l.x < 0, `query ${i} at ${l.x},${l.y}, cell centre ${centre}`);
      });
    }
    // The hover readout names the cell under the pointer and its weight.
    await page.selectOption('#attn-layer', '1');
    await page.selectOption('#attn-head', '2');
    await page.locator('#attn-canvas').hover({ position: { x: 4 * 48 + 20, y: 7 * 48 + 20 } });
    const weight = await page.evaluate(async ({ text }) => {
      const t = await window.ggwebDemo.model.trace(text, { taps: ['attn'] });
      return t.attn[1][(2 * 10 + 7) * 10 + 4];
    }, { text });
    assert.equal(await page.textContent('#attn-readout'), `layer 1 head 2: query 7 " lazy" → key 4 " jumps": ${(100 * weight).toFixed(1)}%`);

    // Logit lens: (n_layer + 1) x n_pos cells, each logitLens's top-1 and its logprob exactly.
    assert.equal(direct.layers, 3);
    const lens = await page.$$eval('#lens-grid tr[data-layer]', (rows) => rows.map((r) =>
      [...r.querySelectorAll('td')].map((td) => ({ token: Number(td.dataset.token), logprob: Number(td.dataset.logprob), shown: td.textContent, title: td.title }))));
    assert.equal(lens.length, direct.layers);
    assert.equal(lens.flat().length, direct.layers * n);
    lens.forEach((row, l) => row.forEach((c, p) => {
      assert.deepEqual({ token: c.token, logprob: c.logprob }, { token: direct.lens[l][p].token, logprob: direct.lens[l][p].logprob }, `lens ${l}/${p}`);
      assert.equal(c.title.split('%, ').length, 5, `lens ${l}/${p}: the title gives the top 5: ${c.title}`);
    }));
    assert.deepEqual(lens[0].map((c) => c.shown), direct.pieces, 'in this model the embeddings read out as the input token');
    assert.deepEqual(lens.at(-1).map((c) => c.token), direct.argmax, 'the last row is the model\'s own top-1 at every position');
    assert.equal(lens.at(-1).at(-1).token, direct.lastArgmax, '= model.logits');

    // Head ablation: the lists are run()'s top 5 at the last position, without and with the hooks.
    const preds = (id) => page.$$eval(`#${id} li`, (li) => li.map((x) => ({ token: Number(x.dataset.token), logit: Number(x.dataset.logit) })));
    assert.deepEqual(await preds('pred-base'), direct.base);
    const checkboxes = await page.$$eval('#ablate-grid input[type="checkbox"]', (b) => b.map((x) => `${x.dataset.layer}.${x.dataset.head}`));
    assert.deepEqual(checkboxes, ['0.0', '0.1', '0.2', '0.3', '1.0', '1.1', '1.2', '1.3']);
    const tick = async (l, h, hooks) => {
      await page.click(`#ablate-grid input[data-layer="${l}"][data-head="${h}"]`);
      await page.waitForFunction((want) => document.getElementById('pred-ablated').dataset.hooks === want, JSON.stringify(hooks));
      await idle(page, 'inside-btn');
    };
    const z = (l, h) => ({ at: `blocks.${l}.attn.hook_z`, op: 'zero', head: h });
    await tick(1, 2, [z(1, 2)]);
    const one = await preds('pred-ablated');
    assert.deepEqual(one, direct.l1h2);
    assert.notDeepEqual(one, direct.base, 'zeroing head 1.2 changes the prediction');
    assert.equal(await page.textContent('#ablate-hooks'), `hooks: ${JSON.stringify([z(1, 2)])}`);
    await tick(0, 0, [z(0, 0), z(1, 2)]);
    assert.deepEqual(await preds('pred-ablated'), direct.both);
    assert.notDeepEqual(direct.both, direct.l1h2);
    await page.click('#ablate-grid input[data-layer="0"][data-head="0"]');
    await page.click('#ablate-grid input[data-layer="1"][data-head="2"]');
    await page.waitForFunction(() => document.getElementById('ablate-hooks').textContent === 'No head ticked.');
    await idle(page, 'inside-btn');
    assert.deepEqual(await preds('pred-ablated'), []);
    await noError(page);
    assert.deepEqual(real(problems), []);
    await page.close();
  });
}

test('with the real wasm: the patching heatmap holds model.patch\'s cells for the preset indirect-object pair; bad pairs are errors in the page', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
  const { page, problems } = await loadedDemo('/shared-models/tiny-gpt2-f32.gguf');
  const clean = await page.inputValue('#patch-clean');
  const corrupted = await page.inputValue('#patch-corrupted');
  assert.equal(clean, 'When Mary and John went to the store, John gave a drink to');
  assert.equal(corrupted, 'When Mary and John went to the store, Mary gave a drink to');
  assert.deepEqual([await page.inputValue('#patch-answer'), await page.inputValue('#patch-against')], [' Mary', ' John']);
  const direct = await page.evaluate(async ({ clean, corrupted }) => {
    const m = window.ggwebDemo.model;
    const [mary, john] = await m.tokenize(' Mary John');
    const c = await m.tokenize(clean);
    const out = { n: [c.length, (await m.tokenize(corrupted)).length], pieces: await Promise.all(Array.from(c, (id) => m.detokenize([id]))) };
    for (const at of ['resid_pre', 'attn_out', 'mlp_out', 'z']) {
      const r = await m.patch(clean, corrupted, { at, answer: mary, against: john });
      out[at] = { shape: r.shape, cells: Array.from(r.cells), cleanDiff: r.cleanDiff, corruptedDiff: r.corruptedDiff };
    }
    return out;
  }, { clean, corrupted });
  assert.deepEqual(direct.n, [14, 14], 'the preset pair tokenizes to the same length');
  for (const at of ['resid_pre', 'attn_out', 'mlp_out', 'z']) {
    await page.selectOption('#patch-at', at);
    await page.click('#patch-btn');
    await page.waitForSelector(`#patch-grid table[data-at="${at}"]`);
    await idle(page, 'patch-btn');
    await noError(page);
    const grid = await page.evaluate(() => ({
      rows: [...document.querySelectorAll('#patch-grid tr')].slice(1).map((tr) => [...tr.querySelectorAll('td')].map((td) => Number(td.dataset.value))),
      cols: [...document.querySelectorAll('#patch-grid tr:first-child th:not(.corner)')].map((th) => ({ text: th.dataset.text, shown: th.textContent, differs: th.classList.contains('differs') })),
      colours: new Set([...document.querySelectorAll('#patch-grid td')].map((td) => td.style.background)).size,
      legend: document.getElementById('patch-legend').textContent,
    }));
    const want = direct[at];
    const cols = at === 'z' ? 4 : 14;
    assert.deepEqual(want.shape, [2, cols], at);
    assert.equal(grid.rows.length, 2, at);
    assert.deepEqual(grid.rows.flat(), want.cells, `${at}: the cells are model.patch's, exactly`);
    assert.equal(grid.rows.flat().length, 2 * cols);
    assert.ok(grid.colours >= 3, `${at}: ${grid.colours} colours`);
    if (at === 'z') {
      assert.deepEqual(grid.cols.map((c) => c.shown), ['0', '1', '2', '3'], 'z: heads across');
    } else {
      assert.deepEqual(grid.cols.map((c) => c.text), direct.pieces, `${at}: the clean tokens across`);
      assert.deepEqual(grid.cols.map((c) => c.differs), direct.pieces.map((_, i) => i === 9), 'only " John"/" Mary" differs');
      assert.equal(grid.cols[9].shown, ' John\n Mary');
    }
    assert.match(grid.legend, new RegExp(`the change from the corrupted run's ${want.corruptedDiff.toFixed(3)} \\(clean run: ${want.cleanDiff.toFixed(3)}\\)\\.$`));
    assert.match(await page.textContent('#patch-stats'), new RegExp(`^2 × ${cols} cells · clean ${want.cleanDiff.toFixed(3)}, corrupted ${want.corruptedDiff.toFixed(3)} · \\d+ ms$`));
  }
  // resid_pre at layer 0: patching the differing position moves the corrupted run exactly to the clean one.
  assert.equal(direct.resid_pre.cells[9], direct.resid_pre.cleanDiff);

  // Bad inputs are errors shown in words, and the panel works again afterwards.
  const shown = async () => {
    await page.waitForSelector('#error:not([hidden])');
    return { code: await page.getAttribute('#error', 'data-code'), text: await page.innerText('#error') };
  };
  await page.fill('#patch-corrupted', 'When Mary and John went to the store, Mary Jane gave a drink to');
  await page.click('#patch-btn');
  assert.deepEqual(await shown(), { code: 'invalid', text: 'A setting is out of range.\nThe clean and corrupted texts must have the same number of tokens; they have 14 and 15.' });
  await page.fill('#patch-corrupted', corrupted);
  await page.fill('#patch-answer', ' Mary Jane');
  await page.click('#patch-btn');
  assert.deepEqual(await shown(), { code: 'invalid', text: `A setting is out of range.\nThe answer must be one token; " Mary Jane" is 2 (5335, 12091).` });
  await page.fill('#patch-answer', ' Mary');
  await page.selectOption('#patch-at', 'resid_pre');
  await page.click('#patch-btn');
  await page.waitForSelector('#patch-grid table[data-at="resid_pre"]');
  await idle(page, 'patch-btn');
  await noError(page);
  assert.deepEqual(real(problems), []);
  await page.close();
});

/** Spearman's ρ by its definition: Pearson's r of the ranks, ties at their mean rank. */
function spearmanRef(a, b) {
  const rank = (xs) => xs.map((x) => xs.filter((y) => y < x).length + (xs.filter((y) => y === x).length + 1) / 2);
  const [ra, rb] = [rank(a), rank(b)];
  const mean = (xs) => xs.reduce((s, x) => s + x, 0) / xs.length;
  const [ma, mb] = [mean(ra), mean(rb)];
  let ab = 0, aa = 0, bb = 0;
  ra.forEach((x, i) => { ab += (x - ma) * (rb[i] - mb); aa += (x - ma) ** 2; bb += (rb[i] - mb) ** 2; });
  return ab / Math.sqrt(aa * bb);
}

test('with the real wasm: attribution patching beside the exact sweep with their rank correlation, and the saliency view', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
  const { page, problems } = await loadedDemo('/shared-models/tiny-gpt2-f32.gguf');
  const clean = await page.inputValue('#patch-clean');
  const corrupted = await page.inputValue('#patch-corrupted');
  const text = 'When Mary and John went to the store, John gave a drink to';
  const direct = await page.evaluate(async ({ clean, corrupted, text }) => {
    const m = window.ggwebDemo.model;
    const [mary, john] = await m.tokenize(' Mary John');
    const out = {};
    for (const at of ['resid_pre', 'z']) {
      const x = await m.patch(clean, corrupted, { at, answer: mary, against: john });
      const y = await m.patch(clean, corrupted, { at, answer: mary, against: john, method: 'attribution' });
      out[at] = { exact: Array.from(x.cells), atp: Array.from(y.cells) };
    }
    const ids = Array.from(await m.tokenize(text));
    const logits = (await m.run(ids)).logits.slice(-50257);
    let pred = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i] > logits[pred]) pred = i;
    out.sal = { ids, pred };
    for (const method of ['gradient', 'gradientXInput', 'integratedGradients']) {
      out.sal[method] = Array.from((await m.saliency(ids, { of: { logprob: { token: pred } }, method })).scores);
    }
    return out;
  }, { clean, corrupted, text });
  assert.equal(await page.inputValue('#patch-method'), 'both');
  for (const at of ['resid_pre', 'z']) {
    await page.evaluate(() => { document.getElementById('patch-grid-atp').replaceChildren(); });
    await page.selectOption('#patch-at', at);
    await page.click('#patch-btn');
    await page.waitForSelector(`#patch-grid-atp table[data-at="${at}"]`);
    await idle(page, 'patch-btn');
    await noError(page);
    const got = await page.evaluate(() => ({
      exact: [...document.querySelectorAll('#patch-grid td')].map((td) => Number(td.dataset.value)),
      atp: [...document.querySelectorAll('#patch-grid-atp td')].map((td) => Number(td.dataset.value)),
      rho: Number(document.getElementById('patch-corr').dataset.rho),
      corr: document.getElementById('patch-corr').textContent,
      side: [document.getElementById('patch-exact').hidden, document.getElementById('patch-atp').hidden],
      colours: new Set([...document.querySelectorAll('#patch-grid-atp td')].map((td) => td.style.background)).size,
    }));
    const want = direct[at];
    assert.deepEqual(got.side, [false, false], `${at}: the two heatmaps side by side`);
    assert.deepEqual(got.exact, want.exact, `${at}: the exact sweep's cells`);
    assert.deepEqual(got.atp, want.atp, `${at}: model.patch's attribution cells`);
    assert.notDeepEqual(got.atp, got.exact, 'a first-order estimate, not the sweep');
    assert.ok(got.colours >= 3, `${at}: ${got.colours} colours`);
    const rho = spearmanRef(want.exact, want.atp);
    console.log(`demo ${at}: Spearman ρ exact vs attribution ${rho.toFixed(4)} over ${want.exact.length} cells`);
    assert.ok(Math.abs(got.rho - rho) <= 1e-12, `${at}: ρ ${got.rho} vs ${rho}`);
    assert.ok(rho > 0, `${at}: the estimate ranks the cells as the sweep does, roughly`);
    assert.match(got.corr, new RegExp(`^Rank correlation \\(Spearman ρ\\) of the two sweeps' cells: ${rho.toFixed(3).replace('.', '\\.')} over ${want.exact.length} cells · exact \\d+ ms, attribution \\d+ ms$`));
  }
  // Attribution alone: one heatmap, no correlation.
  await page.selectOption('#patch-method', 'attribution');
  await page.evaluate(() => { document.getElementById('patch-grid-atp').replaceChildren(); });
  await page.click('#patch-btn');
  await page.waitForSelector('#patch-grid-atp table');
  await idle(page, 'patch-btn');
  assert.deepEqual(await page.evaluate(() => [document.getElementById('patch-exact').hidden, document.getElementById('patch-atp').hidden, document.getElementById('patch-corr').textContent]), [true, false, '']);
  await page.selectOption('#patch-method', 'both');

  // Saliency: every token of the text coloured by its score for the predicted token.
  // (a part of "Look inside"'s results, shown once it has run).
  await page.fill('#inside-text', text);
  await page.click('#inside-btn');
  await page.waitForSelector('#inside-result:not([hidden])');
  await idle(page, 'inside-btn');
  const n = direct.sal.ids.length;
  for (const method of ['gradient', 'gradientXInput', 'integratedGradients']) {
    await page.selectOption('#sal-method', method);
    await page.click('#sal-btn');
    await page.waitForSelector(`#sal-tokens[data-method="${method}"] span`);
    await idle(page, 'sal-btn');
    await noError(page);
    const got = await page.evaluate(() => ({
      scores: [...document.querySelectorAll('#sal-tokens span')].map((s) => Number(s.dataset.score)),
      text: document.getElementById('sal-tokens').textContent,
      pred: Number(document.getElementById('sal-tokens').dataset.predicted),
      coloured: [...document.querySelectorAll('#sal-tokens span')].filter((s) => s.style.background).length,
      colours: new Set([...document.querySelectorAll('#sal-tokens span')].map((s) => s.style.background)).size,
      stats: document.getElementById('sal-stats').textContent,
    }));
    assert.equal(got.pred, direct.sal.pred);
    assert.deepEqual(got.scores, direct.sal[method], `${method}: model.saliency's scores`);
    assert.equal(got.text, text);
    assert.equal(got.coloured, n, `${method}: ${n} coloured tokens`);
    assert.ok(got.colours >= 3, `${method}: ${got.colours} colours`);
    assert.match(got.stats, new RegExp(`^${n} tokens · for the prediction ".*" \\(p = [0-9.e-]+%\\) · ${method}${method === 'integratedGradients' ? ', completeness gap -?[0-9.]+' : ''} · \\d+ ms$`));
  }
  assert.deepEqual(real(problems), []);
  await page.close();
});

/** Reads the two generation boxes once the steered one is done. */
async function steered(page) {
  await page.click('#steer-btn');
  await page.waitForSelector('#steer-out[data-done="1"]');
  await idle(page, 'steer-btn');
  await noError(page);
  const box = (id) => page.$eval(`#${id}`, (b) => ({ tokens: b.dataset.tokens.split(',').map(Number), text: b.textContent }));
  return { plain: await box('steer-plain'), steered: await box('steer-out') };
}

test('with the real wasm: steering by a residual difference streams model.generate with the same add hook, next to the unsteered text', async () => {
  assert.ok(MODELS_DIR, 'the shared models are needed: set GGWEB_MODELS_DIR');
  const { page, problems } = await loadedDemo('/shared-models/tiny-gpt2-f32.gguf');
  // Defaults: blocks.1.hook_resid_pre (the middle of 2 layers), "Love" − "Hate", strength 8, 24 tokens.
  assert.equal(await page.inputValue('#steer-layer'), '1');
  await page.fill('#steer-strength', '6.5');
  assert.equal(await page.textContent('#steer-strength-out'), '6.5');
  await page.fill('#steer-max', '16');
  const got = await steered(page);
  const direct = await page.evaluate(async () => {
    const m = window.ggwebDemo.model;
    const at = 'blocks.1.hook_resid_pre';
    const last = async (s) => {
      const c = (await m.run(s, { capture: [at] })).cache[at];
      return c.data.subarray((c.shape[0] - 1) * c.shape[1]);
    };
    const [a, b] = [await last('Love'), await last('Hate')];
    const vec = new Float32Array(a.length);
    for (let i = 0; i < vec.length; i++) vec[i] = a[i] - b[i];
    const gen = async (hooks) => {
      const out = { tokens: [], text: '' };
      for await (const t of m.generate('I think that you are', { hooks, maxTokens: 16, temperature: 0 })) {
        out.tokens.push(t.token);
        out.text += t.text;
      }
      return out;
    };
    return { plain: await gen(undefined), steered: await gen([{ at, op: 'add', value: vec.map((x) => x * 6.5) }]) };
  });
  assert.equal(direct.plain.tokens.length, 16);
  assert.deepEqual(got.plain, direct.plain);
  assert.deepEqual(got.steered, direct.steered);
  assert.notDeepEqual(got.steered.tokens, got.plain.tokens, 'the steering changes the generation');
  assert.match(await page.textContent('#steer-hooks'), /^hooks: \[\{ at: 'blocks\.1\.hook_resid_pre', op: 'add', value: "Love" − "Hate" × 6\.5 \}\] \(norm \d+\.\d{3}\)$/);
  assert.match(await page.textContent('#steer-stats'), /^16 tokens each, greedy · \d+ ms$/);

  // Strength 0 adds nothing: both streams are the same.
  await page.fill('#steer-strength', '0');
  const zero = await steered(page);
  assert.deepEqual(zero.steered, zero.plain);
  assert.deepEqual(zero.plain, direct.plain);

  // The SAE source without an SAE, and an SAE of another width, are errors in the page.
  await page.check('input[name="steer-source"][value="sae"]');
  await page.click('#steer-btn');
  await page.waitForSelector('#error:not([hidden])');
  assert.equal(await page.innerText('#error'), 'A setting is out of range.\nLoad an SAE first (its folder URL), or pick the residual difference.');
  await page.fill('#sae-url', `${web.server.url}tests/fixtures/tiny-sae/`);
  await page.click('#sae-load-btn');
  await page.waitForFunction(() => !document.getElementById('sae-load-btn').disabled && !document.getElementById('error').hidden);
  assert.match(await page.innerText('#error'),
    /^A setting is out of range\.\n.*the SAE's d_in is 32 but 'blocks\.1\.hook_resid_pre' has 64 values per position in this model/);
  assert.equal(await page.textContent('#sae-status'), '');
  // The model is still usable.
  await page.check('input[name="steer-source"][value="diff"]');
  await page.fill('#steer-strength', '6.5');
  assert.deepEqual(await steered(page), got);
  assert.deepEqual(real(problems), []);
  await page.close();
});

test('with the real wasm: steering by an SAE feature (tests/fixtures/tiny-sae on the tiny test model) streams generate with decoderRow × strength', async () => {
  const { page, problems } = await loadedDemo('tiny');
  await page.fill('#sae-url', `${web.server.url}tests/fixtures/tiny-sae`);
  await page.click('#sae-load-btn');
  await page.waitForSelector('#sae-status[data-hook]');
  await noError(page);
  assert.equal(await page.textContent('#sae-status'), 'loaded: 64 features at blocks.1.hook_resid_pre (d_in 32)');
  assert.equal(await page.isChecked('input[name="steer-source"][value="sae"]'), true);
  await page.fill('#sae-feature', '3');
  await page.fill('#steer-strength', '12');
  await page.fill('#steer-max', '12');
  const got = await steered(page);
  const direct = await page.evaluate(async (url) => {
    const m = window.ggwebDemo.model;
    const sae = await m.loadSae(url);
    const row = await sae.decoderRow(3);
    await sae.dispose();
    const gen = async (hooks) => {
      const out = { tokens: [], text: '' };
      for await (const t of m.generate('I think that you are', { hooks, maxTokens: 12, temperature: 0 })) {
        out.tokens.push(t.token);
        out.text += t.text;
      }
      return out;
    };
    return { plain: await gen(undefined), steered: await gen([{ at: 'blocks.1.hook_resid_pre', op: 'add', value: row.map((x) => x * 12) }]) };
  }, `${web.server.url}tests/fixtures/tiny-sae/`);
  assert.equal(direct.steered.tokens.length, 12);
  assert.deepEqual(got, direct);
  assert.notDeepEqual(got.steered.tokens, got.plain.tokens, 'the feature changes the generation');
  assert.match(await page.textContent('#steer-hooks'), /^hooks: \[\{ at: 'blocks\.1\.hook_resid_pre', op: 'add', value: SAE feature 3 × 12 \}\]/);

  // A feature out of range is an error in the page.
  await page.fill('#sae-feature', '64');
  await page.click('#steer-btn');
  await page.waitForSelector('#error:not([hidden])');
  assert.equal(await page.innerText('#error'), 'A setting is out of range.\nThe SAE feature must be an integer in 0..63, got 64.');
  assert.deepEqual(problems, []);
  await page.close();
});
