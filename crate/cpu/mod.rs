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
//! `ops` (crate-private) and the SIMD dot products in [`arch`].
//!
//! Numerics, chosen for fidelity to an f32 reference (PyTorch) rather than to ggml's CPU
//! defaults: GELU is the exact tanh form (no f16 table); F16 weights are dotted with f32
//! activations as they are (ggml rounds the activations to f16 first); row sums of norm
//! and soft_max are f64. Quantized weights follow ggml: each activation row is quantized
//! once to the weight type's `vec_dot_type`, then dotted as `cpu::arch::vec_dot` does (through
//! `cpu::arch::gemm`, which gives the same bits for many pairs at once).

pub mod features;
mod ops;
mod ops_backward;
mod ops_opt;
#[cfg(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))]
pub mod pool;
#[cfg(all(feature = "std", target_family = "wasm", target_feature = "atomics"))]
mod pool_wasm;
#[cfg(all(feature = "std", target_family = "wasm", target_feature = "atomics"))]
pub use pool_wasm::workers_running;
pub mod arch;
pub mod repack_buffer;

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;

use crate::backend::host::HostBuffer;
use crate::backend::{Backend, BackendError, Buffer, BufferType};
use crate::graph::Graph;
use crate::tensor::{Op, Tensor};

pub use arch::gelu_f32;
use ops::{BinaryOp, Exec, KernelError, TensorView};

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
        // In wasm a buffer lies in the linear memory: wasm32's isize::MAX (2 GiB) is the
        // tighter bound there, the memory's own 16 GiB on the Memory64 build (whose isize::MAX
        // would also pass 2^53, which a JS number cannot hold exactly: Model.inspect's limits).
        #[cfg(target_family = "wasm")]
        let max = (isize::MAX as u64).min(crate::backend::host::WASM_MEMORY_MAX) as usize;
        #[cfg(not(target_family = "wasm"))]
        let max = isize::MAX as usize;
        max - CPU_ALIGNMENT
    }
    fn budget(&self) -> Option<u64> {
        crate::backend::host::address_space_left()
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(HostBuffer::new(size, CPU_ALIGNMENT, "CPU")?))
    }
}

/// The CPU backend. `n_threads` > 1 splits `mul_mat` across threads in native `std`
/// builds (a pool started on first use and kept) and in the threaded wasm build (a pool of
/// Web Workers started at once, since they come up only while the caller awaits); elsewhere
/// (the single-thread wasm build, `no_std`) it runs on the calling thread.
pub struct CpuBackend {
    pub n_threads: usize,
    profiler: Option<Profiler>,
    #[cfg(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))]
    pool: RefCell<Option<pool::ThreadPool>>,
}

impl CpuBackend {
    pub fn new(n_threads: usize) -> CpuBackend {
        let b = CpuBackend {
            n_threads: n_threads.max(1),
            profiler: None,
            #[cfg(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))]
            pool: RefCell::new(None),
        };
        #[cfg(all(feature = "std", target_family = "wasm", target_feature = "atomics"))]
        if b.n_threads > 1 {
            *b.pool.borrow_mut() = Some(pool::ThreadPool::new(b.n_threads));
        }
        b
    }

    /// Whether this build can run more than one thread (`n_threads` > 1 does anything).
    pub const fn threads_supported() -> bool {
        cfg!(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))
    }

    /// Calls `f` with the executor for this backend's thread count.
    fn with_exec<R>(&self, f: impl FnOnce(&Exec) -> R) -> R {
        #[cfg(all(feature = "std", any(not(target_family = "wasm"), target_feature = "atomics")))]
        if self.n_threads > 1 {
            let mut pool = self.pool.borrow_mut();
            if pool.as_ref().is_none_or(|p| p.requested() != self.n_threads) {
                *pool = Some(pool::ThreadPool::new(self.n_threads));
            }
            return f(&Exec { pool: pool.as_ref(), _life: core::marker::PhantomData });
        }
        f(&Exec::default())
    }

    /// A backend that times every node with `clock` (seconds, monotonic: `Instant` natively,
    /// `performance.now() / 1000` in a browser) and sums the times per op and node class;
    /// read them with [`CpuBackend::profile`]. Without a profiler a node costs one branch more.
    pub fn with_profiler(n_threads: usize, clock: fn() -> f64) -> CpuBackend {
        let mut b = CpuBackend::new(n_threads);
        b.profiler = Some(Profiler { clock, entries: RefCell::new(BTreeMap::new()) });
        b
    }

    /// Time per (node class, op) since the last [`CpuBackend::reset_profile`], the largest
    /// first; empty when the backend has no profiler.
    pub fn profile(&self) -> Vec<ProfileEntry> {
        let Some(p) = &self.profiler else { return Vec::new() };
        let mut v: Vec<ProfileEntry> = p.entries.borrow().values().cloned().collect();
        v.sort_by(|a, b| b.secs.partial_cmp(&a.secs).unwrap_or(core::cmp::Ordering::Equal));
        v
    }

    pub fn reset_profile(&self) {
        if let Some(p) = &self.profiler {
            p.entries.borrow_mut().clear();
        }
    }

    /// Computes one node (its sources must hold their data already).
    pub fn compute_node(&self, node: &Tensor) -> Result<(), BackendError> {
        self.with_exec(|exec| self.compute_node_on(node, exec))
    }

    fn compute_node_on(&self, node: &Tensor, exec: &Exec) -> Result<(), BackendError> {
        compute_forward(node, exec).map_err(|e| match e {
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
        self.with_exec(|exec| {
            if let Some(p) = &self.profiler {
                for node in &graph.nodes {
                    if node.op == Op::None || node.op.is_view() {
                        continue;
                    }
                    let t0 = (p.clock)();
                    self.compute_node_on(node, exec)?;
                    p.record(node, (p.clock)() - t0);
                }
                return Ok(());
            }
            for node in &graph.nodes {
                self.compute_node_on(node, exec)?;
            }
            Ok(())
        })
    }
    fn supports_op(&self, node: &Tensor) -> bool {
        supports(node) && reads_packed_as_it_may(node)
    }
    /// Its own host buffers and the repacking ones ([`repack_buffer`], ggml's extra buffer type).
    fn supports_buft(&self, buft: &dyn BufferType) -> bool {
        buft.name() == CpuBufferType.name() || buft.name() == repack_buffer::NAME
    }
}

/// Summed time of the nodes of one class running one op.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileEntry {
    /// The node's name without its layer prefix (`l3.qkv` → `qkv`), or `(OP)` when unnamed.
    pub class: String,
    pub op: &'static str,
    pub calls: u64,
    pub secs: f64,
}

struct Profiler {
    clock: fn() -> f64,
    entries: RefCell<BTreeMap<(String, &'static str), ProfileEntry>>,
}

impl Profiler {
    fn record(&self, node: &Tensor, secs: f64) {
        let op = node.op.name();
        let mut class = node_class(&node.name(), op);
        if node.name().is_empty() {
            // An unnamed node is told apart by its first source: `(MUL_MAT ffn_up.weight)`.
            if let Some(s) = node.src[0].as_ref().map(|s| s.name()).filter(|n| !n.is_empty()) {
                class = format!("({op} {})", node_class(&s, op));
            }
        }
        let key = (class, op);
        let mut entries = self.entries.borrow_mut();
        let e = entries.entry(key).or_insert_with_key(|(class, op)| ProfileEntry {
            class: class.clone(),
            op,
            calls: 0,
            secs: 0.0,
        });
        e.calls += 1;
        e.secs += secs;
    }
}

/// `l12.ffn_up_b` → `ffn_up_b`, `blk.3.ffn_up.weight` → `ffn_up.weight`; other names as
/// they are; `(OP)` for unnamed nodes.
fn node_class(name: &str, op: &str) -> String {
    if name.is_empty() {
        return format!("({op})");
    }
    if let Some(rest) = name.strip_prefix('l').or_else(|| name.strip_prefix("blk.")) {
        if let Some(dot) = rest.find('.') {
            if dot > 0 && rest[..dot].bytes().all(|b| b.is_ascii_digit()) {
                return String::from(&rest[dot + 1..]);
            }
        }
    }
    String::from(name)
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

fn compute_forward(node: &Tensor, exec: &Exec) -> Result<(), KernelError> {
    if node.op == Op::None || node.op.is_view() {
        return Ok(());
    }
    // Sources first: a missing input is the likelier mistake, and names that tensor.
    for (i, s) in node.src.iter().enumerate() {
        let Some(s) = s else { continue };
        if TensorView::of(s)?.packed && !may_read_packed(node, i) {
            return Err(KernelError::Unsupported(format!(
                "{} reads the repacked weight '{}' as src[{i}]",
                node.op.name(),
                s.name()
            )));
        }
    }
    let dst = TensorView::of(node)?;
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        // cpy's result is a view of src[1] with its shape and strides: writing dst writes b.
        Op::Cont | Op::Cpy => ops::dup(&src(node, 0)?, &dst, exec),
        Op::GetRows => ops::get_rows(&src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::Add => ops::binary(BinaryOp::Add, &src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::Mul => ops::binary(BinaryOp::Mul, &src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::Scale(s) => ops::scale(&src(node, 0)?, &dst, s, exec),
        Op::Norm { eps } => ops::norm(&src(node, 0)?, &dst, eps, exec),
        Op::Gelu => ops::gelu(&src(node, 0)?, &dst, exec),
        Op::SoftMax { scale, max_bias } => {
            let mask = match &node.src[1] {
                Some(m) => Some(TensorView::of(m)?),
                None => None,
            };
            ops::soft_max(&src(node, 0)?, mask.as_ref(), &dst, scale, max_bias, exec)
        }
        Op::DiagMaskInf { n_past } => ops::diag_mask_inf(&src(node, 0)?, &dst, n_past, exec),
        Op::MulMat => ops::mul_mat(&src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::OutProd => ops_backward::out_prod(&src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::SoftMaxBack { scale } => ops_backward::soft_max_back(&src(node, 0)?, &src(node, 1)?, &dst, scale, exec),
        Op::GeluBack => ops_backward::gelu_back(&src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::LogSoftMax => ops_backward::log_soft_max(&src(node, 0)?, &dst, exec),
        Op::LogSoftMaxBack => ops_backward::log_soft_max_back(&src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::NormBack { eps } => ops_backward::norm_back(&src(node, 0)?, &src(node, 1)?, &dst, eps, exec),
        Op::RepeatBack => ops_backward::repeat_back(&src(node, 0)?, &dst, exec),
        Op::GetRowsBack => ops_backward::get_rows_back(&src(node, 0)?, &src(node, 1)?, &dst, exec),
        Op::Acc { nb, offset } => ops_backward::acc(&src(node, 0)?, &src(node, 1)?, &dst, nb, offset),
        Op::DiagMaskZero { n_past } => ops_backward::diag_mask_zero(&src(node, 0)?, &dst, n_past, exec),
        Op::Fill(v) => ops_backward::fill(&dst, v, exec),
        Op::OptStepAdamw => ops_opt::adamw(&src(node, 0)?, &src(node, 1)?, &src(node, 2)?, &dst, exec),
        Op::OptStepSgd => ops_opt::sgd(&src(node, 0)?, &src(node, 1)?, &src(node, 2)?, &dst, exec),
    }
}

/// Only mul_mat's weights, get_rows' tables and out_prod's `a` are read in the repacked
/// layout ([`repack_buffer`]).
fn may_read_packed(node: &Tensor, i: usize) -> bool {
    i == 0 && matches!(node.op, Op::MulMat | Op::GetRows | Op::OutProd)
}

/// The repacking buffer's half of `supports_op`: no source in the packed layout (or a
/// partial view of one) where the op cannot read it.
fn reads_packed_as_it_may(node: &Tensor) -> bool {
    node.src.iter().enumerate().all(|(i, s)| {
        s.as_ref().is_none_or(|s| match repack_buffer::packed(s) {
            Ok(p) => !p || may_read_packed(node, i),
            Err(_) => false,
        })
    })
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
            src_is(0, &|a| crate::cpu::arch::cpu_traits(a).vec_dot.is_some())
                && src_is(1, &|b| matches!(b, F32 | F16 | BF16))
                && node.ty == F32
        }
        Op::OutProd => {
            src_is(0, &|a| matches!(a, F32 | F16 | BF16) || crate::quants::can_dequantize(a))
                && src_is(1, &|b| b == F32)
                && node.ty == F32
        }
        Op::SoftMaxBack { .. } | Op::GeluBack | Op::NormBack { .. } | Op::LogSoftMaxBack => {
            src_is(0, &readable) && src_is(1, &readable) && node.ty == F32
        }
        Op::LogSoftMax => src_is(0, &|a| a == F32) && node.ty == F32,
        Op::RepeatBack | Op::DiagMaskZero { .. } => src_is(0, &readable) && node.ty == F32,
        Op::GetRowsBack => src_is(0, &readable) && src_is(1, &|b| b == I32) && node.ty == F32,
        Op::Acc { .. } => src_is(0, &|a| a == F32) && src_is(1, &readable) && node.ty == F32,
        Op::Fill(_) => node.ty == F32,
        Op::OptStepAdamw | Op::OptStepSgd => (0..3).all(|i| src_is(i, &|t| t == F32)) && node.ty == F32,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_classes_drop_the_layer_prefix() {
        assert_eq!(super::node_class("l11.ffn_up_b", "ADD"), "ffn_up_b");
        assert_eq!(super::node_class("l0.kq", "MUL_MAT"), "kq");
        assert_eq!(super::node_class("inpL", "ADD"), "inpL");
        assert_eq!(super::node_class("lm.x", "ADD"), "lm.x");
        assert_eq!(super::node_class("", "MUL"), "(MUL)");
        assert_eq!(super::node_class("blk.10.ffn_up.weight", "MUL_MAT"), "ffn_up.weight");
    }
}

#[cfg(test)]
mod profile_tests {
    use core::sync::atomic::{AtomicU32, Ordering};

    use super::CpuBackend;
    use crate::backend::Backend;
    use crate::tensor::{Context, ContextParams};
    use crate::types::GgmlType::F32;
    use crate::Graph;

    static TICKS: AtomicU32 = AtomicU32::new(0);
    /// Every reading is one second after the previous one: each node takes 1 s.
    fn clock() -> f64 {
        TICKS.fetch_add(1, Ordering::Relaxed) as f64
    }

    #[test]
    fn profiler_sums_per_class_and_op() {
        let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: false });
        let w = ctx.new_tensor_2d(F32, 2, 2);
        w.set_name("blk.0.w");
        let x = ctx.new_tensor_2d(F32, 2, 1);
        w.set_f32_slice(&[1., 0., 0., 1.]);
        x.set_f32_slice(&[2., 3.]);
        let mut gf = Graph::new();
        let mut cur = x.clone();
        for il in 0..3 {
            cur = ctx.mul_mat(&w, &cur);
            cur.set_name(&alloc::format!("l{il}.proj"));
            cur = ctx.scale(&cur, 2.0);
        }
        cur = ctx.mul_mat(&w, &cur); // unnamed: known by its weight
        let t = ctx.transpose(&cur); // a view: not timed
        gf.build_forward_expand(&t);
        let b = CpuBackend::with_profiler(1, clock);
        b.graph_compute(&gf).unwrap();
        assert_eq!(cur.to_f32_vec(), [16., 24.]);
        // Sorted by time, ties in class order.
        let p = b.profile();
        let got: alloc::vec::Vec<(&str, &str, u64, f64)> =
            p.iter().map(|e| (e.class.as_str(), e.op, e.calls, e.secs)).collect();
        assert_eq!(
            got,
            [("(SCALE proj)", "SCALE", 3, 3.0), ("proj", "MUL_MAT", 3, 3.0), ("(MUL_MAT w)", "MUL_MAT", 1, 1.0)]
        );
        b.reset_profile();
        assert!(b.profile().is_empty());
        assert!(CpuBackend::new(1).profile().is_empty());
    }
}
