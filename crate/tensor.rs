//! Tensor headers and contexts, with ggml's memory model.
//!
//! ```
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: false });
//! let a = ctx.new_tensor_2d(GgmlType::F32, 3, 2);   // 3 columns, 2 rows
//! assert_eq!(a.nb, [4, 12, 24, 24]);
//! a.set_f32_slice(&[0., 1., 2., 3., 4., 5.]);
//! assert_eq!(a.get_f32_nd(2, 1, 0, 0), 5.0);
//!
//! let headers_only = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
//! let w = headers_only.new_tensor_2d(GgmlType::F16, 64, 192);
//! assert!(w.data().is_none());                         // an allocator assigns it later
//! ```
//!
//! A [`Tensor`] is a cheap handle (`Rc`) to an immutable header: type, `ne` (elements per
//! dimension, `ne[0]` innermost), `nb` (byte strides), the op that produces it and its
//! sources. Only four things change after creation: the name, the flags, where the data
//! lives (a backend buffer and an offset), which allocators assign. The layout of the bytes
//! is the buffer's business (the CPU's repacking buffer type keeps matrix weights in a
//! layout of its own and hands ggml's back on `get_bytes`). A view stores no
//! location of its own: its data is always its `view_src`'s plus `view_offs`.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};

use crate::backend::buffer::{BackendError, Buffer};
use crate::backend::host::HostBuffer;
use crate::types::GgmlType;

/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: usize = 4;
/// ggml's GGML_MAX_SRC (we need at most three: soft_max_ext takes a mask).
pub const MAX_SRC: usize = 3;
/// Bytes a header costs in a context's memory budget (ggml_tensor_overhead()).
pub const TENSOR_OVERHEAD: usize = 368;

/// The operation that produces a tensor, with its parameters (ggml's `op` and `op_params`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// A leaf: weights or inputs, set before the graph runs.
    None,
    View,
    Reshape,
    Permute([usize; 4]),
    Transpose,
    Cont,
    /// `src[0]` copied (and converted) into `src[1]`'s memory; the result is a view of `src[1]`.
    Cpy,
    GetRows,
    Add,
    Mul,
    Scale(f32),
    /// Layer norm over dim 0 (no affine part): (x - mean) / sqrt(var + eps).
    Norm {
        eps: f32,
    },
    /// GELU, tanh approximation (GPT-2's `gelu_new`), in f32.
    Gelu,
    /// softmax(a * scale + mask) over dim 0; `max_bias` is ALiBi's (0 disables it).
    SoftMax {
        scale: f32,
        max_bias: f32,
    },
    /// Sets a[i0, i1] = -inf where i0 > n_past + i1.
    DiagMaskInf {
        n_past: i32,
    },
    MulMat,
    /// log(softmax(a)) over dim 0, per row: a − max − log Σ exp(a − max), the sum in f64.
    /// Not in the forward pass: a gradient run's metric (`logprob`, `loss`) is built on it.
    LogSoftMax,

    // --- ops that backward passes build (crate::backward); the forward graph never has them ---
    /// ggml_out_prod: dst[i0, i1] = Σ_j src0[i0, j] · src1[i1, j], src0 broadcast over dims 2
    /// and 3 (any weight type; its rows are read whole). mul_mat's gradients.
    OutProd,
    /// ggml_soft_max_ext_back: src0 = dy, src1 = y = softmax(x·scale + mask);
    /// dx = scale · y ⊙ (dy − Σ dy ⊙ y) per row.
    SoftMaxBack {
        scale: f32,
    },
    /// GELU's derivative (its tanh form) times dy: src0 = dy, src1 = x.
    GeluBack,
    /// `LogSoftMax`'s backward: src0 = dy, src1 = y = log_soft_max(x); dx = dy − exp(y) · Σ dy
    /// per row.
    LogSoftMaxBack,
    /// Layer norm's (`Norm`'s) backward: src0 = dy, src1 = x; per row, with
    /// y = (x − μ)/σ: dx = (dy − mean(dy) − y · mean(dy ⊙ y)) / σ.
    NormBack {
        eps: f32,
    },
    /// ggml_repeat_back: src0 summed onto the (smaller) result, each element into
    /// dst[i mod dst.ne]: the gradient of a broadcast operand.
    RepeatBack,
    /// ggml_get_rows_back: dst (zeros, the table's shape) with row `src0[:, i]` added into row
    /// `src1[i]` for every index i (a scatter-add).
    GetRowsBack,
    /// ggml_acc: src0 copied, then src1 added into the view of it at byte `offset` with
    /// byte strides `nb` (dims 1..3; elements packed): the gradient of a view.
    Acc {
        nb: [usize; 3],
        offset: usize,
    },
    /// diag_mask_inf's backward: a[i0, i1] = 0 where i0 > n_past + i1.
    DiagMaskZero {
        n_past: i32,
    },
    /// Every element set to the value (no sources): the seed of a backward pass, zeros.
    Fill(f32),

    // --- optimizer steps (ggml-opt's): the result is a view of src0, updated in place ---
    /// ggml_opt_step_adamw: src0 = the param, src1 = its state `[n, 3]` (gradient, zeroed by
    /// the step; m, v),
    /// src2 = `[lr, beta1, beta2, eps, weight decay, 1 − beta1^t, sqrt(1 − beta2^t),
    /// gradient scale]` (f32): PyTorch's AdamW.
    OptStepAdamw,
    /// ggml_opt_step_sgd: src0 = the param, src1 = its state `[n, 2]` (gradient, zeroed by the
    /// step; momentum buffer), src2 = `[lr, momentum, weight decay, gradient scale, first step]`: PyTorch's SGD.
    OptStepSgd,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::View => "VIEW",
            Op::Reshape => "RESHAPE",
            Op::Permute(_) => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::Cont => "CONT",
            Op::Cpy => "CPY",
            Op::GetRows => "GET_ROWS",
            Op::Add => "ADD",
            Op::Mul => "MUL",
            Op::Scale(_) => "SCALE",
            Op::Norm { .. } => "NORM",
            Op::Gelu => "GELU",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::DiagMaskInf { .. } => "DIAG_MASK_INF",
            Op::MulMat => "MUL_MAT",
            Op::LogSoftMax => "LOG_SOFT_MAX",
            Op::LogSoftMaxBack => "LOG_SOFT_MAX_BACK",
            Op::OutProd => "OUT_PROD",
            Op::SoftMaxBack { .. } => "SOFT_MAX_BACK",
            Op::GeluBack => "GELU_BACK",
            Op::NormBack { .. } => "NORM_BACK",
            Op::RepeatBack => "REPEAT_BACK",
            Op::GetRowsBack => "GET_ROWS_BACK",
            Op::Acc { .. } => "ACC",
            Op::DiagMaskZero { .. } => "DIAG_MASK_ZERO",
            Op::Fill(_) => "FILL",
            Op::OptStepAdamw => "OPT_STEP_ADAMW",
            Op::OptStepSgd => "OPT_STEP_SGD",
        }
    }

    /// Ops that only reinterpret their source's bytes: no computation, no memory of their own.
    pub fn is_view(&self) -> bool {
        matches!(self, Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose)
    }
}

/// ggml_tensor_flag.
pub mod flags {
    pub const INPUT: u32 = 1;
    pub const OUTPUT: u32 = 2;
    /// ggml_set_param: a backward pass computes this tensor's gradient (a leaf or a node).
    pub const PARAM: u32 = 4;
    /// ggml_set_loss: the tensor a backward pass starts from.
    pub const LOSS: u32 = 8;
}

/// Where a tensor's bytes live: a backend buffer and a byte offset into it.
#[derive(Clone)]
pub struct TensorData {
    pub buffer: Rc<dyn Buffer>,
    pub offset: usize,
}

impl core::fmt::Debug for TensorData {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}+{}", self.buffer.buffer_type_name(), self.offset)
    }
}

/// The tensor header (ggml_tensor). Shape, strides and graph links are fixed at creation.
pub struct TensorInner {
    pub ty: GgmlType,
    pub ne: [i64; MAX_DIMS],
    pub nb: [usize; MAX_DIMS],
    pub op: Op,
    pub src: [Option<Tensor>; MAX_SRC],
    pub view_src: Option<Tensor>,
    pub view_offs: usize,
    name: RefCell<String>,
    flags: Cell<u32>,
    data: RefCell<Option<TensorData>>,
    /// Unique per process; graphs and allocators key their tables by it.
    id: usize,
}

/// A handle to a tensor header. Clones share the header.
#[derive(Clone)]
pub struct Tensor(Rc<TensorInner>);

impl core::ops::Deref for Tensor {
    type Target = TensorInner;
    fn deref(&self) -> &TensorInner {
        &self.0
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for Tensor {}

impl core::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} '{}' {} ne={:?} nb={:?}", self.op.name(), self.name(), self.ty, self.ne, self.nb)
    }
}

static NEXT_ID: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(1);

/// Contiguous strides for `ne` (the formula in ggml_tensor's comment). Panics, naming the
/// shape, when a stride or the whole tensor does not fit in `usize` (4 GiB on wasm32):
/// sizes from a file are checked before a tensor is made ([`try_contiguous_strides`]), so
/// this is a bug in the caller, never a wrapped small size.
pub fn contiguous_strides(ty: GgmlType, ne: &[i64; MAX_DIMS]) -> [usize; MAX_DIMS] {
    try_contiguous_strides(ty, ne).unwrap_or_else(|| panic!("tensor {ty} ne={ne:?}: its byte size overflows usize"))
}

/// [`contiguous_strides`], or None when a dimension is negative or the strides or the
/// byte size of the whole tensor ([`contiguous_nbytes`]) do not fit in `usize`.
pub fn try_contiguous_strides(ty: GgmlType, ne: &[i64; MAX_DIMS]) -> Option<[usize; MAX_DIMS]> {
    let mut nb = [0usize; MAX_DIMS];
    nb[0] = ty.type_size();
    nb[1] = ty.try_row_size(ne[0])?;
    for i in 2..MAX_DIMS {
        nb[i] = nb[i - 1].checked_mul(usize::try_from(ne[i - 1]).ok()?)?;
    }
    nb[3].checked_mul(usize::try_from(ne[3]).ok()?)?;
    Some(nb)
}

/// Bytes of a contiguous tensor of `ne`, in u64 (no target's `usize` limits it), or None
/// when a dimension is negative, `ne[0]` is not a whole number of blocks, or the size
/// passes u64. Loaders size what a file implies with this before making any tensor.
pub fn contiguous_nbytes(ty: GgmlType, ne: &[i64; MAX_DIMS]) -> Option<u64> {
    if ne.iter().any(|&n| n < 0) || ne[0] % ty.blck_size() as i64 != 0 {
        return None;
    }
    let row = (ne[0] as u64 / ty.blck_size() as u64).checked_mul(ty.type_size() as u64)?;
    ne[1..].iter().try_fold(row, |n, &d| n.checked_mul(d as u64))
}

impl Tensor {
    /// Builds a header. Ops and contexts call this; `ne` dims past `n_dims` must be 1.
    pub(crate) fn make(
        ty: GgmlType,
        ne: [i64; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        op: Op,
        src: [Option<Tensor>; MAX_SRC],
        view: Option<(Tensor, usize)>,
        name: String,
    ) -> Tensor {
        // A view of a view points at the original, as ggml_view_impl does.
        let (view_src, view_offs) = match view {
            Some((v, offs)) => match &v.view_src {
                Some(root) => (Some(root.clone()), v.view_offs + offs),
                None => (Some(v.clone()), offs),
            },
            None => (None, 0),
        };
        Tensor(Rc::new(TensorInner {
            ty,
            ne,
            nb,
            op,
            src,
            view_src,
            view_offs,
            name: RefCell::new(name),
            flags: Cell::new(0),
            data: RefCell::new(None),
            id: NEXT_ID.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
        }))
    }

    pub fn id(&self) -> usize {
        self.id
    }

    pub fn name(&self) -> String {
        self.name.borrow().clone()
    }

    /// ggml_set_name. Returns the tensor so graph code can name steps inline.
    pub fn set_name(&self, name: &str) -> &Tensor {
        *self.name.borrow_mut() = String::from(name);
        self
    }

    pub fn flags(&self) -> u32 {
        self.flags.get()
    }
    pub fn set_flag(&self, flag: u32) {
        self.flags.set(self.flags.get() | flag);
    }
    /// ggml_set_input: the scheduler places inputs on the CPU and the allocator gives
    /// them memory before any node.
    pub fn set_input(&self) {
        self.set_flag(flags::INPUT)
    }
    /// ggml_set_output: the allocator never frees or reuses an output's memory.
    pub fn set_output(&self) {
        self.set_flag(flags::OUTPUT)
    }
    /// ggml_set_param: [`crate::graph::Graph::build_backward_expand`] computes this tensor's
    /// gradient (and so of everything between it and the loss). A node may be a param too:
    /// its gradient is then the gradient with respect to its value.
    pub fn set_param(&self) {
        self.set_flag(flags::PARAM)
    }
    /// Undoes [`Tensor::set_param`] (training flags its weights only while it builds its graph).
    pub fn clear_param(&self) {
        self.flags.set(self.flags.get() & !flags::PARAM)
    }
    /// ggml_set_loss: marks the tensor a backward pass differentiates (one per graph).
    pub fn set_loss(&self) {
        self.set_flag(flags::LOSS)
    }
    pub fn is_param(&self) -> bool {
        self.flags.get() & flags::PARAM != 0
    }
    pub fn is_input(&self) -> bool {
        self.flags.get() & flags::INPUT != 0
    }
    pub fn is_output(&self) -> bool {
        self.flags.get() & flags::OUTPUT != 0
    }

    /// Where the bytes are: a view's are its source's plus `view_offs`; None until allocated.
    pub fn data(&self) -> Option<TensorData> {
        match &self.view_src {
            Some(src) => src.data().map(|d| TensorData { buffer: d.buffer, offset: d.offset + self.view_offs }),
            None => self.data.borrow().clone(),
        }
    }

    /// ggml_backend_tensor_alloc: places a non-view tensor at `offset` in `buffer`.
    /// Panics if the tensor is a view or does not fit (an allocator bug).
    pub fn set_data(&self, buffer: Rc<dyn Buffer>, offset: usize) {
        assert!(self.view_src.is_none(), "set_data on view '{}': a view's data follows its source", self.name());
        assert!(
            offset + self.nbytes() <= buffer.size(),
            "tensor '{}' ({} bytes at offset {}) does not fit in a buffer of {} bytes",
            self.name(),
            self.nbytes(),
            offset,
            buffer.size()
        );
        buffer.init_tensor(offset, self.ty, self.ne, self.nb);
        *self.data.borrow_mut() = Some(TensorData { buffer, offset });
    }

    /// Forgets the tensor's placement (gallocr resets node data between plans).
    pub fn clear_data(&self) {
        *self.data.borrow_mut() = None;
    }

    /// Host address of the first byte, when the data is allocated in host memory.
    pub fn host_ptr(&self) -> Option<*mut u8> {
        let d = self.data()?;
        let base = d.buffer.host_base()?;
        // SAFETY: the allocator checked `offset + nbytes <= size` when placing the tensor.
        Some(unsafe { base.add(d.offset) })
    }

    fn host_ptr_or_panic(&self) -> *mut u8 {
        self.host_ptr().unwrap_or_else(|| {
            panic!("tensor '{}' has no data in host memory (not allocated, or on a device)", self.name())
        })
    }

    // --- sizes (ggml_nelements, ggml_nrows, ggml_nbytes, ...) ---

    pub fn nelements(&self) -> i64 {
        self.ne.iter().product()
    }

    pub fn nrows(&self) -> i64 {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// ggml_nbytes: the span from the first to one past the last byte, strides included.
    pub fn nbytes(&self) -> usize {
        if self.ne.iter().any(|&n| n <= 0) {
            return 0;
        }
        self.try_nbytes().unwrap_or_else(|| panic!("nbytes of {}: the span overflows usize", shape_str(self)))
    }

    /// [`nbytes`](Self::nbytes) in checked arithmetic: None when the span does not fit in
    /// `usize` (strides of a view can make it larger than the elements alone).
    pub fn try_nbytes(&self) -> Option<usize> {
        if self.ne.iter().any(|&n| n <= 0) {
            return Some(0);
        }
        let blck = self.ty.blck_size();
        let (mut n, first) = if blck == 1 {
            (self.ty.type_size(), 0)
        } else {
            ((self.ne[0] as usize).checked_mul(self.nb[0])? / blck, 1)
        };
        for i in first..MAX_DIMS {
            let extent = usize::try_from(self.ne[i] - 1).ok()?.checked_mul(self.nb[i])?;
            n = n.checked_add(extent)?;
        }
        Some(n)
    }

    pub fn element_size(&self) -> usize {
        self.ty.type_size()
    }

    pub fn row_size(&self) -> usize {
        self.ty.row_size(self.ne[0])
    }

    /// Number of dimensions, trailing 1s dropped (ggml_n_dims; at least 1).
    pub fn n_dims(&self) -> usize {
        (1..MAX_DIMS).rev().find(|&i| self.ne[i] > 1).map_or(1, |i| i + 1)
    }

    // --- predicates (ggml_is_*) ---

    /// ggml_is_contiguous_n: dims above `n` are packed; dims 1..=n may have gaps.
    fn is_contiguous_n(&self, n: usize) -> bool {
        let mut next_nb = self.ty.type_size();
        if self.ne[0] != self.ty.blck_size() as i64 && self.nb[0] != next_nb {
            return false;
        }
        next_nb *= self.ne[0] as usize / self.ty.blck_size();
        for i in 1..MAX_DIMS {
            if self.ne[i] != 1 {
                if i > n {
                    if self.nb[i] != next_nb {
                        return false;
                    }
                    next_nb *= self.ne[i] as usize;
                } else {
                    next_nb = self.ne[i] as usize * self.nb[i];
                }
            }
        }
        true
    }

    pub fn is_contiguous(&self) -> bool {
        self.is_contiguous_n(0)
    }
    /// Rows may have gaps between them; elements within a row are packed.
    pub fn is_contiguous_1(&self) -> bool {
        self.is_contiguous_n(1)
    }
    pub fn is_contiguous_2(&self) -> bool {
        self.is_contiguous_n(2)
    }
    /// Elements within each row are adjacent (what the row-memcpy path of `cont` needs).
    pub fn is_contiguous_rows(&self) -> bool {
        self.ne[0] == self.ty.blck_size() as i64 || self.nb[0] == self.ty.type_size()
    }
    /// ggml_is_transposed: dim 0 steps further than dim 1.
    pub fn is_transposed(&self) -> bool {
        self.nb[0] > self.nb[1]
    }
    /// ggml_is_permuted: strides out of increasing order.
    pub fn is_permuted(&self) -> bool {
        self.nb[0] > self.nb[1] || self.nb[1] > self.nb[2] || self.nb[2] > self.nb[3]
    }
    pub fn same_shape(&self, other: &Tensor) -> bool {
        self.ne == other.ne
    }
    /// ggml_can_repeat(self, onto): `self` broadcasts onto `onto` along every dim.
    pub fn can_repeat(&self, onto: &Tensor) -> bool {
        (0..MAX_DIMS).all(|i| self.ne[i] > 0 && onto.ne[i] % self.ne[i] == 0)
    }

    // --- host get/set helpers (tests, inputs, debugging) ---

    fn f32_at(&self, ptr: *const u8) -> f32 {
        // SAFETY: callers pass addresses inside this tensor's allocated span.
        unsafe {
            match self.ty {
                GgmlType::F32 => (ptr as *const f32).read_unaligned(),
                GgmlType::F16 => half::f16::from_bits((ptr as *const u16).read_unaligned()).to_f32(),
                GgmlType::BF16 => half::bf16::from_bits((ptr as *const u16).read_unaligned()).to_f32(),
                GgmlType::I32 => (ptr as *const i32).read_unaligned() as f32,
                t => panic!("element access on quantized tensor '{}' ({t})", self.name()),
            }
        }
    }

    fn put_f32_at(&self, ptr: *mut u8, v: f32) {
        // SAFETY: as in f32_at.
        unsafe {
            match self.ty {
                GgmlType::F32 => (ptr as *mut f32).write_unaligned(v),
                GgmlType::F16 => (ptr as *mut u16).write_unaligned(half::f16::from_f32(v).to_bits()),
                GgmlType::BF16 => (ptr as *mut u16).write_unaligned(half::bf16::from_f32(v).to_bits()),
                GgmlType::I32 => (ptr as *mut i32).write_unaligned(v as i32),
                t => panic!("element access on quantized tensor '{}' ({t})", self.name()),
            }
        }
    }

    fn offset_of(&self, i0: i64, i1: i64, i2: i64, i3: i64) -> usize {
        let idx = [i0, i1, i2, i3];
        for d in 0..MAX_DIMS {
            assert!(
                idx[d] >= 0 && idx[d] < self.ne[d],
                "index {idx:?} out of bounds for '{}' ne={:?}",
                self.name(),
                self.ne
            );
        }
        (0..MAX_DIMS).map(|d| idx[d] as usize * self.nb[d]).sum()
    }

    /// ggml_get_f32_nd: reads through the strides.
    pub fn get_f32_nd(&self, i0: i64, i1: i64, i2: i64, i3: i64) -> f32 {
        let off = self.offset_of(i0, i1, i2, i3);
        self.f32_at(unsafe { self.host_ptr_or_panic().add(off) })
    }

    pub fn set_f32_nd(&self, i0: i64, i1: i64, i2: i64, i3: i64, v: f32) {
        let off = self.offset_of(i0, i1, i2, i3);
        self.put_f32_at(unsafe { self.host_ptr_or_panic().add(off) }, v)
    }

    pub fn get_i32_nd(&self, i0: i64, i1: i64, i2: i64, i3: i64) -> i32 {
        assert_eq!(self.ty, GgmlType::I32, "get_i32_nd on '{}'", self.name());
        let off = self.offset_of(i0, i1, i2, i3);
        unsafe { (self.host_ptr_or_panic().add(off) as *const i32).read_unaligned() }
    }

    /// ggml_set_i32_1d on a contiguous tensor.
    pub fn set_i32_1d(&self, i: i64, v: i32) {
        assert_eq!(self.ty, GgmlType::I32, "set_i32_1d on '{}'", self.name());
        assert!(self.is_contiguous() && i >= 0 && i < self.nelements());
        unsafe { (self.host_ptr_or_panic().add(i as usize * 4) as *mut i32).write_unaligned(v) }
    }

    /// Logical index order (i0 fastest) → flat index, for the `*_vec` helpers.
    fn for_each_index(&self, mut f: impl FnMut(i64, i64, i64, i64)) {
        for i3 in 0..self.ne[3] {
            for i2 in 0..self.ne[2] {
                for i1 in 0..self.ne[1] {
                    for i0 in 0..self.ne[0] {
                        f(i0, i1, i2, i3)
                    }
                }
            }
        }
    }

    /// All elements in logical order (i0 fastest), read through the strides, as f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.nelements() as usize);
        self.for_each_index(|a, b, c, d| out.push(self.get_f32_nd(a, b, c, d)));
        out
    }

    pub fn to_i32_vec(&self) -> Vec<i32> {
        let mut out = Vec::with_capacity(self.nelements() as usize);
        self.for_each_index(|a, b, c, d| out.push(self.get_i32_nd(a, b, c, d)));
        out
    }

    /// Writes `values` in logical order (i0 fastest) through the strides, converting from f32.
    pub fn set_f32_slice(&self, values: &[f32]) {
        assert_eq!(values.len() as i64, self.nelements(), "set_f32_slice on '{}' ne={:?}", self.name(), self.ne);
        let mut k = 0;
        self.for_each_index(|a, b, c, d| {
            self.set_f32_nd(a, b, c, d, values[k]);
            k += 1;
        });
    }

    pub fn set_i32_slice(&self, values: &[i32]) {
        assert_eq!(self.ty, GgmlType::I32);
        assert_eq!(values.len() as i64, self.nelements(), "set_i32_slice on '{}' ne={:?}", self.name(), self.ne);
        let mut k = 0;
        self.for_each_index(|a, b, c, d| {
            let off = self.offset_of(a, b, c, d);
            unsafe { (self.host_ptr_or_panic().add(off) as *mut i32).write_unaligned(values[k]) };
            k += 1;
        });
    }

    /// Copies raw bytes into the tensor's memory at `offset`, on whatever backend holds it
    /// (ggml_backend_tensor_set). The tensor must be allocated.
    pub fn set_bytes(&self, bytes: &[u8], offset: usize) {
        let d = self.data().unwrap_or_else(|| panic!("set_bytes on unallocated tensor '{}'", self.name()));
        assert!(offset + bytes.len() <= self.nbytes(), "set_bytes past the end of '{}'", self.name());
        d.buffer.set_bytes(d.offset + offset, bytes);
    }

    /// Reads raw bytes of the tensor's memory (ggml_backend_tensor_get), in ggml's layout
    /// whatever layout the buffer keeps.
    pub fn get_bytes(&self, out: &mut [u8], offset: usize) {
        let d = self.data().unwrap_or_else(|| panic!("get_bytes on unallocated tensor '{}'", self.name()));
        assert!(offset + out.len() <= self.nbytes(), "get_bytes past the end of '{}'", self.name());
        d.buffer.get_bytes(d.offset + offset, out);
    }

    /// [`Tensor::get_bytes`] with a failed device read (a lost WebGPU device) as an error.
    pub fn try_get_bytes(&self, out: &mut [u8], offset: usize) -> Result<(), BackendError> {
        let d = self.data().unwrap_or_else(|| panic!("get_bytes on unallocated tensor '{}'", self.name()));
        assert!(offset + out.len() <= self.nbytes(), "get_bytes past the end of '{}'", self.name());
        d.buffer.try_get_bytes(d.offset + offset, out)
    }
}

/// ggml_init_params.
#[derive(Clone, Copy, Debug)]
pub struct ContextParams {
    /// Budget for headers (TENSOR_OVERHEAD each) and, unless `no_alloc`, their data.
    pub mem_size: usize,
    /// Headers only: data is assigned later by an allocator (ggml's no_alloc).
    pub no_alloc: bool,
}

/// A ggml_context: creates tensor headers and remembers them, so an allocator can place
/// them all (ggml_backend_alloc_ctx_tensors). With `no_alloc = false` every new non-view
/// tensor also gets its data from the context's own host pool, right away.
pub struct Context {
    params: ContextParams,
    tensors: RefCell<Vec<Tensor>>,
    used: Cell<usize>,
    pool: Option<Rc<HostBuffer>>,
}

/// Data in a context's pool is aligned like ggml's (GGML_MEM_ALIGN is 16; we use 64 for SIMD).
pub const CONTEXT_ALIGN: usize = 64;

impl Context {
    pub fn new(params: ContextParams) -> Context {
        let pool = if params.no_alloc {
            None
        } else {
            let buf = HostBuffer::new(params.mem_size, CONTEXT_ALIGN, "context")
                .unwrap_or_else(|e| panic!("context pool of {} bytes: {e}", params.mem_size));
            Some(Rc::new(buf))
        };
        Context { params, tensors: RefCell::new(Vec::new()), used: Cell::new(0), pool }
    }

    pub fn params(&self) -> ContextParams {
        self.params
    }
    pub fn no_alloc(&self) -> bool {
        self.params.no_alloc
    }
    /// ggml_used_mem.
    pub fn used_mem(&self) -> usize {
        self.used.get()
    }
    /// Every tensor created in this context, in creation order.
    pub fn tensors(&self) -> Vec<Tensor> {
        self.tensors.borrow().clone()
    }
    /// ggml_get_tensor: the first tensor with this name.
    pub fn get_tensor(&self, name: &str) -> Option<Tensor> {
        self.tensors.borrow().iter().find(|t| *t.name.borrow() == name).cloned()
    }

    /// Registers a header built by an op or constructor; charges the budget and, in
    /// allocating mode, places the data of a non-view tensor in the pool.
    pub(crate) fn register(&self, t: Tensor) -> Tensor {
        let data_size = if t.view_src.is_none() && !self.params.no_alloc { t.nbytes() } else { 0 };
        let start = self.used.get();
        // Saturating: a sum past usize is over any pool, and the assert below says so.
        let data_at = start.saturating_add(TENSOR_OVERHEAD + CONTEXT_ALIGN - 1) / CONTEXT_ALIGN * CONTEXT_ALIGN;
        let end = if data_size > 0 { data_at.saturating_add(data_size) } else { start.saturating_add(TENSOR_OVERHEAD) };
        assert!(
            end <= self.params.mem_size,
            "not enough space in the context's memory pool (needed {end}, available {})",
            self.params.mem_size
        );
        if data_size > 0 {
            let pool = self.pool.clone().expect("allocating context has a pool");
            t.set_data(pool, data_at);
        }
        self.used.set(end);
        self.tensors.borrow_mut().push(t.clone());
        t
    }

    /// ggml_new_tensor: contiguous, `ne.len()` dims (1..=4).
    pub fn new_tensor(&self, ty: GgmlType, ne: &[i64]) -> Tensor {
        assert!(!ne.is_empty() && ne.len() <= MAX_DIMS, "new_tensor: {} dims (1..=4 allowed)", ne.len());
        let mut full = [1i64; MAX_DIMS];
        full[..ne.len()].copy_from_slice(ne);
        assert!(full.iter().all(|&n| n >= 0), "new_tensor: negative ne {ne:?}");
        assert!(
            (full[0] as usize).is_multiple_of(ty.blck_size()),
            "new_tensor: ne[0] = {} is not a multiple of {}'s block size {}",
            full[0],
            ty,
            ty.blck_size()
        );
        let nb = contiguous_strides(ty, &full);
        self.register(Tensor::make(ty, full, nb, Op::None, [None, None, None], None, String::new()))
    }

    pub fn new_tensor_1d(&self, ty: GgmlType, ne0: i64) -> Tensor {
        self.new_tensor(ty, &[ne0])
    }
    pub fn new_tensor_2d(&self, ty: GgmlType, ne0: i64, ne1: i64) -> Tensor {
        self.new_tensor(ty, &[ne0, ne1])
    }
    pub fn new_tensor_3d(&self, ty: GgmlType, ne0: i64, ne1: i64, ne2: i64) -> Tensor {
        self.new_tensor(ty, &[ne0, ne1, ne2])
    }
    pub fn new_tensor_4d(&self, ty: GgmlType, ne0: i64, ne1: i64, ne2: i64, ne3: i64) -> Tensor {
        self.new_tensor(ty, &[ne0, ne1, ne2, ne3])
    }

    /// ggml_dup_tensor: a new tensor of the same type and shape, contiguous, no op.
    pub fn dup_tensor(&self, a: &Tensor) -> Tensor {
        self.new_tensor(a.ty, &a.ne)
    }

    /// A result tensor of an op: contiguous, with sources, data from the pool if allocating.
    pub(crate) fn new_op_tensor(
        &self,
        ty: GgmlType,
        ne: [i64; MAX_DIMS],
        op: Op,
        src: [Option<Tensor>; MAX_SRC],
        name: String,
    ) -> Tensor {
        let nb = contiguous_strides(ty, &ne);
        self.register(Tensor::make(ty, ne, nb, op, src, None, name))
    }

    /// A view-like result (view, reshape, permute, transpose, cpy): shares `of`'s bytes.
    pub(crate) fn new_view_tensor(
        &self,
        of: &Tensor,
        ty: GgmlType,
        ne: [i64; MAX_DIMS],
        nb: [usize; MAX_DIMS],
        offset: usize,
        op: Op,
        src: [Option<Tensor>; MAX_SRC],
        name: String,
    ) -> Tensor {
        let t = Tensor::make(ty, ne, nb, op, src, Some((of.clone(), offset)), name);
        let root = t.view_src.as_ref().expect("view has a source");
        assert!(
            t.view_offs.checked_add(t.nbytes()).is_some_and(|end| end <= root.nbytes()),
            "view of '{}' out of bounds: offset {} + {} bytes > {} bytes (ne={:?} nb={:?})",
            root.name(),
            t.view_offs,
            t.nbytes(),
            root.nbytes(),
            ne,
            nb
        );
        self.register(t)
    }
}

/// Formats a shape for assertion messages.
pub fn shape_str(t: &Tensor) -> String {
    format!("'{}' {} ne={:?} nb={:?}", t.name(), t.ty, t.ne, t.nb)
}
