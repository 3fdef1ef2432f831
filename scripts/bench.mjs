// npm run bench: load a model in headless Chromium through the JS API and time it.
//   BENCH_MODEL=/tests/fixtures/tiny-f16.gguf BENCH_TOKENS=64 BENCH_BACKEND=cpu npm run bench
// BENCH_MODEL is a path on the demo server (web/, tests/fixtures/, /shared-models/ for
// ../shared/models, /dot-models/ for .models/) or a full URL.
// Prints one JSON line: load ms, prompt tokens/s, generation tokens/s (greedy, fixed seed).
// BENCH_THREADS=1,2 runs once per CPU thread count (Model.load's nThreads; the page is
// cross-origin isolated, so more than 1 uses web/pkg-threads), one line each.
import { chromium } from 'playwright-core';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { findModelsDir, startServer } from './serve.mjs';

const model = process.env.BENCH_MODEL ?? '/tests/fixtures/tiny-f16.gguf';
const tokens = Number(process.env.BENCH_TOKENS ?? 64);
const backend = process.env.BENCH_BACKEND ?? 'cpu';
const worker = process.env.BENCH_WORKER !== '0';
const prompt = process.env.BENCH_PROMPT ?? 'The quick brown fox jumps over the lazy dog. '.repeat(4);
const threadCounts = (process.env.BENCH_THREADS ?? '').split(',').filter(Boolean).map(Number);

const mounts = [];
const shared = findModelsDir();
if (shared) mounts.push(['/shared-models/', shared]);
const dotModels = fileURLToPath(new URL('../.models', import.meta.url));
if (existsSync(dotModels)) mounts.push(['/dot-models/', dotModels]);
const server = await startServer({ port: 0, mounts });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--headless=new', '--enable-unsafe-webgpu', '--disable-dev-shm-usage',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let code = 0;
try {
  const page = await browser.newPage();
  await page.goto(server.url);
  for (const nThreads of threadCounts.length ? threadCounts : [undefined]) {
    const r = await page.evaluate(async ({ model, tokens, backend, worker, prompt, nThreads }) => {
      const { Model } = await import('/ggweb.js');
      try {
        const t0 = performance.now();
        const m = await Model.load(model, { backend, worker, nThreads });
        const loadMs = performance.now() - t0;
        // Warm-up, then the timed run.
        for await (const _ of m.generate('Hello', { maxTokens: 4, temperature: 0, seed: 1 })) { /* warm */ }
        const it = m.generate(prompt, { maxTokens: tokens, temperature: 0, seed: 1 });
        let n = 0;
        for await (const _ of it) n++;
        const s = await it.stats;
        const info = m.info();
        await m.dispose();
        return {
          ok: true, model, backend: info.load.backend, worker, threads: info.threads?.n, build: info.threads?.build,
          bytes: info.load.bytes, loadMs: Math.round(loadMs),
          promptTokens: s.promptTokens, promptTokPerS: +(s.promptTokens / (s.promptMs / 1000)).toFixed(1),
          tokens: n, genTokPerS: +(n / (s.genMs / 1000)).toFixed(1), cpuJobs: s.cpuJobs, ua: navigator.userAgent.match(/Chrome\/[\d.]+/)?.[0],
        };
      } catch (e) {
        return { ok: false, code: e.code, message: e.message };
      }
    }, { model, tokens, backend, worker, prompt, nThreads });
    console.log(JSON.stringify(r));
    if (!r.ok) code = 1;
  }
} finally {
  await browser.close();
  await server.close();
}
process.exit(code);
