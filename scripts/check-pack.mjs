// npm pack check: the tarball holds exactly the package's files (the JS API, worker, types,
// and the built wasm), and, installed into an empty project, `import('ggweb')` resolves
// through package.json "exports" and its wasm instantiates in Node (and 'ggweb/tokenizer'
// encodes with the shipped vocabulary); then, in headless
// Chromium, a page of that project imports 'ggweb' (an import map, as a bundler-less site
// would) and, with the installed wasm in the installed worker, loads the shared tiny GPT-2
// and generates Hugging Face's first greedy tokens.
//   node scripts/check-pack.mjs      (after scripts/build-wasm.sh)
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { findModelsDir, startServer } from './serve.mjs';


const root = new URL('..', import.meta.url).pathname;
const fail = (msg) => { console.error(`check-pack: ${msg}`); process.exit(1); };

const want = [
  'package.json', 'README.md',
  'web/ggweb.js', 'web/ggweb-sw.js', 'web/engine.js', 'web/errors.js', 'web/input.js', 'web/source.js', 'web/cache.js', 'web/hub.js', 'web/worker.js', 'web/worker-session.js', 'web/shared-worker.js', 'web/builds.js', 'web/methods.js', 'web/ggweb.d.ts', 'web/ggweb.types.d.ts',
  'web/node-fs.js', 'web/opfs.js', 'web/wasm-trap.js', 'web/tokenizer.js', 'web/tokenizer.d.ts',
  'web/pkg/ggweb_core.js', 'web/pkg/ggweb_core.d.ts', 'web/pkg/ggweb_core_bg.wasm', 'web/pkg/ggweb_core_bg.wasm.d.ts',
  'web/pkg-threads/ggweb_core.js', 'web/pkg-threads/ggweb_core.d.ts', 'web/pkg-threads/ggweb_core_bg.wasm',
  'web/pkg-threads/ggweb_core_bg.wasm.d.ts',
].flatMap((f) => (f.startsWith('web/pkg') ? [f, f.replace(/^web\/(pkg[^/]*)\//, 'web/$1-relaxed/')] : [f])).concat(
  // The tokenizer entry's module (one build) and GPT-2's vocabulary.
  ['ggweb_tokenizer.js', 'ggweb_tokenizer.d.ts', 'ggweb_tokenizer_bg.wasm', 'ggweb_tokenizer_bg.wasm.d.ts', 'gpt2-vocab.gguf'].map((f) => `web/pkg-tokenizer/${f}`),
  // The Memory64 builds (single-thread and threaded).
  ['pkg-m64', 'pkg-m64-threads'].flatMap((d) => ['ggweb_core.js', 'ggweb_core.d.ts', 'ggweb_core_bg.wasm', 'ggweb_core_bg.wasm.d.ts'].map((f) => `web/${d}/${f}`)),
);
// The threaded builds' worker script, where wasm-bindgen puts it (the hash varies).
const SNIPPET = /^web\/pkg(-m64)?-threads(-relaxed)?\/snippets\/ggweb-[0-9a-f]+\/web\/cpu-thread\.js$/;
const tmp = mkdtempSync(join(tmpdir(), 'ggweb-pack-'));
try {
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', tmp], { cwd: root, encoding: 'utf8' });
  const [info] = JSON.parse(out);
  const files = info.files.map((f) => f.path).sort();
  const missing = want.filter((f) => !files.includes(f));
  for (const dir of ['pkg-threads', 'pkg-threads-relaxed', 'pkg-m64-threads']) {
    if (files.filter((f) => SNIPPET.test(f) && f.startsWith(`web/${dir}/`)).length !== 1) missing.push(`web/${dir}/snippets/ggweb-*/web/cpu-thread.js`);
  }
  const extra = files.filter((f) => !want.includes(f) && f !== 'LICENSE' && !SNIPPET.test(f));
  if (missing.length) fail(`missing from the package: ${missing.join(', ')}`);
  if (extra.length) fail(`unexpected files in the package: ${extra.join(', ')}`);
  console.log(`check-pack: ${info.filename}: ${files.length} files, ${info.size} bytes packed, ${info.unpackedSize} unpacked`);

  const proj = join(tmp, 'proj');
  const dest = join(proj, 'node_modules', 'ggweb');
  mkdirSync(dest, { recursive: true });
  execFileSync('tar', ['xzf', join(tmp, info.filename), '-C', dest, '--strip-components=1']);
  writeFileSync(join(proj, 'package.json'), '{"type":"module","private":true}');
  writeFileSync(join(proj, 'probe.mjs'), `
    import { readFileSync } from 'node:fs';
    import { Model, GgwebError, ERROR_CODES } from 'ggweb';
    import * as core from 'ggweb/pkg/ggweb_core.js';
    if (typeof Model.load !== 'function' || typeof GgwebError !== 'function') throw new Error('exports missing');
    const wasm = readFileSync(new URL('./node_modules/ggweb/web/pkg/ggweb_core_bg.wasm', import.meta.url));
    core.initSync({ module: wasm });
    // The tokenizer entry through its own export, with the vocabulary shipped beside it.
    const { Tokenizer } = await import('ggweb/tokenizer');
    const tok = await Tokenizer.gpt2();
    const ids = Array.from(tok.encode('Hello world<|endoftext|>', { special: true }));
    if (ids.join() !== '15496,995,50256') throw new Error('ggweb/tokenizer encoded ' + ids.join());
    console.log(JSON.stringify({ version: core.version(), codes: ERROR_CODES.length }));
  `);
  const probe = execFileSync(process.execPath, ['--experimental-wasm-relaxed-simd', 'probe.mjs'], { cwd: proj, encoding: 'utf8' });
  const { version } = JSON.parse(probe.trim().split('\n').pop());
  const pkgVersion = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  if (version !== pkgVersion) fail(`packed wasm says version ${version}, package.json says ${pkgVersion}`);
  console.log(`check-pack: installed copy imports as 'ggweb' and its wasm reports version ${version}`);

  const models = findModelsDir();
  if (!models) fail('the shared models (tiny-gpt2-f16.gguf) are needed for the browser check: set GGWEB_MODELS_DIR');
  const ref = JSON.parse(readFileSync(join(root, 'tests/fixtures/tiny-gpt2.hf-rows.json'), 'utf8')).prompts[0];
  writeFileSync(join(proj, 'index.html'), `<!doctype html><meta charset="utf-8"><title>ggweb package check</title>
    <script type="importmap">{"imports": {"ggweb": "./node_modules/ggweb/web/ggweb.js"}}</script>
    <script type="module">
      import { Model } from 'ggweb';
      window.generate = async (url, text, n) => {
        const m = await Model.load(url);
        const ids = [];
        for await (const t of m.generate(text, { maxTokens: n, temperature: 0 })) ids.push(t.token);
        const info = m.info();
        await m.dispose();
        return { ids, arch: info.arch, worker: info.load.worker, threads: info.threads, cores: navigator.hardwareConcurrency };
      };
      document.title = 'ready';
    </script>`);
  const server = await startServer({ port: 0, mounts: [['/proj/', proj], ['/shared-models/', models]] });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--headless=new', '--disable-dev-shm-usage', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${server.url}proj/index.html`);
    await page.waitForFunction(() => document.title === 'ready');
    const n = 5;
    const r = await page.evaluate(({ n, text }) => window.generate('/shared-models/tiny-gpt2-f16.gguf', text, n), { n, text: ref.text });
    const want = ref.greedy_ids.slice(0, n);
    if (JSON.stringify(r.ids) !== JSON.stringify(want)) fail(`the packed module generated ${JSON.stringify(r.ids)}, HF's greedy ids are ${JSON.stringify(want)}`);
    if (r.arch !== 'gpt2' || r.worker !== true) fail(`unexpected info: ${JSON.stringify(r)}`);
    if (errors.length) fail(`page errors: ${errors.join('; ')}`);
    // The server sends COOP/COEP: with more than one core, the default is the threaded build,
    // in its relaxed-SIMD form (Chromium has relaxed SIMD).
    const wantBuild = r.cores > 1 ? 'pkg-threads-relaxed' : 'pkg-relaxed';
    if (r.threads?.build !== wantBuild || r.threads.running !== r.threads.n) fail(`threads: ${JSON.stringify(r.threads)}, expected build ${wantBuild} with all threads running`);
    console.log(`check-pack: in Chromium, the installed package loaded tiny-gpt2-f16.gguf in a worker (${wantBuild}, ${r.threads.n} threads) and generated ${JSON.stringify(r.ids)} (HF's greedy ids)`);
  } finally {
    await browser.close();
    await server.close();
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
