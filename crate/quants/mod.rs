//! Block quantization formats with ggml's exact layouts (ggml-base's half of the types):
//! dequantize every supported type and quantize the ones we write, with the reference
//! rounding. The kernels that compute on these blocks (`vec_dot`, gemm, the SIMD and packed
//! forms) are the CPU backend's, in `crate::cpu::arch`; nothing here imports them.
//!
//! ```
//! use ggweb::quants::{dequantize_row, quantize_row};
//! use ggweb::GgmlType;
//! let x: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 8.0).collect();
//! let mut q = vec![0u8; GgmlType::Q8_0.row_size(64)];
//! quantize_row(GgmlType::Q8_0, &x, &mut q);
//! let mut y = vec![0f32; 64];
//! dequantize_row(GgmlType::Q8_0, &q, &mut y);
//! assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 4.0 / 254.0));
//! ```
//!
//! The contract other modules code against:
//! - `dequantize_row(ty, src, dst)`: `dst.len()` elements from `src` (row bytes of `ty`).
//! - `quantize_row(ty, src, dst)`: `src.len()` f32 elements into `dst` (`ty.row_size(n)` bytes).
//!
//! Lengths and types are the caller's to get right (they come from tensor shapes), so
//! these assert, naming type and sizes. Data read from files goes through [`dequantize`]
//! and [`quantize`], which return [`QuantError`] instead.
//!
//! Each of these takes its conversion from [`to_float`] and [`from_float_ref`] (ggml-base's
//! `type_traits`): the portable references in [`scalar`], which every CPU kernel table starts
//! from and whose bits the SIMD conversions reproduce.

pub mod blocks;
pub mod scalar;

use alloc::vec;
use alloc::vec::Vec;

use crate::types::GgmlType;

/// A row of a type to f32 (`dst.len()` elements).
pub type ToFloat = fn(src: &[u8], dst: &mut [f32]);
/// f32 to a row of a type (`src.len()` elements).
pub type FromFloat = fn(src: &[f32], dst: &mut [u8]);

/// The reference conversion of a row of `ty` to f32 (ggml-base's `to_float`), or None.
pub const fn to_float(ty: GgmlType) -> Option<ToFloat> {
    use GgmlType::*;
    Some(match ty {
        F32 => scalar::dequantize_f32,
        F16 => scalar::dequantize_f16,
        BF16 => scalar::dequantize_bf16,
        Q4_0 => scalar::dequantize_q4_0,
        Q4_1 => scalar::dequantize_q4_1,
        Q5_0 => scalar::dequantize_q5_0,
        Q5_1 => scalar::dequantize_q5_1,
        Q8_0 => scalar::dequantize_q8_0,
        Q8_1 => scalar::dequantize_q8_1,
        Q2_K => scalar::dequantize_q2_k,
        Q3_K => scalar::dequantize_q3_k,
        Q4_K => scalar::dequantize_q4_k,
        Q5_K => scalar::dequantize_q5_k,
        Q6_K => scalar::dequantize_q6_k,
        Q8_K => scalar::dequantize_q8_k,
        _ => return None,
    })
}

/// The reference rounding of f32 to a row of `ty` (ggml-base's `from_float_ref`), or None:
/// the K-quant weight types are read-only here.
pub const fn from_float_ref(ty: GgmlType) -> Option<FromFloat> {
    use GgmlType::*;
    Some(match ty {
        F32 => scalar::quantize_f32,
        F16 => scalar::quantize_f16,
        BF16 => scalar::quantize_bf16,
        Q4_0 => scalar::quantize_q4_0,
        Q4_1 => scalar::quantize_q4_1,
        Q5_0 => scalar::quantize_q5_0,
        Q5_1 => scalar::quantize_q5_1,
        Q8_0 => scalar::quantize_q8_0,
        Q8_1 => scalar::quantize_q8_1,
        Q8_K => scalar::quantize_q8_k,
        _ => return None,
    })
}

/// Why a conversion of a whole buffer was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantError {
    /// `ty` has no kernel for `op` ("dequantize", "quantize").
    Unsupported { ty: GgmlType, op: &'static str },
    /// `len` bytes (or elements) are not a whole number of `ty` blocks.
    BadLength { ty: GgmlType, len: usize, unit: usize, what: &'static str },
}

impl core::fmt::Display for QuantError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QuantError::Unsupported { ty, op } => write!(f, "quants: no {op} for type {ty}"),
            QuantError::BadLength { ty, len, unit, what } => {
                write!(f, "quants: {len} {what} is not a multiple of {unit} (one {ty} block)")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for QuantError {}

/// Types [`dequantize_row`] handles (a [`to_float`]).
pub fn can_dequantize(ty: GgmlType) -> bool {
    to_float(ty).is_some()
}

/// Types [`quantize_row`] writes (a `from_float`). The K-quant weight types are read-only
/// (weights come from files; Q8_K, their activation type, is written).
pub fn can_quantize(ty: GgmlType) -> bool {
    from_float_ref(ty).is_some()
}

pub(crate) fn check_row(ty: GgmlType, n: usize, bytes: usize, what: &str) {
    assert!(
        n.is_multiple_of(ty.blck_size()),
        "quants {what}: {n} elements is not a multiple of the {ty} block size {}",
        ty.blck_size()
    );
    let need = ty.type_size() * (n / ty.blck_size());
    assert!(bytes >= need, "quants {what}: {n} {ty} elements need {need} bytes, got {bytes}");
}

/// Converts one row of `ty` to f32 (ggml's `to_float`).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    let n = dst.len();
    check_row(ty, n, src.len(), "dequantize_row");
    let to_float = to_float(ty).unwrap_or_else(|| panic!("quants dequantize_row: no conversion from {ty} to f32"));
    to_float(&src[..ty.type_size() * (n / ty.blck_size())], dst)
}

/// ggml's `to_float` name for [`dequantize_row`].
pub fn row_to_f32(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    dequantize_row(ty, src, dst)
}

/// Converts f32 to one row of `ty` (ggml's reference rounding; its `from_float`).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    let n = src.len();
    check_row(ty, n, dst.len(), "quantize_row");
    let from_float = from_float_ref(ty).unwrap_or_else(|| panic!("quants quantize_row: no quantization to {ty}"));
    from_float(src, &mut dst[..ty.type_size() * (n / ty.blck_size())])
}

/// A whole buffer of `ty` (a tensor's data) as f32.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Result<Vec<f32>, QuantError> {
    if !can_dequantize(ty) {
        return Err(QuantError::Unsupported { ty, op: "dequantize" });
    }
    if !bytes.len().is_multiple_of(ty.type_size()) {
        return Err(QuantError::BadLength { ty, len: bytes.len(), unit: ty.type_size(), what: "bytes" });
    }
    let mut out = vec![0f32; bytes.len() / ty.type_size() * ty.blck_size()];
    dequantize_row(ty, bytes, &mut out);
    Ok(out)
}

/// f32 values as a buffer of `ty`.
pub fn quantize(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    if !can_quantize(ty) {
        return Err(QuantError::Unsupported { ty, op: "quantize" });
    }
    if !src.len().is_multiple_of(ty.blck_size()) {
        return Err(QuantError::BadLength { ty, len: src.len(), unit: ty.blck_size(), what: "elements" });
    }
    let mut out = vec![0u8; ty.type_size() * (src.len() / ty.blck_size())];
    quantize_row(ty, src, &mut out);
    Ok(out)
}
