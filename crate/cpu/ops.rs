//! Forward kernels of the CPU backend, one function per op (ggml-cpu's ops.cpp).
//!
//! ```
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType::F32;
//! use ggweb::Graph;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: false });
//! let a = ctx.new_tensor_2d(F32, 3, 2);
//! a.set_f32_slice(&[1., 2., 3., 4., 5., 6.]);
//! let t = ctx.cont(&ctx.transpose(&a));           // [2, 3]: columns of a become rows
//! let mut gf = Graph::new();
//! gf.build_forward_expand(&t);
//! ggweb::cpu::compute_graph(&gf, 1).unwrap();
//! assert_eq!(t.to_f32_vec(), [1., 4., 2., 5., 3., 6.]);
//! ```
//!
//! Every kernel reads its inputs through their `nb` strides, so views and permutations
//! need no copy first. The elementwise and row-wise ops (add, mul, scale, norm, gelu,
//! soft_max, diag_mask_inf) convert each row into an f32 scratch row, compute there and
//! write it out: correct when the graph allocator gives the result the same memory as
//! `src[0]`, and for F16/BF16 tensors too. Sums over rows (norm, soft_max) are kept in f64,
//! as ggml keeps them in `ggml_float`. From 32K elements on, these ops, the copies and
//! get_rows hand ranges of rows to the thread pool ([`par_rows`]), as `mul_mat` hands it
//! blocks of rows and quantizes its `b` rows: one row is always one thread's, so the
//! results do not depend on the number of threads.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use half::{bf16, f16};

use super::arch::{f16_bits_to_f32, FloatGemm};
use crate::tensor::{Tensor, MAX_DIMS};
use crate::types::GgmlType;

/// Why a kernel could not run; the backend adds the node's name.
#[derive(Debug)]
pub(crate) enum KernelError {
    /// An op/type/layout combination this backend does not implement.
    Unsupported(String),
    /// The data itself is bad (an out-of-range row index, say).
    Invalid(String),
}

pub(super) type KResult = Result<(), KernelError>;

pub(super) fn unsupported<T>(msg: String) -> Result<T, KernelError> {
    Err(KernelError::Unsupported(msg))
}

/// Below this many elements a row-wise op runs on the calling thread: handing work to the
/// pool costs a few microseconds, more than a decode step's 768-wide rows take.
const PAR_MIN_ELEMS: usize = 32 * 1024;

/// A scratch buffer's address, shared with the jobs that fill disjoint rows of it.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: each job writes its own rows; the buffer outlives the jobs (par_rows returns
// only when they are done).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// Byte `off` of the buffer (a method, so closures capture the whole Sync wrapper).
    fn at(self, off: usize) -> *mut u8 {
        self.0.wrapping_add(off)
    }
}

/// One job's error, written only by that job (so no lock is needed).
struct ErrSlot(core::cell::UnsafeCell<Option<KernelError>>);
// SAFETY: job j writes slot j only, and the slots are read after every job has finished.
unsafe impl Sync for ErrSlot {}

/// Calls `f(rows)` on ranges covering 0..n_rows (rows of `row_len` elements), spread over
/// the threads when the op is big enough; the first range's error is returned. Rows are
/// independent in every caller, so the result does not depend on the number of threads.
pub(super) fn par_rows(
    exec: &Exec,
    n_rows: usize,
    row_len: usize,
    f: &(dyn Fn(core::ops::Range<usize>) -> KResult + Sync),
) -> KResult {
    let n_threads = exec.n_threads();
    if n_threads <= 1 || n_rows < 2 || n_rows.saturating_mul(row_len) < PAR_MIN_ELEMS {
        return f(0..n_rows);
    }
    // A few ranges per thread, so a thread the OS delays does not hold up the op.
    let n_jobs = (4 * n_threads).min(n_rows);
    let errs: Vec<ErrSlot> = (0..n_jobs).map(|_| ErrSlot(core::cell::UnsafeCell::new(None))).collect();
    exec.run(n_jobs, &|j| {
        if let Err(e) = f(j * n_rows / n_jobs..(j + 1) * n_rows / n_jobs) {
            // SAFETY: slot j belongs to this job (see ErrSlot).
            unsafe { *errs[j].0.get() = Some(e) };
        }
    });
    match errs.into_iter().find_map(|e| e.0.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A tensor resolved to a host address: what the kernels (and worker threads) see instead
/// of the `Rc` handle.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TensorView {
    pub ptr: *mut u8,
    pub ty: GgmlType,
    pub ne: [usize; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    /// A weight its buffer holds in the repacked layout (`cpu::repack_buffer`): 2-D, contiguous.
    pub packed: bool,
}

// SAFETY: a plain address plus shape; kernels that share one across threads write disjoint
// elements through it.
unsafe impl Send for TensorView {}
unsafe impl Sync for TensorView {}

impl TensorView {
    pub fn of(t: &Tensor) -> Result<TensorView, KernelError> {
        let ptr = t.host_ptr().ok_or_else(|| {
            KernelError::Unsupported(format!(
                "tensor '{}' has no data in host memory (not allocated, or on another device)",
                t.name()
            ))
        })?;
        if t.ne.iter().any(|&n| n < 0) {
            return Err(KernelError::Invalid(format!("tensor '{}' has negative ne {:?}", t.name(), t.ne)));
        }
        // The buffer knows whether it holds the weight packed; a partial view of one is refused.
        let packed = super::repack_buffer::packed(t).map_err(KernelError::Unsupported)?;
        Ok(TensorView { ptr, ty: t.ty, ne: t.ne.map(|n| n as usize), nb: t.nb, packed })
    }

    pub(super) fn nrows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    pub(super) fn nelements(&self) -> usize {
        self.ne.iter().product()
    }

    #[inline]
    pub(super) fn row(&self, i1: usize, i2: usize, i3: usize) -> *mut u8 {
        // wrapping: the address is only dereferenced for in-range indices.
        self.ptr.wrapping_add(i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3])
    }

    pub(super) fn is_contiguous(&self) -> bool {
        let ts = self.ty.type_size();
        let blck = self.ty.blck_size();
        let mut next = ts;
        if self.ne[0] != blck && self.nb[0] != next {
            return false;
        }
        next *= self.ne[0] / blck;
        for i in 1..MAX_DIMS {
            if self.ne[i] != 1 {
                if self.nb[i] != next {
                    return false;
                }
                next *= self.ne[i];
            }
        }
        true
    }

    /// Indices (i1, i2, i3) of row `r` when rows are counted i1 fastest (the order of
    /// [`TensorView::for_each_row`]).
    #[inline]
    pub(super) fn row_index(&self, r: usize) -> (usize, usize, usize) {
        let (n1, n2) = (self.ne[1].max(1), self.ne[2].max(1));
        (r % n1, (r / n1) % n2, r / (n1 * n2))
    }

    /// Calls `f(i1, i2, i3)` for every row, in memory order of a contiguous tensor.
    pub(super) fn for_each_row(&self, mut f: impl FnMut(usize, usize, usize) -> KResult) -> KResult {
        for i3 in 0..self.ne[3] {
            for i2 in 0..self.ne[2] {
                for i1 in 0..self.ne[1] {
                    f(i1, i2, i3)?;
                }
            }
        }
        Ok(())
    }
}

fn is_float(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// Quantized types crate::quants can write (the K-quant weight types are read-only: such
/// weights come from files).
pub(crate) fn can_quantize_to(ty: GgmlType) -> bool {
    ty.is_quantized() && crate::quants::can_quantize(ty)
}

// --- element conversion ---

#[inline(always)]
unsafe fn load_f32(p: *const u8) -> f32 {
    (p as *const f32).read_unaligned()
}
#[inline(always)]
unsafe fn load_f16(p: *const u8) -> f32 {
    f16_bits_to_f32((p as *const u16).read_unaligned())
}
#[inline(always)]
unsafe fn load_bf16(p: *const u8) -> f32 {
    f32::from_bits(((p as *const u16).read_unaligned() as u32) << 16)
}
#[inline(always)]
unsafe fn store_f32(p: *mut u8, v: f32) {
    (p as *mut f32).write_unaligned(v)
}
#[inline(always)]
unsafe fn store_f16(p: *mut u8, v: f32) {
    (p as *mut u16).write_unaligned(f16::from_f32(v).to_bits())
}
#[inline(always)]
unsafe fn store_bf16(p: *mut u8, v: f32) {
    (p as *mut u16).write_unaligned(bf16::from_f32(v).to_bits())
}

/// `n` elements, `snb`/`dnb` bytes apart, read then written one at a time (so exact
/// aliasing of source and destination is fine).
#[inline(always)]
unsafe fn convert_loop(
    src: *const u8,
    snb: usize,
    dst: *mut u8,
    dnb: usize,
    n: usize,
    load: unsafe fn(*const u8) -> f32,
    store: unsafe fn(*mut u8, f32),
) {
    for i in 0..n {
        store(dst.add(i * dnb), load(src.add(i * snb)));
    }
}

/// ggml's dup for one row: `n` elements of `sty` at `src` (`snb` bytes apart) into `dty` at
/// `dst` (`dnb` apart), converting. Quantized rows must be packed (nb0 = block size).
///
/// # Safety
/// Both rows must lie in allocated memory; they may be the same row, not partly overlap
/// with different strides.
pub(crate) unsafe fn convert_row(
    src: *const u8,
    sty: GgmlType,
    snb: usize,
    dst: *mut u8,
    dty: GgmlType,
    dnb: usize,
    n: usize,
) -> KResult {
    use GgmlType::*;
    let (sts, dts) = (sty.type_size(), dty.type_size());
    if sty.is_quantized() || dty.is_quantized() {
        let blck = if sty.is_quantized() { sty.blck_size() } else { dty.blck_size() };
        if !n.is_multiple_of(blck) {
            return unsupported(format!("{sty} → {dty}: a row of {n} elements is not whole blocks of {blck}"));
        }
        if (sty.is_quantized() && snb != sts) || (dty.is_quantized() && dnb != dts) {
            return unsupported(format!("{sty} → {dty}: quantized rows must be packed"));
        }
    }
    if sty == dty {
        if sty.is_quantized() || (snb == sts && dnb == dts) {
            core::ptr::copy(src, dst, sty.row_size(n as i64));
        } else {
            for i in 0..n {
                core::ptr::copy(src.add(i * snb), dst.add(i * dnb), sts);
            }
        }
        return Ok(());
    }
    if dty.is_quantized() {
        if !can_quantize_to(dty) {
            return unsupported(format!("no quantization to {dty} (weights of that type come from files)"));
        }
        let mut tmp = vec![0.0f32; n];
        convert_row(src, sty, snb, tmp.as_mut_ptr() as *mut u8, F32, 4, n)?;
        let out = core::slice::from_raw_parts_mut(dst, dty.row_size(n as i64));
        crate::cpu::arch::quantize_row(dty, &tmp, out);
        return Ok(());
    }
    if sty.is_quantized() {
        let mut tmp = vec![0.0f32; n];
        crate::quants::dequantize_row(sty, core::slice::from_raw_parts(src, sty.row_size(n as i64)), &mut tmp);
        return convert_row(tmp.as_ptr() as *const u8, F32, 4, dst, dty, dnb, n);
    }
    let load: unsafe fn(*const u8) -> f32 = match sty {
        F32 => load_f32,
        F16 => load_f16,
        BF16 => load_bf16,
        _ => return unsupported(format!("no conversion from {sty} to {dty}")),
    };
    let store: unsafe fn(*mut u8, f32) = match dty {
        F32 => store_f32,
        F16 => store_f16,
        BF16 => store_bf16,
        _ => return unsupported(format!("no conversion from {sty} to {dty}")),
    };
    // The common pairs get loops of their own so the conversion inlines.
    match (sty, dty) {
        (F32, F16) => convert_loop(src, snb, dst, dnb, n, load_f32, store_f16),
        (F16, F32) => convert_loop(src, snb, dst, dnb, n, load_f16, store_f32),
        (F32, F32) => convert_loop(src, snb, dst, dnb, n, load_f32, store_f32),
        _ => convert_loop(src, snb, dst, dnb, n, load, store),
    }
    Ok(())
}

/// Row (i1, i2, i3) of `t` as f32 into `out` (`t.ne[0]` elements).
pub(super) fn read_row(t: &TensorView, i1: usize, i2: usize, i3: usize, out: &mut [f32]) -> KResult {
    debug_assert_eq!(out.len(), t.ne[0]);
    // SAFETY: the row is inside t's allocation; `out` is our own scratch.
    unsafe { convert_row(t.row(i1, i2, i3), t.ty, t.nb[0], out.as_mut_ptr() as *mut u8, GgmlType::F32, 4, t.ne[0]) }
}

/// `vals` into row (i1, i2, i3) of `t`, converting to its type.
pub(super) fn write_row(t: &TensorView, i1: usize, i2: usize, i3: usize, vals: &[f32]) -> KResult {
    debug_assert_eq!(vals.len(), t.ne[0]);
    // SAFETY: as in read_row.
    unsafe { convert_row(vals.as_ptr() as *const u8, GgmlType::F32, 4, t.row(i1, i2, i3), t.ty, t.nb[0], t.ne[0]) }
}

// --- cont, cpy ---

/// ggml_compute_forward_dup: `src` into `dst` (same element count), converting types.
/// Same shapes copy row by row (a memcpy per row when both rows are packed and the types
/// match); a contiguous `dst` of another shape (cont_4d) is filled in `src`'s logical order;
/// anything else goes element by element with an index counter for each side.
pub(crate) fn dup(src: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    if src.nelements() != dst.nelements() {
        return Err(KernelError::Invalid(format!(
            "copy of {} elements ne={:?} into {} elements ne={:?}",
            src.nelements(),
            src.ne,
            dst.nelements(),
            dst.ne
        )));
    }
    if src.ne == dst.ne {
        // Fast path: both entirely packed and the same type.
        if src.ty == dst.ty && src.is_contiguous() && dst.is_contiguous() {
            let n = src.ty.row_size(src.ne[0] as i64) * src.nrows();
            // SAFETY: both spans are the tensors' own; copy tolerates overlap.
            unsafe { core::ptr::copy(src.ptr, dst.ptr, n) };
            return Ok(());
        }
        // f32 through strides on either side (a transposed store into the V cache): one
        // element at a time, with no per-row call.
        if src.ty == GgmlType::F32 && dst.ty == GgmlType::F32 && (src.nb[0] != 4 || dst.nb[0] != 4) {
            return par_rows(exec, src.nrows(), src.ne[0], &|rows| {
                for r in rows {
                    let (i1, i2, i3) = src.row_index(r);
                    let (s, d) = (src.row(i1, i2, i3), dst.row(i1, i2, i3));
                    for i0 in 0..src.ne[0] {
                        // SAFETY: element (i0, i1, i2, i3) is inside both tensors; a read
                        // precedes the write of the same index, so exact aliasing is fine.
                        unsafe { store_f32(d.add(i0 * dst.nb[0]), load_f32(s.add(i0 * src.nb[0]))) };
                    }
                }
                Ok(())
            });
        }
        // Same shapes: row (i1, i2, i3) of src into the same row of dst.
        return convert_rows(exec, src, dst.ty, dst.nb[0], &|_, (i1, i2, i3)| dst.row(i1, i2, i3));
    }
    if dst.is_contiguous() {
        let dblck = dst.ty.blck_size();
        if !src.ne[0].is_multiple_of(dblck) || !src.ne[0].is_multiple_of(src.ty.blck_size()) {
            return unsupported(format!(
                "copy of rows of {} {} elements into {} (block {dblck}) of another shape",
                src.ne[0], src.ty, dst.ty
            ));
        }
        let row_bytes = dst.ty.row_size(src.ne[0] as i64);
        // Row r of src (counted i1 fastest) is the r-th run of ne0 elements of dst: packed,
        // holding every element of src in order.
        return convert_rows(exec, src, dst.ty, dst.ty.type_size(), &|r, _| dst.ptr.wrapping_add(r * row_bytes));
    }
    if src.ty.is_quantized() || dst.ty.is_quantized() {
        return unsupported(format!("strided copy between different shapes of {} and {}", src.ty, dst.ty));
    }
    // Element by element: walk src in logical order, advance dst's indices alongside.
    let mut di = [0usize; MAX_DIMS];
    src.for_each_row(|i1, i2, i3| {
        let srow = src.row(i1, i2, i3);
        for i0 in 0..src.ne[0] {
            let d = dst.ptr.wrapping_add((0..MAX_DIMS).map(|k| di[k] * dst.nb[k]).sum());
            // SAFETY: di stays inside dst.ne (it counts through the same number of elements).
            unsafe { convert_row(srow.add(i0 * src.nb[0]), src.ty, src.nb[0], d, dst.ty, dst.nb[0], 1)? };
            for (i, &n) in di.iter_mut().zip(&dst.ne) {
                *i += 1;
                if *i < n {
                    break;
                }
                *i = 0;
            }
        }
        Ok(())
    })
}

/// Each row of `src` converted into the `dst_ty` row at `dst_row(r, (i1, i2, i3))` (elements
/// `dst_nb0` bytes apart), rows spread over the threads. The caller vouches that every
/// destination row lies inside its tensor and that no two rows overlap.
fn convert_rows(
    exec: &Exec,
    src: &TensorView,
    dst_ty: GgmlType,
    dst_nb0: usize,
    dst_row: &(dyn Fn(usize, (usize, usize, usize)) -> *mut u8 + Sync),
) -> KResult {
    par_rows(exec, src.nrows(), src.ne[0], &|rows| {
        for r in rows {
            let idx @ (i1, i2, i3) = src.row_index(r);
            // SAFETY: src's row is inside src; the destination row as the caller vouches.
            unsafe {
                convert_row(src.row(i1, i2, i3), src.ty, src.nb[0], dst_row(r, idx), dst_ty, dst_nb0, src.ne[0])?
            };
        }
        Ok(())
    })
}

// --- get_rows ---

/// ggml_compute_forward_get_rows: dst[:, i10, i11, i12] = a[:, b[i10, i11, i12], i11, i12],
/// with a broadcast over dims 2 and 3 where it has one entry.
pub(crate) fn get_rows(a: &TensorView, b: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    if b.ty != GgmlType::I32 {
        return unsupported(format!("get_rows indices must be i32, not {}", b.ty));
    }
    if dst.ne != [a.ne[0], b.ne[0], b.ne[1], b.ne[2]] || a.ne[2] == 0 || a.ne[3] == 0 {
        return Err(KernelError::Invalid(format!(
            "get_rows: a ne={:?}, indices ne={:?}, result ne={:?}",
            a.ne, b.ne, dst.ne
        )));
    }
    if a.packed && (a.ne[2] != 1 || a.ne[3] != 1) {
        return unsupported(format!("get_rows: a repacked table of ne {:?}", a.ne));
    }
    // One result row per index; dst's rows are counted i10 fastest (dst.ne[1..] = b.ne[..3]).
    par_rows(exec, dst.nrows(), a.ne[0], &|rows| {
        // A repacked table's row in ggml's layout.
        let mut plain = if a.packed { vec![0u8; a.nb[1]] } else { Vec::new() };
        for r in rows {
            let (i10, i11, i12) = dst.row_index(r);
            // SAFETY: indices within b.ne.
            let idx =
                unsafe { (b.ptr.add(i10 * b.nb[0] + i11 * b.nb[1] + i12 * b.nb[2]) as *const i32).read_unaligned() };
            if idx < 0 || idx as usize >= a.ne[1] {
                return Err(KernelError::Invalid(format!(
                    "get_rows: index {idx} at [{i10}, {i11}, {i12}] is outside 0..{}",
                    a.ne[1]
                )));
            }
            let mut src = a.row(idx as usize, i11 % a.ne[2], i12 % a.ne[3]);
            if a.packed {
                // SAFETY: a is one contiguous matrix of ne[1] rows (checked above).
                let data = unsafe { core::slice::from_raw_parts(a.ptr as *const u8, a.ne[1] * a.nb[1]) };
                crate::cpu::arch::repack::unpack_row(a.ty, a.ne[0], a.ne[1], data, idx as usize, &mut plain);
                src = plain.as_mut_ptr();
            }
            // SAFETY: row idx is inside a (or its unpacked copy); the destination row inside dst.
            unsafe { convert_row(src, a.ty, a.nb[0], dst.row(i10, i11, i12), dst.ty, dst.nb[0], a.ne[0])? };
        }
        Ok(())
    })
}

// --- elementwise and row-wise ---

fn check_same_shape(a: &TensorView, dst: &TensorView) -> KResult {
    if a.ne != dst.ne {
        return Err(KernelError::Invalid(format!("source ne={:?} and result ne={:?} differ", a.ne, dst.ne)));
    }
    if !is_float(a.ty) && !a.ty.is_quantized() {
        return unsupported(format!("{} input (float types only)", a.ty));
    }
    Ok(())
}

/// Applies `f` to each row of `a` (as f32, with its indices) and writes the result to
/// `dst`, rows spread over the threads; `init` makes each range's scratch state.
pub(super) fn map_rows<S>(
    exec: &Exec,
    a: &TensorView,
    dst: &TensorView,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &mut [f32], [usize; 3]) -> KResult + Sync,
) -> KResult {
    check_same_shape(a, dst)?;
    par_rows(exec, a.nrows(), a.ne[0], &|rows| {
        let mut row = vec![0.0f32; a.ne[0]];
        let mut state = init();
        for r in rows {
            let (i1, i2, i3) = a.row_index(r);
            read_row(a, i1, i2, i3, &mut row)?;
            f(&mut state, &mut row, [i1, i2, i3])?;
            write_row(dst, i1, i2, i3, &row)?;
        }
        Ok(())
    })
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum BinaryOp {
    Add,
    Mul,
}

/// ggml_add / ggml_mul: `b` repeats over `a` in every dim (index modulo b's extent).
pub(crate) fn binary(op: BinaryOp, a: &TensorView, b: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    if (0..MAX_DIMS).any(|i| b.ne[i] == 0 || !a.ne[i].is_multiple_of(b.ne[i])) {
        return Err(KernelError::Invalid(format!("b ne={:?} does not repeat onto a ne={:?}", b.ne, a.ne)));
    }
    let nb0 = b.ne[0];
    // State: b's row as f32, and which row it is (a bias is read once per range).
    let init = || (vec![0.0f32; nb0], usize::MAX);
    map_rows(exec, a, dst, init, |(brow, cached), row, [i1, i2, i3]| {
        let (j1, j2, j3) = (i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
        let key = (j3 * b.ne[2] + j2) * b.ne[1] + j1;
        if key != *cached {
            read_row(b, j1, j2, j3, brow)?;
            *cached = key;
        }
        match op {
            BinaryOp::Add => {
                for chunk in row.chunks_mut(nb0) {
                    chunk.iter_mut().zip(brow.iter()).for_each(|(x, y)| *x += y);
                }
            }
            BinaryOp::Mul => {
                for chunk in row.chunks_mut(nb0) {
                    chunk.iter_mut().zip(brow.iter()).for_each(|(x, y)| *x *= y);
                }
            }
        }
        Ok(())
    })
}

pub(crate) fn scale(a: &TensorView, dst: &TensorView, s: f32, exec: &Exec) -> KResult {
    map_rows(
        exec,
        a,
        dst,
        || (),
        |_, row, _| {
            row.iter_mut().for_each(|x| *x *= s);
            Ok(())
        },
    )
}

/// ggml_norm: (x - mean) / sqrt(var + eps) per row; mean and variance summed in f64.
pub(crate) fn norm(a: &TensorView, dst: &TensorView, eps: f32, exec: &Exec) -> KResult {
    let n = a.ne[0];
    map_rows(
        exec,
        a,
        dst,
        || (),
        |_, row, _| {
            if n == 0 {
                return Ok(());
            }
            let mean = (row.iter().map(|&x| x as f64).sum::<f64>() / n as f64) as f32;
            let mut var = 0.0f64;
            for x in row.iter_mut() {
                *x -= mean;
                var += (*x as f64) * (*x as f64);
            }
            let var = (var / n as f64) as f32;
            let s = 1.0 / libm::sqrtf(var + eps);
            row.iter_mut().for_each(|x| *x *= s);
            Ok(())
        },
    )
}

pub(crate) fn gelu(a: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    let gelu = super::arch::kernels().gelu;
    map_rows(
        exec,
        a,
        dst,
        || (),
        |_, row, _| {
            gelu(row);
            Ok(())
        },
    )
}

/// ggml_diag_mask_inf: a[i0, i1] = -inf where i0 > n_past + i1.
pub(crate) fn diag_mask_inf(a: &TensorView, dst: &TensorView, n_past: i32, exec: &Exec) -> KResult {
    map_rows(
        exec,
        a,
        dst,
        || (),
        |_, row, [i1, _, _]| {
            let first = (n_past as i64 + i1 as i64 + 1).max(0) as usize;
            if first < row.len() {
                row[first..].iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
            }
            Ok(())
        },
    )
}

/// ggml_soft_max_ext with max_bias = 0: softmax(a·scale + mask) over each row. The mask's
/// row i1 is used (it may have more rows), broadcast over dims 2 and 3. A row that is -inf
/// everywhere comes out as zeros (ggml would give NaN).
pub(crate) fn soft_max(
    a: &TensorView,
    mask: Option<&TensorView>,
    dst: &TensorView,
    scale: f32,
    max_bias: f32,
    exec: &Exec,
) -> KResult {
    if max_bias != 0.0 {
        return unsupported(format!("soft_max with max_bias {max_bias} (ALiBi) is not implemented"));
    }
    if let Some(m) = mask {
        if m.ne[0] != a.ne[0] || m.ne[1] < a.ne[1] || m.ne[2] == 0 || m.ne[3] == 0 {
            return Err(KernelError::Invalid(format!("soft_max: mask ne={:?} does not fit ne={:?}", m.ne, a.ne)));
        }
        if !matches!(m.ty, GgmlType::F32 | GgmlType::F16) {
            return unsupported(format!("soft_max mask of type {}", m.ty));
        }
    }
    let k = super::arch::kernels();
    let n0 = a.ne[0];
    map_rows(
        exec,
        a,
        dst,
        || vec![0.0f32; n0],
        |mrow, row, [i1, i2, i3]| {
            if let Some(m) = mask {
                read_row(m, i1, i2 % m.ne[2], i3 % m.ne[3], mrow)?;
                row.iter_mut().zip(mrow.iter()).for_each(|(x, &mv)| *x = *x * scale + mv);
            } else if scale != 1.0 {
                row.iter_mut().for_each(|x| *x *= scale);
            }
            let max = (k.max)(row);
            if max == f32::NEG_INFINITY {
                row.iter_mut().for_each(|x| *x = 0.0);
                return Ok(());
            }
            let sum = (k.exp_sum)(row, max);
            let inv = (1.0 / sum) as f32;
            row.iter_mut().for_each(|x| *x *= inv);
            Ok(())
        },
    )
}

// --- mul_mat ---

/// Where a kernel's parallel jobs run: a thread pool (native `std` builds), else the
/// calling thread.
#[derive(Clone, Copy, Default)]
pub(crate) struct Exec<'a> {
    #[cfg(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))]
    pub pool: Option<&'a super::pool::ThreadPool>,
    pub _life: core::marker::PhantomData<&'a ()>,
}

impl Exec<'_> {
    pub fn n_threads(&self) -> usize {
        #[cfg(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))]
        if let Some(p) = self.pool {
            return p.n_threads();
        }
        1
    }

    /// Runs `job(0..n_jobs)`, spread over the threads when there are several.
    pub fn run(&self, n_jobs: usize, job: &(dyn Fn(usize) + Sync)) {
        #[cfg(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))]
        if let Some(p) = self.pool {
            return p.run(n_jobs, job);
        }
        (0..n_jobs).for_each(job);
    }
}

/// How a row of `a` is dotted with a row of `b`.
#[derive(Clone, Copy)]
enum DotKind {
    F32,
    F16,
    /// `b` rows were quantized to `ty.vec_dot_type()`; dotted by crate::cpu::arch::gemm.
    Quant(GgmlType),
}

/// From this many rows of `b` on, a block of F16 rows of `a` is converted to f32 once
/// and goes through the f32 kernel; below, rows are converted as they are loaded. With
/// F16C (x86) a conversion is one instruction, and below 16 rows converting the block
/// (written out and read back) costs more than converting each row again per 3-column
/// tile: a 4-sequence decode step of the 124M F16 shape took 2.9× one sequence's time with
/// the threshold at 4, 2.0× at 16. SIMD128 converts f16 with integer steps, so there the
/// block is converted once from 4 rows on (2.0× against 2.6× at 16, in Chromium).
const F16_CONVERT_MIN_N: usize = if cfg!(target_family = "wasm") { 4 } else { 16 };

/// Everything a worker needs, as plain addresses.
struct MulMatPlan {
    a: TensorView,
    /// Rows of `b` in the form the dot wants: `b` itself when it is already packed f32
    /// rows, else converted (or quantized) rows in `wdata`.
    b_ptr: *const u8,
    b_nb: [usize; MAX_DIMS],
    d: TensorView,
    kind: DotKind,
    /// b.ne[2] / a.ne[2] and b.ne[3] / a.ne[3]: how many b batches share one a matrix.
    r2: usize,
    r3: usize,
    /// Rows of `b` per pass over a block of `a`: keeps them in L2 with the block.
    n_block: usize,
    /// The F32 and F16 entries' float products and the f16 row conversion, from the one
    /// table, read once per mul_mat.
    gemm_f32: FloatGemm,
    gemm_f16: FloatGemm,
    f16_to_f32: fn(&[u16], &mut [f32]),
}

// SAFETY: read-only inputs; each job writes its own block of dst.
unsafe impl Sync for MulMatPlan {}

impl MulMatPlan {
    /// Computes dst[m, n, i2, i3] for m in m0..m1, every n, batch (i2, i3).
    fn run(&self, batch: usize, m0: usize, m1: usize) {
        let (a, d) = (&self.a, &self.d);
        let k = a.ne[0];
        let (i2, i3) = (batch % d.ne[2], batch / d.ne[2]);
        let a_base = a.ptr.wrapping_add((i2 / self.r2) * a.nb[2] + (i3 / self.r3) * a.nb[3]) as *const u8;
        let a_rows = a_base.wrapping_add(m0 * a.nb[1]);
        let b_base = self.b_ptr.wrapping_add(i2 * self.b_nb[2] + i3 * self.b_nb[3]);
        let c_base = d.row(0, i2, i3) as *mut f32;
        let (mb, ldc) = (m1 - m0, d.nb[1] / 4);
        // F16 rows converted once for the whole block, when enough b rows reuse them.
        let mut a_f32 = Vec::new();
        if matches!(self.kind, DotKind::F16) && d.ne[1] >= F16_CONVERT_MIN_N {
            a_f32 = vec![0f32; mb * k];
            for (i, row) in a_f32.chunks_exact_mut(k).enumerate() {
                // SAFETY: row m0 + i of a is inside a, packed f16, 2-aligned (checked by the plan).
                let src = unsafe { core::slice::from_raw_parts(a_rows.add(i * a.nb[1]) as *const u16, k) };
                (self.f16_to_f32)(src, row);
            }
        }
        if d.ne[1] == 1 && matches!(self.kind, DotKind::F32 | DotKind::F16) {
            // SAFETY: as below, for the one row of b.
            unsafe { self.run_decode(mb, a_rows, b_base, c_base.wrapping_add(m0)) };
            return;
        }
        let mut n0 = 0;
        while n0 < d.ne[1] {
            let nb = self.n_block.min(d.ne[1] - n0);
            let b_rows = b_base.wrapping_add(n0 * self.b_nb[1]);
            let c = c_base.wrapping_add(n0 * ldc + m0);
            // SAFETY: the plan checked every row below lies in its tensor, is aligned for
            // its element type, and that dst is packed f32 rows (c[j·ldc + i] for i < ne0 = a.ne1).
            unsafe {
                match self.kind {
                    DotKind::F32 => {
                        (self.gemm_f32)(k, mb, nb, a_rows, a.nb[1] / 4, b_rows as *const f32, self.b_nb[1] / 4, c, ldc)
                    }
                    DotKind::F16 if !a_f32.is_empty() => (self.gemm_f32)(
                        k,
                        mb,
                        nb,
                        a_f32.as_ptr() as *const u8,
                        k,
                        b_rows as *const f32,
                        self.b_nb[1] / 4,
                        c,
                        ldc,
                    ),
                    DotKind::F16 => {
                        (self.gemm_f16)(k, mb, nb, a_rows, a.nb[1] / 2, b_rows as *const f32, self.b_nb[1] / 4, c, ldc)
                    }
                    DotKind::Quant(ty) if a.packed => {
                        // Blocks start at a multiple of the group's rows and end at one or at
                        // a.ne[1] (mul_mat's job split), so they hold whole groups then plain rows.
                        let b_len = (nb - 1) * self.b_nb[1] + ty.vec_dot_type().row_size(k as i64);
                        crate::cpu::arch::repack::gemm_packed(
                            ty,
                            k,
                            mb,
                            nb,
                            core::slice::from_raw_parts(a_rows, mb * a.nb[1]),
                            core::slice::from_raw_parts(b_rows, b_len),
                            self.b_nb[1],
                            core::slice::from_raw_parts_mut(c, (nb - 1) * ldc + mb),
                            ldc,
                        );
                    }
                    DotKind::Quant(ty) => {
                        let a_len = (mb - 1) * a.nb[1] + ty.row_size(k as i64);
                        let b_len = (nb - 1) * self.b_nb[1] + ty.vec_dot_type().row_size(k as i64);
                        crate::cpu::arch::gemm(
                            ty,
                            k,
                            mb,
                            nb,
                            core::slice::from_raw_parts(a_rows, a_len),
                            a.nb[1],
                            core::slice::from_raw_parts(b_rows, b_len),
                            self.b_nb[1],
                            core::slice::from_raw_parts_mut(c, (nb - 1) * ldc + mb),
                            ldc,
                        );
                    }
                }
            }
            n0 += nb;
        }
    }

    /// A decode step's float product (one row of b, rows `a_rows..` of a block of `mb`):
    /// gemm calls on 4 rows a quarter of the block apart, the order `arch::decode_row`
    /// gives the quantized products, so the weights stream from four pages instead of as one
    /// stream of short rows (K = 768 f16 rows are 1.5 KiB, read ~35% slower that way). Each
    /// row's sum is the one a call on adjacent rows gives.
    ///
    /// # Safety
    /// As in [`MulMatPlan::run`]: rows inside a and b, `c[0..mb]` inside dst.
    unsafe fn run_decode(&self, mb: usize, a_rows: *const u8, b_row: *const u8, c: *mut f32) {
        let (k, nb1) = (self.a.ne[0], self.a.nb[1]);
        let ldb = self.b_nb[1] / 4;
        // `m` rows from row `first`, `stride` rows apart, results to c[0..m].
        let gemm = |m: usize, first: usize, stride: usize, c: *mut f32| {
            let a = a_rows.add(first * nb1);
            match self.kind {
                DotKind::F16 => (self.gemm_f16)(k, m, 1, a, stride * nb1 / 2, b_row as *const f32, ldb, c, m),
                _ => (self.gemm_f32)(k, m, 1, a, stride * nb1 / 4, b_row as *const f32, ldb, c, m),
            }
        };
        // Short rows (a head of the K cache: 64 values) gain nothing from four streams and
        // pay a call per 4 rows: one call takes them all.
        let q = if mb >= 16 && k * self.a.ty.type_size() >= 1024 { mb / 4 } else { 0 };
        let mut out = [0f32; 4];
        for i in 0..q {
            gemm(4, i, q, out.as_mut_ptr());
            for (r, v) in out.iter().enumerate() {
                *c.add(i + r * q) = *v;
            }
        }
        if 4 * q < mb {
            gemm(mb - 4 * q, 4 * q, 1, c.add(4 * q));
        }
    }
}

fn aligned(p: *const u8, align: usize) -> bool {
    (p as usize).is_multiple_of(align)
}

/// ggml_compute_forward_mul_mat: dst[m, n, i2, i3] = a[:, m, i2/r2, i3/r3] · b[:, n, i2, i3].
///
/// `a` may be F32, F16 or a quantized type, rows packed (nb0 = element size; the other
/// strides are free, as for a permuted K). `b` may be any float type and layout: unless it
/// is already packed f32 rows, its rows are converted once into a scratch matrix — for a
/// quantized `a`, quantized to `a.ty.vec_dot_type()` and dotted by `cpu::arch::gemm`. F16 `a`
/// values meet f32 `b` rows as they are (the F16 entry's `float_gemm`): a block of `a` rows is
/// converted to f32 once when enough rows of `b` reuse it, else converted as it is loaded.
///
/// Work is split into (batch, block of a's rows) jobs; a block of a's rows stays in cache
/// while the rows of b pass by, in register tiles of several rows of each
/// (the F32 entry's `float_gemm`, `cpu::arch::kernels`). With several threads, they take jobs from a shared counter.
pub(crate) fn mul_mat(a: &TensorView, b: &TensorView, d: &TensorView, exec: &Exec) -> KResult {
    let k = a.ne[0];
    if b.ne[0] != k
        || a.ne[2] == 0
        || a.ne[3] == 0
        || !b.ne[2].is_multiple_of(a.ne[2])
        || !b.ne[3].is_multiple_of(a.ne[3])
        || d.ne != [a.ne[1], b.ne[1], b.ne[2], b.ne[3]]
    {
        return Err(KernelError::Invalid(format!(
            "mul_mat: a ne={:?}, b ne={:?}, result ne={:?} do not fit",
            a.ne, b.ne, d.ne
        )));
    }
    if d.ty != GgmlType::F32 || d.nb[0] != 4 || !aligned(d.ptr, 4) || (d.ne[1] > 1 && !d.nb[1].is_multiple_of(4)) {
        return unsupported(format!("mul_mat result must be packed, aligned f32 rows (type {}, nb {:?})", d.ty, d.nb));
    }
    if a.packed && (a.ne[2] != 1 || a.ne[3] != 1 || a.nb[1] != a.ty.row_size(k as i64)) {
        return unsupported(format!("mul_mat: a repacked weight of ne {:?}, nb {:?}", a.ne, a.nb));
    }
    if a.nb[0] != a.ty.type_size() && a.ne[0] > 1 {
        return unsupported(format!(
            "mul_mat: rows of a are not packed (nb0 = {} for {}); make it contiguous with cont",
            a.nb[0], a.ty
        ));
    }
    let kind = match a.ty {
        GgmlType::F32 => DotKind::F32,
        GgmlType::F16 => DotKind::F16,
        // Quantized and BF16 weights: b is converted to the weight's vec_dot_type.
        t if crate::cpu::arch::cpu_traits(t).vec_dot.is_some() => {
            let vdt = crate::cpu::arch::cpu_traits(t).vec_dot_type;
            if !k.is_multiple_of(t.blck_size()) || !k.is_multiple_of(vdt.blck_size()) {
                return unsupported(format!("mul_mat: K = {k} is not whole {t}/{vdt} blocks"));
            }
            DotKind::Quant(t)
        }
        t => return unsupported(format!("mul_mat with a of type {t}")),
    };
    if !is_float(b.ty) {
        return unsupported(format!("mul_mat with b of type {}", b.ty));
    }
    let elem_align = match kind {
        DotKind::F32 => 4,
        DotKind::F16 => 2,
        DotKind::Quant(_) => 1,
    };
    let a_rows_aligned =
        aligned(a.ptr, elem_align) && (1..MAX_DIMS).all(|i| a.ne[i] <= 1 || a.nb[i].is_multiple_of(elem_align));
    if !a_rows_aligned {
        return unsupported(format!("mul_mat: rows of a ({}) are not {elem_align}-byte aligned", a.ty));
    }
    if k == 0 {
        d.for_each_row(|i1, i2, i3| write_row(d, i1, i2, i3, &vec![0.0; d.ne[0]]))?;
        return Ok(());
    }

    // b in the form the dot product wants.
    let b_is_packed_f32 = b.ty == GgmlType::F32
        && b.nb[0] == 4
        && aligned(b.ptr, 4)
        && (1..MAX_DIMS).all(|i| b.ne[i] <= 1 || b.nb[i].is_multiple_of(4));
    // Scratch rows: f32 for float dots; u64 words for quantized rows so their blocks are
    // at least as aligned as a packed tensor's would be.
    let wf32: Vec<f32>;
    let wq: Vec<u64>;
    let (b_ptr, b_nb) = match kind {
        DotKind::F32 | DotKind::F16 if b_is_packed_f32 => (b.ptr as *const u8, b.nb),
        DotKind::F32 | DotKind::F16 => {
            // Packed f32 copy, in a Vec<f32> for alignment.
            let mut w = vec![0.0f32; k * b.nrows()];
            let out = SendPtr(w.as_mut_ptr() as *mut u8);
            par_rows(exec, b.nrows(), k, &|rows| {
                for r in rows {
                    let (i1, i2, i3) = b.row_index(r);
                    // SAFETY: row r of the scratch is this range's alone.
                    let dst = unsafe { core::slice::from_raw_parts_mut(out.at(r * k * 4) as *mut f32, k) };
                    read_row(b, i1, i2, i3, dst)?;
                }
                Ok(())
            })?;
            wf32 = w;
            let nb1 = k * 4;
            (wf32.as_ptr() as *const u8, [4, nb1, nb1 * b.ne[1], nb1 * b.ne[1] * b.ne[2]])
        }
        DotKind::Quant(t) => {
            let vdt = crate::cpu::arch::cpu_traits(t).vec_dot_type;
            let from_float = crate::cpu::arch::cpu_traits(vdt).from_float.expect("every vec_dot_type can be written");
            let rs = vdt.row_size(k as i64);
            let mut words = vec![0u64; (rs * b.nrows()).div_ceil(8)];
            let out = SendPtr(words.as_mut_ptr() as *mut u8);
            // Quantized once per row of b, the rows spread over the threads (a 64-token
            // prompt's rows are 10-25% of a quantized mul_mat on one thread).
            par_rows(exec, b.nrows(), k, &|rows| {
                let mut row = vec![0.0f32; k];
                for r in rows {
                    let (i1, i2, i3) = b.row_index(r);
                    read_row(b, i1, i2, i3, &mut row)?;
                    // SAFETY: bytes r·rs .. (r+1)·rs of the scratch are this range's alone.
                    let dst = unsafe { core::slice::from_raw_parts_mut(out.at(r * rs), rs) };
                    from_float(&row, dst);
                }
                Ok(())
            })?;
            wq = words;
            (wq.as_ptr() as *const u8, [vdt.type_size(), rs, rs * b.ne[1], rs * b.ne[1] * b.ne[2]])
        }
    };
    let kernels = super::arch::kernels();
    let b_row_bytes = b_nb[0] * k
        / match kind {
            DotKind::Quant(t) => t.vec_dot_type().blck_size(),
            _ => 1,
        };
    let plan = MulMatPlan {
        a: *a,
        b_ptr,
        b_nb,
        d: *d,
        kind,
        r2: b.ne[2] / a.ne[2],
        r3: b.ne[3] / a.ne[3],
        n_block: (256 * 1024 / b_row_bytes.max(1)).max(4),
        gemm_f32: kernels.types[GgmlType::F32 as usize].float_gemm.expect("every table has an F32 product"),
        gemm_f16: kernels.types[GgmlType::F16 as usize].float_gemm.expect("every table has an F16 product"),
        f16_to_f32: kernels.f16_to_f32,
    };

    // Jobs: blocks of a's rows about 128 KiB each (so they stay in L2 while b's rows
    // pass), a multiple of the 4-row register tile (of two of a repacked weight's groups,
    // so a block holds whole group pairs, which x86's 512-bit prompt kernels read at once),
    // smaller when that leaves threads idle. A float product that sums over its depth in
    // slices (`Kernels::float_gemm_depth`) keeps one slice of each row at a time: 128 KiB of those.
    let m = a.ne[1];
    let n_batches = d.ne[2] * d.ne[3];
    let depth = match kind {
        DotKind::F32 | DotKind::F16 => k.min(kernels.float_gemm_depth),
        DotKind::Quant(_) => k,
    };
    let row_bytes = a.ty.row_size(depth as i64).max(1);
    let tile = if a.packed { 2 * crate::cpu::arch::repack::group(a.ty) } else { 4 };
    let mut block = ((128 * 1024 / row_bytes).clamp(tile, 256) / tile * tile).min(m.max(1));
    // A decode step of 1 to 4 sequences on wasm's packed Q4_K/Q6_K weights (their decode
    // kernel takes up to 4 rows of b in one call): each row of a is read once whatever the
    // block, while each call prepares b again (when Q4_K's kernel still reordered and widened
    // b, before 2026-12-07: 6.5% of a 4-sequence Q4_K_M step in Node 26's profile in blocks
    // of 128 KiB, 3.6% of a 1-sequence one): one block of the whole matrix, split only for threads below. Not for
    // ggml's layout: Q4_0's one-sequence step ran ~9% slower in whole-matrix blocks (its four
    // row streams a quarter of the matrix apart instead of a quarter of 128 KiB). Packed Q8_0
    // likewise (its kernel reorders b per call too): in blocks of 128 KiB a 124M-shape step
    // made ~1000 calls, and a block of 160 rows ran at half the whole matrix's rate in cache
    // in Node 26 (BENCHMARKS.md 2026-12-07, "Where a wasm decode step's time goes").
    let one_block = matches!(a.ty, GgmlType::Q4_K | GgmlType::Q6_K | GgmlType::Q8_0);
    if cfg!(target_family = "wasm") && a.packed && one_block && d.ne[1] <= 4 {
        block = m.max(1);
    }
    let flops = m * d.ne[1] * k * n_batches;
    let n_threads = if flops < 1 << 16 { 1 } else { exec.n_threads() };
    // A prompt's blocks are long (each meets every row of b), so the thread that takes the
    // last one makes the others wait: more, smaller blocks keep that tail short.
    let jobs_per_thread = if d.ne[1] >= 4 { 8 } else { 4 };
    if n_threads > 1 {
        while block > tile && n_batches * m.div_ceil(block) < jobs_per_thread * n_threads {
            block = (block / 2).max(tile) / tile * tile;
        }
    }
    // A decode step's K·q: a is the permuted K cache ([hd, L, n_head] over [hd, n_head, L]),
    // so one batch's rows are n_embd apart and the batches of one row adjacent. Per batch in
    // turn, each row would be a separate short read (one pass over the cache per head, at a
    // stride the prefetchers do not follow: ~3× slower at 1000 positions). Instead each job
    // takes a few rows and every batch on them, reading the cache in address order. Every
    // row's sum is the same as in the per-batch order (it does not depend on the tile).
    let interleaved = d.ne[1] == 1
        && n_batches > 1
        && plan.r2 == 1
        && plan.r3 == 1
        && a.ne[3] == 1
        && a.nb[2] < a.nb[1]
        && matches!(kind, DotKind::F32 | DotKind::F16);
    if interleaved {
        // 48 rows (72 KiB of an F16 cache at n_embd 768) measured best of 8..96 at n_past 1000.
        const ROWS: usize = 48;
        let job = |j: usize| {
            let (m0, m1) = (j * ROWS, ((j + 1) * ROWS).min(m));
            for batch in 0..n_batches {
                plan.run(batch, m0, m1);
            }
        };
        let n_jobs = m.div_ceil(ROWS);
        if n_threads > 1 {
            exec.run(n_jobs, &job);
        } else {
            (0..n_jobs).for_each(job);
        }
        return Ok(());
    }
    let blocks_per_batch = m.div_ceil(block);
    let n_jobs = n_batches * blocks_per_batch;
    let job = |j: usize| {
        let (batch, blk) = (j / blocks_per_batch, j % blocks_per_batch);
        plan.run(batch, blk * block, ((blk + 1) * block).min(m));
    };
    if n_threads > 1 {
        exec.run(n_jobs, &job);
    } else {
        (0..n_jobs).for_each(job);
    }
    Ok(())
}
