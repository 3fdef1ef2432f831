// cpy / cont: element k of src0 in logical order (i0 fastest) goes to element k of dst in
// its own logical order, so the shapes may differ (cont_4d) and both may be strided.
// u.x: src0 type (0 f32, 1 f16).

fn cpy_load(k: u32) -> f32 {
    let o = p.off.x + at(unravel(k, p.a_ne), p.a_nb);
    if (p.u.x == 1u) { return ld0_f16(o); }
    return ld0_f32(o);
}

// dst f32, any strides: one invocation per element.
@compute @workgroup_size(256)
fn cpy_f32(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let k = wg_linear(wg) * 256u + li;
    if (k >= p.misc.x) { return; }
    st_f32(p.off.w + at(unravel(k, p.d_ne), p.d_nb), cpy_load(k));
}

// dst f16, contiguous: one invocation per 32-bit word, so no two invocations write the same
// word. A word shared with a neighbour (dst starting or ending mid-word) keeps the other
// half's bits. u.y: elements; off.w: dst start in halves; misc.x: words to write.
@compute @workgroup_size(256)
fn cpy_f16(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t = wg_linear(wg) * 256u + li;
    if (t >= p.misc.x) { return; }
    let w = (p.off.w >> 1u) + t;
    var word = dst[w];
    for (var h = 0u; h < 2u; h++) {
        let e = i32(2u * w + h) - i32(p.off.w);
        if (e >= 0 && u32(e) < p.u.y) {
            let bits = pack2x16float(vec2<f32>(cpy_load(u32(e)), 0.0)) & 0xffffu;
            let sh = h * 16u;
            word = (word & ~(0xffffu << sh)) | (bits << sh);
        }
    }
    dst[w] = word;
}

// dst f16, any strides (the transposed V cache: rows n_ctx halves apart): one invocation
// per element, in two dispatches, u.z = 0 then 1: those whose half is the low (even) or
// the high half of its word. Within one dispatch no two invocations share a word, so each
// read-modify-write keeps the other half, which the other dispatch owns (or which is not
// this copy's). u.y: elements; misc.x: elements too.
@compute @workgroup_size(256)
fn cpy_f16_strided(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let k = wg_linear(wg) * 256u + li;
    if (k >= p.misc.x) { return; }
    let o = p.off.w + at(unravel(k, p.d_ne), p.d_nb);
    if ((o & 1u) != p.u.z) { return; }
    let sh = (o & 1u) * 16u;
    let bits = pack2x16float(vec2<f32>(cpy_load(k), 0.0)) & 0xffffu;
    let w = o >> 1u;
    dst[w] = (dst[w] & ~(0xffffu << sh)) | (bits << sh);
}

// Byte-exact writes at unaligned edges (Buffer::set_bytes): src0 holds (word, mask, value)
// triples; dst[word] takes value's bits where mask is set.
@compute @workgroup_size(64)
fn patch_words(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let t = wg.x * 64u + li;
    if (t >= p.misc.x) { return; }
    let w = w0(3u * t) - p.off.w;
    let m = w0(3u * t + 1u);
    dst[w] = (dst[w] & ~m) | (w0(3u * t + 2u) & m);
}
