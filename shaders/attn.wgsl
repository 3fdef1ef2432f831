// attn: attention of each (head, query) over the cache, the fused chain mul_mat(k, q) ->
// soft_max_ext(mask, scale) -> mul_mat(v, .) -> permute(0, 2, 1, 3) -> cont
// (crate/webgpu/fuse.rs), one workgroup per (head, query): misc.x of them, head fastest.
// q (src0) [hd, queries, heads] f32; k (src1) [hd, L, heads]; v (src2) [L, hd, heads]
// (V^T: the transposed cache), k and v f32 or f16 (g.x, g.y = 1: f16); the mask (slot 4,
// u.x = 1 f32, 2 f16, 0 none) [L, >= queries], row j for query j, added after the scale
// f.x; dst (slot 3) at dim * d_nb.x + query * d_nb.y + head * d_nb.z. u.y = L, u.z = hd
// (at most 4 * WG), u.w = heads.
//
// The keys go in tiles of WG: each invocation scores one key of the tile, then each one
// accumulates its dims (li, li + WG, ...) over the tile's weights, with an online softmax:
// the running sums are rescaled whenever the maximum grows. dst may be q's own memory,
// element for element (fuse.rs checks): it is written after the last tile's barrier.

const WG: u32 = 64u;
var<workgroup> sc: array<f32, WG>;

fn k_at(i: u32) -> f32 {
    if (p.g.x == 1u) { return ld1_f16(i); }
    return ld1_f32(i);
}

fn v_at(i: u32) -> f32 {
    if (p.g.y == 1u) { return ld2_f16(i); }
    return ld2_f32(i);
}

fn mask_at(i: u32) -> f32 {
    if (p.u.x == 1u) { return ld4_f32(i); }
    if (p.u.x == 2u) { return ld4_f16(i); }
    return 0.0;
}

@compute @workgroup_size(64)
fn attn(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let idx = wg_linear(wg);
    if (idx >= p.misc.x) { return; }
    let h = idx % p.u.w;
    let j = idx / p.u.w;
    let n_kv = p.u.y;
    let hd = p.u.z;
    let qb = p.off.x + j * p.a_nb.y + h * p.a_nb.z;
    let kb = p.off.y + h * p.b_nb.z;
    let vb = p.off.z + h * p.c_nb.z;
    let mb = p.off2.x + j * p.e_nb.y;
    let d0 = li;
    let d1 = li + WG;
    let d2 = li + 2u * WG;
    let d3 = li + 3u * WG;
    var m = neg_inf();
    var s = 0.0;
    var acc = vec4<f32>(0.0);
    for (var t0 = 0u; t0 < n_kv; t0 += WG) {
        let l = t0 + li;
        var x = neg_inf();
        if (l < n_kv) {
            let kr = kb + l * p.b_nb.y;
            var d = 0.0;
            for (var i = 0u; i < hd; i++) { d += ld0_f32(qb + i * p.a_nb.x) * k_at(kr + i * p.b_nb.x); }
            x = d * p.f.x + mask_at(mb + l * p.e_nb.x);
        }
        sc[li] = x;
        workgroupBarrier();
        let n = min(WG, n_kv - t0);
        var tm = m;
        for (var i = 0u; i < n; i++) { tm = max(tm, sc[i]); }
        // Everyone has read the scores before they become weights.
        workgroupBarrier();
        // All masked so far: weights 0, and the sums (0) need no rescaling.
        let live = tm > neg_inf();
        var w = 0.0;
        if (live && l < n_kv) { w = exp(x - tm); }
        sc[li] = w;
        let f = select(1.0, exp(m - tm), live);
        workgroupBarrier();
        s *= f;
        acc *= f;
        for (var i = 0u; i < n; i++) {
            let wi = sc[i];
            s += wi;
            let vr = vb + (t0 + i) * p.c_nb.x;
            if (d0 < hd) { acc.x += wi * v_at(vr + d0 * p.c_nb.y); }
            if (d1 < hd) { acc.y += wi * v_at(vr + d1 * p.c_nb.y); }
            if (d2 < hd) { acc.z += wi * v_at(vr + d2 * p.c_nb.y); }
            if (d3 < hd) { acc.w += wi * v_at(vr + d3 * p.c_nb.y); }
        }
        m = tm;
        workgroupBarrier();
    }
    let o = p.off.w + j * p.d_nb.y + h * p.d_nb.z;
    if (d0 < hd) { st_f32(o + d0 * p.d_nb.x, acc.x / s); }
    if (d1 < hd) { st_f32(o + d1 * p.d_nb.x, acc.y / s); }
    if (d2 < hd) { st_f32(o + d2 * p.d_nb.x, acc.z / s); }
    if (d3 < hd) { st_f32(o + d3 * p.d_nb.x, acc.w / s); }
}
