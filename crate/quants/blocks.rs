//! ggml's block structs, byte for byte (ggml-common.h), and the scalar conversions of
//! their f16/bf16 fields.
//!
//! Every field is a byte array, so each struct has alignment 1: a row slice at any
//! offset casts to `&[BlockQ8_0]` etc. with no alignment failure. Multi-byte fields are
//! little-endian, as in the files ggml writes.
//!
//! ```
//! use ggweb::quants::blocks::{BlockQ8_0, fp16_to_fp32};
//! let row = [0x00u8, 0x3c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
//!            17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 0x80];
//! let blocks: &[BlockQ8_0] = bytemuck::cast_slice(&row);
//! assert_eq!(fp16_to_fp32(blocks[0].d()), 1.0); // 0x3c00 = f16 1.0
//! assert_eq!(blocks[0].qs[31], -128);
//! ```

use bytemuck::{Pod, Zeroable};

use crate::types::{QK, QK_K};

/// ggml's `K_SCALE_SIZE`: the packed 6-bit scales and mins of a Q4_K block.
pub const K_SCALE_SIZE: usize = 12;

#[inline(always)]
fn u16_le(b: [u8; 2]) -> u16 {
    u16::from_le_bytes(b)
}

/// block_q4_0: 32 weights `d * (q - 8)`, q in 0..16; byte j holds q[j] (low nibble) and
/// q[j + 16] (high nibble).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// block_q4_1: 32 weights `d * q + m`, q in 0..16, same nibble order as Q4_0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// block_q5_0: 32 weights `d * (q - 16)`, q in 0..32: low 4 bits as Q4_0, bit 4 of q[j]
/// in bit j of the little-endian u32 `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// block_q5_1: 32 weights `d * q + m`, q in 0..32, bits as Q5_0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// block_q8_0: 32 weights `d * q`, q an i8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; QK],
}

/// block_q8_1: Q4_1's and Q5_1's activation type. 32 values `d * q`, and `s = d · Σq`
/// (with d before its f16 rounding), which the `d·q + m` dot products use for `m · Σy`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: [u8; 2],
    pub s: [u8; 2],
    pub qs: [i8; QK],
}

/// block_q2_K: 256 weights in 16 sub-blocks of 16, `d * (scales[j] & 0xF) * q - dmin *
/// (scales[j] >> 4)`, q 2 bits (layout in [`BlockQ2_K::q`]).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2_K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// block_q3_K: 256 weights in 16 sub-blocks of 16, `d * (sc[j] - 32) * q`, q in -4..4: 2
/// low bits in `qs` (as Q2_K), and a high bit in `hmask` that, when clear, subtracts 4;
/// 6-bit sc packed in `scales` (see [`BlockQ3_K::scales6`]).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3_K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}

/// block_q4_K: 256 weights in 8 sub-blocks of 32, `d * sc[j] * q - dmin * m[j]` with 6-bit
/// sc/m packed in `scales` (see [`BlockQ4_K::scale_min`]); each 64 weights take 32 bytes
/// of `qs`, the first 32 in the low nibbles, the next 32 in the high ones.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// block_q5_K: 256 weights as Q4_K (same scales and mins) with a fifth bit per quant in
/// `qh`: bit `2c + h` of `qh[l]` for element `64c + 32h + l`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// block_q6_K: 256 weights in 16 sub-blocks of 16, `d * scales[j] * (q - 32)`, q 6 bits:
/// low 4 in `ql`, high 2 in `qh` (layout in [`BlockQ6_K::q`]).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6_K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: [u8; 2],
}

/// block_q8_K: the K-quants' activation type. f32 scale, 256 i8, and the sums of each 16
/// quants (which the Q4_K dot product uses for its mins).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_K {
    pub d: [u8; 4],
    pub qs: [i8; QK_K],
    pub bsums: [[u8; 2]; QK_K / 16],
}

impl BlockQ4_0 {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
}

impl BlockQ4_1 {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn m(&self) -> u16 {
        u16_le(self.m)
    }
}

impl BlockQ5_0 {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn qh(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

impl BlockQ5_1 {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn m(&self) -> u16 {
        u16_le(self.m)
    }
    #[inline(always)]
    pub fn qh(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

impl BlockQ8_0 {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
}

/// ggml's get_scale_min_k4 for sub-block `j` (0..8) of a Q4_K/Q5_K block: the 6-bit
/// (scale, min). Bytes 0..4 hold scales 0..4 and bytes 4..8 mins 0..4 in their low 6
/// bits; scales and mins 4..8 keep their low 4 bits in bytes 8..12 and their top 2 bits
/// in the spare top bits of bytes 0..4 (scales) and 4..8 (mins).
#[inline(always)]
pub fn scale_min_k4(q: &[u8; K_SCALE_SIZE], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// All 8 (scales, mins) of [`scale_min_k4`].
#[inline(always)]
pub fn scales_mins_k4(q: &[u8; K_SCALE_SIZE]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        (sc[j], m[j]) = scale_min_k4(q, j);
    }
    (sc, m)
}

impl BlockQ8_1 {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn s(&self) -> u16 {
        u16_le(self.s)
    }
}

impl BlockQ2_K {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn dmin(&self) -> u16 {
        u16_le(self.dmin)
    }

    /// The 2-bit quant of element `i` (0..256). Each 128 elements use 32 bytes of `qs`:
    /// element `l + 32k` (l < 32, k < 4) is bits `2k..2k+2` of `qs[l]`.
    #[inline(always)]
    pub fn q(&self, i: usize) -> u8 {
        let (half, r) = (i / 128, i % 128);
        (self.qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3
    }
}

impl BlockQ3_K {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }

    /// The 16 unsigned 6-bit scales (0..64; the weight scale is `sc - 32`). Scale `j`
    /// keeps its low 4 bits in the low (j < 8) or high (j ≥ 8) nibble of byte `j % 8`,
    /// and its top 2 bits in bits `2(j / 4)..` of byte `8 + j % 4`.
    #[inline(always)]
    pub fn scales6(&self) -> [u8; 16] {
        let b = &self.scales;
        let mut sc = [0u8; 16];
        for (j, s) in sc.iter_mut().enumerate() {
            let lo = if j < 8 { b[j] & 0xF } else { b[j - 8] >> 4 };
            let hi = (b[8 + j % 4] >> (2 * (j / 4))) & 3;
            *s = lo | (hi << 4);
        }
        sc
    }

    /// The signed quant (-4..4) of element `i`: the 2 low bits as in [`BlockQ2_K::q`], minus
    /// 4 when bit `4(i / 128) + (i % 128) / 32` of `hmask[i % 32]` is clear.
    #[inline(always)]
    pub fn q(&self, i: usize) -> i8 {
        let (half, r) = (i / 128, i % 128);
        let (k, l) = (r / 32, r % 32);
        let lo = (self.qs[half * 32 + l] >> (2 * k)) & 3;
        let hi = (self.hmask[l] >> (4 * half + k)) & 1;
        lo as i8 - if hi == 0 { 4 } else { 0 }
    }
}

impl BlockQ4_K {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn dmin(&self) -> u16 {
        u16_le(self.dmin)
    }

    /// [`scale_min_k4`] of this block.
    #[inline(always)]
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        scale_min_k4(&self.scales, j)
    }

    /// All 8 (scales, mins).
    #[inline(always)]
    pub fn scales_mins(&self) -> ([u8; 8], [u8; 8]) {
        scales_mins_k4(&self.scales)
    }
}

impl BlockQ5_K {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn dmin(&self) -> u16 {
        u16_le(self.dmin)
    }

    /// [`scale_min_k4`] of this block.
    #[inline(always)]
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        scale_min_k4(&self.scales, j)
    }

    /// The unsigned 5-bit quant of element `i` (0..256).
    #[inline(always)]
    pub fn q(&self, i: usize) -> u8 {
        let (c, h, l) = (i / 64, (i % 64) / 32, i % 32);
        let ql = self.qs[32 * c + l];
        let lo = if h == 0 { ql & 0xF } else { ql >> 4 };
        lo | (((self.qh[l] >> (2 * c + h)) & 1) << 4)
    }
}

impl BlockQ6_K {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }

    /// The unsigned 6-bit quant of element `i` (0..256). Each half of 128 uses 64 bytes
    /// of `ql` and 32 of `qh`: element `l + 32k` (l < 32, k < 4) takes the low or high
    /// nibble of `ql[l + 32(k % 2)]` (low for k < 2) and bits `2k..2k+2` of `qh[l]`.
    #[inline(always)]
    pub fn q(&self, i: usize) -> u8 {
        let (half, r) = (i / 128, i % 128);
        let (k, l) = (r / 32, r % 32);
        let ql = self.ql[half * 64 + l + 32 * (k % 2)];
        let lo = if k < 2 { ql & 0xF } else { ql >> 4 };
        let hi = (self.qh[half * 32 + l] >> (2 * k)) & 3;
        lo | (hi << 4)
    }
}

impl BlockQ8_K {
    #[inline(always)]
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }
    #[inline(always)]
    pub fn bsum(&self, j: usize) -> i16 {
        i16::from_le_bytes(self.bsums[j])
    }
}

/// IEEE half to f32, exact for every input (NaN payloads kept). Branch-free selects so
/// loops over it vectorize: normal halves get their exponent rebiased (15 → 127) in
/// integer steps, subnormals are m·2^-24 from an exact integer conversion, inf/NaN get the
/// full f32 exponent. (Rescaling the shifted bits by 2^112, as this did before, multiplies
/// an f32 subnormal for every f16 subnormal: a microcode assist per value on x86, which
/// cost a third of a Q6_K decode step whose block scales were that small.)
#[inline(always)]
pub fn fp16_to_fp32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = (h & 0x7fff) << 13;
    let normal = em + (112 << 23);
    let sub = ((h & 0x3ff) as f32 * f32::from_bits(0x3380_0000)).to_bits(); // × 2^-24
    let bits = match h & 0x7c00 {
        0 => sub,
        0x7c00 => em | 0x7f80_0000,
        _ => normal,
    };
    f32::from_bits(bits | sign)
}

/// f32 to IEEE half, round to nearest even (ggml's GGML_FP32_TO_FP16; NaN stays NaN).
#[inline]
pub fn fp32_to_fp16(f: f32) -> u16 {
    half::f16::from_f32(f).to_bits()
}

/// bf16 to f32: the top 16 bits.
#[inline(always)]
pub fn bf16_to_fp32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 to bf16 as ggml_compute_fp32_to_bf16: round to nearest even; NaN becomes a quiet
/// NaN with the top mantissa bits kept.
#[inline(always)]
pub fn fp32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}
