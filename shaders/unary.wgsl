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

// tanh through exp(-2|u|): never overflows (the builtin tanh returns NaN for large |u|
// on some drivers) and keeps full relative precision away from 0.
fn tanh_stable(u: f32) -> f32 {
    let e = exp(-2.0 * abs(u));
    let t = (1.0 - e) / (1.0 + e);
    return select(t, -t, u < 0.0);
}

// GELU, tanh form (GPT-2's gelu_new), in f32: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
@compute @workgroup_size(256)
fn gelu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let x = unary_src(gid);
    let u = 0.7978845608028654 * x * (1.0 + 0.044715 * x * x);
    unary_store(gid, 0.5 * x * (1.0 + tanh_stable(u)));
}
