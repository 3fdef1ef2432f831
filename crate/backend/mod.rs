//! Backends plug in through three small traits, by role (ggml-backend's split):
//!
//! - [`BufferType`]: a device's allocation rules (alignment, largest buffer, bytes a
//!   tensor takes) and the factory for its buffers;
//! - [`Buffer`]: memory one buffer type allocated, with byte-level set/get;
//! - [`Backend`]: runs graphs whose tensors live in buffers it can read.
//!
//! ```
//! use ggweb::backend::{Backend, BufferType};
//! use ggweb::cpu::CpuBackend;
//! let cpu = CpuBackend::new(1);
//! let buft = cpu.buffer_type();
//! let buf = buft.alloc_buffer(1024).unwrap();
//! assert!(buf.size() >= 1024 && buft.is_host());
//! ```
//!
//! A backend compiled out of this build (WebGPU without the feature, say) is still a
//! type: its constructor returns [`BackendError::Unavailable`] instead of `#[cfg]` at
//! every call site.

pub(crate) mod buffer;
pub mod host;

use alloc::boxed::Box;
use alloc::rc::Rc;

pub use self::buffer::{BackendError, Buffer};
use crate::graph::Graph;
use crate::tensor::Tensor;

/// ggml_backend_buffer_type: how a device allocates.
pub trait BufferType {
    /// Unique per device kind ("CPU", "WebGPU"); buffer types are compared by name.
    fn name(&self) -> &str;
    /// Offsets of tensors in buffers of this type are multiples of this.
    fn alignment(&self) -> usize;
    /// Largest single buffer (WebGPU's maxBufferSize). Default: no limit.
    fn max_size(&self) -> usize {
        usize::MAX
    }
    /// The most bytes of one tensor a kernel can bind at once (WebGPU's
    /// maxStorageBufferBindingSize, less a window's alignment slack); larger 2-D weights are
    /// bound in row ranges. Default: no limit.
    fn max_binding(&self) -> u64 {
        u64::MAX
    }
    /// Bytes `t` needs in a buffer of this type (padding included). Default: ggml_nbytes.
    fn alloc_size(&self, t: &Tensor) -> usize {
        t.nbytes()
    }
    /// Host memory the CPU can address directly. Default: no.
    fn is_host(&self) -> bool {
        false
    }
    /// Bytes this device can still hand out in all, when that is known up front (the free
    /// part of wasm32's 4 GiB address space; a WebGPU device's memory). Loaders compare a
    /// model's needs with it before allocating. Default: unknown (only an allocation can tell).
    fn budget(&self) -> Option<u64> {
        None
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError>;
}

/// ggml_backend: a device that runs graphs.
pub trait Backend {
    fn name(&self) -> &str;
    /// The buffer type whose buffers this backend computes in.
    fn buffer_type(&self) -> Rc<dyn BufferType>;
    /// Runs every node of `graph` in order. All tensors must be allocated in buffers
    /// this backend can read.
    fn graph_compute(&self, graph: &Graph) -> Result<(), BackendError>;
    /// Whether this backend can run `node` (op and types). Default: everything.
    fn supports_op(&self, _node: &Tensor) -> bool {
        true
    }
    /// Whether this backend can read tensors in buffers of type `buft`. Default: its own.
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.name() == self.buffer_type().name()
    }
    /// The work this backend has counted since it was created (dispatches, submits,
    /// read-backs, encode time); None for a backend that keeps no counters (the CPU).
    fn stats(&self) -> Option<BackendStats> {
        None
    }
    /// ggml_backend_tensor_get_async: reads `out.len()` bytes of `t` (in one of this
    /// backend's buffers) from byte `offset` of it. A device whose memory the browser only
    /// reads asynchronously (WebGPU) overrides it; host memory is read at once.
    fn tensor_get_async<'a>(&'a self, t: &'a Tensor, offset: usize, out: &'a mut [u8]) -> TensorRead<'a> {
        Box::pin(async move { t.try_get_bytes(out, offset) })
    }
}

/// The future of [`Backend::tensor_get_async`] (not `Send`: backends live on one thread).
pub type TensorRead<'a> = core::pin::Pin<Box<dyn core::future::Future<Output = Result<(), BackendError>> + 'a>>;

// ts: export WebGpuStats
/// Work one device backend has done since it was created (see [`Backend::stats`]); a
/// call's own share is [`BackendStats::since`] a snapshot taken before it. The WebGPU
/// backend's meaning of each field is in brackets.
/// Serializes as the API's `webgpu` counters (camelCase).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize), serde(rename_all = "camelCase"))]
pub struct BackendStats {
    /// Kernel launches recorded (compute dispatches: graph nodes, row ranges of split
    /// weights, fused chains count once; byte patches of unaligned writes too).
    pub dispatches: u64,
    /// Batches of work handed to the device (`queue.submit`: graphs, reads that were not
    /// prefetched, patches, clears).
    pub submits: u64,
    /// Copies of device memory back to the host (staging buffers mapped by `map_async`).
    pub readbacks: u64,
    /// Bytes copied back.
    pub readback_bytes: u64,
    /// Host milliseconds in `graph_compute` before the device starts (planning the
    /// dispatches, writing their parameters, bind groups, encoding and `finish`; the
    /// device's own time is not in it).
    pub encode_ms: f64,
}

impl BackendStats {
    /// The work done between `earlier` and `self` (two snapshots of one backend).
    pub fn since(&self, earlier: &BackendStats) -> BackendStats {
        BackendStats {
            dispatches: self.dispatches - earlier.dispatches,
            submits: self.submits - earlier.submits,
            readbacks: self.readbacks - earlier.readbacks,
            readback_bytes: self.readback_bytes - earlier.readback_bytes,
            encode_ms: self.encode_ms - earlier.encode_ms,
        }
    }

    /// The sum of two backends' counters.
    pub fn plus(&self, o: &BackendStats) -> BackendStats {
        BackendStats {
            dispatches: self.dispatches + o.dispatches,
            submits: self.submits + o.submits,
            readbacks: self.readbacks + o.readbacks,
            readback_bytes: self.readback_bytes + o.readback_bytes,
            encode_ms: self.encode_ms + o.encode_ms,
        }
    }
}
