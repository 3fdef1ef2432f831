//! Aligned host memory: the CPU backend's buffers and allocating contexts' pools.

use alloc::alloc::{alloc_zeroed, dealloc, Layout};
use alloc::format;
use alloc::string::String;
use core::ptr::NonNull;

use super::{BackendError, Buffer};

/// Bytes of host address space not yet in use, where that is bounded: on wasm32, a linear
/// memory grows to at most 4 GiB, and what it has grown to so far is taken (the allocator
/// may hold some of it free, so this errs low). None elsewhere: a 64-bit process learns
/// its limit only from a refused allocation, which is a typed error too.
pub fn address_space_left() -> Option<u64> {
    #[cfg(target_arch = "wasm32")]
    {
        let used = core::arch::wasm32::memory_size(0) as u64 * 65536;
        Some((4u64 << 30).saturating_sub(used))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        None
    }
}

/// A block of host memory with a fixed alignment. Kernels write it through raw pointers
/// (`host_base`), so it is shared by handle and never borrowed as a Rust slice for long.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
    size: usize,
    type_name: String,
}

impl HostBuffer {
    /// Allocates `size` zeroed bytes; a refused allocation is an error, not an abort.
    pub fn new(size: usize, align: usize, type_name: &str) -> Result<HostBuffer, BackendError> {
        // Never a zero-size allocation: keep one aligned byte so the pointer is real.
        let layout = Layout::from_size_align(size.max(1), align).map_err(|_| BackendError::OutOfMemory {
            what: format!("{type_name} buffer"),
            requested: size,
            limit: isize::MAX as usize,
        })?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| BackendError::OutOfMemory {
            what: format!("{type_name} buffer"),
            requested: size,
            limit: 0,
        })?;
        Ok(HostBuffer { ptr, layout, size, type_name: String::from(type_name) })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl Buffer for HostBuffer {
    fn buffer_type_name(&self) -> &str {
        &self.type_name
    }
    fn size(&self) -> usize {
        self.size
    }
    fn host_base(&self) -> Option<*mut u8> {
        Some(self.ptr.as_ptr())
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.size, "set_bytes: {}+{} past {} bytes", offset, data.len(), self.size);
        // SAFETY: bounds checked above; source and destination do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) }
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) {
        assert!(offset + out.len() <= self.size, "get_bytes: {}+{} past {} bytes", offset, out.len(), self.size);
        // SAFETY: as above.
        unsafe { core::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) }
    }
    fn clear(&self, value: u8) {
        // SAFETY: the whole allocation.
        unsafe { core::ptr::write_bytes(self.ptr.as_ptr(), value, self.size) }
    }
    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}
