//! The CPU's repacking buffer type (ggml-cpu's `ggml_backend_cpu_repack_buffer_type`, an
//! "extra" buffer type of the CPU backend): host memory whose matrix weights the buffer keeps
//! in the layout this machine's packed kernels read ([`super::arch::repack`]), so that
//! neither the tensor nor the model knows the layout.
//!
//! - Which tensors: each one placed in the buffer ([`Buffer::init_tensor`], at allocation) is
//!   recorded as a [`Packing`] (the buffer's tensor traits: offset, type, k, m) when it is
//!   2-D, contiguous and [`repack::wants`] it; the others stay in ggml's layout.
//! - When: packing happens on `set`. The loader streams a tensor's bytes in pieces, so a
//!   tensor is packed in place once a write reaches its last byte; a write into a packed
//!   tensor unpacks it first (and packs it again when the write reaches the end). A `get`
//!   unpacks the rows it reads, so every reader but the kernels sees ggml's layout.
//! - Who reads it: only `mul_mat` (weights), `get_rows` (tables) and `out_prod` (its `a`)
//!   read the packed layout ([`packed`], asked once per op); the CPU backend's `supports_op`
//!   refuses any other op over a packed weight.
//! - Who chooses it: the model loader, for the matrix weights of a model wholly on the CPU
//!   (`model/loader.rs`); a split model's weights stay in ggml's layout, since the scheduler
//!   copies raw bytes between backends.
//!
//! The packing is in place (0 extra bytes): the memory plan is that of the plain buffer type.

use alloc::rc::Rc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};

use super::arch::repack;
use super::CPU_ALIGNMENT;
use crate::backend::host::HostBuffer;
use crate::backend::{BackendError, Buffer, BufferType};
use crate::tensor::{contiguous_strides, Tensor, MAX_DIMS};
use crate::types::GgmlType;

/// The buffer type's name; the scheduler maps it (host memory of no backend's own type) to
/// the CPU, whose `supports_buft` accepts it.
pub const NAME: &str = "CPU_REPACK";

/// Whether a CPU load keeps its matrix weights in the repacking buffer type (a load option,
/// `Gpt2Options::repack`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Repack {
    /// Where this machine's kernels read the packed layout, unless turned off ([`enabled`]).
    #[default]
    Auto,
    /// Never: ggml's layout.
    Off,
    /// Every type with a packed layout, even where this machine has no kernel for it (its
    /// products then unpack per call): tests of the repacked path on any machine.
    Force,
}

/// Whether loads repack (the loader's question): not after
/// [`repack::set_disabled`], nor natively with `GGWEB_NO_REPACK=1` (for A/B runs).
pub fn enabled() -> bool {
    #[cfg(all(feature = "std", not(target_family = "wasm")))]
    if std::env::var_os("GGWEB_NO_REPACK").is_some_and(|v| !v.is_empty() && v != "0") {
        return false;
    }
    !repack::disabled()
}

/// Buffers that repack their matrix weights. `force` repacks every type with a packed layout
/// even where this machine has no kernel for it (its products then unpack per call): a load
/// option for tests of the repacked path on any machine.
pub struct RepackBufferType {
    pub force: bool,
}

impl BufferType for RepackBufferType {
    fn name(&self) -> &str {
        NAME
    }
    fn alignment(&self) -> usize {
        CPU_ALIGNMENT
    }
    fn is_host(&self) -> bool {
        true
    }
    fn max_size(&self) -> usize {
        super::CpuBufferType.max_size()
    }
    fn budget(&self) -> Option<u64> {
        super::CpuBufferType.budget()
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        let host = HostBuffer::new(size, CPU_ALIGNMENT, NAME)?;
        Ok(Rc::new(RepackBuffer { host, force: self.force, packings: RefCell::new(Vec::new()) }))
    }
}

/// One weight the buffer repacks (ggml's `tensor_traits` of the repack buffer): `m` rows of
/// `k` elements of `ty` at byte `offset`.
#[derive(Clone, Debug)]
struct Packing {
    offset: usize,
    len: usize,
    ty: GgmlType,
    k: usize,
    m: usize,
    /// Whether the bytes are in the packed layout now (not before its last byte is written,
    /// nor where [`repack::pack`] declined).
    packed: Cell<bool>,
}

impl Packing {
    fn overlaps(&self, offset: usize, len: usize) -> bool {
        offset < self.offset + self.len && self.offset < offset + len
    }
}

/// The bytes of weight `p` in the buffer at `base`, mutable. SAFETY: `p` lies in that buffer
/// and nothing else refers to its bytes meanwhile (the buffer is written only through
/// `set_bytes`, on one thread, outside a graph's run).
unsafe fn weight_bytes<'a>(base: *mut u8, p: &Packing) -> &'a mut [u8] {
    core::slice::from_raw_parts_mut(base.add(p.offset), p.len)
}

/// A host buffer of [`RepackBufferType`], with the weights it repacks sorted by offset.
pub struct RepackBuffer {
    host: HostBuffer,
    force: bool,
    packings: RefCell<Vec<Packing>>,
}

impl RepackBuffer {
    /// Back to ggml's layout in place (a write into part of a packed weight).
    fn unpack(&self, p: &Packing) {
        let mut plain = vec![0u8; p.len];
        // SAFETY: see `weight_bytes`.
        let data = unsafe { weight_bytes(self.host.as_ptr(), p) };
        repack::unpack_bytes(p.ty, p.k, p.m, data, 0, &mut plain);
        data.copy_from_slice(&plain);
        p.packed.set(false);
    }

    /// Bytes of weights in the packed layout now.
    pub fn packed_bytes(&self) -> usize {
        self.packings.borrow().iter().filter(|p| p.packed.get()).map(|p| p.len).sum()
    }
}

impl Buffer for RepackBuffer {
    fn buffer_type_name(&self) -> &str {
        NAME
    }
    fn size(&self) -> usize {
        self.host.size()
    }
    fn host_base(&self) -> Option<*mut u8> {
        self.host.host_base()
    }
    /// ggml's repack `init_tensor`: records the weights worth packing (2-D, contiguous).
    fn init_tensor(&self, offset: usize, ty: GgmlType, ne: [i64; MAX_DIMS], nb: [usize; MAX_DIMS]) {
        let (k, m) = (ne[0] as usize, ne[1] as usize);
        if ne[2] != 1 || ne[3] != 1 || nb != contiguous_strides(ty, &ne) || !repack::wants(ty, k, m, self.force) {
            return;
        }
        let len = ty.row_size(ne[0]) * m;
        let mut ps = self.packings.borrow_mut();
        ps.retain(|p| !p.overlaps(offset, len));
        let at = ps.partition_point(|p| p.offset < offset);
        ps.insert(at, Packing { offset, len, ty, k, m, packed: Cell::new(false) });
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) {
        let end = offset + data.len();
        let ps = self.packings.borrow();
        let hit = ps.iter().filter(|p| p.overlaps(offset, data.len()));
        for p in hit.clone() {
            if p.packed.get() && !(offset <= p.offset && end >= p.offset + p.len) {
                self.unpack(p);
            }
        }
        self.host.set_bytes(offset, data);
        for p in hit {
            p.packed.set(false);
            // The weight's last byte is in: pack it (the loader streams each tensor in order).
            if end >= p.offset + p.len {
                // SAFETY: see `weight_bytes`.
                p.packed.set(repack::pack(p.ty, p.k, p.m, unsafe { weight_bytes(self.host.as_ptr(), p) }));
            }
        }
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) {
        self.host.get_bytes(offset, out);
        let base = self.host.as_ptr();
        let len = out.len();
        for p in self.packings.borrow().iter().filter(|p| p.packed.get() && p.overlaps(offset, len)) {
            let (from, to) = (offset.max(p.offset), (offset + len).min(p.offset + p.len));
            // SAFETY: the weight's bytes lie inside the buffer (checked at `init_tensor`'s caller).
            let data = unsafe { core::slice::from_raw_parts(base.add(p.offset), p.len) };
            repack::unpack_bytes(p.ty, p.k, p.m, data, from - p.offset, &mut out[from - offset..to - offset]);
        }
    }
    fn clear(&self, value: u8) {
        self.host.clear(value);
        self.packings.borrow().iter().for_each(|p| p.packed.set(false));
    }
    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

/// Whether the kernels read `t` in the packed layout: `t` is (or views the whole of) a weight
/// its [`RepackBuffer`] holds packed. A view of part of a packed weight is an error (the
/// kernels cannot read it), naming the tensor. Asked once per op's operand.
pub(crate) fn packed(t: &Tensor) -> Result<bool, alloc::string::String> {
    let Some(d) = t.data() else { return Ok(false) };
    let Some(buf) = d.buffer.as_any().downcast_ref::<RepackBuffer>() else { return Ok(false) };
    let ps = buf.packings.borrow();
    let len = t.nbytes().max(1);
    // Sorted and disjoint: the weights from the first that ends past `d.offset`.
    let from = ps.partition_point(|p| p.offset + p.len <= d.offset);
    let mut hit = ps[from..].iter().take_while(|p| p.offset < d.offset + len);
    let Some(p) = hit.find(|p| p.packed.get()) else { return Ok(false) };
    let whole = d.offset == p.offset
        && t.ty == p.ty
        && t.ne == [p.k as i64, p.m as i64, 1, 1]
        && t.nb == contiguous_strides(p.ty, &t.ne);
    if whole {
        Ok(true)
    } else {
        Err(alloc::format!("tensor '{}' is a partial view of a repacked weight", t.name()))
    }
}

/// Whether `t`'s bytes are held in the packed layout (tests, the bench).
pub fn is_packed(t: &Tensor) -> bool {
    packed(t).unwrap_or(false)
}

/// Bytes a buffer holds in the packed layout (0 for any other buffer type).
pub fn packed_bytes(buffer: &dyn Buffer) -> usize {
    buffer.as_any().downcast_ref::<RepackBuffer>().map_or(0, |b| b.packed_bytes())
}

/// Moves `t` (an allocated, non-view weight) into a repacking buffer of its own (`force` as
/// [`RepackBufferType`]), its bytes as they were: kernel tests and benches of one product.
/// Whether the buffer holds it packed.
pub fn place_repacked(t: &Tensor, force: bool) -> Result<bool, BackendError> {
    let mut bytes = vec![0u8; t.nbytes()];
    t.try_get_bytes(&mut bytes, 0)?;
    t.set_data(RepackBufferType { force }.alloc_buffer(t.nbytes())?, 0);
    t.set_bytes(&bytes, 0);
    Ok(is_packed(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::tensor::{Context, ContextParams};
    use crate::types::GgmlType::{F32, Q8_0};

    /// A Q8_0 weight of 9 rows (two 4-row groups on wasm, one 8-row group on x86, and plain
    /// rows past them) streamed in 3 pieces, as the GGUF loader writes it.
    #[test]
    fn packs_on_the_last_byte_and_reads_back_ggml_layout() {
        let (k, m) = (64usize, 9usize);
        let w: Vec<f32> = (0..k * m).map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0).collect();
        let plain = crate::quants::quantize(Q8_0, &w).unwrap();
        let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
        let t = ctx.new_tensor_2d(Q8_0, k as i64, m as i64);
        t.set_data(RepackBufferType { force: true }.alloc_buffer(plain.len()).unwrap(), 0);
        let n = plain.len();
        t.set_bytes(&plain[..n / 3], 0);
        t.set_bytes(&plain[n / 3..n - 5], n / 3);
        assert!(!is_packed(&t), "packed before its last byte");
        t.set_bytes(&plain[n - 5..], n - 5);
        assert!(is_packed(&t) && packed_bytes(&*t.data().unwrap().buffer) == n);
        let mut back = vec![0u8; n];
        t.get_bytes(&mut back, 0);
        assert_eq!(back, plain);
        let mut part = vec![0u8; 50];
        t.get_bytes(&mut part, 20);
        assert_eq!(part, plain[20..70]);
        // A write into the middle unpacks it; one that reaches the end packs it again.
        t.set_bytes(&plain[40..80], 40);
        assert!(!is_packed(&t));
        t.set_bytes(&plain[n - 34..], n - 34);
        assert!(is_packed(&t));
        t.get_bytes(&mut back, 0);
        assert_eq!(back, plain);
    }

    #[test]
    fn only_the_ops_that_read_the_layout_are_supported_over_it() {
        let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
        let w = ctx.new_tensor_2d(Q8_0, 32, 8);
        let x = ctx.new_tensor_2d(F32, 32, 2);
        w.set_data(RepackBufferType { force: true }.alloc_buffer(w.nbytes()).unwrap(), 0);
        w.set_bytes(&crate::quants::quantize(Q8_0, &[0.5; 256]).unwrap(), 0);
        assert!(is_packed(&w));
        let cpu = super::super::CpuBackend::new(1);
        assert!(cpu.supports_op(&ctx.mul_mat(&w, &x)));
        assert!(!cpu.supports_op(&ctx.cpy(&w, &ctx.new_tensor_2d(Q8_0, 32, 8))));
        assert!(cpu.supports_buft(&RepackBufferType { force: false }));
    }
}
