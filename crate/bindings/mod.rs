//! JavaScript bindings (wasm-bindgen), compiled only for wasm32 with `std`.
//!
//! ```ignore
//! // From JS, after `await init()` on the generated web/pkg/ggweb_core.js:
//! import init, { version, init_panic_hook, WasmLoader } from './pkg/ggweb_core.js';
//! await init();
//! init_panic_hook();          // Rust panics show up as console errors with a message
//! const loader = new WasmLoader({ nCtx: 128 });
//! for await (const chunk of response.body) loader.feed(chunk);
//! const model = loader.finish();               // consumes the loader
//! const ids = model.tokenize('Hello', false);  // Uint32Array
//! model.start(ids, { maxTokens: 8, temperature: 0 });
//! while (!(await model.prompt_step())) {}
//! for (let item; (item = await model.next());) out += item.text;
//! ```
//!
//! The JS layer (web/engine.js) is written against this surface: `version`,
//! `init_panic_hook`, `available_backends`, `cpu_threads`, `load_options`, `wasm_memory_bytes`, `wasm_heap_base`, `live_gpu_buffers`, [`WasmLoader`],
//! [`WasmModel`] and [`WasmInspector`] (a header's plan, before the download). Every failure is a JS `Error` whose message names what and where, with a
//! `code` property (`format`, `invalid`, `unsupported`, `internal`, `device_lost`) that engine.js turns into
//! the `GgwebError` code; bad input never panics. Values cross as JS data through
//! serde-wasm-bindgen (`model::from_js` / `model::to_js`), never as JSON text.

mod bench;
mod calls;
mod export;
mod inside;
mod inspect;
mod model;
mod train;
mod warmup;

pub use calls::methods;
pub use inside::{WasmSae, WasmSaeLoader};
pub use inspect::WasmInspector;
pub use model::{load_options, WasmLoader, WasmModel};

use wasm_bindgen::prelude::*;

/// The crate version, so the JS side can check that glue and module belong together.
#[wasm_bindgen]
pub fn version() -> String {
    String::from(env!("CARGO_PKG_VERSION"))
}

/// Routes Rust panics to `console.error` with their message (otherwise a panic is only
/// "unreachable executed"). Safe to call more than once.
#[wasm_bindgen]
pub fn init_panic_hook() {
    console_error_panic_hook::set_once();
}

/// The backends compiled into this build (`["cpu", "webgpu"]`); whether this browser has
/// an adapter is `WasmLoader.create`'s to find out.
#[wasm_bindgen]
pub fn available_backends() -> Vec<String> {
    let all = if cfg!(feature = "webgpu") { &["cpu", "webgpu"][..] } else { &["cpu"][..] };
    all.iter().map(|s| s.to_string()).collect()
}

/// WebGPU buffers this instance holds right now, all models together (0 without WebGPU):
/// after a model is freed it is back where it was before the model was loaded. For leak checks.
#[wasm_bindgen]
pub fn live_gpu_buffers() -> f64 {
    crate::webgpu::live_buffers() as f64
}

/// CPU threads of this build: `{ supported: true, workersRunning: 1, jobs: [n, w] }`
/// in the threaded build (web/pkg-threads/; `workersRunning` counts the pool's Web Workers
/// that have started, the calling thread not included; `jobs`: jobs run through the pool so
/// far, and how many of them the workers took), `{ supported: false, workersRunning: 0, jobs: [0, 0] }`
/// in the single-thread one.
#[wasm_bindgen]
pub fn cpu_threads() -> JsValue {
    #[cfg(target_feature = "atomics")]
    let (running, (jobs, on_workers)) = (crate::cpu::workers_running(), crate::cpu::pool::jobs_counts());
    #[cfg(not(target_feature = "atomics"))]
    let (running, (jobs, on_workers)) = (0, (0, 0));
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Threads {
        supported: bool,
        workers_running: usize,
        jobs: [f64; 2],
    }
    model::to_js(&Threads {
        supported: crate::cpu::CpuBackend::threads_supported(),
        workers_running: running as usize,
        jobs: [jobs as f64, on_workers as f64],
    })
}

/// Bytes of this instance's linear memory (`memory.buffer.byteLength`). It only grows: it is
/// the high-water mark of everything the module ever held at once.
#[wasm_bindgen]
pub fn wasm_memory_bytes() -> f64 {
    (crate::wasm_arch::memory_size(0) * 65536) as f64
}

/// For tests only: caps the host memory a model's later runs and saves may take beyond its
/// own buffers (`undefined`: no cap), so that a test can show what fits a small budget (a
/// checkpoint written to OPFS in pieces where the whole file is refused).
#[wasm_bindgen]
pub fn debug_set_host_headroom(bytes: Option<f64>) {
    crate::backend::host::set_headroom_for_tests(bytes.map(|b| b.max(0.0) as usize));
}

extern "C" {
    /// Placed by the linker (wasm-ld) after the static data and the stack: where the heap starts.
    static __heap_base: u8;
}

/// Bytes below the heap: the module's static data and its stack. `wasm_memory_bytes()`
/// minus this is what the heap ever took.
#[wasm_bindgen]
pub fn wasm_heap_base() -> f64 {
    // Only the symbol's address is taken (no read), which needs no unsafe.
    core::ptr::addr_of!(__heap_base) as usize as f64
}

/// A JS `Error` with `message` and a `code` property engine.js maps to a GgwebError code.
pub(crate) fn js_error(code: &'static str, message: impl core::fmt::Display) -> JsValue {
    let e = js_sys::Error::new(&message.to_string());
    // Setting a property on a fresh Error object cannot fail.
    let _ = js_sys::Reflect::set(&e, &JsValue::from_str("code"), &JsValue::from_str(code));
    e.into()
}
