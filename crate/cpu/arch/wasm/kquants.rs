//! SIMD128 prompt kernels for the K-quants (Q2_K…Q6_K against Q8_K), bit-identical to
//! `vec_dot`: the wasm twin of `x86/kquants.rs`.
//!
//! Per row of a, each block is unpacked once: its quants as unsigned bytes in element order
//! (Q3_K's and Q6_K's shifted up by 4 and 32, so at most 63), each sub-block of 16's scale as
//! an i16 splat, and per sub-block of 16 what meets the Q8_K sub-block sums (`bsums`): the
//! mins (Q2_K, Q4_K, Q5_K) or offset × scale (Q3_K, Q6_K). Against each row of b (four at a
//! time, sharing the unpacked block), 16 quants × 16 of b give i16 products (`extmul`) or,
//! with relaxed SIMD, i16 pair sums (`i16x8.relaxed_dot_i8x16_i7x16_s`: u ≤ 63 is a valid i7
//! operand, and pairs stay within ±16128, so every engine gives the exact sums), then
//! `i32x4.dot_i16x8_s` by the scale: the same exact integers `vec_dot` adds in its own
//! order (Q8_K rows from `quantize_row` hold their own sums in `bsums`). The float steps are
//! the scalar `q4_k_block` / `qk_min_block` / `q3_k_block` / `q6_k_block`, block `t` into
//! lane `t % 8`. One row of b (a decode step) unpacks each block as it meets it.

use crate::wasm_arch::*;

use alloc::vec;

use bytemuck::cast_slice;

use super::super::kernel::{GemmArgs, PromptGemm};
use super::super::scalar::{reduce8, LANES};
use super::{hsum_i32, load};
use crate::quants::blocks::*;
use crate::types::QK_K;

const Y_SIZE: usize = core::mem::size_of::<BlockQ8_K>();
const Y_QS: usize = 4;
const Y_BSUMS: usize = 4 + QK_K;

#[cfg(target_feature = "relaxed-simd")]
const NAME: &str = "simd128 k-quant tiles (relaxed dot)";
#[cfg(not(target_feature = "relaxed-simd"))]
const NAME: &str = "simd128 k-quant tiles";

/// The prompt kernels of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
pub(super) static GEMMS: [PromptGemm; 5] = {
    macro_rules! k_gemm {
        ($X:ty) => {
            PromptGemm {
                name: NAME,
                rows: |g, c| {
                    let GemmArgs { nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
                    gemm_rows_k::<$X>(nb, m, a, lda, b, ldb, cols.plain.len(), c, ldc)
                },
                needs_plain: false,
                wants_sums: false,
                chunk: crate::cpu::arch::L1_CHUNK,
            }
        };
    }
    [k_gemm!(BlockQ2_K), k_gemm!(BlockQ3_K), k_gemm!(BlockQ4_K), k_gemm!(BlockQ5_K), k_gemm!(BlockQ6_K)]
};

/// One block of a row of a, unpacked.
#[derive(Clone, Copy)]
pub(super) struct Prep {
    /// Unsigned quants; vector j = elements 16j..16j+16 (sub-block j).
    u: [v128; 16],
    /// Sub-block j's scale in every i16 lane.
    sc: [v128; 16],
    /// i16 per sub-block of 16, against the Q8_K `bsums`.
    mn: [v128; 2],
    d: f32,
    dmin: f32,
}

pub(super) trait KBlock: bytemuck::Pod {
    /// `d·isum - dmin·summ` (summ through `mn`); else `d·(isum - offsets)`.
    const MINS: bool;
    fn prep(&self) -> Prep;
}

#[inline(always)]
fn prep_from(u: [v128; 16], s16: [i16; 16], m16: [i16; 16], d: f32, dmin: f32) -> Prep {
    Prep { u, sc: s16.map(|s| i16x8_splat(s)), mn: [load(&m16[..8]), load(&m16[8..])], d, dmin }
}

/// Q4_K's and Q5_K's 8 sub-block (of 32) values, once per sub-block of 16.
#[inline(always)]
fn per16(v: &[u8; 8]) -> [i16; 16] {
    core::array::from_fn(|j| v[j / 2] as i16)
}

impl KBlock for BlockQ4_K {
    const MINS: bool = true;
    #[inline(always)]
    fn prep(&self) -> Prep {
        let (sc, m) = self.scales_mins();
        let mask = u8x16_splat(0x0F);
        let mut u = [i8x16_splat(0); 16];
        for c in 0..4 {
            for p in 0..2 {
                let q = load(&self.qs[32 * c + 16 * p..]);
                u[4 * c + p] = v128_and(q, mask);
                u[4 * c + 2 + p] = u8x16_shr(q, 4);
            }
        }
        prep_from(u, per16(&sc), per16(&m), fp16_to_fp32(self.d()), fp16_to_fp32(self.dmin()))
    }
}

impl KBlock for BlockQ5_K {
    const MINS: bool = true;
    #[inline(always)]
    fn prep(&self) -> Prep {
        let (sc, m) = scales_mins_k4(&self.scales);
        let (mask, m1) = (u8x16_splat(0x0F), u8x16_splat(1));
        let mut u = [i8x16_splat(0); 16];
        for c in 0..4 {
            for p in 0..2 {
                let q = load(&self.qs[32 * c + 16 * p..]);
                let qh = load(&self.qh[16 * p..]);
                let hlo = i8x16_shl(v128_and(u8x16_shr(qh, 2 * c as u32), m1), 4);
                let hhi = i8x16_shl(v128_and(u8x16_shr(qh, 2 * c as u32 + 1), m1), 4);
                u[4 * c + p] = v128_or(v128_and(q, mask), hlo);
                u[4 * c + 2 + p] = v128_or(u8x16_shr(q, 4), hhi);
            }
        }
        prep_from(u, per16(&sc), per16(&m), fp16_to_fp32(self.d()), fp16_to_fp32(self.dmin()))
    }
}

impl KBlock for BlockQ2_K {
    const MINS: bool = true;
    #[inline(always)]
    fn prep(&self) -> Prep {
        let m3 = u8x16_splat(3);
        let mut u = [i8x16_splat(0); 16];
        for half in 0..2 {
            for p in 0..2 {
                let qs = load(&self.qs[32 * half + 16 * p..]);
                for k in 0..4 {
                    u[8 * half + 2 * k + p] = v128_and(u8x16_shr(qs, 2 * k as u32), m3);
                }
            }
        }
        let s16 = core::array::from_fn(|j| (self.scales[j] & 0xF) as i16);
        let m16 = core::array::from_fn(|j| (self.scales[j] >> 4) as i16);
        prep_from(u, s16, m16, fp16_to_fp32(self.d()), fp16_to_fp32(self.dmin()))
    }
}

impl KBlock for BlockQ3_K {
    const MINS: bool = false;
    #[inline(always)]
    fn prep(&self) -> Prep {
        let (m3, m1) = (u8x16_splat(3), u8x16_splat(1));
        let mut u = [i8x16_splat(0); 16];
        for half in 0..2 {
            for p in 0..2 {
                let qs = load(&self.qs[32 * half + 16 * p..]);
                let hm = load(&self.hmask[16 * p..]);
                for k in 0..4 {
                    // low 2 bits + 4·(high bit): q + 4 in 0..8
                    let low = v128_and(u8x16_shr(qs, 2 * k as u32), m3);
                    let high = i8x16_shl(v128_and(u8x16_shr(hm, (4 * half + k) as u32), m1), 2);
                    u[8 * half + 2 * k + p] = v128_or(low, high);
                }
            }
        }
        let sc = self.scales6();
        let s16: [i16; 16] = core::array::from_fn(|j| sc[j] as i16 - 32);
        prep_from(u, s16, s16.map(|s| 4 * s), fp16_to_fp32(self.d()), 0.0)
    }
}

impl KBlock for BlockQ6_K {
    const MINS: bool = false;
    #[inline(always)]
    fn prep(&self) -> Prep {
        let (m4, m3) = (u8x16_splat(0x0F), u8x16_splat(3));
        let mut u = [i8x16_splat(0); 16];
        for half in 0..2 {
            for p in 0..2 {
                let ql0 = load(&self.ql[64 * half + 16 * p..]);
                let ql1 = load(&self.ql[64 * half + 32 + 16 * p..]);
                let qh = load(&self.qh[32 * half + 16 * p..]);
                let low = [v128_and(ql0, m4), v128_and(ql1, m4), u8x16_shr(ql0, 4), u8x16_shr(ql1, 4)];
                for (k, low) in low.into_iter().enumerate() {
                    // q + 32 in 0..64
                    let high = i8x16_shl(v128_and(u8x16_shr(qh, 2 * k as u32), m3), 4);
                    u[8 * half + 2 * k + p] = v128_or(low, high);
                }
            }
        }
        let s16: [i16; 16] = core::array::from_fn(|j| self.scales[j] as i16);
        prep_from(u, s16, s16.map(|s| 32 * s), fp16_to_fp32(self.d()), 0.0)
    }
}

/// `c[j·ldc + i]` for `m` rows of a (`nb` blocks of 256) and `n` rows of b (whole rows,
/// checked by `gemm`).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_rows_k<X: KBlock>(
    nb: usize,
    m: usize,
    a: &[u8],
    lda: usize,
    b: &[u8],
    ldb: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let xsize = core::mem::size_of::<X>();
    if n == 1 {
        // A decode step: each block is unpacked as it is used (nothing is reused), so the
        // products take the same path as a prompt's, relaxed dots included.
        for step in 0..m {
            let i = super::super::decode_row(step, m);
            let xs: &[X] = cast_slice(&a[i * lda..i * lda + nb * xsize]);
            c[i] = row_dots::<X, 1>(nb, |t| xs[t].prep(), [&b[..nb * Y_SIZE]])[0];
        }
        return;
    }
    tiles::<X>(
        nb,
        m,
        |i, preps| {
            let xs: &[X] = cast_slice(&a[i * lda..i * lda + nb * xsize]);
            for (p, x) in preps.iter_mut().zip(xs) {
                *p = x.prep();
            }
        },
        b,
        ldb,
        n,
        c,
        ldc,
    )
}

/// Rows of a, each unpacked once (`prep_row(i, preps)`), against the `n` rows of b in tiles
/// of 4.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tiles<X: KBlock>(
    nb: usize,
    m: usize,
    mut prep_row: impl FnMut(usize, &mut [Prep]),
    b: &[u8],
    ldb: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let zero = i8x16_splat(0);
    let mut preps = vec![Prep { u: [zero; 16], sc: [zero; 16], mn: [zero; 2], d: 0.0, dmin: 0.0 }; nb];
    let row = |j: usize| &b[j * ldb..j * ldb + nb * Y_SIZE];
    for i in 0..m {
        prep_row(i, &mut preps);
        let mut j = 0;
        while j + 4 <= n {
            let out = row_dots::<X, 4>(nb, |t| preps[t], core::array::from_fn(|q| row(j + q)));
            for (q, v) in out.iter().enumerate() {
                c[(j + q) * ldc + i] = *v;
            }
            j += 4;
        }
        while j < n {
            c[j * ldc + i] = row_dots::<X, 1>(nb, |t| preps[t], [row(j)])[0];
            j += 1;
        }
    }
}

/// Σ u·y of one sub-block of 16 times its scale, into 4 i32 lanes (exact).
#[inline(always)]
fn scaled(u: v128, y: v128, sc: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        i32x4_dot_i16x8(i16x8_relaxed_dot_i8x16_i7x16(y, u), sc)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        i32x4_add(i32x4_dot_i16x8(i16x8_extmul_low_i8x16(u, y), sc), i32x4_dot_i16x8(i16x8_extmul_high_i8x16(u, y), sc))
    }
}

/// One row of a (block t unpacked by `prep(t)`) against `C` rows of b (each `nb` whole
/// Q8_K blocks).
#[inline(always)]
fn row_dots<X: KBlock, const C: usize>(nb: usize, prep: impl Fn(usize) -> Prep, ys: [&[u8]; C]) -> [f32; C] {
    for y in ys {
        assert!(y.len() >= nb * Y_SIZE);
    }
    let yp: [*const u8; C] = ys.map(|y| y.as_ptr());
    let mut lanes = [[0f32; LANES]; C];
    for t in 0..nb {
        let p = &prep(t);
        // SAFETY: block t < nb of each row of b, whose length is asserted above.
        let yb: [*const u8; C] = yp.map(|y| unsafe { y.add(t * Y_SIZE) });
        let mut acc = [i32x4_splat(0); C];
        for j in 0..16 {
            for q in 0..C {
                let yv = unsafe { v128_load(yb[q].add(Y_QS + 16 * j) as *const v128) };
                acc[q] = i32x4_add(acc[q], scaled(p.u[j], yv, p.sc[j]));
            }
        }
        for q in 0..C {
            let (bs0, bs1, yd) = unsafe {
                let bs = yb[q].add(Y_BSUMS);
                (
                    v128_load(bs as *const v128),
                    v128_load(bs.add(16) as *const v128),
                    f32::from_le_bytes(*(yb[q] as *const [u8; 4])),
                )
            };
            let corr = i32x4_add(i32x4_dot_i16x8(p.mn[0], bs0), i32x4_dot_i16x8(p.mn[1], bs1));
            let v = if X::MINS {
                let (isum, summ) = (hsum_i32(acc[q]), hsum_i32(corr));
                (p.d * yd) * isum as f32 - (p.dmin * yd) * summ as f32
            } else {
                (p.d * yd) * hsum_i32(i32x4_sub(acc[q], corr)) as f32
            };
            lanes[q][t % LANES] += v;
        }
    }
    lanes.map(|l| reduce8(&l))
}
