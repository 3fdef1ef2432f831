//! The WebGPU backend: ggml graphs as WGSL compute dispatches, through `wgpu` (Vulkan
//! natively, the browser's WebGPU on wasm32).
//!
//! ```
//! use ggweb::backend::{Backend, BackendError};
//! use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};
//!
//! match WebGpuBackend::new(WebGpuOptions::default()) {
//!     Ok(gpu) => assert_eq!(gpu.name(), "WebGPU"),
//!     // Built without the `webgpu` feature, or no adapter on this machine.
//!     Err(e) => assert!(matches!(e, BackendError::Unavailable(_))),
//! }
//! ```
//!
//! - **Setup**: natively [`WebGpuBackend::new`] blocks (pollster) on adapter and device;
//!   in the browser use [`WebGpuBackend::new_async`] (`new` returns `Unavailable` there:
//!   the page's thread must never block). The device is requested with the adapter's own
//!   limits (maxBufferSize, maxStorageBufferBindingSize), not WebGPU's defaults.
//! - **Buffers** ([`WebGpuBufferType`]): tensors start on the storage-offset alignment;
//!   sizes are padded to 4 bytes. A tensor larger than one storage binding (GPT-2's 154 MB
//!   token_embd under a browser's 128 MiB) works for `get_rows`, `mul_mat` and `out_prod`
//!   (their src0) and `out_prod`'s and `get_rows_back`'s dst, which run in row ranges, each
//!   binding only the rows it reads or writes, and for training's element-wise nodes (add,
//!   mul, scale, an f32 copy, the optimizer steps), which run in windows of elements.
//! - **Reads**: natively `Buffer::get_bytes` maps a staging buffer and waits. In the
//!   browser the synchronous `get_bytes` cannot wait and panics with a message pointing to
//!   [`WebGpuBackend::read_tensor_async`], which works on both.
//! - **Compute**: one command encoder and one compute pass per graph; each node is one
//!   dispatch (or one per row range), or a chain of nodes one fused dispatch (`fuse.rs`: a
//!   GPT-2 layer is five); views cost nothing (each binding carries its
//!   tensor's offset and strides, in elements). Parameters of all nodes go into one
//!   uniform buffer written once per graph, selected with dynamic offsets. Pipelines are
//!   cached by (kernel file, weight type, entry point, binding layout, WGSL extensions).
//! - **Bindings**: every storage binding is read_write, since WebGPU forbids a read-only
//!   and a writable binding of one buffer in a dispatch; operands whose ranges overlap (an
//!   in-place node from the graph allocator, two views of one tensor) share one binding,
//!   since overlapping writable bindings are forbidden too (Dawn enforces it; wgpu native
//!   does not, so the browser test covers it). Eight storage bindings (WebGPU's guaranteed
//!   minimum per stage): src0..src2, dst, and four more for the fused chains' operands.
//! - **Ops**: get_rows (f32, f16, q8_0, q4_0, q4_K, q6_K), add, mul (broadcast), scale,
//!   norm, gelu, soft_max_ext (f32/f16 mask, ALiBi), diag_mask_inf, cpy/cont (f32/f16 to
//!   f32, f32/f16 to contiguous f16), mul_mat (f32, f16 and the four quantized types with
//!   f32 activations; kernels chosen per adapter, see [`MatMulKernels`]), the backward
//!   ops (backward.wgsl, out_prod.wgsl) and the optimizer steps opt_step_adamw /
//!   opt_step_sgd (opt.wgsl: training's updates, in place). Anything else:
//!   `supports_op` is false, so a scheduler keeps it on the CPU. No kernel needs
//!   `shader-f16` or subgroups: f16 data is read with `unpack2x16float`, so SwiftShader
//!   (Chromium's fallback, no `shader-f16`) runs it all. Where the adapter has them, the
//!   tiled mul_mat keeps F16 weight tiles as f16 and the mat-vec kernel reduces with
//!   `subgroupAdd` ([`WebGpuOptions::shader_f16`], [`WebGpuOptions::subgroups`]; the
//!   features are requested only when used).
//! - **Device loss**: wgpu's device-lost callback (or [`WebGpuBackend::destroy_device`],
//!   for tests) records the reason; from then on every operation (allocation, compute,
//!   read) returns [`BackendError::DeviceLost`] with it: the caller loads the model again
//!   on a new device. (The blocking `Buffer::get_bytes` has no `Result` and panics with the
//!   error: read through `Backend::tensor_get_async`, as `Gpt2::decode` does.)
//!   Uncaptured device errors are collected the same way and returned by the next operation.
//! - **Leaks**: [`live_buffers`] counts the wgpu buffers the backends hold; once a model
//!   is dropped it is back to where it was.
//!
//! Tests: `cargo test --features webgpu --test webgpu webgpu_ops::` (Vulkan: Mesa's lavapipe; set
//! `GGWEB_ALLOW_NO_GPU=1` to skip where there is no adapter) and, in headless Chromium,
//! `WASM_BINDGEN_USE_BROWSER=1 cargo test --target wasm32-unknown-unknown --test browser
//! -- webgpu::`.
//!
//! Without the `webgpu` feature the types still exist and `new` returns
//! [`BackendError::Unavailable`], so callers need no `#[cfg]`.

use crate::backend::BackendError;

/// Knobs for [`WebGpuBackend::new`]. The defaults take everything the adapter offers.
#[derive(Clone, Debug, Default)]
pub struct WebGpuOptions {
    /// Use at most this many bytes per storage binding (tests of the row-range split path;
    /// rounded down to the storage-offset alignment).
    pub max_binding_size_override: Option<u64>,
    /// Make buffers at most this large (tests of multi-buffer weight placement).
    pub max_buffer_size_override: Option<u64>,
    /// Ask for the software fallback adapter.
    pub force_fallback_adapter: bool,
    /// Which mul_mat kernels to run (tests force each kind on any adapter).
    pub mat_mul_kernels: MatMulKernels,
    /// The clock of [`WebGpuStats::encode_ms`], in milliseconds. Default: wall time
    /// (`Instant`, `performance.now()`); the CLI passes its thread-CPU clock, so that a
    /// loaded machine's waits are not counted as encoding.
    pub encode_clock: Option<fn() -> f64>,
    /// Subgroup reductions in the `Workgroup` mat-vec kernel (wgpu's `SUBGROUP` feature,
    /// native Vulkan only: wgpu does not expose it on the web yet). `None`: when the adapter
    /// has it; `Some(false)`: never (the feature is not even requested, so the workgroup
    /// tree runs); `Some(true)`: required (`Unavailable` without it). Tests force each.
    pub subgroups: Option<bool>,
    /// `shader-f16` kernels for F16 weights (f16 loads and f16 workgroup tiles, f32 sums),
    /// with the same `None` / `Some(false)` / `Some(true)` rule as `subgroups`.
    pub shader_f16: Option<bool>,
    /// In the browser: how long the adapter and the device may each take to answer before
    /// opening fails with `Unavailable` (`backend: "auto"` then runs on the CPU). A GPU
    /// process that is stuck or blocklisted mid-start never settles `requestAdapter`'s
    /// promise, and a load must not wait forever. `None`: [`DEFAULT_OPEN_TIMEOUT_MS`].
    /// Natively wgpu answers (or fails) synchronously, so there is no deadline.
    pub open_timeout_ms: Option<u32>,
}

/// The browser's default wait for `requestAdapter` and for `requestDevice`, each. Generous:
/// a first start of a real GPU's process with a cold shader cache takes a few seconds.
pub const DEFAULT_OPEN_TIMEOUT_MS: u32 = 20_000;

/// The two families of mul_mat kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatMulKernels {
    /// `PerRow` on CPU-based adapters (lavapipe, SwiftShader), `Workgroup` elsewhere.
    #[default]
    Auto,
    /// For GPUs: a workgroup per weight row (4 weights per invocation per step, a subgroup
    /// or tree reduction) when N <= 8, 64x64 output tiles (4x4 per invocation) through
    /// workgroup memory above.
    Workgroup,
    /// For CPU-based adapters: one invocation per weight row and 4 columns, no workgroup
    /// memory and no barriers (which cost them more than the arithmetic).
    PerRow,
}

/// The WebGPU backend's [`Backend::stats`](crate::backend::Backend::stats): the
/// backend-neutral counters (in `backend`, so that the no_std core can carry them).
pub use crate::backend::BackendStats as WebGpuStats;

// Layers, each using only those above it: the device (with its read-backs), tensor
// buffers, graphs as dispatches (with the fusion pass), the backend.
#[cfg(feature = "webgpu")]
mod backend;
#[cfg(feature = "webgpu")]
mod buffer;
#[cfg(feature = "webgpu")]
mod compute;
#[cfg(feature = "webgpu")]
mod device;
#[cfg(feature = "webgpu")]
mod fuse;
#[cfg(feature = "webgpu")]
mod readback;

#[cfg(feature = "webgpu")]
pub use backend::WebGpuBackend;
#[cfg(feature = "webgpu")]
pub use buffer::{WebGpuBuffer, WebGpuBufferType};
#[cfg(feature = "webgpu")]
pub use device::{kernel_sources, live_buffers, AdapterSummary};

#[cfg(not(feature = "webgpu"))]
mod disabled {
    use alloc::rc::Rc;

    use super::WebGpuOptions;
    use crate::backend::{Backend, BackendError, BufferType};
    use crate::graph::Graph;

    const WHY: &str = "ggweb was built without the `webgpu` feature";

    /// The WebGPU backend, compiled out: it cannot be constructed.
    #[derive(Clone)]
    pub struct WebGpuBackend {
        never: core::convert::Infallible,
    }

    impl WebGpuBackend {
        /// Always `Err(Unavailable)` in this build.
        pub fn new(_opts: WebGpuOptions) -> Result<WebGpuBackend, BackendError> {
            Err(BackendError::Unavailable(WHY.into()))
        }
        /// Always `Err(Unavailable)` in this build.
        pub async fn new_async(_opts: WebGpuOptions) -> Result<WebGpuBackend, BackendError> {
            Err(BackendError::Unavailable(WHY.into()))
        }
        /// Never called: no value of this type exists (the bindings' device-loss checks).
        pub fn lost_reason(&self) -> Option<alloc::string::String> {
            match self.never {}
        }
        /// Never called: no value of this type exists.
        pub fn destroy_device(&self) {
            match self.never {}
        }
    }

    impl Backend for WebGpuBackend {
        fn name(&self) -> &str {
            match self.never {}
        }
        fn buffer_type(&self) -> Rc<dyn BufferType> {
            match self.never {}
        }
        fn graph_compute(&self, _graph: &Graph) -> Result<(), BackendError> {
            match self.never {}
        }
    }
}

#[cfg(not(feature = "webgpu"))]
pub use disabled::WebGpuBackend;

/// Without the `webgpu` feature no GPU buffer ever exists.
#[cfg(not(feature = "webgpu"))]
pub fn live_buffers() -> usize {
    0
}

/// `Unsupported` for `node` with a reason (shared by the planner and the buffers).
#[allow(dead_code)]
pub(crate) fn unsupported(node: &crate::tensor::Tensor, reason: impl Into<alloc::string::String>) -> BackendError {
    BackendError::Unsupported { node: node.name(), reason: reason.into() }
}

#[cfg(all(test, not(feature = "webgpu")))]
mod tests {
    use super::*;

    #[test]
    fn compiled_out_backend_is_a_typed_error() {
        match WebGpuBackend::new(WebGpuOptions::default()) {
            Err(BackendError::Unavailable(why)) => assert!(why.contains("`webgpu` feature"), "{why}"),
            Err(e) => panic!("expected Unavailable, got {e}"),
            Ok(_) => panic!("a WebGPU backend without the feature"),
        }
    }
}
