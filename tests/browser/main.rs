//! The browser test crate: everything that runs under wasm-bindgen-test in a headless
//! browser, one wasm module built and linked once (scripts/test.sh step 4, Chromium and
//! Firefox through `wasm-pack test`; docs/testing.md). A module per subject:
//!
//! - `smoke`: the tensor core and the bindings in a browser page
//! - `simd`: the simd128 kernels' own checks (dots, tiles, batched rows)
//! - `quants`: tests/kernels/quants.rs (natively in the `kernels` crate), SIMD128 against scalar
//! - `backend_ops`: tests/backend_ops/suite.rs's op cases on the wasm CPU and WebGPU
//! - `model`: the model bindings against Hugging Face's outputs
//! - `kquant_mixes`: the llama.cpp-made quantization mixes against llama.cpp's logits
//! - `train`: `model.train`'s core against PyTorch (tests/support/train_ref.rs)
//! - `webgpu`, `webgpu_sched`: the WebGPU backend, GPT-2 split between WebGPU and the CPU
//!
//! ```text
//! wasm-pack test --headless --chrome -- --test browser              # all of it
//! wasm-pack test --headless --chrome -- --test browser -- quants::  # one module (a name filter)
//! ```
//!
//! tests/wasm_memory.rs stays a crate of its own: it measures the memory's high-water mark
//! after one load, which other tests in the same module would raise.
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// The parts of tests/support/ that compile on wasm32 and that these tests use.
#[path = "../support"]
mod support {
    pub mod eval;
    pub mod kquants;
    pub mod rng;
    pub mod simd_checks;
    pub mod tensors;
    pub mod train_ref;
}

mod backend_ops;
mod kquant_mixes;
mod model;
#[path = "../kernels/quants.rs"]
mod quants;
mod repack;
mod simd;
mod smoke;
mod train;
#[cfg(feature = "webgpu")]
mod webgpu;
#[cfg(feature = "webgpu")]
mod webgpu_sched;
