// mul_mat for any src0 type and f32 src1 with many columns (prompts) on GPUs: 64x64 output
// tiles, 16x16 invocations computing 4x4 each (rows lid.y + 16i, columns lid.x + 16j, so
// that the inner loop's tile reads are broadcasts or consecutive), k in steps of 16
// through workgroup memory. Each invocation loads 4 consecutive k of one row of each tile
// (`deq4`: a block's scales once for the four). `tile_t` is f16 for F16 weights with
// shader-f16 (exact, half the workgroup memory), else f32; sums are f32.
// dst[m, n] = row m of src0 . row n of src1; src0 broadcast over dims 2 and 3.
// src0 rows [misc.y, misc.z) are bound in this part (large weights are split), and k runs
// over chunks [g.x, g.y) of 32 (a long row is dispatched in parts, each after the first
// adding to dst: Mesa's llvmpipe ends a shader's loops after 65535 iterations in all).

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;
var<workgroup> ta: array<tile_t, 1024>; // [TK][TM]
var<workgroup> tb: array<f32, 1024>;    // [TK][TN]

struct Tile {
    m0: u32,
    n0: u32,
    i12: u32,
    i13: u32,
}

// Row m's 4 outputs at columns n0 + lid.x + 16j (those inside dst).
fn store_row(t: Tile, m: u32, lx: u32, v: vec4<f32>) {
    if (m >= p.misc.z - p.misc.y) { return; }
    let o = p.off.w + (p.misc.y + m) * p.d_nb.x + t.i12 * p.d_nb.z + t.i13 * p.d_nb.w;
    for (var j = 0u; j < 4u; j++) {
        let n = t.n0 + lx + 16u * j;
        if (n < p.b_ne.y) {
            var y = v[j];
            if (p.g.x > 0u) { y += bitcast<f32>(dst[o + n * p.d_nb.y]); }
            st_f32(o + n * p.d_nb.y, y);
        }
    }
}

@compute @workgroup_size(16, 16)
fn mul_mat_tiled(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let rows = p.misc.z - p.misc.y;
    let t = Tile(wg.x * TM, wg.y * TN, wg.z % p.b_ne.z, wg.z / p.b_ne.z);
    let i02 = t.i12 / (p.b_ne.z / p.a_ne.z);
    let i03 = t.i13 / (p.b_ne.w / p.a_ne.w);
    let base0 = p.off.x + i02 * p.a_nb.z + i03 * p.a_nb.w;
    let base1 = p.off.y + t.i12 * p.b_nb.z + t.i13 * p.b_nb.w;
    let k_len = p.a_ne.x;
    // This invocation's loads: k lk..lk+4 of tile row lr (of both tiles).
    let lr = li / 4u;
    let lk = (li % 4u) * 4u;
    let am = t.m0 + lr;
    let bn = t.n0 + lr;
    let ra = base0 + am * p.a_nb.y;
    let rb = base1 + bn * p.b_nb.y;
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    let k_end = min(p.g.y * 32u, k_len);
    for (var k0 = p.g.x * 32u; k0 < k_end; k0 += TK) {
        let k = k0 + lk;
        var av = vec4<f32>(0.0);
        if (am < rows && k < k_len) {
            if (k + 4u <= k_len) {
                av = deq4(ra, k);
            } else {
                // A ragged end (f32/f16/bf16 rows whose length is not a multiple of 4).
                for (var c = 0u; c < 4u; c++) {
                    if (k + c < k_len) { av[c] = deq_one(ra, k + c); }
                }
            }
        }
        var bv = vec4<f32>(0.0);
        if (bn < p.b_ne.y) {
            for (var c = 0u; c < 4u; c++) {
                if (k + c < k_len) { bv[c] = ld1_f32(rb + (k + c) * p.b_nb.x); }
            }
        }
        for (var c = 0u; c < 4u; c++) {
            ta[(lk + c) * TM + lr] = tile_t(av[c]);
            tb[(lk + c) * TN + lr] = bv[c];
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let ar = kk * TM + lid.y;
            let a = vec4<f32>(f32(ta[ar]), f32(ta[ar + 16u]), f32(ta[ar + 32u]), f32(ta[ar + 48u]));
            let br = kk * TN + lid.x;
            let b = vec4<f32>(tb[br], tb[br + 16u], tb[br + 32u], tb[br + 48u]);
            c0 += a.x * b;
            c1 += a.y * b;
            c2 += a.z * b;
            c3 += a.w * b;
        }
        workgroupBarrier();
    }
    store_row(t, t.m0 + lid.y, lid.x, c0);
    store_row(t, t.m0 + lid.y + 16u, lid.x, c1);
    store_row(t, t.m0 + lid.y + 32u, lid.x, c2);
    store_row(t, t.m0 + lid.y + 48u, lid.x, c3);
}
