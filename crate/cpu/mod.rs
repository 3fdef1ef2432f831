//! The CPU backend: host buffers and the forward kernels for every op.
//!
//! ```
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType::F32;
//! use ggweb::Graph;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: false });
//! let w = ctx.new_tensor_2d(F32, 2, 3);            // 3 rows of 2: a [n_in=2, n_out=3] weight
//! let x = ctx.new_tensor_2d(F32, 2, 1);
//! w.set_f32_slice(&[1., 0., 0., 1., 1., 1.]);
//! x.set_f32_slice(&[2., 5.]);
//! let y = ctx.mul_mat(&w, &x);                     // x · wᵀ
//! let mut gf = Graph::new();
//! gf.build_forward_expand(&y);
//! ggweb::cpu::compute_graph(&gf, 1).unwrap();     // ggml_graph_compute_with_ctx
//! assert_eq!(y.to_f32_vec(), [2., 5., 7.]);
//! ```
//!
//! [`CpuBackend::graph_compute`] runs the nodes in order; view-like nodes (view, reshape,
//! permute, transpose) compute nothing, their data being their source's. Kernels live in
//! `ops` (crate-private) and the SIMD dot products in [`simd`].
//!
//! Numerics, chosen for fidelity to an f32 reference (PyTorch) rather than to ggml's CPU
//! defaults: GELU is the exact tanh form (no f16 table); F16 weights are dotted with f32
//! activations as they are (ggml rounds the activations to f16 first); row sums of norm
//! and soft_max are f64. Quantized weights follow ggml: each activation row is quantized
//! once to the weight type's `vec_dot_type`, then `quants::vec_dot`.

mod ops;
pub mod simd;

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;

use crate::backend::host::HostBuffer;
use crate::backend::{Backend, BackendError, Buffer, BufferType};
use crate::graph::Graph;
use crate::tensor::{Op, Tensor};

pub use ops::gelu_f32;
use ops::{BinaryOp, KernelError, TensorView};

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
    /// One allocation is at most isize::MAX bytes (Rust's Layout rule: 2 GiB on wasm32);
    /// larger weights are split over several buffers rather than refused.
    fn max_size(&self) -> usize {
        isize::MAX as usize - CPU_ALIGNMENT
    }
    fn budget(&self) -> Option<u64> {
        crate::backend::host::address_space_left()
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(HostBuffer::new(size, CPU_ALIGNMENT, "CPU")?))
    }
}

/// The CPU backend. `n_threads` > 1 splits `mul_mat` across threads in native `std`
/// builds; elsewhere (wasm, `no_std`) it runs on the calling thread.
pub struct CpuBackend {
    pub n_threads: usize,
}

impl CpuBackend {
    pub fn new(n_threads: usize) -> CpuBackend {
        CpuBackend { n_threads: n_threads.max(1) }
    }

    /// Computes one node (its sources must hold their data already).
    pub fn compute_node(&self, node: &Tensor) -> Result<(), BackendError> {
        compute_forward(node, self.n_threads).map_err(|e| match e {
            KernelError::Unsupported(reason) => BackendError::Unsupported { node: node_label(node), reason },
            KernelError::Invalid(reason) => BackendError::Other(format!("node {}: {reason}", node_label(node))),
        })
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "CPU"
    }
    fn buffer_type(&self) -> Rc<dyn BufferType> {
        Rc::new(CpuBufferType)
    }
    fn graph_compute(&self, graph: &Graph) -> Result<(), BackendError> {
        for node in &graph.nodes {
            self.compute_node(node)?;
        }
        Ok(())
    }
    fn supports_op(&self, node: &Tensor) -> bool {
        supports(node)
    }
}

/// ggml_graph_compute_with_ctx: runs `graph` on the CPU with `n_threads` threads. Every
/// tensor must be allocated in host memory (an allocating context, or CPU buffers).
pub fn compute_graph(graph: &Graph, n_threads: usize) -> Result<(), BackendError> {
    CpuBackend::new(n_threads).graph_compute(graph)
}

/// "'name' (OP)", or the op and shape when the node has no name.
fn node_label(node: &Tensor) -> String {
    let name = node.name();
    if name.is_empty() {
        format!("({} {} ne={:?})", node.op.name(), node.ty, node.ne)
    } else {
        format!("'{name}' ({})", node.op.name())
    }
}

fn src(node: &Tensor, i: usize) -> Result<TensorView, KernelError> {
    match &node.src[i] {
        Some(s) => TensorView::of(s),
        None => Err(KernelError::Invalid(format!("{} needs src[{i}]", node.op.name()))),
    }
}

fn compute_forward(node: &Tensor, n_threads: usize) -> Result<(), KernelError> {
    if node.op == Op::None || node.op.is_view() {
        return Ok(());
    }
    // Sources first: a missing input is the likelier mistake, and names that tensor.
    for s in node.src.iter().flatten() {
        TensorView::of(s)?;
    }
    let dst = TensorView::of(node)?;
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        // cpy's result is a view of src[1] with its shape and strides: writing dst writes b.
        Op::Cont | Op::Cpy => ops::dup(&src(node, 0)?, &dst),
        Op::GetRows => ops::get_rows(&src(node, 0)?, &src(node, 1)?, &dst),
        Op::Add => ops::binary(BinaryOp::Add, &src(node, 0)?, &src(node, 1)?, &dst),
        Op::Mul => ops::binary(BinaryOp::Mul, &src(node, 0)?, &src(node, 1)?, &dst),
        Op::Scale(s) => ops::scale(&src(node, 0)?, &dst, s),
        Op::Norm { eps } => ops::norm(&src(node, 0)?, &dst, eps),
        Op::Gelu => ops::gelu(&src(node, 0)?, &dst),
        Op::SoftMax { scale, max_bias } => {
            let mask = match &node.src[1] {
                Some(m) => Some(TensorView::of(m)?),
                None => None,
            };
            ops::soft_max(&src(node, 0)?, mask.as_ref(), &dst, scale, max_bias)
        }
        Op::DiagMaskInf { n_past } => ops::diag_mask_inf(&src(node, 0)?, &dst, n_past),
        Op::MulMat => ops::mul_mat(&src(node, 0)?, &src(node, 1)?, &dst, n_threads),
    }
}

/// Whether the kernels implement `node`'s op for its types (what graph_compute would not
/// reject as Unsupported before looking at shapes and data).
fn supports(node: &Tensor) -> bool {
    use crate::types::GgmlType::{self, *};
    let readable = |t: GgmlType| matches!(t, F32 | F16 | BF16) || t.is_quantized();
    let writable = |t: GgmlType| matches!(t, F32 | F16 | BF16) || ops::can_quantize_to(t);
    let ty = |i: usize| node.src[i].as_ref().map(|t| t.ty);
    let src_is = |i: usize, f: &dyn Fn(GgmlType) -> bool| ty(i).is_some_and(f);
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => true,
        Op::Cont | Op::Cpy => src_is(0, &|s| s == node.ty || (readable(s) && writable(node.ty))),
        Op::GetRows => src_is(1, &|b| b == I32) && src_is(0, &|a| a == node.ty || (readable(a) && writable(node.ty))),
        Op::Add | Op::Mul => src_is(0, &readable) && src_is(1, &readable) && writable(node.ty),
        Op::Scale(_) | Op::Norm { .. } | Op::Gelu | Op::DiagMaskInf { .. } => src_is(0, &readable) && writable(node.ty),
        Op::SoftMax { max_bias, .. } => {
            max_bias == 0.0 && src_is(0, &readable) && writable(node.ty) && ty(1).is_none_or(|m| matches!(m, F32 | F16))
        }
        Op::MulMat => {
            src_is(0, &|a| matches!(a, F32 | F16) || ops::has_vec_dot(a))
                && src_is(1, &|b| matches!(b, F32 | F16 | BF16))
                && node.ty == F32
        }
    }
}
