// soft_max_ext: softmax over dim 0 of (src0 * scale + slope * mask), and diag_mask_inf.
//
// soft_max: one workgroup per row. The mask is binding 1 (ggml's src1); u.x says its type:
// 0 none, 1 f32, 2 f16, or 3: no mask tensor but the causal one diag_mask_inf makes
// (-inf where i0 > n_past + i1, u.w = n_past as i32 bits), for the fused chain
// scale -> diag_mask_inf -> soft_max. f.x = scale. ALiBi (max_bias > 0): u.z = 1,
// u.y = n_head_log2, f.y = m0, f.z = m1. The mask broadcasts over dims 2 and 3 (modulo),
// like ggml's.

const WG: u32 = 256u;
var<workgroup> red: array<f32, WG>;

fn reduce(li: u32, v: f32, is_max: bool) -> f32 {
    red[li] = v;
    workgroupBarrier();
    var s = WG / 2u;
    while (s > 0u) {
        if (li < s) {
            let o = red[li + s];
            red[li] = select(red[li] + o, max(red[li], o), is_max);
        }
        workgroupBarrier();
        s = s / 2u;
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn mask_at(mrow: u32, i: u32) -> f32 {
    if (p.u.x == 1u) { return ld1_f32(mrow + i * p.b_nb.x); }
    if (p.u.x == 2u) { return ld1_f16(mrow + i * p.b_nb.x); }
    return 0.0;
}

// Element i of row i1 before the softmax: scaled, plus the mask (the causal mask as -inf,
// which is what the unfused diag_mask_inf stores, whatever the scale).
fn logit(src: u32, mrow: u32, i: u32, i1: u32, slope: f32) -> f32 {
    if (p.u.x == 3u && i32(i) > bitcast<i32>(p.u.w) + i32(i1)) { return neg_inf(); }
    return ld0_f32(src + i * p.a_nb.x) * p.f.x + slope * mask_at(mrow, i);
}

@compute @workgroup_size(256)
fn soft_max(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = wg_linear(wg);
    if (row >= p.misc.x) { return; }
    let r = unravel(row, vec4<u32>(p.a_ne.y, p.a_ne.z, p.a_ne.w, 1u)); // (i1, i2, i3)
    let src = p.off.x + r.x * p.a_nb.y + r.y * p.a_nb.z + r.z * p.a_nb.w;
    let out = p.off.w + r.x * p.d_nb.y + r.y * p.d_nb.z + r.z * p.d_nb.w;
    let mrow = p.off.y + r.x * p.b_nb.y + (r.y % p.b_ne.z) * p.b_nb.z + (r.z % p.b_ne.w) * p.b_nb.w;
    var slope = 1.0;
    if (p.u.z == 1u) {
        let h = r.y;
        if (h < p.u.y) {
            slope = pow(p.f.y, f32(h + 1u));
        } else {
            slope = pow(p.f.z, f32(2u * (h - p.u.y) + 1u));
        }
    }
    let n = p.a_ne.x;
    var m = neg_inf();
    for (var i = li; i < n; i += WG) {
        m = max(m, logit(src, mrow, i, r.x, slope));
    }
    m = reduce(li, m, true);
    var s = 0.0;
    for (var i = li; i < n; i += WG) {
        s += exp(logit(src, mrow, i, r.x, slope) - m);
    }
    s = reduce(li, s, false);
    let k = 1.0 / s;
    for (var i = li; i < n; i += WG) {
        let v = logit(src, mrow, i, r.x, slope);
        st_f32(out + i * p.d_nb.x, exp(v - m) * k);
    }
}

// diag_mask_inf: a[i0, i1] = -inf where i0 > n_past + i1 (u.x = n_past as i32 bits).
@compute @workgroup_size(256)
fn diag_mask_inf(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let i = unravel(gid, p.d_ne);
    var v = ld0_f32(p.off.x + at(i, p.a_nb));
    if (i32(i.x) > bitcast<i32>(p.u.x) + i32(i.y)) { v = neg_inf(); }
    st_f32(p.off.w + at(i, p.d_nb), v);
}
