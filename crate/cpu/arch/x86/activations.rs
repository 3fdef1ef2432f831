//! The activations' side of a product on AVX2: rows quantized to Q8_0 and Q8_K (ggml's
//! `quantize_row_q8_0_ref` and `quantize_row_q8_K_ref`, bit for bit) and what [`super::super::ColPrep`] takes from each
//! Q8_0 row once (block scales as f32, block quant sums). These were scalar loops that took
//! ~14% of a Q8_0 prompt (Q8_K: ~7% of a Q4_K_M one) once the products got faster.

use core::arch::x86_64::*;

use crate::quants::blocks::{fp32_to_fp16, BlockQ8_0};

/// [`crate::quants::scalar::quantize_q8_0`] eight lanes at a time, bit for bit: the running
/// max skips NaN as the scalar fold does (`maxps` returns its second operand on NaN, and max
/// is order-free otherwise); rounding is trunc, then ±1 where the exact remainder reaches
/// ±0.5 (what `roundf` does, a no-op past 2^23, for ±inf and NaN); the clamp and the NaN
/// mask give `as i8`'s saturation.
///
/// # Safety
/// AVX2 must be available; `dst` holds a block per 32 values of `src`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8_0] = bytemuck::cast_slice_mut(dst);
    let (half, one) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.0));
    let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    for (x, y) in src.chunks_exact(crate::types::QK).zip(blocks) {
        let v: [__m256; 4] = core::array::from_fn(|k| _mm256_loadu_ps(x.as_ptr().add(8 * k)));
        let mut m = _mm256_setzero_ps();
        for &v in &v {
            m = _mm256_max_ps(_mm256_and_ps(v, abs), m);
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.d = fp32_to_fp16(d).to_le_bytes();
        let idv = _mm256_set1_ps(id);
        let q: [__m256i; 4] = core::array::from_fn(|k| {
            let s = _mm256_mul_ps(v[k], idv);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(s);
            let frac = _mm256_sub_ps(s, t);
            let up = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), one);
            let down = _mm256_and_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(frac, _mm256_sub_ps(_mm256_setzero_ps(), half)), one);
            let r = _mm256_sub_ps(_mm256_add_ps(t, up), down);
            // maxps/minps keep their second operand on NaN, then NaN lanes become 0.
            let r = _mm256_min_ps(hi, _mm256_max_ps(lo, r));
            let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
            _mm256_cvtps_epi32(r)
        });
        // packs work within 128-bit halves: [0 1 | 2 3] words, then bytes [0 1 2 3 | 4 5 6 7]
        // in the order q0.lo q1.lo q2.lo q3.lo | q0.hi …; the permute puts them back.
        let w01 = _mm256_packs_epi32(q[0], q[1]);
        let w23 = _mm256_packs_epi32(q[2], q[3]);
        let b = _mm256_packs_epi16(w01, w23);
        let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(y.qs.as_mut_ptr() as *mut __m256i, b);
    }
}

/// For each of the `nb` Q8_0 blocks of one row: its scale as f32 into `dy` and, when
/// `sums`, its quant sum into `ysum` (exact); whether the row holds a quant of -128.
///
/// # Safety
/// AVX2 and F16C must be available; `row` holds `nb` blocks, `dy` and `ysum` `nb` entries.
#[target_feature(enable = "avx2,f16c")]
pub(in crate::cpu::arch) unsafe fn col_prep_q8_0(
    row: &[u8],
    nb: usize,
    dy: &mut [f32],
    ysum: &mut [i32],
    sums: bool,
) -> bool {
    let ys: &[BlockQ8_0] = bytemuck::cast_slice(&row[..nb * 34]);
    let (ones, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    let m128 = _mm256_set1_epi8(-128);
    let mut bad = _mm256_setzero_si256();
    for (t, y) in ys.iter().enumerate() {
        dy[t] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(y.d) as i32)));
        let q = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(q, m128));
        if sums {
            // 1·q pairs in i16 (|2q| ≤ 256), then pairs of those in i32: exact.
            let s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), ones16);
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            ysum[t] = _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)));
        }
    }
    _mm256_testz_si256(bad, bad) == 0
}

/// [`crate::quants::scalar::quantize_q8_k`] eight lanes at a time, bit for bit: the signed
/// absmax is the first value of the largest magnitude (NaN skipped as the scalar's strict
/// `>` does); every quant is the scalar's `nearest_int(iscale·x)` (the same f32 multiply and
/// add, then the same bits), capped at 127 and cut to its low byte (`as i8`).
///
/// # Safety
/// AVX2 must be available; `dst` holds a block per 256 values of `src`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    use crate::quants::blocks::BlockQ8_K;
    let blocks: &mut [BlockQ8_K] = bytemuck::cast_slice_mut(dst);
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let (magic, mant, bias) =
        (_mm256_set1_ps(12_582_912.0), _mm256_set1_epi32(0x007f_ffff), _mm256_set1_epi32(0x0040_0000));
    let (cap, low) = (_mm256_set1_epi32(127), _mm256_set1_epi32(0xff));
    let (ones, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    for (x, y) in src.chunks_exact(crate::types::QK_K).zip(blocks) {
        let mut m = _mm256_setzero_ps();
        for k in 0..32 {
            m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x.as_ptr().add(8 * k)), abs), m);
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps::<1>(m, m)));
        if amax == 0.0 {
            *y = bytemuck::Zeroable::zeroed();
            continue;
        }
        let first = x.iter().position(|v| f32::from_bits(v.to_bits() & 0x7fff_ffff) == amax);
        let max = x[first.expect("amax is one of the values")];
        let iscale = -127.0 / max;
        let iv = _mm256_set1_ps(iscale);
        for g in 0..8 {
            let q: [__m256i; 4] = core::array::from_fn(|k| {
                let v = _mm256_loadu_ps(x.as_ptr().add(32 * g + 8 * k));
                let t = _mm256_add_ps(_mm256_mul_ps(iv, v), magic);
                let q = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(t), mant), bias);
                _mm256_and_si256(_mm256_min_epi32(q, cap), low)
            });
            let b = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
            let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(y.qs.as_mut_ptr().add(32 * g) as *mut __m256i, b);
            // Sums of 16 quants (|Σ| ≤ 2048): one per 128-bit half.
            let s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, b), ones16);
            let s = _mm256_hadd_epi32(s, s);
            let s = _mm256_hadd_epi32(s, s);
            y.bsums[2 * g] = (_mm256_extract_epi32::<0>(s) as i16).to_le_bytes();
            y.bsums[2 * g + 1] = (_mm256_extract_epi32::<4>(s) as i16).to_le_bytes();
        }
        y.d = (1.0 / iscale).to_le_bytes();
    }
}
