// The optimizer steps of a training run (crate/model/train.rs's optimizer graph): ggml's
// opt_step_adamw and opt_step_sgd, the math of crate/cpu/ops_opt.rs in the same order of
// operations (PyTorch's torch.optim.AdamW and SGD, single-tensor path). One invocation per
// element: dst (src0's memory: the param, contiguous f32) is updated in place from the
// state [n, rows] (row 0 the gradient accumulated over the batch, zeroed here for the next
// one; then AdamW's m and v, or SGD's momentum buffer) and src2, the hyper-parameters the
// host writes before each step. The dispatch covers misc.x elements: all n, or a window of
// them when the param or its state is larger than one binding (compute.rs `flat_parts`);
// the param's window is in src0/dst, the same window of each state row in slot 1 (row 0),
// 4 (row 1) and 5 (row 2). Elements are independent, so results do not depend on the
// adapter's scheduling or the windows; WGSL's sqrt and division are within a few ULP of the
// CPU's correctly rounded ones.

fn hyper(k: u32) -> f32 { return ld2_f32(p.off.z + k); }
fn state_ld(row: u32, i: u32) -> f32 {
    switch row {
        case 0u: { return ld1_f32(p.off.y + i); }
        case 1u: { return ld4_f32(p.off2.x + i); }
        default: { return ld5_f32(p.off2.y + i); }
    }
}
fn state_st(row: u32, i: u32, v: f32) {
    switch row {
        case 0u: { put(B1, p.off.y + i, bitcast<u32>(v)); }
        case 1u: { put(B4, p.off2.x + i, bitcast<u32>(v)); }
        default: { put(B5, p.off2.y + i, bitcast<u32>(v)); }
    }
}

// src2 = [lr, beta1, beta2, eps, weight decay, 1 - beta1^t, sqrt(1 - beta2^t), gradient scale].
// p <- p(1 - lr wd); m <- m + (g - m)(1 - b1); v <- b2 v + (1 - b2) g^2;
// p <- p - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), g the gradient times its scale.
@compute @workgroup_size(256)
fn adamw(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wg) * 256u + li;
    if (i >= p.misc.x) { return; }
    let lr = hyper(0u);
    let b1 = hyper(1u);
    let b2 = hyper(2u);
    let eps = hyper(3u);
    let wd = hyper(4u);
    let bc1 = hyper(5u);
    let bc2_sqrt = hyper(6u);
    let gscale = hyper(7u);
    let decay = 1.0 - lr * wd;
    let step_size = lr / bc1;
    let g = state_ld(0u, i) * gscale;
    state_st(0u, i, 0.0);
    let w = ld0_f32(p.off.x + i) * decay;
    let m0 = state_ld(1u, i);
    let m = m0 + (g - m0) * (1.0 - b1);
    let v = state_ld(2u, i) * b2 + (1.0 - b2) * g * g;
    state_st(1u, i, m);
    state_st(2u, i, v);
    let denom = sqrt(v) / bc2_sqrt + eps;
    st_f32(p.off.w + i, w - step_size * (m / denom));
}

// src2 = [lr, momentum, weight decay, gradient scale, first step (1 or 0)]. No dampening:
// d = g + wd p; with momentum b <- d on the first step, else b <- mu b + d, and d = b;
// p <- p - lr d.
@compute @workgroup_size(256)
fn sgd(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = wg_linear(wg) * 256u + li;
    if (i >= p.misc.x) { return; }
    let lr = hyper(0u);
    let mu = hyper(1u);
    let wd = hyper(2u);
    let gscale = hyper(3u);
    let first = hyper(4u) != 0.0;
    let w = ld0_f32(p.off.x + i);
    var d = state_ld(0u, i) * gscale;
    state_st(0u, i, 0.0);
    if (wd != 0.0) { d += wd * w; }
    if (mu != 0.0) {
        var b = d;
        if (!first) { b = state_ld(1u, i) * mu + d; }
        state_st(1u, i, b);
        d = b;
    }
    st_f32(p.off.w + i, w - lr * d);
}
