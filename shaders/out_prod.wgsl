// out_prod: dst[i0, i1, i2, i3] = sum over j of src0[i0, j, i2 / r2, i3 / r3] * src1[i1, j, i2, i3]
// (ggml_out_prod, mul_mat's gradients), src0 of any weight type (deq_one, dequant.wgsl) with
// packed rows, src1 f32 through its strides. One invocation per dst element (misc.x), summing
// over j in f32 in blocks (below). A src0 larger than one binding comes in parts:
// this dispatch sees src0 rows j in [misc.y, misc.z); u.x = 1 when an earlier part's sum is
// already in dst (it continues it). A dst larger than one binding comes in ranges of its
// rows (dim 1): d_ne.y of them from row u.y on, bound from there.

@compute @workgroup_size(256)
fn out_prod(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let i = unravel(gid, p.d_ne);
    let out = p.off.w + at(i, p.d_nb);
    let a = p.off.x + (i.z / (p.b_ne.z / p.a_ne.z)) * p.a_nb.z + (i.w / (p.b_ne.w / p.a_ne.w)) * p.a_nb.w;
    let b = p.off.y + (p.u.y + i.y) * p.b_nb.x + i.z * p.b_nb.z + i.w * p.b_nb.w;
    var s = 0.0;
    if (p.u.x == 1u) { s = bitcast<f32>(dst[out]); }
    // Blocked sums: 64 terms into c, the c into s. A long sum (the head's backward: over
    // n_vocab logits) then rounds about as ~n/64 + 64 terms in a row do; in order in f32 its
    // error grows with n (sums of ~100 over 50257 terms: 7e-4 from f64's, blocked 1.1e-4;
    // tests/backend_ops/suite.rs long_row_cases). Each part of a split src0 is blocked from
    // its own first row.
    for (var j0 = p.misc.y; j0 < p.misc.z; j0 += 64u) {
        let j1 = min(j0 + 64u, p.misc.z);
        var c = 0.0;
        for (var j = j0; j < j1; j++) {
            c += deq_one(a + (j - p.misc.y) * p.a_nb.y, i.x) * ld1_f32(b + j * p.b_nb.y);
        }
        s += c;
    }
    st_f32(out, s);
}
