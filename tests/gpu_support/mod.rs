// The native WebGPU backend for the tests that need one (tests/webgpu_ops.rs,
// tests/webgpu_load.rs, tests/sched_webgpu.rs; included with `mod`).
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
