// In-shader dequantization: 32 consecutive weights of a src0 row as f32.
// `base`: first unit of the row (element for f32/f16, byte for quantized types), `c`: the
// 32-element chunk of the row, `k_len`: row length (f32/f16 rows need not be a multiple of
// 32; the chunk's tail reads as 0). Block layouts are ggml's (crate/types.rs):
//   Q8_0 (34 B): d f16, qs[32] i8                       w = d * q
//   Q4_0 (18 B): d f16, qs[16] nibbles (lo: 0..16, hi: 16..32)   w = d * (q - 8)
//   Q4_K (144 B per 256): d, dmin f16, scales[12] (6-bit sc/m of 8 sub-blocks), qs[128]
//                          w = d * sc * q - dmin * m
//   Q6_K (210 B per 256): ql[128], qh[64], scales[16] i8, d f16   w = d * sc * (q - 32)

fn deq_chunk_f32(base: u32, c: u32, k_len: u32) -> array<f32, 32> {
    var w: array<f32, 32>;
    let k0 = c * 32u;
    for (var j = 0u; j < 32u; j++) {
        if (k0 + j < k_len) { w[j] = ld0_f32(base + k0 + j); }
    }
    return w;
}

fn deq_chunk_f16(base: u32, c: u32, k_len: u32) -> array<f32, 32> {
    var w: array<f32, 32>;
    let k0 = c * 32u;
    for (var j = 0u; j < 32u; j++) {
        if (k0 + j < k_len) { w[j] = ld0_f16(base + k0 + j); }
    }
    return w;
}

fn deq_chunk_q8_0(base: u32, c: u32, k_len: u32) -> array<f32, 32> {
    var w: array<f32, 32>;
    let o = base + c * 34u;
    let d = h0(o);
    for (var j = 0u; j < 32u; j++) { w[j] = d * f32(i8_0(o + 2u + j)); }
    return w;
}

fn deq_chunk_q4_0(base: u32, c: u32, k_len: u32) -> array<f32, 32> {
    var w: array<f32, 32>;
    let o = base + c * 18u;
    let d = h0(o);
    for (var j = 0u; j < 16u; j++) {
        let q = b0(o + 2u + j);
        w[j] = d * f32(i32(q & 15u) - 8);
        w[j + 16u] = d * f32(i32(q >> 4u) - 8);
    }
    return w;
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

fn deq_chunk_q4_k(base: u32, c: u32, k_len: u32) -> array<f32, 32> {
    var w: array<f32, 32>;
    let j = c % 8u; // sub-block
    let o = base + (c / 8u) * 144u;
    let sm = scale_min_k4(o + 4u, j);
    let dl = h0(o) * sm.x;
    let ml = h0(o + 2u) * sm.y;
    let q = o + 16u + 32u * (j / 2u);
    let sh = 4u * (j & 1u);
    for (var l = 0u; l < 32u; l++) {
        w[l] = dl * f32((b0(q + l) >> sh) & 15u) - ml;
    }
    return w;
}

fn deq_chunk_q6_k(base: u32, c: u32, k_len: u32) -> array<f32, 32> {
    var w: array<f32, 32>;
    let cc = c % 8u;
    let n = cc / 4u; // which 128-element half
    let g = cc % 4u; // which 32-element quarter of it
    let o = base + (c / 8u) * 210u;
    let d = h0(o + 208u);
    let ql = o + 64u * n + 32u * (g & 1u);
    let qlsh = 4u * (g >> 1u);
    let qh = o + 128u + 32u * n;
    let sc = o + 192u + 8u * n + 2u * g;
    for (var l = 0u; l < 32u; l++) {
        let lo = (b0(ql + l) >> qlsh) & 15u;
        let hi = (b0(qh + l) >> (2u * g)) & 3u;
        w[l] = d * f32(i8_0(sc + l / 16u)) * f32(i32(lo | (hi << 4u)) - 32);
    }
    return w;
}
