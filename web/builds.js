// Where ggweb's six wasm builds are, written so that bundlers can see them.
//
// Vite and webpack follow only literal references: an `import('./pkg/…')` of a string and a
// `new URL('./pkg/…', import.meta.url)`. Each such reference below makes the bundler emit the
// glue module and the wasm file and rewrite the path to where it put them, so an app that
// imports 'ggweb' needs no bundler configuration. Computed paths (a folder name in a variable)
// would be invisible to them, hence one entry per build, spelled out.
//
// A custom deployment that passes `coreUrl` to Model.load does not use this table.
//
// Below the table: the choice between the builds (threads where the page and browser allow
// them, relaxed SIMD where the engine validates it) and loadCore, which imports and
// initializes one of them.
import { GgwebError } from './errors.js';
import { show } from './input.js';
import { nodeFs, wasmSource } from './node-fs.js';

export { nodeFs, wasmSource };

/** Build folder → { glue(): the glue module, wasm(): URL of its .wasm }. */
export const BUILDS = Object.freeze({
  pkg: {
    glue: () => import('./pkg/ggweb_core.js'),
    wasm: () => new URL('./pkg/ggweb_core_bg.wasm', import.meta.url),
  },
  'pkg-relaxed': {
    glue: () => import('./pkg-relaxed/ggweb_core.js'),
    wasm: () => new URL('./pkg-relaxed/ggweb_core_bg.wasm', import.meta.url),
  },
  'pkg-threads': {
    glue: () => import('./pkg-threads/ggweb_core.js'),
    wasm: () => new URL('./pkg-threads/ggweb_core_bg.wasm', import.meta.url),
  },
  'pkg-threads-relaxed': {
    glue: () => import('./pkg-threads-relaxed/ggweb_core.js'),
    wasm: () => new URL('./pkg-threads-relaxed/ggweb_core_bg.wasm', import.meta.url),
  },
  // The Memory64 build (wasm64, one thread, plain SIMD128): up to 16 GiB of CPU memory.
  'pkg-m64': {
    glue: () => import('./pkg-m64/ggweb_core.js'),
    wasm: () => new URL('./pkg-m64/ggweb_core_bg.wasm', import.meta.url),
  },
  // Its threaded twin (wasm64 + atomics + shared memory; the pool as pkg-threads').
  'pkg-m64-threads': {
    glue: () => import('./pkg-m64-threads/ggweb_core.js'),
    wasm: () => new URL('./pkg-m64-threads/ggweb_core_bg.wasm', import.meta.url),
  },
});

const coreCache = new Map();
/** Build folder → its glue module, imported statically by the caller (provideCore). */
const provided = new Map();

/**
 * Hands loadCore a build's glue module imported statically (`import * as glue from
 * './pkg/ggweb_core.js'`), for scopes where `import()` is forbidden (service workers):
 * ggweb-sw.js. It is initialized on first use, from BUILDS' wasm URL, like an imported one.
 */
export function provideCore(build, glue) {
  if (!Object.hasOwn(BUILDS, build)) throw new GgwebError('invalid', `provideCore: unknown build ${show(build)}`);
  provided.set(build, glue);
}

/**
 * Imports and initializes a wasm build (once each): one of BUILDS' folders ('pkg', …), found
 * where the bundler put it, or, for a custom deployment (`coreUrl`), the glue's URL.
 */
export function loadCore(build) {
  let p = coreCache.get(build);
  if (!p) {
    const known = Object.hasOwn(BUILDS, build) ? BUILDS[build] : null;
    const where = known ? `${build}/ggweb_core.js` : build;
    p = (async () => {
      let mod;
      try {
        // A custom URL is the caller's: bundlers are told to leave that import alone.
        mod = await (provided.get(build) ?? (known ? known.glue() : import(/* webpackIgnore: true */ /* @vite-ignore */ build)));
      } catch (e) {
        // Service workers refuse every import(): their entry (ggweb-sw.js) imports the builds statically.
        const sw = typeof ServiceWorkerGlobalScope !== 'undefined' && globalThis instanceof ServiceWorkerGlobalScope;
        const hint = sw ? "in a service worker, import from 'ggweb/sw'" : 'was the wasm built? npm run build';
        throw new GgwebError('unsupported', `could not import the wasm glue ${where} (${hint}): ${e.message}`);
      }
      try {
        if (typeof mod.default === 'function') {
          // The glue beside its wasm (wasm-bindgen's x.js → x_bg.wasm) finds it alone, except
          // from a file: URL (Node), which fetch cannot read: pass the bytes then.
          const wasm = known ? known.wasm() : new URL(build).protocol === 'file:' ? new URL(build.replace(/(\.m?js)?$/, '_bg.wasm')) : null;
          await (wasm ? mod.default({ module_or_path: await wasmSource(wasm) }) : mod.default());
        }
      } catch (e) {
        throw new GgwebError('unsupported', `could not instantiate the wasm module for ${where}: ${e.message}`);
      }
      mod.init_panic_hook?.();
      return mod;
    })();
    coreCache.set(build, p);
    p.catch(() => coreCache.delete(build));
  }
  return p;
}

/** The most CPU threads asked for (the Rust side refuses more). */
export const MAX_THREADS = 64;
/** The default thread count's cap: beyond ~4 the matrix products of small models stop gaining. */
export const DEFAULT_MAX_THREADS = 4;

/**
 * Which wasm build to load and how many CPU threads to ask for: the threaded build
 * (pkg-threads/, beside pkg/) only where it can work, i.e. in a Web Worker (waiting on a
 * lock is not allowed on a page's main thread) of a cross-origin isolated page (shared
 * memory). Returns { n, threaded, reason } — reason says why a single thread, else null.
 */
export function planThreads(nThreads) {
  const g = globalThis;
  const inWorker = typeof g.WorkerGlobalScope !== 'undefined' && g instanceof g.WorkerGlobalScope;
  const cores = Math.max(1, Number(g.navigator?.hardwareConcurrency) || 1);
  const single = (reason) => ({ n: 1, threaded: false, reason });
  if (nThreads === 1) return single('nThreads: 1 was asked for');
  if (!inWorker && g.process?.versions?.node && typeof g.document === 'undefined') {
    return single('in Node.js the CPU thread pool (Web Workers on shared memory) is not available');
  }
  if (!inWorker) return single("the model runs on the page's main thread ({ worker: false }), which must not block");
  // A shared worker (`shared: true`) gets a pool only where the browser lets it start workers
  // and gives it shared memory (Chromium 156 does neither; Firefox has no isolated shared workers).
  const inShared = typeof g.SharedWorkerGlobalScope !== 'undefined' && g instanceof g.SharedWorkerGlobalScope;
  if (inShared && (typeof g.Worker === 'undefined' || !g.crossOriginIsolated || typeof SharedArrayBuffer === 'undefined')) {
    const lacks = typeof g.Worker === 'undefined' ? 'cannot start Web Workers' : 'has no shared memory (it is not cross-origin isolated)';
    return single(`the model runs in a shared worker (shared: true), which in this browser ${lacks}: the CPU thread pool needs both`);
  }
  // Service workers have no Worker constructor, so no pool (and no `import()` of its build).
  if (typeof g.Worker === 'undefined') return single('no Worker constructor here (a service worker): the CPU thread pool needs Web Workers');
  if (!g.crossOriginIsolated) {
    return single('the page is not cross-origin isolated: serve it with the headers ' +
      'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp');
  }
  if (typeof SharedArrayBuffer === 'undefined') return single('this browser has no SharedArrayBuffer');
  const n = nThreads ?? Math.min(cores, DEFAULT_MAX_THREADS);
  if (n === 1) return single('this device reports 1 logical CPU');
  return { n, threaded: true, reason: null };
}

/**
 * A sibling build's glue beside the default one (.../pkg/x.js → .../<folder>/x.js), or null
 * when `coreUrl` is not in a folder named pkg (a custom build: no siblings known).
 */
export function variantCoreUrl(coreUrl, folder) {
  const u = new URL(coreUrl);
  const parts = u.pathname.split('/');
  if (parts.length < 2 || parts[parts.length - 2] !== 'pkg') return null;
  parts[parts.length - 2] = folder;
  u.pathname = parts.join('/');
  return u.href;
}

/** The threaded build's glue beside the single-thread one (pkg/ → pkg-threads/), or null. */
export function threadsCoreUrl(coreUrl) {
  return variantCoreUrl(coreUrl, 'pkg-threads');
}

/**
 * A module of one function, (v128, v128, v128) → f32x4.relaxed_madd of them: it validates
 * only where the browser has relaxed SIMD (Chrome 114+), whose fused multiply-add the
 * `-relaxed` builds use in their matrix-product tiles.
 */
const RELAXED_SIMD_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // \0asm, version 1
  0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b, 0x01, 0x7b, // type: (v128 ×3) → v128
  0x03, 0x02, 0x01, 0x00, // one function of that type
  0x0a, 0x0d, 0x01, 0x0b, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfd, 0x85, 0x02, 0x0b, // local.get ×3, f32x4.relaxed_madd
]);

/** Whether this engine's WebAssembly has relaxed SIMD. */
export function hasRelaxedSimd() {
  try {
    return WebAssembly.validate(RELAXED_SIMD_PROBE);
  } catch {
    return false;
  }
}

/** The `relaxedSimd` load option: true (the default) or false. */
export function relaxedSimdOption(v) {
  if (v === undefined || v === null) return true;
  if (typeof v !== 'boolean') throw new GgwebError('invalid', `relaxedSimd must be true or false, got ${show(v)}`);
  return v;
}

/**
 * A module whose only content is a 64-bit linear memory (limits flag 0x04, minimum 0 pages):
 * it validates only where the browser has Memory64 (Chrome 133+, Firefox 134+).
 */
const MEMORY64_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // \0asm, version 1
  0x05, 0x03, 0x01, 0x04, 0x00, // memory section: one memory, i64 limits, min 0
]);

/** Whether this engine's WebAssembly validates a Memory64 module. */
export function hasMemory64() {
  try {
    return WebAssembly.validate(MEMORY64_PROBE);
  } catch {
    return false;
  }
}

/** The `memory64` load option: 'auto' (the default), true (required) or false (never). */
export function memory64Option(v) {
  if (v === undefined || v === null) return 'auto';
  if (v !== 'auto' && typeof v !== 'boolean') throw new GgwebError('invalid', `memory64 must be 'auto', true or false, got ${show(v)}`);
  return v;
}

/**
 * Files from this size up load on the Memory64 build under `memory64: 'auto'`: wasm32's
 * 4 GiB would leave them under 1 GiB for the KV cache, the compute buffers and the heap
 * (GPT-2 XL at F16, 3.28 GB, is the first of the family past it; large at F32, 3.1 GB,
 * still fits wasm32 with its threads). Below it the wasm32 builds are faster: threads and
 * relaxed SIMD, which the Memory64 build does not have (yet), and no 64-bit bounds checks.
 */
export const MEMORY64_AUTO_BYTES = 3 * 1024 ** 3;

/**
 * Whether a load uses the Memory64 build: `memory64` (its option, checked), the file's size
 * when known, and the `backend` option. The Memory64 builds run on the CPU only (wgpu's
 * browser backend is wasm32-only), so `backend: 'webgpu'` keeps to the wasm32 builds, which
 * stream the weights into GPU buffers rather than into wasm memory. Returns { use, reason }
 * — reason says why not, for info().memory64Reason.
 */
export function planMemory64(memory64, total, backend) {
  const has = hasMemory64();
  if (memory64 === false) return { use: false, reason: 'memory64: false was asked for' };
  if (backend === 'webgpu') {
    const why = 'the Memory64 builds have no WebGPU backend (the wasm32 builds put the weights in GPU buffers)';
    if (memory64 === true) throw new GgwebError('unsupported', `memory64: true with backend 'webgpu': ${why}`);
    return { use: false, reason: `backend 'webgpu': ${why}` };
  }
  if (memory64 === true) {
    if (!has) throw new GgwebError('unsupported', 'memory64: true, but this browser does not validate a Memory64 module (Chrome 133+, Firefox 134+; not Safari)');
    return { use: true, reason: null };
  }
  if (!has) return { use: false, reason: 'this browser has no Memory64 (the wasm32 builds hold up to 4 GiB)' };
  if (!(total >= MEMORY64_AUTO_BYTES)) {
    return { use: false, reason: total ? `the file (${total} bytes) is under ${MEMORY64_AUTO_BYTES} bytes: the wasm32 builds are faster` : 'the file\'s size is not known before loading' };
  }
  return { use: true, reason: null };
}
