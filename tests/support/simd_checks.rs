//! Checks of the float kernels of every ISA table (`ggweb::cpu::arch::Kernels`) this build can run,
//! shared by tests/kernels/ops.rs (native: scalar, SSE2, AVX2) and tests/browser/simd.rs
//! (scalar, simd128).
#![allow(dead_code)]

use ggweb::cpu::arch::{f16_bits_to_f32, Isa, Kernels};
use ggweb::GgmlType;
use half::f16;

/// Every table this machine runs, scalar first.
fn available() -> Vec<&'static Kernels> {
    Isa::available().into_iter().map(|i| i.kernels().expect("available")).collect()
}

/// The F32 (or F16, `a` as bits) entry's float product of table `s`.
///
/// # Safety
/// As `ggweb::cpu::arch::FloatGemm` says.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm<T>(
    s: &Kernels,
    ty: GgmlType,
    k: usize,
    m: usize,
    n: usize,
    a: *const T,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    let g = s.types[ty as usize].float_gemm.expect("F32 and F16 have a float product");
    g(k, m, n, a as *const u8, lda, b, ldb, c, ldc)
}

use crate::support::rng::Rng;

/// Each ISA's f16 row conversion on every bit pattern (odd length: vector loop and tail).
pub fn f16_rows_convert_exactly() {
    let all: Vec<u16> = (0..=u16::MAX).chain([1, 2, 3]).collect();
    for s in available() {
        let mut out = vec![0f32; all.len()];
        (s.f16_to_f32)(&all, &mut out);
        for (&h, &got) in all.iter().zip(&out) {
            let want = f16::from_bits(h).to_f32();
            if want.is_nan() {
                assert!(got.is_nan(), "{} {h:#06x}", s.name);
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{} {h:#06x}", s.name);
            }
        }
    }
}

/// The gemm tiles of every ISA against f64, on shapes that hit every edge tile and tail,
/// with strides wider than the rows; and each element exactly as a 1×1 call gives it, so
/// the result does not depend on how a matrix is cut into tiles or jobs.
pub fn gemm_tiles_agree_with_f64_and_with_single_dots() {
    let mut rng = Rng::xorshift32(0x2468_ace1);
    for (k, m, n) in [(1usize, 1usize, 1usize), (7, 5, 4), (8, 4, 3), (9, 9, 7), (31, 3, 2), (64, 8, 6), (100, 13, 5)] {
        let (lda, ldb, ldc) = (k + 3, k + 5, m + 2);
        let a: Vec<f32> = (0..m * lda).map(|_| rng.unit_u32() * 2.0 - 1.0).collect();
        let b: Vec<f32> = (0..n * ldb).map(|_| rng.unit_u32() * 2.0 - 1.0).collect();
        let h: Vec<u16> = a.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
        for s in available() {
            for f16_a in [false, true] {
                let mut c = vec![f32::NAN; n * ldc];
                let mut one = [0f32];
                // SAFETY: rows of k elements at the given strides lie in the vectors.
                unsafe {
                    if f16_a {
                        gemm(s, GgmlType::F16, k, m, n, h.as_ptr(), lda, b.as_ptr(), ldb, c.as_mut_ptr(), ldc);
                    } else {
                        gemm(s, GgmlType::F32, k, m, n, a.as_ptr(), lda, b.as_ptr(), ldb, c.as_mut_ptr(), ldc);
                    }
                }
                for j in 0..n {
                    for i in 0..m {
                        let av = |l: usize| {
                            if f16_a {
                                f16::from_bits(h[i * lda + l]).to_f64()
                            } else {
                                a[i * lda + l] as f64
                            }
                        };
                        let want: f64 = (0..k).map(|l| av(l) * b[j * ldb + l] as f64).sum();
                        let got = c[j * ldc + i];
                        let what = format!("{} f16={f16_a} k={k} m={m} n={n} ({i}, {j})", s.name);
                        assert!((got as f64 - want).abs() <= 1e-6 * (k as f64 + 1.0), "{what}: {got} vs {want}");
                        // SAFETY: one row of each.
                        unsafe {
                            let (ai, bj) = (i * lda, j * ldb);
                            if f16_a {
                                gemm(
                                    s,
                                    GgmlType::F16,
                                    k,
                                    1,
                                    1,
                                    h[ai..].as_ptr(),
                                    lda,
                                    b[bj..].as_ptr(),
                                    ldb,
                                    one.as_mut_ptr(),
                                    1,
                                );
                            } else {
                                gemm(
                                    s,
                                    GgmlType::F32,
                                    k,
                                    1,
                                    1,
                                    a[ai..].as_ptr(),
                                    lda,
                                    b[bj..].as_ptr(),
                                    ldb,
                                    one.as_mut_ptr(),
                                    1,
                                );
                            }
                        }
                        assert_eq!(got.to_bits(), one[0].to_bits(), "{what}: tile vs single");
                    }
                    // Padding between rows of c is left alone.
                    assert!(c[j * ldc + m..(j + 1) * ldc].iter().all(|x| x.is_nan()));
                }
            }
            let mut conv = vec![0f32; h.len()];
            (s.f16_to_f32)(&h, &mut conv);
            assert!(conv.iter().zip(&h).all(|(&x, &y)| x.to_bits() == f16_bits_to_f32(y).to_bits()), "{}", s.name);
        }
    }
}

/// GELU, softmax exponentials and max of every ISA: specials first, so the vector loops
/// see them, then random values; lengths around the vector widths.
pub fn gelu_exp_sum_and_max_of_every_isa() {
    let mut rng = Rng::xorshift32(0x1357_9bdf);
    let specials =
        [0.0f32, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 3.0, -3.0, 5.0, -5.0, 9.5, -9.5, 20.0, -20.0, 88.0, -88.0];
    let mut xs: Vec<f32> = specials.to_vec();
    xs.extend((0..1000).map(|_| rng.unit_u32() * 24.0 - 12.0));
    // The f64 formula, rounded once: GELU's reference (x / (1 + e^(-2u)) is the tanh form).
    let (k, c) = (0.797_884_560_802_865_4f64, 0.044_715f64);
    let gelu64 = |x: f64| x / (1.0 + (-2.0 * k * x * (1.0 + c * x * x)).exp());
    for s in available() {
        for len in [xs.len(), 17, 9, 8, 7, 1, 0] {
            let mut g = xs[..len].to_vec();
            (s.gelu)(&mut g);
            for (&x, &y) in xs.iter().zip(&g) {
                let want = gelu64(x as f64);
                let tol = 1e-6 * want.abs() + 1e-45;
                assert!((y as f64 - want).abs() <= tol, "{} gelu({x}) = {y}, want {want}", s.name);
            }
        }
        for len in [0usize, 1, 5, 8, 11, 16, 100, 1023] {
            let row: Vec<f32> =
                (0..len).map(|i| if i % 7 == 3 { f32::NEG_INFINITY } else { rng.unit_u32() * 40.0 - 30.0 }).collect();
            let max = (s.max)(&row);
            assert_eq!(max, row.iter().copied().fold(f32::NEG_INFINITY, f32::max), "{} max", s.name);
            let mut e = row.clone();
            let sum = (s.exp_sum)(&mut e, max);
            let mut want_sum = 0.0f64;
            for (&x, &y) in row.iter().zip(&e) {
                let want = ((x - max) as f64).exp();
                want_sum += want;
                // 2 ulp of the exp; 0 (or a subnormal) where x - max < -87.3 (or -inf).
                let tol = if (x - max) < -87.3 { 1.2e-38 } else { 2.5e-7 * want };
                assert!((y as f64 - want).abs() <= tol, "{} exp({}) = {y}, want {want}", s.name, x - max);
            }
            assert!((sum - want_sum).abs() <= 1e-6 * want_sum.max(1e-30), "{} sum {sum} vs {want_sum}", s.name);
        }
    }
}
