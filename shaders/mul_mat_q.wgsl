// mul_mat for every src0 type (quantized ones dequantized in the shader) with f32 src1,
// few columns at a time: dst[m, n] = row m of src0 . row n of src1, src0 broadcast over
// dims 2 and 3. src0 rows [misc.y, misc.z) are bound in this part (large weights are
// split); workgroup z = (group of 4 columns, batch).
//
// mul_mat_vec: one workgroup per row, its 64 invocations taking 4 weights in every 256
// (so neighbouring invocations read neighbouring memory), then a subgroup or tree
// reduction: for GPUs.
// mul_mat_rows: one invocation per row (and 4 columns) and no workgroup memory: for
// CPU-based adapters, whose barriers cost more than the arithmetic.
//
// Fused chains (crate/webgpu/fuse.rs) run here too. src1 is read through `ldx`, after
// `x_prologue`: as it is, or (the mul_mat_ln module, shaders/ln_input.wgsl) its layer norm.
// The epilogue, by bits of u.x: 1: + src2 (a bias row: row m at c_nb.x * m); 2: gelu;
// 4: + slot 4 at (row, column) (a residual, strides e_nb.x, e_nb.y); 8: the rows in three
// blocks of u.y (Q, K, V) stored to slots 3, 4, 5 at row * nb.x + column * nb.y of d_nb,
// e_nb, f_nb (the row within its block), instead of dst's own layout.

struct Mm {
    base0: u32, // src0 batch base (add row * a_nb.y)
    base1: u32, // src1 batch base
    n0: u32,    // first of the 4 columns
    i12: u32,
    i13: u32,
}

fn mm_setup(z: u32) -> Mm {
    let ncg = (p.b_ne.y + 3u) / 4u;
    let bz = z / ncg;
    let i12 = bz % p.b_ne.z;
    let i13 = bz / p.b_ne.z;
    let i02 = i12 / (p.b_ne.z / p.a_ne.z);
    let i03 = i13 / (p.b_ne.w / p.a_ne.w);
    return Mm(p.off.x + i02 * p.a_nb.z + i03 * p.a_nb.w, p.off.y + i12 * p.b_nb.z + i13 * p.b_nb.w, (z % ncg) * 4u, i12, i13);
}

// 1 when src1 has one column (generation): the other three columns are skipped outright.
override NCOL: u32 = 4u;

fn store4(m: u32, mm: Mm, v: vec4<f32>) {
    let row = p.misc.y + m;
    var r = v;
    let ep = p.u.x;
    if ((ep & 1u) != 0u) { r += vec4<f32>(ld2_f32(p.off.z + row * p.c_nb.x)); }
    if ((ep & 2u) != 0u) { r = vec4<f32>(gelu_f32(r.x), gelu_f32(r.y), gelu_f32(r.z), gelu_f32(r.w)); }
    if ((ep & 8u) != 0u) {
        let part = row / p.u.y;
        let rr = row % p.u.y;
        var home = 3u;
        var o = p.off.w + rr * p.d_nb.x;
        var cs = p.d_nb.y;
        if (part == 1u) { home = B4; o = p.off2.x + rr * p.e_nb.x; cs = p.e_nb.y; }
        if (part == 2u) { home = B5; o = p.off2.y + rr * p.f_nb.x; cs = p.f_nb.y; }
        for (var c = 0u; c < 4u; c++) {
            if (mm.n0 + c < p.b_ne.y) { put(home, o + (mm.n0 + c) * cs, bitcast<u32>(r[c])); }
        }
        return;
    }
    let o = p.off.w + row * p.d_nb.x + mm.i12 * p.d_nb.z + mm.i13 * p.d_nb.w;
    for (var c = 0u; c < 4u; c++) {
        if (mm.n0 + c < p.b_ne.y) {
            var y = r[c];
            // A part of a long row after the first (mul_mat_rows): the sums go on in dst.
            if (p.g.x > 0u) { y += bitcast<f32>(dst[o + (mm.n0 + c) * p.d_nb.y]); }
            if ((ep & 4u) != 0u) { y += ld4_f32(p.off2.x + row * p.e_nb.x + (mm.n0 + c) * p.e_nb.y); }
            st_f32(o + (mm.n0 + c) * p.d_nb.y, y);
        }
    }
}

// src1 at element k of the 4 columns (0 past the last column).
fn xs4(k: u32, mm: Mm) -> vec4<f32> {
    let b = mm.base1 + k * p.b_nb.x + mm.n0 * p.b_nb.y;
    if (NCOL == 1u) { return vec4<f32>(ldx(b), 0.0, 0.0, 0.0); }
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        if (mm.n0 + c < p.b_ne.y) { v[c] = ldx(b + c * p.b_nb.y); }
    }
    return v;
}

const WG: u32 = 64u;

// `Ids` (the invocation's builtins) and `wg_sum` come from reduce_subgroup.wgsl or
// reduce_workgroup.wgsl (device.rs picks one per adapter). The workgroup id stays a
// parameter of its own: Tint's uniformity analysis takes a struct with any per-invocation
// member as non-uniform, and the row test below must be uniform for wg_sum's barriers. Each invocation takes 4 neighbouring weights per step (so a
// block's scale is read once for them and the 64 invocations read 256 contiguous weights).
@compute @workgroup_size(64)
fn mul_mat_vec(@builtin(workgroup_id) wg: vec3<u32>, ids: Ids) {
    let li = ids.li;
    let m = wg_linear(wg);
    let mm = mm_setup(wg.z);
    x_prologue(li, mm.n0);
    if (m >= p.misc.z - p.misc.y) { return; }
    let row0 = mm.base0 + m * p.a_nb.y;
    let k4 = p.a_ne.x & ~3u;
    var acc = vec4<f32>(0.0);
    for (var k = 4u * li; k < k4; k += 4u * WG) {
        let w = deq4(row0, k);
        acc += w.x * xs4(k, mm) + w.y * xs4(k + 1u, mm) + w.z * xs4(k + 2u, mm) + w.w * xs4(k + 3u, mm);
    }
    // The last K % 4 weights (f32/f16/bf16 rows only: blocks hold multiples of 32).
    let kt = k4 + li;
    if (kt < p.a_ne.x) { acc += deq_one(row0, kt) * xs4(kt, mm); }
    let total = wg_sum(acc, ids);
    if (li == 0u) { store4(m, mm, total); }
}

// Chunks [g.x, g.y) of each row, against the 4 columns at once (one loop per chunk: Mesa's
// llvmpipe, under lavapipe, ends a shader's loops after 65535 iterations in all, so a row
// in one invocation is at most compute.rs's PART_CHUNKS chunks; a longer one is dispatched
// in parts, each after the first adding to dst).
@compute @workgroup_size(64)
fn mul_mat_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let m = wg_linear(wg) * 64u + li;
    let mm = mm_setup(wg.z);
    x_prologue(li, mm.n0);
    if (m >= p.misc.z - p.misc.y) { return; }
    x_cols = min(NCOL, p.b_ne.y - mm.n0);
    let row0 = mm.base0 + m * p.a_nb.y;
    let xb = mm.base1 + mm.n0 * p.b_nb.y;
    var acc = vec4<f32>(0.0);
    for (var ch = p.g.x; ch < p.g.y; ch++) {
        acc += dot_chunk(row0, ch, p.a_ne.x, xb + 32u * ch * p.b_nb.x, p.b_nb.x);
    }
    store4(m, mm, acc);
}
