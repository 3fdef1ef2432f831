// The README's pictures of the demo's interpretability and fine-tune panels (docs/img/demo-*.png), taken in
// headless Chromium on the project's tiny random-weight GPT-2 (tests/fixtures/llamacpp; its
// outputs are gibberish, the panels are what is shown). Run by hand, not by npm test:
//   GGWEB_MODELS_DIR=$PWD/tests/fixtures/llamacpp node scripts/screenshots.mjs
import { mkdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { launch, serve } from '../tests/e2e/helpers.mjs';

const OUT = fileURLToPath(new URL('../docs/img/', import.meta.url));
mkdirSync(OUT, { recursive: true });

const server = await serve();
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  await page.goto(`${server.url}?model=/shared-models/tiny-gpt2-f32.gguf`);
  await page.waitForSelector('body[data-ready="1"]');
  await page.click('#load-btn');
  await page.waitForFunction(() => /^Loaded /.test(document.getElementById('load-status').textContent));

  const idle = (btn) => page.waitForFunction((b) => !document.getElementById(b).disabled, btn);
  await page.fill('#inside-text', 'The quick brown fox jumps over the lazy dog.');
  await page.click('#inside-btn');
  await page.waitForSelector('#inside-result:not([hidden])');
  await page.selectOption('#attn-layer', '1');
  await page.selectOption('#attn-head', '2');
  await page.locator('#attn-map').scrollIntoViewIfNeeded();
  const box = await page.locator('#attn-canvas').boundingBox();
  await page.mouse.move(box.x + box.width * 0.45, box.y + box.height * 0.8);
  await page.click('#ablate-grid input[data-layer="1"][data-head="2"]');
  await idle('inside-btn');
  await page.click('#ablate-grid input[data-layer="0"][data-head="0"]');
  await idle('inside-btn');
  await page.selectOption('#sal-method', 'integratedGradients');
  await page.click('#sal-btn');
  await page.waitForSelector('#sal-tokens span');
  await idle('sal-btn');
  await page.click('#patch-btn');
  await page.waitForSelector('#patch-result:not([hidden])');
  await idle('patch-btn');
  await page.click('#steer-btn');
  await page.waitForSelector('#steer-out[data-done="1"]');
  await idle('steer-btn');
  // Fine-tune: a LoRA adapter on a few lines of Dickens, then greedy text beside the original's.
  await page.fill('#tune-text', 'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness.\n'.repeat(8));
  await page.fill('#tune-steps', '24');
  await page.fill('#tune-lr', '0.02');
  await page.fill('#tune-seq-len', '32');
  await page.click('#tune-btn');
  await page.waitForFunction(() => !!document.getElementById('tune-stats').dataset.stop);
  await idle('tune-btn');
  await page.fill('#tune-prompt', 'It was the');
  await page.click('#tune-gen-btn');
  await page.waitForFunction(() => !!document.getElementById('tune-tuned').dataset.tokens);
  await idle('tune-gen-btn');
  if (problems.length || !(await page.isHidden('#error')) || !(await page.isHidden('#tune-error'))) {
    throw new Error(`the page failed: ${problems.join('; ')} ${await page.textContent('#error')} ${await page.textContent('#tune-error')}`);
  }

  const shots = [
    ['demo-attention.png', ['#attn-controls', '#attn-map', '#attn-readout']],
    ['demo-logit-lens.png', ['#lens-grid']],
    ['demo-saliency.png', ['#sal-method', '#sal-stats', '#sal-tokens']],
    ['demo-ablation.png', ['#ablate-grid', '#inside-result .two-col']],
    ['demo-patching.png', ['#patch-section']],
    ['demo-steering.png', ['#steer-section']],
    ['demo-fine-tune.png', ['#tune-section']],
  ];
  for (const [name, sels] of shots) {
    // The union of the elements' boxes, with a margin.
    const boxes = [];
    for (const s of sels) {
      await page.locator(s).scrollIntoViewIfNeeded();
      boxes.push(await page.locator(s).evaluate((e) => {
        const r = e.getBoundingClientRect();
        return { x: r.left + scrollX, y: r.top + scrollY, r: r.right + scrollX, b: r.bottom + scrollY };
      }));
    }
    const x = Math.max(0, Math.min(...boxes.map((b) => b.x)) - 8);
    const y = Math.max(0, Math.min(...boxes.map((b) => b.y)) - 8);
    const clip = { x, y, width: Math.max(...boxes.map((b) => b.r)) + 8 - x, height: Math.max(...boxes.map((b) => b.b)) + 8 - y };
    await page.screenshot({ path: `${OUT}${name}`, clip, fullPage: true });
    const kb = statSync(`${OUT}${name}`).size / 1024;
    console.log(`docs/img/${name}: ${Math.round(clip.width)}x${Math.round(clip.height)}, ${kb.toFixed(0)} KB`);
    if (kb > 200) throw new Error(`${name} is ${kb.toFixed(0)} KB (limit 200)`);
  }
} finally {
  await browser.close();
  await server.close();
}
