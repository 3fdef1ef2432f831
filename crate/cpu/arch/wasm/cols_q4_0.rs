//! SIMD128 decode kernel of Q4_0 weights in ggml's layout for 2 to 4 rows of activations (a
//! decode step of as many sequences): rows of a 4 at a time, each block's nibbles loaded and
//! unpacked once for the N rows of b, the 4 rows' sums of each row of b in one transpose-add
//! (lanes = rows of a), the 4 rows' scales converted once. The float steps are the scalar's
//! per lane (`acc[t % 8] += Σ·(dx·dy)`, then `reduce8`), so every value has `vec_dot`'s bits.
//!
//! Q4_0 keeps ggml's layout on wasm (its packed groups made one sequence slower: `packed.rs`),
//! so a step of several sequences would otherwise take `gemm_rows`' tiles (2 or 3 rows of b:
//! each row of a widened into memory, then one `row_dot` per pair) or its panels (4 rows of b:
//! every row of a repacked per call): each costs the weights' unpacking once per sequence or
//! more. One row of b keeps `decode_rows`.

use crate::wasm_arch::*;

use bytemuck::cast_slice;

use super::super::kernel::{GemmArgs, GROUP};
use super::packed::blocks;
use super::{f16x4, q4_0_q8_0, transpose_sum};
use crate::quants::blocks::{BlockQ4_0, BlockQ8_0};
use crate::types::GgmlType;

/// Bytes of a Q4_0 block (f16 d, 16 nibble bytes) and of a Q8_0 one (f16 d, 32 quants).
const XS: usize = core::mem::size_of::<BlockQ4_0>();
const YS: usize = core::mem::size_of::<BlockQ8_0>();

/// `c[j·ldc + i]` = row i of a · row j of b for the 2 to 4 rows of b in `g.cols`, none of them
/// `plain`. `yw`: b's quants widened to i16 (4 vectors per block, row j's block t at
/// `4(j·nb + t)`) on the plain build; empty on the relaxed one, which reads b's bytes and
/// `cols.ysum`.
pub(super) fn decode(g: &GemmArgs, yw: &[v128], c: &mut [f32]) {
    match g.cols.plain.len() {
        2 => decode_n::<2>(g, yw, c),
        3 => decode_n::<3>(g, yw, c),
        4 => decode_n::<4>(g, yw, c),
        n => panic!("Q4_0 decode columns: {n} rows of b"),
    }
}

fn decode_n<const N: usize>(g: &GemmArgs, yw: &[v128], c: &mut [f32]) {
    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc } = *g;
    let nbp = cols.nbp;
    assert_eq!(ty, GgmlType::Q4_0, "Q4_0 decode columns: {ty}");
    assert!(m > 0 && a.len() >= (m - 1) * lda + nb * XS && b.len() >= (N - 1) * ldb + nb * YS);
    assert!(c.len() >= (N - 1) * ldc + m && ldc >= m && cols.dy.len() >= N * nbp && !cols.plain.contains(&true));
    #[cfg(target_feature = "relaxed-simd")]
    assert!(cols.ysum.len() >= N * nbp);
    #[cfg(not(target_feature = "relaxed-simd"))]
    assert!(yw.len() >= 4 * N * nb);
    #[cfg(target_feature = "relaxed-simd")]
    let _ = yw;
    let ng = m / GROUP;
    for grp in 0..ng {
        let p: [*const u8; GROUP] = core::array::from_fn(|r| a[(GROUP * grp + r) * lda..].as_ptr());
        // SAFETY: each p[r] starts a row of nb blocks inside a; b holds N rows of nb blocks
        // ldb apart, yw 4·N·nb vectors, dy (and ysum) N·nbp entries (asserted above).
        #[cfg(not(target_feature = "relaxed-simd"))]
        let out = unsafe { group::<N>(nb, p, yw.as_ptr(), cols.dy.as_ptr(), nbp) };
        #[cfg(target_feature = "relaxed-simd")]
        let out = unsafe { group_relaxed::<N>(nb, p, b.as_ptr(), ldb, cols.dy.as_ptr(), cols.ysum.as_ptr(), nbp) };
        for (j, out) in out.iter().enumerate() {
            c[j * ldc + GROUP * grp..j * ldc + GROUP * (grp + 1)].copy_from_slice(out);
        }
    }
    // Rows past the last 4: vec_dot's own kernel (the same bits).
    for i in GROUP * ng..m {
        let x: &[BlockQ4_0] = cast_slice(&a[i * lda..i * lda + nb * XS]);
        for j in 0..N {
            c[j * ldc + i] = q4_0_q8_0(x, cast_slice(&b[j * ldb..j * ldb + nb * YS]));
        }
    }
}

/// The 4 rows' f32 scales of block t (an f16 at the start of each row's block).
///
/// # Safety
/// Each `p[r]` points at a row of more than t blocks.
#[inline(always)]
unsafe fn scales(p: &[*const u8; GROUP], t: usize) -> v128 {
    f16x4(core::array::from_fn(|r| (p[r].add(XS * t) as *const u16).read_unaligned()))
}

/// Plain build: each row's block as 4 i16 vectors (nibbles − 8), one `i32x4.dot_i16x8_s` per 8
/// products and row of b.
///
/// # Safety
/// Each `p[r]` points at `nb` Q4_0 blocks; `yw` holds `4·N·nb` vectors (row j's block t at
/// `4(j·nb + t)`), `dy` N rows of `nbp` scales.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn group<const N: usize>(
    nb: usize,
    p: [*const u8; GROUP],
    yw: *const v128,
    dy: *const f32,
    nbp: usize,
) -> [[f32; GROUP]; N] {
    let (m0f, eight) = (u8x16_splat(0x0F), i8x16_splat(8));
    blocks::<N>(nb, |t, acc| {
        let sc = scales(&p, t);
        let mut v = [[i32x4_splat(0); GROUP]; N];
        for (r, &pr) in p.iter().enumerate() {
            let q = v128_load(pr.add(XS * t + 2) as *const v128);
            let (lo, hi) = (i8x16_sub(v128_and(q, m0f), eight), i8x16_sub(u8x16_shr(q, 4), eight));
            let x = [
                i16x8_extend_low_i8x16(lo),
                i16x8_extend_high_i8x16(lo),
                i16x8_extend_low_i8x16(hi),
                i16x8_extend_high_i8x16(hi),
            ];
            for (j, v) in v.iter_mut().enumerate() {
                let y = yw.add(4 * (j * nb + t));
                v[r] = i32x4_add(
                    i32x4_add(i32x4_dot_i16x8(x[0], *y), i32x4_dot_i16x8(x[1], *y.add(1))),
                    i32x4_add(i32x4_dot_i16x8(x[2], *y.add(2)), i32x4_dot_i16x8(x[3], *y.add(3))),
                );
            }
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            let s = f32x4_convert_i32x4(transpose_sum(&v[j]));
            *acc = f32x4_add(*acc, f32x4_mul(s, f32x4_mul(sc, f32x4_splat(*dy.add(j * nbp + t)))));
        }
    })
}

/// Relaxed build: the raw nibbles (0..15, a valid i7 operand everywhere) into
/// `i32x4.relaxed_dot_i8x16_i7x16_add_s` with b's bytes as they are, then `− 8·Σy` per block
/// (`ysum`): the exact block sums `decode_dot_nibbles` takes. The 4 rows' nibbles are unpacked
/// first (8 vectors), then each row of b's two vectors are loaded once for them.
///
/// # Safety
/// Each `p[r]` points at `nb` Q4_0 blocks; `b` at N rows of `nb` Q8_0 blocks `ldb` bytes apart;
/// `dy` and `ysum` N rows of `nbp` entries.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn group_relaxed<const N: usize>(
    nb: usize,
    p: [*const u8; GROUP],
    b: *const u8,
    ldb: usize,
    dy: *const f32,
    ysum: *const i32,
    nbp: usize,
) -> [[f32; GROUP]; N] {
    let m0f = u8x16_splat(0x0F);
    blocks::<N>(nb, |t, acc| {
        let sc = scales(&p, t);
        let x: [[v128; 2]; GROUP] = core::array::from_fn(|r| {
            let q = v128_load(p[r].add(XS * t + 2) as *const v128);
            [v128_and(q, m0f), u8x16_shr(q, 4)]
        });
        for (j, acc) in acc.iter_mut().enumerate() {
            let y = b.add(j * ldb + YS * t + 2);
            let (ylo, yhi) = (v128_load(y as *const v128), v128_load(y.add(16) as *const v128));
            let v: [v128; GROUP] = core::array::from_fn(|r| {
                i32x4_relaxed_dot_i8x16_i7x16_add(
                    yhi,
                    x[r][1],
                    i32x4_relaxed_dot_i8x16_i7x16_add(ylo, x[r][0], i32x4_splat(0)),
                )
            });
            let s = i32x4_sub(transpose_sum(&v), i32x4_splat(*ysum.add(j * nbp + t) << 3));
            *acc = f32x4_add(*acc, f32x4_mul(f32x4_convert_i32x4(s), f32x4_mul(sc, f32x4_splat(*dy.add(j * nbp + t)))));
        }
    })
}
