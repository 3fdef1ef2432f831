// scale, gelu: element-wise f32, any strides on both sides. One invocation per element.

fn unary_src(gid: u32) -> f32 {
    return ld0_f32(p.off.x + at(unravel(gid, p.a_ne), p.a_nb));
}

fn unary_store(gid: u32, v: f32) {
    st_f32(p.off.w + at(unravel(gid, p.d_ne), p.d_nb), v);
}

// f.x: the factor.
@compute @workgroup_size(256)
fn scale(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    unary_store(gid, unary_src(gid) * p.f.x);
}

// GELU (gelu_f32 in common.wgsl).
@compute @workgroup_size(256)
fn gelu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    unary_store(gid, gelu_f32(unary_src(gid)));
}
