//! The AVX2 table's float kernels (AVX2 + FMA + F16C, as [`crate::cpu::features`] found
//! them): `mul_mat`'s F32/F16 tiles and the elementwise row helpers.

use core::arch::x86_64::*;

use crate::cpu::arch::OUT_PROD_J;

use super::super::{f16_bits_to_f32, GELU_C, GELU_K, INV_FACT, LN2_HI, LN2_HI_F32, LN2_LO, LN2_LO_F32};

// The AVX2 table's float kernels, as the table's plain `fn`s. SAFETY for every `unsafe`
// call below: [`super::table`] is handed out only where AVX2, FMA and F16C were detected
// (`Isa::Avx2`); the row helpers stay inside their slices.

/// [`crate::cpu::arch::FloatGemm`] for f32 rows: 4×3 register tiles with FMA.
///
/// # Safety
/// As [`crate::cpu::arch::FloatGemm`] says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f32(
    k: usize,
    m: usize,
    n: usize,
    a: *const u8,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    avx2_gemm_f32(k, m, n, a as *const f32, lda, b, ldb, c, ldc)
}

/// [`gemm_f32`] for f16 rows (as bits), converted by F16C as they are loaded.
///
/// # Safety
/// As [`crate::cpu::arch::FloatGemm`] says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f16(
    k: usize,
    m: usize,
    n: usize,
    a: *const u8,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    avx2_gemm_f16(k, m, n, a as *const u16, lda, b, ldb, c, ldc)
}

pub(crate) fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    unsafe { avx2_f16_to_f32(src.as_ptr(), dst.as_mut_ptr(), n) }
}

pub(crate) fn gelu(x: &mut [f32]) {
    unsafe { avx2_gelu(x) }
}

pub(crate) fn exp_sum(x: &mut [f32], sub: f32) -> f64 {
    unsafe { avx2_exp_sum(x, sub) }
}

pub(crate) fn gelu_back(dy: &[f32], x: &[f32], out: &mut [f32]) {
    unsafe { avx2_gelu_back(dy, x, out) }
}

pub(crate) fn max(x: &[f32]) -> f32 {
    unsafe { avx2_max(x) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn avx2_f16_to_f32(src: *const u16, dst: *mut f32, n: usize) {
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(dst.add(i), _mm256_cvtph_ps(_mm_loadu_si128(src.add(i) as *const __m128i)));
        i += 8;
    }
    while i < n {
        *dst.add(i) = f16_bits_to_f32(*src.add(i));
        i += 1;
    }
}

/// Lane masks for the last `r` (1..8) elements of a row: lanes below `r` set.
#[inline(always)]
unsafe fn tail_mask(r: usize) -> __m256i {
    const M: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
    _mm256_loadu_si256(M.as_ptr().add(8 - r) as *const __m256i)
}

/// Writes the sums of `acc[0..MR]` to `c[0..MR]`. Four accumulators reduce together:
/// three horizontal adds and one add of the halves give their four sums in one vector.
#[inline(always)]
unsafe fn store_sums<const MR: usize>(acc: &[__m256; MR], c: *mut f32) {
    // Fewer rows reduce the same way (zeros in the missing ones), so a row's result does
    // not depend on which tile it fell in.
    let z = _mm256_setzero_ps();
    let v = |i: usize| if i < MR { acc[i] } else { z };
    let h01 = _mm256_hadd_ps(v(0), v(1));
    let h23 = _mm256_hadd_ps(v(2), v(3));
    let h = _mm256_hadd_ps(h01, h23);
    let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    if MR == 4 {
        _mm_storeu_ps(c, s);
    } else {
        let mut out = [0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), s);
        core::ptr::copy_nonoverlapping(out.as_ptr(), c, MR);
    }
}

/// One register tile of the AVX2 gemm: `MR` rows of a × `NR` rows of b, 8 lanes of `l`
/// per step, each a-load feeding `NR` FMAs and each b-load `MR`. `$load(p, l)` gives
/// 8 a-values as f32, `$load_tail(p, l, mask)` the masked last ones.
macro_rules! avx2_gemm {
    ($gemm:ident, $tile:ident, $T:ty, $load:expr, $load_tail:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        #[inline]
        unsafe fn $tile<const MR: usize, const NR: usize>(
            k: usize,
            a: *const $T,
            lda: usize,
            b: *const f32,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            let mut acc = [[_mm256_setzero_ps(); MR]; NR];
            let mut l = 0;
            while l + 8 <= k {
                let mut bv = [_mm256_setzero_ps(); NR];
                for j in 0..NR {
                    bv[j] = _mm256_loadu_ps(b.add(j * ldb + l));
                }
                for i in 0..MR {
                    let av: __m256 = $load(a.add(i * lda), l);
                    for j in 0..NR {
                        acc[j][i] = _mm256_fmadd_ps(av, bv[j], acc[j][i]);
                    }
                }
                l += 8;
            }
            if l < k {
                let mask = tail_mask(k - l);
                let mut bv = [_mm256_setzero_ps(); NR];
                for j in 0..NR {
                    bv[j] = _mm256_maskload_ps(b.add(j * ldb + l), mask);
                }
                for i in 0..MR {
                    let av: __m256 = $load_tail(a.add(i * lda), l, k - l);
                    for j in 0..NR {
                        acc[j][i] = _mm256_fmadd_ps(av, bv[j], acc[j][i]);
                    }
                }
            }
            for j in 0..NR {
                store_sums::<MR>(&acc[j], c.add(j * ldc));
            }
        }

        /// Tiles of 4 rows of a × 3 rows of b (12 accumulators, 3 b-vectors and an
        /// a-vector: the 16 ymm registers), smaller ones at the edges.
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $gemm(
            k: usize,
            m: usize,
            n: usize,
            a: *const $T,
            lda: usize,
            b: *const f32,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            tile_grid!($tile, 3, [2, 1], k, m, n, a, lda, b, ldb, c, ldc)
        }
    };
}

avx2_gemm!(
    avx2_gemm_f32,
    avx2_tile_f32,
    f32,
    |p: *const f32, l: usize| _mm256_loadu_ps(p.add(l)),
    |p: *const f32, l: usize, r: usize| _mm256_maskload_ps(p.add(l), tail_mask(r))
);

avx2_gemm!(
    avx2_gemm_f16,
    avx2_tile_f16,
    u16,
    |p: *const u16, l: usize| _mm256_cvtph_ps(_mm_loadu_si128(p.add(l) as *const __m128i)),
    |p: *const u16, l: usize, r: usize| {
        // No masked 16-bit load: copy the last r halves into a zeroed buffer.
        let mut h = [0u16; 8];
        core::ptr::copy_nonoverlapping(p.add(l), h.as_mut_ptr(), r);
        _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
    }
);

/// e^y for 4 f64 lanes, y clamped to [-708, 709]: y = n·ln2 + r with |r| ≤ ln2/2, e^r by
/// its Taylor series to r^10 (relative error < 1e-12), 2^n built in the exponent bits.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn exp_pd(y: __m256d) -> __m256d {
    let y = _mm256_min_pd(_mm256_max_pd(y, _mm256_set1_pd(-708.0)), _mm256_set1_pd(709.0));
    // Adding 1.5·2^52 rounds to an integer and leaves it in the low mantissa bits.
    let magic = _mm256_set1_pd(6_755_399_441_055_744.0);
    let t = _mm256_add_pd(_mm256_mul_pd(y, _mm256_set1_pd(core::f64::consts::LOG2_E)), magic);
    let n = _mm256_sub_pd(t, magic);
    let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_HI), y);
    let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_LO), r);
    let mut p = _mm256_set1_pd(INV_FACT[10]);
    for c in INV_FACT[..10].iter().rev() {
        p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(*c));
    }
    let pow2 = _mm256_slli_epi64::<52>(_mm256_add_epi64(_mm256_castpd_si256(t), _mm256_set1_epi64x(1023)));
    _mm256_mul_pd(p, _mm256_castsi256_pd(pow2))
}

/// x / (1 + e^(-2u)), u = √(2/π)·x·(1 + 0.044715·x²), in f64, 4 at a time.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn gelu_pd(x: __m256d) -> __m256d {
    let x2 = _mm256_mul_pd(x, x);
    let inner = _mm256_fmadd_pd(x2, _mm256_set1_pd(GELU_C), _mm256_set1_pd(1.0));
    let m2u = _mm256_mul_pd(_mm256_mul_pd(x, _mm256_set1_pd(-2.0 * GELU_K)), inner);
    _mm256_div_pd(x, _mm256_add_pd(_mm256_set1_pd(1.0), exp_pd(m2u)))
}

#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_gelu(x: &mut [f32]) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    while i + 8 <= n {
        let v = _mm256_loadu_ps(p.add(i));
        let lo = gelu_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        let hi = gelu_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
        _mm256_storeu_ps(p.add(i), _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)));
        i += 8;
    }
    for v in &mut x[i..] {
        *v = crate::cpu::gelu_f32(*v);
    }
}

/// dy · GELU'(x) in f64, 4 at a time: s + 2x·s(1 − s)·u' with s = 1/(1 + e^(-2u)).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn gelu_back_pd(g: __m256d, x: __m256d) -> __m256d {
    let one = _mm256_set1_pd(1.0);
    let x2 = _mm256_mul_pd(x, x);
    let inner = _mm256_fmadd_pd(x2, _mm256_set1_pd(GELU_C), one);
    let m2u = _mm256_mul_pd(_mm256_mul_pd(x, _mm256_set1_pd(-2.0 * GELU_K)), inner);
    let s = _mm256_div_pd(one, _mm256_add_pd(one, exp_pd(m2u)));
    // 2u' = 2√(2/π)(1 + 3·0.044715·x²)
    let du2 = _mm256_mul_pd(_mm256_fmadd_pd(x2, _mm256_set1_pd(3.0 * GELU_C), one), _mm256_set1_pd(2.0 * GELU_K));
    let t = _mm256_mul_pd(_mm256_mul_pd(x, _mm256_mul_pd(s, _mm256_sub_pd(one, s))), du2);
    _mm256_mul_pd(g, _mm256_add_pd(s, t))
}

#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_gelu_back(dy: &[f32], x: &[f32], out: &mut [f32]) {
    let n = out.len().min(dy.len()).min(x.len());
    let (g, v, o) = (dy.as_ptr(), x.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        let (gv, xv) = (_mm256_loadu_ps(g.add(i)), _mm256_loadu_ps(v.add(i)));
        let lo = gelu_back_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(gv)), _mm256_cvtps_pd(_mm256_castps256_ps128(xv)));
        let hi =
            gelu_back_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(gv, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)));
        _mm256_storeu_ps(o.add(i), _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)));
        i += 8;
    }
    for ((o, &g), &v) in out[i..n].iter_mut().zip(&dy[i..n]).zip(&x[i..n]) {
        *o = crate::cpu::arch::gelu_back_f32(g, v);
    }
}

/// e^x for 8 f32 lanes, x ≤ 0 (0 below -87.3): Taylor series to r^7 on |r| ≤ ln2/2.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn exp_ps_nonpos(x: __m256) -> __m256 {
    let lo = _mm256_set1_ps(-87.3);
    let keep = _mm256_cmp_ps::<_CMP_GE_OQ>(x, lo);
    let x = _mm256_max_ps(x, lo);
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(core::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI_F32), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO_F32), r);
    let mut p = _mm256_set1_ps(INV_FACT[7] as f32);
    for c in INV_FACT[..7].iter().rev() {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c as f32));
    }
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
    _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(pow2)), keep)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_exp_sum(x: &mut [f32], sub: f32) -> f64 {
    let n = x.len();
    let p = x.as_mut_ptr();
    let s = _mm256_set1_ps(sub);
    let (mut acc0, mut acc1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
    let mut i = 0;
    while i + 8 <= n {
        let e = exp_ps_nonpos(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), s));
        _mm256_storeu_ps(p.add(i), e);
        acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        i += 8;
    }
    let mut lanes = [0f64; 4];
    _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_add_pd(acc0, acc1));
    let mut sum = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
    if i < n {
        // The tail through the same kernel, padded with -inf (whose exp is 0).
        let mut t = [f32::NEG_INFINITY; 8];
        t[..n - i].copy_from_slice(&x[i..]);
        let e = exp_ps_nonpos(_mm256_sub_ps(_mm256_loadu_ps(t.as_ptr()), s));
        _mm256_storeu_ps(t.as_mut_ptr(), e);
        x[i..].copy_from_slice(&t[..n - i]);
        sum += t[..n - i].iter().map(|&v| v as f64).sum::<f64>();
    }
    sum
}

#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_max(x: &[f32]) -> f32 {
    let n = x.len();
    let p = x.as_ptr();
    let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i + 8 <= n {
        m = _mm256_max_ps(m, _mm256_loadu_ps(p.add(i)));
        i += 8;
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    lanes.iter().chain(&x[i..]).copied().fold(f32::NEG_INFINITY, f32::max)
}

/// `Kernels::out_prod_panel` with AVX2 and FMA: 4 result rows × 16 columns in eight registers.
pub(crate) fn out_prod_panel(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]) {
    // SAFETY: this table is handed out only where AVX2 and FMA were detected.
    unsafe { panel_product_avx2(acc, n0, panel, cs) }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn panel_product_avx2(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]) {
    let rows = acc.len() / n0;
    assert!(acc.len() == rows * n0 && panel.len() >= OUT_PROD_J * n0 && cs.len() >= rows * OUT_PROD_J);
    let mut k = 0;
    while k + 4 <= rows {
        let mut i = 0;
        while i + 16 <= n0 {
            // A tile of 4 result rows × 16 columns in eight registers over the whole panel.
            let mut s = [_mm256_setzero_ps(); 8];
            for jj in 0..OUT_PROD_J {
                // SAFETY: row jj of the panel has n0 ≥ i + 16 values; cs has rows·OUT_PROD_J
                // (asserted above); every access below is inside those.
                unsafe {
                    let p = panel.as_ptr().add(jj * n0 + i);
                    let (p0, p1) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
                    for t in 0..4 {
                        let c = _mm256_broadcast_ss(&*cs.as_ptr().add((k + t) * OUT_PROD_J + jj));
                        s[2 * t] = _mm256_fmadd_ps(c, p0, s[2 * t]);
                        s[2 * t + 1] = _mm256_fmadd_ps(c, p1, s[2 * t + 1]);
                    }
                }
            }
            for t in 0..4 {
                // SAFETY: columns i..i + 16 of result row k + t.
                unsafe {
                    let o = acc.as_mut_ptr().add((k + t) * n0 + i);
                    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), s[2 * t]));
                    _mm256_storeu_ps(o.add(8), _mm256_add_ps(_mm256_loadu_ps(o.add(8)), s[2 * t + 1]));
                }
            }
            i += 16;
        }
        for t in 0..4 {
            let c: [f32; OUT_PROD_J] = cs[(k + t) * OUT_PROD_J..(k + t + 1) * OUT_PROD_J].try_into().unwrap();
            crate::cpu::arch::scalar::simd::tail_row(&mut acc[(k + t) * n0..(k + t + 1) * n0], i, n0, panel, &c);
        }
        k += 4;
    }
    for k in k..rows {
        let c: [f32; OUT_PROD_J] = cs[k * OUT_PROD_J..(k + 1) * OUT_PROD_J].try_into().unwrap();
        crate::cpu::arch::scalar::simd::tail_row(&mut acc[k * n0..(k + 1) * n0], 0, n0, panel, &c);
    }
}

/// `Kernels::q8_0_group` with AVX2 (x86's layout: 8 rows, quants in 4-byte pieces): per
/// block the 8 scales at once (F16C, exact), then per piece two rows' 4 quants widened to
/// i32, converted and scaled in one register, each half stored to its row.
pub(crate) fn q8_0_group(nb: usize, grp: &[u8], out: &mut [f32], ld: usize, bs: usize) {
    const _: () = assert!(crate::cpu::arch::kernel::Q8_0_GROUP.0 == 8 && crate::cpu::arch::kernel::Q8_0_GROUP.1 == 4);
    const BS: usize = 8 * 34;
    assert!(grp.len() >= nb * BS && (nb == 0 || out.len() >= 7 * ld + (nb - 1) * bs + 32));
    // SAFETY: this table is handed out only where AVX2 and F16C were detected; the reads and
    // writes below stay inside `grp` and `out` (asserted above).
    unsafe { q8_0_group_avx2(nb, grp.as_ptr(), out.as_mut_ptr(), ld, bs) }
}

#[target_feature(enable = "avx2,f16c")]
unsafe fn q8_0_group_avx2(nb: usize, grp: *const u8, out: *mut f32, ld: usize, bs: usize) {
    for t in 0..nb {
        let blk = grp.add(t * 8 * 34);
        let d = _mm256_cvtph_ps(_mm_loadu_si128(blk as *const __m128i));
        // Rows 2p and 2p + 1's scales, four lanes each.
        let ds: [__m256; 4] = core::array::from_fn(|p| {
            let (a, b) = (2 * p as i32, 2 * p as i32 + 1);
            _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(a, a, a, a, b, b, b, b))
        });
        let qs = blk.add(16);
        for c in 0..8 {
            for (p, &dp) in ds.iter().enumerate() {
                let q = _mm_loadl_epi64(qs.add(c * 32 + p * 8) as *const __m128i);
                let y = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), dp);
                let o = out.add(2 * p * ld + t * bs + c * 4);
                _mm_storeu_ps(o, _mm256_castps256_ps128(y));
                _mm_storeu_ps(o.add(ld), _mm256_extractf128_ps::<1>(y));
            }
        }
    }
}

/// `Kernels::out_prod_panel` with AVX-512F: register tiles of 8 result rows × 32 columns
/// (sixteen zmm sums, the column tail masked). Columns outermost: a tile's 32 columns of
/// the panel (4 KiB) stay in L1 while every row of the result passes over them.
pub(crate) fn out_prod_panel_512(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]) {
    // SAFETY: this table is handed out only where AVX-512 F (BW, VL, VNNI) was detected.
    unsafe { panel_product_512(acc, n0, panel, cs) }
}

#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn panel_product_512(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]) {
    let rows = acc.len() / n0;
    assert!(acc.len() == rows * n0 && panel.len() >= OUT_PROD_J * n0 && cs.len() >= rows * OUT_PROD_J);
    let (a, p, c) = (acc.as_mut_ptr(), panel.as_ptr(), cs.as_ptr());
    let mut i = 0;
    while i < n0 {
        let w = (n0 - i).min(32);
        let mask = |w: usize| if w >= 16 { 0xffff } else { ((1u32 << w) - 1) as __mmask16 };
        let (m0, m1) = (mask(w), mask(w.saturating_sub(16)));
        let mut k = 0;
        while k + 8 <= rows {
            tile_512::<8>(a, n0, p, c, k, i, m0, m1);
            k += 8;
        }
        if k + 4 <= rows {
            tile_512::<4>(a, n0, p, c, k, i, m0, m1);
            k += 4;
        }
        while k < rows {
            tile_512::<1>(a, n0, p, c, k, i, m0, m1);
            k += 1;
        }
        i += 32;
    }
}

/// Result rows k..k + T, columns i..i + 32 (lanes outside `m0`, `m1` neither read nor
/// written), summed over the panel's OUT_PROD_J rows in registers.
///
/// SAFETY: rows k..k + T of `acc` (n0 each) and of `cs` (OUT_PROD_J each) exist, the
/// panel has OUT_PROD_J rows of n0, and the masks cover only columns below n0.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_512<const T: usize>(
    acc: *mut f32,
    n0: usize,
    panel: *const f32,
    cs: *const f32,
    k: usize,
    i: usize,
    m0: __mmask16,
    m1: __mmask16,
) {
    let mut lo = [_mm512_setzero_ps(); T];
    let mut hi = [_mm512_setzero_ps(); T];
    for jj in 0..OUT_PROD_J {
        let p = panel.wrapping_add(jj * n0 + i);
        let p0 = _mm512_maskz_loadu_ps(m0, p);
        let p1 = _mm512_maskz_loadu_ps(m1, p.wrapping_add(16));
        for t in 0..T {
            let cj = _mm512_set1_ps(*cs.add((k + t) * OUT_PROD_J + jj));
            lo[t] = _mm512_fmadd_ps(cj, p0, lo[t]);
            hi[t] = _mm512_fmadd_ps(cj, p1, hi[t]);
        }
    }
    for t in 0..T {
        let o = acc.wrapping_add((k + t) * n0 + i);
        _mm512_mask_storeu_ps(o, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), lo[t]));
        let o1 = o.wrapping_add(16);
        _mm512_mask_storeu_ps(o1, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o1), hi[t]));
    }
}
