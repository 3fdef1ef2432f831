// The memory a load takes in headless Chromium (tests/e2e/load-memory.mjs measures), for GPT-2
// 124M's shape at Q8_0 (~178 MB; written by `cargo test --test model scale_medium`, npm test's
// native step, into target/tmp/scale-models/), held to the goal of issue 40: 1.1 × the file
// plus the KV cache and the compute buffer. The weights stream from fetch into the worker's wasm
// memory chunk by chunk, so:
// - the worker (its wasm memory and JS heap) is within the goal;
// - the page's JS heap stays small (it never sees the file);
// - the renderer process never rose above what it kept after the load by more than 2 % of the
//   file (no transient second copy);
// - the renderer's rise is within the goal once the cost of any worker with the wasm runtime
//   is taken off (compiled code, the worker's and the pool's threads), measured here with the
//   tiny model as its rise minus its wasm memory (~20 MB, whatever the model).
// The XL shape's figures: tests/scale/load-memory.spec.mjs (npm run test:scale). BENCHMARKS.md
// records both.
//   cargo test --test model scale_medium && node --test tests/e2e/load-memory.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { ROOT, serve } from './helpers.mjs';
import { MIB, describe, goal, launchForMemory, measureLoad } from './load-memory.mjs';

const DIR = `${process.env.CARGO_TARGET_DIR ?? `${ROOT}target`}/tmp/scale-models`;
const FILE = 'bench-124m-q8_0.gguf';
assert.ok(existsSync(`${DIR}/${FILE}`), `${DIR}/${FILE} is missing: run \`cargo test --test model scale_medium\` first (it writes the model)`);

let server;
let browser;
before(async () => {
  server = await serve([['/scale-models/', DIR]]);
  browser = await launchForMemory();
});
after(async () => {
  await browser?.close();
  await server?.close();
});

test("124M Q8_0's load (default: a worker, 2 threads): within 1.1 × the file + KV + compute, no second copy, the page's heap small", async () => {
  const tiny = await measureLoad(browser, server, '/shared-models/tiny-gpt2-f32.gguf');
  const fixed = tiny.renderer.peakRise - tiny.wasmMemory.now;
  const m = await measureLoad(browser, server, `/scale-models/${FILE}`);
  console.log(describe('tiny-gpt2-f32', tiny));
  console.log(describe(FILE, m));
  console.log(`the runtime's own cost (tiny's renderer rise minus its wasm memory): ${(fixed / 1e6).toFixed(1)} MB`);
  assert.equal(m.threads.n, 2, JSON.stringify(m.threads));
  const g = goal(m);
  assert.ok(m.wasmMemory.now <= g, `wasm memory ${m.wasmMemory.now} > goal ${g}`);
  assert.ok(m.worker.bytes <= g, `the worker's memory ${m.worker.bytes} > goal ${g}`);
  assert.ok(m.worker.bytes >= m.wasmMemory.now, `the worker's measure ${m.worker.bytes} misses its wasm memory ${m.wasmMemory.now}`);
  assert.ok(m.pageJsPeak <= 8 * MIB, `the page's JS heap reached ${m.pageJsPeak}`);
  assert.ok(m.renderer.transient <= 0.02 * m.file, `the renderer peaked ${m.renderer.transient} above what it kept (a second copy?)`);
  assert.ok(fixed > 0 && fixed < 64 * MIB, `the runtime's own cost ${fixed}`);
  assert.ok(m.renderer.peakRise - fixed <= g, `the renderer's rise ${m.renderer.peakRise} minus the runtime's ${fixed} > goal ${g}`);
});
