// The ops a backward pass adds to a graph (crate/backward.rs), but out_prod (out_prod.wgsl):
// log_soft_max (a gradient run's metrics) and its backward, soft_max_back, gelu_back, norm_back, repeat_back, get_rows_back, acc, diag_mask_zero,
// fill. All f32, any strides. Sums are f32 (WGSL has no f64; the CPU sums in f64): in a
// fixed order, so a result does not depend on the adapter's scheduling.

const WG: u32 = 256u;
var<workgroup> red: array<f32, WG>;

fn reduce_sum(li: u32, v: f32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    var s = WG / 2u;
    while (s > 0u) {
        if (li < s) { red[li] = red[li] + red[li + s]; }
        workgroupBarrier();
        s = s / 2u;
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_max(li: u32, v: f32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    var s = WG / 2u;
    while (s > 0u) {
        if (li < s) { red[li] = max(red[li], red[li + s]); }
        workgroupBarrier();
        s = s / 2u;
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

// First unit of row (i1, i2, i3) = r of a tensor with strides nb, from unit `off`.
fn row_at(off: u32, r: vec4<u32>, nb: vec4<u32>) -> u32 {
    return off + r.x * nb.y + r.y * nb.z + r.z * nb.w;
}

// log_soft_max: src0 = x, per row y = x - (max + log(sum exp(x - max))). One workgroup per
// row (misc.x rows).
@compute @workgroup_size(256)
fn log_soft_max(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = wg_linear(wg);
    if (row >= p.misc.x) { return; }
    let r = unravel(row, vec4<u32>(p.d_ne.y, p.d_ne.z, p.d_ne.w, 1u));
    let x = row_at(p.off.x, r, p.a_nb);
    let out = row_at(p.off.w, r, p.d_nb);
    let n = p.d_ne.x;
    var m = neg_inf(); // common.wgsl's: a constant -inf is rejected by Tint
    for (var i = li; i < n; i += WG) { m = max(m, ld0_f32(x + i * p.a_nb.x)); }
    let mx = reduce_max(li, m);
    var s = 0.0;
    for (var i = li; i < n; i += WG) { s += exp(ld0_f32(x + i * p.a_nb.x) - mx); }
    let lse = mx + log(reduce_sum(li, s));
    for (var i = li; i < n; i += WG) { st_f32(out + i * p.d_nb.x, ld0_f32(x + i * p.a_nb.x) - lse); }
}

// log_soft_max_back: src0 = dy, src1 = y (log_soft_max's output), per row
// dx = dy - exp(y) * sum(dy). One workgroup per row.
@compute @workgroup_size(256)
fn log_soft_max_back(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = wg_linear(wg);
    if (row >= p.misc.x) { return; }
    let r = unravel(row, vec4<u32>(p.d_ne.y, p.d_ne.z, p.d_ne.w, 1u));
    let g = row_at(p.off.x, r, p.a_nb);
    let y = row_at(p.off.y, r, p.b_nb);
    let out = row_at(p.off.w, r, p.d_nb);
    let n = p.d_ne.x;
    var s = 0.0;
    for (var i = li; i < n; i += WG) { s += ld0_f32(g + i * p.a_nb.x); }
    let sum = reduce_sum(li, s);
    for (var i = li; i < n; i += WG) {
        st_f32(out + i * p.d_nb.x, ld0_f32(g + i * p.a_nb.x) - exp(ld1_f32(y + i * p.b_nb.x)) * sum);
    }
}

// soft_max_back: src0 = dy, src1 = y, per row dx = scale * y * (dy - sum(dy * y)), f.x =
// scale. One workgroup per row (misc.x rows).
@compute @workgroup_size(256)
fn soft_max_back(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = wg_linear(wg);
    if (row >= p.misc.x) { return; }
    let r = unravel(row, vec4<u32>(p.d_ne.y, p.d_ne.z, p.d_ne.w, 1u));
    let g = row_at(p.off.x, r, p.a_nb);
    let y = row_at(p.off.y, r, p.b_nb);
    let out = row_at(p.off.w, r, p.d_nb);
    let n = p.d_ne.x;
    var s = 0.0;
    for (var i = li; i < n; i += WG) { s += ld0_f32(g + i * p.a_nb.x) * ld1_f32(y + i * p.b_nb.x); }
    let dot = reduce_sum(li, s);
    for (var i = li; i < n; i += WG) {
        let yi = ld1_f32(y + i * p.b_nb.x);
        st_f32(out + i * p.d_nb.x, p.f.x * yi * (ld0_f32(g + i * p.a_nb.x) - dot));
    }
}

// norm_back: src0 = dy, src1 = x; per row, with y = (x - mean) / sd, sd = sqrt(var + eps):
// dx = (dy - mean(dy) - y * mean(dy * y)) / sd. f.x = eps. One workgroup per row; the mean
// and variance as the forward norm computes them (two passes).
@compute @workgroup_size(256)
fn norm_back(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = wg_linear(wg);
    if (row >= p.misc.x) { return; }
    let r = unravel(row, vec4<u32>(p.d_ne.y, p.d_ne.z, p.d_ne.w, 1u));
    let g = row_at(p.off.x, r, p.a_nb);
    let x = row_at(p.off.y, r, p.b_nb);
    let out = row_at(p.off.w, r, p.d_nb);
    let n = p.d_ne.x;
    var s = 0.0;
    for (var i = li; i < n; i += WG) { s += ld1_f32(x + i * p.b_nb.x); }
    let mean = reduce_sum(li, s) / f32(n);
    var q = 0.0;
    for (var i = li; i < n; i += WG) {
        let d = ld1_f32(x + i * p.b_nb.x) - mean;
        q += d * d;
    }
    let inv = 1.0 / sqrt(reduce_sum(li, q) / f32(n) + p.f.x);
    var sg = 0.0;
    var sgy = 0.0;
    for (var i = li; i < n; i += WG) {
        let gi = ld0_f32(g + i * p.a_nb.x);
        sg += gi;
        sgy += gi * (ld1_f32(x + i * p.b_nb.x) - mean);
    }
    let mg = reduce_sum(li, sg) / f32(n);
    let mgy = reduce_sum(li, sgy) * inv / f32(n);
    for (var i = li; i < n; i += WG) {
        let yi = (ld1_f32(x + i * p.b_nb.x) - mean) * inv;
        st_f32(out + i * p.d_nb.x, (ld0_f32(g + i * p.a_nb.x) - mg - yi * mgy) * inv);
    }
}

// gelu_back: src0 = dy, src1 = x; dy * d/dx [x * sigmoid(2u)], u = sqrt(2/pi) (x + 0.044715 x^3)
// (the tanh form). One invocation per element (misc.x).
@compute @workgroup_size(256)
fn gelu_back(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let i = unravel(gid, p.d_ne);
    let x = ld1_f32(p.off.y + at(i, p.b_nb));
    let u = 0.7978845608028654 * x * (1.0 + 0.044715 * x * x);
    // sigmoid(2u) = (1 + tanh u) / 2, through tanh_stable (no overflow for large |u|).
    let s = 0.5 * (1.0 + tanh_stable(u));
    let du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
    let d = s + x * s * (1.0 - s) * 2.0 * du;
    st_f32(p.off.w + at(i, p.d_nb), ld0_f32(p.off.x + at(i, p.a_nb)) * d);
}

// repeat_back: dst[j] = sum of src0[i] over every i with i mod dst.ne = j. One invocation
// per dst element (misc.x), summing in src0's index order.
@compute @workgroup_size(256)
fn repeat_back(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let j = unravel(gid, p.d_ne);
    let reps = p.a_ne / p.d_ne;
    var s = 0.0;
    for (var k3 = 0u; k3 < reps.w; k3++) {
        for (var k2 = 0u; k2 < reps.z; k2++) {
            for (var k1 = 0u; k1 < reps.y; k1++) {
                for (var k0 = 0u; k0 < reps.x; k0++) {
                    let i = j + vec4<u32>(k0, k1, k2, k3) * p.d_ne;
                    s += ld0_f32(p.off.x + at(i, p.a_nb));
                }
            }
        }
    }
    st_f32(p.off.w + at(j, p.d_nb), s);
}

// get_rows_back: dst[:, r] = sum of src0[:, i] over the indices i with src1[i] = r, in index
// order (a scatter-add without atomics: each invocation owns one dst element and scans every
// index). One invocation per dst element (misc.x) of dst's rows from misc.y on (a dst larger
// than one binding comes in ranges of rows, bound from row misc.y); dst is 2-D, src1 1-D.
@compute @workgroup_size(256)
fn get_rows_back(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let i0 = gid % p.d_ne.x;
    let rr = gid / p.d_ne.x; // the row within this range
    let r = i32(p.misc.y + rr);
    var s = 0.0;
    for (var i = 0u; i < p.b_ne.x; i++) {
        if (bitcast<i32>(w1(p.off.y + i * p.b_nb.x)) == r) {
            s += ld0_f32(p.off.x + i0 * p.a_nb.x + i * p.a_nb.y);
        }
    }
    st_f32(p.off.w + i0 * p.d_nb.x + rr * p.d_nb.y, s);
}

// acc, first dispatch: dst = src0 (both contiguous, misc.x elements; a no-op rewrite when
// they are the same memory).
@compute @workgroup_size(256)
fn acc_copy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    st_f32(p.off.w + gid, ld0_f32(p.off.x + gid));
}

// Unit of dst that element i of src1 is added into: u.x the view's first element, u.yzw
// its strides of dims 1..3 (in elements; dim 0 is packed).
fn acc_target(i: vec4<u32>) -> u32 {
    return p.off.w + p.u.x + i.x + i.y * p.u.y + i.z * p.u.z + i.w * p.u.w;
}

// acc, second dispatch: src1 added into the view of dst. One invocation per src1 element
// (misc.x) when the view's elements are distinct (the Rust side checks), else `acc_add_serial`.
@compute @workgroup_size(256)
fn acc_add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let i = unravel(gid, p.b_ne);
    let t = acc_target(i);
    st_f32(t, bitcast<f32>(dst[t]) + ld1_f32(p.off.y + at(i, p.b_nb)));
}

// acc into a view whose elements overlap: one invocation adds every element, in order.
@compute @workgroup_size(1)
fn acc_add_serial() {
    for (var gid = 0u; gid < p.misc.x; gid++) {
        let i = unravel(gid, p.b_ne);
        let t = acc_target(i);
        st_f32(t, bitcast<f32>(dst[t]) + ld1_f32(p.off.y + at(i, p.b_nb)));
    }
}

// diag_mask_zero: a[i0, i1] = 0 where i0 > n_past + i1 (u.x = n_past as i32 bits).
@compute @workgroup_size(256)
fn diag_mask_zero(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let i = unravel(gid, p.d_ne);
    var v = ld0_f32(p.off.x + at(i, p.a_nb));
    if (i32(i.x) > bitcast<i32>(p.u.x) + i32(i.y)) { v = 0.0; }
    st_f32(p.off.w + at(i, p.d_nb), v);
}

// fill: every element of dst = f.x.
@compute @workgroup_size(256)
fn fill(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    st_f32(p.off.w + at(unravel(gid, p.d_ne), p.d_nb), p.f.x);
}
