//! SIMD128 prompt kernels for Q4_1 and Q5_1 (`d·q + m` against Q8_1), bit-identical to
//! `vec_dot`: per row of a, each block's unsigned quants (0..32) are unpacked and its scale
//! and min converted once; against each row of b (four at a time, sharing them) the exact
//! i32 sum `Σ q·y` comes from `dot_i8` (or, with relaxed SIMD,
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s`: q < 32 is a valid i7 operand and pairs stay within
//! ±8128, so every engine gives the exact sums), then the scalar `qx_1_block` float steps,
//! block `t` into lane `t % 8`. One row of b goes through the `vec_dot` kernels instead.

use crate::wasm_arch::*;

use alloc::vec;

use bytemuck::cast_slice;

use super::super::kernel::{GemmArgs, PromptGemm};
use super::super::scalar::{reduce8, LANES};
use super::{hsum_i32, nibbles, q5};
use crate::quants::blocks::*;

#[cfg(target_feature = "relaxed-simd")]
const NAME: &str = "simd128 affine rows (relaxed dot)";
#[cfg(not(target_feature = "relaxed-simd"))]
const NAME: &str = "simd128 affine rows";

/// The prompt kernels of Q4_1 and Q5_1.
pub(super) static GEMMS: [PromptGemm; 2] = [
    PromptGemm {
        name: NAME,
        rows: |g, c| gemm_rows_affine::<BlockQ4_1>(g, c),
        needs_plain: false,
        wants_sums: false,
        chunk: crate::cpu::arch::L1_CHUNK,
    },
    PromptGemm {
        name: NAME,
        rows: |g, c| gemm_rows_affine::<BlockQ5_1>(g, c),
        needs_plain: false,
        wants_sums: false,
        chunk: crate::cpu::arch::L1_CHUNK,
    },
];

trait Affine: bytemuck::Pod {
    fn d(&self) -> u16;
    fn m(&self) -> u16;
    /// Elements 0..16 and 16..32 as unsigned bytes.
    fn quants(&self) -> (v128, v128);
    fn vec_dot(xs: &[Self], ys: &[BlockQ8_1]) -> f32;
}

impl Affine for BlockQ4_1 {
    #[inline(always)]
    fn d(&self) -> u16 {
        BlockQ4_1::d(self)
    }
    #[inline(always)]
    fn m(&self) -> u16 {
        BlockQ4_1::m(self)
    }
    #[inline(always)]
    fn quants(&self) -> (v128, v128) {
        nibbles(&self.qs)
    }
    #[inline(always)]
    fn vec_dot(xs: &[Self], ys: &[BlockQ8_1]) -> f32 {
        super::q4_1_q8_1(xs, ys)
    }
}

impl Affine for BlockQ5_1 {
    #[inline(always)]
    fn d(&self) -> u16 {
        BlockQ5_1::d(self)
    }
    #[inline(always)]
    fn m(&self) -> u16 {
        BlockQ5_1::m(self)
    }
    #[inline(always)]
    fn quants(&self) -> (v128, v128) {
        q5(&self.qs, self.qh())
    }
    #[inline(always)]
    fn vec_dot(xs: &[Self], ys: &[BlockQ8_1]) -> f32 {
        super::q5_1_q8_1(xs, ys)
    }
}

const Y_SIZE: usize = core::mem::size_of::<BlockQ8_1>();
const Y_QS: usize = 4;

/// Σ u·y of 32 pairs into 4 i32 lanes (exact).
#[inline(always)]
fn isum(u: (v128, v128), y: *const u8) -> v128 {
    // SAFETY (callers): `y` starts the 32 quants of a whole Q8_1 block.
    let (y0, y1) = unsafe { (v128_load(y as *const v128), v128_load(y.add(16) as *const v128)) };
    #[cfg(target_feature = "relaxed-simd")]
    {
        i32x4_relaxed_dot_i8x16_i7x16_add(y1, u.1, i32x4_relaxed_dot_i8x16_i7x16_add(y0, u.0, i32x4_splat(0)))
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        i32x4_add(super::dot_i8(u.0, y0), super::dot_i8(u.1, y1))
    }
}

fn gemm_rows_affine<X: Affine>(g: &GemmArgs, c: &mut [f32]) {
    let GemmArgs { nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
    let (n, nbp) = (cols.plain.len(), cols.nbp);
    let xsize = core::mem::size_of::<X>();
    let row = |j: usize| &b[j * ldb..j * ldb + nb * Y_SIZE];
    if n == 1 {
        let ys: &[BlockQ8_1] = cast_slice(row(0));
        for i in 0..m {
            c[i] = X::vec_dot(cast_slice(&a[i * lda..i * lda + nb * xsize]), ys);
        }
        return;
    }
    assert!(cols.dy.len() >= n * nbp && cols.sy.len() >= n * nbp);
    let zero = i32x4_splat(0);
    let (mut u, mut dx, mut mx) = (vec![(zero, zero); nb], vec![0f32; nb], vec![0f32; nb]);
    for i in 0..m {
        let xs: &[X] = cast_slice(&a[i * lda..i * lda + nb * xsize]);
        for (t, x) in xs.iter().enumerate() {
            u[t] = x.quants();
            dx[t] = fp16_to_fp32(x.d());
            mx[t] = fp16_to_fp32(x.m());
        }
        let mut j = 0;
        while j < n {
            let cn = if j + 4 <= n { 4 } else { 1 };
            let out = if cn == 4 {
                row_dots::<4>(&u, &dx, &mx, core::array::from_fn(|q| row(j + q)), core::array::from_fn(|q| j + q), cols)
            } else {
                let o = row_dots::<1>(&u, &dx, &mx, [row(j)], [j], cols);
                [o[0], 0.0, 0.0, 0.0]
            };
            for (q, v) in out.iter().take(cn).enumerate() {
                c[(j + q) * ldc + i] = *v;
            }
            j += cn;
        }
    }
}

/// One unpacked row of a against `C` rows of b (`jj`: their indices in `cols`).
#[inline(always)]
fn row_dots<const C: usize>(
    u: &[(v128, v128)],
    dx: &[f32],
    mx: &[f32],
    ys: [&[u8]; C],
    jj: [usize; C],
    cols: &super::super::ColPrep,
) -> [f32; C] {
    let nb = u.len();
    for y in ys {
        assert!(y.len() >= nb * Y_SIZE);
    }
    let nbp = cols.nbp;
    let dy: [&[f32]; C] = jj.map(|j| &cols.dy[j * nbp..j * nbp + nb]);
    let sy: [&[f32]; C] = jj.map(|j| &cols.sy[j * nbp..j * nbp + nb]);
    let mut lanes = [[0f32; LANES]; C];
    for t in 0..nb {
        for q in 0..C {
            // SAFETY: block t < nb of a row of b whose length is asserted above.
            let s = hsum_i32(isum(u[t], unsafe { ys[q].as_ptr().add(t * Y_SIZE + Y_QS) }));
            lanes[q][t % LANES] += s as f32 * (dx[t] * dy[q][t]) + mx[t] * sy[q][t];
        }
    }
    lanes.map(|l| reduce8(&l))
}
