//! SIMD128 decode kernels for weights repacked at load ([`crate::cpu::arch::repack`]): 1 to 4
//! rows of activations (a decode step of as many sequences) against groups of 4 rows whose
//! blocks lie side by side. Each block's activation vectors are loaded once for the 4 rows, the
//! group's block once for the rows of activations, the 4 rows' partial sums meet in one
//! transpose-add per row of activations (lanes = rows), and the 4 scales are one 8-byte load.
//! A step reads two groups half the matrix apart block by block ([`in_pairs`]: two memory
//! streams, where one held wasm's reads to the single-stream rate). The float steps are the
//! scalar's per row, one row per lane: `acc[t % 8] += Σ·(dx·dy)`, then `reduce8`, so
//! every result has `vec_dot`'s bits. The integer sums take one of three forms: the plain
//! build's i16 products (`group_q8_0`); with relaxed SIMD, u8 weights against b's i8 quants
//! where the relaxed dot is `vpdpbusd` (`group_q8_0_u8`, chosen at run time by
//! `u8_dot_exact`), else the sign trick (`group_q8_0_relaxed`).
//!
//! Q8_0 only (the K-quants' groups: `packed_k.rs`): Q4_0 groups (the same layout, 18-byte
//! blocks) measured ~7% slower than `decode_rows` on ggml's layout in Chromium 156 on both
//! builds (its integer part is cheap, so the per-group transpose and scale steps weigh more),
//! so Q4_0 weights stay as they are.

use crate::wasm_arch::*;

use super::super::kernel::{GemmArgs, PackedKernel, PromptGemm, GROUP};
use super::{f16x4_finite, load, transpose_sum};
use crate::types::GgmlType;

#[cfg(not(target_feature = "relaxed-simd"))]
pub(in crate::cpu::arch) static PACKED_Q8_0: PackedKernel =
    PackedKernel { name: "simd128 4-row groups", decode, wants_sums: false, cols: 4, prompt: Some(&PANELS) };
#[cfg(target_feature = "relaxed-simd")]
pub(in crate::cpu::arch) static PACKED_Q8_0: PackedKernel = PackedKernel {
    name: "simd128 4-row groups (relaxed dot)",
    decode,
    wants_sums: false,
    cols: 4,
    prompt: Some(&PANELS),
};
static PANELS: PromptGemm = PromptGemm {
    name: "simd128 i16 panels (4-row groups)",
    rows: super::gemm_rows_packed,
    needs_plain: false,
    wants_sums: false,
    chunk: crate::cpu::arch::L1_CHUNK,
};

/// [`super::f16x4_finite`]'s constants ([`super::F16_K`]) and the byte that makes an i8
/// unsigned (`x ^ 0x80 = x + 128`), read once per group ([`super::Kept`]).
static SCALE_KEPT: super::Kept<5> = {
    let [mag, bias, m14, sign] = super::F16_K;
    super::Kept([mag, bias, m14, sign, [0x8080_8080; 4]])
};

/// `acc[t % 8]` per lane, reduced as `reduce8` does.
#[inline(always)]
fn reduce8x4(a: &[v128; 8]) -> v128 {
    f32x4_add(
        f32x4_add(f32x4_add(a[0], a[4]), f32x4_add(a[2], a[6])),
        f32x4_add(f32x4_add(a[1], a[5]), f32x4_add(a[3], a[7])),
    )
}

/// 4 rows of 32 weights (a group's block, or 4 blocks of one row of ggml's layout) against
/// N > 1 rows of b: per row of b j, lane r = the sum of the lanes of `dot(&row(r), j)` (r's
/// partial sums: [`transpose_sum`] of the 4), each row of weights prepared once (`row`: loaded
/// and widened) for the N rows of b. Widening it per row of b, as the one-row form does,
/// repeated that work N times: the plain build's decode of 4 rows of b cost ~3.2 of 1 per CPU
/// second in cache. Rows go two at a time, their sums paired
/// at once (`transpose_sum`'s first step), so one row's weights and 2N sums are live, inside
/// V8's registers. The same exact i32 sums. (The relaxed build's u8 form, its weights made
/// unsigned once the same way, measured no faster: an xor a row is all it shares.)
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) fn rows_shared<W, const N: usize>(row: impl Fn(usize) -> W, dot: impl Fn(&W, usize) -> v128) -> [v128; N] {
    // Rows 2h, 2h + 1 as transpose_sum pairs them.
    let pair = |h: usize| -> [v128; N] {
        let w0 = row(2 * h);
        let v0: [v128; N] = core::array::from_fn(|j| dot(&w0, j));
        let w1 = row(2 * h + 1);
        core::array::from_fn(|j| {
            let (a, b) = (v0[j], dot(&w1, j));
            i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(a, b), i32x4_shuffle::<2, 6, 3, 7>(a, b))
        })
    };
    let (t0, t1) = (pair(0), pair(1));
    core::array::from_fn(|j| {
        i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(t0[j], t1[j]), i32x4_shuffle::<2, 3, 6, 7>(t0[j], t1[j]))
    })
}

/// Runs `step(t, &mut acc[t % 8])` for every block, in order (`acc[t % 8][g][j]`: group g's
/// 4 rows against column j), then each group's and column's 4 rows' results.
#[inline(always)]
fn blocks<const G: usize, const N: usize>(
    nb: usize,
    mut step: impl FnMut(usize, &mut [[v128; N]; G]),
) -> [[[f32; GROUP]; N]; G] {
    let mut acc = [[[f32x4_splat(0.0); N]; G]; 8];
    let mut t = 0;
    while t + 8 <= nb {
        for (j, a) in acc.iter_mut().enumerate() {
            step(t + j, a);
        }
        t += 8;
    }
    while t < nb {
        step(t, &mut acc[t % 8]);
        t += 1;
    }
    core::array::from_fn(|g| {
        core::array::from_fn(|j| {
            let mut out = [0f32; GROUP];
            // SAFETY: 4 f32 of room for one unaligned 16-byte store.
            unsafe { v128_store(out.as_mut_ptr() as *mut v128, reduce8x4(&core::array::from_fn(|i| acc[i][g][j]))) };
            out
        })
    })
}

/// Runs `group` on the `ng` groups two at a time, s and s + ⌈ng/2⌉ for s < ⌊ng/2⌋ (then the
/// middle one alone when ng is odd), block by block side by side: two memory streams half the
/// matrix apart, where one stream in address order left the memory bus idle (a bare wasm read
/// loop: 1 stream ~10.5 GB/s, 2 streams 12.6–13.4 on this Intel Xeon; BENCHMARKS.md
/// 2026-12-07, "Where a wasm decode step's time goes"). The order changes no value.
#[inline(always)]
pub(super) fn in_pairs<const N: usize>(
    ng: usize,
    c: &mut [f32],
    ldc: usize,
    mut two: impl FnMut([usize; 2]) -> [[[f32; GROUP]; N]; 2],
    mut one: impl FnMut(usize) -> [[[f32; GROUP]; N]; 1],
) {
    let mut put = |g: usize, out: &[[f32; GROUP]; N]| {
        for (j, out) in out.iter().enumerate() {
            c[j * ldc + GROUP * g..j * ldc + GROUP * (g + 1)].copy_from_slice(out);
        }
    };
    let (half, far) = (ng / 2, ng.div_ceil(2));
    for s in 0..half {
        let out = two([s, s + far]);
        put(s, &out[0]);
        put(s + far, &out[1]);
    }
    if !ng.is_multiple_of(2) {
        put(half, &one(half)[0]);
    }
}

/// The [`PackedKernel::decode`] of Q8_0: the 1 to 4 rows of b given against the groups, two
/// groups half the matrix apart at a time ([`in_pairs`]).
fn decode(g: &GemmArgs, c: &mut [f32]) -> bool {
    match g.cols.plain.len() {
        1 => decode_n::<1>(g, c),
        2 => decode_n::<2>(g, c),
        3 => decode_n::<3>(g, c),
        4 => decode_n::<4>(g, c),
        n => panic!("packed decode: {n} rows of b"),
    }
}

/// [`decode`] of N rows of b: per block, each row of b's vectors and scale side by side (`4N`
/// vectors, `N` scales), so one pass over a group's blocks serves the N columns.
fn decode_n<const N: usize>(g: &GemmArgs, c: &mut [f32]) -> bool {
    let GemmArgs { ty, nb, m, a, b, ldb, cols, ldc, .. } = *g;
    let ng = m / GROUP;
    assert_eq!(ty, GgmlType::Q8_0, "packed decode: Q8_0 only");
    let gs = nb * GROUP * 34;
    assert!(a.len() >= ng * gs && b.len() >= (N - 1) * ldb + nb * 34 && c.len() >= (N - 1) * ldc + GROUP * ng);
    assert!(cols.dy.len() >= (N - 1) * cols.nbp + nb);
    let mut dy = alloc::vec![0f32; N * nb];
    for t in 0..nb {
        for j in 0..N {
            dy[t * N + j] = cols.dy[j * cols.nbp + t];
        }
    }
    let row = |j: usize, t: usize| &b[j * ldb + t * 34 + 2..j * ldb + t * 34 + 34];
    #[cfg(target_feature = "relaxed-simd")]
    if super::u8_dot_exact() {
        // b's quants as they are (the dot's i8 operand), then the block's −128·Σy in lane 0
        // (3 vectors a block and row): the weights made unsigned (w + 128) are the u8 operand.
        let mut yc = alloc::vec![i8x16_splat(0); 3 * N * nb];
        for t in 0..nb {
            for j in 0..N {
                let y = row(j, t);
                let sum: i32 = y.iter().map(|&q| q as i8 as i32).sum();
                let v = [load(&y[..16]), load(&y[16..]), i32x4(-128 * sum, 0, 0, 0)];
                yc[3 * (t * N + j)..3 * (t * N + j) + 3].copy_from_slice(&v);
            }
        }
        let at = |g: usize| a[g * gs..].as_ptr();
        // SAFETY: groups g < ng lie inside a; yc holds 3·N·nb vectors, dy N·nb scales.
        in_pairs::<N>(
            ng,
            c,
            ldc,
            |[g0, g1]| unsafe { group_q8_0_u8::<2, N>(nb, [at(g0), at(g1)], &yc, &dy) },
            |g| unsafe { group_q8_0_u8::<1, N>(nb, [at(g)], &yc, &dy) },
        );
        return true;
    }
    #[cfg(target_feature = "relaxed-simd")]
    {
        // b as |y| and its signs (4 vectors a block and row); an activation of -128 has no
        // |y| in i8: the caller unpacks instead (quantize_row never writes one).
        let mut ys = alloc::vec![i8x16_splat(0); 4 * N * nb];
        let (m128, mut bad) = (i8x16_splat(-128), i8x16_splat(0));
        for t in 0..nb {
            for j in 0..N {
                let y = row(j, t);
                let (lo, hi) = (load(&y[..16]), load(&y[16..]));
                bad = v128_or(bad, v128_or(i8x16_eq(lo, m128), i8x16_eq(hi, m128)));
                let v = [i8x16_abs(lo), i8x16_abs(hi), i8x16_shr(lo, 7), i8x16_shr(hi, 7)];
                ys[4 * (t * N + j)..4 * (t * N + j) + 4].copy_from_slice(&v);
            }
        }
        if v128_any_true(bad) {
            return false;
        }
        let at = |g: usize| a[g * gs..].as_ptr();
        // SAFETY: groups g < ng lie inside a; ys holds 4·N·nb vectors, dy N·nb scales.
        in_pairs::<N>(
            ng,
            c,
            ldc,
            |[g0, g1]| unsafe { group_q8_0_relaxed::<2, N>(nb, [at(g0), at(g1)], &ys, &dy) },
            |g| unsafe { group_q8_0_relaxed::<1, N>(nb, [at(g)], &ys, &dy) },
        );
        true
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        // b's quants widened to i16, 4 vectors a block and row.
        let mut yw = alloc::vec![i16x8_splat(0); 4 * N * nb];
        for t in 0..nb {
            for j in 0..N {
                let y = row(j, t);
                super::widen(load(&y[..16]), load(&y[16..]), &mut yw[4 * (t * N + j)..]);
            }
        }
        let (at, last) = (|g: usize| a[g * gs..].as_ptr(), a.as_ptr() as usize + ng * gs - 1);
        // SAFETY: groups g < ng lie inside a; yw holds 4·N·nb vectors, dy N·nb scales.
        in_pairs::<N>(
            ng,
            c,
            ldc,
            |[g0, g1]| unsafe { group_q8_0::<2, N>(nb, [at(g0), at(g1)], last, &yw, &dy) },
            |g| unsafe { group_q8_0::<1, N>(nb, [at(g)], last, &yw, &dy) },
        );
        true
    }
}

/// [`super::dot32`] of the 32 quants at `q`, each 8 of them loaded already widened to i16
/// (`i16x8.load8x8_s`: `vpmovsxbw` from memory, one instruction, against a load and a widen
/// for the low half and a load, `vpunpckhbw` and `vpsraw` for the high one): the same exact sum.
///
/// # Safety
/// `q` points at 32 readable bytes, `y` at 4 vectors.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn dot32_at(q: *const u8, y: *const v128) -> v128 {
    super::dot_wide(widened_at(q), y)
}

/// The 32 quants at `q` as four i16x8 (`i16x8.load8x8_s` each, see [`dot32_at`]).
///
/// # Safety
/// `q` points at 32 readable bytes.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn widened_at(q: *const u8) -> [v128; 4] {
    core::array::from_fn(|o| i16x8_load_extend_i8x8(q.add(8 * o) as *const i8))
}

/// How far ahead of a block step the plain build's Q8_0 kernel reads ([`super::touch_ahead`]),
/// for 2 to 4 rows of b: 24 group blocks of 136 bytes (3.2 KiB). A 4-sequence Q8_0 step in
/// Chromium 29.8 → 31.9 steps/s; the relaxed kernel with the same reads measured no faster
/// (4 sequences, branch ra12), nor did one row of b's (branch q40p).
#[cfg(not(target_feature = "relaxed-simd"))]
const AHEAD_Q8_0: usize = 24 * 136;

/// # Safety
/// each `p` points at a group of `nb` blocks (136 bytes each); `yw` holds `4·N·nb` vectors, `dy`
/// `N·nb` scales; `last` is the weights' last byte.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
unsafe fn group_q8_0<const G: usize, const N: usize>(
    nb: usize,
    p: [*const u8; G],
    last: usize,
    yw: &[v128],
    dy: &[f32],
) -> [[[f32; GROUP]; N]; G] {
    let yp = yw.as_ptr();
    let dyp = dy.as_ptr();
    let [mag, bias, m14, sign, _] = SCALE_KEPT.read();
    let k = [mag, bias, m14, sign];
    blocks::<G, N>(nb, |t, acc| {
        if N > 1 {
            for &p in p.iter() {
                super::touch_ahead(p as usize + t * 136, 136, AHEAD_Q8_0, last);
            }
        }
        for (p, acc) in p.iter().zip(acc.iter_mut()) {
            let blk = p.add(t * 136);
            let sc = f16x4_finite(blk, &k);
            let q = blk.add(8);
            if N == 1 {
                let y = yp.add(4 * t);
                // The 4 rows written out: as `from_fn` LLVM kept a loop over them, which stored
                // each row's sum to memory and read it back for the transpose.
                let v = [dot32_at(q, y), dot32_at(q.add(32), y), dot32_at(q.add(64), y), dot32_at(q.add(96), y)];
                let s = f32x4_convert_i32x4(transpose_sum(&v));
                acc[0] = f32x4_add(acc[0], f32x4_mul(s, f32x4_mul(sc, f32x4_splat(*dyp.add(t)))));
                continue;
            }
            // Each row's 32 weights widened once (4 × `i16x8.load8x8_s`) for the N rows of b.
            let y = yp.add(4 * N * t);
            let s = rows_shared::<_, N>(|r| widened_at(q.add(32 * r)), |w, j| super::dot_wide(*w, y.add(4 * j)));
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = f32x4_add(
                    *acc,
                    f32x4_mul(f32x4_convert_i32x4(s[j]), f32x4_mul(sc, f32x4_splat(*dyp.add(t * N + j)))),
                );
            }
        }
    })
}

/// Q8_0 with relaxed SIMD: Σx·y = Σ(x·sign y)·|y|, with |y| ≤ 127 (b holds no -128, checked)
/// as `relaxed_dot_i8x16_i7x16_add`'s second operand, where every implementation agrees, and
/// x·sign y in i8 (repacked weights hold no -128: `repack::pack` leaves such weights alone):
/// the exact block sums, 16 products an instruction instead of 8.
///
/// # Safety
/// each `p` points at a group of `nb` blocks (136 bytes each); `ys` holds `4·N·nb` vectors, `dy`
/// `N·nb` scales.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn group_q8_0_relaxed<const G: usize, const N: usize>(
    nb: usize,
    p: [*const u8; G],
    ys: &[v128],
    dy: &[f32],
) -> [[[f32; GROUP]; N]; G] {
    let yp = ys.as_ptr();
    let dyp = dy.as_ptr();
    let [mag, bias, m14, sign, _] = SCALE_KEPT.read();
    let k = [mag, bias, m14, sign];
    blocks::<G, N>(nb, |t, acc| {
        for (p, acc) in p.iter().zip(acc.iter_mut()) {
            let blk = p.add(t * 136);
            let sc = f16x4_finite(blk, &k);
            for (j, acc) in acc.iter_mut().enumerate() {
                let y = yp.add(4 * (t * N + j));
                let (alo, ahi, slo, shi) = (*y, *y.add(1), *y.add(2), *y.add(3));
                let v: [v128; GROUP] = core::array::from_fn(|r| {
                    let q = blk.add(8 + 32 * r);
                    let (lo, hi) = (v128_load(q as *const v128), v128_load(q.add(16) as *const v128));
                    let (lo, hi) = (i8x16_sub(v128_xor(lo, slo), slo), i8x16_sub(v128_xor(hi, shi), shi));
                    i32x4_relaxed_dot_i8x16_i7x16_add(
                        hi,
                        ahi,
                        i32x4_relaxed_dot_i8x16_i7x16_add(lo, alo, i32x4_splat(0)),
                    )
                });
                let s = f32x4_convert_i32x4(transpose_sum(&v));
                *acc = f32x4_add(*acc, f32x4_mul(s, f32x4_mul(sc, f32x4_splat(*dyp.add(t * N + j)))));
            }
        }
    })
}

/// Q8_0 where the relaxed dot multiplies u8 by i8 exactly ([`super::u8_dot_exact`]: AVX-VNNI's
/// `vpdpbusd` under V8): Σx·y = Σ(x + 128)·y − 128·Σy, the weights made unsigned by one xor
/// (the dot's u8 operand), b's quants as they are (its i8 operand; -128 included), and each
/// row's first dot starting from `−128·Σy` in lane 0 (the lanes' sum, which `transpose_sum`
/// takes, is then exact). Per 16 weights a load, a xor and a dot, against the sign trick's
/// load, xor, sub and dot and b's signs loaded besides; the same exact block sums, so the same
/// float steps and bits as [`group_q8_0_relaxed`].
///
/// # Safety
/// each `p` points at a group of `nb` blocks (136 bytes each); `yc` holds `3·N·nb` vectors, `dy`
/// `N·nb` scales.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
unsafe fn group_q8_0_u8<const G: usize, const N: usize>(
    nb: usize,
    p: [*const u8; G],
    yc: &[v128],
    dy: &[f32],
) -> [[[f32; GROUP]; N]; G] {
    let yp = yc.as_ptr();
    let dyp = dy.as_ptr();
    let [mag, bias, m14, sign, top] = SCALE_KEPT.read();
    let k = [mag, bias, m14, sign];
    blocks::<G, N>(nb, |t, acc| {
        for (p, acc) in p.iter().zip(acc.iter_mut()) {
            let blk = p.add(t * 136);
            let sc = f16x4_finite(blk, &k);
            for (j, acc) in acc.iter_mut().enumerate() {
                let y = yp.add(3 * (t * N + j));
                let (ylo, yhi, corr) = (*y, *y.add(1), *y.add(2));
                let v: [v128; GROUP] = core::array::from_fn(|r| {
                    let q = blk.add(8 + 32 * r);
                    let lo = v128_xor(v128_load(q as *const v128), top);
                    let hi = v128_xor(v128_load(q.add(16) as *const v128), top);
                    i32x4_relaxed_dot_i8x16_i7x16_add(yhi, hi, i32x4_relaxed_dot_i8x16_i7x16_add(ylo, lo, corr))
                });
                let s = f32x4_convert_i32x4(transpose_sum(&v));
                *acc = f32x4_add(*acc, f32x4_mul(s, f32x4_mul(sc, f32x4_splat(*dyp.add(t * N + j)))));
            }
        }
    })
}
