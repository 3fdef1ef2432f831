//! The CPU kernels compiled for wasm32 with simd128, run by wasm-bindgen-test in a headless
//! browser: `wasm-pack test --headless --chrome -- --test browser -- simd::`. The kernels' own
//! checks (dots at every tail length, tiles, bit-identical batched rows); each op against
//! its f64 reference is tests/browser/backend_ops.rs.

use crate::support::rng::Rng;
use crate::support::simd_checks;
use crate::support::tensors::*;
use ggweb::cpu::arch;
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
fn simd128_kernels_are_the_ones_used() {
    assert_eq!(arch::kernels().name, "simd128");
    let names: Vec<&str> = arch::Isa::available().iter().map(|i| i.kernels().unwrap().name).collect();
    assert_eq!(names, ["scalar", "simd128"]);
}

/// simd128 and scalar F32 dots (`vec_dot`, the one f32 dot of each table) and F16 float
/// products against f64, every tail length.
#[wasm_bindgen_test]
fn dots_match_f64() {
    let mut rng = Rng::new(1);
    for n in [0usize, 1, 3, 5, 7, 9, 15, 17, 33, 255, 768] {
        let a = rng.vec(n, -1.0, 1.0);
        let b = rng.vec(n, -1.0, 1.0);
        let h: Vec<half::f16> = a.iter().map(|&x| half::f16::from_f32(x)).collect();
        let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
        let want_h: f64 = h.iter().zip(&b).map(|(&x, &y)| x.to_f64() * y as f64).sum();
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (ab, bb) = (bytes(&a), bytes(&b));
        for isa in arch::Isa::available() {
            // f32 sums of n products ≤ 1: within n·2^-24.
            let tol = 1e-6 * (n as f64 + 1.0);
            let got = arch::vec_dot_isa(isa, ggweb::GgmlType::F32, n, &ab, &bb).unwrap();
            assert!((got as f64 - want).abs() <= tol, "{isa:?} n={n}");
            let g = isa.kernels().unwrap().types[ggweb::GgmlType::F16 as usize].float_gemm.unwrap();
            let mut c = [0f32];
            // SAFETY: one row of n elements each; `isa` runs here.
            unsafe { g(n, 1, 1, h.as_ptr() as *const u8, n, b.as_ptr(), n, c.as_mut_ptr(), 1) };
            assert!((c[0] as f64 - want_h).abs() <= tol, "{isa:?} f16 n={n}");
        }
    }
}

/// The simd128 tiles and the i16 quantized products: a decode step's row order changes no
/// row's bits (tensors::check_one_row_of_b_gives_the_batched_bits).
#[wasm_bindgen_test]
fn mul_mat_one_row_of_b_gives_the_batched_bits() {
    check_one_row_of_b_gives_the_batched_bits(&[]);
}

/// A decode step's K·q, position blocks across all heads: the prompt path's bits.
#[wasm_bindgen_test]
fn mul_mat_decode_kq_gives_the_batched_bits() {
    check_decode_kq_gives_the_batched_bits(&[]);
}

/// The gemm tiles, f16 conversion, GELU, exp and max of simd128 (and scalar), as natively.
#[wasm_bindgen_test]
fn simd128_gemm_gelu_exp_and_f16_rows() {
    simd_checks::f16_rows_convert_exactly();
    simd_checks::gemm_tiles_agree_with_f64_and_with_single_dots();
    simd_checks::gelu_exp_sum_and_max_of_every_isa();
}

/// simd128's F16 float product is its F32 product on the rows converted to f32, bit for bit
/// (the same tiles and sums; K with K % 8 < 4 so that both take the same elements in their
/// scalar tails): on ordinary rows, which take the scaled tile (`a` · 2^-112 against `b` ·
/// 2^112), on rows with many f16 subnormals of both signs (whose steps take the values
/// themselves against the unscaled `b`: no subnormal f32 operand), and on rows where that tile
/// hands over to the converting one: an f16 infinity or NaN in a row of `a`, |b| ≥ 2^16 (where
/// `b` · 2^112 overflows), b = ±inf.
/// NaN results are compared as NaN.
#[wasm_bindgen_test]
fn f16_products_are_the_f32_products_of_the_converted_rows() {
    let s = arch::Isa::available().into_iter().map(|i| i.kernels().unwrap()).find(|s| s.name == "simd128").unwrap();
    let (g16, g32) = (
        s.types[ggweb::GgmlType::F16 as usize].float_gemm.unwrap(),
        s.types[ggweb::GgmlType::F32 as usize].float_gemm.unwrap(),
    );
    let mut rng = Rng::xorshift32(0x0f16_2112);
    for (case, (k, m, n)) in [(8usize, 4usize, 1usize), (64, 4, 1), (99, 9, 1), (768, 8, 1), (257, 7, 2), (64, 5, 3)]
        .into_iter()
        .enumerate()
        .flat_map(|c| (0..5).map(move |what| (what, c.1)))
    {
        let lda = k + 8;
        // Every finite exponent, both signs.
        let mut h: Vec<u16> =
            (0..m * lda).map(|_| (rng.next_u32() % 0x7c00) as u16 | (rng.next_u32() as u16 & 0x8000)).collect();
        let mut b: Vec<f32> = (0..n * k).map(|_| rng.unit_u32() * 2.0 - 1.0).collect();
        let at = |rng: &mut Rng, len: usize| rng.below(len);
        match case {
            1 => [0x7c00u16, 0xfc00, 0x7e01, 0xfd55].iter().for_each(|&v| h[at(&mut rng, m * lda)] = v),
            2 => (0..m * lda / 3).for_each(|_| {
                h[at(&mut rng, m * lda)] = (rng.next_u32() % 0x400) as u16 | (rng.next_u32() as u16 & 0x8000)
            }),
            3 => [65536.0f32, -1e6].iter().for_each(|&v| b[at(&mut rng, n * k)] = v),
            4 => b[at(&mut rng, n * k)] = f32::NEG_INFINITY,
            _ => {}
        }
        let a32: Vec<f32> = h.iter().map(|&x| half::f16::from_bits(x).to_f32()).collect();
        let (mut c16, mut c32) = (vec![0f32; n * m], vec![0f32; n * m]);
        // SAFETY: m rows of lda (k used), n rows of k, n rows of m results.
        unsafe {
            g16(k, m, n, h.as_ptr() as *const u8, lda, b.as_ptr(), k, c16.as_mut_ptr(), m);
            g32(k, m, n, a32.as_ptr() as *const u8, lda, b.as_ptr(), k, c32.as_mut_ptr(), m);
        }
        for (i, (x, y)) in c16.iter().zip(&c32).enumerate() {
            let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
            assert!(same, "case {case} k={k} m={m} n={n} element {i}: {x} vs {y}");
        }
        if case == 0 {
            assert!(c16.iter().all(|x| x.is_finite()), "k={k}: ordinary rows give finite sums");
        }
    }
}
