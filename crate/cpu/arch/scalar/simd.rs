//! The portable float kernels of the scalar table: `mul_mat`'s F32/F16 product and the
//! elementwise row helpers. The products are [`super::vec_dot_f32`]'s sums (element `i`
//! into lane `i % 8`, then [`super::reduce8`]), so the scalar table has one f32 dot.

use super::super::{f16_bits_to_f32, gelu_f32};
use super::{reduce8, LANES};
use crate::quants::blocks::fp16_to_fp32;

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

pub(crate) fn gelu_back(dy: &[f32], x: &[f32], out: &mut [f32]) {
    for ((o, &g), &v) in out.iter_mut().zip(dy).zip(x) {
        *o = super::super::gelu_back_f32(g, v);
    }
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

/// Rows of a weight converted into one panel by the backward pass's `out_prod`.
pub const OUT_PROD_J: usize = 32;

/// `Kernels::out_prod_panel`, portable: 4 result rows × 8 columns per register tile.
pub(crate) fn out_prod_panel(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]) {
    panel_product_with::<8>(acc, n0, panel, cs);
}

/// [`super::super::kernel::Kernels::out_prod_panel`] with a register tile of 4 result rows × W columns: the tile's sums stay
/// in registers over the whole panel (W/8 or W/4 vectors per row), each panel row's W values
/// loaded once for the four rows. The rest (rows past a multiple of 4, columns past one of W)
/// one row at a time.
#[inline(always)]
pub(crate) fn panel_product_with<const W: usize>(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]) {
    const T: usize = 4;
    let rows = acc.len() / n0;
    let mut k = 0;
    while k + T <= rows {
        let c: [[f32; OUT_PROD_J]; T] =
            core::array::from_fn(|t| cs[(k + t) * OUT_PROD_J..(k + t + 1) * OUT_PROD_J].try_into().unwrap());
        let mut i = 0;
        while i + W <= n0 {
            let mut sum = [[0f32; W]; T];
            for (jj, cj) in (0..OUT_PROD_J).map(|jj| (jj, [c[0][jj], c[1][jj], c[2][jj], c[3][jj]])) {
                let p: &[f32; W] = panel[jj * n0 + i..jj * n0 + i + W].try_into().unwrap();
                for t in 0..T {
                    for l in 0..W {
                        sum[t][l] += cj[t] * p[l];
                    }
                }
            }
            for (t, s) in sum.iter().enumerate() {
                let o: &mut [f32; W] = (&mut acc[(k + t) * n0 + i..(k + t) * n0 + i + W]).try_into().unwrap();
                for l in 0..W {
                    o[l] += s[l];
                }
            }
            i += W;
        }
        for t in 0..T {
            tail_row(&mut acc[(k + t) * n0..(k + t + 1) * n0], i, n0, panel, &c[t]);
        }
        k += T;
    }
    for k in k..rows {
        let c: [f32; OUT_PROD_J] = cs[k * OUT_PROD_J..(k + 1) * OUT_PROD_J].try_into().unwrap();
        tail_row(&mut acc[k * n0..(k + 1) * n0], 0, n0, panel, &c);
    }
}

/// Q8_0's group on this target ([`layout`](crate::cpu::arch::repack::layout)): rows per group
/// and the piece of each row's 32 quants laid out at a time (x86_64: 4 bytes of each of 8 rows
/// in turn, for `vpdpbusd`; wasm: each of 4 rows' quants whole).
pub(crate) const Q8_0_GROUP: (usize, usize) = if cfg!(target_arch = "x86_64") { (8, 4) } else { (4, 32) };

/// `Kernels::q8_0_group`, portable.
pub(crate) fn q8_0_group(nb: usize, grp: &[u8], out: &mut [f32], ld: usize, bs: usize) {
    q8_0_group_with::<{ Q8_0_GROUP.0 }, { Q8_0_GROUP.1 }>(nb, grp, out, ld, bs);
}

/// [`q8_0_group`] for groups of R rows whose quants lie in pieces of IL bytes: block t holds
/// the R scales, then piece c of row r at `(c·R + r)·IL`.
#[inline(always)]
fn q8_0_group_with<const R: usize, const IL: usize>(nb: usize, grp: &[u8], out: &mut [f32], ld: usize, bs: usize) {
    const QK: usize = 32;
    let gs = R * (2 + QK);
    assert!(grp.len() >= nb * gs && (nb == 0 || out.len() >= (R - 1) * ld + (nb - 1) * bs + QK));
    for (t, blk) in grp.chunks_exact(gs).take(nb).enumerate() {
        let d: [f32; R] = core::array::from_fn(|r| fp16_to_fp32(u16::from_le_bytes([blk[2 * r], blk[2 * r + 1]])));
        let qs = &blk[2 * R..];
        for c in 0..QK / IL {
            for (r, &dr) in d.iter().enumerate() {
                let q: &[u8; IL] = qs[(c * R + r) * IL..][..IL].try_into().unwrap();
                let y: &mut [f32; IL] = (&mut out[r * ld + t * bs + c * IL..][..IL]).try_into().unwrap();
                for (y, &q) in y.iter_mut().zip(q) {
                    *y = q as i8 as f32 * dr;
                }
            }
        }
    }
}

/// One result row's columns `from..n0` of the panel product.
#[inline(always)]
pub(crate) fn tail_row(out: &mut [f32], from: usize, n0: usize, panel: &[f32], c: &[f32; OUT_PROD_J]) {
    for (jj, &cj) in c.iter().enumerate() {
        if cj == 0.0 {
            continue;
        }
        let p = &panel[jj * n0 + from..(jj + 1) * n0];
        out[from..].iter_mut().zip(p).for_each(|(o, &x)| *o += cj * x);
    }
}
