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
