//! ggweb: GPT-2 in the browser on ggml's memory model.
//!
//! The crate follows ggml's concepts one module each (see ARCHITECTURE.md):
//! [`types`] and [`tensor`] (headers, strides, contexts), [`ops`] (graph-building ops),
//! [`graph`], [`backend`] (traits by role), [`cpu`] (the CPU backend: scalar, x86 and
//! wasm SIMD128 kernels), [`allocator`] (tallocr, gallocr; in `crate/alloc/`), [`quants`] (block formats),
//! [`gguf`] (streaming reader, writer), [`tokenizer`], [`model`] (GPT-2), [`sched`] (one graph
//! over several backends).
//!
//! The tensor core builds without `std` (`--no-default-features`): only `alloc` is needed.
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

// `alloc` is the name of the core allocation crate, so the folder crate/alloc/ is the
// module `allocator` (ggml-alloc: tallocr, gallocr).
#[path = "alloc/mod.rs"]
pub mod allocator;
pub mod backend;
mod backward;
#[cfg(all(target_arch = "wasm32", feature = "std"))]
pub mod bindings;
#[cfg(feature = "std")]
pub mod common;
pub mod cpu;
pub mod gguf;
pub mod graph;
pub mod model;
pub mod ops;
pub mod quants;
pub mod sched;
pub mod tensor;
pub mod tokenizer;
#[cfg(all(target_arch = "wasm32", feature = "tokenizer-wasm"))]
mod tokenizer_wasm;
#[cfg(feature = "std")]
pub mod typed;
pub mod types;

// The unit tests include test support written against the crate's public name
// (tests/support/host_backend.rs).
#[cfg(test)]
extern crate self as ggweb;

/// The WebGPU backend (std builds; a typed `Unavailable` error without the `webgpu` feature).
#[cfg(feature = "std")]
pub mod webgpu;

pub use graph::Graph;
pub use tensor::{Context, ContextParams, Op, Tensor};
pub use types::GgmlType;

/// What a `no_std` cdylib on wasm32 must supply itself: an allocator and a panic handler
/// (the tokenizer entry's build links std through wasm-bindgen, which brings both).
#[cfg(all(not(feature = "std"), not(feature = "tokenizer-wasm"), target_arch = "wasm32"))]
mod no_std_runtime {
    #[global_allocator]
    static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo) -> ! {
        core::arch::wasm32::unreachable()
    }
}
