//! Portable CPU dot products (ggml-cpu's generic `vec_dot`s), the reference every SIMD path
//! must reproduce bit for bit. The float kernels of the scalar table (`mul_mat`'s F32/F16
//! product, the elementwise row helpers) are in [`simd`].
//!
//! Dot-product semantics, shared by all paths so results agree across machines:
//! - quantized types: per block, an exact integer sum of quant products (times the
//!   sub-block scales for K-quants), turned into an f32 contribution by the block's
//!   scales; block `b` adds into accumulator `b % 8`, and the 8 accumulators are summed
//!   by [`reduce8`].
//! - float types: element `i`'s product (rounded to f32) adds into accumulator `i % 8`,
//!   then [`reduce8`].

pub mod simd;

use bytemuck::cast_slice;

use crate::quants::blocks::*;
use crate::quants::scalar::q5;
use crate::types::{QK, QK_K};

/// Accumulators in the fixed summation order of every dot product.
pub const LANES: usize = 8;

/// The final sum of the 8 accumulators: `((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))`,
/// the order a 2×4 or 1×8 SIMD register reduces in with one add and two shuffles.
#[inline(always)]
pub fn reduce8(a: &[f32; LANES]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

// ---------------------------------------------------------------- vec_dot

/// Sums `contribution(block)` over paired blocks into the 8 lane accumulators.
#[inline(always)]
fn dot_blocks<X, Y>(x: &[X], y: &[Y], f: impl Fn(&X, &Y) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    for (b, (x, y)) in x.iter().zip(y).enumerate() {
        acc[b % LANES] += f(x, y);
    }
    reduce8(&acc)
}

/// The exact integer dot product of 32 signed quants.
#[inline(always)]
fn isum32(x: &[i8; QK], y: &[i8; QK]) -> i32 {
    idot(x, y)
}

/// Σ x·y in i32. Cannot overflow for the lengths used (≤ 256 · 2^14); wrapping ops keep
/// overflow checks of debug/test builds from blocking vectorization.
#[inline(always)]
fn idot(x: &[i8], y: &[i8]) -> i32 {
    x.iter().zip(y).fold(0i32, |s, (&a, &b)| s.wrapping_add((a as i32).wrapping_mul(b as i32)))
}

/// Σ u·y for unsigned quants.
#[inline(always)]
fn udot(x: impl Iterator<Item = u8>, y: &[i8]) -> i32 {
    x.zip(y).fold(0i32, |s, (a, &b)| s.wrapping_add((a as i32).wrapping_mul(b as i32)))
}

/// Per-block contributions; the SIMD paths compute the integer sums their own way and
/// call these for the float part.
#[inline(always)]
pub fn q8_0_block(sumi: i32, xd: u16, yd: u16) -> f32 {
    sumi as f32 * (fp16_to_fp32(xd) * fp16_to_fp32(yd))
}

/// Q4_1/Q5_1 (`d·q + m`) against Q8_1, as ggml: `(dx·dy)·Σq·y + m·s_y` (s_y = dy·Σy).
#[inline(always)]
pub fn qx_1_block(sumi: i32, xd: u16, xm: u16, yd: u16, ys: u16) -> f32 {
    sumi as f32 * (fp16_to_fp32(xd) * fp16_to_fp32(yd)) + fp16_to_fp32(xm) * fp16_to_fp32(ys)
}

#[inline(always)]
pub fn q4_k_block(isum: i32, summ: i32, x: &BlockQ4_K, yd: f32) -> f32 {
    let d = fp16_to_fp32(x.d()) * yd;
    let dmin = fp16_to_fp32(x.dmin()) * yd;
    d * isum as f32 - dmin * summ as f32
}

/// Q2_K/Q5_K (`d·sc·q - dmin·m`) against Q8_K: `(dx·dy)·isum - (dminx·dy)·summ`, as
/// [`q4_k_block`].
#[inline(always)]
pub fn qk_min_block(isum: i32, summ: i32, xd: u16, xdmin: u16, yd: f32) -> f32 {
    let d = fp16_to_fp32(xd) * yd;
    let dmin = fp16_to_fp32(xdmin) * yd;
    d * isum as f32 - dmin * summ as f32
}

/// Q3_K against Q8_K: `(dx·dy)·isum`, as Q6_K.
#[inline(always)]
pub fn q3_k_block(isum: i32, xd: u16, yd: f32) -> f32 {
    (fp16_to_fp32(xd) * yd) * isum as f32
}

#[inline(always)]
pub fn q6_k_block(isum: i32, x: &BlockQ6_K, yd: f32) -> f32 {
    (fp16_to_fp32(x.d()) * yd) * isum as f32
}

#[inline(always)]
fn q4_signed(qs: &[u8; QK / 2]) -> [i8; QK] {
    let mut q = [0i8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0xF) as i8 - 8;
        q[j + QK / 2] = (qs[j] >> 4) as i8 - 8;
    }
    q
}

#[inline(always)]
fn q4_unsigned(qs: &[u8; QK / 2]) -> [i8; QK] {
    let mut q = [0i8; QK];
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0xF) as i8;
        q[j + QK / 2] = (qs[j] >> 4) as i8;
    }
    q
}

// One block's contribution per type: what the SIMD paths use for their leftover blocks.

#[inline(always)]
pub fn dot_q8_0_block(x: &BlockQ8_0, y: &BlockQ8_0) -> f32 {
    q8_0_block(isum32(&x.qs, &y.qs), x.d(), y.d())
}

#[inline(always)]
pub fn dot_q4_0_block(x: &BlockQ4_0, y: &BlockQ8_0) -> f32 {
    q8_0_block(isum32(&q4_signed(&x.qs), &y.qs), x.d(), y.d())
}

#[inline(always)]
pub fn dot_q4_1_block(x: &BlockQ4_1, y: &BlockQ8_1) -> f32 {
    qx_1_block(isum32(&q4_unsigned(&x.qs), &y.qs), x.d(), x.m(), y.d(), y.s())
}

#[inline(always)]
pub fn dot_q5_0_block(x: &BlockQ5_0, y: &BlockQ8_0) -> f32 {
    let q = q5(&x.qs, x.qh()).map(|q| q as i8 - 16);
    q8_0_block(isum32(&q, &y.qs), x.d(), y.d())
}

#[inline(always)]
pub fn dot_q5_1_block(x: &BlockQ5_1, y: &BlockQ8_1) -> f32 {
    let q = q5(&x.qs, x.qh()).map(|q| q as i8);
    qx_1_block(isum32(&q, &y.qs), x.d(), x.m(), y.d(), y.s())
}

/// Σ_j m[j] · (sum of the Q8_K quants of sub-block j), from the block's bsums.
#[inline(always)]
pub fn q4_k_summ(mins: &[u8; 8], y: &BlockQ8_K) -> i32 {
    mins.iter().enumerate().map(|(j, &m)| m as i32 * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32)).sum()
}

#[inline(always)]
pub fn dot_q4_k_block(x: &BlockQ4_K, y: &BlockQ8_K) -> f32 {
    let (sc, m) = x.scales_mins();
    let mut isum = 0i32;
    for c in 0..4 {
        let qs = &x.qs[32 * c..32 * c + 32];
        let (ylo, yhi) = (&y.qs[64 * c..64 * c + 32], &y.qs[64 * c + 32..64 * c + 64]);
        let slo = udot(qs.iter().map(|&q| q & 0xF), ylo);
        let shi = udot(qs.iter().map(|&q| q >> 4), yhi);
        isum += sc[2 * c] as i32 * slo + sc[2 * c + 1] as i32 * shi;
    }
    q4_k_block(isum, q4_k_summ(&m, y), x, y.d())
}

/// The unsigned 2-bit quants of a Q2_K block in element order.
#[inline(always)]
pub fn q2_k_unsigned(x: &BlockQ2_K) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for (half, q) in q.chunks_exact_mut(128).enumerate() {
        let qs = &x.qs[32 * half..32 * half + 32];
        for k in 0..4 {
            for l in 0..32 {
                q[32 * k + l] = ((qs[l] >> (2 * k)) & 3) as i8;
            }
        }
    }
    q
}

/// Σ_j (scales[j] >> 4) · bsum[j]: the Q2_K mins against the Q8_K sub-block sums.
#[inline(always)]
pub fn q2_k_summ(x: &BlockQ2_K, y: &BlockQ8_K) -> i32 {
    x.scales.iter().enumerate().map(|(j, &s)| (s >> 4) as i32 * y.bsum(j) as i32).sum()
}

#[inline(always)]
pub fn dot_q2_k_block(x: &BlockQ2_K, y: &BlockQ8_K) -> f32 {
    let q = q2_k_unsigned(x);
    let mut isum = 0i32;
    for j in 0..QK_K / 16 {
        let s = idot(&q[16 * j..16 * j + 16], &y.qs[16 * j..16 * j + 16]);
        isum += (x.scales[j] & 0xF) as i32 * s;
    }
    qk_min_block(isum, q2_k_summ(x, y), x.d(), x.dmin(), y.d())
}

/// The signed quants (-4..4) of a Q3_K block in element order.
#[inline(always)]
pub fn q3_k_signed(x: &BlockQ3_K) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for (half, q) in q.chunks_exact_mut(128).enumerate() {
        let qs = &x.qs[32 * half..32 * half + 32];
        for k in 0..4 {
            for l in 0..32 {
                let hi = (x.hmask[l] >> (4 * half + k)) & 1;
                q[32 * k + l] = ((qs[l] >> (2 * k)) & 3) as i8 - 4 * (1 - hi as i8);
            }
        }
    }
    q
}

#[inline(always)]
pub fn dot_q3_k_block(x: &BlockQ3_K, y: &BlockQ8_K) -> f32 {
    let q = q3_k_signed(x);
    let sc = x.scales6();
    let mut isum = 0i32;
    for j in 0..QK_K / 16 {
        let s = idot(&q[16 * j..16 * j + 16], &y.qs[16 * j..16 * j + 16]);
        isum += (sc[j] as i32 - 32) * s;
    }
    q3_k_block(isum, x.d(), y.d())
}

/// The unsigned 5-bit quants of a Q5_K block in element order.
#[inline(always)]
pub fn q5_k_unsigned(x: &BlockQ5_K) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for (c, q) in q.chunks_exact_mut(64).enumerate() {
        let qs = &x.qs[32 * c..32 * c + 32];
        for l in 0..32 {
            q[l] = ((qs[l] & 0xF) | (((x.qh[l] >> (2 * c)) & 1) << 4)) as i8;
            q[l + 32] = ((qs[l] >> 4) | (((x.qh[l] >> (2 * c + 1)) & 1) << 4)) as i8;
        }
    }
    q
}

#[inline(always)]
pub fn dot_q5_k_block(x: &BlockQ5_K, y: &BlockQ8_K) -> f32 {
    let (sc, m) = scales_mins_k4(&x.scales);
    let q = q5_k_unsigned(x);
    let mut isum = 0i32;
    for j in 0..8 {
        isum += sc[j] as i32 * idot(&q[32 * j..32 * j + 32], &y.qs[32 * j..32 * j + 32]);
    }
    qk_min_block(isum, q4_k_summ(&m, y), x.d(), x.dmin(), y.d())
}

/// The signed 6-bit quants (-32..32) of a Q6_K block in element order.
#[inline(always)]
pub fn q6_k_signed(x: &BlockQ6_K) -> [i8; QK_K] {
    let mut q = [0i8; QK_K];
    for half in 0..2 {
        let (ql, qh) = (&x.ql[64 * half..64 * half + 64], &x.qh[32 * half..32 * half + 32]);
        let q = &mut q[128 * half..128 * half + 128];
        for l in 0..32 {
            q[l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
            q[l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    q
}

#[inline(always)]
pub fn dot_q6_k_block(x: &BlockQ6_K, y: &BlockQ8_K) -> f32 {
    let q = q6_k_signed(x);
    let mut isum = 0i32;
    for j in 0..QK_K / 16 {
        let s = idot(&q[16 * j..16 * j + 16], &y.qs[16 * j..16 * j + 16]);
        isum += x.scales[j] as i32 * s;
    }
    q6_k_block(isum, x, y.d())
}

pub fn vec_dot_q8_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ8_0, BlockQ8_0>(cast_slice(x), cast_slice(y), dot_q8_0_block)
}

pub fn vec_dot_q4_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ4_0, BlockQ8_0>(cast_slice(x), cast_slice(y), dot_q4_0_block)
}

pub fn vec_dot_q4_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ4_1, BlockQ8_1>(cast_slice(x), cast_slice(y), dot_q4_1_block)
}

pub fn vec_dot_q5_0_q8_0(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ5_0, BlockQ8_0>(cast_slice(x), cast_slice(y), dot_q5_0_block)
}

pub fn vec_dot_q5_1_q8_1(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ5_1, BlockQ8_1>(cast_slice(x), cast_slice(y), dot_q5_1_block)
}

pub fn vec_dot_q2_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ2_K, BlockQ8_K>(cast_slice(x), cast_slice(y), dot_q2_k_block)
}

pub fn vec_dot_q3_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ3_K, BlockQ8_K>(cast_slice(x), cast_slice(y), dot_q3_k_block)
}

pub fn vec_dot_q5_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ5_K, BlockQ8_K>(cast_slice(x), cast_slice(y), dot_q5_k_block)
}

pub fn vec_dot_q4_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ4_K, BlockQ8_K>(cast_slice(x), cast_slice(y), dot_q4_k_block)
}

pub fn vec_dot_q6_k_q8_k(x: &[u8], y: &[u8]) -> f32 {
    dot_blocks::<BlockQ6_K, BlockQ8_K>(cast_slice(x), cast_slice(y), dot_q6_k_block)
}

/// [`super::kernel::Kernels::prep_q8_0`]: per Q8_0 block of `row` its scale and (when `sums`)
/// its quant sum; whether a quant is -128 (only looked for when `look`).
pub(crate) fn prep_q8_0(row: &[u8], nb: usize, dy: &mut [f32], ysum: &mut [i32], sums: bool, look: bool) -> bool {
    let ys: &[BlockQ8_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ8_0>()]);
    let mut bad = false;
    for (t, y) in ys.iter().enumerate() {
        dy[t] = fp16_to_fp32(y.d());
        if sums {
            ysum[t] = y.qs.iter().map(|&q| q as i32).sum::<i32>();
        }
        bad |= look && y.qs.contains(&i8::MIN);
    }
    bad
}

/// Float dot products: element `i` into lane `i % 8` ([`simd::dot_lanes`], the one f32
/// dot of the scalar table). `W` bytes per element, `get` reads one element.
#[inline(always)]
fn dot_elems<const W: usize>(n: usize, x: &[u8], y: &[u8], get: impl Fn(&[u8]) -> f32) -> f32 {
    let (x, y) = (&x[..W * n], &y[..W * n]);
    simd::dot_lanes(n, |i| get(&x[W * i..W * i + W]), |i| get(&y[W * i..W * i + W]))
}

pub fn vec_dot_f32(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_elems::<4>(n, x, y, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub fn vec_dot_f16(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_elems::<2>(n, x, y, |b| fp16_to_fp32(u16::from_le_bytes([b[0], b[1]])))
}

pub fn vec_dot_bf16(n: usize, x: &[u8], y: &[u8]) -> f32 {
    dot_elems::<2>(n, x, y, |b| bf16_to_fp32(u16::from_le_bytes([b[0], b[1]])))
}
