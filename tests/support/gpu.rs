//! The native WebGPU backend for the tests that need one (tests/webgpu/), and the lock that
//! keeps tests/webgpu/webgpu_load.rs alone in its process.
#![allow(dead_code)]

use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};

/// The WebGPU backend, or None (printed) when there is no adapter and the environment allows
/// it (`GGWEB_ALLOW_NO_GPU=1`). CI installs lavapipe, so a missing adapter is a failure by
/// default, never a silent skip.
pub fn webgpu(opts: WebGpuOptions) -> Option<WebGpuBackend> {
    match WebGpuBackend::new(opts) {
        Ok(b) => Some(b),
        Err(e) if std::env::var("GGWEB_ALLOW_NO_GPU").as_deref() == Ok("1") => {
            eprintln!("SKIPPED: no WebGPU adapter ({e}); GGWEB_ALLOW_NO_GPU=1");
            None
        }
        Err(e) => panic!(
            "no WebGPU adapter: {e}\n  install Mesa's Vulkan drivers (Debian: mesa-vulkan-drivers, lavapipe) \
             or set GGWEB_ALLOW_NO_GPU=1 to skip the WebGPU tests"
        ),
    }
}

/// tests/webgpu/webgpu_load.rs counts the host bytes (`live_host_bytes`) and WebGPU buffers
/// (`live_buffers`) of the whole process, which the other tests of its crate allocate too:
/// its tests take [`alone`], every other test of tests/webgpu/ takes [`shared`], so while one
/// of them runs nothing else does (as when each file was a test binary of its own).
static PROCESS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by a test of tests/webgpu/ that may run beside others (but not beside webgpu_load's).
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    PROCESS.read().unwrap_or_else(|p| p.into_inner())
}

/// Held by a test of tests/webgpu/webgpu_load.rs: no other test of the process runs meanwhile.
pub fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    PROCESS.write().unwrap_or_else(|p| p.into_inner())
}
