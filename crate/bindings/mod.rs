//! JavaScript bindings (wasm-bindgen), compiled only for wasm32 with `std`.
//!
//! ```ignore
//! // From JS, after `await init()` on the generated web/pkg/ggweb.js:
//! import init, { version, init_panic_hook } from './pkg/ggweb.js';
//! await init();
//! init_panic_hook();          // Rust panics show up as console errors with a message
//! console.log(version());     // "0.1.0"
//! ```
//!
//! The JS layer (web/ggweb.js, web/worker.js) is written against this module's surface:
//! `version`, `init_panic_hook`, and the model-facing `WasmLoader` / `WasmModel`.

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
