//! Block quantization formats with ggml's exact layouts: dequantize every supported
//! type, quantize the ones we write, and the `vec_dot` kernels quantized `mul_mat` uses.
//!
//! The contract other modules code against (bodies filled in by the quant-format work):
//! - `dequantize_row(ty, src, dst)`: `dst.len()` elements from `src` (row bytes of `ty`).
//! - `quantize_row(ty, src, dst)`: `src.len()` f32 elements into `dst` (`ty.row_size(n)` bytes).
//! - `vec_dot(ty, n, a, b)`: dot product of `n` elements, `a` a row of `ty` (a weight row),
//!   `b` a row of `ty.vec_dot_type()` (the activations, quantized once per row).

use crate::types::GgmlType;

/// Converts one row of `ty` to f32.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    let _ = (ty, src, dst);
    unimplemented!("quants: dequantize_row")
}

/// Converts f32 to one row of `ty` (ggml's reference rounding).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    let _ = (ty, src, dst);
    unimplemented!("quants: quantize_row")
}

/// Dot product of a row of `ty` with a row of `ty.vec_dot_type()`, `n` elements.
pub fn vec_dot(ty: GgmlType, n: usize, a: &[u8], b: &[u8]) -> f32 {
    let _ = (ty, n, a, b);
    unimplemented!("quants: vec_dot")
}
