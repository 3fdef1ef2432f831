//! x86_64: SSE2 (always present on x86_64) and AVX2 + FMA + F16C (detected at run time
//! with `std`; without `std` only when the build enables those target features).

use core::arch::x86_64::*;

use half::f16;

use super::{f16_bits_to_f32, Simd, F16_EXP_ADJUST};

/// The x86_64 baseline: 4 lanes, multiply then add.
pub struct Sse2;

/// 8 lanes with fused multiply-add and hardware f16 conversion. Only [`Avx2::detect`]
/// hands one out, so holding it proves the CPU has the instructions.
pub struct Avx2 {
    _private: (),
}

static AVX2: Avx2 = Avx2 { _private: () };

impl Avx2 {
    pub fn detect() -> Option<&'static Avx2> {
        #[cfg(feature = "std")]
        let ok = std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c");
        #[cfg(not(feature = "std"))]
        let ok = cfg!(all(target_feature = "avx2", target_feature = "fma", target_feature = "f16c"));
        if ok {
            Some(&AVX2)
        } else {
            None
        }
    }
}

impl Simd for Sse2 {
    fn name(&self) -> &'static str {
        "sse2"
    }
    fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: SSE2 is part of x86_64; the kernel reads n elements of each.
        unsafe { sse2_dot_f32(a.as_ptr(), b.as_ptr(), n) }
    }
    fn dot_f16_f32(&self, a: &[f16], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: as above.
        unsafe { sse2_dot_f16_f32(a.as_ptr() as *const u16, b.as_ptr(), n) }
    }
}

impl Simd for Avx2 {
    fn name(&self) -> &'static str {
        "avx2"
    }
    fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: an Avx2 exists only after detection; n elements of each are read.
        unsafe { avx2_dot_f32(a.as_ptr(), b.as_ptr(), n) }
    }
    fn dot_f16_f32(&self, a: &[f16], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: as above.
        unsafe { avx2_dot_f16_f32(a.as_ptr() as *const u16, b.as_ptr(), n) }
    }
}

#[inline(always)]
unsafe fn hsum128(v: __m128) -> f32 {
    let hi = _mm_movehl_ps(v, v);
    let s = _mm_add_ps(v, hi);
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0b01));
    _mm_cvtss_f32(s)
}

unsafe fn sse2_dot_f32(a: *const f32, b: *const f32, n: usize) -> f32 {
    let mut acc = [_mm_setzero_ps(); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let x = _mm_loadu_ps(a.add(i + 4 * k));
            let y = _mm_loadu_ps(b.add(i + 4 * k));
            *acc = _mm_add_ps(*acc, _mm_mul_ps(x, y));
        }
        i += 16;
    }
    while i + 4 <= n {
        acc[0] = _mm_add_ps(acc[0], _mm_mul_ps(_mm_loadu_ps(a.add(i)), _mm_loadu_ps(b.add(i))));
        i += 4;
    }
    let mut sum = hsum128(_mm_add_ps(_mm_add_ps(acc[0], acc[1]), _mm_add_ps(acc[2], acc[3])));
    while i < n {
        sum += *a.add(i) * *b.add(i);
        i += 1;
    }
    sum
}

/// Four f16 (as u32 lanes, high halves zero) → four f32, as `f16_bits_to_f32` does.
#[inline(always)]
unsafe fn sse2_f16x4_to_f32(h: __m128i) -> __m128 {
    let em = _mm_and_si128(h, _mm_set1_epi32(0x7fff));
    let sign = _mm_slli_epi32(_mm_and_si128(h, _mm_set1_epi32(0x8000)), 16);
    let v = _mm_castps_si128(_mm_mul_ps(_mm_castsi128_ps(_mm_slli_epi32(em, 13)), _mm_set1_ps(F16_EXP_ADJUST)));
    let inf_nan = _mm_and_si128(_mm_cmpgt_epi32(em, _mm_set1_epi32(0x7bff)), _mm_set1_epi32(0x7f80_0000));
    _mm_castsi128_ps(_mm_or_si128(_mm_or_si128(v, inf_nan), sign))
}

unsafe fn sse2_dot_f16_f32(a: *const u16, b: *const f32, n: usize) -> f32 {
    let zero = _mm_setzero_si128();
    let mut acc = [_mm_setzero_ps(); 2];
    let mut i = 0;
    while i + 8 <= n {
        let h = _mm_loadu_si128(a.add(i) as *const __m128i);
        let lo = sse2_f16x4_to_f32(_mm_unpacklo_epi16(h, zero));
        let hi = sse2_f16x4_to_f32(_mm_unpackhi_epi16(h, zero));
        acc[0] = _mm_add_ps(acc[0], _mm_mul_ps(lo, _mm_loadu_ps(b.add(i))));
        acc[1] = _mm_add_ps(acc[1], _mm_mul_ps(hi, _mm_loadu_ps(b.add(i + 4))));
        i += 8;
    }
    let mut sum = hsum128(_mm_add_ps(acc[0], acc[1]));
    while i < n {
        sum += f16_bits_to_f32(*a.add(i)) * *b.add(i);
        i += 1;
    }
    sum
}

#[inline(always)]
unsafe fn hsum256(v: __m256) -> f32 {
    hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)))
}

#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_dot_f32(a: *const f32, b: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            *acc = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i + 8 * k)), _mm256_loadu_ps(b.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(b.add(i)), acc[0]);
        i += 8;
    }
    let mut sum = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    while i < n {
        sum += *a.add(i) * *b.add(i);
        i += 1;
    }
    sum
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn avx2_dot_f16_f32(a: *const u16, b: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_cvtph_ps(_mm_loadu_si128(a.add(i + 8 * k) as *const __m128i));
            *acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(b.add(i + 8 * k)), *acc);
        }
        i += 32;
    }
    while i + 8 <= n {
        let x = _mm256_cvtph_ps(_mm_loadu_si128(a.add(i) as *const __m128i));
        acc[0] = _mm256_fmadd_ps(x, _mm256_loadu_ps(b.add(i)), acc[0]);
        i += 8;
    }
    let mut sum = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    while i < n {
        sum += f16_bits_to_f32(*a.add(i)) * *b.add(i);
        i += 1;
    }
    sum
}
