// out_prod: dst[i0, i1, i2, i3] = sum over j of src0[i0, j, i2 / r2, i3 / r3] * src1[i1, j, i2, i3]
// (ggml_out_prod, mul_mat's gradients), src0 of any weight type (deq4/deq_one, dequant.wgsl)
// with packed rows, src1 f32 through its strides. One invocation per 4 x 4 block of dst (i0
// and i1 four each; misc.x blocks): each j reads 4 weights (one block's scale for the 4) and 4
// src1 values for 16 products, a quarter of the loads of one output per invocation, and needs
// no workgroup memory (CPU-based adapters run barriers slowly, as the per-row mul_mat notes).
// Each output sums over j in f32 in blocks (below). A src0 larger than one binding comes in
// parts: this dispatch sees src0 rows j in [misc.y, misc.z); u.x = 1 when an earlier part's
// sum is already in dst (it continues it). A dst larger than one binding comes in ranges of
// its rows (dim 1): d_ne.y of them from row u.y on, bound from there.

@compute @workgroup_size(256)
fn out_prod(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let q = unravel(gid, vec4<u32>((p.d_ne.x + 3u) / 4u, (p.d_ne.y + 3u) / 4u, p.d_ne.z, p.d_ne.w));
    let i0 = q.x * 4u;
    let i1 = q.y * 4u;
    // The outputs of this block inside dst: nx along i0, ny along i1.
    let nx = min(4u, p.d_ne.x - i0);
    let ny = min(4u, p.d_ne.y - i1);
    let a = p.off.x + (q.z / (p.b_ne.z / p.a_ne.z)) * p.a_nb.z + (q.w / (p.b_ne.w / p.a_ne.w)) * p.a_nb.w;
    let b = p.off.y + (p.u.y + i1) * p.b_nb.x + q.z * p.b_nb.z + q.w * p.b_nb.w;
    let out = p.off.w + at(vec4<u32>(i0, i1, q.z, q.w), p.d_nb);
    // s[v][u]: output (i0 + u, i1 + v).
    var s: array<vec4<f32>, 4>;
    if (p.u.x == 1u) {
        for (var v = 0u; v < ny; v++) {
            for (var u = 0u; u < nx; u++) {
                s[v][u] = bitcast<f32>(dst[out + u * p.d_nb.x + v * p.d_nb.y]);
            }
        }
    }
    // Blocked sums: 64 terms into c, the c into s. A long sum (the head's backward: over
    // n_vocab logits) then rounds about as ~n/64 + 64 terms in a row do; in order in f32 its
    // error grows with n (sums of ~100 over 50257 terms: 7e-4 from f64's, blocked 1.1e-4;
    // tests/backend_ops/suite.rs long_row_cases). Each part of a split src0 is blocked from
    // its own first row.
    for (var j0 = p.misc.y; j0 < p.misc.z; j0 += 64u) {
        let j1 = min(j0 + 64u, p.misc.z);
        // Written out, no loops inside the j loop: Mesa's llvmpipe ends a shader's loops
        // after 65535 iterations in all, and j runs 50257 times for the head.
        var c0 = vec4<f32>(0.0);
        var c1 = vec4<f32>(0.0);
        var c2 = vec4<f32>(0.0);
        var c3 = vec4<f32>(0.0);
        for (var j = j0; j < j1; j++) {
            let ra = a + (j - p.misc.y) * p.a_nb.y;
            var av = vec4<f32>(0.0);
            if (nx == 4u) {
                av = deq4(ra, i0);
            } else {
                av.x = deq_one(ra, i0);
                if (nx > 1u) { av.y = deq_one(ra, i0 + 1u); }
                if (nx > 2u) { av.z = deq_one(ra, i0 + 2u); }
            }
            let bj = b + j * p.b_nb.y;
            c0 += av * ld1_f32(bj);
            if (ny > 1u) { c1 += av * ld1_f32(bj + p.b_nb.x); }
            if (ny > 2u) { c2 += av * ld1_f32(bj + 2u * p.b_nb.x); }
            if (ny > 3u) { c3 += av * ld1_f32(bj + 3u * p.b_nb.x); }
        }
        s[0] += c0;
        s[1] += c1;
        s[2] += c2;
        s[3] += c3;
    }
    for (var v = 0u; v < ny; v++) {
        for (var u = 0u; u < nx; u++) {
            st_f32(out + u * p.d_nb.x + v * p.d_nb.y, s[v][u]);
        }
    }
}
