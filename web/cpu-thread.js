// The CPU thread pool's Web Workers, for the threaded wasm build (web/pkg-threads/).
//
//   Rust (crate/cpu/pool_wasm.rs) imports spawnThread from this file; wasm-bindgen copies it
//   to pkg-threads/snippets/ggweb-<hash>/web/cpu-thread.js, three levels below the glue.
//
// The same file is the worker's script: a worker started with the name THREAD_NAME
// instantiates the glue's module on the shared memory it is sent (wasm-bindgen's init gives
// the new thread its own stack and TLS), then runs ggweb_thread_entry(ptr) until the pool
// shuts down. Imported anywhere else (by the glue), it only defines spawnThread.
//
// A pool thread never ends itself (no close()): it frees its stack and TLS and then idles
// until its parent, the model's worker (worker.js), is ended, which ends it too. In Chromium
// a worker ended (terminate()) while one of its own workers is closing itself is never torn
// down: about 1 load/dispose cycle in 8 left worker.js alive for good (~75 MB and 2 threads
// each), the CDP target list shows; with idle threads, 0 in 25 (tests/e2e/abuse-real.spec.mjs).
//
// The worker's URL and the glue's import are literals (not variables) because that is what
// Vite and webpack follow: they then bundle this file as a worker and emit it with the glue.
const THREAD_NAME = 'ggweb-cpu-thread';

// Started workers, kept referenced: some browsers collect a worker nothing points to.
const workers = [];

/** Starts one pool thread; throws (to Rust, as an Err) when Web Workers are unavailable. */
export function spawnThread(module, memory, ptr) {
  // The name is not a literal on purpose: webpack names a worker's chunk after a literal one,
  // and the two threaded builds' copies of this file would then overwrite each other.
  const w = new Worker(new URL('./cpu-thread.js', import.meta.url), { type: 'module', name: THREAD_NAME });
  w.onerror = (ev) => console.error(`ggweb: a CPU worker thread failed to start: ${ev.message ?? ev}`);
  w.postMessage({ ggwebThread: { module, memory, ptr } });
  workers.push(w);
}

async function runThread({ module, memory, ptr }) {
  let core;
  let exports;
  try {
    core = await import('../../../ggweb_core.js');
    exports = await core.default({ module_or_path: module, memory });
  } catch (e) {
    // The pool's caller does this thread's share: slower, still correct.
    console.error(`ggweb: a CPU worker thread could not instantiate the wasm module: ${e.message ?? e}`);
    return;
  }
  core.init_panic_hook?.();
  try {
    core.ggweb_thread_entry(ptr);
  } catch (e) {
    // A trap in a job: the job never completes, so tell the waiting thread to fail.
    console.error(`ggweb: a CPU worker thread trapped: ${e.message ?? e}`);
    core.ggweb_thread_trapped();
    return;
  }
  // The pool was dropped: free this thread's stack and TLS, then idle (see the top).
  exports.__wbindgen_thread_destroy?.();
}

if (typeof WorkerGlobalScope !== 'undefined' && self instanceof WorkerGlobalScope && self.name === THREAD_NAME) {
  self.addEventListener('message', (ev) => {
    if (ev.data && ev.data.ggwebThread) runThread(ev.data.ggwebThread);
  }, { once: true });
}
