// mul_mat for every src0 type (quantized ones dequantized in the shader) with f32 src1,
// few columns at a time: dst[m, n] = row m of src0 . row n of src1, src0 broadcast over
// dims 2 and 3. src0 rows [misc.y, misc.z) are bound in this part (large weights are
// split); workgroup z = (group of 4 columns, batch).
//
// mul_mat_vec: one workgroup per row, its 64 invocations taking 4 weights in every 256
// (so neighbouring invocations read neighbouring memory), then a subgroup or tree
// reduction: for GPUs.
// mul_mat_rows: one invocation per row and no workgroup memory: for CPU-based adapters,
// whose barriers cost more than the arithmetic.

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

// Chunk `ch` of row `row0` (its first unit) against column n; 0 past the last column.
fn col_dot(row0: u32, ch: u32, mm: Mm, n: u32) -> f32 {
    if (n >= p.b_ne.y) { return 0.0; }
    return dot_chunk(row0, ch, p.a_ne.x, mm.base1 + n * p.b_nb.y + 32u * ch * p.b_nb.x, p.b_nb.x);
}

// 1 when src1 has one column (generation): the other three dots are skipped outright.
override NCOL: u32 = 4u;

fn chunks4(row0: u32, ch: u32, mm: Mm) -> vec4<f32> {
    if (NCOL == 1u) { return vec4<f32>(col_dot(row0, ch, mm, mm.n0), 0.0, 0.0, 0.0); }
    return vec4<f32>(col_dot(row0, ch, mm, mm.n0), col_dot(row0, ch, mm, mm.n0 + 1u),
                     col_dot(row0, ch, mm, mm.n0 + 2u), col_dot(row0, ch, mm, mm.n0 + 3u));
}

fn store4(m: u32, mm: Mm, v: vec4<f32>) {
    let o = p.off.w + (p.misc.y + m) * p.d_nb.x + mm.i12 * p.d_nb.z + mm.i13 * p.d_nb.w;
    for (var c = 0u; c < 4u; c++) {
        if (mm.n0 + c < p.b_ne.y) { st_f32(o + (mm.n0 + c) * p.d_nb.y, v[c]); }
    }
}

// src1 at element k of the 4 columns (0 past the last column).
fn xs4(k: u32, mm: Mm) -> vec4<f32> {
    let b = mm.base1 + k * p.b_nb.x + mm.n0 * p.b_nb.y;
    if (NCOL == 1u) { return vec4<f32>(ld1_f32(b), 0.0, 0.0, 0.0); }
    var v = vec4<f32>(0.0);
    for (var c = 0u; c < 4u; c++) {
        if (mm.n0 + c < p.b_ne.y) { v[c] = ld1_f32(b + c * p.b_nb.y); }
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
    if (m >= p.misc.z - p.misc.y) { return; }
    let mm = mm_setup(wg.z);
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

@compute @workgroup_size(64)
fn mul_mat_rows(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let m = wg_linear(wg) * 64u + li;
    if (m >= p.misc.z - p.misc.y) { return; }
    let mm = mm_setup(wg.z);
    let row0 = mm.base0 + m * p.a_nb.y;
    var acc = vec4<f32>(0.0);
    for (var ch = 0u; ch * 32u < p.a_ne.x; ch++) { acc += chunks4(row0, ch, mm); }
    store4(m, mm, acc);
}
