// Loads the built glue + module in Node and calls into it: proves the optimized module
// still instantiates (wasm-opt can break wasm-bindgen output) and matches the crate version.
//   node scripts/check-wasm.mjs web/pkg
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const dir = resolve(process.argv[2] ?? 'web/pkg');
if (dir.endsWith('pkg-tokenizer')) await checkTokenizer(dir);
if (/pkg-m64(-threads)?$/.test(dir)) await checkMemory64(dir);
const glue = await import(pathToFileURL(`${dir}/ggweb_core.js`).href);
glue.initSync({ module: readFileSync(`${dir}/ggweb_core_bg.wasm`) });
glue.init_panic_hook();
const got = glue.version();
const cargo = readFileSync(new URL('../Cargo.toml', import.meta.url), 'utf8');
const want = /^version\s*=\s*"([^"]+)"/m.exec(cargo)[1];
if (got !== want) {
  console.error(`check-wasm: version() returned ${JSON.stringify(got)}, Cargo.toml says ${want}`);
  process.exit(1);
}
// What web/engine.js calls on the module: a build without one of them cannot run.
const required = ['WasmLoader', 'WasmLoader.create', 'WasmModel', 'WasmModel.prototype.next', 'WasmModel.prototype.stats', 'available_backends', 'cpu_threads', 'load_options'];
const missing = required.filter((k) => typeof k.split('.').reduce((o, p) => o?.[p], glue) !== 'function');
if (missing.length) {
  console.error(`check-wasm: ${dir}/ggweb_core.js does not export ${missing.join(', ')} (engine.js needs ${required.join(', ')})`);
  process.exit(1);
}
console.log(`check-wasm: ${dir}/ggweb_core_bg.wasm instantiates, version ${got}, exports ${required.join(', ')}`);

// A -relaxed build must really use relaxed SIMD (else it is the plain build under another
// name): Node without the flag must refuse to compile it.
if (dir.endsWith('-relaxed')) {
  const check = `process.stdout.write(String(WebAssembly.validate(require('fs').readFileSync(${JSON.stringify(`${dir}/ggweb_core_bg.wasm`)}))))`;
  const plain = execFileSync(process.execPath, ['-e', check], { encoding: 'utf8' });
  if (plain !== 'false') {
    console.error(`check-wasm: ${dir} validates without relaxed SIMD: it does not use it`);
    process.exit(1);
  }
  console.log(`check-wasm: ${dir} uses relaxed SIMD (a plain engine refuses it)`);
}

/**
 * The tokenizer entry's module (its own exports, no version()): it instantiates, and a
 * header that is not GGUF is refused with code 'format', not a trap.
 */
async function checkTokenizer(dir) {
  const glue = await import(pathToFileURL(`${dir}/ggweb_tokenizer.js`).href);
  glue.initSync({ module: readFileSync(`${dir}/ggweb_tokenizer_bg.wasm`) });
  const reader = new glue.WasmTokenizerReader(-1);
  let code = null;
  try {
    reader.feed(new TextEncoder().encode('not a GGUF file'));
  } catch (e) {
    code = e.code;
  }
  if (code !== 'format' || typeof glue.WasmTokenizer !== 'function') {
    console.error(`check-wasm: ${dir}/ggweb_tokenizer.js: a bad header gave code ${code}; WasmTokenizer is ${typeof glue.WasmTokenizer}`);
    process.exit(1);
  }
  console.log(`check-wasm: ${dir}/ggweb_tokenizer_bg.wasm instantiates and refuses a bad header as 'format'`);
  process.exit(0);
}

// The Memory64 build: Node 20's V8 cannot instantiate a 64-bit memory and table, so this
// checks what it can without running it — the module compiles where Memory64 is on
// (validated with the flag), its memory is 64-bit, and the glue exports what engine.js
// calls. tests/e2e/memory64.spec.mjs runs it in Chromium.
async function checkMemory64(dir) {
  const bytes = readFileSync(`${dir}/ggweb_core_bg.wasm`);
  const mem = memoryLimitsFlags(bytes);
  if (mem === null || (mem & 0x04) === 0) {
    console.error(`check-wasm: ${dir}/ggweb_core_bg.wasm has no 64-bit memory (limits flags ${mem})`);
    process.exit(1);
  }
  const src = readFileSync(`${dir}/ggweb_core.js`, 'utf8');
  const want = ['WasmLoader', 'WasmModel', 'available_backends', 'cpu_threads', 'load_options', 'version'];
  const missing = want.filter((k) => !new RegExp(`export (class|function) ${k}\\b`).test(src));
  if (missing.length) {
    console.error(`check-wasm: ${dir}/ggweb_core.js does not export ${missing.join(', ')}`);
    process.exit(1);
  }
  console.log(`check-wasm: ${dir}/ggweb_core_bg.wasm has a 64-bit memory (flags 0x${mem.toString(16)}), glue exports ${want.join(', ')} (not instantiated: Node 20 has no Memory64)`);
  process.exit(0);
}

/** The limits flags of the module's memory (defined or imported), or null. */
function memoryLimitsFlags(b) {
  let p = 8;
  const leb = () => { let r = 0, s = 0, x; do { x = b[p++]; r += (x & 0x7f) * 2 ** s; s += 7; } while (x & 0x80); return r; };
  const name = () => { const n = leb(); p += n; };
  while (p < b.length) {
    const id = b[p++];
    const size = leb();
    const end = p + size;
    if (id === 5) { leb(); return b[p]; }
    if (id === 2) {
      for (let n = leb(); n > 0; n--) {
        name(); name();
        const kind = b[p++];
        if (kind === 2) return b[p];
        if (kind === 0) leb(); else if (kind === 1) { p++; const f = b[p++]; leb(); if (f & 1) leb(); } else if (kind === 3) p += 2; else if (kind === 4) { p++; leb(); }
      }
    }
    p = end;
  }
  return null;
}
