// mul_mat for any src0 type and f32 src1 with many columns (prompts) on GPUs: 32x32 output tiles,
// 16x16 invocations computing 2x2 each, k in steps of 16 through workgroup memory.
// dst[m, n] = row m of src0 . row n of src1; src0 broadcast over dims 2 and 3.
// src0 rows [misc.y, misc.z) are bound in this part (large weights are split).

const TM: u32 = 32u;
const TN: u32 = 32u;
const TK: u32 = 16u;
var<workgroup> ta: array<f32, 512>; // [TM][TK]
var<workgroup> tb: array<f32, 512>; // [TN][TK]

@compute @workgroup_size(16, 16)
fn mul_mat_tiled(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let rows = p.misc.z - p.misc.y;
    let m0 = wg.x * TM;
    let n0 = wg.y * TN;
    let i12 = wg.z % p.b_ne.z;
    let i13 = wg.z / p.b_ne.z;
    let i02 = i12 / (p.b_ne.z / p.a_ne.z);
    let i03 = i13 / (p.b_ne.w / p.a_ne.w);
    let base0 = p.off.x + i02 * p.a_nb.z + i03 * p.a_nb.w;
    let base1 = p.off.y + i12 * p.b_nb.z + i13 * p.b_nb.w;
    let k_len = p.a_ne.x;
    var acc = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k_len; k0 += TK) {
        for (var r = 0u; r < 2u; r++) {
            let e = li + 256u * r;
            let mm = e / TK;
            let k = k0 + e % TK;
            var av = 0.0;
            if (m0 + mm < rows && k < k_len) { av = deq_one(base0 + (m0 + mm) * p.a_nb.y, k); }
            ta[e] = av;
            var bv = 0.0;
            if (n0 + mm < p.b_ne.y && k < k_len) { bv = ld1_f32(base1 + (n0 + mm) * p.b_nb.y + k * p.b_nb.x); }
            tb[e] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let a0 = ta[(lid.y * 2u) * TK + kk];
            let a1 = ta[(lid.y * 2u + 1u) * TK + kk];
            let c0 = tb[(lid.x * 2u) * TK + kk];
            let c1 = tb[(lid.x * 2u + 1u) * TK + kk];
            acc += vec4<f32>(a0 * c0, a0 * c1, a1 * c0, a1 * c1);
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 2u; i++) {
        for (var j = 0u; j < 2u; j++) {
            let m = m0 + lid.y * 2u + i;
            let n = n0 + lid.x * 2u + j;
            if (m < rows && n < p.b_ne.y) {
                let o = p.off.w + (p.misc.y + m) * p.d_nb.x + n * p.d_nb.y + i12 * p.d_nb.z + i13 * p.d_nb.w;
                st_f32(o, acc[i * 2u + j]);
            }
        }
    }
}
