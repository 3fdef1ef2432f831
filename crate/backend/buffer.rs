//! The buffer half of ggml-backend, below the tensor: [`Buffer`] (one allocation, byte-level
//! set/get) and [`BackendError`]. Neither knows a tensor, so `tensor.rs` holds its memory
//! through them; the half that does ([`super::BufferType`], [`super::Backend`]) is in
//! `backend/mod.rs`, which re-exports both.

use alloc::string::String;

use crate::types::GgmlType;

/// What a backend operation can fail with. Each names what and where.
#[derive(Clone, Debug, PartialEq)]
pub enum BackendError {
    /// An allocation the device refused (or that exceeds its limits).
    OutOfMemory {
        what: String,
        requested: usize,
        limit: usize,
    },
    /// The backend is compiled out of this build, or no device/adapter exists.
    Unavailable(String),
    /// A node whose op or types this backend cannot run.
    Unsupported {
        node: String,
        reason: String,
    },
    /// The device went away (WebGPU device loss); state on it is gone.
    DeviceLost(String),
    /// The computation was cancelled by the caller.
    Cancelled,
    Other(String),
}

impl core::fmt::Display for BackendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BackendError::OutOfMemory { what, requested, limit } => {
                write!(f, "out of memory allocating {what}: {requested} bytes requested, limit {limit} bytes")
            }
            BackendError::Unavailable(s) => write!(f, "backend unavailable: {s}"),
            BackendError::Unsupported { node, reason } => {
                write!(f, "unsupported node '{node}': {reason}")
            }
            BackendError::DeviceLost(s) => write!(f, "device lost: {s}"),
            BackendError::Cancelled => write!(f, "cancelled"),
            BackendError::Other(s) => f.write_str(s),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BackendError {}

/// ggml_backend_buffer: one allocation.
pub trait Buffer {
    fn buffer_type_name(&self) -> &str;
    fn size(&self) -> usize;
    /// Base address for host buffers; None for device memory.
    fn host_base(&self) -> Option<*mut u8> {
        None
    }
    /// Writes `data` at byte `offset` (ggml_backend_tensor_set underneath).
    fn set_bytes(&self, offset: usize, data: &[u8]);
    /// Reads `out.len()` bytes at `offset`. Device buffers may block natively; in the
    /// browser, WebGPU reads go through the backend's async path instead. Panics where the
    /// read fails (a lost device): use [`Buffer::try_get_bytes`] where that can happen.
    fn get_bytes(&self, offset: usize, out: &mut [u8]);
    /// [`Buffer::get_bytes`] with the device's failure as an error (`DeviceLost` for a lost
    /// WebGPU device). Default: `get_bytes`, which cannot fail for host memory.
    fn try_get_bytes(&self, offset: usize, out: &mut [u8]) -> Result<(), BackendError> {
        self.get_bytes(offset, out);
        Ok(())
    }
    /// ggml_backend_buffer_init_tensor: a tensor of `ty`, `ne`, `nb` was placed at `offset`
    /// (a buffer that keeps some of its tensors in a layout of its own, the CPU's repacking
    /// one, records them). Default: nothing.
    fn init_tensor(&self, _offset: usize, _ty: GgmlType, _ne: [i64; 4], _nb: [usize; 4]) {}
    /// Fills the whole buffer with `value`.
    fn clear(&self, value: u8);
    /// For downcasting to the concrete buffer inside its own backend.
    fn as_any(&self) -> &dyn core::any::Any;
}
