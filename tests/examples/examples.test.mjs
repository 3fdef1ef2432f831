// The examples in examples/ (react, service-worker, node-vitest), installed and run as their
// READMEs say, against the packed package (npm pack of this repository, unpacked into each
// example's node_modules/ggweb as tests/bundlers does). Each example's tools are pinned by its
// package-lock.json and installed with `npm ci`.
//   react:          Vite production build and the Vite dev server (where StrictMode mounts twice),
//                   in headless Chromium: the generation streams into the page, one model worker
//                   stays alive, unmounting ends it.
//   service-worker: no build; the page registers sw.js ('ggweb/sw': no `import()`), which loads
//                   the model and returns Hugging Face's greedy tokens.
//   node-vitest:    `vitest run` on its test file (scores text in Node.js).
//
//   node --test tests/examples/examples.test.mjs   (after scripts/build-wasm.sh; GGWEB_TARBALL=<npm pack output> to skip packing)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { HF, launch, MODELS_DIR, openPage, ROOT } from '../e2e/helpers.mjs';
import { startServer } from '../../scripts/serve.mjs';
import { installPacked, packedTarball } from '../bundlers/packed.mjs';

assert.ok(MODELS_DIR, 'the shared tiny GPT-2 (tiny-gpt2-f16.gguf) is needed: set GGWEB_MODELS_DIR');
const EXAMPLES = join(ROOT, 'examples');
const HELLO = HF.prompts[0]; // 'Hello, my name is' and HF's greedy continuation

let browser;
let tarball;

before(async () => {
  tarball = packedTarball();
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

/** Runs `fn` and logs how long it took (the step's install and build times, for CI's budget). */
function timed(what, fn) {
  const t0 = Date.now();
  const r = fn();
  console.log(`${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return r;
}

/** The browser's targets of a type ('worker', 'service_worker'), by URL file name. */
async function targets(type) {
  const cdp = await browser.newBrowserCDPSession();
  try {
    const { targetInfos } = await cdp.send('Target.getTargets');
    return targetInfos.filter((t) => t.type === type).map((t) => t.url.replace(/^.*\//, ''));
  } finally {
    await cdp.detach();
  }
}

/** Polls `targets(type)` until `ok(list)` or `ms` pass; returns the last list. */
async function waitTargets(type, ok, ms = 5000) {
  const t0 = Date.now();
  let list = await targets(type);
  while (!ok(list) && Date.now() - t0 < ms) {
    await new Promise((r) => setTimeout(r, 100));
    list = await targets(type);
  }
  return list;
}

test('node-vitest: `vitest run` loads the model from a path and scores text (HF logprobs)', () => {
  const dir = join(EXAMPLES, 'node-vitest');
  timed('node-vitest: npm ci + the packed ggweb', () => installPacked(dir, tarball));
  const out = timed('node-vitest: vitest run', () => execFileSync('npx', ['--no-install', 'vitest', 'run', '--reporter=verbose'], {
    cwd: dir, encoding: 'utf8', timeout: 120000, stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, MODEL: join(MODELS_DIR, 'tiny-gpt2-f32.gguf'), NO_COLOR: '1', CI: '1' },
  }));
  console.log(out);
  // Vitest exits non-zero on a failure (execFileSync throws); this checks that the tests ran.
  assert.match(out, /Tests +4 passed \(4\)/, 'four Vitest tests ran and passed');
  assert.doesNotMatch(out, /skipped|todo/i);
});

test("service-worker: the page's service worker (ggweb/sw, no import()) generates HF's greedy tokens", async () => {
  const dir = join(EXAMPLES, 'service-worker');
  timed('service-worker: the packed ggweb', () => installPacked(dir, tarball));
  // COOP/COEP on: the service worker is then cross-origin isolated too, and must still choose
  // one thread (it cannot start the pool's workers) rather than the threaded build.
  const server = await startServer({ port: 0, isolate: true, mounts: [['/models/', MODELS_DIR], ['/', dir]] });
  const { page, problems } = await openPage(browser, server.url);
  try {
    await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 30000 });
    assert.deepEqual(await targets('service_worker'), ['sw.js'], 'the service worker is registered and running');
    await page.fill('#prompt', HELLO.text);
    await page.click('#go');
    await page.waitForFunction(() => ['done', 'error'].includes(document.body.dataset.state), null, { timeout: 60000 });
    const out = await page.textContent('#out');
    assert.equal(await page.evaluate(() => document.body.dataset.state), 'done', out);
    const ids = (await page.textContent('#ids')).split(' ').map(Number);
    assert.deepEqual(ids, HELLO.greedy_ids.slice(0, 20), "HF's greedy ids for 'Hello, my name is'");
    assert.equal(out, await detokenize(ids), 'the streamed text is the tokens\' text');
    const where = await page.textContent('#where');
    assert.match(where, /^ServiceWorkerGlobalScope, pkg-relaxed, 1 thread \(no Worker constructor here \(a service worker\)/, where);
    assert.deepEqual(await targets('worker'), [], 'no dedicated worker: the model ran in the service worker');
    assert.deepEqual(problems.filter((m) => !m.includes('/favicon.ico')), [], 'page errors');
  } finally {
    await page.close();
    await server.close();
  }
});

/** The text of `ids`, by the packed package in Node (the reference for what the page shows). */
let nodeModel;
async function detokenize(ids) {
  if (!nodeModel) {
    const { Model } = await import(pathToFileURL(join(EXAMPLES, 'service-worker', 'node_modules', 'ggweb', 'web', 'ggweb.js')).href);
    nodeModel = await Model.load(join(MODELS_DIR, 'tiny-gpt2-f16.gguf'));
  }
  return nodeModel.detokenize(ids);
}
after(() => nodeModel?.dispose());
