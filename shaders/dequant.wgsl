// Weights of a src0 row as f32, one element (`deq_one_*`) or as the dot products of a
// 32-element chunk with up to 4 columns of f32 activations in src1 (`dot_chunk_*`, read
// through `ldx4`: one lane per column; the chunk's weights are dequantized once for the
// four, its scales read once and factored out of the sums). No private arrays: CPU-based
// adapters (lavapipe, SwiftShader) run array-indexing kernels an order of magnitude slower.
//
// `base`: first unit of the row (element for f32/f16, byte for quantized types); `k`: the
// element; `c`: the chunk (elements 32c..32c+32); `k_len`: row length (f32/f16 rows need
// not be a multiple of 32); `xb`, `xs`: src1 index of element 32c of the first column and
// its stride.
// Block layouts are ggml's (crate/types.rs):
//   Q8_0 (34 B per 32): d f16, qs[32] i8                          w = d * q
//   Q4_0 (18 B per 32): d f16, qs[16] nibbles (lo: 0..16, hi: 16..32)  w = d * (q - 8)
//   Q4_1 (20 B per 32): d, m f16, qs[16] as Q4_0                    w = d * q + m
//   Q5_0 (22 B per 32): d f16, qh u32 (bit j: 5th bit of q[j]), qs[16]  w = d * (q - 16)
//   Q5_1 (24 B per 32): d, m f16, qh, qs[16]                        w = d * q + m
//   Q2_K (84 B per 256): scales[16] (lo nibble sc, hi nibble m), qs[64] 2-bit, d, dmin f16
//                          w = d * sc * q - dmin * m
//   Q3_K (110 B per 256): hmask[32], qs[64] 2-bit, scales[12] (16 packed 6-bit), d f16
//                          w = d * (sc - 32) * (q - (high bit clear ? 4 : 0))
//   Q4_K (144 B per 256): d, dmin f16, scales[12] (6-bit sc/m of 8 sub-blocks), qs[128]
//                          w = d * sc * q - dmin * m
//   Q5_K (176 B per 256): d, dmin f16, scales[12] as Q4_K, qh[32], qs[128]  as Q4_K, 5-bit q
//   Q6_K (210 B per 256): ql[128], qh[64], scales[16] i8, d f16      w = d * sc * (q - 32)

fn chunk_len(c: u32, k_len: u32) -> u32 { return min(32u, k_len - 32u * c); }

fn deq_one_f32(base: u32, k: u32) -> f32 { return ld0_f32(base + k); }
fn deq_one_f16(base: u32, k: u32) -> f32 { return ld0_f16(base + k); }
// bf16 element i (in 2-byte units): the top half of an f32.
fn ld0_bf16(i: u32) -> f32 { return bitcast<f32>(((w0(i >> 1u) >> ((i & 1u) * 16u)) & 0xffffu) << 16u); }
fn deq_one_bf16(base: u32, k: u32) -> f32 { return ld0_bf16(base + k); }

fn dot_chunk_f32(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + 32u * c;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < chunk_len(c, k_len); j++) { s += ld0_f32(o + j) * ldx4(xb + j * xs); }
    return s;
}

fn dot_chunk_f16(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + 32u * c;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < chunk_len(c, k_len); j++) { s += ld0_f16(o + j) * ldx4(xb + j * xs); }
    return s;
}

fn dot_chunk_bf16(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + 32u * c;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < chunk_len(c, k_len); j++) { s += ld0_bf16(o + j) * ldx4(xb + j * xs); }
    return s;
}

fn deq_one_q8_0(base: u32, k: u32) -> f32 {
    let o = base + (k / 32u) * 34u;
    return h0(o) * f32(i8_0(o + 2u + k % 32u));
}

fn dot_chunk_q8_0(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + c * 34u;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 32u; j++) { s += f32(i8_0(o + 2u + j)) * ldx4(xb + j * xs); }
    return h0(o) * s;
}

fn deq_one_q4_0(base: u32, k: u32) -> f32 {
    let o = base + (k / 32u) * 18u;
    let j = k % 32u;
    let q = b0(o + 2u + j % 16u) >> (4u * (j / 16u));
    return h0(o) * f32(i32(q & 15u) - 8);
}

fn dot_chunk_q4_0(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + c * 18u;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 16u; j++) {
        let q = b0(o + 2u + j);
        s += f32(i32(q & 15u) - 8) * ldx4(xb + j * xs) + f32(i32(q >> 4u) - 8) * ldx4(xb + (j + 16u) * xs);
    }
    return h0(o) * s;
}

// The 6-bit scale and min of sub-block j (0..8) of a K-quant super-block; `o`: scales[0].
fn scale_min_k4(o: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(b0(o + j) & 63u), f32(b0(o + j + 4u) & 63u));
    }
    let sc = (b0(o + j + 4u) & 15u) | ((b0(o + j - 4u) >> 6u) << 4u);
    let m = (b0(o + j + 4u) >> 4u) | ((b0(o + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(m));
}

fn deq_one_q4_k(base: u32, k: u32) -> f32 {
    let o = base + (k / 256u) * 144u;
    let r = k % 256u;
    let j = r / 32u; // sub-block
    let sm = scale_min_k4(o + 4u, j);
    let q = (b0(o + 16u + 32u * (j / 2u) + r % 32u) >> (4u * (j & 1u))) & 15u;
    return h0(o) * sm.x * f32(q) - h0(o + 2u) * sm.y;
}

fn dot_chunk_q4_k(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let j = c % 8u; // sub-block
    let o = base + (c / 8u) * 144u;
    let sm = scale_min_k4(o + 4u, j);
    let q = o + 16u + 32u * (j / 2u);
    let sh = 4u * (j & 1u);
    var sq = vec4<f32>(0.0); // sum q * x
    var sx = vec4<f32>(0.0); // sum x
    for (var l = 0u; l < 32u; l++) {
        let x = ldx4(xb + l * xs);
        sq += f32((b0(q + l) >> sh) & 15u) * x;
        sx += x;
    }
    return h0(o) * sm.x * sq - h0(o + 2u) * sm.y * sx;
}

// Element l (0..32) of quarter g (0..4) of half n (0..2) of a Q6_K super-block at `o`,
// without d and the scale: q - 32.
fn q6_k_q(o: u32, n: u32, g: u32, l: u32) -> f32 {
    let lo = (b0(o + 64u * n + 32u * (g & 1u) + l) >> (4u * (g >> 1u))) & 15u;
    let hi = (b0(o + 128u + 32u * n + l) >> (2u * g)) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

fn deq_one_q6_k(base: u32, k: u32) -> f32 {
    let o = base + (k / 256u) * 210u;
    let r = k % 256u;
    let n = r / 128u;
    let g = (r % 128u) / 32u;
    let l = r % 32u;
    return h0(o + 208u) * f32(i8_0(o + 192u + 8u * n + 2u * g + l / 16u)) * q6_k_q(o, n, g, l);
}

fn dot_chunk_q6_k(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let cc = c % 8u;
    let n = cc / 4u;
    let g = cc % 4u;
    let o = base + (c / 8u) * 210u;
    var s0 = vec4<f32>(0.0); // l < 16: scale 2g
    var s1 = vec4<f32>(0.0); // l >= 16: scale 2g + 1
    for (var l = 0u; l < 16u; l++) {
        s0 += q6_k_q(o, n, g, l) * ldx4(xb + l * xs);
        s1 += q6_k_q(o, n, g, l + 16u) * ldx4(xb + (l + 16u) * xs);
    }
    let sc = o + 192u + 8u * n + 2u * g;
    return h0(o + 208u) * (f32(i8_0(sc)) * s0 + f32(i8_0(sc + 1u)) * s1);
}

// Bit j (0..32) of the u32 at byte `o` (Q5_0/Q5_1's qh, at a 2-byte boundary).
fn bit_at(o: u32, j: u32) -> u32 { return (b0(o + j / 8u) >> (j % 8u)) & 1u; }

// The 4-bit (or, with the qh bit at `qh`, 5-bit) quant j (0..32) of a legacy block whose
// nibbles start at byte `qs`.
fn q_legacy(qs: u32, j: u32) -> u32 { return (b0(qs + j % 16u) >> (4u * (j / 16u))) & 15u; }

fn deq_one_q4_1(base: u32, k: u32) -> f32 {
    let o = base + (k / 32u) * 20u;
    return h0(o) * f32(q_legacy(o + 4u, k % 32u)) + h0(o + 2u);
}

fn dot_chunk_q4_1(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + c * 20u;
    var sq = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    for (var j = 0u; j < 32u; j++) {
        let x = ldx4(xb + j * xs);
        sq += f32(q_legacy(o + 4u, j)) * x;
        sx += x;
    }
    return h0(o) * sq + h0(o + 2u) * sx;
}

fn deq_one_q5_0(base: u32, k: u32) -> f32 {
    let o = base + (k / 32u) * 22u;
    let j = k % 32u;
    return h0(o) * f32(i32(q_legacy(o + 6u, j) | (bit_at(o + 2u, j) << 4u)) - 16);
}

fn dot_chunk_q5_0(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + c * 22u;
    var s = vec4<f32>(0.0);
    for (var j = 0u; j < 32u; j++) {
        s += f32(i32(q_legacy(o + 6u, j) | (bit_at(o + 2u, j) << 4u)) - 16) * ldx4(xb + j * xs);
    }
    return h0(o) * s;
}

fn deq_one_q5_1(base: u32, k: u32) -> f32 {
    let o = base + (k / 32u) * 24u;
    let j = k % 32u;
    return h0(o) * f32(q_legacy(o + 8u, j) | (bit_at(o + 4u, j) << 4u)) + h0(o + 2u);
}

fn dot_chunk_q5_1(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let o = base + c * 24u;
    var sq = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    for (var j = 0u; j < 32u; j++) {
        let x = ldx4(xb + j * xs);
        sq += f32(q_legacy(o + 8u, j) | (bit_at(o + 4u, j) << 4u)) * x;
        sx += x;
    }
    return h0(o) * sq + h0(o + 2u) * sx;
}

// Q2_K/Q3_K: the 2 low bits of element l (0..32) of quarter g (0..4) of half n (0..2),
// `qs`: the block's qs[0].
fn q2_low(qs: u32, n: u32, g: u32, l: u32) -> u32 { return (b0(qs + 32u * n + l) >> (2u * g)) & 3u; }

fn deq_one_q2_k(base: u32, k: u32) -> f32 {
    let o = base + (k / 256u) * 84u;
    let r = k % 256u;
    let sc = b0(o + r / 16u);
    let q = q2_low(o + 16u, r / 128u, (r % 128u) / 32u, r % 32u);
    return h0(o + 80u) * f32(sc & 15u) * f32(q) - h0(o + 82u) * f32(sc >> 4u);
}

fn dot_chunk_q2_k(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let cc = c % 8u;
    let o = base + (c / 8u) * 84u;
    var sq0 = vec4<f32>(0.0); // l < 16: sub-block 2cc
    var sq1 = vec4<f32>(0.0); // l >= 16: sub-block 2cc + 1
    var sx0 = vec4<f32>(0.0);
    var sx1 = vec4<f32>(0.0);
    for (var l = 0u; l < 16u; l++) {
        let x0 = ldx4(xb + l * xs);
        let x1 = ldx4(xb + (l + 16u) * xs);
        sq0 += f32(q2_low(o + 16u, cc / 4u, cc % 4u, l)) * x0;
        sq1 += f32(q2_low(o + 16u, cc / 4u, cc % 4u, l + 16u)) * x1;
        sx0 += x0;
        sx1 += x1;
    }
    let s0 = b0(o + 2u * cc);
    let s1 = b0(o + 2u * cc + 1u);
    let d = h0(o + 80u);
    let dmin = h0(o + 82u);
    return d * (f32(s0 & 15u) * sq0 + f32(s1 & 15u) * sq1) - dmin * (f32(s0 >> 4u) * sx0 + f32(s1 >> 4u) * sx1);
}

// The scale (sc - 32) of sub-block j (0..16) of a Q3_K block; `o`: scales[0].
fn q3_k_scale(o: u32, j: u32) -> f32 {
    let lo = (b0(o + j % 8u) >> (4u * (j / 8u))) & 15u;
    let hi = (b0(o + 8u + j % 4u) >> (2u * (j / 4u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

// Element l of quarter g of half n of a Q3_K block at `o`, without the scale: -4..4.
fn q3_k_q(o: u32, n: u32, g: u32, l: u32) -> f32 {
    let hi = (b0(o + l) >> (4u * n + g)) & 1u;
    return f32(i32(q2_low(o + 32u, n, g, l)) - 4 * i32(1u - hi));
}

fn deq_one_q3_k(base: u32, k: u32) -> f32 {
    let o = base + (k / 256u) * 110u;
    let r = k % 256u;
    return h0(o + 108u) * q3_k_scale(o + 96u, r / 16u) * q3_k_q(o, r / 128u, (r % 128u) / 32u, r % 32u);
}

fn dot_chunk_q3_k(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let cc = c % 8u;
    let o = base + (c / 8u) * 110u;
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    for (var l = 0u; l < 16u; l++) {
        s0 += q3_k_q(o, cc / 4u, cc % 4u, l) * ldx4(xb + l * xs);
        s1 += q3_k_q(o, cc / 4u, cc % 4u, l + 16u) * ldx4(xb + (l + 16u) * xs);
    }
    return h0(o + 108u) * (q3_k_scale(o + 96u, 2u * cc) * s0 + q3_k_scale(o + 96u, 2u * cc + 1u) * s1);
}

// The 5-bit quant of element l (0..32) of sub-block j (0..8) of a Q5_K block at `o`.
fn q5_k_q(o: u32, j: u32, l: u32) -> f32 {
    let lo = (b0(o + 48u + 32u * (j / 2u) + l) >> (4u * (j & 1u))) & 15u;
    return f32(lo | (((b0(o + 16u + l) >> j) & 1u) << 4u));
}

fn deq_one_q5_k(base: u32, k: u32) -> f32 {
    let o = base + (k / 256u) * 176u;
    let r = k % 256u;
    let j = r / 32u;
    let sm = scale_min_k4(o + 4u, j);
    return h0(o) * sm.x * q5_k_q(o, j, r % 32u) - h0(o + 2u) * sm.y;
}

fn dot_chunk_q5_k(base: u32, c: u32, k_len: u32, xb: u32, xs: u32) -> vec4<f32> {
    let j = c % 8u;
    let o = base + (c / 8u) * 176u;
    let sm = scale_min_k4(o + 4u, j);
    var sq = vec4<f32>(0.0);
    var sx = vec4<f32>(0.0);
    for (var l = 0u; l < 32u; l++) {
        let x = ldx4(xb + l * xs);
        sq += q5_k_q(o, j, l) * x;
        sx += x;
    }
    return h0(o) * sm.x * sq - h0(o + 2u) * sm.y * sx;
}

// Four consecutive weights k..k+4 of a row (`deq4_*`; k a multiple of 4 and k + 3 inside
// the row), for the tiled and mat-vec kernels: a block's scales are read once for the four
// (the same f32 products as `deq_one_*`), f16 pairs come from one word each when aligned.
fn deq4_each(base: u32, k: u32) -> vec4<f32> {
    return vec4<f32>(deq_one(base, k), deq_one(base, k + 1u), deq_one(base, k + 2u), deq_one(base, k + 3u));
}
fn deq4_f32(base: u32, k: u32) -> vec4<f32> {
    let o = base + k;
    return vec4<f32>(ld0_f32(o), ld0_f32(o + 1u), ld0_f32(o + 2u), ld0_f32(o + 3u));
}
fn deq4_f16(base: u32, k: u32) -> vec4<f32> {
    let o = base + k;
    if ((o & 1u) == 0u) { return vec4<f32>(unpack2x16float(w0(o >> 1u)), unpack2x16float(w0((o >> 1u) + 1u))); }
    return vec4<f32>(ld0_f16(o), ld0_f16(o + 1u), ld0_f16(o + 2u), ld0_f16(o + 3u));
}
fn deq4_bf16(base: u32, k: u32) -> vec4<f32> { return deq4_each(base, k); }
fn deq4_q8_0(base: u32, k: u32) -> vec4<f32> {
    let o = base + (k / 32u) * 34u;
    let q = o + 2u + k % 32u;
    return h0(o) * vec4<f32>(f32(i8_0(q)), f32(i8_0(q + 1u)), f32(i8_0(q + 2u)), f32(i8_0(q + 3u)));
}
// The 4 nibbles j..j+4 (j % 4 == 0) of a legacy block whose nibbles start at byte `qs`.
fn nib4(qs: u32, j: u32) -> vec4<u32> {
    let q = qs + j % 16u;
    let sh = 4u * (j / 16u);
    return (vec4<u32>(b0(q), b0(q + 1u), b0(q + 2u), b0(q + 3u)) >> vec4<u32>(sh)) & vec4<u32>(15u);
}
fn deq4_q4_0(base: u32, k: u32) -> vec4<f32> {
    let o = base + (k / 32u) * 18u;
    return h0(o) * vec4<f32>(vec4<i32>(nib4(o + 2u, k % 32u)) - vec4<i32>(8));
}
fn deq4_q4_1(base: u32, k: u32) -> vec4<f32> {
    let o = base + (k / 32u) * 20u;
    return h0(o) * vec4<f32>(nib4(o + 4u, k % 32u)) + vec4<f32>(h0(o + 2u));
}
fn deq4_q5_0(base: u32, k: u32) -> vec4<f32> { return deq4_each(base, k); }
fn deq4_q5_1(base: u32, k: u32) -> vec4<f32> { return deq4_each(base, k); }
fn deq4_q2_k(base: u32, k: u32) -> vec4<f32> { return deq4_each(base, k); }
fn deq4_q3_k(base: u32, k: u32) -> vec4<f32> { return deq4_each(base, k); }
fn deq4_q4_k(base: u32, k: u32) -> vec4<f32> {
    let o = base + (k / 256u) * 144u;
    let r = k % 256u;
    let j = r / 32u; // sub-block
    let sm = scale_min_k4(o + 4u, j);
    let q = o + 16u + 32u * (j / 2u) + r % 32u;
    let sh = 4u * (j & 1u);
    let qv = (vec4<u32>(b0(q), b0(q + 1u), b0(q + 2u), b0(q + 3u)) >> vec4<u32>(sh)) & vec4<u32>(15u);
    return h0(o) * sm.x * vec4<f32>(qv) - vec4<f32>(h0(o + 2u) * sm.y);
}
fn deq4_q5_k(base: u32, k: u32) -> vec4<f32> { return deq4_each(base, k); }
fn deq4_q6_k(base: u32, k: u32) -> vec4<f32> { return deq4_each(base, k); }
