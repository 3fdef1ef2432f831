//! The backend a memory plan runs the loader's path over ([`super::plan`], `loader::measure`):
//! a real backend's name, alignment, limits and sizes, with buffers that hold nothing.

use alloc::boxed::Box;
use alloc::rc::Rc;

use crate::backend::{Backend, BackendError, Buffer, BufferType};
use crate::graph::Graph;
use crate::tensor::Tensor;

/// A real backend whose buffers are only sizes: the plan runs the loader's path over it.
pub(crate) struct PlanBackend {
    inner: Rc<dyn Backend>,
    buft: Rc<dyn BufferType>,
}

impl PlanBackend {
    pub(crate) fn new(inner: Rc<dyn Backend>) -> PlanBackend {
        let buft: Rc<dyn BufferType> = Rc::new(PlanBufferType { inner: inner.buffer_type() });
        PlanBackend { inner, buft }
    }
}

impl Backend for PlanBackend {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn buffer_type(&self) -> Rc<dyn BufferType> {
        self.buft.clone()
    }
    fn graph_compute(&self, _graph: &Graph) -> Result<(), BackendError> {
        Err(BackendError::Other("a memory plan runs no graph".into()))
    }
    fn supports_op(&self, node: &Tensor) -> bool {
        self.inner.supports_op(node)
    }
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        self.inner.supports_buft(buft)
    }
}

/// A buffer type with the real one's name, alignment and sizes, whose buffers hold nothing.
pub struct PlanBufferType {
    inner: Rc<dyn BufferType>,
}

impl BufferType for PlanBufferType {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn alignment(&self) -> usize {
        self.inner.alignment()
    }
    /// The real limit, so weights are grouped into buffers exactly as a load groups them
    /// (a tensor over it was refused by the loader's check before any planning).
    fn max_size(&self) -> usize {
        self.inner.max_size()
    }
    fn max_binding(&self) -> u64 {
        self.inner.max_binding()
    }
    fn alloc_size(&self, t: &Tensor) -> usize {
        self.inner.alloc_size(t)
    }
    // Not host memory: no kernel may read these buffers.
    fn budget(&self) -> Option<u64> {
        None
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(PlanBuffer { name: Box::from(self.inner.name()), size }))
    }
}

struct PlanBuffer {
    name: Box<str>,
    size: usize,
}

impl Buffer for PlanBuffer {
    fn buffer_type_name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> usize {
        self.size
    }
    fn set_bytes(&self, _offset: usize, _data: &[u8]) {}
    fn get_bytes(&self, _offset: usize, out: &mut [u8]) {
        out.fill(0);
    }
    fn clear(&self, _value: u8) {}
    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}
