//! ggml_tallocr: hands out aligned pieces of one buffer in order, never frees.

use alloc::format;
use alloc::rc::Rc;

use crate::backend::{BackendError, Buffer};
use crate::tensor::Tensor;

pub struct Tallocr {
    buffer: Rc<dyn Buffer>,
    alignment: usize,
    offset: usize,
}

impl Tallocr {
    pub fn new(buffer: Rc<dyn Buffer>, alignment: usize) -> Tallocr {
        Tallocr { buffer, alignment, offset: 0 }
    }

    /// Bytes handed out so far (aligned).
    pub fn used(&self) -> usize {
        self.offset
    }

    pub fn buffer(&self) -> &Rc<dyn Buffer> {
        &self.buffer
    }

    /// ggml_tallocr_alloc: places `t` at the next aligned offset; `size` is what the buffer
    /// type says it needs (ggml_backend_buffer_get_alloc_size).
    pub fn alloc(&mut self, t: &Tensor, size: usize) -> Result<(), BackendError> {
        let end = size.checked_next_multiple_of(self.alignment).and_then(|s| self.offset.checked_add(s));
        let Some(end) = end.filter(|&e| e <= self.buffer.size()) else {
            return Err(BackendError::OutOfMemory {
                what: format!("tensor '{}' in a {} buffer (tallocr)", t.name(), self.buffer.buffer_type_name()),
                requested: end.unwrap_or(usize::MAX),
                limit: self.buffer.size(),
            });
        };
        t.set_data(self.buffer.clone(), self.offset);
        self.offset = end;
        Ok(())
    }
}
