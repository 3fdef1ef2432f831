//! AVX2 prompt kernels for the K-quants (Q2_K…Q6_K against Q8_K), bit-identical to `vec_dot`.
//!
//! Per row of a, each block is unpacked once: its quants as unsigned bytes in element order
//! (Q3_K's and Q6_K's shifted up by 4 and 32), the scale of every sub-block of 16 as i16
//! (Q4_K's and Q5_K's sub-blocks of 32 give two each), and per sub-block of 16 what meets the
//! Q8_K sub-block sums (`bsums`): the mins (Q2_K, Q4_K, Q5_K) or offset × scale (Q3_K, Q6_K).
//! Against each row of b (four at a time, sharing the unpacked block) the integer sums are
//! `maddubs` (u ≤ 63 by i8: pairs within ±16128, exact in i16) then `madd` by the scales,
//! and the mins or offsets through one `madd` with the block's `bsums`: the same exact
//! integers `vec_dot` adds in its own order (Q8_K rows from `quantize_row` hold their own
//! sums in `bsums`, as ggml's AVX2 kernels also assume). The float steps are the scalar
//! `q4_k_block` / `qk_min_block` / `q3_k_block` / `q6_k_block`, block `t` into lane `t % 8`.
//! One row of b (a decode step) unpacks each block as it meets it.

use core::arch::x86_64::*;

use alloc::vec;

use bytemuck::cast_slice;

use super::super::kernel::{GemmArgs, PromptGemm};
use super::super::scalar::{reduce8, LANES};
use super::{bits, hsum_i32, load256};
use crate::quants::blocks::*;
use crate::types::QK_K;

/// Q8_K's layout: f32 d, 256 quants, 16 i16 sub-block sums.
const Y_SIZE: usize = core::mem::size_of::<BlockQ8_K>();
const Y_QS: usize = 4;
const Y_BSUMS: usize = 4 + QK_K;

/// The prompt kernels of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (no `vpdpbusd` form: its sums of four
/// cannot take the per-16 scales).
pub(super) static GEMMS: [PromptGemm; 5] = {
    macro_rules! k_gemm {
        ($X:ty) => {
            PromptGemm {
                name: "avx2 k-quant tiles",
                // SAFETY: as in [`super::table`]; `gemm` checked the rows.
                rows: |g, c| unsafe {
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
#[repr(C)]
struct Prep {
    /// Unsigned quants; vector c = elements 32c..32c+32.
    u: [__m256i; 8],
    /// i16: eight times sub-block 2c's scale, then eight times sub-block 2c+1's.
    sc: [__m256i; 8],
    /// i16 per sub-block of 16, against the Q8_K `bsums`.
    mn: __m256i,
    d: f32,
    dmin: f32,
}

trait KBlock: bytemuck::Pod {
    /// `d·isum - dmin·summ` (summ through `mn`); else `d·(isum - offsets)`.
    const MINS: bool;
    unsafe fn prep(&self) -> Prep;
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn pair_scales(s16: &[i16; 16]) -> [__m256i; 8] {
    core::array::from_fn(|c| _mm256_set_m128i(_mm_set1_epi16(s16[2 * c + 1]), _mm_set1_epi16(s16[2 * c])))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn i16x16(v: &[i16; 16]) -> __m256i {
    _mm256_loadu_si256(v.as_ptr() as *const __m256i)
}

/// Q4_K's and Q5_K's 8 sub-block (of 32) values, once per sub-block of 16.
#[inline(always)]
fn per16(v: &[u8; 8]) -> [i16; 16] {
    core::array::from_fn(|j| v[j / 2] as i16)
}

impl KBlock for BlockQ4_K {
    const MINS: bool = true;
    #[inline(always)]
    unsafe fn prep(&self) -> Prep {
        let (sc, m) = self.scales_mins();
        let mask = _mm256_set1_epi8(0x0F);
        let mut u = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            let q = load256(self.qs.as_ptr().add(32 * c));
            u[2 * c] = _mm256_and_si256(q, mask);
            u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), mask);
        }
        Prep {
            u,
            sc: pair_scales(&per16(&sc)),
            mn: i16x16(&per16(&m)),
            d: fp16_to_fp32(self.d()),
            dmin: fp16_to_fp32(self.dmin()),
        }
    }
}

impl KBlock for BlockQ5_K {
    const MINS: bool = true;
    #[inline(always)]
    unsafe fn prep(&self) -> Prep {
        let (sc, m) = scales_mins_k4(&self.scales);
        let (m4, m1) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(1));
        let qh = load256(self.qh.as_ptr());
        let mut u = [_mm256_setzero_si256(); 8];
        for c in 0..4 {
            let q = load256(self.qs.as_ptr().add(32 * c));
            u[2 * c] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16::<4>(bits(qh, 2 * c as u32, m1)));
            u[2 * c + 1] = _mm256_or_si256(bits(q, 4, m4), _mm256_slli_epi16::<4>(bits(qh, 2 * c as u32 + 1, m1)));
        }
        Prep {
            u,
            sc: pair_scales(&per16(&sc)),
            mn: i16x16(&per16(&m)),
            d: fp16_to_fp32(self.d()),
            dmin: fp16_to_fp32(self.dmin()),
        }
    }
}

impl KBlock for BlockQ2_K {
    const MINS: bool = true;
    #[inline(always)]
    unsafe fn prep(&self) -> Prep {
        let m3 = _mm256_set1_epi8(3);
        let mut u = [_mm256_setzero_si256(); 8];
        for half in 0..2 {
            let qs = load256(self.qs.as_ptr().add(32 * half));
            for k in 0..4 {
                u[4 * half + k] = bits(qs, 2 * k as u32, m3);
            }
        }
        let s16: [i16; 16] = core::array::from_fn(|j| (self.scales[j] & 0xF) as i16);
        let m16: [i16; 16] = core::array::from_fn(|j| (self.scales[j] >> 4) as i16);
        Prep { u, sc: pair_scales(&s16), mn: i16x16(&m16), d: fp16_to_fp32(self.d()), dmin: fp16_to_fp32(self.dmin()) }
    }
}

impl KBlock for BlockQ3_K {
    const MINS: bool = false;
    #[inline(always)]
    unsafe fn prep(&self) -> Prep {
        let (m3, m1) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        let hm = load256(self.hmask.as_ptr());
        let mut u = [_mm256_setzero_si256(); 8];
        for half in 0..2 {
            let qs = load256(self.qs.as_ptr().add(32 * half));
            for k in 0..4 {
                // low 2 bits + 4·(high bit): q + 4 in 0..8
                u[4 * half + k] = _mm256_or_si256(
                    bits(qs, 2 * k as u32, m3),
                    _mm256_slli_epi16::<2>(bits(hm, (4 * half + k) as u32, m1)),
                );
            }
        }
        let sc = self.scales6();
        let s16: [i16; 16] = core::array::from_fn(|j| sc[j] as i16 - 32);
        Prep { u, sc: pair_scales(&s16), mn: i16x16(&s16.map(|s| 4 * s)), d: fp16_to_fp32(self.d()), dmin: 0.0 }
    }
}

impl KBlock for BlockQ6_K {
    const MINS: bool = false;
    #[inline(always)]
    unsafe fn prep(&self) -> Prep {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(0x30);
        let mut u = [_mm256_setzero_si256(); 8];
        for half in 0..2 {
            let ql0 = load256(self.ql.as_ptr().add(64 * half));
            let ql1 = load256(self.ql.as_ptr().add(64 * half + 32));
            let qh = load256(self.qh.as_ptr().add(32 * half));
            // q + 32 in 0..64, elements 32k..32k+32 of this half
            u[4 * half] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m2));
            u[4 * half + 1] =
                _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m2));
            u[4 * half + 2] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), _mm256_and_si256(qh, m2));
            u[4 * half + 3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2),
            );
        }
        let s16: [i16; 16] = core::array::from_fn(|j| self.scales[j] as i16);
        Prep { u, sc: pair_scales(&s16), mn: i16x16(&s16.map(|s| 32 * s)), d: fp16_to_fp32(self.d()), dmin: 0.0 }
    }
}

/// `c[j·ldc + i]` for `m` rows of a (`nb` blocks of 256) and `n` rows of b.
///
/// # Safety
/// AVX2 and F16C must be available; the rows must be whole rows of `nb` blocks (checked by
/// `gemm`), `c` must hold `(n-1)·ldc + m`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,f16c")]
unsafe fn gemm_rows_k<X: KBlock>(
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
        // A decode step: each block is unpacked as it is used (nothing is reused); one
        // `maddubs` per 32 products, offsets through `bsums`, fewer steps than `vec_dot`'s.
        for i in 0..m {
            let xs: &[X] = cast_slice(&a[i * lda..i * lda + nb * xsize]);
            c[i] = row_dots::<X, 1>(nb, |t| xs[t].prep(), [b.as_ptr()])[0];
        }
        return;
    }
    let mut preps = vec![core::mem::zeroed::<Prep>(); nb];
    for i in 0..m {
        let xs: &[X] = cast_slice(&a[i * lda..i * lda + nb * xsize]);
        for (p, x) in preps.iter_mut().zip(xs) {
            *p = x.prep();
        }
        let mut j = 0;
        while j + 4 <= n {
            let out = row_dots::<X, 4>(nb, |t| preps[t], core::array::from_fn(|q| b.as_ptr().add((j + q) * ldb)));
            for (q, v) in out.iter().enumerate() {
                c[(j + q) * ldc + i] = *v;
            }
            j += 4;
        }
        while j < n {
            c[j * ldc + i] = row_dots::<X, 1>(nb, |t| preps[t], [b.as_ptr().add(j * ldb)])[0];
            j += 1;
        }
    }
}

/// One row of a (block t unpacked by `prep(t)`) against `C` rows of b.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn row_dots<X: KBlock, const C: usize>(nb: usize, prep: impl Fn(usize) -> Prep, ys: [*const u8; C]) -> [f32; C] {
    let mut lanes = [[0f32; LANES]; C];
    for t in 0..nb {
        let p = &prep(t);
        let yb: [*const u8; C] = ys.map(|y| y.add(t * Y_SIZE));
        let mut acc = [_mm256_setzero_si256(); C];
        for k in 0..8 {
            for q in 0..C {
                let yv = load256(yb[q].add(Y_QS + 32 * k));
                acc[q] = _mm256_add_epi32(acc[q], _mm256_madd_epi16(_mm256_maddubs_epi16(p.u[k], yv), p.sc[k]));
            }
        }
        for q in 0..C {
            let corr = _mm256_madd_epi16(p.mn, load256(yb[q].add(Y_BSUMS)));
            let yd = f32::from_le_bytes(*(yb[q] as *const [u8; 4]));
            let v = if X::MINS {
                let (isum, summ) = (hsum_i32(acc[q]), hsum_i32(corr));
                (p.d * yd) * isum as f32 - (p.dmin * yd) * summ as f32
            } else {
                (p.d * yd) * hsum_i32(_mm256_sub_epi32(acc[q], corr)) as f32
            };
            lanes[q][t % LANES] += v;
        }
    }
    lanes.map(|l| reduce8(&l))
}
