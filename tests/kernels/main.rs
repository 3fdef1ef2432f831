//! Native tests of the CPU kernels: every op against f64 references, the SIMD
//! implementations, the block quantization formats against PyPI `gguf` (also run in the
//! browser: tests/browser/main.rs's `quants`), and mul_mat on every weight type of llama.cpp's mixes. One
//! test binary; each module is a former tests/*.rs file.
//!
//! `cargo test --test kernels [FILTER]`, e.g. `cargo test --test kernels quants::`.
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test target for wasm32

#[path = "../support/mod.rs"]
mod support;

mod kquants_cpu;
mod ops;
mod quants;
