// add, mul: dst = src0 op src1, src1 broadcast along every dim where it repeats
// (ne1x divides ne0x). All f32; any strides. One invocation per dst element.
// add_gelu: gelu(src0 + src1), the fused chain add -> gelu (dst is the gelu node).

fn binary_operands(gid: u32) -> vec3<f32> {
    let i = unravel(gid, p.d_ne);
    let a = ld0_f32(p.off.x + at(i, p.a_nb));
    let b = ld1_f32(p.off.y + at(i % p.b_ne, p.b_nb));
    return vec3<f32>(a, b, 0.0);
}

@compute @workgroup_size(256)
fn add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let v = binary_operands(gid);
    st_f32(p.off.w + at(unravel(gid, p.d_ne), p.d_nb), v.x + v.y);
}

@compute @workgroup_size(256)
fn mul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let v = binary_operands(gid);
    st_f32(p.off.w + at(unravel(gid, p.d_ne), p.d_nb), v.x * v.y);
}

@compute @workgroup_size(256)
fn add_gelu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = wg_linear(wg) * 256u + li;
    if (gid >= p.misc.x) { return; }
    let v = binary_operands(gid);
    st_f32(p.off.w + at(unravel(gid, p.d_ne), p.d_nb), gelu_f32(v.x + v.y));
}
