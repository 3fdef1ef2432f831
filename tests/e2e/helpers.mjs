// Shared setup for the browser tests: the static server and Debian's headless Chromium
// driven by playwright-core (never a downloaded browser).
import { existsSync, mkdirSync, readFileSync, renameSync, truncateSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { after, before } from 'node:test';
import { chromium } from 'playwright-core';
import { findModelsDir, startServer } from '../../scripts/serve.mjs';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const ARTIFACTS = fileURLToPath(new URL('../artifacts/', import.meta.url));
mkdirSync(ARTIFACTS, { recursive: true });

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
export const CHROMIUM_ARGS = [
  '--no-sandbox', // mandatory as root
  '--headless=new',
  '--enable-unsafe-webgpu',
  '--disable-dev-shm-usage',
  // The network here is closed: without these Chromium retries Google hosts endlessly.
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-default-apps',
  '--no-first-run',
  '--no-default-browser-check',
];

export async function launch() {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

/** tests/fixtures/llamacpp (the llama.cpp-made tiny GPT-2s), served at /shared-models/. */
export const MODELS_DIR = findModelsDir();
/** .models/ (big generated models, e.g. 124m-f16.gguf; may be absent), served at /dot-models/. */
export const DOT_MODELS = `${ROOT}.models`;

/** What the real-model tests compare with: tests/fixtures/tiny-gpt2.hf-rows.json (HF outputs). */
export const HF = JSON.parse(readFileSync(`${ROOT}tests/fixtures/tiny-gpt2.hf-rows.json`, 'utf8'));

/** `extra`: more [urlPrefix, dir] mounts (e.g. generated models under target/). */
export async function serve(extra = []) {
  const mounts = [['/e2e/', `${ROOT}tests/e2e`], ['/artifacts/', ARTIFACTS], ...extra];
  if (MODELS_DIR) mounts.push(['/shared-models/', MODELS_DIR]);
  if (existsSync(DOT_MODELS)) mounts.push(['/dot-models/', DOT_MODELS]);
  return startServer({ port: 0, testRoutes: true, mounts });
}

/**
 * The repository served (serve()) and a Chromium launched (launch()) for one spec file:
 * `before` starts both, `after` closes them. The object's `server` and `browser` are set once
 * `before` has run.
 */
export function useServerAndBrowser() {
  const ctx = { server: null, browser: null };
  before(async () => {
    ctx.server = await serve();
    ctx.browser = await launch();
  });
  after(async () => {
    await ctx.browser?.close();
    await ctx.server?.close();
  });
  return ctx;
}

/** A page that records console errors and uncaught exceptions. */
export async function openPage(browser, url) {
  const page = await browser.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console.error: ${m.text()} @ ${m.location().url}`);
  });
  await page.goto(url);
  return { page, problems };
}

/**
 * Writes tests/artifacts/fake-model.gguf: GGUF magic, then deterministic bytes; 3 MiB + 4 in all.
 * Returns { url, size, fnv1a } (FNV-1a 32 of all bytes, which fake-core's info() reports).
 */
export function makeFakeModel() {
  const size = 3 * 1024 * 1024 + 4;
  const bytes = new Uint8Array(size);
  bytes.set([0x47, 0x47, 0x55, 0x46]);
  let x = 12345;
  for (let i = 4; i < size; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  // Spec files may run in parallel: write aside, then rename (atomic), so no reader sees half a file.
  const tmp = `${ARTIFACTS}fake-model.gguf.${process.pid}`;
  writeFileSync(tmp, bytes);
  renameSync(tmp, `${ARTIFACTS}fake-model.gguf`);
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return { url: '/artifacts/fake-model.gguf', size, fnv1a: h };
}

/**
 * The page most specs drive, for one spec file: the repository served and Chromium launched
 * (`before`/`after` hooks), tests/e2e/harness.html open with `window.G` (ggweb.js),
 * `window.run(fn)` (fn's value, or its error as a plain object: name, code, message, details,
 * isGgweb) and `window.settle(promise, ms)` (the same for a promise, or { hang: true } when it
 * has not settled after `ms`). `setup`, a function run in the page after that, adds a spec's
 * own helpers. Returns { server, browser, page, problems, inPage }, filled once `before` ran:
 * `inPage(worker, body, arg, opts)` runs `body` (an async function body) in the page with `G`,
 * `Model`, `opts` ({ worker, ...baseOpts, ...opts }), `arg` and `settle` in scope, and
 * returns `window.settle`'s result (bounded at 2 minutes).
 */
export function useHarness(baseOpts = {}, setup = null) {
  const h = { server: null, browser: null, page: null, problems: null };
  before(async () => {
    h.server = await serve();
    h.browser = await launch();
    ({ page: h.page, problems: h.problems } = await openPage(h.browser, `${h.server.url}e2e/harness.html`));
    await h.page.evaluate(async () => {
      window.G = await import('/ggweb.js');
      const asObject = (e) => ({
        ok: false, name: e?.name, code: e?.code, message: String(e?.message), details: e?.details, isGgweb: e instanceof window.G.GgwebError,
      });
      window.run = async (fn) => {
        try {
          return { ok: true, value: await fn() };
        } catch (e) {
          return asObject(e);
        }
      };
      window.settle = async (p, ms = 5000) => {
        let timer;
        const hang = new Promise((r) => { timer = setTimeout(() => r({ hang: true }), ms); });
        try {
          return await Promise.race([window.run(() => p), hang]);
        } finally {
          clearTimeout(timer);
        }
      };
    });
    if (setup) await h.page.evaluate(setup);
  });
  after(async () => {
    await h.browser?.close();
    await h.server?.close();
  });
  h.inPage = (worker, body, arg, opts = {}) => h.page.evaluate(
    async ({ body, arg, opts }) => {
      const G = window.G;
      // eslint-disable-next-line no-new-func
      const fn = new Function('G', 'Model', 'opts', 'arg', 'settle', `return (async () => { ${body} })()`);
      // A body that never settles fails its test (after 2 minutes) instead of hanging the run.
      return window.settle(fn(G, G.Model, opts, arg, window.settle), 120000);
    },
    { body, arg, opts: { worker, ...baseOpts, ...opts } },
  );
  return h;
}

/**
 * Writes tests/artifacts/huge-ctx.gguf and returns the bytes it starts with: the Q8_0 file
 * made to describe a context of 2^22 consistently (a lying header is a format error):
 * gpt2.context_length raised, position_embd.weight given 2^22 rows and moved to 4 GiB into
 * the data, past every other tensor, and the file extended (sparse) to the size that implies.
 * Its KV cache alone is over wasm32's 4 GiB, so only the plan refuses it.
 */
export function writeHugeCtx() {
  const HUGE_CTX = 1 << 22;
  const bytes = readFileSync(`${MODELS_DIR}/tiny-gpt2-q8_0.gguf`);
  const after = (text, from = 0) => {
    const i = bytes.indexOf(Buffer.from(text), from);
    if (!(i > 0)) throw new Error(`huge-ctx.gguf: ${text} not found in the tiny model`);
    return i + Buffer.byteLength(text);
  };
  const ctx = after('gpt2.context_length');
  if (bytes.readUInt32LE(ctx) !== 4) throw new Error('huge-ctx.gguf: gpt2.context_length is not a u32');
  bytes.writeUInt32LE(HUGE_CTX, ctx + 4);
  // A tensor info: name, n_dims (u32), ne (u64 each), type (u32), offset (u64).
  const pos = after('position_embd.weight');
  if (bytes.readUInt32LE(pos) !== 2) throw new Error('huge-ctx.gguf: position_embd.weight is not 2-D');
  bytes.writeBigUInt64LE(BigInt(HUGE_CTX), pos + 12);
  bytes.writeBigUInt64LE(1n << 32n, pos + 24);
  // The last tensor info is output.weight's (the name's u64 length, 13, tells it from
  // attn_output.weight); the data start at the next multiple of general.alignment (32).
  const out = after('\x0d\x00\x00\x00\x00\x00\x00\x00output.weight', pos);
  const headerEnd = out + 4 + 8 * bytes.readUInt32LE(out) + 4 + 8;
  const dataOffset = Math.ceil(headerEnd / 32) * 32;
  writeFileSync(`${ARTIFACTS}huge-ctx.gguf`, bytes);
  truncateSync(`${ARTIFACTS}huge-ctx.gguf`, dataOffset + 2 ** 32 + 64 * HUGE_CTX * 4);
  return bytes;
}
