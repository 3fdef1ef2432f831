// norm: per row of src0, (x - mean) / sqrt(var + eps), no affine part. f.x = eps.
// norm_affine: the same times src1 plus src2 (one row each, broadcast over the rows: the
// fused chain norm -> mul -> add of a layer norm's weight and bias).
// One workgroup per row; mean first, then the variance of (x - mean) (two passes, as
// accurate as the CPU's).

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

fn norm_rows(wg: vec3<u32>, li: u32, affine: bool) {
    let row = wg_linear(wg);
    if (row >= p.misc.x) { return; }
    let r = unravel(row, vec4<u32>(p.a_ne.y, p.a_ne.z, p.a_ne.w, 1u));
    let src = p.off.x + r.x * p.a_nb.y + r.y * p.a_nb.z + r.z * p.a_nb.w;
    let out = p.off.w + r.x * p.d_nb.y + r.y * p.d_nb.z + r.z * p.d_nb.w;
    let n = p.a_ne.x;
    var s = 0.0;
    for (var i = li; i < n; i += WG) { s += ld0_f32(src + i * p.a_nb.x); }
    let mean = reduce_sum(li, s) / f32(n);
    var q = 0.0;
    for (var i = li; i < n; i += WG) {
        let x = ld0_f32(src + i * p.a_nb.x) - mean;
        q += x * x;
    }
    let var_ = reduce_sum(li, q) / f32(n);
    let k = 1.0 / sqrt(var_ + p.f.x);
    for (var i = li; i < n; i += WG) {
        var y = (ld0_f32(src + i * p.a_nb.x) - mean) * k;
        if (affine) {
            y = y * ld1_f32(p.off.y + i * p.b_nb.x) + ld2_f32(p.off.z + i * p.c_nb.x);
        }
        st_f32(out + i * p.d_nb.x, y);
    }
}

@compute @workgroup_size(256)
fn norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    norm_rows(wg, li, false);
}

@compute @workgroup_size(256)
fn norm_affine(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    norm_rows(wg, li, true);
}
