// Where a wasm decode step's time goes, in Node (V8, as Chromium), one thread, no worker:
//   node bench/wasm-decode.mjs profile PKG MODEL [TOKENS] [NSEQ]   the CPU backend's per-node
//       profile (ms per decode step by node class and op, `ggweb bench --profile`'s table), the
//       step's wall time step to step, and what is outside the graph (wall minus the nodes'
//       sum); NSEQ > 1: `n` sequences a step (`npm run bench`'s nseq section: sampled at
//       temperature 0.8, as there, for every NSEQ given; without it greedy); and the
//       median round's sampled ids (to compare builds: the same file gives the same ids)
//   node bench/wasm-decode.mjs kernels PKG [REPS] [COLS]   the decode kernels alone (packed; Q4_0 in ggml's layout) on
//       the 124M shape's matrices, in cache (one copy) and from memory (copies past 256 MiB):
//       GB/s of weights; COLS (1 to 4, default 1) rows of activations a product (a decode step
//       of that many sequences)
// PKG: a wasm-bindgen build folder (web/pkg, web/pkg-relaxed); MODEL: a GGUF path. The hidden
// exports it calls are in crate/bindings/bench.rs. 64 greedy tokens after 64 fixed ids, as
// `npm run bench`'s native section; Node 20 needs --experimental-wasm-relaxed-simd for the
// relaxed build.
import { readFileSync, openSync, readSync, closeSync, fstatSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [mode, pkgDir, ...rest] = process.argv.slice(2);
if (!['profile', 'kernels'].includes(mode) || !pkgDir) {
  console.error('usage: node bench/wasm-decode.mjs profile PKG MODEL [TOKENS] [NSEQ] | kernels PKG [REPS] [COLS]');
  process.exit(2);
}
const pkg = resolve(pkgDir);
const m = await import(pathToFileURL(`${pkg}/ggweb_core.js`).href);
await m.default({ module_or_path: readFileSync(`${pkg}/ggweb_core_bg.wasm`) });
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

if (mode === 'kernels') {
  const reps = Number(rest[0] ?? 10);
  const cols = Number(rest[1] ?? 1);
  // [name, type, k, m]: a Q8_0 model's matrices, and Q4_0's and Q4_K_M's (Q4_K; Q6_K for
  // ffn_down half the layers and the output). Q4_0 stays in ggml's layout on wasm, so
  // `mul_mat` hands its kernel blocks of ~128 KiB of rows (up to 256, a multiple of 4): the same here.
  const shapes = [['attn_qkv', 768, 2304], ['attn_output', 768, 768], ['ffn_up', 768, 3072], ['ffn_down', 3072, 768], ['output', 768, 50257 - (50257 % 4)]];
  const rows = [];
  for (const ty of ['q8_0', 'q4_0', 'q4_K', 'q6_K']) {
    for (const [name, k, mm] of shapes) {
      const block = ty === 'q4_0' ? Math.min(mm, Math.floor(Math.min(256, Math.max(4, Math.floor((128 * 1024) / ((k / 32) * 18)))) / 4) * 4) : 0;
      const bytes1 = m._benchMatvec(ty, k, mm, 1, 1, block, cols)[1];
      const out = { ty, name, k, m: mm, mb: bytes1 / 2 ** 20 };
      for (const [where, copies] of [['cache', 1], ['memory', Math.max(2, Math.ceil(256 * 2 ** 20 / bytes1))]]) {
        const r = Math.max(1, Math.round((reps * (where === 'cache' ? 20 : 1) * 64 * 2 ** 20) / (bytes1 * copies)));
        let best = 0;
        for (let i = 0; i < 3; i++) {
          const [secs, bytes] = m._benchMatvec(ty, k, mm, copies, r, block, cols);
          best = Math.max(best, bytes / secs / 1e9);
        }
        out[where] = best;
      }
      rows.push(out);
      console.log(`${ty} ${name} ${k}x${mm} (${out.mb.toFixed(2)} MiB), ${cols} row(s) of b: in cache ${out.cache.toFixed(1)} GB/s, from memory ${out.memory.toFixed(1)} GB/s`);
    }
  }
  process.exit(0);
}

const [modelPath, tokArg, seqArg] = rest;
const nTok = Number(tokArg ?? 64);
// Sequences a step; with NSEQ given (even 1) sampled as the nseq section samples.
const nSeq = Number(seqArg ?? 1);
const sampling = seqArg === undefined ? { temperature: 0 } : { temperature: 0.8, ...(nSeq > 1 ? { n: nSeq } : {}) };
m._debugProfileNext(true);
const loader = new m.WasmLoader({ backend: 'cpu', nCtx: 256, nThreads: 1 });
const fd = openSync(modelPath, 'r');
const size = fstatSync(fd).size;
const buf = new Uint8Array(2 << 20);
for (let off = 0; off < size;) {
  const n = readSync(fd, buf, 0, buf.length, off);
  loader.feed(buf.subarray(0, n));
  off += n;
}
closeSync(fd);
const model = loader.finish();
const nVocab = 50257;
const ids = Uint32Array.from({ length: 64 }, (_, i) => (i * 2654435761 + 12345) % nVocab);

async function gen(n, profile) {
  model.start(ids, { maxTokens: n, seed: 1, ignoreEos: true, ...sampling });
  while (!(await model.prompt_step())) {}
  // The first step's items come from the prompt's logits.
  let first;
  for (let j = 0; j < nSeq; j++) first = await model.next();
  m._debugProfile(); // drop the prompt's nodes
  const steps = [];
  const tokens = [first.token];
  let c0 = cpu(), t = performance.now();
  for (let k = 1, item = first; k < n && item; k++) {
    for (let j = 0; j < nSeq && item; j++) {
      item = await model.next();
      if (item) tokens.push(item.token);
    }
    const t2 = performance.now();
    steps.push(t2 - t);
    t = t2;
  }
  const cpuS = cpu() - c0;
  const prof = m._debugProfile();
  return { first, steps, cpuS, prof, tokens };
}
await gen(8);
const rounds = [];
for (let r = 0; r < 3; r++) rounds.push(await gen(nTok + 1));
// The median round by wall time per token.
rounds.sort((a, b) => a.steps.reduce((x, y) => x + y) - b.steps.reduce((x, y) => x + y));
const { steps, cpuS, prof, tokens } = rounds[1];
// The greedy ids, to compare builds (every round must give the same).
if (rounds.some((r) => r.tokens.join() !== tokens.join())) console.log('tokens differ between rounds!');
const n = steps.length;
const wall = steps.reduce((x, y) => x + y) / n;
const byClass = new Map();
const byOp = new Map();
for (const e of prof) {
  const ms = (e.secs * 1e3) / n;
  byClass.set(`${e.class} | ${e.op}`, (byClass.get(`${e.class} | ${e.op}`) ?? 0) + ms);
  byOp.set(e.op, (byOp.get(e.op) ?? 0) + ms);
}
const nodes = [...byOp.values()].reduce((x, y) => x + y, 0);
console.log(`${pkgDir} ${modelPath}: ${n} decode steps of ${nSeq} sequence(s) (median of 3 rounds): ${(1e3 / wall).toFixed(1)} steps/s wall, ${(n / cpuS).toFixed(1)} steps/CPU-s`);
console.log(`tokens (${tokens.length}): ${tokens.join(' ')}`);
console.log(`ms per step: step to step ${wall.toFixed(3)}, nodes ${nodes.toFixed(3)}, outside the nodes ${(wall - nodes).toFixed(3)}`);
console.log('| class | op | ms/step | % of step |\n|---|---|--:|--:|');
for (const [k, ms] of [...byClass].sort((a, b) => b[1] - a[1])) console.log(`| ${k} | ${ms.toFixed(3)} | ${((100 * ms) / wall).toFixed(1)} |`);
console.log('| op | ms/step | % of step |\n|---|--:|--:|');
for (const [k, ms] of [...byOp].sort((a, b) => b[1] - a[1])) console.log(`| ${k} | ${ms.toFixed(3)} | ${((100 * ms) / wall).toFixed(1)} |`);
model.free();
