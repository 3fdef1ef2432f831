//! Every CPU kernel, one folder per instruction set (ggml-cpu's `arch/`): `scalar` (the
//! portable reference), `x86` (AVX2, VNNI, AVX-512) and `wasm` (SIMD128, relaxed SIMD). Each
//! holds the quantized `vec_dot`/gemm kernels and packed forms (`x86.rs`, `x86/*.rs`) and the
//! f32/f16 kernels behind the [`Simd`] trait (`x86/simd.rs`). The per-type table of the
//! quantized kernels is [`traits`] ([`cpu_traits`], chosen once after the one CPU detection
//! in [`crate::cpu::features`]); [`vec_dot`], [`gemm`] and [`repack`] are the entry points
//! the ops call. The block formats and reference conversions they compute on are
//! [`crate::quants`], below everything here.
//!
//! The f32/f16 SIMD kernels, behind one small trait, one file per ISA:
//!
//! ```
//! use ggweb::cpu::arch::{self as simd, Simd};
//! let s = simd::best();                        // AVX2+FMA+F16C, SSE2, wasm simd128 or scalar
//! let a = [1.0f32, 2.0, 3.0, 4.0, 5.0];
//! let b = [1.0f32, 1.0, 1.0, 1.0, 2.0];
//! assert_eq!(s.dot_f32(&a, &b), 20.0);
//! let h: Vec<half::f16> = a.iter().map(|&x| half::f16::from_f32(x)).collect();
//! assert_eq!(s.dot_f16_f32(&h, &b), 20.0);
//! ```
//!
//! Which implementation runs is decided once per call of [`best`]: on x86_64 by what
//! [`crate::cpu::features`] detected (the detection the quantized kernels read too), on
//! wasm32 by `cfg(target_feature = "simd128")` (set for wasm32 in `.cargo/config.toml`),
//! elsewhere the portable [`scalar::simd::Scalar`]. Implementations sum in
//! different orders, so results agree to rounding, not bit for bit.

mod kernel;
pub mod repack;
pub mod scalar;
pub mod traits;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub mod wasm;
#[cfg(target_arch = "x86_64")]
pub mod x86;

use alloc::vec;
use alloc::vec::Vec;
use half::f16;

use crate::quants::{blocks, check_row};
use crate::types::GgmlType;
pub use traits::{cpu_traits, set_vnni_disabled, set_zmm_disabled, Isa, PromptGemm, TypeTraitsCpu, VecDot};

/// What the CPU kernels need from an instruction set. Lengths of the two operands must be
/// equal (implementations use the shorter one).
pub trait Simd: Sync {
    fn name(&self) -> &'static str;
    /// Σ a\[i\]·b\[i\], products and sums in f32 (several partial sums, added at the end).
    fn dot_f32(&self, a: &[f32], b: &[f32]) -> f32;
    /// Σ f32(a\[i\])·b\[i\]: an f16 weight row against f32 activations. The activations are
    /// not rounded to f16 (ggml rounds them, its `vec_dot_type` for F16 being F16): one
    /// rounding less, and the conversion of only one operand.
    fn dot_f16_f32(&self, a: &[f16], b: &[f32]) -> f32;

    /// A block of dot products, the inner kernel of `mul_mat`:
    /// `c[j·ldc + i] = Σ_l a[i·lda + l] · b[j·ldb + l]` for `i < m`, `j < n`, `l < k`.
    /// Several rows of `a` meet several rows of `b` per pass over `l` (register tiles), so
    /// each load feeds several products. Strides are in elements.
    ///
    /// # Safety
    /// Every row named must be readable for `k` elements and every `c` element writable.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm_f32(
        &self,
        k: usize,
        m: usize,
        n: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        for j in 0..n {
            let bj = core::slice::from_raw_parts(b.add(j * ldb), k);
            for i in 0..m {
                *c.add(j * ldc + i) = self.dot_f32(core::slice::from_raw_parts(a.add(i * lda), k), bj);
            }
        }
    }

    /// [`Simd::gemm_f32`] with f16 rows of `a` (as bits), converted as they are loaded.
    ///
    /// # Safety
    /// As for [`Simd::gemm_f32`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm_f16(
        &self,
        k: usize,
        m: usize,
        n: usize,
        a: *const u16,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        for j in 0..n {
            let bj = core::slice::from_raw_parts(b.add(j * ldb), k);
            for i in 0..m {
                let ai = core::slice::from_raw_parts(a.add(i * lda) as *const f16, k);
                *c.add(j * ldc + i) = self.dot_f16_f32(ai, bj);
            }
        }
    }

    /// f16 bits → f32, exactly ([`f16_bits_to_f32`] per element).
    fn f16_to_f32(&self, src: &[u16], dst: &mut [f32]) {
        dst.iter_mut().zip(src).for_each(|(d, &h)| *d = f16_bits_to_f32(h));
    }

    /// GELU (tanh form) in place, as [`gelu_f32`] defines it: in f64,
    /// rounded once to f32. The SIMD versions evaluate the same f64 formula with a
    /// polynomial exp accurate to ~1e-11, so results are within one f32 rounding too.
    fn gelu(&self, x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = gelu_f32(*v));
    }

    /// `x[i] = exp(x[i] - sub)` (f32, within 2 ulp; 0 below -87.3) and returns Σ x[i]
    /// summed in f64: the exponentials of a softmax row.
    fn exp_sum(&self, x: &mut [f32], sub: f32) -> f64 {
        let mut sum = 0.0f64;
        for v in x.iter_mut() {
            *v = libm::expf(*v - sub);
            sum += *v as f64;
        }
        sum
    }

    /// The largest element (-inf for an empty row; NaNs are not looked for).
    fn max(&self, x: &[f32]) -> f32 {
        x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
    }
}

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

/// The fastest implementation this machine and build can run.
pub fn best() -> &'static dyn Simd {
    if crate::cpu::features::scalar_only() {
        return &scalar::simd::Scalar;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(s) = x86::simd::Avx2::detect() {
            return s;
        }
        &x86::simd::Sse2
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        &wasm::simd::Simd128
    }
    #[cfg(not(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128"))))]
    {
        &scalar::simd::Scalar
    }
}

/// Every implementation this machine can run, scalar first (tests compare them).
pub fn available() -> Vec<&'static dyn Simd> {
    let mut v: Vec<&'static dyn Simd> = alloc::vec![&scalar::simd::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        v.push(&x86::simd::Sse2);
        if let Some(s) = x86::simd::Avx2::detect() {
            v.push(s);
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    v.push(&wasm::simd::Simd128);
    v
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Every ISA against an f64 sum, on lengths that hit each tail path.
    #[test]
    fn implementations_agree_with_f64() {
        let mut seed = 0x1234_5678u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        for n in [0usize, 1, 3, 4, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 100, 768, 1023] {
            let a: Vec<f32> = (0..n).map(|_| next()).collect();
            let b: Vec<f32> = (0..n).map(|_| next()).collect();
            let h: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
            let want: f64 = a.iter().zip(&b).map(|(&x, &y)| x as f64 * y as f64).sum();
            let want_h: f64 = h.iter().zip(&b).map(|(&x, &y)| x.to_f64() * y as f64).sum();
            // Σ|a·b| ≤ n; f32 partial sums of n terms err by ≤ ~n·2^-24 relative to that.
            let tol = 1e-6 * (n as f64 + 1.0);
            for s in available() {
                let got = s.dot_f32(&a, &b) as f64;
                assert!((got - want).abs() <= tol, "{} dot_f32 n={n}: {got} vs {want}", s.name());
                let got = s.dot_f16_f32(&h, &b) as f64;
                assert!((got - want_h).abs() <= tol, "{} dot_f16_f32 n={n}: {got} vs {want_h}", s.name());
            }
        }
    }
}
