//! Every CPU kernel, one folder per instruction set (ggml-cpu's `arch/`): `scalar` (the
//! portable reference), `x86` (AVX2, VNNI, AVX-512) and `wasm` (SIMD128, relaxed SIMD). Each
//! ISA fills one table ([`Kernels`]: per type the conversions, `vec_dot`, the prompt and
//! packed kernels, F32/F16's float product, plus the elementwise row helpers), and
//! [`traits`] picks one table after the one CPU detection ([`crate::cpu::features`]): the
//! only ISA dispatch. [`vec_dot`], [`gemm`] and [`repack`] are the entry points the ops
//! call. The block formats and reference conversions they compute on are
//! [`crate::quants`], below everything here.
//!
//! ```
//! use ggweb::cpu::arch::{kernels, vec_dot, Isa};
//! use ggweb::GgmlType::F32;
//! let k = kernels(); // the table of Isa::best(): AVX2+FMA+F16C, wasm simd128 or scalar
//! let mut row = [1.0f32, -3.0, 2.0];
//! assert_eq!((k.max)(&row), 2.0);
//! (k.gelu)(&mut row);
//! let a: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let b: Vec<u8> = [1.0f32, 1.0, 1.0, 1.0, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! assert_eq!(vec_dot(F32, 5, &a, &b), 20.0);
//! assert_eq!(Isa::Scalar.kernels().unwrap().name, "scalar");
//! ```
//!
//! Every ISA's `vec_dot` gives the scalar one's bits. The float products (`float_gemm`) and
//! the row helpers sum in each ISA's own order, so they agree to rounding across ISAs.

mod kernel;
use kernel::GemmArgs;
pub mod repack;
pub mod scalar;
pub mod traits;
#[cfg(all(target_family = "wasm", target_feature = "simd128"))]
pub mod wasm;
#[cfg(target_arch = "x86_64")]
pub mod x86;

use crate::quants::{blocks, check_row};
use crate::types::GgmlType;
use alloc::vec;
use alloc::vec::Vec;
pub use kernel::{F32_PANEL_DEPTH, F32_PANEL_WIDTH, OUT_PROD_J};
pub use traits::{
    cpu_traits, kernels, set_vnni_disabled, set_zmm_disabled, F32Gemm, F32GemmPanels, FloatGemm, Isa, Kernels,
    PromptGemm, TypeTraitsCpu, VecDot,
};

/// Taylor coefficients 1/k! of the polynomial exps below.
pub(crate) const INV_FACT: [f64; 11] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362880.0,
    1.0 / 3628800.0,
];

/// ln 2 split in two: `N_HI` has few mantissa bits, so n·LN2_HI is exact for |n| < 2^11.
pub(crate) const LN2_HI: f64 = 0.693_147_180_369_123_8;
pub(crate) const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
/// The same for f32 (n·LN2_HI_F32 exact for |n| < 2^8).
pub(crate) const LN2_HI_F32: f32 = 0.693_145_75;
pub(crate) const LN2_LO_F32: f32 = 1.428_606_8e-6;

/// Constants of the GELU tanh form: √(2/π) and 0.044715.
pub(crate) const GELU_K: f64 = 0.797_884_560_802_865_4;
pub(crate) const GELU_C: f64 = 0.044_715;

/// GELU, tanh form (GPT-2's `gelu_new`), evaluated in f64 and rounded once: within half
/// an f32 ulp of the exact value. Uses 0.5·(1 + tanh(u)) = 1 / (1 + e^(-2u)), which has no
/// cancellation for large negative x.
#[inline]
pub fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    const C: f64 = 0.044_715;
    let x = x as f64;
    let u = SQRT_2_OVER_PI * x * (1.0 + C * x * x);
    (x / (1.0 + libm::exp(-2.0 * u))) as f32
}

/// dy · GELU'(x) (tanh form: with s = 1/(1 + e^(-2u)), u = √(2/π)(x + 0.044715x³), the
/// derivative is s + 2x·s(1 − s)·u'), in f64 and rounded once, as [`gelu_f32`].
#[inline]
pub fn gelu_back_f32(dy: f32, x: f32) -> f32 {
    let x = x as f64;
    let u = GELU_K * x * (1.0 + GELU_C * x * x);
    let s = 1.0 / (1.0 + libm::exp(-2.0 * u));
    let du = GELU_K * (1.0 + 3.0 * GELU_C * x * x);
    (dy as f64 * (s + x * s * (1.0 - s) * 2.0 * du)) as f32
}

/// f16 bits → f32, exactly, without tables or branches on the common path: the exponent
/// and mantissa moved into f32 position are off by 2^112 (15 vs 127 bias), which one
/// multiplication fixes, subnormals included; infinities and NaNs get the all-ones exponent.
/// The vector kernels do the same per lane.
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let em = (h & 0x7fff) as u32;
    let sign = ((h & 0x8000) as u32) << 16;
    let mut bits = (f32::from_bits(em << 13) * F16_EXP_ADJUST).to_bits();
    if em >= 0x7c00 {
        bits |= 0x7f80_0000;
    }
    f32::from_bits(bits | sign)
}

/// 2^112: the factor between f16's and f32's exponent biases.
pub(crate) const F16_EXP_ADJUST: f32 = f32::from_bits((127 + 112) << 23);

/// Types with a [`vec_dot`] kernel (against `ty.vec_dot_type()`). Q8_1 and Q8_K are
/// activation types only.
pub fn has_vec_dot(ty: GgmlType) -> bool {
    cpu_traits(ty).vec_dot.is_some()
}

/// [`crate::quants::quantize_row`] with this machine's kernel (ggml-cpu's `from_float`, SIMD where
/// the ISA has one): the same bits.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) {
    let n = src.len();
    check_row(ty, n, dst.len(), "quantize_row");
    let from_float = cpu_traits(ty).from_float;
    let from_float = from_float.unwrap_or_else(|| panic!("quants quantize_row: no quantization to {ty}"));
    from_float(src, &mut dst[..ty.type_size() * (n / ty.blck_size())])
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
/// use ggweb::cpu::arch::{gemm, vec_dot};
/// use ggweb::quants::quantize;
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
#[cfg_attr(target_family = "wasm", allow(dead_code))]
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
    // KiB).
    let most = if cfg!(target_family = "wasm") {
        (768 * 1024 / (64 * nb32).max(1)).max(4)
    } else {
        (g.chunk / rb).clamp(1, n)
    };
    // Equal chunks: each chunk is a pass over all of a, and a short last one (natively, 128
    // rows of b at K = 768 were 120 + 8) paid a whole pass for a few rows. The 124M head
    // (768 × 50 257, 41 MB of Q8_0) against 128 rows: 64 + 64 took Q8_0 from 120 to 152–156
    // GMAC/s natively (`kernel_bench`, Intel Xeon, 2026-12-07). In whole 4-row tiles: on
    // wasm always, natively where they stay within the budget.
    let even = n.div_ceil(n.div_ceil(most));
    let tiles = even.next_multiple_of(4);
    let chunk = if cfg!(target_family = "wasm") || tiles <= most { tiles.min(n) } else { even };
    for j0 in (0..n).step_by(chunk) {
        let nc = chunk.min(n - j0);
        let c = &mut c[j0 * ldc..];
        let cols = ColPrep::new(vt, nb, nc, &b[j0 * ldb..], ldb, g.needs_plain, g.wants_sums);
        (g.rows)(&GemmArgs { ty, nb, m, a, lda, b: &b[j0 * ldb..], ldb, cols: &cols, ldc }, c);
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
/// past 4q come last, in order. On wasm otherwise (the vendor is unknown there), from 16
/// rows on, steps alternate between the two halves (2i: row i, 2i + 1: row ⌈m/2⌉ + i): two
/// streams, which in Node 26 on an Intel Xeon made Q4_0's decode ~1.14–1.24× and Q4_K_M's
/// 1.01–1.09× faster per CPU-second (BENCHMARKS.md 2026-12-07, "Where a wasm decode step's
/// time goes"); the packed Q8_0 kernel pairs its groups itself, block by block. Natively
/// elsewhere rows go in order. Each row's dot product is computed as before: only the order
/// changes.
#[inline]
pub(crate) fn decode_row(s: usize, m: usize) -> usize {
    let streams = crate::cpu::features::decode_streams();
    if cfg!(target_family = "wasm") && m >= 16 && !streams {
        let h = m.div_ceil(2);
        return if s.is_multiple_of(2) { s / 2 } else { h + s / 2 };
    }
    let q = if m >= 16 && streams { m / 4 } else { 0 };
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
        use blocks::{fp16_to_fp32, BlockQ8_1};
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
        let prep = kernels().prep_q8_0;
        for j in 0..n {
            let (dy, ys) = (&mut p.dy[j * nbp..j * nbp + nb], &mut p.ysum[j * nbp..j * nbp + nb]);
            let row = &b[j * ldb..j * ldb + nb * core::mem::size_of::<blocks::BlockQ8_0>()];
            let bad = prep(row, nb, dy, ys, want_sums, mark_plain);
            p.plain[j] = mark_plain && bad;
        }
        p
    }
}

/// The kernel [`gemm`] uses for a prompt (several rows of b) with weights of `ty`, by name:
/// for tests that check which one a build runs.
#[doc(hidden)]
pub fn prompt_gemm_kernel(ty: GgmlType) -> &'static str {
    #[cfg(all(target_family = "wasm", target_feature = "relaxed-simd"))]
    if ty == GgmlType::Q8_0 && wasm::u8_dot_exact() {
        return wasm::U8_PANELS_NAME;
    }
    cpu_traits(ty).gemm.map_or("vec_dot", |g| g.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn f16_to_f32_is_exact_for_every_bit_pattern() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            let got = f16_bits_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }

    /// Values in [-1, 1) from a xorshift32 stream (the float gemm tests' inputs).
    fn uniform(mut seed: u32) -> impl FnMut() -> f32 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
        }
    }

    /// Every ISA's float product against an f64 sum, on lengths that hit each tail path.
    #[test]
    fn float_gemms_agree_with_f64() {
        let mut next = uniform(0x1234_5678);
        for n in [0usize, 1, 3, 4, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 100, 768, 1023] {
            let a: Vec<f32> = (0..n).map(|_| next()).collect();
            let b: Vec<f32> = (0..n).map(|_| next()).collect();
            let h: Vec<u16> = a.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
            let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            let want_h: f64 = h.iter().zip(&b).map(|(&x, &y)| f16::from_bits(x).to_f64() * y as f64).sum();
            // Σ|a·b| ≤ n; f32 partial sums of n terms err by ≤ ~n·2^-24 relative to that.
            let tol = 1e-6 * (n as f64 + 1.0);
            for isa in Isa::available() {
                let t = isa.kernels().unwrap();
                let (mut c, mut ch) = ([0f32], [0f32]);
                // SAFETY: one row of n elements each; `isa` runs here.
                unsafe {
                    t.types[GgmlType::F32 as usize].float_gemm.unwrap()(
                        n,
                        1,
                        1,
                        a.as_ptr() as *const u8,
                        n,
                        b.as_ptr(),
                        n,
                        c.as_mut_ptr(),
                        1,
                    );
                    t.types[GgmlType::F16 as usize].float_gemm.unwrap()(
                        n,
                        1,
                        1,
                        h.as_ptr() as *const u8,
                        n,
                        b.as_ptr(),
                        n,
                        ch.as_mut_ptr(),
                        1,
                    );
                }
                assert!((c[0] as f64 - want).abs() <= tol, "{} f32 n={n}: {} vs {want}", t.name, c[0]);
                assert!((ch[0] as f64 - want_h).abs() <= tol, "{} f16 n={n}: {} vs {want_h}", t.name, ch[0]);
            }
        }
    }

    /// Every ISA's float product on tiles of many rows, deep enough to be summed in slices
    /// of l (`Kernels::float_gemm_depth`) and with a tail past the last 16: each result the
    /// bits of the same element computed alone (a decode step's 1 × 1), and near its f64 sum.
    #[test]
    fn float_gemm_tiles_give_the_bits_of_one_element() {
        let mut next = uniform(0x9e37_79b9);
        for (k, m, n) in [(3100usize, 9usize, 13usize), (1536, 4, 6), (769, 5, 7)] {
            let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
            let b: Vec<f32> = (0..n * k).map(|_| next()).collect();
            let h: Vec<u16> = a.iter().map(|&x| f16::from_f32(x).to_bits()).collect();
            let tol = 1e-6 * (k as f64 + 1.0);
            for isa in Isa::available() {
                let t = isa.kernels().unwrap();
                for ty in [GgmlType::F32, GgmlType::F16] {
                    let g = t.types[ty as usize].float_gemm.unwrap();
                    let (ap, size) = match ty {
                        GgmlType::F32 => (a.as_ptr() as *const u8, 4),
                        _ => (h.as_ptr() as *const u8, 2),
                    };
                    let mut c = vec![0f32; m * n];
                    // SAFETY: m rows of a, n of b, k elements each; c is n rows of m; `isa` runs here.
                    unsafe { g(k, m, n, ap, k, b.as_ptr(), k, c.as_mut_ptr(), m) };
                    for j in 0..n {
                        for i in 0..m {
                            let mut one = [0f32];
                            // SAFETY: row i of a, row j of b.
                            unsafe {
                                g(k, 1, 1, ap.add(i * k * size), k, b.as_ptr().add(j * k), k, one.as_mut_ptr(), 1)
                            };
                            let got = c[j * m + i];
                            assert_eq!(got.to_bits(), one[0].to_bits(), "{} {ty} k={k} ({i}, {j})", t.name);
                            let want: f64 = (0..k)
                                .map(|l| {
                                    let x = if ty == GgmlType::F32 {
                                        a[i * k + l]
                                    } else {
                                        f16::from_bits(h[i * k + l]).to_f32()
                                    };
                                    x as f64 * b[j * k + l] as f64
                                })
                                .sum();
                            assert!(
                                (got as f64 - want).abs() <= tol,
                                "{} {ty} k={k} ({i}, {j}): {got} vs {want}",
                                t.name
                            );
                        }
                    }
                }
            }
        }
    }

    /// The blocked f32 product (`Kernels::f32_gemm`, where a table has one) against f64 sums,
    /// on shapes past every block and tile edge, with X and Y plain and transposed, stored and
    /// accumulated; each result the bits of the same element computed alone (1 × 1), and a
    /// block of zeros in X skipped even where Y holds ∞ there.
    #[test]
    fn f32_gemm_agrees_with_f64() {
        let mut seed = 0x9e37_79b9u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let tables: Vec<&Kernels> = Isa::available().into_iter().filter_map(|i| i.kernels()).collect();
        let mut tested = 0;
        for t in tables.into_iter().filter(|t| t.f32_gemm.is_some()) {
            let gemm = t.f32_gemm.unwrap();
            for (m, n, k) in [(1usize, 1usize, 1usize), (13, 33, 257), (25, 17, 600), (400, 40, 70), (12, 32, 0)] {
                for (x_t, y_t, acc) in
                    [(false, false, false), (true, true, true), (false, true, false), (true, false, true)]
                {
                    let mut x: Vec<f32> = (0..m * k).map(|_| next()).collect();
                    let mut y: Vec<f32> = (0..k * n).map(|_| next()).collect();
                    // X[i, l] at i·rsx + l·csx; Y[l, j] at l·rsy + j·csy.
                    let (rsx, csx) = if x_t { (1, m) } else { (k, 1) };
                    let (rsy, csy) = if y_t { (1, k) } else { (n, 1) };
                    if k >= 600 {
                        // l in 256..512 (the second block): X zero there, Y infinite.
                        for i in 0..m {
                            for l in 256..512 {
                                x[i * rsx + l * csx] = 0.0;
                            }
                        }
                        for l in 256..512 {
                            for j in 0..n {
                                y[l * rsy + j * csy] = f32::INFINITY;
                            }
                        }
                    }
                    let c0: Vec<f32> = (0..m * n).map(|_| next()).collect();
                    let mut c = c0.clone();
                    // SAFETY: every element named is inside x, y, c; this table runs here.
                    unsafe { gemm(m, n, k, x.as_ptr(), rsx, csx, y.as_ptr(), rsy, csy, c.as_mut_ptr(), n, acc) };
                    for i in 0..m {
                        for j in 0..n {
                            let mut want = if acc { c0[i * n + j] as f64 } else { 0.0 };
                            for l in 0..k {
                                let xv = x[i * rsx + l * csx];
                                if xv != 0.0 {
                                    want += xv as f64 * y[l * rsy + j * csy] as f64;
                                }
                            }
                            let got = c[i * n + j];
                            let tol = 1e-6 * (k as f64 + 2.0);
                            assert!(
                                (got as f64 - want).abs() <= tol,
                                "{} {m}×{n}×{k} ({i}, {j}): {got} vs {want}",
                                t.name
                            );
                            if (i * 7 + j) % 37 == 0 {
                                let mut one = c0[i * n + j];
                                // SAFETY: row i of X, column j of Y, one element of C.
                                unsafe {
                                    gemm(
                                        1,
                                        1,
                                        k,
                                        x.as_ptr().add(i * rsx),
                                        rsx,
                                        csx,
                                        y.as_ptr().add(j * csy),
                                        rsy,
                                        csy,
                                        &mut one,
                                        1,
                                        acc,
                                    )
                                };
                                assert_eq!(one.to_bits(), got.to_bits(), "{} {m}×{n}×{k} ({i}, {j}) alone", t.name);
                            }
                        }
                    }
                    tested += 1;
                }
            }
        }
        let avx512 = cfg!(target_arch = "x86_64") && crate::cpu::features::detect().avx512;
        assert!(tested > 0 || !avx512, "an AVX-512 machine's table has a blocked f32 product");
    }

    /// `Kernels::f32_gemm_panels` on Y packed by hand (panels of F32_PANEL_WIDTH columns, the
    /// last one's columns past n zero) gives the bits of `f32_gemm` on the same X and Y, stored
    /// and accumulated, at depths up to F32_PANEL_DEPTH, X plain and transposed; an all-zero X
    /// skips an infinite Y.
    #[test]
    fn f32_gemm_panels_equal_f32_gemm() {
        let mut seed = 0x2545_f491u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let (w, depth) = (F32_PANEL_WIDTH, F32_PANEL_DEPTH);
        let mut tested = 0;
        let tables: Vec<&Kernels> = Isa::available().into_iter().filter_map(|i| i.kernels()).collect();
        for t in tables {
            let (Some(gemm), Some(panels)) = (t.f32_gemm, t.f32_gemm_panels) else { continue };
            for (m, n, k) in [(1usize, 1usize, 1usize), (13, 33, depth), (130, 768, 200), (25, 64, 0), (7, 40, 5)] {
                for (x_t, acc, zero) in
                    [(false, false, false), (true, true, false), (false, true, true), (true, false, true)]
                {
                    let x: Vec<f32> = (0..m * k).map(|_| if zero { 0.0 } else { next() }).collect();
                    let y: Vec<f32> = (0..k * n).map(|_| if zero { f32::INFINITY } else { next() }).collect();
                    let (rsx, csx) = if x_t { (1, m) } else { (k, 1) };
                    // Panel p: k rows of w floats, Y[l, p·w + jj] at (p·k + l)·w + jj; 64-byte aligned.
                    let np = n.div_ceil(w);
                    let mut lines = vec![[0f32; 16]; (np * k * w).div_ceil(16) + 1];
                    let base = lines.as_mut_ptr() as *mut f32;
                    let off = base.align_offset(64);
                    assert!(off < 16);
                    // SAFETY: under one line past the start of `lines`.
                    let yp = unsafe { base.add(off) };
                    for p in 0..np {
                        for l in 0..k {
                            for jj in 0..w {
                                let j = p * w + jj;
                                // SAFETY: inside `lines` (one line of slack for the alignment).
                                unsafe { *yp.add((p * k + l) * w + jj) = if j < n { y[l * n + j] } else { 0.0 } };
                            }
                        }
                    }
                    let c0: Vec<f32> = (0..m * n).map(|_| next()).collect();
                    let (mut c1, mut c2) = (c0.clone(), c0.clone());
                    // SAFETY: every element named is inside x, y (or its panels), c; this table runs here.
                    unsafe {
                        gemm(m, n, k, x.as_ptr(), rsx, csx, y.as_ptr(), n, 1, c1.as_mut_ptr(), n, acc);
                        panels(m, n, k, x.as_ptr(), rsx, csx, yp, c2.as_mut_ptr(), n, acc);
                    }
                    for (i, (a, b)) in c1.iter().zip(&c2).enumerate() {
                        assert_eq!(a.to_bits(), b.to_bits(), "{} {m}×{n}×{k} element {i}: {a} vs {b}", t.name);
                    }
                    tested += 1;
                }
            }
        }
        let avx512 = cfg!(target_arch = "x86_64") && crate::cpu::features::detect().avx512;
        assert!(tested > 0 || !avx512, "an AVX-512 machine's table has the panels' product");
    }
}
