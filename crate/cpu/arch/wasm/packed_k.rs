//! SIMD128 decode kernels for Q4_K and Q6_K weights repacked at load
//! ([`crate::cpu::arch::repack`]): 1 to 4 Q8_K rows of activations (sequences of a decode step)
//! against groups of 4 rows whose blocks lie side by side, each group block's quants unpacked once
//! for all of them, bit for bit `vec_dot`.
//!
//! Q4_K's packed layout (`repack::layout`) puts 4 bytes of each of the 4 rows side by side in
//! every 16-byte vector of quants (vector 8j + c: row r's `qs[32j + 4c..]` at 4r), so each
//! 4-byte group holds 4 consecutive elements of sub-block 2j of one row in its low nibbles
//! and 4 of sub-block 2j + 1 in its high ones, one row per i32 lane, as Q6_K's below: with
//! relaxed SIMD where the relaxed dot is `vpdpbusd` (`u8_dot_exact`), per vector and row of b
//! two `i32x4.relaxed_dot_i8x16_i7x16_add_s` (b's 4 quants at those elements splat as the i8
//! operand, the nibbles 0..15 as the i7 one) sum a sub-block of each row straight into its
//! lane, then one i32 multiply a sub-block by the 4 rows' scales; b is read as it is (no
//! reordering) and the 4 rows need no transpose. Elsewhere (the plain build; relaxed SIMD
//! without AVX-VNNI) the same layout gives i16 pair sums of a row in lanes 2r, 2r + 1 (the
//! relaxed i16 dot, or the nibbles' even and odd bytes times b's pairs), 8 vectors added in
//! i16 (≤ 8·2·15·128), then `i32x4.dot_i16x8_s` by the rows' scales. Both give the scalar's
//! exact `Σ sc·Σ q·y` per row; the mins meet the `bsums` as the scalar's do.
//!
//! Q6_K's packed layout (`repack::q6_k_map`) puts 4 bytes of each of the 4 rows side by side,
//! each 4-byte group 4 consecutive elements of one sub-block (their bits regrouped so that 3
//! of 4 quants take one mask: `repack::q6_k_fuse`), one row per i32 lane: so with relaxed SIMD
//! `i32x4.relaxed_dot_i8x16_i7x16_add_s` (b's 4 quants splat as the i8 operand, the 6-bit
//! quants 0..63 as the i7 one: exact in every lowering; `vpdpbusd` where V8 has AVX-VNNI)
//! sums a sub-block of each row straight into its lane, started at `-32·Σy` of the sub-block,
//! then one i32 multiply by the 4 rows' scales: per 16 weights and row of b one dot, no
//! reordering of b, no horizontal sums. Where that dot is not one instruction (the plain
//! build; relaxed SIMD without AVX-VNNI), the same layout gives i16 pair sums of a row in lanes
//! 2r, 2r + 1 (`i16x8.relaxed_dot_i8x16_i7x16_s`, or the even and odd bytes' i16 products),
//! 2 units added in i16, then `i32x4.dot_i16x8_s` by the rows' scales, and `32·Σ sc·Σy` taken
//! off by pairs of sub-blocks (`q6_k_sub`). Both give `Σ sc·Σ (q - 32)·y`, the scalar's exact
//! integer.
//! The float steps are the scalar's per row, one row a lane:
//! `acc[t % 8] += d·yd·isum (- dmin·yd·summ)`, then `reduce8`.
//!
//! Prompts (from 4 rows of b) put the rows back in ggml's layout once per call
//! ([`unpack_q4_k`], [`unpack_q6_k`]: vector shuffles) for `kquants`' plain tile kernel.
//!
//! Measured: Node 20, relaxed build, GFLOP/s of one decode step, ggml's layout → packed: Q4_K
//! 31-35 → 51-57, Q6_K 24-27 → 33-39 (768×2304, 3072×768, 768×50257). Chromium 156, 1
//! thread, llama.cpp's 124M Q4_K_M: decode 77-82 → 100-103 tok/s, prefill unchanged.

use crate::wasm_arch::*;

use alloc::vec;
use alloc::vec::Vec;

use super::super::kernel::{GemmArgs, PackedKernel, PromptGemm, GROUP};
use super::kquants::{gemm_rows_k, KBlock};
use super::{f16x4_finite, transpose_sum, Kept, F16K};
use crate::quants::blocks::{BlockQ4_K, BlockQ6_K};
use crate::types::GgmlType;

/// Bytes of a Q8_K block: f32 d, 256 quants, 16 i16 sums.
const Y_SIZE: usize = 292;
/// A group's block: 4 rows of 144 (Q4_K) or 210 (Q6_K) bytes.
const GB_Q4_K: usize = GROUP * 144;
const GB_Q6_K: usize = GROUP * 210;

#[cfg(target_feature = "relaxed-simd")]
const NAME: &str = "simd128 4-row k-quant groups (relaxed dot)";
#[cfg(not(target_feature = "relaxed-simd"))]
const NAME: &str = "simd128 4-row k-quant groups";

pub(in crate::cpu::arch) static PACKED_Q4_K: PackedKernel =
    PackedKernel { name: NAME, decode, wants_sums: false, cols: 4, prompt: Some(&PACKED_GEMMS[0]) };
pub(in crate::cpu::arch) static PACKED_Q6_K: PackedKernel =
    PackedKernel { name: NAME, decode, wants_sums: false, cols: 4, prompt: Some(&PACKED_GEMMS[1]) };

#[cfg(target_feature = "relaxed-simd")]
const PACKED_NAME: &str = "simd128 k-quant tiles (4-row groups, relaxed dot)";
#[cfg(not(target_feature = "relaxed-simd"))]
const PACKED_NAME: &str = "simd128 k-quant tiles (4-row groups)";

/// The prompt kernels of Q4_K and Q6_K weights repacked at load (this file's layout): the rows are
/// put back in ggml's layout once per call (vector shuffles), then `kquants`' plain kernel
/// (the same code: tile kernels specialised for the packed rows ran ~14% slower in Chromium).
static PACKED_GEMMS: [PromptGemm; 2] = {
    macro_rules! k_gemm {
        ($X:ty) => {
            PromptGemm {
                name: PACKED_NAME,
                rows: |g, c| {
                    let GemmArgs { ty, nb, m, a, b, ldb, cols, ldc, .. } = *g;
                    gemm_rows_packed::<$X>(ty, nb, m, a, b, ldb, cols.plain.len(), c, ldc)
                },
                needs_plain: false,
                wants_sums: false,
                chunk: crate::cpu::arch::L1_CHUNK,
            }
        };
    }
    [k_gemm!(BlockQ4_K), k_gemm!(BlockQ6_K)]
};

#[allow(clippy::too_many_arguments)]
fn gemm_rows_packed<X: KBlock>(
    ty: GgmlType,
    nb: usize,
    m: usize,
    a: &[u8],
    b: &[u8],
    ldb: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let (xs, gb) = (core::mem::size_of::<X>(), 4 * core::mem::size_of::<X>());
    assert!(matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K) && xs == ty.type_size());
    assert!(m.is_multiple_of(4) && a.len() >= m / 4 * nb * gb);
    // The rows back in ggml's layout (vector shuffles; a few hundred KiB at most, as mul_mat
    // hands out blocks of rows), then the plain kernel: its code, its speed.
    let mut plain = vec![X::zeroed(); m * nb];
    let out = plain.as_mut_ptr() as *mut u8;
    for g in 0..m / 4 {
        for t in 0..nb {
            // SAFETY: block t of group g lies inside a (asserted); rows 4g..4g + 4 of plain
            // hold nb blocks each, block t of each one X.
            unsafe {
                let blk = a.as_ptr().add((g * nb + t) * gb);
                let row = |r: usize| out.add(((4 * g + r) * nb + t) * xs);
                match ty {
                    GgmlType::Q4_K => unpack_q4_k(blk, [row(0), row(1), row(2), row(3)]),
                    _ => unpack_q6_k(blk, [row(0), row(1), row(2), row(3)]),
                }
            }
        }
    }
    gemm_rows_k::<X>(nb, m, bytemuck::cast_slice(&plain), nb * xs, b, ldb, n, c, ldc)
}

/// Vectors per block of b the Q6_K kernel (and the plain Q4_K one) reads besides b itself
/// ([`prep_q6_k`]).
#[cfg(target_feature = "relaxed-simd")]
const YK: usize = 6;
#[cfg(not(target_feature = "relaxed-simd"))]
const YK: usize = 130;
/// Where b's sub-block sums by pairs lie in its YK vectors of a block ([`prep_q6_k`]).
const SUMS: usize = YK - 2;

/// What [`group_q6_k`] (and the plain build's [`group_q4_k`]: its pairs) reads of one row of b
/// besides its quants, per block. Relaxed: the 16
/// sub-blocks' `-32·Σy` as i32 (4 vectors; [`q6_k_sub`]'s dot path). Plain: each 4 quants `(y0,
/// y1, y2, y3)` as i16 `(y0, y2)` 4 times, then `(y1, y3)` 4 times (128 vectors: the pair path's
/// operands, one load each). Both: then the 16 `Σy` as i16, by pairs of sub-blocks (2 vectors,
/// at [`SUMS`]; the pair path's correction). From the quants: the scalar reads no `bsums` for
/// Q6_K.
fn prep_q6_k(nb: usize, b: &[u8]) -> Vec<v128> {
    assert!(b.len() >= nb * Y_SIZE);
    let mut out = alloc::vec![i8x16_splat(0); YK * nb];
    for t in 0..nb {
        let qs = &b[t * Y_SIZE + 4..t * Y_SIZE + 260];
        let sum: [i16; 16] = core::array::from_fn(|s| qs[16 * s..16 * s + 16].iter().map(|&v| v as i8 as i16).sum());
        out[YK * t + SUMS] = super::load(&sum[..8]);
        out[YK * t + SUMS + 1] = super::load(&sum[8..]);
        #[cfg(target_feature = "relaxed-simd")]
        {
            let c: [i32; 16] = core::array::from_fn(|s| -32 * sum[s] as i32);
            for q in 0..4 {
                out[YK * t + q] = super::load(&c[4 * q..4 * q + 4]);
            }
        }
        #[cfg(not(target_feature = "relaxed-simd"))]
        for (c, q) in qs.chunks_exact(4).enumerate() {
            let pair = |a: u8, b: u8| {
                i32x4_splat((a as i8 as i16 as u16 as u32 | (b as i8 as i16 as u16 as u32) << 16) as i32)
            };
            out[YK * t + 2 * c] = pair(q[0], q[2]);
            out[YK * t + 2 * c + 1] = pair(q[1], q[3]);
        }
    }
    out
}

/// Q6_K's constants for [`Kept::read`], once per call: 0x3F and 0xC0 in each byte
/// ([`q6_k_quarter`]), 0x00FF in each u16 lane (the plain build's even bytes). As constants V8 14.6 (Node 26, Chromium 156) built each anew at every use inside
/// the group loop (`movq` imm64, `vmovq`, `vpunpcklqdq`): read once, a Q6_K group block of the
/// layout before this one took ~33% fewer CPU ns for one row of b (BENCHMARKS.md, "Several
/// sequences in Chromium: Q6_K's masks read once", 2026-12-07).
static Q6_K_KEPT: Kept<3> = Kept([[0x3F3F_3F3F; 4], [0xC0C0_C0C0; 4], [0x00FF_00FF; 4]]);

/// The plain build's nibble mask (0x000F in each u16 lane), read from memory once per call
/// rather than written as a constant: LLVM puts a `v128.const` at every use, and V8's
/// Turboshaft (Node 26's V8 14.6, as Chromium's) builds such a constant anew at each use inside
/// a loop (`movq`, `vmovq`, `vpunpcklqdq`: 3 instructions, 24 per row of a Q4_K group block),
/// where a value loaded once stays in a register. Per group block, one row of b, counted under
/// Node 26: 1212 → 922 instructions (BENCHMARKS.md, "Several sequences in Chromium: the plain
/// build's Q4_K decode without rebuilt constants", 2026-12-06).
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn nibble_mask() -> v128 {
    #[repr(align(16))]
    struct Mask([u16; 8]);
    static MASK: Mask = Mask([0x000F; 8]);
    // SAFETY: 16 readable bytes, 16-byte aligned.
    unsafe { core::ptr::read_volatile(MASK.0.as_ptr() as *const v128) }
}

/// Q4_K's constants for [`Kept::read`], once per group call: 0x3F, 0x0F and 0x30 in each byte
/// ([`q4_k_scales`]), 0xF0 in each byte (the relaxed dot path's high nibbles, [`q4_k_sub`]),
/// 1 in each i16 lane ([`q8_k_sums32`]). As constants V8 14.6 builds each anew at every use
/// inside the block loop (3 to 4 instructions a use, 6 uses a block for the scales alone), as
/// [`Q6_K_KEPT`] says.
static Q4_K_KEPT: Kept<5> =
    Kept([[0x3F3F_3F3F; 4], [0x0F0F_0F0F; 4], [0x3030_3030; 4], [0xF0F0_F0F0; 4], [0x0001_0001; 4]]);

/// The 4 rows' f16 scales at `p` (8 bytes) as f32 (finite: `repack::pack` checked); `k`:
/// [`super::F16_KEPT`] as read (once per group call).
#[inline(always)]
unsafe fn f16s(p: *const u8, k: &F16K) -> v128 {
    f16x4_finite(p, k)
}

/// How far ahead of a block step [`super::touch_ahead`] reads: 4 group blocks (3.3 KiB), for
/// every number of rows of b. From memory one row's Q6_K decode ran at ~7-8 GB/s against 15-16
/// in cache (relaxed, per CPU second); the loads go once per group step, before the blocks'
/// work (next to each block inside the pair's loop they made the kernel slower).
const AHEAD_Q6_K: usize = 4 * GB_Q6_K;
/// Q4_K's: 6 group blocks (3.4 KiB), for 2 to 4 rows of b only. A 4-sequence Q4_K_M step in
/// Node 26, relaxed, 42.0-43.5 → 44.9-47.0 steps per CPU second (the plain build's kernels are
/// slower than memory at 4 rows: unchanged); one row's step measured no faster with it
/// (BENCHMARKS.md 2026-12-07, branch ra12 and session 30).
const AHEAD_Q4_K: usize = 6 * GB_Q4_K;

/// Runs `step(t, &mut acc[t % 8])` for every block, in order (`acc[t % 8][g][j]`: group g's
/// 4 rows against column j), then each group's and column's 4 rows' `reduce8`.
#[inline(always)]
fn blocks<const G: usize, const N: usize>(
    nb: usize,
    mut step: impl FnMut(usize, &mut [[v128; N]; G]),
) -> [[[f32; GROUP]; N]; G] {
    let mut acc = [[[f32x4_splat(0.0); N]; G]; 8];
    for t in 0..nb {
        step(t, &mut acc[t % 8]);
    }
    core::array::from_fn(|g| {
        core::array::from_fn(|j| {
            let a = |i: usize| acc[i][g][j];
            let r = f32x4_add(
                f32x4_add(f32x4_add(a(0), a(4)), f32x4_add(a(2), a(6))),
                f32x4_add(f32x4_add(a(1), a(5)), f32x4_add(a(3), a(7))),
            );
            let mut out = [0f32; GROUP];
            // SAFETY: 4 f32 of room for one unaligned 16-byte store.
            unsafe { v128_store(out.as_mut_ptr() as *mut v128, r) };
            out
        })
    })
}

/// Q4_K's 4 rows of (scales, mins) from the group block at `blk`: (sc_lo, sc_hi, mn_lo,
/// mn_hi), byte 4r + j = row r's sub-block j (lo) or 4 + j (hi); `k`: [`Q4_K_KEPT`] as read.
#[inline(always)]
unsafe fn q4_k_scales(blk: *const u8, k: &[v128; 5]) -> [v128; 4] {
    let (v0, v1, v2) = (
        v128_load(blk.add(16) as *const v128),
        v128_load(blk.add(32) as *const v128),
        v128_load(blk.add(48) as *const v128),
    );
    let (m63, m0f, m30) = (k[0], k[1], k[2]);
    [
        v128_and(v0, m63),
        v128_or(v128_and(v2, m0f), v128_and(u16x8_shr(v0, 2), m30)),
        v128_and(v1, m63),
        v128_or(v128_and(u16x8_shr(v2, 4), m0f), v128_and(u16x8_shr(v1, 2), m30)),
    ]
}

/// The 4 rows' mins as i16x8, one vector a row (lane j: sub-block j's min): from `s[2]` (byte
/// 4r + j: sub-blocks 0..4) and `s[3]` (4..8), each row's 4 bytes of both side by side.
#[inline(always)]
fn q4_k_row_mins(s: &[v128; 4]) -> [v128; GROUP] {
    let (m01, m23) = (i32x4_shuffle::<0, 4, 1, 5>(s[2], s[3]), i32x4_shuffle::<2, 6, 3, 7>(s[2], s[3]));
    [
        u16x8_extend_low_u8x16(m01),
        u16x8_extend_high_u8x16(m01),
        u16x8_extend_low_u8x16(m23),
        u16x8_extend_high_u8x16(m23),
    ]
}

/// The sums of a Q8_K block's 8 sub-blocks of 32 (lane j: `bsums[2j] + bsums[2j + 1]`, |·| ≤
/// 4096: i16, so the narrowing never saturates) from its 16 `bsums` at `yb + 260`: each pair
/// summed by `i32x4.dot_i16x8_s` with `one` (1 in each i16 lane), then narrowed (3 instructions
/// where the two even/odd shuffles and an add took ~8).
///
/// # Safety
/// `yb` points at a whole Q8_K block.
#[inline(always)]
unsafe fn q8_k_sums32(yb: *const u8, one: v128) -> v128 {
    let (b0, b1) = (v128_load(yb.add(260) as *const v128), v128_load(yb.add(276) as *const v128));
    i16x8_narrow_i32x4(i32x4_dot_i16x8(b0, one), i32x4_dot_i16x8(b1, one))
}

/// Quarter `k` of the Q6_K unit at `q` (3 vectors, [`q6_k_quarters`]' x, y, z): the 6-bit
/// quants of elements `128h + 32k + 4i..` of the 4 rows, 4 bytes a row; `k` a constant once the
/// loops unroll, so quarters 0..3 load one vector and take one mask. Quarter 3 reads the three
/// vectors again (volatile reads: LLVM otherwise keeps the 12 vectors of a sub-block's 4 units
/// from quarters 0..2 for it, more than V8 has registers for, and V8 spills them).
///
/// # Safety
/// `q` points at 48 readable bytes.
#[inline(always)]
unsafe fn q6_k_quarter(q: *const u8, k: usize, km: &[v128; 3]) -> v128 {
    if k < 3 {
        return v128_and(v128_load(q.add(16 * k) as *const v128), km[0]);
    }
    // A v128 at alignment 1 (`read_volatile` needs its type's alignment; units lie 8 bytes off).
    #[repr(C, packed)]
    struct Unaligned(v128);
    let ld = |o: usize| core::ptr::read_volatile(q.add(o) as *const Unaligned).0;
    let mc0 = km[1];
    v128_or(
        v128_or(u16x8_shr(v128_and(ld(0), mc0), 2), u16x8_shr(v128_and(ld(16), mc0), 4)),
        u16x8_shr(v128_and(ld(32), mc0), 6),
    )
}

/// Q6_K's 4 unsigned 6-bit vectors (quarters K = 0..4) from a run's 3 packed vectors
/// (`repack`'s `q6_k_fuse`: u0..u2 in the low 6 bits, u3 in the top 2 bits of each); `k`:
/// [`Q6_K_KEPT`] as read.
#[inline(always)]
fn q6_k_quarters(x: v128, y: v128, z: v128, k: &[v128; 3]) -> [v128; 4] {
    let (m3f, mc0) = (k[0], k[1]);
    let u3 = v128_or(
        v128_or(u16x8_shr(v128_and(x, mc0), 2), u16x8_shr(v128_and(y, mc0), 4)),
        u16x8_shr(v128_and(z, mc0), 6),
    );
    [v128_and(x, m3f), v128_and(y, m3f), v128_and(z, m3f), u3]
}

/// The [`PackedKernel::decode`] of Q4_K and Q6_K: the 1 to 4 rows of b given against the
/// groups: Q4_K's in `decode_row`'s order, Q6_K's two groups half the matrix apart at a time,
/// block by block (`super::packed::in_pairs`: two memory streams).
fn decode(g: &GemmArgs, c: &mut [f32]) -> bool {
    match g.cols.plain.len() {
        1 => decode_n::<1>(g, c),
        2 => decode_n::<2>(g, c),
        3 => decode_n::<3>(g, c),
        4 => decode_n::<4>(g, c),
        n => panic!("packed k-quant decode: {n} rows of b"),
    }
}

/// [`decode`] of N rows of b: each group block's quants loaded and unpacked once, then the N
/// columns' dots.
fn decode_n<const N: usize>(g: &GemmArgs, c: &mut [f32]) -> bool {
    let GemmArgs { ty, nb, m, a, b, ldb, ldc, .. } = *g;
    let ng = m / GROUP;
    let gb = if ty == GgmlType::Q4_K { GB_Q4_K } else { GB_Q6_K };
    assert!(matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K), "packed k-quant decode: {ty}");
    let gs = nb * gb;
    assert!(a.len() >= ng * gs && b.len() >= (N - 1) * ldb + nb * Y_SIZE && c.len() >= (N - 1) * ldc + GROUP * ng);
    let bj = |j: usize| &b[j * ldb..j * ldb + nb * Y_SIZE];
    // Per block t, column j's scale at N·t + j.
    let yd: Vec<f32> = (0..nb * N)
        .map(|i| {
            let (t, j) = (i / N, i % N);
            f32::from_le_bytes(bj(j)[t * Y_SIZE..t * Y_SIZE + 4].try_into().unwrap())
        })
        .collect();
    let yb: [*const u8; N] = core::array::from_fn(|j| bj(j).as_ptr());
    let store = |c: &mut [f32], g: usize, out: [[f32; GROUP]; N]| {
        for (j, out) in out.iter().enumerate() {
            c[j * ldc + GROUP * g..j * ldc + GROUP * (g + 1)].copy_from_slice(out);
        }
    };
    // b's pairs (the plain build) and Q6_K's `-32·Σy` (relaxed): relaxed Q4_K reads b alone.
    let prep = |j: usize| {
        if ty == GgmlType::Q4_K && cfg!(target_feature = "relaxed-simd") {
            Vec::new()
        } else {
            prep_q6_k(nb, bj(j))
        }
    };
    let ys: [Vec<v128>; N] = core::array::from_fn(prep);
    // The weights' last byte, for `touch_ahead`.
    let last = a.as_ptr() as usize + ng * gs - 1;
    let yk: [*const v128; N] = core::array::from_fn(|j| ys[j].as_ptr());
    // The dot path where the relaxed dot is one instruction; the pair path elsewhere, and for
    // Q4_K against 2 rows of b: there its dot path ran at ~60% of the pair path's rate per CPU
    // second in Node 26 (in cache 4.3-6.3 against 7.7-8.5 GB/s; 3 rows' dot path 7.2), where
    // 3 and 4 rows run 6-10% faster on the dot path.
    #[cfg(target_feature = "relaxed-simd")]
    let dot = super::u8_dot_exact() && !(ty == GgmlType::Q4_K && N == 2);
    #[cfg(not(target_feature = "relaxed-simd"))]
    let dot = false;
    if ty == GgmlType::Q4_K {
        // One group at a time: Q4_K's groups two at a time block by block (`in_pairs`) ran
        // 10-15% slower per CPU second in Node 26 (relaxed, 1 and 4 rows of b, in cache and
        // from memory), where `decode_row` already alternates the halves group by group.
        for s in 0..ng {
            let g = super::super::decode_row(s, ng);
            // SAFETY: group g lies inside a; each yb holds nb blocks, each yk YK·nb vectors
            // (plain build), yd N·nb scales (asserted or built above).
            let out = unsafe {
                if dot {
                    group_q4_k::<N, true>(nb, a.as_ptr().add(g * gs), last, yb, yk, &yd)
                } else {
                    group_q4_k::<N, false>(nb, a.as_ptr().add(g * gs), last, yb, yk, &yd)
                }
            };
            store(c, g, out);
        }
    } else {
        // Two groups half the matrix apart, block by block (two memory streams, as Q8_0's),
        // for every N: with 2 or 4 rows of b, one group at a time in `decode_row`'s order
        // read the output matrix ~10% slower per CPU second in Node 26 (relaxed; plain 2-9%),
        // the same in cache.
        let at = |g: usize| a[g * gs..].as_ptr();
        // SAFETY: groups g < ng lie inside a; each yb holds nb blocks, each yk YK·nb vectors,
        // yd N·nb scales (asserted or built above).
        super::packed::in_pairs::<N>(
            ng,
            c,
            ldc,
            |[g0, g1]| unsafe {
                if dot {
                    group_q6_k::<2, N, true>(nb, [at(g0), at(g1)], last, yb, yk, &yd)
                } else {
                    group_q6_k::<2, N, false>(nb, [at(g0), at(g1)], last, yb, yk, &yd)
                }
            },
            |g| unsafe {
                if dot {
                    group_q6_k::<1, N, true>(nb, [at(g)], last, yb, yk, &yd)
                } else {
                    group_q6_k::<1, N, false>(nb, [at(g)], last, yb, yk, &yd)
                }
            },
        );
    }
    true
}

/// # Safety
/// `p` points at a group of `nb` Q4_K blocks; each `b[j]` holds nb Q8_K blocks, each `yk[j]`
/// `YK·nb` vectors ([`prep_q6_k`], plain build); `yd` `N·nb` scales; `last` is the last byte of
/// the weights that hold the group ([`super::touch_ahead`]). DOT: [`q4_k_sub`]'s dot path
/// (relaxed build only).
#[inline(always)]
#[cfg_attr(target_feature = "relaxed-simd", allow(unused_variables))] // yk: the plain build's
unsafe fn group_q4_k<const N: usize, const DOT: bool>(
    nb: usize,
    p: *const u8,
    last: usize,
    b: [*const u8; N],
    yk: [*const v128; N],
    yd: &[f32],
) -> [[f32; GROUP]; N] {
    // The masks read once per call, as Q6_K's (a constant is rebuilt at each use): the nibble
    // masks of the quants (relaxed: 0x0F and 0xF0 in each byte; plain: 0x000F in each u16).
    let k = Q4_K_KEPT.read();
    #[cfg(target_feature = "relaxed-simd")]
    let m = [k[1], k[3]];
    #[cfg(not(target_feature = "relaxed-simd"))]
    let m = [nibble_mask(); 2];
    let fk = super::F16_KEPT.read();
    let [out] = blocks::<1, N>(nb, |t, [acc]| {
        let blk = p.add(t * GB_Q4_K);
        if N > 1 {
            super::touch_ahead(blk as usize, GB_Q4_K, AHEAD_Q4_K, last);
        }
        let s = q4_k_scales(blk, &k);
        // b's quants (relaxed) or their pairs (plain).
        #[cfg(target_feature = "relaxed-simd")]
        let y: [*const u8; N] = core::array::from_fn(|j| b[j].add(t * Y_SIZE + 4));
        #[cfg(not(target_feature = "relaxed-simd"))]
        let y: [*const u8; N] = core::array::from_fn(|j| yk[j].add(YK * t) as *const u8);
        // Lane r: row r's Σ sc·Σ q·y over the block.
        let mut is = [i32x4_splat(0); N];
        q4_k_sub::<N, 0, DOT>(blk, &s, y, m, &mut is);
        q4_k_sub::<N, 1, DOT>(blk, &s, y, m, &mut is);
        q4_k_sub::<N, 2, DOT>(blk, &s, y, m, &mut is);
        q4_k_sub::<N, 3, DOT>(blk, &s, y, m, &mut is);
        // Σ min·Σy per row: each row's 8 mins against the 8 sub-block sums of b, one dot a row
        // and column (the same integers as per sub-block of 16; no per-row shuffle).
        let mins = q4_k_row_mins(&s);
        let summ: [[v128; GROUP]; N] = core::array::from_fn(|j| {
            let bp = q8_k_sums32(b[j].add(t * Y_SIZE), k[4]);
            core::array::from_fn(|r| i32x4_dot_i16x8(mins[r], bp))
        });
        let (d16, dmin16) = (f16s(blk, &fk), f16s(blk.add(8), &fk));
        for (j, acc) in acc.iter_mut().enumerate() {
            let ydv = f32x4_splat(*yd.get_unchecked(t * N + j));
            let (d, dmin) = (f32x4_mul(d16, ydv), f32x4_mul(dmin16, ydv));
            let isum = f32x4_convert_i32x4(is[j]);
            let summ = f32x4_convert_i32x4(transpose_sum(&summ[j]));
            *acc = f32x4_add(*acc, f32x4_sub(f32x4_mul(d, isum), f32x4_mul(dmin, summ)));
        }
    });
    out
}

/// Sub-blocks 2K (low nibbles) and 2K + 1 (high nibbles) of a Q4_K group block at `blk`
/// (vectors 8K..8K + 8 of its quants), added to `is` (lane r: row r's `Σ sc·Σ q·y`) for each
/// row of b (`y[j]`: [`group_q4_k`]'s); `s`: [`q4_k_scales`]. K is a constant so that every
/// offset folds into its load.
/// - DOT (relaxed, where the relaxed dot is `vpdpbusd`: [`super::u8_dot_exact`]): per vector
///   and row of b two `i32x4.relaxed_dot_i8x16_i7x16_add_s` (b's 4 quants splat, the
///   nibbles: the low ones masked, the high ones masked in place, 16 times their value, which
///   the unsigned operand of `vpdpbusd` takes whole), then one i32 multiply per sub-block by
///   the 4 rows' scales (the high sub-block's sum shifted down by 4 first: exact, a multiple
///   of 16).
/// - pairs (the plain build; relaxed elsewhere): i16 lanes 2r, 2r + 1 = row r's 2 pairs of
///   elements (relaxed: `i16x8.relaxed_dot` of b's 4 quants splat and the nibbles; plain: the
///   nibbles of the even and odd bytes times b's pairs), 8 vectors added in i16 (≤
///   8·2·15·128), then `i32x4.dot_i16x8_s` by the rows' scales.
///
/// # Safety
/// As [`group_q4_k`].
#[inline(always)]
unsafe fn q4_k_sub<const N: usize, const K: usize, const DOT: bool>(
    blk: *const u8,
    s: &[v128; 4],
    y: [*const u8; N],
    m: [v128; 2],
    is: &mut [v128; N],
) {
    let m0f = m[0];
    // The scales of sub-blocks 2K and 2K + 1 of the 4 rows as i32 (bytes 2(K % 2), + 1 of
    // row r's 4 in `s[K / 2]`), no mask: shifts left then right.
    let v = s[K / 2];
    let (sl, sh) = if K.is_multiple_of(2) {
        (u32x4_shr(i32x4_shl(v, 24), 24), u32x4_shr(i32x4_shl(v, 16), 24))
    } else {
        (u32x4_shr(i32x4_shl(v, 8), 24), u32x4_shr(v, 24))
    };
    let q = blk.add(64 + 128 * K);
    #[cfg(target_feature = "relaxed-simd")]
    if DOT {
        // Each dot adds into its accumulator (`vpdpbusd`: ~5 cycles of latency): with one row
        // of b, even and odd vectors into two, so that 4 chains overlap; with more, the N
        // columns' 2N chains do (a second set for N = 2 made it slower: spills; 2 rows of b
        // take the pair path, `decode_n`).
        let (mut al, mut ah) = ([i32x4_splat(0); N], [i32x4_splat(0); N]);
        let (mut bl, mut bh) = (i32x4_splat(0), i32x4_splat(0));
        for c in 0..8 {
            let x = v128_load(q.add(16 * c) as *const v128);
            // The high nibbles as 16·q (no shift a vector; one per sub-block below).
            let (lo, hi) = (v128_and(x, m0f), v128_and(x, m[1]));
            for j in 0..N {
                let yl = v128_load32_splat(y[j].add(64 * K + 4 * c) as *const u32);
                let yh = v128_load32_splat(y[j].add(64 * K + 32 + 4 * c) as *const u32);
                if N == 1 && c % 2 == 1 {
                    bl = i32x4_relaxed_dot_i8x16_i7x16_add(yl, lo, bl);
                    bh = i32x4_relaxed_dot_i8x16_i7x16_add(yh, hi, bh);
                } else {
                    al[j] = i32x4_relaxed_dot_i8x16_i7x16_add(yl, lo, al[j]);
                    ah[j] = i32x4_relaxed_dot_i8x16_i7x16_add(yh, hi, ah[j]);
                }
            }
        }
        if N == 1 {
            al[0] = i32x4_add(al[0], bl);
            ah[0] = i32x4_add(ah[0], bh);
        }
        for j in 0..N {
            is[j] = i32x4_add(is[j], i32x4_add(i32x4_mul(al[j], sl), i32x4_mul(i32x4_shr(ah[j], 4), sh)));
        }
        return;
    }
    // Each row's scale in both of its i16 lanes.
    let (sl, sh) = (v128_or(sl, i32x4_shl(sl, 16)), v128_or(sh, i32x4_shl(sh, 16)));
    let (mut al, mut ah) = ([i16x8_splat(0); N], [i16x8_splat(0); N]);
    for c in 0..8 {
        let x = v128_load(q.add(16 * c) as *const v128);
        #[cfg(target_feature = "relaxed-simd")]
        {
            let (lo, hi) = (v128_and(x, m0f), v128_and(u16x8_shr(x, 4), m0f));
            for j in 0..N {
                let yl = v128_load32_splat(y[j].add(64 * K + 4 * c) as *const u32);
                let yh = v128_load32_splat(y[j].add(64 * K + 32 + 4 * c) as *const u32);
                al[j] = i16x8_add(al[j], i16x8_relaxed_dot_i8x16_i7x16(yl, lo));
                ah[j] = i16x8_add(ah[j], i16x8_relaxed_dot_i8x16_i7x16(yh, hi));
            }
        }
        #[cfg(not(target_feature = "relaxed-simd"))]
        {
            // u16 lane L = b0 + 256·b1 (bytes 2L, 2L + 1: row L/2's elements 2(L % 2), + 1): the 4
            // nibbles as i16, once for the N columns: low nibbles (elements 4(16K + c)..) of the
            // even and odd bytes against b's pairs (y0, y2), (y1, y3) of that quad, high ones
            // against the quad 8 further (`prep_q6_k`: quad e's pairs at vectors 2e, 2e + 1).
            let (le, lo) = (v128_and(x, m0f), v128_and(u16x8_shr(x, 8), m0f));
            let (he, ho) = (v128_and(u16x8_shr(x, 4), m0f), u16x8_shr(x, 12));
            for j in 0..N {
                let (pl, ph) = (y[j].add(32 * (16 * K + c)), y[j].add(32 * (16 * K + 8 + c)));
                let (yle, ylo) = (v128_load(pl as *const v128), v128_load(pl.add(16) as *const v128));
                let (yhe, yho) = (v128_load(ph as *const v128), v128_load(ph.add(16) as *const v128));
                al[j] = i16x8_add(al[j], i16x8_add(i16x8_mul(le, yle), i16x8_mul(lo, ylo)));
                ah[j] = i16x8_add(ah[j], i16x8_add(i16x8_mul(he, yhe), i16x8_mul(ho, yho)));
            }
        }
    }
    for j in 0..N {
        is[j] = i32x4_add(is[j], i32x4_add(i32x4_dot_i16x8(al[j], sl), i32x4_dot_i16x8(ah[j], sh)));
    }
}

/// # Safety
/// `p` points at a group of `nb` Q6_K blocks; each `b[j]` holds nb Q8_K blocks, each `yk[j]`
/// `YK·nb` vectors ([`prep_q6_k`]); `yd` `N·nb` scales. DOT: [`q6_k_sub`]'s dot path (relaxed
/// build only).
#[inline(always)]
#[cfg_attr(not(target_feature = "relaxed-simd"), allow(unused_variables))] // b: read as pairs from yk
unsafe fn group_q6_k<const G: usize, const N: usize, const DOT: bool>(
    nb: usize,
    p: [*const u8; G],
    last: usize,
    b: [*const u8; N],
    yk: [*const v128; N],
    yd: &[f32],
) -> [[[f32; GROUP]; N]; G] {
    let km = Q6_K_KEPT.read();
    let fk = super::F16_KEPT.read();
    blocks::<G, N>(nb, |t, acc| {
        for &p in p.iter() {
            super::touch_ahead(p as usize + t * GB_Q6_K, GB_Q6_K, AHEAD_Q6_K, last);
        }
        // Block t of each group in turn (G = 2: two memory streams, [`super::packed::in_pairs`]),
        // each with its own accumulators: the order of one group's steps is the same.
        for (&p, acc) in p.iter().zip(acc.iter_mut()) {
            let blk = p.add(t * GB_Q6_K);
            // Lane r: row r's Σ sc·Σ (q - 32)·y over the block.
            let mut is = [i32x4_splat(0); N];
            // b's quants (relaxed) or their pairs (plain), and what `prep_q6_k` made of the block.
            #[cfg(target_feature = "relaxed-simd")]
            let y = core::array::from_fn(|j| b[j].add(t * Y_SIZE + 4));
            #[cfg(not(target_feature = "relaxed-simd"))]
            let y = core::array::from_fn(|j| yk[j].add(YK * t) as *const u8);
            let c: [*const u8; N] = core::array::from_fn(|j| yk[j].add(YK * t) as *const u8);
            for h in 0..2 {
                q6_k_sub::<N, 0, DOT>(blk, h, y, c, &km, &mut is);
                q6_k_sub::<N, 1, DOT>(blk, h, y, c, &km, &mut is);
                q6_k_sub::<N, 2, DOT>(blk, h, y, c, &km, &mut is);
                q6_k_sub::<N, 3, DOT>(blk, h, y, c, &km, &mut is);
                if !DOT {
                    // The pair path's -32·Σ sc·Σy: per pair of sub-blocks (8h + 2K, + 1), the 4 rows'
                    // scale pairs by b's sum pair.
                    for k in 0..4 {
                        let sp = i16x8_load_extend_i8x8(blk.add(8 + 8 * (4 * h + k)) as *const i8);
                        for j in 0..N {
                            let sy = v128_load32_splat(c[j].add(16 * SUMS + 4 * (4 * h + k)) as *const u32);
                            is[j] = i32x4_sub(is[j], i32x4_shl(i32x4_dot_i16x8(sp, sy), 5));
                        }
                    }
                }
            }
            let d16 = f16s(blk, &fk);
            for (j, acc) in acc.iter_mut().enumerate() {
                let d = f32x4_mul(d16, f32x4_splat(*yd.get_unchecked(t * N + j)));
                *acc = f32x4_add(*acc, f32x4_mul(d, f32x4_convert_i32x4(is[j])));
            }
        }
    })
}

/// Sub-blocks `8h + 2K` and `8h + 2K + 1` (quarter K of half h: units `8h..8h + 4` and `8h +
/// 4..8h + 8`) of a Q6_K group block at `blk`, added to `is` (lane r: row r), for each row of
/// b (`y[j]`, `c[j]`: [`group_q6_k`]'s). K is a constant so that quarters 0..3 take one mask
/// each and every offset folds into its load.
/// - DOT (relaxed, where the relaxed dot is `vpdpbusd`: [`super::u8_dot_exact`]): per unit and
///   row of b one `i32x4.relaxed_dot_i8x16_i7x16_add_s` (b's 4 quants splat, the unsigned
///   quants), a sub-block's 4 started at its `-32·Σy`; then one i32 multiply by the 4 rows'
///   scales.
/// - pairs (the plain build; relaxed elsewhere, where the i32 dot is 3 to 5 instructions):
///   i16 lanes 2r, 2r + 1 = row r's 2 pairs of 4 elements, ≤ 2·63·128 a unit (relaxed:
///   `i16x8.relaxed_dot` of b's 4 quants splat and the unsigned quants; plain: the quants'
///   even and odd bytes times b's pairs), 2 units added in i16, then `i32x4.dot_i16x8_s` by the
///   rows' scales; [`group_q6_k`] then takes 32·Σ sc·Σy off per pair of sub-blocks, one
///   `i32x4.dot_i16x8_s` of the 4 rows' scale pairs by b's sum pair.
///
/// # Safety
/// As [`group_q6_k`].
#[inline(always)]
#[cfg_attr(not(target_feature = "relaxed-simd"), allow(unused_variables))] // c: relaxed only
unsafe fn q6_k_sub<const N: usize, const K: usize, const DOT: bool>(
    blk: *const u8,
    h: usize,
    y: [*const u8; N],
    c: [*const u8; N],
    km: &[v128; 3],
    is: &mut [v128; N],
) {
    // The scales of sub-blocks 8h + 2K and 8h + 2K + 1 of the 4 rows: i16 lanes (r, s % 2).
    let sp = i16x8_load_extend_i8x8(blk.add(8 + 8 * (4 * h + K)) as *const i8);
    for lh in 0..2 {
        let unit = |i: usize| blk.add(72 + 48 * (8 * h + 4 * lh + i));
        // Element 128h + 32K + 4(4lh + i) of b, unit i's first.
        let e = |i: usize| 128 * h + 32 * K + 16 * lh + 4 * i;
        #[cfg(target_feature = "relaxed-simd")]
        if DOT {
            // The 4 rows' scales of the sub-block as i32; its -32·Σy to start from.
            let sc = if lh == 0 { i32x4_shr(i32x4_shl(sp, 16), 16) } else { i32x4_shr(sp, 16) };
            let mut a: [v128; N] =
                core::array::from_fn(|j| v128_load32_splat(c[j].add(4 * (8 * h + 2 * K + lh)) as *const u32));
            for i in 0..4 {
                let u = q6_k_quarter(unit(i), K, km);
                for j in 0..N {
                    let yv = v128_load32_splat(y[j].add(e(i)) as *const u32);
                    a[j] = i32x4_relaxed_dot_i8x16_i7x16_add(yv, u, a[j]);
                }
            }
            for j in 0..N {
                is[j] = i32x4_add(is[j], i32x4_mul(a[j], sc));
            }
            continue;
        }
        // The scales of the sub-block as i16, each row's twice (lanes 2r, 2r + 1).
        let sc = if lh == 0 {
            i16x8_shuffle::<0, 0, 2, 2, 4, 4, 6, 6>(sp, sp)
        } else {
            i16x8_shuffle::<1, 1, 3, 3, 5, 5, 7, 7>(sp, sp)
        };
        for i0 in [0, 2] {
            let mut a = [i16x8_splat(0); N];
            for i in i0..i0 + 2 {
                let u = q6_k_quarter(unit(i), K, km);
                #[cfg(target_feature = "relaxed-simd")]
                for j in 0..N {
                    let yv = v128_load32_splat(y[j].add(e(i)) as *const u32);
                    a[j] = i16x8_add(a[j], i16x8_relaxed_dot_i8x16_i7x16(yv, u));
                }
                #[cfg(not(target_feature = "relaxed-simd"))]
                {
                    // The even and odd bytes (row r's elements 0, 2 and 1, 3 in lanes 2r, 2r + 1),
                    // against b's (y0, y2) and (y1, y3).
                    let (we, wo) = (v128_and(u, km[2]), u16x8_shr(u, 8));
                    for j in 0..N {
                        let p = y[j].add(8 * e(i));
                        let (ye, yo) = (v128_load(p as *const v128), v128_load(p.add(16) as *const v128));
                        a[j] = i16x8_add(a[j], i16x8_add(i16x8_mul(we, ye), i16x8_mul(wo, yo)));
                    }
                }
            }
            for j in 0..N {
                is[j] = i32x4_add(is[j], i32x4_dot_i16x8(a[j], sc));
            }
        }
    }
}

/// The 4 rows of a packed Q4_K group block at `blk` back in ggml's layout (144 bytes at each
/// `out[r]`): `repack::unpack_row` for the prompt kernel, in vector steps: the quants' vectors
/// 4 at a time transposed as 4 × 4 u32 (row r's `qs[16g..16g + 16]`).
///
/// # Safety
/// `blk` points at a whole group block, each `out[r]` at 144 writable bytes.
#[inline(always)]
pub(super) unsafe fn unpack_q4_k(blk: *const u8, out: [*mut u8; GROUP]) {
    for (r, &o) in out.iter().enumerate() {
        core::ptr::copy_nonoverlapping(blk.add(2 * r), o, 2);
        core::ptr::copy_nonoverlapping(blk.add(8 + 2 * r), o.add(2), 2);
        for c in 0..3 {
            core::ptr::copy_nonoverlapping(blk.add(16 + 16 * c + 4 * r), o.add(4 + 4 * c), 4);
        }
    }
    for g in 0..8 {
        let v: [v128; 4] = core::array::from_fn(|i| v128_load(blk.add(64 + 16 * (4 * g + i)) as *const v128));
        let (t0, t1) = (i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]), i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]));
        let (t2, t3) = (i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]), i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]));
        let rows = [
            i64x2_shuffle::<0, 2>(t0, t2),
            i64x2_shuffle::<1, 3>(t0, t2),
            i64x2_shuffle::<0, 2>(t1, t3),
            i64x2_shuffle::<1, 3>(t1, t3),
        ];
        for (r, &o) in out.iter().enumerate() {
            v128_store(o.add(16 + 16 * g) as *mut v128, rows[r]);
        }
    }
}

/// The 4 rows of a packed Q6_K group block back in ggml's layout (210 bytes at each `out[r]`):
/// per half and 16 places of a run, the 4 units' vectors of each kind transposed (row r's 16
/// bytes of that run side by side), then the quants' bits as ggml's.
///
/// # Safety
/// `blk` points at a whole group block, each `out[r]` at 210 writable bytes.
#[inline(always)]
pub(super) unsafe fn unpack_q6_k(blk: *const u8, out: [*mut u8; GROUP]) {
    let km = Q6_K_KEPT.read();
    let (m0f, mf0, m03, m0c, m30, mc0) =
        (u8x16_splat(0x0F), u8x16_splat(0xF0), u8x16_splat(3), u8x16_splat(0x0C), u8x16_splat(0x30), u8x16_splat(0xC0));
    for h in 0..2 {
        for pp in 0..2 {
            // Kind c (ql at 64h + l, ql at 64h + 32 + l, qh at 32h + l) of units 4pp..4pp + 4:
            // row r's bytes for l = 16pp..16pp + 16.
            let rows = |c: usize| -> [v128; GROUP] {
                let v: [v128; 4] =
                    core::array::from_fn(
                        |i| v128_load(blk.add(72 + 48 * (8 * h + 4 * pp + i) + 16 * c) as *const v128),
                    );
                let (t0, t1) = (i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]), i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]));
                let (t2, t3) = (i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]), i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]));
                [
                    i64x2_shuffle::<0, 2>(t0, t2),
                    i64x2_shuffle::<1, 3>(t0, t2),
                    i64x2_shuffle::<0, 2>(t1, t3),
                    i64x2_shuffle::<1, 3>(t1, t3),
                ]
            };
            let (x, y, z) = (rows(0), rows(1), rows(2));
            for (r, &o) in out.iter().enumerate() {
                let u = q6_k_quarters(x[r], y[r], z[r], &km);
                v128_store(
                    o.add(64 * h + 16 * pp) as *mut v128,
                    v128_or(v128_and(u[0], m0f), v128_and(i16x8_shl(u[2], 4), mf0)),
                );
                v128_store(
                    o.add(64 * h + 32 + 16 * pp) as *mut v128,
                    v128_or(v128_and(u[1], m0f), v128_and(i16x8_shl(u[3], 4), mf0)),
                );
                v128_store(
                    o.add(128 + 32 * h + 16 * pp) as *mut v128,
                    v128_or(
                        v128_or(v128_and(u16x8_shr(u[0], 4), m03), v128_and(u16x8_shr(u[1], 2), m0c)),
                        v128_or(v128_and(u[2], m30), v128_and(i16x8_shl(u[3], 2), mc0)),
                    ),
                );
            }
        }
    }
    for (r, &o) in out.iter().enumerate() {
        for q in 0..8 {
            core::ptr::copy_nonoverlapping(blk.add(8 + 8 * q + 2 * r), o.add(192 + 2 * q), 2);
        }
        core::ptr::copy_nonoverlapping(blk.add(2 * r), o.add(208), 2);
    }
}
