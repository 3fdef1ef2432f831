// ggweb as web apps ship it: the packed package (npm pack of this repository) installed into a
// minimal Vite 8 app (tests/bundlers/vite) and a minimal webpack 5 app (tests/bundlers/webpack),
// neither with any ggweb-specific configuration (webpack has no config file at all, Vite none).
// Each app is built for production, served from its dist/ (once with COOP/COEP, once as a plain
// static host), and in headless Chromium loads the tiny GPT-2 in a worker and on the page thread:
// Hugging Face's greedy tokens, logits within 1e-4 of HF's, two threads on the isolated host and
// one thread, with the reason, on the plain one. The Vite app also runs under the dev server.
// A third app (tests/bundlers/esbuild) checks the README's recipe for bundlers that do not
// follow `new URL(…, import.meta.url)`: esbuild's bundle with the package's web/ copied beside it.
//
//   node --test tests/bundlers/bundlers.test.mjs     (after scripts/build-wasm.sh; GGWEB_TARBALL=<npm pack output> to skip packing)
//
// Each app's bundler is pinned in its package-lock.json and installed with `npm ci`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { HF, launch, MODELS_DIR, openPage, ROOT } from '../e2e/helpers.mjs';
import { startServer } from '../../scripts/serve.mjs';
import { installPacked, packedTarball } from './packed.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const FIXTURES = join(ROOT, 'tests', 'fixtures');
const MODEL = 'tiny-gpt2-f32.gguf'; // F32: its logits are the ones HF's are compared with at 1e-4
assert.ok(MODELS_DIR, 'the shared tiny GPT-2 (tiny-gpt2-f32.gguf) is needed: set GGWEB_MODELS_DIR');

const APPS = {
  vite: { build: ['npm', ['run', 'build']] },
  webpack: { build: ['npm', ['run', 'build']] },
  // esbuild leaves `new URL(…, import.meta.url)` alone: the README's recipe, which copies the
  // package's web/ folder beside the bundle (its package.json "build" script).
  esbuild: { build: ['npm', ['run', 'build']] },
};

let browser;
let tarball;
const built = {}; // app → { dist, log, files: [[path, bytes]] }

before(async () => {
  tarball = packedTarball();
  for (const [app, { build }] of Object.entries(APPS)) {
    const dir = join(HERE, app);
    installPacked(dir, tarball);
    rmSync(join(dir, 'dist'), { recursive: true, force: true });
    const log = execFileSync(build[0], build[1], { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 300000 });
    const dist = join(dir, 'dist');
    const files = walk(dist).map((f) => [relative(dist, f), statSync(f).size]);
    built[app] = { dist, log, files };
    const total = files.reduce((s, [, n]) => s + n, 0);
    console.log(`${app}: dist/ holds ${files.length} files, ${total} bytes:\n${files.map(([f, n]) => `  ${String(n).padStart(9)}  ${f}`).join('\n')}`);
  }
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

function walk(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)])).sort();
}

// In the page: load the model, generate HF's greedy continuation of each prompt, compare the
// next-token logits after each prompt with HF's row.
const RUN = async ({ model, prompts, rowsUrl, opts }) => {
  const { Model } = window.ggweb;
  const n = 50257;
  const rows = new Float32Array(await (await fetch(rowsUrl)).arrayBuffer());
  try {
    const m = await Model.load(model, opts);
    const out = { info: m.info(), inWorker: m.inWorker, greedy: [], maxDiff: [] };
    for (const p of prompts) {
      const ids = [];
      for await (const t of m.generate(p.text, { maxTokens: p.greedy_ids.length, temperature: 0 })) ids.push(t.token);
      out.greedy.push(ids);
      const l = await m.logits(p.ids);
      const ref = rows.subarray(p.row.index * n, (p.row.index + 1) * n);
      let d = l.length === n ? 0 : Infinity;
      for (let i = 0; i < n; i++) d = Math.max(d, Math.abs(l[i] - ref[i]));
      out.maxDiff.push(d);
    }
    await m.dispose();
    return out;
  } catch (e) {
    return { error: `${e.code ?? e.name}: ${e.message}` };
  }
};

/** Opens `url` (the app's page), runs RUN in a worker and on the page thread, checks both. */
async function checkApp(label, base, { isolated }) {
  const { page, problems } = await openPage(browser, base);
  try {
    await page.waitForFunction(() => document.title === 'ready', null, { timeout: 30000 });
    assert.equal(await page.evaluate(() => crossOriginIsolated), isolated, `${label}: crossOriginIsolated`);
    // relaxedSimd: false loads the plain twins: all four builds (and both threaded builds'
    // thread workers) are exercised from the bundle.
    for (const [worker, relaxedSimd] of [[true, true], [false, true], [true, false], [false, false]]) {
      // nThreads: 2 on the isolated host, so the count does not depend on this machine's cores.
      const opts = { worker, relaxedSimd, ...(isolated && worker ? { nThreads: 2 } : {}) };
      const r = await page.evaluate(RUN, { model: `/models/${MODEL}`, prompts: HF.prompts, rowsUrl: '/fixtures/tiny-gpt2.hf-rows.bin', opts });
      const what = `${label}, ${worker ? 'in a worker' : 'on the page thread'}${relaxedSimd ? '' : ', relaxedSimd: false'}`;
      assert.equal(r.error, undefined, `${what}: ${r.error}`);
      assert.equal(r.inWorker, worker);
      HF.prompts.forEach((p, i) => {
        assert.deepEqual(r.greedy[i], p.greedy_ids, `${what}, ${p.key}: HF's greedy ids`);
        // 1e-4: F32 weights, f32 arithmetic in another summation order than PyTorch's.
        assert.ok(r.maxDiff[i] <= 1e-4, `${what}, ${p.key}: max |logit - HF| ${r.maxDiff[i]}`);
      });
      const t = r.info.threads;
      if (worker && isolated) {
        assert.deepEqual(t, { n: 2, running: 2, build: relaxedSimd ? 'pkg-threads-relaxed' : 'pkg-threads', reason: null }, `${what}: threads`);
      } else {
        assert.equal(t.n, 1, `${what}: threads ${JSON.stringify(t)}`);
        assert.equal(t.build, relaxedSimd ? 'pkg-relaxed' : 'pkg', `${what}: build (Chromium has relaxed SIMD)`);
        assert.match(t.reason, worker ? /not cross-origin isolated/ : /main thread/, `${what}: why one thread`);
      }
      console.log(`${what}: greedy = HF for ${HF.prompts.length} prompts, max |logit - HF| ` +
        `${Math.max(...r.maxDiff).toExponential(2)}, threads ${JSON.stringify(t)}`);
    }
    {
      // The Memory64 builds from the bundle: on the isolated host the threaded twin (with its
      // own copy of the thread worker), on the plain one pkg-m64 on one thread.
      const r = await page.evaluate(RUN, { model: `/models/${MODEL}`, prompts: HF.prompts.slice(0, 1), rowsUrl: '/fixtures/tiny-gpt2.hf-rows.bin',
        opts: { memory64: true, relaxedSimd: false, ...(isolated ? { nThreads: 2 } : {}) } });
      assert.equal(r.error, undefined, `${label}, memory64: ${r.error}`);
      assert.deepEqual(r.greedy[0], HF.prompts[0].greedy_ids, `${label}, memory64: HF's greedy ids`);
      assert.ok(r.maxDiff[0] <= 1e-4, `${label}, memory64: max |logit - HF| ${r.maxDiff[0]}`);
      assert.equal(r.info.memory64, true, `${label}, memory64`);
      if (isolated) assert.deepEqual(r.info.threads, { n: 2, running: 2, build: 'pkg-m64-threads', reason: null }, `${label}, memory64: threads`);
      else assert.equal(r.info.threads.build, 'pkg-m64', `${label}, memory64: build`);
    }
    if (isolated) {
      // A custom deployment: `coreUrl` names a glue the bundler never saw (here the installed
      // package's own files, served at /custom/); its threaded and relaxed siblings are found
      // beside it by folder name.
      const r = await page.evaluate(RUN, { model: `/models/${MODEL}`, prompts: HF.prompts.slice(0, 1), rowsUrl: '/fixtures/tiny-gpt2.hf-rows.bin',
        opts: { nThreads: 2, coreUrl: '/custom/pkg/ggweb_core.js' } });
      assert.equal(r.error, undefined, `${label}, coreUrl: ${r.error}`);
      assert.deepEqual(r.greedy[0], HF.prompts[0].greedy_ids, `${label}, coreUrl: HF's greedy ids`);
      assert.ok(r.maxDiff[0] <= 1e-4, `${label}, coreUrl: max |logit - HF| ${r.maxDiff[0]}`);
      assert.deepEqual(r.info.threads, { n: 2, running: 2, build: 'pkg-threads-relaxed', reason: null }, `${label}, coreUrl: threads`);
    }
    assert.deepEqual(problems.filter((m) => !m.includes('/favicon.ico')), [], `${label}: page errors`);
  } finally {
    await page.close();
  }
}

async function serveDist(app, isolate) {
  const custom = join(HERE, app, 'node_modules', 'ggweb', 'web');
  return startServer({ port: 0, isolate, mounts: [['/models/', MODELS_DIR], ['/fixtures/', FIXTURES], ['/custom/', custom], ['/', built[app].dist]] });
}

for (const app of Object.keys(APPS)) {
  test(`${app}: the production build emits the six wasm builds, without warnings about ggweb`, () => {
    const { files, log } = built[app];
    const all = files.filter(([f]) => f.endsWith('.wasm'));
    // esbuild's recipe copies every web/pkg* folder, ggweb/tokenizer's wasm (pkg-tokenizer)
    // with them; Vite and webpack emit only what the app imports, which is not the tokenizer.
    const wasm = all.filter(([f]) => app !== 'esbuild' || !f.startsWith('pkg-tokenizer/'));
    // One per build (pkg, pkg-relaxed, pkg-threads, pkg-threads-relaxed, pkg-m64, pkg-m64-threads): six different files.
    assert.equal(wasm.length, 6, `${app}: .wasm files ${JSON.stringify(all)}`);
    assert.doesNotMatch(log, /Critical dependency|Module not found|externalized for browser|could not be resolved|doesn't exist at build time/i, `${app} build log:\n${log}`);
  });

  for (const isolated of [true, false]) {
    test(`${app}: production build on a ${isolated ? 'COOP/COEP (cross-origin isolated)' : 'plain static'} host: HF's greedy tokens and logits, in a worker and on the page`, async () => {
      const server = await serveDist(app, isolated);
      try {
        await checkApp(`${app} build, ${isolated ? 'isolated' : 'plain'} host`, server.url, { isolated });
      } finally {
        await server.close();
      }
    });
  }
}

test('vite: the dev server (no config file; COOP/COEP headers given to it) runs the same app', async () => {
  const dir = join(HERE, 'vite');
  const { createServer } = await import(pathToFileURL(join(dir, 'node_modules', 'vite', 'dist', 'node', 'index.js')).href);
  // Only hosting settings here, nothing about ggweb: the isolation headers, and the model and
  // reference files served from outside the app (a plugin, as any app serving files would).
  const mounts = [['/models/', MODELS_DIR], ['/fixtures/', FIXTURES], ['/custom/', join(dir, 'node_modules', 'ggweb', 'web')]];
  const files = await startServer({ port: 0, isolate: true, mounts });
  const proxy = Object.fromEntries(mounts.map(([p]) => [p, { target: files.url.replace('localhost', '127.0.0.1'), changeOrigin: true }]));
  const server = await createServer({
    root: dir,
    configFile: false,
    logLevel: 'warn',
    clearScreen: false,
    server: {
      port: 0, host: '127.0.0.1', strictPort: false, proxy,
      headers: { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' },
    },
  });
  await server.listen();
  try {
    const url = server.resolvedUrls.local[0];
    await checkApp('vite dev server, isolated', url, { isolated: true });
  } finally {
    await server.close();
    await files.close();
  }
});
