//! Block quantization formats with ggml's exact layouts: dequantize every supported
//! type, quantize the ones we write, and the `vec_dot` kernels quantized `mul_mat` uses.
//!
//! ```
//! use ggweb::quants::{dequantize_row, quantize_row, vec_dot};
//! use ggweb::GgmlType;
//! let x: Vec<f32> = (0..64).map(|i| (i as f32 - 31.5) / 8.0).collect();
//! let mut q = vec![0u8; GgmlType::Q8_0.row_size(64)];
//! quantize_row(GgmlType::Q8_0, &x, &mut q);
//! let mut y = vec![0f32; 64];
//! dequantize_row(GgmlType::Q8_0, &q, &mut y);
//! assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 4.0 / 254.0));
//! let dot = vec_dot(GgmlType::Q8_0, 64, &q, &q); // a Q8_0 row · a Q8_0 row
//! let by_hand: f32 = y.iter().map(|v| v * v).sum();
//! assert!((dot - by_hand).abs() <= 1e-5 * by_hand);
//! ```
//!
//! The contract other modules code against:
//! - `dequantize_row(ty, src, dst)`: `dst.len()` elements from `src` (row bytes of `ty`).
//! - `quantize_row(ty, src, dst)`: `src.len()` f32 elements into `dst` (`ty.row_size(n)` bytes).
//! - `vec_dot(ty, n, a, b)`: dot product of `n` elements, `a` a row of `ty` (a weight row),
//!   `b` a row of `ty.vec_dot_type()` (the activations, quantized once per row).
//!
//! Lengths and types are the caller's to get right (they come from tensor shapes), so
//! these assert, naming type and sizes. Data read from files goes through [`dequantize`]
//! and [`quantize`], which return [`QuantError`] instead.
//!
//! Each of these takes its kernel from the per-type table [`cpu_traits`] (ggml's
//! `type_traits_cpu`, see [`traits`]): one table per instruction set ([`Isa`]), chosen
//! after the one CPU detection ([`crate::cpu::features`]).
//!
//! Every `vec_dot` path (scalar, x86_64 AVX2, wasm SIMD128) gives bit-identical results:
//! integer sums per block are exact and the float accumulation order is fixed (see
//! [`scalar`]), so native and browser runs agree to the last bit.

pub mod blocks;
mod kernel;
pub mod repack;
pub mod scalar;
pub mod traits;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm;
#[cfg(target_arch = "x86_64")]
mod x86;

use alloc::vec;
use alloc::vec::Vec;

use crate::types::GgmlType;
pub use traits::{
    cpu_traits, set_vnni_disabled, set_zmm_disabled, FromFloat, Isa, PromptGemm, ToFloat, TypeTraitsCpu, VecDot,
};

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

/// Types [`dequantize_row`] handles (a `to_float` in the [`cpu_traits`] table).
pub fn can_dequantize(ty: GgmlType) -> bool {
    cpu_traits(ty).to_float.is_some()
}

/// Types [`quantize_row`] writes (a `from_float`). The K-quant weight types are read-only
/// (weights come from files; Q8_K, their activation type, is written).
pub fn can_quantize(ty: GgmlType) -> bool {
    cpu_traits(ty).from_float.is_some()
}

/// Types with a [`vec_dot`] kernel (against `ty.vec_dot_type()`). Q8_1 and Q8_K are
/// activation types only.
pub fn has_vec_dot(ty: GgmlType) -> bool {
    cpu_traits(ty).vec_dot.is_some()
}

fn check_row(ty: GgmlType, n: usize, bytes: usize, what: &str) {
    assert!(
        n % ty.blck_size() == 0,
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
    let to_float = cpu_traits(ty).to_float;
    let to_float = to_float.unwrap_or_else(|| panic!("quants dequantize_row: no conversion from {ty} to f32"));
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
    let from_float = cpu_traits(ty).from_float;
    let from_float = from_float.unwrap_or_else(|| panic!("quants quantize_row: no quantization to {ty}"));
    from_float(src, &mut dst[..ty.type_size() * (n / ty.blck_size())])
}

/// A whole buffer of `ty` (a tensor's data) as f32.
pub fn dequantize(ty: GgmlType, bytes: &[u8]) -> Result<Vec<f32>, QuantError> {
    if !can_dequantize(ty) {
        return Err(QuantError::Unsupported { ty, op: "dequantize" });
    }
    if bytes.len() % ty.type_size() != 0 {
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
    if src.len() % ty.blck_size() != 0 {
        return Err(QuantError::BadLength { ty, len: src.len(), unit: ty.blck_size(), what: "elements" });
    }
    let mut out = vec![0u8; ty.type_size() * (src.len() / ty.blck_size())];
    quantize_row(ty, src, &mut out);
    Ok(out)
}

/// Dot product of a row of `ty` with a row of `ty.vec_dot_type()`, `n` elements.
pub fn vec_dot(ty: GgmlType, n: usize, a: &[u8], b: &[u8]) -> f32 {
    let dot = checked_dot(cpu_traits(ty), ty, n, a, b);
    dot(n, &a[..ty.row_size(n as i64)], &b[..ty.vec_dot_type().row_size(n as i64)])
}

/// [`vec_dot`] with the kernels of `isa`; None when `isa` is not available here (every
/// available ISA has a kernel for every [`has_vec_dot`] type).
pub fn vec_dot_isa(isa: Isa, ty: GgmlType, n: usize, a: &[u8], b: &[u8]) -> Option<f32> {
    let t = isa.traits(ty);
    // Arguments are checked even where `isa` is missing: a bad call fails on every machine.
    let dot = checked_dot(t.unwrap_or_else(|| cpu_traits(ty)), ty, n, a, b);
    t?;
    Some(dot(n, &a[..ty.row_size(n as i64)], &b[..ty.vec_dot_type().row_size(n as i64)]))
}

/// `t`'s dot product, once `a` and `b` hold `n` elements of `ty` and its vec_dot_type.
fn checked_dot(t: &TypeTraitsCpu, ty: GgmlType, n: usize, a: &[u8], b: &[u8]) -> VecDot {
    let dot = t.vec_dot.unwrap_or_else(|| panic!("quants vec_dot: no dot product for {ty}"));
    check_row(ty, n, a.len(), "vec_dot (a)");
    check_row(t.vec_dot_type, n, b.len(), "vec_dot (b)");
    dot
}

/// Types [`gemm`] has kernels of its own for on this machine (others loop over [`vec_dot`]).
pub fn has_gemm(ty: GgmlType) -> bool {
    cpu_traits(ty).gemm.is_some()
}

/// Many dot products at once: `c[j·ldc + i] = vec_dot(ty, k, a_i, b_j)` for `i < m`,
/// `j < n`, where row `a_i` of `ty` starts at byte `i·lda` of `a` and row `b_j` of
/// `ty.vec_dot_type()` at byte `j·ldb` of `b`. Every value is bit for bit what
/// [`vec_dot`] gives: the same exact integer sums per block and the same float steps.
///
/// Faster than one `vec_dot` per pair for Q8_0 and Q4_0 (AVX2, SIMD128): each row of `b`
/// has its block scales converted (and, for Q4_0, its block sums taken) once, each row of
/// `a` its scales converted and nibbles unpacked once. On AVX2, Q8_0 uses a cheaper exact
/// product (`|x|·sign(y, x)` through `maddubs`, exact in i16 while `y` ≠ -128, which rows
/// from [`quantize_row`] never hold; a row of `b` that does goes through `vec_dot`); on
/// SIMD128 both sides are widened to i16 once, for `i32x4.dot_i16x8_s`.
///
/// ```
/// use ggweb::quants::{gemm, quantize, vec_dot};
/// use ggweb::GgmlType::{Q4_0, Q8_0};
/// let w: Vec<f32> = (0..3 * 64).map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0).collect();
/// let x: Vec<f32> = (0..2 * 64).map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0).collect();
/// let (a, b) = (quantize(Q4_0, &w).unwrap(), quantize(Q8_0, &x).unwrap());
/// let (ra, rb) = (Q4_0.row_size(64), Q8_0.row_size(64));
/// let mut c = [0f32; 6];
/// gemm(Q4_0, 64, 3, 2, &a, ra, &b, rb, &mut c, 3);
/// assert_eq!(c[3 + 2], vec_dot(Q4_0, 64, &a[2 * ra..3 * ra], &b[rb..]));
/// ```
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    ty: GgmlType,
    k: usize,
    m: usize,
    n: usize,
    a: &[u8],
    lda: usize,
    b: &[u8],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    gemm_with(cpu_traits(ty).gemm, ty, k, m, n, a, lda, b, ldb, c, ldc)
}

/// Rows of b per prompt-kernel call, natively (`PromptGemm::chunk`): kept in L1 (48 KiB
/// on Zen 5) while the rows of a pass...
pub(crate) const L1_CHUNK: usize = 24 * 1024;
/// ... or in L2 for the kernels that take four rows of b per pass: 96 KiB made a 124M
/// Q4_K_M prompt ~5% faster with x86's 512-bit kernels (`x86/packed512.rs`, 2026-12-02),
/// where a 7-row chunk (K = 3072) left three rows to the one-row pass.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub(crate) const L2_CHUNK: usize = 96 * 1024;

/// [`gemm`] with the prompt kernel `g` (rows of a in the layout `g` reads).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_with(
    g: Option<&PromptGemm>,
    ty: GgmlType,
    k: usize,
    m: usize,
    n: usize,
    a: &[u8],
    lda: usize,
    b: &[u8],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let t = cpu_traits(ty);
    let dot = t.vec_dot.unwrap_or_else(|| panic!("quants gemm: no dot product for {ty}"));
    if m == 0 || n == 0 {
        return;
    }
    let vt = t.vec_dot_type;
    check_row(ty, k, a.len().saturating_sub((m - 1) * lda), "gemm (a)");
    check_row(vt, k, b.len().saturating_sub((n - 1) * ldb), "gemm (b)");
    assert!(
        a.len() >= (m - 1) * lda + ty.row_size(k as i64) && b.len() >= (n - 1) * ldb + vt.row_size(k as i64),
        "quants gemm: {m} rows {lda} bytes apart or {n} rows {ldb} apart overrun a ({}) or b ({})",
        a.len(),
        b.len()
    );
    assert!(
        c.len() >= (n - 1) * ldc + m && (n == 1 || ldc >= m),
        "quants gemm: c of {} for {m}×{n}, ldc {ldc}",
        c.len()
    );
    let (ra, rb) = (ty.row_size(k as i64), vt.row_size(k as i64));
    // Pairs through the dot product (every row is checked above).
    let dots = |j0: usize, nc: usize, b: &[u8], c: &mut [f32], only_plain: Option<&[bool]>| {
        for j in (0..nc).filter(|&j| only_plain.is_none_or(|p| p[j])) {
            for i in 0..m {
                c[j * ldc + i] = dot(k, &a[i * lda..i * lda + ra], &b[(j0 + j) * ldb..(j0 + j) * ldb + rb]);
            }
        }
    };
    let Some(g) = g else {
        return dots(0, n, b, c, None);
    };
    // Blocks of `ty` per row (32 elements, 256 for the K-quants).
    let nb = k / ty.blck_size();
    let nb32 = k / crate::types::QK;
    // Rows of b in chunks that stay in cache while the rows of a pass: `g.chunk` bytes
    // natively (L1 or L2, see [`L1_CHUNK`]); on wasm, where rows are widened to i16 (64 bytes a block) and each row
    // of a is widened and packed again per chunk, up to 768 KiB of widened rows (L2;
    // one chunk for a 64-token prompt at K = 3072, ~9% faster there than two of 192
    // KiB), in equal chunks of whole 4-row tiles.
    let chunk = if cfg!(target_arch = "wasm32") {
        let most = (768 * 1024 / (64 * nb32).max(1)).max(4);
        let parts = n.div_ceil(most);
        n.div_ceil(parts).next_multiple_of(4).min(n)
    } else {
        (g.chunk / rb).clamp(1, n)
    };
    for j0 in (0..n).step_by(chunk) {
        let nc = chunk.min(n - j0);
        let c = &mut c[j0 * ldc..];
        let cols = ColPrep::new(vt, nb, nc, &b[j0 * ldb..], ldb, g.needs_plain, g.wants_sums);
        (g.rows)(ty, nb, m, a, lda, &b[j0 * ldb..], ldb, &cols, c, ldc);
        // Rows of b the fast product cannot take.
        if cols.plain.contains(&true) {
            dots(j0, nc, b, c, Some(&cols.plain));
        }
    }
}

/// The row of `a` visited at step `s` of `m` when one row of b is multiplied (a decode
/// step). Where the CPU prefers it ([`crate::cpu::features::decode_streams`]:
/// Intel), steps 4i..4i+3 take rows i, i+q, i+2q, i+3q (q = m/4), so the memory system sees
/// four streams in different pages instead of one stream of short rows (float weights get
/// four such rows at once from `run_decode` in cpu/ops.rs, which helps on AMD too); rows
/// past 4q come last, in order. Elsewhere rows go in order. Each row's dot product is
/// computed as before: only the order changes.
#[inline]
pub(crate) fn decode_row(s: usize, m: usize) -> usize {
    let q = if m >= 16 && crate::cpu::features::decode_streams() { m / 4 } else { 0 };
    if s < 4 * q {
        s / 4 + (s % 4) * q
    } else {
        s
    }
}

/// What [`gemm`] takes from each row of b once: block scales as f32 and block quant sums
/// (for the offsets the u8 × i8 products move out: 8 for Q4_0's nibbles, 128 for Q8_0
/// made unsigned), for Q8_1 rows the scaled sums `s` as f32 too. Per row `nbp` entries: the
/// blocks, padded with zeros to a multiple of 8. Q8_K rows (the K-quants' b) keep their
/// f32 scale and sub-block sums in the blocks, so nothing is taken from them.
pub(crate) struct ColPrep {
    pub nbp: usize,
    pub dy: Vec<f32>,
    pub ysum: Vec<i32>,
    /// Q8_1's `s` (dy·Σy) per block.
    pub sy: Vec<f32>,
    /// Rows holding a -128 quant, when asked to look: computed with `vec_dot` instead.
    pub plain: Vec<bool>,
}

impl ColPrep {
    fn new(vt: GgmlType, nb: usize, n: usize, b: &[u8], ldb: usize, mark_plain: bool, want_sums: bool) -> ColPrep {
        use blocks::{fp16_to_fp32, BlockQ8_0, BlockQ8_1};
        let nbp = nb.div_ceil(scalar::LANES) * scalar::LANES;
        let mut p = ColPrep { nbp, dy: Vec::new(), ysum: Vec::new(), sy: Vec::new(), plain: vec![false; n] };
        if vt == GgmlType::Q8_K {
            return p;
        }
        p.dy = vec![0.0; n * nbp];
        if vt == GgmlType::Q8_1 {
            p.sy = vec![0.0; n * nbp];
            for j in 0..n {
                let ys: &[BlockQ8_1] =
                    bytemuck::cast_slice(&b[j * ldb..j * ldb + nb * core::mem::size_of::<BlockQ8_1>()]);
                for (t, y) in ys.iter().enumerate() {
                    p.dy[j * nbp + t] = fp16_to_fp32(y.d());
                    p.sy[j * nbp + t] = fp16_to_fp32(y.s());
                }
            }
            return p;
        }
        p.ysum = vec![0; n * nbp];
        #[cfg(target_arch = "x86_64")]
        if Isa::best() == Isa::Avx2 {
            for j in 0..n {
                let (dy, ys) = (&mut p.dy[j * nbp..j * nbp + nb], &mut p.ysum[j * nbp..j * nbp + nb]);
                // SAFETY: AVX2 and F16C were detected (Isa::Avx2); row j holds nb blocks.
                let bad = unsafe { x86::col_prep_q8_0(&b[j * ldb..], nb, dy, ys, want_sums) };
                p.plain[j] = mark_plain && bad;
            }
            return p;
        }
        for j in 0..n {
            let ys: &[BlockQ8_0] = bytemuck::cast_slice(&b[j * ldb..j * ldb + nb * core::mem::size_of::<BlockQ8_0>()]);
            for (t, y) in ys.iter().enumerate() {
                p.dy[j * nbp + t] = fp16_to_fp32(y.d());
                if want_sums {
                    p.ysum[j * nbp + t] = y.qs.iter().map(|&q| q as i32).sum::<i32>();
                }
                if mark_plain && y.qs.contains(&i8::MIN) {
                    p.plain[j] = true;
                }
            }
        }
        p
    }
}

/// The kernel [`gemm`] uses for a prompt (several rows of b) with weights of `ty`, by name:
/// for tests that check which one a build runs.
#[doc(hidden)]
pub fn prompt_gemm_kernel(ty: GgmlType) -> &'static str {
    cpu_traits(ty).gemm.map_or("vec_dot", |g| g.name)
}
