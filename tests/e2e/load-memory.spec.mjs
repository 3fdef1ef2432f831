// The memory a load takes in headless Chromium (tests/e2e/load-memory.mjs measures), for GPT-2
// 124M's shape at Q8_0 (~178 MB; written by `cargo test --test model scale_medium`, npm test's
// native step, into target/tmp/scale-models/), against the goal of issue 40: 1.1 × the file
// plus the KV cache and the compute buffer. The weights stream from fetch into the worker's wasm
// memory chunk by chunk. What holds, and is asserted (checkLoad): the wasm memory within the
// goal, the page's JS heap small (it never sees the file), no second copy of the weights in the
// worker or the renderer, not even a transient one; the wasm memory over the model's plan
// (tokenizer, static data, stacks, the allocator's holes) under 12 MiB: 11.0 MB since the
// tokenizer's arrays are moved out of the GGUF header instead of copied (14.4 MB before).
// The whole renderer within 1.1 × the goal too (the issue's goal, asked of the tab): 1.063-1.085
// × in 42 runs on 2026-12-06 at load average 6-14 (2 threads, 1 thread, the plain build),
// since the stream's chunks are collected before the model is built (source.js collectChunks;
// 1.083-1.392 × before it, interleaved: Chromium's fetch body leaves an ArrayBuffer per piece
// for V8's next full GC, 0-88 MB of them still resident when finish() wrote the KV cache and
// the compute buffer). What is left above the wasm memory is the runtime's fixed ~28 MB
// (Chromium's code pages, the two new V8 isolates, compiled wasm): BENCHMARKS.md "Load
// memory: the transient was the stream's chunks". For GPT-2 XL's shape the whole renderer is
// within the goal (tests/scale/load-memory.spec.mjs, npm run test:scale).
//   cargo test --test model scale_medium && node --test tests/e2e/load-memory.spec.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { ROOT, serve } from './helpers.mjs';
import { MIB, checkLoad, describe, goal, launchForMemory, measureLoad } from './load-memory.mjs';

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

test("124M Q8_0's load (default: a worker, 2 threads): wasm memory within 1.1 × the file + KV + compute, no second copy, the page's heap small", async () => {
  const tiny = await measureLoad(browser, server, '/shared-models/tiny-gpt2-f32.gguf');
  const m = await measureLoad(browser, server, `/scale-models/${FILE}`);
  console.log(describe('tiny-gpt2-f32', tiny));
  console.log(describe(FILE, m));
  console.log(`the runtime's own cost and the chunks awaiting the GC (tiny's renderer rise minus its wasm memory): ${((tiny.renderer.peakRise - tiny.wasmMemory.now) / 1e6).toFixed(1)} MB`);
  assert.equal(m.threads.n, 2, JSON.stringify(m.threads));
  assert.deepEqual(checkLoad(m), []);
  // No chunks held for the GC: the worker's JS side is a few MB (53-85 MB when each read made
  // a new chunk), and the whole renderer within 1.1 × the goal: 1.070-1.080 × in this spec's
  // runs (load average 9-14), 1.083-1.392 × while the stream's last chunks were still resident
  // during the build (1.29-1.38 × when each read made a new chunk). The margin, ~6 MB, is
  // about the spread of the resident memory after the load seen under load (293-301 MB).
  assert.ok(m.worker.js < 0.1 * m.file, `the worker's JS heap and buffers ${m.worker.js}, file ${m.file}`);
  assert.ok(m.renderer.peakRise <= 1.1 * goal(m), `the renderer rose ${m.renderer.peakRise} (${(m.renderer.peakRise / goal(m)).toFixed(3)} × the goal ${goal(m)}; transient above the end ${m.renderer.transient})`);
  // The wasm memory is deterministic: what it holds beyond the plan is 11.0 MB (14.4 MB when
  // the load copied the tokenizer's arrays, below the weights for good).
  const plan = m.memory.weights + m.memory.kv + m.memory.compute;
  assert.ok(m.wasmMemory.now - plan <= 12 * MIB, `wasm memory ${m.wasmMemory.now}, plan ${plan}`);
});
