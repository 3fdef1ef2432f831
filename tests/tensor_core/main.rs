//! Native tests of the tensor core: contexts, views and graphs as the design docs describe
//! them, and the allocators that place a graph's tensors in buffers. One test binary; each
//! module is a former tests/*.rs file.
//!
//! `cargo test --test tensor_core [FILTER]`, e.g. `cargo test --test tensor_core alloc::`.
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test target for wasm32

#[path = "../support/mod.rs"]
mod support;

mod alloc;
mod seed_examples;
