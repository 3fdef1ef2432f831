//! Graph-building ops: each records a node (or a view header) and computes nothing.
//!
//! ```
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType::F32;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
//! let w = ctx.new_tensor_2d(F32, 64, 192);    // [n_in, n_out]: a linear layer's weight
//! let x = ctx.new_tensor_2d(F32, 64, 5);      // [n_in, N]
//! let y = ctx.mul_mat(&w, &x);                // [n_out, N] = x · wᵀ
//! assert_eq!(y.ne, [192, 5, 1, 1]);
//! assert!(y.data().is_none());                // nothing computed, nothing allocated
//! ```
//!
//! Programmer errors (shapes that cannot combine) panic with the op and both shapes.

use alloc::format;
use alloc::string::String;

use crate::tensor::{contiguous_strides, shape_str, Context, Op, Tensor, MAX_DIMS};
use crate::types::GgmlType;

impl Context {
    // --- views: share the source's bytes ---

    fn view_impl(&self, a: &Tensor, ne: [i64; MAX_DIMS], nb: [usize; MAX_DIMS], offset: usize) -> Tensor {
        self.new_view_tensor(
            a,
            a.ty,
            ne,
            nb,
            offset,
            Op::View,
            [Some(a.clone()), None, None],
            format!("{} (view)", a.name()),
        )
    }

    /// ggml_view_1d: `ne0` elements starting `offset` bytes into `a`.
    pub fn view_1d(&self, a: &Tensor, ne0: i64, offset: usize) -> Tensor {
        let ne = [ne0, 1, 1, 1];
        self.view_impl(a, ne, contiguous_strides(a.ty, &ne), offset)
    }

    /// ggml_view_2d: rows of `ne0` elements, `nb1` bytes apart (the caller's stride).
    pub fn view_2d(&self, a: &Tensor, ne0: i64, ne1: i64, nb1: usize, offset: usize) -> Tensor {
        let ne = [ne0, ne1, 1, 1];
        let mut nb = contiguous_strides(a.ty, &ne);
        nb[1] = nb1;
        nb[2] = nb1 * ne1 as usize;
        nb[3] = nb[2];
        self.view_impl(a, ne, nb, offset)
    }

    /// ggml_view_3d.
    pub fn view_3d(&self, a: &Tensor, ne0: i64, ne1: i64, ne2: i64, nb1: usize, nb2: usize, offset: usize) -> Tensor {
        let ne = [ne0, ne1, ne2, 1];
        let mut nb = contiguous_strides(a.ty, &ne);
        nb[1] = nb1;
        nb[2] = nb2;
        nb[3] = nb2 * ne2 as usize;
        self.view_impl(a, ne, nb, offset)
    }

    /// ggml_view_4d.
    #[allow(clippy::too_many_arguments)]
    pub fn view_4d(
        &self,
        a: &Tensor,
        ne0: i64,
        ne1: i64,
        ne2: i64,
        ne3: i64,
        nb1: usize,
        nb2: usize,
        nb3: usize,
        offset: usize,
    ) -> Tensor {
        let ne = [ne0, ne1, ne2, ne3];
        let mut nb = contiguous_strides(a.ty, &ne);
        nb[1] = nb1;
        nb[2] = nb2;
        nb[3] = nb3;
        self.view_impl(a, ne, nb, offset)
    }

    /// ggml_view_tensor: the same shape and strides, sharing data.
    pub fn view_tensor(&self, a: &Tensor) -> Tensor {
        self.view_impl(a, a.ne, a.nb, 0)
    }

    /// ggml_reshape_*: new shape over the same bytes. `a` must be contiguous.
    pub fn reshape(&self, a: &Tensor, ne: &[i64]) -> Tensor {
        assert!(
            a.is_contiguous(),
            "reshape: {} is not contiguous; use cont first (reshape only reinterprets bytes)",
            shape_str(a)
        );
        let mut full = [1i64; MAX_DIMS];
        full[..ne.len()].copy_from_slice(ne);
        assert_eq!(
            full.iter().product::<i64>(),
            a.nelements(),
            "reshape: {} to ne={:?}: element counts differ",
            shape_str(a),
            full
        );
        let nb = contiguous_strides(a.ty, &full);
        self.new_view_tensor(
            a,
            a.ty,
            full,
            nb,
            0,
            Op::Reshape,
            [Some(a.clone()), None, None],
            format!("{} (reshaped)", a.name()),
        )
    }
    pub fn reshape_1d(&self, a: &Tensor, ne0: i64) -> Tensor {
        self.reshape(a, &[ne0])
    }
    pub fn reshape_2d(&self, a: &Tensor, ne0: i64, ne1: i64) -> Tensor {
        self.reshape(a, &[ne0, ne1])
    }
    pub fn reshape_3d(&self, a: &Tensor, ne0: i64, ne1: i64, ne2: i64) -> Tensor {
        self.reshape(a, &[ne0, ne1, ne2])
    }
    pub fn reshape_4d(&self, a: &Tensor, ne0: i64, ne1: i64, ne2: i64, ne3: i64) -> Tensor {
        self.reshape(a, &[ne0, ne1, ne2, ne3])
    }

    /// ggml_permute: dimension i of `a` goes to position `axis[i]`, ne and nb together.
    pub fn permute(&self, a: &Tensor, ax0: usize, ax1: usize, ax2: usize, ax3: usize) -> Tensor {
        let axes = [ax0, ax1, ax2, ax3];
        for (i, &x) in axes.iter().enumerate() {
            assert!(x < MAX_DIMS && !axes[..i].contains(&x), "permute: axes {axes:?} are not a permutation of 0..4");
        }
        let mut ne = [0i64; MAX_DIMS];
        let mut nb = [0usize; MAX_DIMS];
        for i in 0..MAX_DIMS {
            ne[axes[i]] = a.ne[i];
            nb[axes[i]] = a.nb[i];
        }
        self.new_view_tensor(
            a,
            a.ty,
            ne,
            nb,
            0,
            Op::Permute(axes),
            [Some(a.clone()), None, None],
            format!("{} (permuted)", a.name()),
        )
    }

    /// ggml_transpose: swaps dims 0 and 1 (strides only).
    pub fn transpose(&self, a: &Tensor) -> Tensor {
        let mut ne = a.ne;
        let mut nb = a.nb;
        ne.swap(0, 1);
        nb.swap(0, 1);
        self.new_view_tensor(
            a,
            a.ty,
            ne,
            nb,
            0,
            Op::Transpose,
            [Some(a.clone()), None, None],
            format!("{} (transposed)", a.name()),
        )
    }

    // --- copies ---

    /// ggml_cont: a contiguous copy with the same shape, filled when the graph runs.
    pub fn cont(&self, a: &Tensor) -> Tensor {
        self.cont_4d(a, a.ne[0], a.ne[1], a.ne[2], a.ne[3])
    }
    pub fn cont_2d(&self, a: &Tensor, ne0: i64, ne1: i64) -> Tensor {
        self.cont_4d(a, ne0, ne1, 1, 1)
    }
    pub fn cont_3d(&self, a: &Tensor, ne0: i64, ne1: i64, ne2: i64) -> Tensor {
        self.cont_4d(a, ne0, ne1, ne2, 1)
    }
    /// ggml_cont_4d: copy into a contiguous tensor of a new shape (copy + reshape in one).
    pub fn cont_4d(&self, a: &Tensor, ne0: i64, ne1: i64, ne2: i64, ne3: i64) -> Tensor {
        let ne = [ne0, ne1, ne2, ne3];
        assert_eq!(
            ne.iter().product::<i64>(),
            a.nelements(),
            "cont_4d: {} to ne={:?}: element counts differ",
            shape_str(a),
            ne
        );
        self.new_op_tensor(a.ty, ne, Op::Cont, [Some(a.clone()), None, None], format!("{} (cont)", a.name()))
    }

    /// ggml_cpy: copies (and converts) `a` into `b`'s memory. The result is a view of `b`;
    /// put it in the graph with `build_forward_expand` so the copy runs.
    pub fn cpy(&self, a: &Tensor, b: &Tensor) -> Tensor {
        assert_eq!(a.nelements(), b.nelements(), "cpy: {} into {}: element counts differ", shape_str(a), shape_str(b));
        self.new_view_tensor(
            b,
            b.ty,
            b.ne,
            b.nb,
            0,
            Op::Cpy,
            [Some(a.clone()), Some(b.clone()), None],
            format!("{} (copy of {})", b.name(), a.name()),
        )
    }

    // --- compute ops ---

    /// ggml_get_rows: rows `b[i]` of `a` (embedding lookup). `b` is I32; result F32
    /// [a.ne0, b.ne0, b.ne1, b.ne2].
    pub fn get_rows(&self, a: &Tensor, b: &Tensor) -> Tensor {
        assert_eq!(b.ty, GgmlType::I32, "get_rows: indices {} must be i32", shape_str(b));
        assert!(
            a.ne[2] == b.ne[1] || a.ne[2] == 1,
            "get_rows: {} with indices {}: ne[2] mismatch",
            shape_str(a),
            shape_str(b)
        );
        assert_eq!(b.ne[3], 1, "get_rows: indices {} have 4 dims", shape_str(b));
        let ty = if a.ty == GgmlType::I32 { GgmlType::I32 } else { GgmlType::F32 };
        self.new_op_tensor(
            ty,
            [a.ne[0], b.ne[0], b.ne[1], b.ne[2]],
            Op::GetRows,
            [Some(a.clone()), Some(b.clone()), None],
            String::new(),
        )
    }

    fn binary(&self, a: &Tensor, b: &Tensor, op: Op) -> Tensor {
        assert!(b.can_repeat(a), "{}: {} does not broadcast onto {}", op.name(), shape_str(b), shape_str(a));
        self.new_op_tensor(a.ty, a.ne, op, [Some(a.clone()), Some(b.clone()), None], String::new())
    }

    /// ggml_add: a + b, `b` broadcast along any dim where it has size 1 (or divides).
    pub fn add(&self, a: &Tensor, b: &Tensor) -> Tensor {
        self.binary(a, b, Op::Add)
    }
    /// ggml_mul: a ⊙ b, with the same broadcasting as `add`.
    pub fn mul(&self, a: &Tensor, b: &Tensor) -> Tensor {
        self.binary(a, b, Op::Mul)
    }

    fn unary(&self, a: &Tensor, op: Op) -> Tensor {
        self.new_op_tensor(a.ty, a.ne, op, [Some(a.clone()), None, None], String::new())
    }

    /// ggml_scale: a * s.
    pub fn scale(&self, a: &Tensor, s: f32) -> Tensor {
        self.unary(a, Op::Scale(s))
    }
    /// ggml_norm: per row, (x - mean) / sqrt(var + eps). No weight or bias (mul/add them).
    pub fn norm(&self, a: &Tensor, eps: f32) -> Tensor {
        self.unary(a, Op::Norm { eps })
    }
    /// ggml_gelu in its tanh form, evaluated in f32 (no lookup table).
    pub fn gelu(&self, a: &Tensor) -> Tensor {
        self.unary(a, Op::Gelu)
    }
    /// ggml_diag_mask_inf: entries above the causal diagonal (i0 > n_past + i1) become -inf.
    pub fn diag_mask_inf(&self, a: &Tensor, n_past: i32) -> Tensor {
        self.unary(a, Op::DiagMaskInf { n_past })
    }
    /// ggml_soft_max: softmax over dim 0.
    pub fn soft_max(&self, a: &Tensor) -> Tensor {
        self.soft_max_ext(a, None, 1.0, 0.0)
    }
    /// ggml_soft_max_ext: softmax(a * scale + mask) over dim 0. `mask` (F32 or F16) has
    /// ne0 = a.ne0 and at least a.ne1 rows; it broadcasts over dims 2 and 3.
    pub fn soft_max_ext(&self, a: &Tensor, mask: Option<&Tensor>, scale: f32, max_bias: f32) -> Tensor {
        if let Some(m) = mask {
            assert!(
                m.ne[0] == a.ne[0] && m.ne[1] >= a.ne[1] && a.ne[2] % m.ne[2] == 0 && a.ne[3] % m.ne[3] == 0,
                "soft_max_ext: mask {} does not fit {}",
                shape_str(m),
                shape_str(a)
            );
            assert!(
                matches!(m.ty, GgmlType::F32 | GgmlType::F16),
                "soft_max_ext: mask {} must be f32 or f16",
                shape_str(m)
            );
        }
        self.new_op_tensor(
            a.ty,
            a.ne,
            Op::SoftMax { scale, max_bias },
            [Some(a.clone()), mask.cloned(), None],
            String::new(),
        )
    }

    /// ggml_mul_mat: c[m, n] = row m of `a` · row n of `b`, i.e. c = b · aᵀ, with `a`
    /// broadcast over dims 2 and 3. a: [K, M, ..], b: [K, N, ..] → c: [M, N, ..] (F32).
    pub fn mul_mat(&self, a: &Tensor, b: &Tensor) -> Tensor {
        assert!(
            a.ne[0] == b.ne[0] && b.ne[2] % a.ne[2] == 0 && b.ne[3] % a.ne[3] == 0,
            "mul_mat: cannot multiply a = {} by b = {} (need a.ne0 == b.ne0 and b.ne2, b.ne3 multiples of a's)",
            shape_str(a),
            shape_str(b)
        );
        assert!(
            !a.is_transposed(),
            "mul_mat: a = {} is transposed (nb[0] > nb[1]); make it contiguous with cont first (b = {})",
            shape_str(a),
            shape_str(b)
        );
        self.new_op_tensor(
            GgmlType::F32,
            [a.ne[1], b.ne[1], b.ne[2], b.ne[3]],
            Op::MulMat,
            [Some(a.clone()), Some(b.clone()), None],
            String::new(),
        )
    }

    // --- ops of backward passes (crate::backward): f32 results ---

    /// ggml_out_prod: dst[i0, i1, i2, i3] = Σ_j a[i0, j, i2', i3'] · b[i1, j, i2, i3], `a`
    /// broadcast over dims 2 and 3 as in `mul_mat`. a: [n, J, ..] of any weight type (rows
    /// packed), b: [m, J, ..] f32 → [n, m, ..]. For c = mul_mat(w, x) with upstream gradient
    /// g: dw = out_prod(x, g), dx = out_prod(w, transpose(g)).
    pub fn out_prod(&self, a: &Tensor, b: &Tensor) -> Tensor {
        assert!(
            a.ne[1] == b.ne[1] && b.ne[2] % a.ne[2] == 0 && b.ne[3] % a.ne[3] == 0,
            "out_prod: a = {} and b = {} (need a.ne1 == b.ne1 and b.ne2, b.ne3 multiples of a's)",
            shape_str(a),
            shape_str(b)
        );
        assert!(
            a.nb[0] == a.ty.type_size() && b.ty == GgmlType::F32,
            "out_prod: a = {} needs packed rows and b = {} must be f32",
            shape_str(a),
            shape_str(b)
        );
        self.new_op_tensor(
            GgmlType::F32,
            [a.ne[0], b.ne[0], b.ne[2], b.ne[3]],
            Op::OutProd,
            [Some(a.clone()), Some(b.clone()), None],
            String::new(),
        )
    }

    fn backward_pair(&self, dy: &Tensor, x: &Tensor, op: Op) -> Tensor {
        assert!(
            dy.ne == x.ne && dy.ty == GgmlType::F32,
            "{}: gradient {} does not match {}",
            op.name(),
            shape_str(dy),
            shape_str(x)
        );
        self.new_op_tensor(GgmlType::F32, x.ne, op, [Some(dy.clone()), Some(x.clone()), None], String::new())
    }

    /// ggml_soft_max_ext_back: the gradient of `x` in y = soft_max_ext(x, mask, scale, 0),
    /// from `dy` and the forward result `y`.
    pub fn soft_max_ext_back(&self, dy: &Tensor, y: &Tensor, scale: f32) -> Tensor {
        self.backward_pair(dy, y, Op::SoftMaxBack { scale })
    }
    /// log(softmax(a)) along dim 0 (f32; the row sums in f64): a gradient run's `logprob` and
    /// `loss` metrics. Not ggml's (it has `cross_entropy_loss`, which sums the rows into one value).
    pub fn log_soft_max(&self, a: &Tensor) -> Tensor {
        assert!(a.ty == GgmlType::F32, "log_soft_max: {} must be f32", shape_str(a));
        self.new_op_tensor(GgmlType::F32, a.ne, Op::LogSoftMax, [Some(a.clone()), None, None], String::new())
    }
    /// The gradient of `x` in y = log_soft_max(x), from `dy` and `y`.
    pub fn log_soft_max_back(&self, dy: &Tensor, y: &Tensor) -> Tensor {
        self.backward_pair(dy, y, Op::LogSoftMaxBack)
    }
    /// The gradient of `x` in gelu(x), from `dy` and `x`.
    pub fn gelu_back(&self, dy: &Tensor, x: &Tensor) -> Tensor {
        self.backward_pair(dy, x, Op::GeluBack)
    }
    /// The gradient of `x` in norm(x, eps), from `dy` and `x` (ggml has rms_norm_back; this
    /// is layer norm's, the mean taken out as well).
    pub fn norm_back(&self, dy: &Tensor, x: &Tensor, eps: f32) -> Tensor {
        self.backward_pair(dy, x, Op::NormBack { eps })
    }

    /// ggml_repeat_back: `a` summed into a tensor of `like`'s shape (which must repeat onto `a`).
    pub fn repeat_back(&self, a: &Tensor, like: &Tensor) -> Tensor {
        assert!(like.can_repeat(a), "repeat_back: {} does not repeat onto {}", shape_str(like), shape_str(a));
        self.new_op_tensor(GgmlType::F32, like.ne, Op::RepeatBack, [Some(a.clone()), None, None], String::new())
    }

    /// ggml_get_rows_back: the gradient of the table `like` in get_rows(like, idx) from the
    /// gradient `a` of its result: zeros of `like`'s shape, row `a[:, i]` added into row `idx[i]`.
    pub fn get_rows_back(&self, a: &Tensor, idx: &Tensor, like: &Tensor) -> Tensor {
        assert!(
            idx.ty == GgmlType::I32
                && a.ne[0] == like.ne[0]
                && a.ne[1] == idx.ne[0]
                && a.nrows() == a.ne[1]
                && idx.nrows() == 1
                && like.nrows() == like.ne[1],
            "get_rows_back: gradient {} with indices {} onto table {} (one index per row, 2-D table)",
            shape_str(a),
            shape_str(idx),
            shape_str(like)
        );
        self.new_op_tensor(
            GgmlType::F32,
            [like.ne[0], like.ne[1], 1, 1],
            Op::GetRowsBack,
            [Some(a.clone()), Some(idx.clone()), None],
            String::new(),
        )
    }

    /// ggml_acc: a copy of `a` (f32, contiguous) with `b` added into its view of shape
    /// `b.ne`, byte strides `nb` (dims 1..3; dim 0 packed) at byte `offset`.
    pub fn acc(&self, a: &Tensor, b: &Tensor, nb: [usize; 3], offset: usize) -> Tensor {
        let f = GgmlType::F32.type_size();
        let span = (0..3).map(|i| (b.ne[i + 1].max(1) as usize - 1) * nb[i]).sum::<usize>() + b.ne[0] as usize * f;
        assert!(
            a.ty == GgmlType::F32 && a.is_contiguous() && offset + span <= a.nbytes() && b.nelements() > 0,
            "acc: {} into {} at offset {offset}, strides {nb:?}: out of bounds or not f32",
            shape_str(b),
            shape_str(a)
        );
        self.new_op_tensor(
            GgmlType::F32,
            a.ne,
            Op::Acc { nb, offset },
            [Some(a.clone()), Some(b.clone()), None],
            String::new(),
        )
    }

    /// diag_mask_inf's backward: entries above the causal diagonal (i0 > n_past + i1) become 0.
    pub fn diag_mask_zero(&self, a: &Tensor, n_past: i32) -> Tensor {
        self.unary(a, Op::DiagMaskZero { n_past })
    }

    /// ggml_opt_step_adamw: `a` (an f32 param) updated in place by AdamW from `state`
    /// (`[n, 3]`: its gradient, zeroed by the step, m and v, updated) and the hyper-parameters `params`
    /// (see [`Op::OptStepAdamw`]); the result is a view of `a`.
    pub fn opt_step_adamw(&self, a: &Tensor, state: &Tensor, params: &Tensor) -> Tensor {
        self.opt_step(a, state, params, &[3], 8, Op::OptStepAdamw)
    }
    /// ggml_opt_step_sgd: `a` updated in place by SGD from `state` (`[n, 2]`: its gradient and
    /// momentum buffer; `[n, 1]` without momentum) and `params` (see [`Op::OptStepSgd`]); the
    /// result is a view of `a`.
    pub fn opt_step_sgd(&self, a: &Tensor, state: &Tensor, params: &Tensor) -> Tensor {
        self.opt_step(a, state, params, &[1, 2], 5, Op::OptStepSgd)
    }
    fn opt_step(&self, a: &Tensor, state: &Tensor, params: &Tensor, rows: &[i64], n_params: i64, op: Op) -> Tensor {
        assert!(
            a.ty == GgmlType::F32
                && state.ty == GgmlType::F32
                && a.is_contiguous()
                && rows.iter().any(|r| state.nelements() == r * a.nelements())
                && params.ty == GgmlType::F32
                && params.nelements() >= n_params,
            "{}: param {}, state {}, parameters {} (f32; state of {rows:?} rows of the param's size; {n_params} parameters)",
            op.name(),
            shape_str(a),
            shape_str(state),
            shape_str(params)
        );
        self.new_view_tensor(
            a,
            a.ty,
            a.ne,
            a.nb,
            0,
            op,
            [Some(a.clone()), Some(state.clone()), Some(params.clone())],
            format!("{} (step)", a.name()),
        )
    }

    /// An f32 tensor of shape `ne` with every element `v` (computed when the graph runs).
    pub fn fill(&self, ne: [i64; MAX_DIMS], v: f32) -> Tensor {
        self.new_op_tensor(GgmlType::F32, ne, Op::Fill(v), [None, None, None], String::new())
    }
}
