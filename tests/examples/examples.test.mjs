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
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { HF, launch, MODELS_DIR, openPage, ROOT } from '../e2e/helpers.mjs';
import { startServer } from '../../scripts/serve.mjs';
import { installPacked, packedTarball } from '../bundlers/packed.mjs';

assert.ok(MODELS_DIR, 'the shared tiny GPT-2 (tiny-gpt2-f16.gguf) is needed: set GGWEB_MODELS_DIR');
const EXAMPLES = join(ROOT, 'examples');
const HERE = fileURLToPath(new URL('.', import.meta.url));
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
  const server = await startServer({ port: 0, isolate: true, mounts: [['/models/', MODELS_DIR], ['/__default/', HERE], ['/', dir]] });
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
    assert.equal(out, HELLO.greedy_text, "the streamed text: HF's greedy continuation");
    const where = await page.textContent('#where');
    assert.match(where, /^ServiceWorkerGlobalScope, pkg-relaxed, 1 thread \(no Worker constructor here \(a service worker\)/, where);
    assert.deepEqual(await targets('worker'), [], 'no dedicated worker: the model ran in the service worker');
    // Why the entry exists: the default one, in a service worker, cannot import its build.
    const viaDefault = await page.evaluate(async () => {
      const reg = await navigator.serviceWorker.register('/__default/sw-default-entry.js', { type: 'module', scope: '/__default/' });
      const sw = reg.installing ?? reg.waiting ?? reg.active;
      if (sw.state !== 'activated') await new Promise((r) => sw.addEventListener('statechange', () => sw.state === 'activated' && r()));
      const { port1, port2 } = new MessageChannel();
      const reply = new Promise((r) => { port1.onmessage = (e) => r(e.data); });
      sw.postMessage({ model: '/models/tiny-gpt2-f16.gguf' }, [port2]);
      return reply;
    });
    assert.equal(viaDefault.name, 'GgwebError', JSON.stringify(viaDefault));
    assert.equal(viaDefault.code, 'unsupported');
    assert.match(viaDefault.message, /could not import the wasm glue pkg\/ggweb_core\.js \(in a service worker, import from 'ggweb\/sw'\): .*import\(\)/);
    assert.deepEqual(problems.filter((m) => !m.includes('/favicon.ico')), [], 'page errors');
  } finally {
    await page.close();
    await server.close();
  }
});

/**
 * The React app at `url`: the hook loads the model (StrictMode on: in development it mounts
 * twice), the component streams HF's greedy continuation into the page, exactly one model
 * worker stays alive, unmounting ends it, mounting again loads a new one.
 */
async function checkReact(label, url, { dev }) {
  const { page, problems } = await openPage(browser, 'about:blank');
  const logs = [];
  page.on('console', (m) => { if (m.type() === 'debug' && m.text().startsWith('useModel:')) logs.push(m.text()); });
  try {
    await page.goto(url);
    await page.waitForSelector('[data-status=ready]', { timeout: 30000 });
    // StrictMode's first mount was unmounted at once: its load aborted, its worker (if it had
    // started one) ended. One worker is left, the model's (one thread: no COOP/COEP here).
    assert.deepEqual(await waitTargets('worker', (l) => l.length === 1), [await workerName(page)], `${label}: one model worker`);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await targets('worker')).length, 1, `${label}: still one worker`);
    const loading = logs.filter((l) => l.startsWith('useModel: loading'));
    if (dev) {
      assert.deepEqual(logs.slice(0, 3), ['useModel: loading /models/tiny-gpt2-f16.gguf', 'useModel: unmounted: aborting the load',
        'useModel: loading /models/tiny-gpt2-f16.gguf'], `${label}: StrictMode mounted twice: ${JSON.stringify(logs)}`);
    } else {
      assert.deepEqual(logs, ['useModel: loading /models/tiny-gpt2-f16.gguf'], `${label}: a production build mounts once`);
    }
    assert.equal(loading.length, dev ? 2 : 1);

    await page.fill('input[aria-label=Prompt]', HELLO.text);
    await page.click('text=Generate');
    await page.waitForSelector('output[data-state=done], output[data-state=error]', { timeout: 60000 });
    const text = await page.textContent('output');
    assert.equal(await page.getAttribute('output', 'data-state'), 'done', `${label}: ${text}`);
    assert.equal(text, HELLO.greedy_text, `${label}: HF's greedy continuation (20 tokens), streamed into the page`);

    await page.click('text=Unmount the model');
    assert.deepEqual(await waitTargets('worker', (l) => l.length === 0), [], `${label}: unmounting ended the model's worker`);
    assert.equal(logs.at(-1), 'useModel: unmounted: disposing the model');
    await page.click('text=Mount the model');
    await page.waitForSelector('[data-status=ready]', { timeout: 30000 });
    assert.equal((await waitTargets('worker', (l) => l.length === 1)).length, 1, `${label}: mounted again: one worker`);
    assert.deepEqual(problems.filter((m) => !m.includes('/favicon.ico')), [], `${label}: page errors`);
  } finally {
    await page.close();
  }
  assert.deepEqual(await waitTargets('worker', (l) => l.length === 0), [], `${label}: closing the page ended the worker`);
}

/** The file name of the model's worker script as the app serves it (Vite hashes it in a build). */
async function workerName(page) {
  const list = await targets('worker');
  return list.length === 1 && /^worker(-[\w-]+)?\.js/.test(list[0]) ? list[0] : `a worker.js, not ${JSON.stringify(list)}`;
}

test('react: useModel and streaming, Vite production build and dev server (StrictMode mounts twice), in Chromium', async () => {
  const dir = join(EXAMPLES, 'react');
  timed('react: npm ci + the packed ggweb', () => installPacked(dir, tarball));
  // The README's step: the model goes in public/models/, which Vite serves and copies to dist/.
  mkdirSync(join(dir, 'public', 'models'), { recursive: true });
  copyFileSync(join(MODELS_DIR, 'tiny-gpt2-f16.gguf'), join(dir, 'public', 'models', 'tiny-gpt2-f16.gguf'));
  rmSync(join(dir, 'dist'), { recursive: true, force: true });
  const log = timed('react: vite build', () => execFileSync('npm', ['run', 'build'], { cwd: dir, encoding: 'utf8', timeout: 300000, stdio: ['ignore', 'pipe', 'pipe'] }));
  assert.doesNotMatch(log, /Critical dependency|could not be resolved|doesn't exist at build time/i, log);

  // A plain static host (no COOP/COEP): one thread, so the model is exactly one worker.
  const server = await startServer({ port: 0, isolate: false, mounts: [['/', join(dir, 'dist')]] });
  try {
    await checkReact('react, production build', server.url, { dev: false });
  } finally {
    await server.close();
  }

  const { createServer } = await import(pathToFileURL(join(dir, 'node_modules', 'vite', 'dist', 'node', 'index.js')).href);
  const t0 = Date.now();
  const vite = await createServer({ root: dir, logLevel: 'warn', clearScreen: false, server: { port: 0, host: '127.0.0.1', strictPort: false } });
  await vite.listen();
  try {
    await checkReact('react, Vite dev server', vite.resolvedUrls.local[0], { dev: true });
  } finally {
    await vite.close();
  }
  console.log(`react: dev server run: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
