// get_rows: dst[:, i10, i11, i12] = src0[:, src1[i10, i11, i12], i11, i12] as f32.
// One invocation per dst element. A src0 larger than one binding is read in parts: this
// dispatch sees src0 rows [misc.y, misc.z) and skips indices outside them (another part
// writes those rows). Out-of-range indices write nothing.

@compute @workgroup_size(256)
fn get_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t = wg_linear(wg) * 256u + li;
    if (t >= p.misc.x) { return; }
    let k = t % p.a_ne.x;
    let r = unravel(t / p.a_ne.x, vec4<u32>(p.b_ne.x, p.b_ne.y, p.b_ne.z, 1u)); // (i10, i11, i12)
    let idx = bitcast<i32>(w1(p.off.y + r.x * p.b_nb.x + r.y * p.b_nb.y + r.z * p.b_nb.z));
    if (idx < i32(p.misc.y) || idx >= i32(p.misc.z)) { return; }
    let base = p.off.x + u32(idx - i32(p.misc.y)) * p.a_nb.y + (r.y % p.a_ne.z) * p.a_nb.z
        + (r.z % p.a_ne.w) * p.a_nb.w;
    st_f32(p.off.w + k * p.d_nb.x + r.x * p.d_nb.y + r.y * p.d_nb.z + r.z * p.d_nb.w, deq_one(base, k));
}
