//! The backward pass (ggml_build_backward_expand): gradient nodes appended to a forward graph.
//!
//! ```
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType::F32;
//! use ggweb::Graph;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: false });
//! let x = ctx.new_tensor_1d(F32, 3);
//! x.set_f32_slice(&[1., 2., 3.]);
//! x.set_param();                                     // ggml_set_param: d loss / d x wanted
//! let loss = ctx.mul(&ctx.scale(&x, 2.0), &x);       // 2x², element by element
//! let mut gf = Graph::new();
//! gf.build_forward_expand(&loss);
//! gf.build_backward_expand(&ctx, &loss);             // the seed: d loss = 1 everywhere
//! ggweb::cpu::compute_graph(&gf, 1).unwrap();
//! assert_eq!(gf.grad(&x).unwrap().to_f32_vec(), [4., 8., 12.]);  // 4x
//! ```
//!
//! Gradients are ordinary nodes: the graph allocator plans them with the forward
//! activations, which stay alive because the backward nodes read them. A tensor that feeds
//! several consumers gets the sum of their contributions (`add` nodes; a view's
//! contributions go into one `acc` chain over the viewed tensor's gradient). Each
//! gradient is named `<name>.grad` after its tensor (`<name>.grad.part` for an
//! accumulation's earlier terms); the params' gradients are marked outputs.
//!
//! The KV cache: a `cpy` of `x` into a view of a cache `c` makes `c`'s later readers depend
//! on `x` through memory rather than sources. The pass follows that edge: the cache gets a
//! gradient from its views read after the copy, and the copy hands `x` the part of it over
//! the cells it wrote. (Reads of `c` *before* the copy would see the old cells; the
//! gradient does not tell them apart — GPT-2's graph reads the cache only after its copies.)

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::vec::Vec;

use crate::graph::Graph;
use crate::tensor::{shape_str, Context, Op, Tensor, MAX_DIMS};
use crate::types::GgmlType;

impl Graph {
    /// ggml_build_backward_expand: appends to this graph the nodes that compute the gradient
    /// of `loss` (seeded with ones, so a non-scalar loss means the sum of its elements) with
    /// respect to every tensor flagged by [`Tensor::set_param`] and every node between them
    /// and the loss; read them with [`Graph::grad`]. `loss` must be in the graph; new tensors
    /// are made in `ctx` (its budget must hold about three headers per forward node). Forward
    /// nodes are not changed. Call it once, after the forward graph is complete.
    ///
    /// Panics (a programmer error, naming the shapes) on an op with no backward: ALiBi
    /// softmax, a view of a non-contiguous or quantized tensor that needs a gradient,
    /// get_rows with indices of more than one dimension, or a backward op itself.
    pub fn build_backward_expand(&mut self, ctx: &Context, loss: &Tensor) {
        self.build_backward_expand_seeded(ctx, loss, None)
    }

    /// [`Graph::build_backward_expand`] with `seed` (a tensor of `loss`'s shape, made in
    /// `ctx`) as the gradient of `loss` instead of ones: the gradient of Σ seed ⊙ loss, seed
    /// held constant. Training's loss is Σ w ⊙ log_softmax(logits) with w a constant input:
    /// seeding log_softmax with w leaves out the product and its backward (a `fill` and a
    /// `mul`, each a pass over `n_vocab` × tokens), with the same values (w · 1 is w).
    pub fn build_backward_expand_seeded(&mut self, ctx: &Context, loss: &Tensor, seed: Option<&Tensor>) {
        assert!(self.contains(loss), "build_backward_expand: the loss {} is not in the graph", shape_str(loss));
        loss.set_loss();
        let fwd: Vec<Tensor> = self.nodes.clone();
        let mut b = Backward {
            ctx,
            needs: BTreeSet::new(),
            grads: BTreeMap::new(),
            made: Vec::new(),
            is_grad: BTreeSet::new(),
        };
        for n in &fwd {
            if n.is_param() || n.src.iter().flatten().any(|s| b.needs(s)) {
                b.needs.insert(n.id());
            }
            // A copy into a cache makes the cache (and its later views) depend on the source.
            if n.op == Op::Cpy && n.src[0].as_ref().is_some_and(|s| b.needs(s)) {
                if let Some(root) = &n.view_src {
                    b.needs.insert(root.id());
                }
            }
        }
        if !b.needs(loss) {
            return; // no param on any path to the loss: nothing to differentiate
        }
        let seed = match seed {
            Some(s) => {
                assert!(s.ne == loss.ne, "build_backward_expand: seed {} for loss {}", shape_str(s), shape_str(loss));
                // A view carries the gradient's name; the seed keeps its own.
                ctx.view_tensor(s)
            }
            None => ctx.fill(loss.ne, 1.0),
        };
        b.set(loss, seed);
        for n in fwd.iter().rev() {
            if n.op == Op::Cpy {
                b.cpy_from_cache(n);
            }
            if let Some(g) = b.grads.get(&n.id()).cloned() {
                b.node(n, &g);
            }
        }
        let params: Vec<Tensor> = self.nodes.iter().chain(&self.leafs).filter(|t| t.is_param()).cloned().collect();
        for p in &params {
            if let Some(g) = b.grads.get(&p.id()) {
                g.set_output();
            }
        }
        // The forward graph's size bounds the forward; the backward adds what it made (each
        // gradient with the views and copies it reads, counted as they are expanded).
        let size = self.size;
        self.size = usize::MAX;
        for t in &b.made {
            self.build_forward_expand(t);
        }
        self.size = size.max(self.nodes.len()).max(self.leafs.len());
        self.grads = b.grads;
    }
}

struct Backward<'a> {
    ctx: &'a Context,
    /// Ids of the tensors between a param and the loss (params included).
    needs: BTreeSet<usize>,
    grads: BTreeMap<usize, Tensor>,
    /// Every gradient tensor made, in order (the graph expands them all).
    made: Vec<Tensor>,
    /// Ids of the tensors that are some tensor's gradient.
    is_grad: BTreeSet<usize>,
}

impl Backward<'_> {
    fn needs(&self, t: &Tensor) -> bool {
        t.is_param() || self.needs.contains(&t.id())
    }

    /// Makes `g` the gradient of `t` (replacing any), named after it.
    fn set(&mut self, t: &Tensor, g: Tensor) {
        assert_eq!(g.ne, t.ne, "backward: gradient {} for {}", shape_str(&g), shape_str(t));
        // A gradient passed through unchanged (add's) gets a view of its own to carry the name.
        let g = if self.is_grad.contains(&g.id()) { self.ctx.view_tensor(&g) } else { g };
        self.is_grad.insert(g.id());
        let name = t.name();
        g.set_name(&if name.is_empty() { format!("(grad of {})", t.op.name()) } else { format!("{name}.grad") });
        self.made.push(g.clone());
        self.grads.insert(t.id(), g);
    }

    /// Adds `g` to the gradient of `t`, when `t` needs one.
    fn add(&mut self, t: &Tensor, g: Tensor) {
        if !self.needs(t) {
            return;
        }
        let g = match self.grads.remove(&t.id()) {
            Some(prev) => {
                prev.set_name(&format!("{}.part", prev.name()));
                self.ctx.add(&prev, &g)
            }
            None => g,
        };
        self.set(t, g);
    }

    /// `g` (of any layout) as a tensor of `like`'s shape, in logical element order.
    fn reshape_like(&self, g: &Tensor, like: &Tensor) -> Tensor {
        if g.is_contiguous() {
            self.ctx.reshape(g, &like.ne)
        } else {
            self.ctx.cont_4d(g, like.ne[0], like.ne[1], like.ne[2], like.ne[3])
        }
    }

    /// Byte offset of view `v` inside its direct source `a`, and the factor from `a`'s
    /// element size to an f32 gradient's.
    fn view_geometry(v: &Tensor, a: &Tensor) -> (usize, usize, usize) {
        let offs = v.view_offs - if a.view_src.is_some() { a.view_offs } else { 0 };
        let ts = a.ty.type_size();
        assert!(
            !a.ty.is_quantized() && a.is_contiguous() && v.nb[0] == ts && offs.is_multiple_of(ts),
            "backward of view {} of {}: the viewed tensor must be a contiguous float tensor, the view's rows packed",
            shape_str(v),
            shape_str(a)
        );
        (offs, ts, GgmlType::F32.type_size())
    }

    /// The gradient `g` of view `v` added into the gradient of its source `a` (an `acc` over
    /// `a`'s gradient so far, or over zeros).
    fn view_back(&mut self, v: &Tensor, a: &Tensor, g: &Tensor) {
        if !self.needs(a) {
            return;
        }
        let (offs, ts, f) = Self::view_geometry(v, a);
        let nb = [v.nb[1] / ts * f, v.nb[2] / ts * f, v.nb[3] / ts * f];
        let base = match self.grads.remove(&a.id()) {
            Some(prev) if prev.is_contiguous() => {
                prev.set_name(&format!("{}.part", prev.name()));
                prev
            }
            Some(prev) => {
                prev.set_name(&format!("{}.part", prev.name()));
                self.ctx.cont(&prev)
            }
            None => self.ctx.fill(a.ne, 0.0),
        };
        let acc = self.ctx.acc(&base, g, nb, offs / ts * f);
        self.set(a, acc);
    }

    /// A `cpy` of `x` into a view of a cache whose gradient is known: `x` gets the part of
    /// the cache's gradient over the cells the copy wrote.
    fn cpy_from_cache(&mut self, n: &Tensor) {
        let (Some(x), Some(root)) = (n.src[0].clone(), n.view_src.clone()) else { return };
        let Some(gc) = self.grads.get(&root.id()).cloned() else { return };
        if !self.needs(&x) {
            return;
        }
        let (offs, ts, f) = Self::view_geometry(n, &root);
        let nb = n.nb.map(|b| b / ts * f);
        let region = self.ctx.view_4d(&gc, n.ne[0], n.ne[1], n.ne[2], n.ne[3], nb[1], nb[2], nb[3], offs / ts * f);
        let g = self.ctx.cont_4d(&region, x.ne[0], x.ne[1], x.ne[2], x.ne[3]);
        self.add(&x, g);
    }

    /// `g` ([.., .., a.ne2·r2, a.ne3·r3], mul_mat's batches) summed over the batches that
    /// share one matrix of `a`: mul_mat broadcasts batch i02 of `a` to batches
    /// i02·r2 .. i02·r2 + r2 − 1 (consecutive, not modulo as repeat's broadcasting).
    fn sum_broadcast(&self, g: Tensor, a: &Tensor) -> Tensor {
        let ctx = self.ctx;
        let mut g = g;
        let rows = g.ne[0] * g.ne[1];
        let r2 = g.ne[2] / a.ne[2];
        if r2 > 1 {
            let v = ctx.reshape_4d(&g, rows, r2, a.ne[2], g.ne[3]);
            let like = ctx.new_tensor_4d(GgmlType::F32, rows, 1, a.ne[2], g.ne[3]);
            g = ctx.reshape_4d(&ctx.repeat_back(&v, &like), g.ne[0], g.ne[1], a.ne[2], g.ne[3]);
        }
        let r3 = g.ne[3] / a.ne[3];
        if r3 > 1 {
            let v = ctx.reshape_4d(&g, rows * g.ne[2], r3, a.ne[3], 1);
            let like = ctx.new_tensor_4d(GgmlType::F32, rows * g.ne[2], 1, a.ne[3], 1);
            g = ctx.reshape_4d(&ctx.repeat_back(&v, &like), g.ne[0], g.ne[1], g.ne[2], a.ne[3]);
        }
        g
    }

    /// ggml_compute_backward: the contributions of node `n` (gradient `g`) to its sources'.
    fn node(&mut self, n: &Tensor, g: &Tensor) {
        let ctx = self.ctx;
        let s = |i: usize| n.src[i].clone();
        let needs = |t: &Option<Tensor>| t.as_ref().is_some_and(|t| self.needs(t));
        match n.op {
            Op::None => {}
            Op::Add | Op::Mul => {
                let (a, b) = (s(0).expect("src0"), s(1).expect("src1"));
                if self.needs(&a) {
                    let ga = if n.op == Op::Add { g.clone() } else { ctx.mul(g, &b) };
                    self.add(&a, ga);
                }
                if self.needs(&b) {
                    let gb = if n.op == Op::Add { g.clone() } else { ctx.mul(g, &a) };
                    let gb = if b.ne == n.ne { gb } else { ctx.repeat_back(&gb, &b) };
                    self.add(&b, gb);
                }
            }
            Op::Scale(k) => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    self.add(&a, ctx.scale(g, k));
                }
            }
            Op::Norm { eps } => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    self.add(&a, ctx.norm_back(g, &a, eps));
                }
            }
            Op::Gelu => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    self.add(&a, ctx.gelu_back(g, &a));
                }
            }
            Op::SoftMax { scale, max_bias } => {
                assert!(
                    max_bias == 0.0,
                    "backward of soft_max_ext {}: ALiBi (max_bias {max_bias}) has none",
                    shape_str(n)
                );
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    self.add(&a, ctx.soft_max_ext_back(g, n, scale));
                }
                if let Some(m) = s(1).filter(|m| self.needs(m)) {
                    // The mask enters unscaled: its gradient is dz, summed where it broadcasts.
                    let dz = ctx.soft_max_ext_back(g, n, 1.0);
                    assert!(m.ne[1] == n.ne[1], "backward of soft_max_ext: mask {} has extra rows", shape_str(&m));
                    let gm = if m.ne == n.ne { dz } else { ctx.repeat_back(&dz, &m) };
                    self.add(&m, gm);
                }
            }
            Op::LogSoftMax => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    self.add(&a, ctx.log_soft_max_back(g, n));
                }
            }
            Op::DiagMaskInf { n_past } => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    self.add(&a, ctx.diag_mask_zero(g, n_past));
                }
            }
            Op::MulMat => {
                // c = mul_mat(a, b): dc[m, n] = Σ_k a[k, m] b[k, n].
                let (a, b) = (s(0).expect("src0"), s(1).expect("src1"));
                if self.needs(&a) {
                    // da[k, m] = Σ_n b[k, n] g[m, n], summed over the batches that shared a.
                    let bb = if b.nb[0] == b.ty.type_size() { b.clone() } else { ctx.cont(&b) };
                    let ga = ctx.out_prod(&bb, g);
                    let ga = self.sum_broadcast(ga, &a);
                    self.add(&a, ga);
                }
                if self.needs(&b) {
                    // db[k, n] = Σ_m a[k, m] g[m, n]: a's rows read whole, any weight type. For
                    // dot products (one row of f32 a against one column of b per batch, a
                    // metric's) that is a scaled by g: a broadcast mul, not an out_prod.
                    let dot = a.ty == GgmlType::F32 && a.ne[1] == 1 && b.ne[1] == 1 && a.ne[2..] == b.ne[2..];
                    let gb = if dot { ctx.mul(&a, g) } else { ctx.out_prod(&a, &ctx.transpose(g)) };
                    self.add(&b, gb);
                }
            }
            Op::Cont | Op::Reshape => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    let ga = self.reshape_like(g, &a);
                    self.add(&a, ga);
                }
            }
            Op::Cpy => {
                // The result's own readers (a cpy read as a tensor): logical order, as cont.
                let x = s(0).expect("src0");
                if self.needs(&x) {
                    let gx = self.reshape_like(g, &x);
                    self.add(&x, gx);
                }
            }
            Op::Transpose => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    self.add(&a, ctx.transpose(g));
                }
            }
            Op::Permute(axes) => {
                let a = s(0).expect("src0");
                if self.needs(&a) {
                    let mut inv = [0usize; MAX_DIMS];
                    for (i, &ax) in axes.iter().enumerate() {
                        inv[ax] = i;
                    }
                    self.add(&a, ctx.permute(g, inv[0], inv[1], inv[2], inv[3]));
                }
            }
            Op::View => {
                let a = s(0).expect("src0");
                self.view_back(n, &a, g);
            }
            Op::GetRows => {
                let (a, idx) = (s(0).expect("src0"), s(1).expect("src1"));
                if self.needs(&a) {
                    self.add(&a, ctx.get_rows_back(g, &idx, &a));
                }
            }
            Op::OutProd
            | Op::SoftMaxBack { .. }
            | Op::GeluBack
            | Op::LogSoftMaxBack
            | Op::NormBack { .. }
            | Op::RepeatBack
            | Op::GetRowsBack
            | Op::Acc { .. }
            | Op::DiagMaskZero { .. }
            | Op::Fill(_)
            | Op::OptStepAdamw
            | Op::OptStepSgd => {
                if needs(&s(0)) || needs(&s(1)) {
                    panic!("backward: {} is itself a backward op (no second derivatives)", shape_str(n));
                }
            }
        }
    }
}
