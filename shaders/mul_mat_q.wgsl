// mul_mat, matrix-vector style, for every src0 type (quantized ones dequantized in the
// shader, 32 weights at a time) with f32 src1: dst[m, n] = row m of src0 . row n of src1.
// One workgroup per (src0 row m, group of NC columns n, batch): each weight chunk is
// dequantized once and used for NC columns. Used for N = 1 (generation) and quantized
// weights at any N. src0 rows [misc.y, misc.z) are bound in this part (large weights).

const WG: u32 = 64u;
const NC: u32 = 8u;
var<workgroup> red: array<f32, 512>; // NC * WG

@compute @workgroup_size(64)
fn mul_mat_vec(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let m = wg_linear(wg);
    if (m >= p.misc.z - p.misc.y) { return; }
    let ncg = (p.b_ne.y + NC - 1u) / NC;
    let n0 = (wg.z % ncg) * NC;
    let bz = wg.z / ncg;
    let i12 = bz % p.b_ne.z;
    let i13 = bz / p.b_ne.z;
    let i02 = i12 / (p.b_ne.z / p.a_ne.z);
    let i03 = i13 / (p.b_ne.w / p.a_ne.w);
    let base0 = p.off.x + m * p.a_nb.y + i02 * p.a_nb.z + i03 * p.a_nb.w;
    let base1 = p.off.y + i12 * p.b_nb.z + i13 * p.b_nb.w;
    let k_len = p.a_ne.x;
    var acc: array<f32, NC>;
    for (var ch = li; ch * 32u < k_len; ch += WG) {
        let w = deq_chunk(base0, ch, k_len);
        let kmax = min(32u, k_len - ch * 32u);
        for (var c = 0u; c < NC; c++) {
            let n = n0 + c;
            if (n < p.b_ne.y) {
                let b = base1 + n * p.b_nb.y + ch * 32u * p.b_nb.x;
                var s = 0.0;
                for (var j = 0u; j < kmax; j++) { s += w[j] * ld1_f32(b + j * p.b_nb.x); }
                acc[c] += s;
            }
        }
    }
    for (var c = 0u; c < NC; c++) { red[c * WG + li] = acc[c]; }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (li < s) {
            for (var c = 0u; c < NC; c++) { red[c * WG + li] += red[c * WG + li + s]; }
        }
        workgroupBarrier();
    }
    if (li < NC && n0 + li < p.b_ne.y) {
        let o = p.off.w + (p.misc.y + m) * p.d_nb.x + (n0 + li) * p.d_nb.y + i12 * p.d_nb.z + i13 * p.d_nb.w;
        st_f32(o, red[li * WG]);
    }
}
