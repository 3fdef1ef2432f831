//! The portable float kernels of the scalar table: `mul_mat`'s F32/F16 product and the
//! elementwise row helpers. The products are [`super::vec_dot_f32`]'s sums (element `i`
//! into lane `i % 8`, then [`super::reduce8`]), so the scalar table has one f32 dot.

use super::super::{f16_bits_to_f32, gelu_f32};
use super::{reduce8, LANES};

/// Σ get_a(l)·get_b(l) for l < k in the scalar order: lane `l % 8`, then [`reduce8`].
#[inline(always)]
pub(crate) fn dot_lanes(k: usize, get_a: impl Fn(usize) -> f32, get_b: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let main = k - k % LANES;
    let mut l = 0;
    while l < main {
        for (q, acc) in acc.iter_mut().enumerate() {
            *acc += get_a(l + q) * get_b(l + q);
        }
        l += LANES;
    }
    for l in main..k {
        acc[l - main] += get_a(l) * get_b(l);
    }
    reduce8(&acc)
}

/// [`crate::cpu::arch::FloatGemm`] for f32 rows of `a`.
///
/// # Safety
/// As [`crate::cpu::arch::FloatGemm`] says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f32(
    k: usize,
    m: usize,
    n: usize,
    a: *const u8,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    let a = a as *const f32;
    for j in 0..n {
        let bj = b.add(j * ldb);
        for i in 0..m {
            let ai = a.add(i * lda);
            *c.add(j * ldc + i) = dot_lanes(k, |l| *ai.add(l), |l| *bj.add(l));
        }
    }
}

/// [`gemm_f32`] with f16 rows of `a` (as bits), converted as they are loaded.
///
/// # Safety
/// As [`crate::cpu::arch::FloatGemm`] says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f16(
    k: usize,
    m: usize,
    n: usize,
    a: *const u8,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    let a = a as *const u16;
    for j in 0..n {
        let bj = b.add(j * ldb);
        for i in 0..m {
            let ai = a.add(i * lda);
            *c.add(j * ldc + i) = dot_lanes(k, |l| f16_bits_to_f32(*ai.add(l)), |l| *bj.add(l));
        }
    }
}

pub(crate) fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
    dst.iter_mut().zip(src).for_each(|(d, &h)| *d = f16_bits_to_f32(h));
}

pub(crate) fn gelu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_f32(*v));
}

pub(crate) fn exp_sum(x: &mut [f32], sub: f32) -> f64 {
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = libm::expf(*v - sub);
        sum += *v as f64;
    }
    sum
}

pub(crate) fn max(x: &[f32]) -> f32 {
    x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}
