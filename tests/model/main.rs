//! Native tests of the model: GPT-2 against Hugging Face and llama.cpp on the reference
//! files, the session core (score, trace, generation), the F16 KV cache, the scheduler's
//! layer splits, the tokenizer, and GPT-2 medium's shape at size. One test binary; each
//! module is a former tests/*.rs file.
//!
//! `cargo test --test model [FILTER]`, e.g. `cargo test --test model inside::`.
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test target for wasm32

#[path = "../support/mod.rs"]
mod support;

mod abuse;
mod backward;
mod checkpoint;
mod export;
mod gpt2_fixtures;
mod gpt2_shared;
mod grad;
mod inside;
mod kquants_llamacpp;
mod kv_type;
mod lora;
mod nseq;
mod repack;
mod sae_stream;
mod scale_medium;
mod sched;
mod start_layer;
mod tl_hooks;
mod tl_score;
mod tokenizer;
mod train;
