//! The `ggweb` command line, run as a user would: score, trace, generate, and inspect on
//! the reference models and on broken files. One test binary; each module is a former
//! tests/*.rs file.
//!
//! `cargo test --test cli [FILTER]`, e.g. `cargo test --test cli gguf_cli::`.
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test target for wasm32

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod gguf_cli;
mod inside_cli;
mod train_cli;
