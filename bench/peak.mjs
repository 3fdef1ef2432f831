// One core's ceilings, natively and in wasm, on this CPU: FMA issue rate (GFLOP/s) at 512, 256
// and 128 bits natively and with SIMD128 in Node and Chromium (relaxed `f32x4.relaxed_madd`
// and the plain build's multiply then add), and one thread's read rate (GB/s, one stream and four side by side). A wasm kernel
// cannot beat these; BENCHMARKS.md compares the training and decode ratios of issue #38 to them.
//
//   node bench/peak.mjs [ROUNDS]        (best of ROUNDS, default 5; CHROMIUM=path as bench.mjs)
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cpus, loadavg } from 'node:os';
import { chromium } from 'playwright-core';

const ROOT = resolve(fileURLToPath(import.meta.url), '../..');
const CRATE = join(ROOT, 'bench', 'peak');
const TARGET = join(ROOT, 'target', 'peak');
const rounds = Number(process.argv[2] ?? 5);
const cargo = (args, env = {}) =>
  execFileSync('cargo', args, { cwd: CRATE, stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, CARGO_TARGET_DIR: TARGET, ...env } });

cargo(['build', '--release', '--bin', 'peak']);
cargo(['build', '--release', '--lib', '--target', 'wasm32-unknown-unknown'], { RUSTFLAGS: '-C target-feature=+simd128,+relaxed-simd' });
const wasm = readFileSync(join(TARGET, 'wasm32-unknown-unknown', 'release', 'ggweb_peak.wasm'));

const rows = execFileSync(join(TARGET, 'release', 'peak'), [String(rounds)], { encoding: 'utf8' })
  .trim().split('\n').map((l) => JSON.parse(l));

// Runs in Node and, serialised, in the page: the best of `rounds` for each export.
async function wasmCeilings(bytes, rounds) {
  const { instance } = await WebAssembly.instantiate(bytes);
  const x = instance.exports;
  const n = 20_000_000;
  const best = (f) => { let b = 0; for (let r = 0; r < rounds + 1; r++) b = Math.max(b, f()); return b; };
  const time = (f) => { const t = performance.now(); f(); return (performance.now() - t) / 1e3; };
  const len = 256 << 20;
  const p = x.grow(len / 65536 + 1);
  new Uint8Array(x.memory.buffer, p, len).fill(7);
  return [
    { what: 'fma 128-bit (relaxed_madd)', gflops: best(() => n * 12 * 8 / time(() => x.madd_relaxed(n)) / 1e9) },
    { what: 'mul+add 128-bit (plain)', gflops: best(() => n * 12 * 8 / time(() => x.madd_plain(n)) / 1e9) },
    { what: 'read, 1 stream(s)', gbs: best(() => len / time(() => x.stream(p, len, 1)) / 1e9) },
    { what: 'read, 4 stream(s)', gbs: best(() => len / time(() => x.stream(p, len, 4)) / 1e9) },
  ];
}

try {
  for (const r of await wasmCeilings(wasm, rounds)) rows.push({ ...r, what: `node ${process.versions.v8} ${r.what}` });
} catch (e) {
  // V8 before 11.4 compiles relaxed SIMD only behind a flag (Node 20).
  console.log(`node ${process.versions.v8}: ${e.message.split('\n')[0]}`);
}
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--headless=new'] });
try {
  const page = await browser.newPage();
  const out = await page.evaluate(
    async ([src, b64, rounds]) => {
      const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      return (0, eval)(`(${src})`)(bytes, rounds);
    },
    [wasmCeilings.toString(), wasm.toString('base64'), rounds],
  );
  for (const r of out) rows.push({ ...r, what: `chromium ${browser.version()} ${r.what}` });
} finally {
  await browser.close();
}

console.log(`${cpus()[0].model}, load ${loadavg().map((l) => l.toFixed(1)).join(' ')}, best of ${rounds}`);
for (const r of rows) console.log(`  ${r.what.padEnd(58)} ${r.gflops ? `${r.gflops.toFixed(1)} GFLOP/s` : `${r.gbs.toFixed(1)} GB/s`}`);
