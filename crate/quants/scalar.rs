//! Portable reference conversions: dequantize and quantize with ggml's `quantize_row_*_ref`
//! rounding (ggml-base's `to_float` and `from_float_ref`). The dot products every SIMD path
//! reproduces bit for bit are the CPU's, in `crate::cpu::arch::scalar`.
//!
//! ```
//! use ggweb::quants::scalar;
//! let x = [1.0f32; 32];
//! let mut q = [0u8; 34];
//! scalar::quantize_q8_0(&x, &mut q);
//! assert_eq!(q[2..], [127u8; 32]); // d = 1/127, every quant 127
//! ```

use bytemuck::{cast_slice, cast_slice_mut, Zeroable};

use super::blocks::*;
use crate::types::{QK, QK_K};

#[inline(always)]
fn fabs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// C's roundf: nearest integer, halves away from zero (ggml's Q8_0 rounding). `as i32`
/// truncates exactly for |x| < 2^23; larger values are integers already.
#[inline(always)]
fn roundf(x: f32) -> f32 {
    if fabs(x) >= 8_388_608.0 || x.is_nan() {
        return x;
    }
    let t = x as i32 as f32;
    let frac = x - t;
    if frac >= 0.5 {
        t + 1.0
    } else if frac <= -0.5 {
        t - 1.0
    } else {
        t
    }
}

/// ggml's nearest_int: round half to even via the 1.5·2^23 trick (valid for |x| < 2^22).
#[inline(always)]
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The first value of largest magnitude (ties keep the earlier one, as ggml's strict `<`).
#[inline(always)]
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < fabs(v) {
            amax = fabs(v);
            max = v;
        }
    }
    max
}

#[inline(always)]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline(always)]
fn inv(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

// ---------------------------------------------------------------- dequantize

pub fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *y = fp16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (y, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *y = bf16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_0] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = fp16_to_fp32(x.d());
        for j in 0..QK / 2 {
            y[j] = ((x.qs[j] & 0xF) as i32 - 8) as f32 * d;
            y[j + QK / 2] = ((x.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_1] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (fp16_to_fp32(x.d()), fp16_to_fp32(x.m()));
        for j in 0..QK / 2 {
            y[j] = (x.qs[j] & 0xF) as f32 * d + m;
            y[j + QK / 2] = (x.qs[j] >> 4) as f32 * d + m;
        }
    }
}

/// The 5-bit quants of a Q5_0/Q5_1 block, unsigned.
#[inline(always)]
pub(crate) fn q5(qs: &[u8; QK / 2], qh: u32) -> [u8; QK] {
    let mut q = [0u8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0xF) | ((((qh >> j) & 1) as u8) << 4);
        q[j + QK / 2] = (qs[j] >> 4) | ((((qh >> (j + QK / 2)) & 1) as u8) << 4);
    }
    q
}

pub fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_0] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = fp16_to_fp32(x.d());
        for (y, q) in y.iter_mut().zip(q5(&x.qs, x.qh())) {
            *y = (q as i32 - 16) as f32 * d;
        }
    }
}

pub fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_1] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (fp16_to_fp32(x.d()), fp16_to_fp32(x.m()));
        for (y, q) in y.iter_mut().zip(q5(&x.qs, x.qh())) {
            *y = q as f32 * d + m;
        }
    }
}

pub fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8_0] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = fp16_to_fp32(x.d());
        for (y, &q) in y.iter_mut().zip(&x.qs) {
            *y = q as f32 * d;
        }
    }
}

pub fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ2_K] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (fp16_to_fp32(x.d()), fp16_to_fp32(x.dmin()));
        for (j, y) in y.chunks_exact_mut(16).enumerate() {
            let sc = x.scales[j];
            let (dl, ml) = (d * (sc & 0xF) as f32, dmin * (sc >> 4) as f32);
            for (l, y) in y.iter_mut().enumerate() {
                *y = dl * x.q(16 * j + l) as f32 - ml;
            }
        }
    }
}

pub fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ3_K] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = fp16_to_fp32(x.d());
        let sc = x.scales6();
        for (j, y) in y.chunks_exact_mut(16).enumerate() {
            let dl = d * (sc[j] as i32 - 32) as f32;
            for (l, y) in y.iter_mut().enumerate() {
                *y = dl * x.q(16 * j + l) as f32;
            }
        }
    }
}

pub fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ5_K] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (fp16_to_fp32(x.d()), fp16_to_fp32(x.dmin()));
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let (sc, m) = x.scale_min(j);
            let (dl, ml) = (d * sc as f32, dmin * m as f32);
            for (l, y) in y.iter_mut().enumerate() {
                *y = dl * x.q(32 * j + l) as f32 - ml;
            }
        }
    }
}

pub fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8_1] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = fp16_to_fp32(x.d());
        for (y, &q) in y.iter_mut().zip(&x.qs) {
            *y = q as f32 * d;
        }
    }
}

pub fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ4_K] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (fp16_to_fp32(x.d()), fp16_to_fp32(x.dmin()));
        for (c, (y, qs)) in y.chunks_exact_mut(64).zip(x.qs.chunks_exact(32)).enumerate() {
            let (sc1, m1) = x.scale_min(2 * c);
            let (sc2, m2) = x.scale_min(2 * c + 1);
            let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
            for l in 0..32 {
                y[l] = d1 * (qs[l] & 0xF) as f32 - m1;
                y[l + 32] = d2 * (qs[l] >> 4) as f32 - m2;
            }
        }
    }
}

pub fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ6_K] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = fp16_to_fp32(x.d());
        for (i, y) in y.iter_mut().enumerate() {
            // (d * scale) * q, the order ggml multiplies in.
            *y = d * x.scales[i / 16] as f32 * (x.q(i) as i32 - 32) as f32;
        }
    }
}

pub fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockQ8_K] = cast_slice(src);
    for (x, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = x.d();
        for (y, &q) in y.iter_mut().zip(&x.qs) {
            *y = d * q as f32;
        }
    }
}

// ---------------------------------------------------------------- quantize

pub fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

pub fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&fp32_to_fp16(*x).to_le_bytes());
    }
}

pub fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&fp32_to_bf16(*x).to_le_bytes());
    }
}

/// quantize_row_q4_0_ref: d = (signed absmax) / -8, q = trunc(x/d + 8.5) capped at 15.
pub fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ4_0] = cast_slice_mut(dst);
    for (x, y) in src.chunks_exact(QK).zip(blocks) {
        let d = signed_absmax(x) / -8.0;
        let id = inv(d);
        y.d = fp32_to_fp16(d).to_le_bytes();
        for j in 0..QK / 2 {
            let q0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((x[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
            y.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// quantize_row_q4_1_ref: d = (max - min) / 15, m = min, q = trunc((x - min)/d + 0.5).
pub fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ4_1] = cast_slice_mut(dst);
    for (x, y) in src.chunks_exact(QK).zip(blocks) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv(d);
        y.d = fp32_to_fp16(d).to_le_bytes();
        y.m = fp32_to_fp16(min).to_le_bytes();
        for j in 0..QK / 2 {
            let q0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((x[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            y.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// Packs 32 five-bit quants as Q5_0/Q5_1 store them.
#[inline(always)]
fn pack_q5(q: &[u8; QK], qs: &mut [u8; QK / 2]) -> [u8; 4] {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (q0, q1) = (q[j], q[j + QK / 2]);
        qs[j] = (q0 & 0xF) | ((q1 & 0xF) << 4);
        qh |= (((q0 & 0x10) >> 4) as u32) << j;
        qh |= (((q1 & 0x10) >> 4) as u32) << (j + QK / 2);
    }
    qh.to_le_bytes()
}

/// quantize_row_q5_0_ref: d = (signed absmax) / -16, q = trunc(x/d + 16.5) capped at 31.
pub fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ5_0] = cast_slice_mut(dst);
    for (x, y) in src.chunks_exact(QK).zip(blocks) {
        let d = signed_absmax(x) / -16.0;
        let id = inv(d);
        y.d = fp32_to_fp16(d).to_le_bytes();
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = ((v * id + 16.5) as i8).min(31) as u8;
        }
        y.qh = pack_q5(&q, &mut y.qs);
    }
}

/// quantize_row_q5_1_ref: d = (max - min) / 31, m = min, q = trunc((x - min)/d + 0.5).
pub fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ5_1] = cast_slice_mut(dst);
    for (x, y) in src.chunks_exact(QK).zip(blocks) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv(d);
        y.d = fp32_to_fp16(d).to_le_bytes();
        y.m = fp32_to_fp16(min).to_le_bytes();
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = (((v - min) * id + 0.5) as i8).min(31) as u8;
        }
        y.qh = pack_q5(&q, &mut y.qs);
    }
}

/// quantize_row_q8_0_ref: d = absmax / 127, q = roundf(x/d) (halves away from zero).
pub fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8_0] = cast_slice_mut(dst);
    for (x, y) in src.chunks_exact(QK).zip(blocks) {
        let amax = x.iter().fold(0.0f32, |a, &v| if a < fabs(v) { fabs(v) } else { a });
        let d = amax / 127.0;
        let id = inv(d);
        y.d = fp32_to_fp16(d).to_le_bytes();
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = roundf(v * id) as i8;
        }
    }
}

/// quantize_row_q8_1_ref: the quants of Q8_0 (d = absmax / 127, roundf), and s = Σq · d
/// with the f32 d, stored as f16.
pub fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8_1] = cast_slice_mut(dst);
    for (x, y) in src.chunks_exact(QK).zip(blocks) {
        let amax = x.iter().fold(0.0f32, |a, &v| if a < fabs(v) { fabs(v) } else { a });
        let d = amax / 127.0;
        let id = inv(d);
        y.d = fp32_to_fp16(d).to_le_bytes();
        let mut sum = 0i32;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = roundf(v * id) as i8;
            sum += *q as i32;
        }
        y.s = fp32_to_fp16(sum as f32 * d).to_le_bytes();
    }
}

/// quantize_row_q8_K_ref: iscale = -127 / (signed absmax), q = nearest_int(x·iscale)
/// (half to even) capped at 127, d = 1 / iscale, bsums the sums of 16 quants. An
/// all-zero block stores d = 0 and zero quants and sums.
pub fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8_K] = cast_slice_mut(dst);
    for (x, y) in src.chunks_exact(QK_K).zip(blocks) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in x {
            if fabs(v) > amax {
                amax = fabs(v);
                max = v;
            }
        }
        if amax == 0.0 {
            *y = BlockQ8_K::zeroed();
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        for (j, s) in y.bsums.iter_mut().enumerate() {
            let sum: i32 = y.qs[16 * j..16 * (j + 1)].iter().map(|&q| q as i32).sum();
            *s = (sum as i16).to_le_bytes();
        }
        y.d = (1.0 / iscale).to_le_bytes();
    }
}
