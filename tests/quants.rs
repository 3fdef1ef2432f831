//! The block quantization tests of tests/kernels/quants.rs in the browser (wasm-bindgen-test,
//! headless Chromium and Firefox: scripts/test.sh), where the SIMD128 kernels are checked
//! against the scalar reference; natively they run in the `kernels` test binary. Also run
//! on the relaxed-SIMD build:
//!
//! ```text
//! wasm-pack test --headless --chrome -- --test quants
//! WASM_BINDGEN_USE_BROWSER=1 RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" \
//!     cargo test --target wasm32-unknown-unknown --test quants
//! ```
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

mod support {
    pub mod rng;
}

#[path = "kernels/quants.rs"]
mod quants;
