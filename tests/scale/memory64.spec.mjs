// GPT-2 XL at F32 (6.2 GB of weights: past wasm32's 4 GiB) on the CPU in headless Chromium,
// through the Memory64 build (web/pkg-m64/), against the native CLI on the same file
// (npm run test:scale; GGWEB_SCALE_M64=0 skips it). `memory64: 'auto'` must pick that build
// for a file this size (engine.js planMemory64), Model.inspect must plan it as fitting
// (its `fits` against the build's 16 GiB, where wasm32's says no), the load must grow the
// wasm memory past 4 GiB, and the tokens and logits are native's as in scale.spec.mjs
// (the same LOGIT_BOUND and near-tie rule: F32 weights, so only the summation order differs).
//   GGWEB_GGWEB=target/release/ggweb GGWEB_SCALE_M64_MODEL=bench-xl-f32.gguf node --test tests/scale/memory64.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { DOT_MODELS, ROOT, useServerAndBrowser } from '../e2e/helpers.mjs';
import { MIB, browserRun, checkGreedy, logitDiff, nativeRun, planBytes } from '../e2e/native-vs-wasm.mjs';

const GGWEB = process.env.GGWEB_GGWEB ?? `${process.env.CARGO_TARGET_DIR ?? `${ROOT}target`}/release/ggweb`;
const NAME = process.env.GGWEB_SCALE_M64_MODEL ?? 'bench-xl-f32.gguf';
const FILE = `${DOT_MODELS}/${NAME}`;
const PROMPT = 'Hello, my name is Ada and I test GPT-2 XL in the browser.';
const N_PREDICT = 8;
const LOGIT_BOUND = 0.1;
const WASM32 = 4 * 1024 * MIB;

assert.ok(existsSync(GGWEB), `${GGWEB} is missing: cargo build --release --bin ggweb`);
assert.ok(existsSync(FILE), `.models/${NAME} is missing: bash tests/fixtures/make_scale_models.sh --types f32`);
assert.ok(existsSync(`${ROOT}web/pkg-m64/ggweb_core.js`), 'web/pkg-m64 is missing: run scripts/build-wasm.sh');

const web = useServerAndBrowser();
let nat;

test(`${NAME}: the native CLI's greedy tokens and logits; wasm32 cannot hold it`, () => {
  nat = nativeRun([GGWEB], FILE, PROMPT, N_PREDICT);
  const plan = JSON.parse(execFileSync(GGWEB, ['inspect', '--model', FILE, '--json'], { encoding: 'utf8', maxBuffer: 1 << 26 })).plan;
  console.log(`${NAME}: ${statSync(FILE).size} bytes; native greedy ${JSON.stringify(nat.tokens)}; wasm32: ${JSON.stringify(plan.wasm32)}`);
  assert.equal(plan.wasm32.ok, false, 'the file must be past what wasm32 holds, or this test proves nothing');
});

test(`${NAME} in Chromium: memory64 'auto' picks pkg-m64; native tokens and logits; memory past 4 GiB`, async () => {
  assert.ok(nat, 'the native run failed');
  const r = await browserRun(web.browser, web.server, `/dot-models/${NAME}`, { nThreads: 1, nBatch: 32 }, PROMPT, nat.promptIds, N_PREDICT);
  assert.ok(r.ok, r.message);
  const d = logitDiff(r.logits, nat.logits);
  const plan = planBytes(r.info.memory);
  console.log(`${NAME} pkg-m64: load ${(r.loadMs / 1000).toFixed(1)} s, ${N_PREDICT} tokens in ${(r.genMs / 1000).toFixed(1)} s; ` +
    `plan ${(plan / 1e6).toFixed(1)} MB; wasm memory ${(r.info.wasmMemory.afterLoad / 1e6).toFixed(1)} MB after load; ` +
    `logits max |wasm - native| ${d.max}; greedy ${JSON.stringify(r.tokens)}`);
  assert.deepEqual(r.problems, []);
  assert.equal(r.plan.memory64, true, 'Model.inspect plans it on the Memory64 build');
  assert.equal(r.plan.fits.ok, true, r.plan.fits.reason);
  assert.equal(r.info.memory64, true, r.info.memory64Reason);
  assert.equal(r.info.threads.build, 'pkg-m64');
  assert.ok(r.info.wasmMemory.afterLoad > WASM32, `wasm memory ${r.info.wasmMemory.afterLoad} after load: not past 4 GiB`);
  assert.deepEqual(r.ids, nat.promptIds);
  checkGreedy(r.tokens, nat, LOGIT_BOUND);
  assert.ok(d.max <= LOGIT_BOUND, `max |wasm - native| = ${d.max}`);
});
