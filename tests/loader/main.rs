//! Native tests of the loader: the GGUF reader, streaming loader and writer, hostile input,
//! the memory budget checked when the header arrives, and the memory plan from the header
//! alone. One test binary; each module is a former tests/*.rs file.
//!
//! `gguf_hostile` installs this binary's global allocator, which counts each thread's live
//! bytes (every test of the binary allocates through it; only gguf_hostile reads it).
//!
//! `cargo test --test loader [FILTER]`, e.g. `cargo test --test loader gguf_hostile::`.
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test target for wasm32

#[path = "../support/mod.rs"]
mod support;

mod gguf;
mod gguf_hostile;
mod model_budget;
mod model_memory;
mod model_plan;
