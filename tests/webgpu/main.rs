//! Native tests of the WebGPU backend (wgpu on Vulkan; Mesa's lavapipe in CI): every kernel
//! against references, GPT-2 split between WebGPU and the CPU, and weights streamed into
//! WebGPU buffers. One test binary (needs the `webgpu` feature); each module is a former
//! tests/*.rs file. Without a Vulkan adapter the tests fail with a message;
//! `GGWEB_ALLOW_NO_GPU=1` turns that into a printed skip.
//!
//! webgpu_load counts the host bytes and WebGPU buffers of the whole process: its tests hold
//! `support::gpu::alone()`, every other test here `support::gpu::shared()`.
//!
//! `cargo test --test webgpu [FILTER]`, e.g. `cargo test --test webgpu webgpu_ops::`.
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test target for wasm32

#[path = "../support/mod.rs"]
mod support;

#[path = "../backend_ops/suite.rs"]
mod suite;

mod sched_webgpu;
mod tl_hooks_webgpu;
mod train_webgpu;
mod webgpu_load;
mod webgpu_ops;
