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
// wasm64 (the Memory64 build, nightly): its SIMD128 intrinsics are the same functions as
// wasm32's under `core::arch::wasm64`, still unstable there.
#![cfg_attr(target_arch = "wasm64", feature(simd_wasm64))]

extern crate alloc;

// `alloc` is the name of the core allocation crate, so the folder crate/alloc/ is the
// module `allocator` (ggml-alloc: tallocr, gallocr).
#[path = "alloc/mod.rs"]
pub mod allocator;
pub mod backend;
mod backward;
#[cfg(all(target_family = "wasm", feature = "std"))]
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
#[cfg(all(target_family = "wasm", feature = "tokenizer-wasm"))]
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

/// The wasm intrinsics of this build's target (`wasm32`, or `wasm64` for Memory64): one name
/// for the SIMD128 kernels and the memory size queries.
#[cfg(target_arch = "wasm32")]
pub(crate) use core::arch::wasm32 as wasm_arch;
#[cfg(target_arch = "wasm64")]
pub(crate) use core::arch::wasm64 as wasm_arch;

pub use graph::Graph;
pub use tensor::{Context, ContextParams, Op, Tensor};
pub use types::GgmlType;

/// What a `no_std` cdylib on wasm32 must supply itself: an allocator and a panic handler
/// (the tokenizer entry's build links std through wasm-bindgen, which brings both).
#[cfg(all(not(feature = "std"), not(feature = "tokenizer-wasm"), target_family = "wasm"))]
mod no_std_runtime {
    #[global_allocator]
    static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo) -> ! {
        crate::wasm_arch::unreachable()
    }
}
