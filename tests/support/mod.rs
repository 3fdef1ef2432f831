//! What the test crates share. Each native test crate (tests/<layer>/main.rs) includes this
//! whole module (`#[path = "../support/mod.rs"] mod support;`); a browser test file
//! (tests/wasm_*.rs, ...) declares only the parts it uses (`mod support { pub mod rng; }`).
//! The modules refer to each other as `crate::support::…`.
//!
//! - `rng`: the tests' one random number generator; `eval`: a synchronous `decode` for tests;
//! - `fixtures`: the reference models' folder (`GGWEB_MODELS_DIR`), Hugging Face's outputs,
//!   raw GGUF bytes;
//! - `tensors`: random tensors and the CPU's bit-identity checks (the ops' f64 references
//!   are tests/backend_ops/suite.rs); `simd_checks`: the checks of every SIMD implementation;
//! - `kquants`: the llama.cpp-made quantization mixes; `tiny_gpt2`: a tiny GPT-2 GGUF written
//!   in memory; `bench_gpt2`: GPT-2-shaped models of any size with seeded random weights;
//! - `sched`: the tiny model loaded whole or split, and one reference run; `host_backend`: a
//!   stand-in "GPU" backend in host memory (also used by the crate's sched unit tests and the
//!   model_split fuzz target, by path); `gpu`: the native WebGPU backend; `memory`: peak RSS
//!   and a model loaded under a budget.
#![allow(dead_code)]

pub mod bench_gpt2;
pub mod eval;
pub mod fixtures;
#[cfg(feature = "webgpu")]
pub mod gpu;
pub mod grad_ref;
pub mod host_backend;
pub mod kquants;
pub mod memory;
pub mod rng;
pub mod sched;
pub mod simd_checks;
pub mod tensors;
pub mod tiny_gpt2;
pub mod tl_ref;
pub mod train_ref;
