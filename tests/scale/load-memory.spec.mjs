// The memory of a load of GPT-2 XL's shape in headless Chromium (npm run test:scale; the first
// model of GGWEB_SCALE_MODELS, default .models/bench-xl-q8_0.gguf), measured as
// tests/e2e/load-memory.spec.mjs does the 124M shape's (tests/e2e/load-memory.mjs) and held to
// the same goal: 1.1 × the file plus the KV cache and the compute buffer, for the worker, and
// for the renderer once the runtime's own cost (the tiny model's rise minus its wasm memory) is
// taken off; no transient above what the load keeps.
//   node --test tests/scale/load-memory.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { DOT_MODELS, serve } from '../e2e/helpers.mjs';
import { MIB, describe, goal, launchForMemory, measureLoad } from '../e2e/load-memory.mjs';

const NAME = (process.env.GGWEB_SCALE_MODELS ?? 'bench-xl-q8_0.gguf').split(',')[0];
assert.ok(existsSync(`${DOT_MODELS}/${NAME}`), `.models/${NAME} is missing: bash tests/fixtures/make_scale_models.sh`);

let server;
let browser;
before(async () => {
  server = await serve();
  browser = await launchForMemory();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test(`${NAME}'s load: within 1.1 × the file + KV + compute, no second copy`, { timeout: 900_000 }, async () => {
  const tiny = await measureLoad(browser, server, '/shared-models/tiny-gpt2-f32.gguf');
  const fixed = tiny.renderer.peakRise - tiny.wasmMemory.now;
  const m = await measureLoad(browser, server, `/dot-models/${NAME}`, { nBatch: 32 });
  console.log(describe(NAME, m));
  console.log(`the runtime's own cost (tiny's renderer rise minus its wasm memory): ${(fixed / 1e6).toFixed(1)} MB`);
  const g = goal(m);
  assert.ok(m.worker.bytes <= g, `the worker's memory ${m.worker.bytes} > goal ${g}`);
  assert.ok(m.pageJsPeak <= 8 * MIB, `the page's JS heap reached ${m.pageJsPeak}`);
  assert.ok(m.renderer.transient <= 0.02 * m.file, `the renderer peaked ${m.renderer.transient} above what it kept`);
  assert.ok(m.renderer.peakRise - fixed <= g, `the renderer's rise ${m.renderer.peakRise} minus the runtime's ${fixed} > goal ${g}`);
});
