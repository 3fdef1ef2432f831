//! The SIMD kernels the CPU ops need, behind one small trait, one file per ISA.
//!
//! ```
//! use ggweb::cpu::simd::{self, Simd};
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
//! elsewhere the portable [`scalar::Scalar`]. Implementations sum in
//! different orders, so results agree to rounding, not bit for bit.

pub mod scalar;
#[cfg(target_arch = "wasm32")]
pub mod wasm;
#[cfg(target_arch = "x86_64")]
pub mod x86;

use alloc::vec::Vec;
use half::f16;

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
        return &scalar::Scalar;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(s) = x86::Avx2::detect() {
            return s;
        }
        &x86::Sse2
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        &wasm::Simd128
    }
    #[cfg(not(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128"))))]
    {
        &scalar::Scalar
    }
}

/// Every implementation this machine can run, scalar first (tests compare them).
pub fn available() -> Vec<&'static dyn Simd> {
    let mut v: Vec<&'static dyn Simd> = alloc::vec![&scalar::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        v.push(&x86::Sse2);
        if let Some(s) = x86::Avx2::detect() {
            v.push(s);
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    v.push(&wasm::Simd128);
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
