//! ggml-alloc: where tensor data goes.
//!
//! - [`tallocr`]: a linear allocator over one buffer (weights, the KV cache).
//! - [`alloc_ctx_tensors`]: one buffer for every tensor of a `no_alloc` context
//!   (ggml_backend_alloc_ctx_tensors).
//! - [`gallocr`]: the graph allocator (reserve / alloc_graph) for intermediates.
//!
//! ```
//! use ggweb::allocator::alloc_ctx_tensors;
//! use ggweb::cpu::CpuBufferType;
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType::F32;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
//! let a = ctx.new_tensor_1d(F32, 10);
//! let b = ctx.new_tensor_2d(F32, 4, 4);
//! let bufs = alloc_ctx_tensors(&ctx, &CpuBufferType).unwrap();
//! assert_eq!(bufs.len(), 1);
//! assert_eq!((a.data().unwrap().offset, b.data().unwrap().offset), (0, 64)); // 40 bytes, aligned to 64
//! ```

pub mod gallocr;
pub mod tallocr;

use alloc::format;
use alloc::rc::Rc;
use alloc::vec::Vec;

use crate::backend::{BackendError, Buffer, BufferType};
use crate::tensor::{Context, Tensor};
pub use gallocr::{check_placement, DynTallocr, Gallocr, PlacementError, TensorAlloc};
pub use tallocr::Tallocr;

/// Rounds `offset` up to a multiple of `align` (a power of two or any positive number).
/// Panics when the result passes usize (a bug: sizes are checked before they get here).
pub fn align_up(offset: usize, align: usize) -> usize {
    offset.div_ceil(align).checked_mul(align).unwrap_or_else(|| panic!("align_up({offset}, {align}) overflows usize"))
}

/// ggml_backend_alloc_ctx_tensors_from_buft: places every tensor of `ctx` that has no data
/// and is not a view, in creation order, into as few buffers of `buft` as its `max_size`
/// allows (one, unless a buffer would exceed it). Returns the buffers.
pub fn alloc_ctx_tensors(ctx: &Context, buft: &dyn BufferType) -> Result<Vec<Rc<dyn Buffer>>, BackendError> {
    let tensors: Vec<Tensor> =
        ctx.tensors().into_iter().filter(|t| t.view_src.is_none() && t.data().is_none()).collect();
    alloc_tensors(&tensors, buft)
}

/// Places `tensors` (none a view, none allocated) into buffers of `buft`, in order.
pub fn alloc_tensors(tensors: &[Tensor], buft: &dyn BufferType) -> Result<Vec<Rc<dyn Buffer>>, BackendError> {
    let align = buft.alignment();
    let max = buft.max_size();
    // Group consecutive tensors into runs that fit one buffer each.
    let mut groups: Vec<(usize, usize, usize)> = Vec::new(); // (first, end, bytes)
    let (mut first, mut size) = (0usize, 0usize);
    for (i, t) in tensors.iter().enumerate() {
        let need = buft.alloc_size(t).checked_next_multiple_of(align).unwrap_or(usize::MAX);
        if need > max {
            return Err(BackendError::OutOfMemory {
                what: format!("tensor '{}' in one {} buffer", t.name(), buft.name()),
                requested: need,
                limit: max,
            });
        }
        // size <= max and need <= max: no overflow unless max is near usize::MAX.
        if size.checked_add(need).is_none_or(|end| end > max) {
            groups.push((first, i, size));
            first = i;
            size = 0;
        }
        size += need;
    }
    if first < tensors.len() {
        groups.push((first, tensors.len(), size));
    }
    let mut buffers = Vec::with_capacity(groups.len());
    for (first, end, size) in groups {
        let buffer = buft.alloc_buffer(size)?;
        let mut talloc = Tallocr::new(buffer.clone(), align);
        for t in &tensors[first..end] {
            talloc.alloc(t, buft.alloc_size(t))?;
        }
        buffers.push(buffer);
    }
    Ok(buffers)
}
