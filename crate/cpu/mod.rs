//! The CPU backend: host buffers and the forward kernels for every op.

use alloc::rc::Rc;

use crate::backend::host::HostBuffer;
use crate::backend::{Backend, BackendError, Buffer, BufferType};
use crate::graph::Graph;

/// Tensor data in CPU buffers is aligned for the widest SIMD loads we use.
pub const CPU_ALIGNMENT: usize = 64;

/// ggml_backend_cpu_buffer_type.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBufferType;

impl BufferType for CpuBufferType {
    fn name(&self) -> &str {
        "CPU"
    }
    fn alignment(&self) -> usize {
        CPU_ALIGNMENT
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(HostBuffer::new(size, CPU_ALIGNMENT, "CPU")?))
    }
}

/// The CPU backend. `n_threads` > 1 splits work across threads where the build has them.
pub struct CpuBackend {
    pub n_threads: usize,
}

impl CpuBackend {
    pub fn new(n_threads: usize) -> CpuBackend {
        CpuBackend { n_threads: n_threads.max(1) }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "CPU"
    }
    fn buffer_type(&self) -> Rc<dyn BufferType> {
        Rc::new(CpuBufferType)
    }
    fn graph_compute(&self, _graph: &Graph) -> Result<(), BackendError> {
        Err(BackendError::Other("CPU kernels not yet built".into()))
    }
}
