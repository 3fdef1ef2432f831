//! The CPU kernels compiled for wasm32 with simd128, run by wasm-bindgen-test in a headless
//! browser: `wasm-pack test --headless --chrome -- --test wasm_simd`.
//! The same checks and tolerances as tests/kernels/ops.rs, on the shapes that reach the SIMD
//! tails.
#![cfg(target_arch = "wasm32")]

mod support {
    pub mod rng;
    pub mod simd_checks;
    pub mod tensors;
}

use ggweb::cpu::simd;
use ggweb::types::GgmlType::{F16, F32};
use support::rng::Rng;
use support::simd_checks;
use support::tensors::*;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
fn simd128_kernels_are_the_ones_used() {
    assert_eq!(simd::best().name(), "simd128");
    let names: Vec<&str> = simd::available().iter().map(|s| s.name()).collect();
    assert_eq!(names, ["scalar", "simd128"]);
}

/// simd128 and scalar dots against f64, every tail length.
#[wasm_bindgen_test]
fn dots_match_f64() {
    let mut rng = Rng::new(1);
    for n in [0usize, 1, 3, 5, 7, 9, 15, 17, 33, 255, 768] {
        let a = rng.vec(n, -1.0, 1.0);
        let b = rng.vec(n, -1.0, 1.0);
        let h: Vec<half::f16> = a.iter().map(|&x| half::f16::from_f32(x)).collect();
        let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
        let want_h: f64 = h.iter().zip(&b).map(|(&x, &y)| x.to_f64() * y as f64).sum();
        for s in simd::available() {
            // f32 sums of n products ≤ 1: within n·2^-24.
            let tol = 1e-6 * (n as f64 + 1.0);
            assert!((s.dot_f32(&a, &b) as f64 - want).abs() <= tol, "{} n={n}", s.name());
            assert!((s.dot_f16_f32(&h, &b) as f64 - want_h).abs() <= tol, "{} f16 n={n}", s.name());
        }
    }
}

/// As in tests/kernels/ops.rs: error ≤ 1e-5·Σ|a·b| for f32 accumulation with K ≤ 1024.
#[wasm_bindgen_test]
fn mul_mat_f32_and_f16_k_not_multiple_of_4() {
    let ctx = ctx(16);
    let mut rng = Rng::new(2);
    for ty in [F32, F16] {
        for (k, m, n) in [(1i64, 3i64, 2i64), (7, 5, 3), (17, 9, 4), (63, 8, 2), (257, 33, 3)] {
            let (a, av) = random_tensor(&ctx, &mut rng, ty, [k, m, 1, 1], -1.0, 1.0);
            let (b, bv) = random_tensor(&ctx, &mut rng, F32, [k, n, 3, 1], -1.0, 1.0);
            let c = ctx.mul_mat(&a, &b);
            compute(&c, 1);
            let (want, mag) = ref_mul_mat(&av, ne_of(&a), &bv, ne_of(&b));
            assert_close(&format!("{ty} K={k}"), &c.to_f32_vec(), &want, |i| 1e-5 * mag[i] + 1e-30);
        }
    }
    // Attention-like: permuted operands with packed rows.
    let (a, av) = random_strided_rows(&ctx, &mut rng, F32, [19, 6, 3, 1]);
    let (b, bv) = random_strided_rows(&ctx, &mut rng, F32, [19, 4, 3, 1]);
    let c = ctx.mul_mat(&a, &b);
    compute(&c, 1);
    let (want, mag) = ref_mul_mat(&av, ne_of(&a), &bv, ne_of(&b));
    assert_close("strided", &c.to_f32_vec(), &want, |i| 1e-5 * mag[i] + 1e-30);
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

/// As in tests/kernels/ops.rs: 2e-6 relative plus 1e-9 absolute.
#[wasm_bindgen_test]
fn soft_max_with_mask() {
    let ctx = ctx(4);
    let mut rng = Rng::new(3);
    let (a, av) = random_strided(&ctx, &mut rng, F32, [13, 4, 2, 1]);
    let mv: Vec<f32> =
        (0..13 * 4).map(|i| if i % 13 > i / 13 + 8 { f32::NEG_INFINITY } else { rng.uniform(-1.0, 1.0) }).collect();
    let m = ctx.new_tensor_2d(F32, 13, 4);
    m.set_f32_slice(&mv);
    let s = ctx.soft_max_ext(&a, Some(&m), 0.25, 0.0);
    compute(&s, 1);
    let want = ref_soft_max(&av, ne_of(&a), Some((&mv, [13, 4, 1, 1])), 0.25);
    assert_close("soft_max", &s.to_f32_vec(), &want, |i| 2e-6 * want[i] + 1e-9);
}

/// As in tests/kernels/ops.rs: 2e-6 absolute.
#[wasm_bindgen_test]
fn norm_rows() {
    let ctx = ctx(4);
    let mut rng = Rng::new(4);
    let (a, av) = random_tensor(&ctx, &mut rng, F32, [768, 3, 1, 1], -2.0, 3.0);
    let n = ctx.norm(&a, 1e-5);
    compute(&n, 1);
    assert_close("norm", &n.to_f32_vec(), &ref_norm(&av, 768, 1e-5), |_| 2e-6);
}

/// As in tests/kernels/ops.rs: 1e-6 relative.
#[wasm_bindgen_test]
fn gelu_tanh_form() {
    let ctx = ctx(1);
    let mut rng = Rng::new(5);
    let xs = rng.vec(2000, -10.0, 10.0);
    let a = ctx.new_tensor_1d(F32, xs.len() as i64);
    a.set_f32_slice(&xs);
    let g = ctx.gelu(&a);
    compute(&g, 1);
    let want: Vec<f64> = xs.iter().map(|&x| ref_gelu(x as f64)).collect();
    assert_close("gelu", &g.to_f32_vec(), &want, |i| 1e-6 * want[i].abs() + 1e-45);
}

/// The gemm tiles, f16 conversion, GELU, exp and max of simd128 (and scalar), as natively.
#[wasm_bindgen_test]
fn simd128_gemm_gelu_exp_and_f16_rows() {
    simd_checks::f16_rows_convert_exactly();
    simd_checks::gemm_tiles_agree_with_f64_and_with_single_dots();
    simd_checks::gelu_exp_sum_and_max_of_every_isa();
}
