//! Aligned host memory: the CPU backend's buffers and allocating contexts' pools.

use alloc::alloc::{alloc_zeroed, dealloc, Layout};
use alloc::format;
use alloc::string::String;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use super::buffer::{BackendError, Buffer};

/// The largest linear memory of this build: wasm32's 4 GiB, or for the Memory64 build the
/// 16 GiB that browsers allow a 64-bit memory (V8's and SpiderMonkey's limit; the linker's
/// `--max-memory` in scripts/build-wasm.sh says the same).
#[cfg(target_family = "wasm")]
pub const WASM_MEMORY_MAX: u64 = if cfg!(target_arch = "wasm64") { 16 << 30 } else { 4 << 30 };

/// A cap on the host memory a model's later runs and saves may take beyond its own buffers
/// (`usize::MAX`: none). For tests of what must fit a small budget (a checkpoint written in
/// pieces where the whole file would be refused): `set_headroom_for_tests`.
static HEADROOM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Caps what [`headroom`] lets a model's runs and saves take beyond its own buffers (None:
/// no cap). For tests only (the wasm build exports it as `debug_set_host_headroom`).
pub fn set_headroom_for_tests(bytes: Option<usize>) {
    HEADROOM.store(bytes.unwrap_or(usize::MAX), Ordering::Relaxed);
}

/// The cap [`set_headroom_for_tests`] set, if any.
pub fn headroom() -> Option<u64> {
    let h = HEADROOM.load(Ordering::Relaxed);
    (h != usize::MAX).then_some(h as u64)
}

/// Bytes of host memory a model may take. On wasm32, a linear memory grows to at most
/// 4 GiB, and what it has grown to so far is taken (the allocator may hold some of it
/// free, so this errs low). Natively (with `std`): `GGWEB_MAX_MEMORY` when set (bytes, or
/// with a K/M/G/T suffix, powers of 1024), else the machine's physical memory (Linux's
/// `MemTotal`): a 64-bit process would otherwise learn its limit only from the OOM killer
/// or an aborting allocation. None where neither is known (no_std, other systems).
pub fn address_space_left() -> Option<u64> {
    #[cfg(target_family = "wasm")]
    {
        let used = crate::wasm_arch::memory_size(0) as u64 * 65536;
        Some(WASM_MEMORY_MAX.saturating_sub(used))
    }
    #[cfg(all(feature = "std", not(target_family = "wasm")))]
    {
        if let Ok(v) = std::env::var("GGWEB_MAX_MEMORY") {
            match parse_bytes(&v) {
                Some(n) => return Some(n),
                None => std::eprintln!("ggweb: ignoring GGWEB_MAX_MEMORY={v:?} (want bytes, e.g. 8G or 8589934592)"),
            }
        }
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kb = info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().strip_suffix("kB")?;
        kb.trim().parse::<u64>().ok().map(|k| k.saturating_mul(1024))
    }
    #[cfg(all(not(feature = "std"), not(target_family = "wasm")))]
    {
        None
    }
}

/// "4096", "512M", "8G", "1.5G" (suffixes K, M, G, T: powers of 1024, an optional trailing
/// "B" or "iB"): a byte count, or None.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_suffix("iB").or_else(|| s.strip_suffix('B')).unwrap_or(s);
    let (num, shift) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 10),
        'M' => (&s[..s.len() - 1], 20),
        'G' => (&s[..s.len() - 1], 30),
        'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let num = num.trim();
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(1u64 << shift);
    }
    let f = num.parse::<f64>().ok()?;
    let v = f * (1u64 << shift) as f64;
    (f.is_finite() && f >= 0.0 && v < u64::MAX as f64).then_some(v as u64)
}

/// `offset + len <= size` without overflow: an offset near `usize::MAX` is out of bounds,
/// not a wrapped small one.
pub fn in_bounds(offset: usize, len: usize, size: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

/// Bytes of every [`HostBuffer`] alive now (CPU tensors, KV caches, compute buffers,
/// allocating contexts' pools), on every thread: what a model holds in host memory, which
/// is the wasm heap in the browser (see [`live_host_bytes`]).
static LIVE_HOST_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes of host buffers alive now. A model loaded wholly on WebGPU holds none; a split one
/// holds exactly its CPU part (tests/webgpu/webgpu_load.rs).
pub fn live_host_bytes() -> usize {
    LIVE_HOST_BYTES.load(Ordering::Relaxed)
}

/// A block of host memory with a fixed alignment. Kernels write it through raw pointers
/// (`host_base`), so it is shared by handle and never borrowed as a Rust slice for long.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
    /// A mapping of its own ([`huge_pages::map`]: base and length) instead of the heap.
    #[cfg(all(feature = "std", target_os = "linux"))]
    mapped: Option<(NonNull<u8>, usize)>,
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
        #[cfg(all(feature = "std", target_os = "linux"))]
        let mapped = huge_pages::map(size);
        #[cfg(all(feature = "std", target_os = "linux"))]
        let raw = match mapped {
            Some((base, _)) => huge_pages::aligned(base).as_ptr(),
            // SAFETY: layout has non-zero size.
            None => unsafe { alloc_zeroed(layout) },
        };
        #[cfg(not(all(feature = "std", target_os = "linux")))]
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| BackendError::OutOfMemory {
            what: format!("{type_name} buffer"),
            requested: size,
            limit: 0,
        })?;
        LIVE_HOST_BYTES.fetch_add(size, Ordering::Relaxed);
        Ok(HostBuffer {
            ptr,
            layout,
            #[cfg(all(feature = "std", target_os = "linux"))]
            mapped,
            size,
            type_name: String::from(type_name),
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        LIVE_HOST_BYTES.fetch_sub(self.size, Ordering::Relaxed);
        #[cfg(all(feature = "std", target_os = "linux"))]
        if let Some(m) = self.mapped {
            return huge_pages::unmap(m);
        }
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Large buffers natively on Linux (weights, the KV cache) in memory of their own, 2 MiB
/// aligned and advised as transparent huge pages (`MADV_HUGEPAGE`; this Debian's default
/// THP mode is `madvise`, so heap memory gets none). A decode step streams every weight
/// and writes its V column a page apart per element; with 4 KiB pages the TLB missed
/// on each. 124M, 1 thread, interleaved runs (Zen 5, 2026-12-02): Q4_K_M decode 201 → 234
/// tok/s, Q8_0 154 → 184, Q4_K_M at 2 threads 238 → 257. `GGWEB_NO_HUGEPAGES=1` keeps
/// the heap, for A/B runs.
#[cfg(all(feature = "std", target_os = "linux"))]
mod huge_pages {
    use core::ptr::NonNull;

    const HUGE: usize = 2 << 20;
    /// Smaller buffers stay on the heap (a mapping rounds up to 2 MiB).
    const MIN: usize = 8 << 20;

    extern "C" {
        fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
        fn munmap(addr: *mut u8, len: usize) -> i32;
        fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
    }
    const PROT_READ_WRITE: i32 = 0x1 | 0x2;
    const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | 0x20;
    const MADV_HUGEPAGE: i32 = 14;

    /// A zeroed mapping (base, length) with `size` bytes from a 2 MiB boundary on, or None
    /// (small, turned off, or refused: the heap then).
    pub(super) fn map(size: usize) -> Option<(NonNull<u8>, usize)> {
        if size < MIN || std::env::var_os("GGWEB_NO_HUGEPAGES").is_some_and(|v| v == "1") {
            return None;
        }
        let len = size.checked_add(2 * HUGE)? / HUGE * HUGE;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe { mmap(core::ptr::null_mut(), len, PROT_READ_WRITE, MAP_PRIVATE_ANONYMOUS, -1, 0) };
        if base.is_null() || base as isize == -1 {
            return None;
        }
        let base = NonNull::new(base)?;
        // SAFETY: the advised range lies inside the mapping (len covers the alignment).
        // Advice only: refused, the pages are 4 KiB ones and work the same.
        unsafe { madvise(aligned(base).as_ptr(), size.div_ceil(HUGE) * HUGE, MADV_HUGEPAGE) };
        Some((base, len))
    }

    /// The first 2 MiB boundary at or after `base`.
    pub(super) fn aligned(base: NonNull<u8>) -> NonNull<u8> {
        let off = (HUGE - base.as_ptr() as usize % HUGE) % HUGE;
        // SAFETY: `map` made the mapping 2 MiB longer than the buffer.
        unsafe { base.add(off) }
    }

    pub(super) fn unmap((base, len): (NonNull<u8>, usize)) {
        // SAFETY: the mapping `map` made, unmapped once (by the buffer's Drop).
        unsafe { munmap(base.as_ptr(), len) };
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
        assert!(
            in_bounds(offset, data.len(), self.size),
            "set_bytes: {}+{} past {} bytes",
            offset,
            data.len(),
            self.size
        );
        // SAFETY: bounds checked above; source and destination do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) }
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) {
        assert!(
            in_bounds(offset, out.len(), self.size),
            "get_bytes: {}+{} past {} bytes",
            offset,
            out.len(),
            self.size
        );
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
