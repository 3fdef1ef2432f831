//! wasm32 SIMD128 (`-C target-feature=+simd128`): 4 lanes, multiply then add (fused
//! multiply-add is only in relaxed-simd, which not every browser has).

use core::arch::wasm32::*;

use half::f16;

use super::{f16_bits_to_f32, Simd, F16_EXP_ADJUST};

pub struct Simd128;

impl Simd for Simd128 {
    fn name(&self) -> &'static str {
        "simd128"
    }
    fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: reads n elements of each; wasm loads need no alignment.
        unsafe { dot_f32(a.as_ptr(), b.as_ptr(), n) }
    }
    fn dot_f16_f32(&self, a: &[f16], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        // SAFETY: as above.
        unsafe { dot_f16_f32(a.as_ptr() as *const u16, b.as_ptr(), n) }
    }
}

#[inline(always)]
fn hsum(v: v128) -> f32 {
    (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<2>(v))
        + (f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<3>(v))
}

unsafe fn dot_f32(a: *const f32, b: *const f32, n: usize) -> f32 {
    let mut acc = [f32x4_splat(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, acc) in acc.iter_mut().enumerate() {
            let x = v128_load(a.add(i + 4 * k) as *const v128);
            let y = v128_load(b.add(i + 4 * k) as *const v128);
            *acc = f32x4_add(*acc, f32x4_mul(x, y));
        }
        i += 16;
    }
    while i + 4 <= n {
        let x = v128_load(a.add(i) as *const v128);
        let y = v128_load(b.add(i) as *const v128);
        acc[0] = f32x4_add(acc[0], f32x4_mul(x, y));
        i += 4;
    }
    let mut sum = hsum(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3])));
    while i < n {
        sum += *a.add(i) * *b.add(i);
        i += 1;
    }
    sum
}

/// Four f16 in u32 lanes → four f32, as `f16_bits_to_f32` does.
#[inline(always)]
fn f16x4_to_f32(h: v128) -> v128 {
    let em = v128_and(h, u32x4_splat(0x7fff));
    let sign = i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    let v = f32x4_mul(i32x4_shl(em, 13), f32x4_splat(F16_EXP_ADJUST));
    let inf_nan = v128_and(u32x4_gt(em, u32x4_splat(0x7bff)), u32x4_splat(0x7f80_0000));
    v128_or(v128_or(v, inf_nan), sign)
}

unsafe fn dot_f16_f32(a: *const u16, b: *const f32, n: usize) -> f32 {
    let mut acc = [f32x4_splat(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        let h0 = v128_load(a.add(i) as *const v128);
        let h1 = v128_load(a.add(i + 8) as *const v128);
        let xs = [
            f16x4_to_f32(u32x4_extend_low_u16x8(h0)),
            f16x4_to_f32(u32x4_extend_high_u16x8(h0)),
            f16x4_to_f32(u32x4_extend_low_u16x8(h1)),
            f16x4_to_f32(u32x4_extend_high_u16x8(h1)),
        ];
        for k in 0..4 {
            acc[k] = f32x4_add(acc[k], f32x4_mul(xs[k], v128_load(b.add(i + 4 * k) as *const v128)));
        }
        i += 16;
    }
    while i + 8 <= n {
        let h = v128_load(a.add(i) as *const v128);
        acc[0] =
            f32x4_add(acc[0], f32x4_mul(f16x4_to_f32(u32x4_extend_low_u16x8(h)), v128_load(b.add(i) as *const v128)));
        acc[1] = f32x4_add(
            acc[1],
            f32x4_mul(f16x4_to_f32(u32x4_extend_high_u16x8(h)), v128_load(b.add(i + 4) as *const v128)),
        );
        i += 8;
    }
    let mut sum = hsum(f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3])));
    while i < n {
        sum += f16_bits_to_f32(*a.add(i)) * *b.add(i);
        i += 1;
    }
    sum
}
