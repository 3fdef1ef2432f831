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

impl BlockQ4_K {
    #[inline(always)]
    pub fn d(&self) -> u16 {
        u16_le(self.d)
    }
    #[inline(always)]
    pub fn dmin(&self) -> u16 {
        u16_le(self.dmin)
    }

    /// ggml's get_scale_min_k4 for sub-block `j` (0..8): the 6-bit (scale, min).
    /// Bytes 0..4 hold scales 0..4 and bytes 4..8 mins 0..4 in their low 6 bits; scales
    /// and mins 4..8 keep their low 4 bits in bytes 8..12 and their top 2 bits in the
    /// spare top bits of bytes 0..4 (scales) and 4..8 (mins).
    #[inline(always)]
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        let q = &self.scales;
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
        }
    }

    /// All 8 (scales, mins).
    #[inline(always)]
    pub fn scales_mins(&self) -> ([u8; 8], [u8; 8]) {
        let mut sc = [0u8; 8];
        let mut m = [0u8; 8];
        for j in 0..8 {
            (sc[j], m[j]) = self.scale_min(j);
        }
        (sc, m)
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

/// IEEE half to f32, exact for every input (NaN payloads kept). Branch-free so loops
/// over it vectorize: shift the exponent and mantissa into f32 position and rescale by
/// 2^112, which also normalizes f16 subnormals; inf/NaN get the full f32 exponent.
#[inline(always)]
pub fn fp16_to_fp32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = (h & 0x7fff) << 13;
    let scaled = f32::from_bits(em) * f32::from_bits(0x7780_0000); // × 2^112
    let bits = if (h & 0x7c00) == 0x7c00 { em | 0x7f80_0000 } else { scaled.to_bits() };
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
