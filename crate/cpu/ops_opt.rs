//! Kernels of the optimizer steps (ggml's `opt_step_adamw` / `opt_step_sgd`, ggml-cpu's
//! ops.cpp): each updates a parameter in place from its gradient and optimizer state, one
//! element at a time in f32, in PyTorch's order of operations (`torch.optim.AdamW` and
//! `torch.optim.SGD`, single-tensor path), so training matches PyTorch's to float rounding.
//! Elements are independent: results do not depend on the thread count. Each step consumes
//! the gradient row of the state: it is zero afterwards, ready for the next batch's
//! accumulation (ggml-opt resets its gradients the same way between steps).

use alloc::format;

use super::ops::{par_rows, unsupported, Exec, KResult, KernelError, TensorView};
use crate::types::GgmlType;

/// Elements per job.
const CHUNK: usize = 4096;

/// f32 square root, correctly rounded either way: with std it is LLVM's `sqrt`, which
/// vectorizes (SSE2's sqrtps, SIMD128's f32x4.sqrt); libm's is inline assembly on x86.
#[inline(always)]
fn sqrt(x: f32) -> f32 {
    #[cfg(feature = "std")]
    return x.sqrt();
    #[cfg(not(feature = "std"))]
    return libm::sqrtf(x);
}

/// The optimizer's hyper-parameters (src2, f32) as a slice.
fn hyper(p: &TensorView, n: usize) -> Result<&[f32], KernelError> {
    if p.ty != GgmlType::F32 || p.nelements() < n || !p.is_contiguous() {
        return Err(KernelError::Invalid(format!("optimizer parameters: {} f32 values wanted, ne {:?}", n, p.ne)));
    }
    // SAFETY: a contiguous f32 tensor of at least n elements.
    Ok(unsafe { core::slice::from_raw_parts(p.ptr as *const f32, n) })
}

/// The param (dst's memory, which src0's is) and its state `[n, rows]` as f32 pointers.
fn operands(
    a: &TensorView,
    state: &TensorView,
    dst: &TensorView,
    rows: usize,
) -> Result<(*mut f32, *mut f32, usize), KernelError> {
    let n = a.nelements();
    if a.ty != GgmlType::F32 || state.ty != GgmlType::F32 || dst.ty != GgmlType::F32 {
        return unsupported(format!("optimizer step over {} (param), {} (state): f32 only", a.ty, state.ty));
    }
    if !a.is_contiguous() || !state.is_contiguous() || state.nelements() != rows * n || dst.ptr != a.ptr {
        return Err(KernelError::Invalid(format!(
            "optimizer step: param ne {:?}, state ne {:?} (want {rows} contiguous rows of {n}), result in place",
            a.ne, state.ne
        )));
    }
    Ok((a.ptr as *mut f32, state.ptr as *mut f32, n))
}

/// Raw pointers shared by the jobs, each of which touches its own element range.
#[derive(Clone, Copy)]
struct Ptrs(*mut f32, *mut f32);
// SAFETY: jobs write disjoint elements.
unsafe impl Send for Ptrs {}
unsafe impl Sync for Ptrs {}
impl Ptrs {
    /// Both pointers (a method, so closures capture the `Sync` pair rather than its fields).
    fn get(self) -> (*mut f32, *mut f32) {
        (self.0, self.1)
    }
}

/// opt_step_adamw: src1 = [gradient | m | v] (`[n, 3]`), src2 = [lr, beta1, beta2, eps,
/// weight decay, 1 − beta1^t, sqrt(1 − beta2^t), gradient scale]. PyTorch's AdamW:
/// p ← p·(1 − lr·wd); m ← m + (g − m)(1 − β1); v ← β2·v + (1 − β2)·g²;
/// p ← p − (lr / bc1) · m / (√v / √bc2 + eps), with g the gradient times its scale (clipping).
pub(crate) fn adamw(a: &TensorView, state: &TensorView, params: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    let (p, s, n) = operands(a, state, dst, 3)?;
    let h = hyper(params, 8)?;
    let (lr, b1, b2, eps, wd, bc1, bc2_sqrt, gscale) = (h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    let (decay, step_size) = (1.0 - lr * wd, lr / bc1);
    let ptrs = Ptrs(p, s);
    par_rows(exec, n.div_ceil(CHUNK), CHUNK, &|jobs| {
        let (p, s) = ptrs.get();
        let (i0, i1) = (jobs.start * CHUNK, (jobs.end * CHUNK).min(n));
        let len = i1 - i0;
        // SAFETY: i0..i1 lies below n; p has n elements, s 3n; this job's range only, and the
        // four slices are disjoint (p is not s's memory: `operands` checked dst is a, not state).
        let (w, g, m, v) = unsafe {
            (
                core::slice::from_raw_parts_mut(p.add(i0), len),
                core::slice::from_raw_parts_mut(s.add(i0), len),
                core::slice::from_raw_parts_mut(s.add(n + i0), len),
                core::slice::from_raw_parts_mut(s.add(2 * n + i0), len),
            )
        };
        // Slices, not pointers, and a sqrt LLVM knows: the loop vectorizes (sqrt and division
        // are correctly rounded in every lane, so the results are the scalar loop's bits).
        for (((w, g), m), v) in w.iter_mut().zip(g.iter_mut()).zip(m.iter_mut()).zip(v.iter_mut()) {
            let gi = *g * gscale;
            *g = 0.0;
            *w *= decay;
            *m += (gi - *m) * (1.0 - b1);
            *v = *v * b2 + (1.0 - b2) * gi * gi;
            let denom = sqrt(*v) / bc2_sqrt + eps;
            *w -= step_size * (*m / denom);
        }
        Ok(())
    })
}

/// opt_step_sgd: src1 = [gradient | momentum buffer] (`[n, 2]`; `[n, 1]` without momentum), src2 = [lr, momentum,
/// weight decay, gradient scale, first step (1 or 0)]. PyTorch's SGD (no dampening):
/// d = g + wd·p; with momentum, b ← d on the first step, else b ← μ·b + d, and d = b;
/// p ← p − lr·d.
pub(crate) fn sgd(a: &TensorView, state: &TensorView, params: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    let h = hyper(params, 5)?;
    let (lr, mu, wd, gscale, first) = (h[0], h[1], h[2], h[3], h[4] != 0.0);
    let (p, s, n) = operands(a, state, dst, if mu != 0.0 { 2 } else { 1 })?;
    let ptrs = Ptrs(p, s);
    par_rows(exec, n.div_ceil(CHUNK), CHUNK, &|jobs| {
        let (p, s) = ptrs.get();
        let (i0, i1) = (jobs.start * CHUNK, (jobs.end * CHUNK).min(n));
        for i in i0..i1 {
            // SAFETY: i < n; p has n elements, s 2n; this job's range only.
            unsafe {
                let w = p.add(i);
                let mut d = *s.add(i) * gscale;
                *s.add(i) = 0.0;
                if wd != 0.0 {
                    d += wd * *w;
                }
                if mu != 0.0 {
                    let b = s.add(n + i);
                    *b = if first { d } else { *b * mu + d };
                    d = *b;
                }
                *w -= lr * d;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use crate::tensor::{Context, ContextParams};
    use crate::types::GgmlType::F32;
    use crate::Graph;

    /// One AdamW and one SGD-with-momentum step over 50 000 elements (13 chunks, split over two
    /// threads) against PyTorch's formulas in f64, the gradient rows zeroed after.
    #[test]
    fn steps_follow_pytorch_and_consume_the_gradient() {
        let n = 50_000usize;
        let ctx = Context::new(ContextParams { mem_size: 8 << 20, no_alloc: false });
        let w0: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect();
        let g: Vec<f32> = (0..n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 30.0).collect();
        let m0: Vec<f32> = (0..n).map(|i| ((i % 13) as f32 - 6.0) / 50.0).collect();
        let v0: Vec<f32> = (0..n).map(|i| (i % 7) as f32 / 100.0).collect();
        let (lr, b1, b2, eps, wd, t, gs) = (1e-2f64, 0.8f64, 0.99f64, 1e-6f64, 0.1f64, 3, 0.5f64);
        let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        let w = ctx.new_tensor_1d(F32, n as i64);
        w.set_f32_slice(&w0);
        let s = ctx.new_tensor_2d(F32, n as i64, 3);
        s.set_f32_slice(&[g.clone(), m0.clone(), v0.clone()].concat());
        let h = ctx.new_tensor_1d(F32, 8);
        h.set_f32_slice(&[
            lr as f32,
            b1 as f32,
            b2 as f32,
            eps as f32,
            wd as f32,
            bc1 as f32,
            bc2.sqrt() as f32,
            gs as f32,
        ]);
        let mut gf = Graph::new();
        gf.build_forward_expand(&ctx.opt_step_adamw(&w, &s, &h));
        crate::cpu::compute_graph(&gf, 2).unwrap();
        let (wn, sn) = (w.to_f32_vec(), s.to_f32_vec());
        for i in 0..n {
            let gi = g[i] as f64 * gs;
            let m = m0[i] as f64 + (gi - m0[i] as f64) * (1.0 - b1);
            let v = b2 * v0[i] as f64 + (1.0 - b2) * gi * gi;
            let want = w0[i] as f64 * (1.0 - lr * wd) - lr / bc1 * m / (v.sqrt() / bc2.sqrt() + eps);
            assert!((wn[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "adamw {i}: {} vs {want}", wn[i]);
            assert!(
                (sn[n + i] as f64 - m).abs() <= 1e-6 && (sn[2 * n + i] as f64 - v).abs() <= 1e-6,
                "adamw state {i}"
            );
            assert_eq!(sn[i], 0.0, "adamw: gradient {i} consumed");
        }

        let (lr, mu, wd) = (0.1f64, 0.9f64, 0.01f64);
        let w = ctx.new_tensor_1d(F32, n as i64);
        w.set_f32_slice(&w0);
        let s = ctx.new_tensor_2d(F32, n as i64, 2);
        s.set_f32_slice(&[g.clone(), m0.clone()].concat());
        let h = ctx.new_tensor_1d(F32, 5);
        h.set_f32_slice(&[lr as f32, mu as f32, wd as f32, 1.0, 0.0]); // not the first step
        let mut gf = Graph::new();
        gf.build_forward_expand(&ctx.opt_step_sgd(&w, &s, &h));
        crate::cpu::compute_graph(&gf, 2).unwrap();
        let (wn, sn) = (w.to_f32_vec(), s.to_f32_vec());
        for i in 0..n {
            let d = g[i] as f64 + wd * w0[i] as f64;
            let b = mu * m0[i] as f64 + d;
            let want = w0[i] as f64 - lr * b;
            assert!((wn[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "sgd {i}: {} vs {want}", wn[i]);
            assert!((sn[n + i] as f64 - b).abs() <= 1e-6 * (1.0 + b.abs()), "sgd buffer {i}");
            assert_eq!(sn[i], 0.0, "sgd: gradient {i} consumed");
        }
    }
}
