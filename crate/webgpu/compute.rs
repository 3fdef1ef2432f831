//! Graph execution: each node becomes one dispatch (or one per row range of a weight too
//! large for one binding), or a chain of nodes one fused dispatch (`fuse.rs`), all
//! recorded in one compute pass; copies of the outputs close the same command buffer.

use super::buffer::{entry, WebGpuBuffer};
// The parameter block's fields by their initials (see `device.rs`).
use super::device::{
    Gpu, PARAMS_STRIDE, P_A as A, P_B as B, P_C as C, P_D as D, P_E as E, P_F as F, P_FF as FF, P_G as G,
    P_MISC as MISC, P_OFF as OFF, P_OFF2 as OFF2, P_U as U,
};
use super::fuse::{self, Fused, Kind as FusedKind};
use super::unsupported;
use crate::allocator::align_up;
use crate::backend::BackendError;
use crate::graph::Graph;
use crate::tensor::{Op, Tensor};
use crate::types::GgmlType;

const WORDS: usize = (PARAMS_STRIDE / 4) as usize;

/// mul_mat columns at or below this take the matrix-vector kernel (`Workgroup` kernels).
const MAT_VEC_MAX_N: i64 = 8;

/// Chunks of 32 elements of a row that one invocation of `mul_mat_rows` or `mul_mat_tiled`
/// takes at most; a longer row (K above 16384: a vocabulary-long product of training) is
/// dispatched in parts, each after the first adding to dst. Mesa's llvmpipe (lavapipe) ends
/// a shader's loops after 65535 iterations counted over all of them (LP_MAX_TGSI_LOOP_ITERATIONS)
/// and returns what it has: a per-row product with K = 50257 and 3 columns summed 20768
/// terms. A chunk costs `mul_mat_rows` about 34 (its 32 elements and the chunk loop), 16 of
/// `mul_mat_tiled`'s k about 30: 512 chunks stay under half the limit.
const PART_CHUNKS: u64 = 512;

/// The chunk ranges `[c0, c1)` in which a row of `k` elements is dispatched (shaders
/// mul_mat_q.wgsl, mul_mat.wgsl: `g.x`, `g.y`).
fn k_parts(k: u64) -> Vec<(u32, u32)> {
    let chunks = k.div_ceil(32);
    (0..chunks.max(1))
        .step_by(PART_CHUNKS as usize)
        .map(|c0| (c0 as u32, (c0 + PART_CHUNKS).min(chunks) as u32))
        .collect()
}

/// The unit in which kernels address a type: offsets and strides are multiples of it.
fn unit(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::F32 | GgmlType::I32 => Some(4),
        GgmlType::F16 | GgmlType::BF16 => Some(2),
        t if weight_spec(t).is_some() && t.is_quantized() => Some(1),
        _ => None,
    }
}

/// The weight types get_rows and mul_mat have kernels for (shaders/dequant.wgsl).
pub(crate) const WEIGHT_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// The kernel specialisation for a weight type of get_rows / mul_mat.
fn weight_spec(ty: GgmlType) -> Option<&'static str> {
    match ty {
        GgmlType::F32 => Some("f32"),
        GgmlType::F16 => Some("f16"),
        GgmlType::BF16 => Some("bf16"),
        GgmlType::Q8_0 => Some("q8_0"),
        GgmlType::Q4_0 => Some("q4_0"),
        GgmlType::Q4_1 => Some("q4_1"),
        GgmlType::Q5_0 => Some("q5_0"),
        GgmlType::Q5_1 => Some("q5_1"),
        GgmlType::Q2_K => Some("q2_k"),
        GgmlType::Q3_K => Some("q3_k"),
        GgmlType::Q4_K => Some("q4_k"),
        GgmlType::Q5_K => Some("q5_k"),
        GgmlType::Q6_K => Some("q6_k"),
        _ => None,
    }
}

fn src(node: &Tensor, i: usize) -> Result<&Tensor, BackendError> {
    node.src[i].as_ref().ok_or_else(|| unsupported(node, format!("{} without src[{i}]", node.op.name())))
}

/// Whether `node` has a kernel here, with the reason when not. Layout limits that depend
/// on where the data is (binding sizes) are found when the graph runs.
pub(crate) fn check(node: &Tensor) -> Result<(), String> {
    use GgmlType::*;
    let s = |i: usize| node.src[i].as_ref().ok_or_else(|| format!("missing src[{i}]"));
    let want = |t: &Tensor, tys: &[GgmlType], role: &str| {
        if tys.contains(&t.ty) {
            Ok(())
        } else {
            Err(format!("{role} type {} not in {tys:?}", t.ty))
        }
    };
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        Op::Add | Op::Mul => {
            want(s(0)?, &[F32], "src0")?;
            want(s(1)?, &[F32], "src1")?;
            want(node, &[F32], "dst")
        }
        Op::Scale(_) | Op::Gelu | Op::Norm { .. } | Op::DiagMaskInf { .. } => {
            want(s(0)?, &[F32], "src0")?;
            want(node, &[F32], "dst")
        }
        Op::SoftMax { .. } => {
            want(s(0)?, &[F32], "src0")?;
            if let Some(m) = &node.src[1] {
                want(m, &[F32, F16], "mask")?;
            }
            want(node, &[F32], "dst")
        }
        Op::Cont | Op::Cpy => {
            want(s(0)?, &[F32, F16], "src")?;
            want(node, &[F32, F16], "dst")
        }
        Op::GetRows => {
            let a = s(0)?;
            want(a, WEIGHT_TYPES, "src0")?;
            want(s(1)?, &[I32], "indices")?;
            want(node, &[F32], "dst")?;
            if !a.is_contiguous_rows() {
                return Err("src0 rows must be contiguous".into());
            }
            Ok(())
        }
        Op::MulMat => {
            let a = s(0)?;
            want(a, WEIGHT_TYPES, "src0")?;
            want(s(1)?, &[F32], "src1")?;
            want(node, &[F32], "dst")?;
            if !a.is_contiguous_rows() {
                return Err("src0 rows must be contiguous".into());
            }
            Ok(())
        }
        // A backward pass's ops (shaders/backward.wgsl, out_prod.wgsl).
        Op::OutProd => {
            let (a, b) = (s(0)?, s(1)?);
            want(a, WEIGHT_TYPES, "src0")?;
            want(b, &[F32], "src1")?;
            want(node, &[F32], "dst")?;
            if !a.is_contiguous_rows() {
                return Err("src0 rows must be contiguous".into());
            }
            let fits = node.ne == [a.ne[0], b.ne[0], b.ne[2], b.ne[3]]
                && a.ne[1] == b.ne[1]
                && (2..4).all(|d| a.ne[d] > 0 && b.ne[d] % a.ne[d] == 0);
            if !fits {
                return Err(format!("src0 ne {:?}, src1 ne {:?}, dst ne {:?} do not match", a.ne, b.ne, node.ne));
            }
            Ok(())
        }
        Op::SoftMaxBack { .. } | Op::GeluBack | Op::NormBack { .. } => {
            want(s(0)?, &[F32], "dy")?;
            want(s(1)?, &[F32], "src1")?;
            want(node, &[F32], "dst")?;
            if s(0)?.ne != node.ne || s(1)?.ne != node.ne {
                return Err("dy, src1 and dst must have one shape".into());
            }
            Ok(())
        }
        Op::RepeatBack => {
            let a = s(0)?;
            want(a, &[F32], "src0")?;
            want(node, &[F32], "dst")?;
            if (0..4).any(|d| node.ne[d] == 0 || a.ne[d] % node.ne[d] != 0) {
                return Err(format!("ne {:?} does not repeat ne {:?}", a.ne, node.ne));
            }
            Ok(())
        }
        Op::GetRowsBack => {
            let (a, idx) = (s(0)?, s(1)?);
            want(a, &[F32], "src0")?;
            want(idx, &[I32], "indices")?;
            want(node, &[F32], "dst")?;
            if idx.nrows() != 1
                || a.ne[0] != node.ne[0]
                || a.ne[1] != idx.ne[0]
                || a.nrows() != idx.ne[0]
                || node.nrows() != node.ne[1]
            {
                return Err(format!("src0 ne {:?}, indices ne {:?}, dst ne {:?}", a.ne, idx.ne, node.ne));
            }
            Ok(())
        }
        Op::Acc { .. } => {
            let a = s(0)?;
            want(a, &[F32], "src0")?;
            want(s(1)?, &[F32], "src1")?;
            want(node, &[F32], "dst")?;
            if a.ne != node.ne || !a.is_contiguous() || !node.is_contiguous() {
                return Err("src0 and dst must be contiguous, of one shape".into());
            }
            Ok(())
        }
        Op::DiagMaskZero { .. } => {
            want(s(0)?, &[F32], "src0")?;
            want(node, &[F32], "dst")
        }
        Op::Fill(_) => want(node, &[F32], "dst"),
        // opt.wgsl: a contiguous f32 param updated in place from its contiguous f32 state
        // (`[n, rows]`, rows 1 to 3: the gradient, then m and v or the momentum) and the f32
        // hyper-parameters.
        Op::OptStepAdamw | Op::OptStepSgd => {
            let (a, st, h) = (s(0)?, s(1)?, s(2)?);
            for (t, role) in [(a, "param"), (st, "state"), (h, "hyper-parameters"), (node, "dst")] {
                want(t, &[F32], role)?;
                if !t.is_contiguous() {
                    return Err(format!("{role} must be contiguous"));
                }
            }
            let n_hyper = if node.op == Op::OptStepAdamw { 8 } else { 5 };
            let rows = st.nelements() / a.nelements().max(1);
            if h.nelements() < n_hyper || st.nelements() % a.nelements().max(1) != 0 || !(1..=3).contains(&rows) {
                return Err(format!("state ne {:?} of param ne {:?}, {} hyper-parameters", st.ne, a.ne, h.nelements()));
            }
            Ok(())
        }
        Op::LogSoftMax => {
            want(s(0)?, &[F32], "src0")?;
            want(node, &[F32], "dst")?;
            if s(0)?.ne != node.ne {
                return Err("src0 and dst must have one shape".into());
            }
            Ok(())
        }
        Op::LogSoftMaxBack => {
            want(s(0)?, &[F32], "dy")?;
            want(s(1)?, &[F32], "y")?;
            want(node, &[F32], "dst")?;
            if s(0)?.ne != node.ne || s(1)?.ne != node.ne {
                return Err("dy, y and dst must have one shape".into());
            }
            Ok(())
        }
    }
}

pub(crate) fn supports_op(_gpu: &Gpu, node: &Tensor) -> bool {
    check(node).is_ok()
}

/// A binding: a window of a device buffer.
struct Window {
    buf: wgpu::Buffer,
    start: u64,
    size: u64,
}

/// A tensor as a kernel sees it: its window, where it starts (byte `lo` of the buffer),
/// its unit, shape and strides in units.
struct Bound {
    win: Window,
    lo: u64,
    unit: u64,
    ne: [u32; 4],
    nb: [u32; 4],
}

fn to_u32(node: &Tensor, v: u64, what: &str) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| unsupported(node, format!("{what} = {v} does not fit in 32 bits")))
}

/// Binds `t`, or only its rows `[r0, r1)` (a 2-D tensor too large for one binding), as
/// `node`'s operand. Offsets in the result are relative to row r0.
fn bind(gpu: &Gpu, node: &Tensor, t: &Tensor, rows: Option<(usize, usize)>) -> Result<Bound, BackendError> {
    let (lo, hi) = match rows {
        None => (0, t.nbytes()),
        Some((r0, r1)) => (r0 * t.nb[1], (r1 - 1) * t.nb[1] + t.row_size()),
    };
    bind_bytes(gpu, node, t, lo, hi)
}

/// Binds elements `[e0, e1)` of a contiguous f32 tensor (flattened) as a 1-D operand of
/// `e1 - e0` elements: a window of an element-wise node over a tensor larger than one
/// binding (`flat_parts`).
fn bind_flat(gpu: &Gpu, node: &Tensor, t: &Tensor, e0: usize, e1: usize) -> Result<Bound, BackendError> {
    let mut b = bind_bytes(gpu, node, t, 4 * e0, 4 * e1)?;
    let len = to_u32(node, (e1 - e0) as u64, "elements")?;
    b.ne = [len, 1, 1, 1];
    b.nb = [1, len, len, len];
    Ok(b)
}

/// Binds bytes `[lo, hi)` of `t` (from its first byte): offsets in the result are relative
/// to byte `lo`.
fn bind_bytes(gpu: &Gpu, node: &Tensor, t: &Tensor, lo: usize, hi: usize) -> Result<Bound, BackendError> {
    let unit = unit(t.ty).ok_or_else(|| unsupported(node, format!("type {} has no kernels", t.ty)))?;
    let d = t.data().ok_or_else(|| unsupported(node, format!("operand '{}' is not allocated", t.name())))?;
    let wb = d.buffer.as_any().downcast_ref::<WebGpuBuffer>().ok_or_else(|| {
        unsupported(node, format!("operand '{}' is in a {} buffer, not WebGPU", t.name(), d.buffer.buffer_type_name()))
    })?;
    let (lo, hi) = (d.offset + lo, d.offset + hi);
    let align = gpu.storage_align as usize;
    let start = lo / align * align;
    let end = (align_up(hi.max(lo + 1), 4) as u64).min(wb.buf.size());
    let size = end - start as u64;
    if size > gpu.max_binding {
        return Err(unsupported(
            node,
            format!("operand '{}' needs a {size}-byte binding, above the limit {}", t.name(), gpu.max_binding),
        ));
    }
    let misaligned = !(lo - start).is_multiple_of(unit) || t.nb.iter().any(|&nb| !nb.is_multiple_of(unit));
    if misaligned {
        return Err(unsupported(
            node,
            format!(
                "operand '{}' offset {} or strides {:?} are not multiples of {unit} bytes",
                t.name(),
                d.offset,
                t.nb
            ),
        ));
    }
    let mut ne = [0u32; 4];
    let mut nb = [0u32; 4];
    for i in 0..4 {
        ne[i] = to_u32(node, t.ne[i] as u64, "ne")?;
        nb[i] = to_u32(node, (t.nb[i] / unit) as u64, "nb")?;
    }
    Ok(Bound {
        win: Window { buf: wgpu::Buffer::clone(&wb.buf), start: start as u64, size },
        lo: lo as u64,
        unit: unit as u64,
        ne,
        nb,
    })
}

/// Row ranges of a weight `a` such that each fits one binding: the whole tensor when it
/// fits, else equal slices of a 2-D tensor.
fn row_parts(gpu: &Gpu, node: &Tensor, a: &Tensor) -> Result<Vec<(usize, usize)>, BackendError> {
    let rows = a.ne[1] as usize;
    let need = a.nbytes() as u64 + gpu.storage_align + 4;
    if need <= gpu.max_binding || rows <= 1 {
        return Ok(vec![(0, rows)]);
    }
    if a.ne[2] * a.ne[3] != 1 {
        return Err(unsupported(node, format!("3-D/4-D src0 of {} bytes is above the binding limit", a.nbytes())));
    }
    let per = ((gpu.max_binding - gpu.storage_align - 4) / a.nb[1] as u64) as usize;
    if per == 0 {
        return Err(unsupported(node, format!("one row of '{}' exceeds the binding limit", a.name())));
    }
    Ok((0..rows).step_by(per).map(|r0| (r0, (r0 + per).min(rows))).collect())
}

/// An operand of a [`flat_operands`] node: (slot, tensor, first element).
type FlatOperand = (usize, Tensor, usize);

/// An element-wise node over contiguous f32 tensors of one length `n` (add and mul without
/// broadcast, scale, an f32 cpy/cont, the optimizer steps): its operands read and written at
/// the same element, as (slot, tensor, first element), and n. The optimizer's state `[n,
/// rows]` is one operand per row (slots 1, 4, 5: shaders/opt.wgsl).
fn flat_operands(node: &Tensor) -> Option<(Vec<FlatOperand>, usize)> {
    let n = node.nelements() as usize;
    let plain = |t: &Tensor| t.ty == GgmlType::F32 && t.is_contiguous() && t.nelements() as usize == n;
    let s = |i: usize| node.src[i].clone();
    let ops: Vec<FlatOperand> = match node.op {
        Op::Add | Op::Mul => vec![(0, s(0)?, 0), (1, s(1)?, 0), (3, node.clone(), 0)],
        Op::Scale(_) | Op::Cpy | Op::Cont => vec![(0, s(0)?, 0), (3, node.clone(), 0)],
        Op::OptStepAdamw | Op::OptStepSgd => {
            let st = s(1)?;
            let rows = st.nelements() as usize / n.max(1);
            if !st.is_contiguous() || !(1..=3).contains(&rows) {
                return None;
            }
            let mut v = vec![(0, s(0)?, 0), (3, node.clone(), 0)];
            v.extend((0..rows).map(|r| ([1, 4, 5][r], st.clone(), r * n)));
            return v.iter().all(|(_, t, _)| t.ty == GgmlType::F32).then_some((v, n));
        }
        _ => return None,
    };
    ops.iter().all(|(_, t, _)| plain(t)).then_some((ops, n))
}

/// Element ranges of `n` in which a [`flat_operands`] node is dispatched: all of it when every
/// operand tensor fits one binding, else windows that each fit, shorter than n by 64
/// elements, so that the windows of two tensors (or state rows) side by side in one buffer
/// never overlap once aligned down to the storage-offset alignment (256 bytes), which would
/// make them one binding.
fn flat_parts(gpu: &Gpu, ops: &[FlatOperand], n: usize) -> Vec<(usize, usize)> {
    let fits = |t: &Tensor| t.nbytes() as u64 + gpu.storage_align + 4 <= gpu.max_binding;
    if ops.iter().all(|(_, t, _)| fits(t)) || n <= 64 {
        return vec![(0, n)];
    }
    let per = (((gpu.max_binding - gpu.storage_align - 4) / 4) as usize).min(n - 64).max(1);
    (0..n).step_by(per).map(|e0| (e0, (e0 + per).min(n))).collect()
}

/// The dispatches of a [`flat_operands`] node in its [`flat_parts`]: each binds the same
/// window of every operand (as a 1-D tensor), the optimizer steps' hyper-parameters whole.
fn plan_flat(
    gpu: &Gpu,
    node: &Tensor,
    ops: &[FlatOperand],
    n: usize,
    out: &mut Vec<Dispatch>,
) -> Result<(), BackendError> {
    for (e0, e1) in flat_parts(gpu, ops, n) {
        let mut b = Builder::new(gpu, node);
        for (slot, t, first) in ops {
            b.set(*slot, bind_flat(gpu, node, t, first + e0, first + e1)?);
        }
        let len = (e1 - e0) as u64;
        b.misc(len, 0, 0)?;
        let groups = len.div_ceil(256);
        out.push(match node.op {
            Op::OptStepAdamw | Op::OptStepSgd => {
                b.operand(2, src(node, 2)?)?;
                let entry = if node.op == Op::OptStepAdamw { "adamw" } else { "sgd" };
                b.linear("opt", "", entry, groups, 1)?
            }
            Op::Add => b.linear("binary", "", "add", groups, 1)?,
            Op::Mul => b.linear("binary", "", "mul", groups, 1)?,
            Op::Scale(s) => {
                b.params[F] = s.to_bits();
                b.linear("unary", "", "scale", groups, 1)?
            }
            _ => b.linear("cpy", "", "cpy_f32", groups, 1)?, // cpy/cont, f32 to f32 (u.x = 0)
        });
    }
    Ok(())
}

/// Operand slots: src0..src2, dst, and the fused kernels' slots 4..7.
const SLOTS: usize = 8;

struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    wins: [Option<Window>; SLOTS],
    params: [u32; WORDS],
    groups: [u32; 3],
}

struct Builder<'a> {
    gpu: &'a Gpu,
    node: &'a Tensor,
    params: [u32; WORDS],
    slots: [Option<Bound>; SLOTS],
}

impl<'a> Builder<'a> {
    fn new(gpu: &'a Gpu, node: &'a Tensor) -> Builder<'a> {
        Builder { gpu, node, params: [0; WORDS], slots: Default::default() }
    }
    /// Puts operand `b` in slot `slot` (0..3 sources, 3 dst, 4..7 the fused kernels', whose
    /// shapes the kernels know from the others: only their strides, and for 6 and 7, whose
    /// operands are rows, only the first).
    fn set(&mut self, slot: usize, b: Bound) {
        match slot {
            0..4 => {
                let base = [A, B, C, D][slot];
                self.params[base..base + 4].copy_from_slice(&b.ne);
                self.params[base + 4..base + 8].copy_from_slice(&b.nb);
            }
            4 | 5 => {
                let base = [E, FF][slot - 4];
                self.params[base..base + 4].copy_from_slice(&b.nb);
            }
            _ => self.params[G + slot - 4] = b.nb[0],
        }
        self.slots[slot] = Some(b);
    }
    fn operand(&mut self, slot: usize, t: &Tensor) -> Result<(), BackendError> {
        let b = bind(self.gpu, self.node, t, None)?;
        self.set(slot, b);
        Ok(())
    }
    fn misc(&mut self, items: u64, row0: usize, row1: usize) -> Result<(), BackendError> {
        self.params[MISC] = to_u32(self.node, items, "work items")?;
        self.params[MISC + 1] = row0 as u32;
        self.params[MISC + 2] = row1 as u32;
        Ok(())
    }
    /// A dispatch of `groups` linear workgroups, folded into x and y (`misc.w` = x).
    fn linear(mut self, file: &str, spec: &str, entry: &str, groups: u64, z: u32) -> Result<Dispatch, BackendError> {
        let (x, y) = self.gpu.fold(groups, self.node)?;
        self.params[MISC + 3] = x;
        self.grid(file, spec, entry, [x, y, z])
    }
    /// Operands whose windows overlap in one buffer share one binding (WebGPU forbids
    /// overlapping writable bindings): the union window goes to dst's slot when dst is
    /// among them, else to the lowest slot; the others read it through B0..B2.
    fn grid(mut self, file: &str, spec: &str, entry: &str, groups: [u32; 3]) -> Result<Dispatch, BackendError> {
        let max = self.gpu.max_wg_dim;
        if groups.iter().any(|&g| g > max) {
            return Err(unsupported(self.node, format!("dispatch {groups:?} exceeds {max} workgroups per dimension")));
        }
        let mut home: [usize; SLOTS] = core::array::from_fn(|i| i);
        let mut span: [Option<(u64, u64)>; SLOTS] =
            core::array::from_fn(|i| self.slots[i].as_ref().map(|b| (b.win.start, b.win.start + b.win.size)));
        let mut merged = true;
        while merged {
            merged = false;
            for i in 0..SLOTS {
                for j in i + 1..SLOTS {
                    let (hi, hj) = (home[i], home[j]);
                    if hi == hj {
                        continue;
                    }
                    let (Some(bi), Some(bj)) = (&self.slots[hi], &self.slots[hj]) else { continue };
                    let (Some(si), Some(sj)) = (span[hi], span[hj]) else { continue };
                    if bi.win.buf != bj.win.buf || si.1 <= sj.0 || sj.1 <= si.0 {
                        continue;
                    }
                    let (keep, drop) = if hi == 3 || (hj != 3 && hi < hj) { (hi, hj) } else { (hj, hi) };
                    span[keep] = Some((si.0.min(sj.0), si.1.max(sj.1)));
                    span[drop] = None;
                    for h in home.iter_mut() {
                        if *h == drop {
                            *h = keep;
                        }
                    }
                    merged = true;
                }
            }
        }
        let mut wins: [Option<Window>; SLOTS] = Default::default();
        for slot in 0..SLOTS {
            let Some(b) = &self.slots[slot] else { continue };
            let (start, end) = span[home[slot]].expect("a home keeps its span");
            if home[slot] == slot {
                if end - start > self.gpu.max_binding {
                    return Err(unsupported(
                        self.node,
                        format!(
                            "operands sharing a {}-byte binding exceed the limit {}",
                            end - start,
                            self.gpu.max_binding
                        ),
                    ));
                }
                wins[slot] = Some(Window { buf: b.win.buf.clone(), start, size: end - start });
            }
            let off = if slot < 4 { OFF + slot } else { OFF2 + slot - 4 };
            self.params[off] = to_u32(self.node, (b.lo - start) / b.unit, "offset")?;
        }
        let homes = [0, 1, 2, 4, 5, 6, 7].map(|s| home[s] as u32);
        // The mat-vec kernels compute 4 columns, or 1 when there is only one (generation).
        let ncol = (file == "mul_mat_q" || file == "mul_mat_ln").then(|| if self.params[B + 1] == 1 { 1 } else { 4 });
        let pipeline = self.gpu.pipeline(file, spec, entry, homes, ncol);
        Ok(Dispatch { pipeline, wins, params: self.params, groups })
    }
}

/// The dispatches that compute `node` (none for views).
fn plan(gpu: &Gpu, node: &Tensor, out: &mut Vec<Dispatch>) -> Result<(), BackendError> {
    check(node).map_err(|reason| unsupported(node, reason))?;
    if node.op == Op::None || node.op.is_view() || node.nelements() == 0 {
        return Ok(());
    }
    let n = node.nelements() as u64;
    // Element-wise nodes over a tensor larger than one binding (a vocabulary-sized gradient
    // added, copied, or stepped with its optimizer state): in windows that each fit. The
    // optimizer steps always go this way (the param and dst, its memory, share dst's
    // binding; each state row has its own).
    if let Some((ops, len)) = flat_operands(node) {
        if matches!(node.op, Op::OptStepAdamw | Op::OptStepSgd) || flat_parts(gpu, &ops, len).len() > 1 {
            return plan_flat(gpu, node, &ops, len, out);
        }
    }
    let mut b = Builder::new(gpu, node);
    match node.op {
        Op::OptStepAdamw | Op::OptStepSgd => unreachable!("flat_operands takes every checked optimizer step"),
        Op::Add | Op::Mul => {
            b.operand(0, src(node, 0)?)?;
            b.operand(1, src(node, 1)?)?;
            b.operand(3, node)?;
            b.misc(n, 0, 0)?;
            let entry = if node.op == Op::Add { "add" } else { "mul" };
            out.push(b.linear("binary", "", entry, n.div_ceil(256), 1)?);
        }
        Op::Scale(s) => {
            b.operand(0, src(node, 0)?)?;
            b.operand(3, node)?;
            b.misc(n, 0, 0)?;
            b.params[F] = s.to_bits();
            out.push(b.linear("unary", "", "scale", n.div_ceil(256), 1)?);
        }
        Op::Gelu => {
            b.operand(0, src(node, 0)?)?;
            b.operand(3, node)?;
            b.misc(n, 0, 0)?;
            out.push(b.linear("unary", "", "gelu", n.div_ceil(256), 1)?);
        }
        Op::Norm { eps } => {
            let a = src(node, 0)?;
            b.operand(0, a)?;
            b.operand(3, node)?;
            b.misc(a.nrows() as u64, 0, 0)?;
            b.params[F] = eps.to_bits();
            out.push(b.linear("norm", "", "norm", a.nrows() as u64, 1)?);
        }
        Op::SoftMax { scale, max_bias } => {
            let a = src(node, 0)?;
            b.operand(0, a)?;
            if let Some(m) = &node.src[1] {
                b.operand(1, m)?;
                b.params[U] = if m.ty == GgmlType::F16 { 2 } else { 1 };
            }
            b.operand(3, node)?;
            b.misc(a.nrows() as u64, 0, 0)?;
            b.params[F] = scale.to_bits();
            if max_bias > 0.0 {
                // ALiBi slopes as ggml derives them from the head count (dim 2).
                let n_head = a.ne[2] as u32;
                let n_head_log2 = 1u32 << (31 - n_head.max(1).leading_zeros());
                let m0 = 2f32.powf(-max_bias / n_head_log2 as f32);
                let m1 = 2f32.powf(-(max_bias / 2.0) / n_head_log2 as f32);
                b.params[U + 1] = n_head_log2;
                b.params[U + 2] = 1;
                b.params[F + 1] = m0.to_bits();
                b.params[F + 2] = m1.to_bits();
            }
            out.push(b.linear("softmax", "", "soft_max", a.nrows() as u64, 1)?);
        }
        Op::DiagMaskInf { n_past } => {
            b.operand(0, src(node, 0)?)?;
            b.operand(3, node)?;
            b.misc(n, 0, 0)?;
            b.params[U] = n_past as u32;
            out.push(b.linear("softmax", "", "diag_mask_inf", n.div_ceil(256), 1)?);
        }
        Op::Cont | Op::Cpy => {
            let a = src(node, 0)?;
            if a.nelements() != node.nelements() {
                return Err(unsupported(node, format!("copies {} elements into {}", a.nelements(), node.nelements())));
            }
            if node.ty == GgmlType::F16 && !node.is_contiguous() {
                // A strided f16 destination (the transposed V cache): the even halves, then
                // the odd ones, so no dispatch has two invocations on one word.
                for parity in 0..2 {
                    let mut b = Builder::new(gpu, node);
                    b.operand(0, a)?;
                    b.operand(3, node)?;
                    b.params[U] = u32::from(a.ty == GgmlType::F16);
                    b.params[U + 1] = to_u32(node, n, "elements")?;
                    b.params[U + 2] = parity;
                    b.misc(n, 0, 0)?;
                    out.push(b.linear("cpy", "", "cpy_f16_strided", n.div_ceil(256), 1)?);
                }
                return Ok(());
            }
            b.operand(0, a)?;
            b.params[U] = u32::from(a.ty == GgmlType::F16);
            let d = bind(gpu, node, node, None)?;
            if node.ty == GgmlType::F16 {
                // One invocation per destination word (two halves); dst keeps its own slot,
                // so its offset in halves is known here.
                let off = (d.lo - d.win.start) / 2;
                let first = off / 2;
                let last = (off + n - 1) / 2;
                let words = last - first + 1;
                b.set(3, d);
                b.params[U + 1] = to_u32(node, n, "elements")?;
                b.misc(words, 0, 0)?;
                out.push(b.linear("cpy", "", "cpy_f16", words.div_ceil(256), 1)?);
            } else {
                b.set(3, d);
                b.misc(n, 0, 0)?;
                out.push(b.linear("cpy", "", "cpy_f32", n.div_ceil(256), 1)?);
            }
        }
        Op::GetRows => {
            let (a, idx) = (src(node, 0)?, src(node, 1)?);
            let spec = weight_spec(a.ty).expect("checked");
            let items = (a.ne[0] * idx.ne[0] * idx.ne[1] * idx.ne[2]) as u64;
            for (r0, r1) in row_parts(gpu, node, a)? {
                let mut b = Builder::new(gpu, node);
                let whole = r0 == 0 && r1 == a.ne[1] as usize;
                b.set(0, bind(gpu, node, a, if whole { None } else { Some((r0, r1)) })?);
                b.operand(1, idx)?;
                b.operand(3, node)?;
                b.misc(items, r0, r1)?;
                out.push(b.linear("get_rows", spec, "get_rows", items.div_ceil(256), 1)?);
            }
        }
        Op::MulMat => {
            let (a, x) = (src(node, 0)?, src(node, 1)?);
            let spec = weight_spec(a.ty).expect("checked");
            let batch = (x.ne[2] * x.ne[3]) as u64;
            let n_cols = x.ne[1] as u64;
            let tiled = !gpu.per_row && x.ne[1] > MAT_VEC_MAX_N;
            // The per-row and tiled kernels take long rows in parts (PART_CHUNKS).
            let k_parts = if gpu.per_row || tiled { k_parts(a.ne[0] as u64) } else { vec![(0, 0)] };
            for (r0, r1) in row_parts(gpu, node, a)? {
                for &(c0, c1) in &k_parts {
                    let mut b = Builder::new(gpu, node);
                    let whole = r0 == 0 && r1 == a.ne[1] as usize;
                    b.set(0, bind(gpu, node, a, if whole { None } else { Some((r0, r1)) })?);
                    b.operand(1, x)?;
                    b.operand(3, node)?;
                    let rows = (r1 - r0) as u64;
                    b.misc(0, r0, r1)?;
                    b.params[G] = c0;
                    b.params[G + 1] = c1;
                    // z: groups of 4 columns times the batch.
                    let z = to_u32(node, n_cols.div_ceil(4) * batch, "columns x batch")?;
                    if gpu.per_row {
                        out.push(b.linear("mul_mat_q", spec, "mul_mat_rows", rows.div_ceil(64), z)?);
                    } else if tiled {
                        // 64x64 output tiles (shaders/mul_mat.wgsl).
                        let gx = to_u32(node, rows.div_ceil(64), "row tiles")?;
                        let gy = to_u32(node, n_cols.div_ceil(64), "column tiles")?;
                        let grid = [gx, gy, to_u32(node, batch, "batch")?];
                        out.push(b.grid("mul_mat", spec, "mul_mat_tiled", grid)?);
                    } else {
                        out.push(b.linear("mul_mat_q", spec, "mul_mat_vec", rows, z)?);
                    }
                }
            }
        }
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => unreachable!("handled above"),
        Op::OutProd => {
            let (a, x) = (src(node, 0)?, src(node, 1)?);
            let spec = weight_spec(a.ty).expect("checked");
            // A src0 above the binding limit in row ranges, each continuing the sums; a dst
            // above it (a vocabulary-sized weight's gradient) in ranges of its rows, u.y the
            // first.
            for (d0, d1) in row_parts(gpu, node, node)? {
                let dst_whole = d0 == 0 && d1 == node.ne[1] as usize;
                // One invocation per 4 x 4 block of dst (shaders/out_prod.wgsl).
                let items =
                    (d1 - d0).div_ceil(4) as u64 * (node.ne[0] as u64).div_ceil(4) * (node.ne[2] * node.ne[3]) as u64;
                for (r0, r1) in row_parts(gpu, node, a)? {
                    let mut b = Builder::new(gpu, node);
                    let whole = r0 == 0 && r1 == a.ne[1] as usize;
                    b.set(0, bind(gpu, node, a, if whole { None } else { Some((r0, r1)) })?);
                    b.operand(1, x)?;
                    b.set(3, bind(gpu, node, node, if dst_whole { None } else { Some((d0, d1)) })?);
                    b.params[D + 1] = to_u32(node, (d1 - d0) as u64, "rows")?;
                    b.misc(items, r0, r1)?;
                    b.params[U] = u32::from(r0 > 0);
                    b.params[U + 1] = d0 as u32;
                    out.push(b.linear("out_prod", spec, "out_prod", items.div_ceil(256), 1)?);
                }
            }
        }
        Op::GetRowsBack => {
            // dst [n, rows] (a vocabulary-sized gradient) in ranges of rows that each fit one
            // binding, misc.y the first.
            let (g, idx) = (src(node, 0)?, src(node, 1)?);
            for (d0, d1) in row_parts(gpu, node, node)? {
                let mut b = Builder::new(gpu, node);
                let whole = d0 == 0 && d1 == node.ne[1] as usize;
                b.operand(0, g)?;
                b.operand(1, idx)?;
                b.set(3, bind(gpu, node, node, if whole { None } else { Some((d0, d1)) })?);
                let items = (d1 - d0) as u64 * node.ne[0] as u64;
                b.misc(items, d0, d1)?;
                out.push(b.linear("backward", "", "get_rows_back", items.div_ceil(256), 1)?);
            }
        }
        Op::SoftMaxBack { scale: f } | Op::NormBack { eps: f } => {
            b.operand(0, src(node, 0)?)?;
            b.operand(1, src(node, 1)?)?;
            b.operand(3, node)?;
            let rows = node.nrows() as u64;
            b.misc(rows, 0, 0)?;
            b.params[F] = f.to_bits();
            let entry = if matches!(node.op, Op::NormBack { .. }) { "norm_back" } else { "soft_max_back" };
            out.push(b.linear("backward", "", entry, rows, 1)?);
        }
        Op::GeluBack | Op::RepeatBack | Op::DiagMaskZero { .. } | Op::Fill(_) => {
            let entry = match node.op {
                Op::GeluBack => "gelu_back",
                Op::RepeatBack => "repeat_back",
                Op::DiagMaskZero { .. } => "diag_mask_zero",
                _ => "fill",
            };
            for (i, s) in node.src.iter().take(2).enumerate() {
                if let Some(s) = s {
                    b.operand(i, s)?;
                }
            }
            b.operand(3, node)?;
            b.misc(n, 0, 0)?;
            match node.op {
                Op::DiagMaskZero { n_past } => b.params[U] = n_past as u32,
                Op::Fill(v) => b.params[F] = v.to_bits(),
                _ => {}
            }
            out.push(b.linear("backward", "", entry, n.div_ceil(256), 1)?);
        }
        Op::Acc { nb, offset } => {
            let (a, x) = (src(node, 0)?, src(node, 1)?);
            let bytes = node.nbytes();
            let span = (0..3).map(|i| (x.ne[i + 1].max(1) as usize - 1) * nb[i]).sum::<usize>() + x.ne[0] as usize * 4;
            if offset % 4 != 0 || nb.iter().any(|s| s % 4 != 0) || offset + span > bytes {
                return Err(unsupported(node, format!("a view of ne {:?} at {offset}, strides {nb:?}", x.ne)));
            }
            // dst = src0 (the same elements rewritten when the allocator put dst there).
            b.operand(0, a)?;
            b.operand(3, node)?;
            b.misc(n, 0, 0)?;
            out.push(b.linear("backward", "", "acc_copy", n.div_ceil(256), 1)?);
            // Then src1 added into the view.
            let mut b = Builder::new(gpu, node);
            b.operand(1, x)?;
            b.operand(3, node)?;
            let m = x.nelements() as u64;
            b.misc(m, 0, 0)?;
            b.params[U] = to_u32(node, offset as u64 / 4, "offset")?;
            for (i, &stride) in nb.iter().enumerate() {
                b.params[U + 1 + i] = to_u32(node, stride as u64 / 4, "stride")?;
            }
            if view_is_injective(x.ne, nb) {
                out.push(b.linear("backward", "", "acc_add", m.div_ceil(256), 1)?);
            } else {
                out.push(b.grid("backward", "", "acc_add_serial", [1, 1, 1])?);
            }
        }
        Op::LogSoftMax | Op::LogSoftMaxBack => {
            b.operand(0, src(node, 0)?)?;
            if node.op == Op::LogSoftMaxBack {
                b.operand(1, src(node, 1)?)?;
            }
            b.operand(3, node)?;
            let rows = node.nrows() as u64;
            b.misc(rows, 0, 0)?;
            let entry = if node.op == Op::LogSoftMax { "log_soft_max" } else { "log_soft_max_back" };
            out.push(b.linear("backward", "", entry, rows, 1)?);
        }
    }
    Ok(())
}

/// Whether a view of shape `ne` with packed f32 elements and byte strides `nb` (dims 1..3)
/// reaches each element once: sorted by stride, each dimension steps past the extent of the
/// ones below it. Then acc's additions may run in parallel.
fn view_is_injective(ne: [i64; 4], nb: [usize; 3]) -> bool {
    let mut dims: Vec<(usize, usize)> =
        (0..3).filter(|&i| ne[i + 1] > 1).map(|i| (nb[i], ne[i + 1] as usize)).collect();
    dims.sort_unstable();
    let mut extent = ne[0].max(1) as usize * 4;
    for (stride, n) in dims {
        if stride < extent {
            return false;
        }
        extent += stride * (n - 1);
    }
    true
}

/// Whether the mat-vec kernels run `mm` in one dispatch, which the fused mul_mat chains
/// need: a 2-D product (the per-row kernel, or at most MAT_VEC_MAX_N columns on GPUs) whose
/// rows are one part (PART_CHUNKS) and whose weight fits one binding.
fn mm_fusable(gpu: &Gpu, mm: &Tensor) -> bool {
    let (Some(a), Some(x)) = (mm.src[0].as_ref(), mm.src[1].as_ref()) else { return false };
    check(mm).is_ok()
        && a.ne[2] * a.ne[3] == 1
        && x.ne[2] * x.ne[3] == 1
        && (gpu.per_row || x.ne[1] <= MAT_VEC_MAX_N)
        && k_parts(a.ne[0] as u64).len() == 1
        && row_parts(gpu, mm, a).is_ok_and(|p| p.len() == 1)
}

/// The mat-vec dispatch of a fused mul_mat chain, its epilogue's flags and operands already
/// in `b` (see shaders/mul_mat_q.wgsl).
fn mat_vec(
    gpu: &Gpu,
    mut b: Builder,
    w: &Tensor,
    x: &Tensor,
    ln: bool,
    out: &mut Vec<Dispatch>,
) -> Result<(), BackendError> {
    let node = b.node;
    let spec = weight_spec(w.ty).expect("checked");
    b.operand(0, w)?;
    b.operand(1, x)?;
    let rows = w.ne[1] as u64;
    b.misc(0, 0, rows as usize)?;
    // The whole row in one part (mm_fusable).
    let (c0, c1) = k_parts(w.ne[0] as u64)[0];
    b.params[G] = c0;
    b.params[G + 1] = c1;
    let z = to_u32(node, (x.ne[1] as u64).div_ceil(4), "columns")?;
    let file = if ln { "mul_mat_ln" } else { "mul_mat_q" };
    out.push(if gpu.per_row {
        b.linear(file, spec, "mul_mat_rows", rows.div_ceil(64), z)?
    } else {
        b.linear(file, spec, "mul_mat_vec", rows, z)?
    });
    Ok(())
}

/// The layer norm a fused mul_mat chain reads src1 through: its rows in slots 6 and 7, eps
/// in f.x (shaders/ln_input.wgsl).
fn layer_norm(b: &mut Builder, ln: Option<(f32, &Tensor, &Tensor)>) -> Result<(), BackendError> {
    if let Some((eps, g, beta)) = ln {
        b.operand(6, g)?;
        b.operand(7, beta)?;
        b.params[F] = eps.to_bits();
    }
    Ok(())
}

/// The one dispatch of a fused chain (see `fuse.rs`; the kernels' comments say which
/// parameters mean what).
fn plan_fused(gpu: &Gpu, f: &Fused, out: &mut Vec<Dispatch>) -> Result<(), BackendError> {
    match f.kind {
        FusedKind::NormAffine { norm, w, b: bias, out: dst } => {
            let Op::Norm { eps } = norm.op else { unreachable!("a norm chain starts at a norm") };
            let a = src(norm, 0)?;
            let mut b = Builder::new(gpu, dst);
            b.operand(0, a)?;
            b.operand(1, w)?;
            b.operand(2, bias)?;
            b.operand(3, dst)?;
            b.misc(a.nrows() as u64, 0, 0)?;
            b.params[F] = eps.to_bits();
            out.push(b.linear("norm", "", "norm_affine", a.nrows() as u64, 1)?);
        }
        FusedKind::SoftMaxCausal { x, scale, n_past, out: dst } => {
            let mut b = Builder::new(gpu, dst);
            b.operand(0, x)?;
            b.operand(3, dst)?;
            b.misc(x.nrows() as u64, 0, 0)?;
            b.params[F] = scale.to_bits();
            b.params[U] = 3; // the causal mask, from n_past
            b.params[U + 3] = n_past as u32;
            out.push(b.linear("softmax", "", "soft_max", x.nrows() as u64, 1)?);
        }
        FusedKind::AddGelu { add, out: dst } => {
            let n = dst.nelements() as u64;
            let mut b = Builder::new(gpu, dst);
            b.operand(0, src(add, 0)?)?;
            b.operand(1, src(add, 1)?)?;
            b.operand(3, dst)?;
            b.misc(n, 0, 0)?;
            out.push(b.linear("binary", "", "add_gelu", n.div_ceil(256), 1)?);
        }
        FusedKind::MatMul { w, x, ln, bias, gelu, res, out: dst } => {
            let mut b = Builder::new(gpu, dst);
            b.operand(3, dst)?;
            let mut flags = 0;
            if let Some(bias) = bias {
                b.operand(2, bias)?;
                flags |= 1;
            }
            if gelu {
                flags |= 2;
            }
            if let Some(r) = res {
                b.operand(4, r)?;
                flags |= 4;
            }
            layer_norm(&mut b, ln)?;
            b.params[U] = flags;
            mat_vec(gpu, b, w, x, ln.is_some(), out)?;
        }
        FusedKind::Qkv { w, x, ln, bias, n, ref parts } => {
            let mut b = Builder::new(gpu, parts[0].dst);
            layer_norm(&mut b, ln)?;
            b.operand(2, bias)?;
            for (i, p) in parts.iter().enumerate() {
                let slot = [3, 4, 5][i];
                b.operand(slot, p.dst)?;
                let nb = [D + 4, E, FF][i];
                b.params[nb] = to_u32(p.dst, p.rs as u64, "row stride")?;
                b.params[nb + 1] = to_u32(p.dst, p.cs as u64, "column stride")?;
            }
            b.params[U] = 1 | 8;
            b.params[U + 1] = to_u32(w, n as u64, "rows per part")?;
            mat_vec(gpu, b, w, x, ln.is_some(), out)?;
        }
        FusedKind::Attention { q, k, v, mask, scale, out: dst } => {
            let [hd, nq, nh, _] = q.ne;
            let mut b = Builder::new(gpu, dst);
            b.operand(0, q)?;
            b.operand(1, k)?;
            b.operand(2, v)?;
            b.operand(3, dst)?;
            // dst is the contiguous [hd, heads, queries]: strides of (dim, query, head).
            let unit = (dst.nb[0] / 4) as u64;
            b.params[D + 4] = to_u32(dst, unit, "stride")?;
            b.params[D + 5] = to_u32(dst, unit * (hd * nh) as u64, "stride")?;
            b.params[D + 6] = to_u32(dst, unit * hd as u64, "stride")?;
            if let Some(m) = mask {
                b.operand(4, m)?;
                b.params[U] = if m.ty == GgmlType::F16 { 2 } else { 1 };
            }
            let items = (nq * nh) as u64;
            b.misc(items, 0, 0)?;
            b.params[U + 1] = to_u32(dst, k.ne[1] as u64, "keys")?;
            b.params[U + 2] = hd as u32;
            b.params[U + 3] = nh as u32;
            b.params[G] = u32::from(k.ty == GgmlType::F16);
            b.params[G + 1] = u32::from(v.ty == GgmlType::F16);
            b.params[F] = scale.to_bits();
            out.push(b.linear("attn", "", "attn", items, 1)?);
        }
    }
    Ok(())
}

pub(crate) fn graph_compute(gpu: &Gpu, graph: &Graph) -> Result<(), BackendError> {
    gpu.check()?;
    // The graph rewrites device memory: copies of the last one's outputs go stale.
    gpu.drop_prefetched();
    let t0 = (gpu.clock)();
    let mut ds = Vec::new();
    let ix = fuse::Index::new(graph);
    let mm_ok = |mm: &Tensor| mm_fusable(gpu, mm);
    let caps = fuse::Caps { mm_ok: &mm_ok };
    // Nodes a fused chain ran already (a chain's nodes need not be neighbours).
    let mut done = vec![false; graph.nodes.len()];
    for i in 0..graph.nodes.len() {
        if done[i] {
            continue;
        }
        let fused = fuse::at(&caps, graph, &ix, i).filter(|f| {
            // Only chains whose every node has a kernel here (else the error names the node).
            f.nodes.iter().all(|&j| !done[j] && check(&graph.nodes[j]).is_ok())
        });
        match fused {
            Some(f) => {
                plan_fused(gpu, &f, &mut ds)?;
                for j in f.nodes {
                    done[j] = true;
                }
            }
            None => plan(gpu, &graph.nodes[i], &mut ds)?,
        }
    }
    if ds.is_empty() {
        return Ok(());
    }
    let need = PARAMS_STRIDE * ds.len() as u64;
    let params = {
        let mut cur = gpu.params.borrow_mut();
        if cur.as_ref().is_none_or(|b| b.size() < need) {
            *cur = Some(gpu.create_buffer(&wgpu::BufferDescriptor {
                label: Some("ggweb params"),
                size: need.next_power_of_two().max(PARAMS_STRIDE * 64),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        wgpu::Buffer::clone(cur.as_ref().expect("just set"))
    };
    let mut all = Vec::with_capacity(ds.len() * WORDS);
    for d in &ds {
        all.extend_from_slice(&d.params);
    }
    gpu.queue.write_buffer(&params, 0, bytemuck::cast_slice(&all));

    let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ggweb graph") });
    {
        let mut pass =
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("ggweb graph"), timestamp_writes: None });
        for (i, d) in ds.iter().enumerate() {
            // Slots 4..7 are bindings 5..8 (4 is the parameters).
            let win = |slot: usize| {
                let binding = if slot < 4 { slot as u32 } else { slot as u32 + 1 };
                match &d.wins[slot] {
                    Some(w) => entry(binding, &w.buf, w.start, w.size),
                    // Distinct ranges: overlapping writable bindings are invalid even unused.
                    None => entry(binding, &gpu.dummy, 256 * slot as u64, 256),
                }
            };
            let bg = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &gpu.layout,
                entries: &[
                    win(0),
                    win(1),
                    win(2),
                    win(3),
                    entry(4, &params, 0, PARAMS_STRIDE),
                    win(4),
                    win(5),
                    win(6),
                    win(7),
                ],
            });
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, &bg, &[(PARAMS_STRIDE * i as u64) as u32]);
            pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
        }
    }
    gpu.prefetch(&mut enc, output_spans(graph));
    let cmd = enc.finish();
    let ms = (gpu.clock)() - t0;
    gpu.queue.submit([cmd]);
    gpu.count(|s| {
        s.dispatches += ds.len() as u64;
        s.submits += 1;
        s.encode_ms += ms;
    });
    gpu.check()
}

/// The word-aligned spans of the graph's output nodes that live in WebGPU buffers: copied
/// in the graph's own submit for the reads that follow (see `readback.rs`).
fn output_spans(graph: &Graph) -> Vec<(wgpu::Buffer, u64, u64)> {
    let outputs = graph.nodes.iter().filter(|t| t.is_output() && !t.op.is_view());
    outputs
        .filter_map(|t| {
            let d = t.data()?;
            let b = d.buffer.as_any().downcast_ref::<WebGpuBuffer>()?;
            let lo = (d.offset / 4 * 4) as u64;
            let hi = (align_up(d.offset + t.nbytes(), 4) as u64).min(b.buf.size());
            Some((wgpu::Buffer::clone(&b.buf), lo, hi))
        })
        .collect()
}
