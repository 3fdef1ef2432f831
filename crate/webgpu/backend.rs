//! [`WebGpuBackend`]: the `Backend` over the layers below it (device, buffer, compute).

use std::rc::Rc;

use super::buffer::{WebGpuBuffer, WebGpuBufferType};
use super::device::{AdapterSummary, Gpu};
use super::WebGpuOptions;
use crate::backend::{Backend, BackendError, BackendStats, BufferType};
use crate::graph::Graph;
use crate::tensor::Tensor;

/// The WebGPU backend. Cheap to clone handles share one device.
#[derive(Clone)]
pub struct WebGpuBackend {
    pub(crate) gpu: Rc<Gpu>,
}

impl WebGpuBackend {
    /// Natively: finds an adapter (Vulkan) and opens a device, blocking. In the browser
    /// this returns `Unavailable`: use [`WebGpuBackend::new_async`].
    pub fn new(opts: WebGpuOptions) -> Result<WebGpuBackend, BackendError> {
        #[cfg(target_family = "wasm")]
        {
            let _ = opts;
            Err(BackendError::Unavailable("in the browser use WebGpuBackend::new_async (no blocking)".into()))
        }
        #[cfg(not(target_family = "wasm"))]
        {
            pollster::block_on(Self::new_async(opts))
        }
    }

    /// Finds an adapter and opens a device without blocking (the browser's way).
    pub async fn new_async(opts: WebGpuOptions) -> Result<WebGpuBackend, BackendError> {
        Ok(WebGpuBackend { gpu: Rc::new(Gpu::create(&opts).await?) })
    }

    pub fn adapter(&self) -> &AdapterSummary {
        &self.gpu.summary
    }

    /// `Some(reason)` once the device is lost (destroyed, driver reset, browser tab
    /// policy). Every later operation on this backend then fails with
    /// [`BackendError::DeviceLost`]; a new backend (a new device) is the only way on.
    pub fn lost_reason(&self) -> Option<String> {
        self.gpu.lost_reason()
    }

    /// Destroys the device, as a real loss would take it (for tests of the recovery path:
    /// the bindings' `_debugLoseDevice`). The loss is recorded at once, so the very next
    /// operation fails with `DeviceLost`, without waiting for the browser's `device.lost`
    /// promise (which also arrives and keeps the first reason).
    pub fn destroy_device(&self) {
        self.gpu.destroy();
    }

    /// The largest buffer this backend's device has made so far (tensor, compute,
    /// parameter and read-back buffers alike), in bytes: never above maxBufferSize
    /// ([`super::AdapterSummary::max_buffer_size`], a test's override included).
    pub fn largest_buffer(&self) -> u64 {
        self.gpu.largest_buffer.get()
    }

    /// Concrete buffer type (the trait's `buffer_type()` returns it as `dyn`).
    pub fn webgpu_buffer_type(&self) -> WebGpuBufferType {
        WebGpuBufferType { gpu: self.gpu.clone() }
    }

    /// Reads `out.len()` bytes of `t` from byte `offset` of it, without blocking: the way
    /// to read results in the browser (natively it works too). `t` must live in a WebGPU
    /// buffer.
    pub async fn read_tensor_async(&self, t: &Tensor, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        let d = t.data().ok_or_else(|| super::unsupported(t, "read of an unallocated tensor"))?;
        if offset + out.len() > t.nbytes() {
            return Err(super::unsupported(
                t,
                format!("read of {} bytes at {offset} past its {} bytes", out.len(), t.nbytes()),
            ));
        }
        let buf = d.buffer.as_any().downcast_ref::<WebGpuBuffer>().ok_or_else(|| {
            super::unsupported(t, format!("not in a WebGPU buffer ({})", d.buffer.buffer_type_name()))
        })?;
        buf.read_async(d.offset + offset, out).await
    }
}

impl Backend for WebGpuBackend {
    fn name(&self) -> &str {
        "WebGPU"
    }
    fn buffer_type(&self) -> Rc<dyn BufferType> {
        Rc::new(self.webgpu_buffer_type())
    }
    fn graph_compute(&self, graph: &Graph) -> Result<(), BackendError> {
        super::compute::graph_compute(&self.gpu, graph)
    }
    fn supports_op(&self, node: &Tensor) -> bool {
        super::compute::supports_op(&self.gpu, node)
    }
    fn stats(&self) -> Option<BackendStats> {
        Some(self.gpu.stats.get())
    }
    fn tensor_get_async<'a>(
        &'a self,
        t: &'a Tensor,
        offset: usize,
        out: &'a mut [u8],
    ) -> crate::backend::TensorRead<'a> {
        Box::pin(self.read_tensor_async(t, offset, out))
    }
}
