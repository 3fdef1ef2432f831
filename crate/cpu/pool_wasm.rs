//! How the thread pool starts a thread in the threaded wasm build (`+atomics`, shared
//! memory; web/pkg-threads/): a Web Worker that instantiates this same module on the same
//! memory and calls back into Rust.
//!
//! ```ignore
//! // crate/cpu/pool.rs, compiled for wasm32 with +atomics:
//! let pool = ThreadPool::new(2);    // asks web/cpu-thread.js (spawnThread) for one Web Worker
//! pool.run(100, &|j| { /* ... */ }); // correct at once; parallel once the worker is up
//! ```
//!
//! `spawn` boxes the worker's closure, records its address, and hands the address,
//! `wasm_bindgen::module()` and `wasm_bindgen::memory()` to JS. The Web Worker runs
//! wasm-bindgen's `init({ module_or_path, memory })` (which gives the new thread its own
//! stack and TLS) and then [`ggweb_thread_entry`] with the address; when the closure
//! returns (the pool was dropped) the worker frees its stack and closes.
//!
//! Waiting (`Mutex`, `Condvar`: `memory.atomic.wait32`) is allowed in Web Workers but not
//! on a page's main thread, so engine.js uses this build only inside its worker.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use wasm_bindgen::prelude::*;

#[wasm_bindgen(module = "/web/cpu-thread.js")]
extern "C" {
    /// Starts a Web Worker that runs `ggweb_thread_entry(ptr)`; throws when the browser
    /// cannot start one.
    #[wasm_bindgen(catch, js_name = spawnThread)]
    fn spawn_thread(module: JsValue, memory: JsValue, ptr: usize) -> Result<(), JsValue>;
}

type Entry = Box<dyn FnOnce() + Send>;

/// Addresses of closures handed to JS and not yet claimed by their worker: the exported
/// entry takes only these, so a stray call with any other number does nothing.
// `usize`: a 32-bit address on wasm32, a 64-bit one on a Memory64 build (a JS number
// either way: wasm-bindgen passes a wasm64 `usize` as one, exact below 2^53).
static PENDING: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static TRAPPED: AtomicBool = AtomicBool::new(false);
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Nothing to join: a Web Worker ends by itself once its closure returns.
pub(super) struct Handle;

pub(super) fn spawn(_i: usize, f: Entry) -> Result<Handle, String> {
    let ptr = Box::into_raw(Box::new(f)) as usize;
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).push(ptr);
    match spawn_thread(wasm_bindgen::module(), wasm_bindgen::memory(), ptr) {
        Ok(()) => Ok(Handle),
        Err(e) => {
            if take_pending(ptr) {
                // SAFETY: `ptr` came from Box::into_raw above and no worker claimed it.
                drop(unsafe { Box::from_raw(ptr as *mut Entry) });
            }
            Err(e.as_string().unwrap_or_else(|| format!("{e:?}")))
        }
    }
}

fn take_pending(ptr: usize) -> bool {
    let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    match pending.iter().position(|&p| p == ptr) {
        Some(i) => {
            pending.swap_remove(i);
            true
        }
        None => false,
    }
}

/// Internal (web/cpu-thread.js): runs the closure `spawn` registered at `ptr` on the
/// calling Web Worker, returning when the pool shuts down. Any other `ptr` is refused.
#[wasm_bindgen]
pub fn ggweb_thread_entry(ptr: usize) -> Result<(), JsValue> {
    if !take_pending(ptr) {
        return Err(JsValue::from_str("ggweb_thread_entry: not a pending thread"));
    }
    // SAFETY: `ptr` was registered by `spawn` from Box::into_raw and is claimed once.
    let f = unsafe { Box::from_raw(ptr as *mut Entry) };
    RUNNING.fetch_add(1, Ordering::AcqRel);
    f();
    RUNNING.fetch_sub(1, Ordering::AcqRel);
    Ok(())
}

/// Internal (web/cpu-thread.js): a worker's wasm trapped (a panic) inside a job. The job
/// will never be counted done, so the thread waiting for it fails instead of hanging.
#[wasm_bindgen]
pub fn ggweb_thread_trapped() {
    TRAPPED.store(true, Ordering::Release);
}

pub(super) fn a_worker_trapped() -> bool {
    TRAPPED.load(Ordering::Acquire)
}

/// Pool workers (Web Workers) running in this module now, over every pool.
pub fn workers_running() -> usize {
    RUNNING.load(Ordering::Acquire)
}
