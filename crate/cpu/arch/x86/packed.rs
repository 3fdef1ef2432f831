//! AVX2 + VNNI kernels for Q8_0 and Q4_0 weights repacked at load into 8-row groups
//! ([`crate::cpu::arch::repack`], x86's layout: per block the 8 rows' f16 scales, then 4
//! quant bytes of each row in turn). One 32-byte load holds 4 quants of each of the 8 rows
//! (Q4_0: 4 bytes, the low nibbles elements 4c..4c+4, the high ones 16 + 4c..), so
//! `vpdpbusd` against 4 activations broadcast to every lane adds 8 rows' partial sums in 8
//! lanes: after 8 of them a block's 8 exact sums lie in one register, lanes = rows, with no
//! horizontal add (the plain layout needs one transpose-add per 8 blocks per row).
//!
//! The products are unsigned × signed as in `gemm_rows_vnni`: Q8_0 weights made unsigned
//! (`x ^ 0x80` = x + 128), Q4_0's nibbles unsigned already (q + 8), the offset taken out
//! through the block sums of b. The float steps are the scalar's per row, one row per lane:
//! `acc[t % 8] += Σ·(dx·dy)`, then `reduce8`, so every result has `vec_dot`'s bits.

use core::arch::x86_64::*;

use super::super::kernel::{GemmArgs, PackedKernel, PromptGemm};
use super::{dpbusd, load256};
use crate::types::GgmlType;

/// Rows per group.
const R: usize = 8;

/// Bytes per block of a group (8 rows' blocks: Q4_0's 18 bytes, Q8_0's 34), and where its
/// quants start (after the 8 rows' f16 scales).
pub(super) const fn legacy_block(q4: bool) -> usize {
    R * if q4 { 18 } else { 34 }
}
pub(super) const LEGACY_QS: usize = 2 * R;
/// The offset `vpdpbusd`'s unsigned weights carry, as a shift: Σ (u - 2^s)·y = Σ u·y - (Σy << s).
pub(super) const fn legacy_shift(q4: bool) -> i32 {
    if q4 {
        3
    } else {
        7
    }
}

/// Per [`super::Vnni`] form with `vpdpbusd` (VEX, EVEX); the plain AVX2 table has none, so
/// on such CPUs Q8_0 and Q4_0 weights keep ggml's layout. A decode call takes up to
/// [`DECODE_COLS`] rows of b (several sequences a step), each group block loaded (and Q4_0's
/// nibbles split) once for all of them.
pub(super) static PACKED_Q8_0: [PackedKernel; 2] =
    [packed::<false, false>(&PROMPT[0]), packed::<true, false>(&PROMPT[1])];
pub(super) static PACKED_Q4_0: [PackedKernel; 2] =
    [packed::<false, true>(&PROMPT_Q4_0[0]), packed::<true, true>(&PROMPT_Q4_0[1])];
static PROMPT: [PromptGemm; 2] = [prompt_entry::<false, false>(), prompt_entry::<true, false>()];
static PROMPT_Q4_0: [PromptGemm; 2] = [prompt_entry::<false, true>(), prompt_entry::<true, true>()];

/// The kernels' name for the `vpdpbusd` form (`EVEX`: AVX512-VNNI's, else AVX-VNNI's).
const fn name(evex: bool) -> &'static str {
    if evex {
        "avx2 8-row groups (avx512-vnni vpdpbusd)"
    } else {
        "avx2 8-row groups (avx-vnni vpdpbusd)"
    }
}

// SAFETY of the closures below: the tables holding them are handed out only where AVX2, F16C
// and the `vpdpbusd` form were detected (`traits::Isa::table`); `gemm_packed` and
// `gemm_with` checked the rows and sized `cols`.

/// The entry of Q8_0 (`Q4` false) or Q4_0 for one `vpdpbusd` form.
const fn packed<const EVEX: bool, const Q4: bool>(prompt: &'static PromptGemm) -> PackedKernel {
    PackedKernel {
        name: name(EVEX),
        decode: |g, c| unsafe { decode_cols::<EVEX, Q4>(g, c) },
        wants_sums: true,
        cols: DECODE_COLS,
        prompt: Some(prompt),
    }
}

/// [`packed`]'s prompt kernel.
const fn prompt_entry<const EVEX: bool, const Q4: bool>() -> PromptGemm {
    PromptGemm {
        name: name(EVEX),
        rows: |g, c| unsafe { prompt::<EVEX, Q4>(g, c) },
        needs_plain: false,
        wants_sums: true,
        chunk: crate::cpu::arch::L1_CHUNK,
    }
}

/// The 8 rows' quants of one block (at `q`), unsigned, as 8 vectors: vector c holds each
/// row's elements 4c..4c+4 (Q8_0: 256 bytes made unsigned; Q4_0: 128 bytes of nibbles,
/// vector c < 4 the low nibbles of load c, c ≥ 4 the high nibbles of load c - 4).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn weights<const Q4: bool>(q: *const u8) -> [__m256i; R] {
    if Q4 {
        let m4 = _mm256_set1_epi8(0x0F);
        let w: [__m256i; 4] = core::array::from_fn(|c| load256(q.add(32 * c)));
        core::array::from_fn(|c| {
            if c < 4 {
                _mm256_and_si256(w[c], m4)
            } else {
                _mm256_and_si256(_mm256_srli_epi16::<4>(w[c - 4]), m4)
            }
        })
    } else {
        let flip = _mm256_set1_epi8(-128);
        core::array::from_fn(|c| _mm256_xor_si256(load256(q.add(32 * c)), flip))
    }
}

/// Lane r: `off` + Σ u_r·y over the block (`y` its 32 quants, u_r row r's unsigned quants;
/// `off` -Σy shifted by the weights' offset, [`offsets`]): row r's exact block sum. One
/// chain of `vpdpbusd` from the offset (a decode step has a block's chains of every row of
/// b and the blocks after it to overlap; two chains cost an add and a subtract a block
/// more for each row of b).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn block_sums<const EVEX: bool>(w: &[__m256i; R], y: *const u8, off: *const i32) -> __m256i {
    let bc = |c: usize| _mm256_set1_epi32((y.add(4 * c) as *const i32).read_unaligned());
    let mut s = _mm256_set1_epi32(*off);
    for (c, w) in w.iter().enumerate() {
        s = dpbusd::<EVEX>(s, *w, bc(c));
    }
    s
}

/// `-(Σy << shift)` per block of each row of b (`cols.ysum`, `nbp` apart): what
/// [`block_sums`] starts from, one broadcast load per block and row of b.
pub(super) fn offsets(ysum: &[i32], shift: i32) -> alloc::vec::Vec<i32> {
    ysum.iter().map(|&s| -(s << shift)).collect()
}

/// The 8 rows' scales of a block (16 bytes at `p`) as f32.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn scales(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// `acc + s·(dx·dy)`, dx the 8 rows' scales ([`scales`]).
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn add_block(acc: __m256, s: __m256i, dx: __m256, dy: f32) -> __m256 {
    _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dx, _mm256_set1_ps(dy))))
}

/// How far ahead of the block it reads a decode step asks for the weights it streams
/// from memory, where the CPU gains by it ([`crate::cpu::features::CpuFeatures::decode_prefetch`]).
/// The hardware prefetchers alone left one core at ~19 GB/s of its ~28 in a 124M Q4_K_M
/// decode step; 16 KiB ahead took it from ~188 to ~215 tok/s (Zen 5, 2026-12-02, 1 thread;
/// 4–32 KiB all helped). On Zen 4 it halved the kernels' rate from memory (Q6_K ~24 → ~12
/// GB/s, `GGWEB_BENCH_PACKED=1` in `examples/kernel_bench`). Prefetches past the end fault nowhere.
pub(super) const PREFETCH: usize = 16 * 1024;

/// Prefetches the `len` bytes [`PREFETCH`] past `blk`, a cache line at a time, if `on`
/// (read once per call; the branch is the same for every block).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn prefetch(on: bool, blk: *const u8, len: usize) {
    if !on {
        return;
    }
    for l in (0..len).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH + l) as *const i8);
    }
}

/// Whether this machine's decode steps prefetch (see [`PREFETCH`]).
#[inline]
pub(super) fn prefetching() -> bool {
    crate::cpu::features::detect().decode_prefetch
}

/// `reduce8` per lane over the 8 accumulators, stored at `out` (8 f32).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store_reduced(a: &[__m256], out: *mut f32) {
    let r = _mm256_add_ps(
        _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
        _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])),
    );
    _mm256_storeu_ps(out, r)
}

/// The most rows of b one packed decode call takes ([`PackedKernel::cols`]): a
/// decode step of up to 4 sequences streams each group block from memory once and unpacks
/// it once for all (Q4_K: ~6% more GB/s from memory than the prompt kernel for 4 rows of b,
/// `GGWEB_NO_ZMM=1`, Intel Xeon with AVX-512, 2026-12-06).
pub(super) const DECODE_COLS: usize = 4;

/// [`decode`] on `cols.plain.len()` (1..=[`DECODE_COLS`]) rows of b.
///
/// # Safety
/// As for [`decode`].
#[target_feature(enable = "avx2,f16c")]
unsafe fn decode_cols<const EVEX: bool, const Q4: bool>(g: &GemmArgs, c: &mut [f32]) -> bool {
    match g.cols.plain.len() {
        1 => decode::<EVEX, Q4, 1>(g, c),
        2 => decode::<EVEX, Q4, 2>(g, c),
        3 => decode::<EVEX, Q4, 3>(g, c),
        4 => decode::<EVEX, Q4, 4>(g, c),
        n => panic!("packed decode: {n} rows of b (at most {DECODE_COLS})"),
    }
}

/// The [`PackedKernel::decode`] of Q8_0 (`Q4` false) and Q4_0: `ng` groups in address order
/// against `M` rows of b `ldb` bytes apart, each group block loaded (and Q4_0's nibbles
/// split) once for the M; row j of b's 8 accumulators per lane, `c[j·ldc + R·g..]`.
///
/// # Safety
/// AVX2, F16C and the `vpdpbusd` form `EVEX` names must be available.
#[target_feature(enable = "avx2,f16c")]
unsafe fn decode<const EVEX: bool, const Q4: bool, const M: usize>(g: &GemmArgs, c: &mut [f32]) -> bool {
    let GemmArgs { ty, nb, m, a, b, ldb, cols, ldc, .. } = *g;
    let ng = m / R;
    assert_eq!(ty, if Q4 { GgmlType::Q4_0 } else { GgmlType::Q8_0 }, "packed decode");
    let (gb, shift, nbp) = (legacy_block(Q4), legacy_shift(Q4), cols.nbp);
    let gs = nb * gb;
    assert!(M > 0 && cols.plain.len() == M && a.len() >= ng * gs && b.len() >= (M - 1) * ldb + nb * 34);
    assert!(
        c.len() >= (M - 1) * ldc + R * ng && cols.dy.len() >= (M - 1) * nbp + nb && cols.ysum.len() >= cols.dy.len()
    );
    let off = offsets(&cols.ysum[..(M - 1) * nbp + nb], shift);
    let (y, dy, ys) = (b.as_ptr(), cols.dy.as_ptr(), off.as_ptr());
    let pf = prefetching();
    for g in 0..ng {
        let p = a.as_ptr().add(g * gs);
        let mut acc = [[_mm256_setzero_ps(); 8]; M];
        // Block t into accumulator u (= t % 8) of each row of b.
        let step = |t: usize, u: usize, acc: &mut [[__m256; 8]; M]| {
            let blk = p.add(t * gb);
            prefetch(pf, blk, gb);
            let (w, dx) = (weights::<Q4>(blk.add(LEGACY_QS)), scales(blk));
            for (j, acc) in acc.iter_mut().enumerate() {
                let o = j * nbp + t;
                let s = block_sums::<EVEX>(&w, y.add(j * ldb + t * 34 + 2), ys.add(o));
                acc[u] = add_block(acc[u], s, dx, *dy.add(o));
            }
        };
        let mut t = 0;
        while t + 8 <= nb {
            for u in 0..8 {
                step(t + u, u, &mut acc);
            }
            t += 8;
        }
        for t in t..nb {
            step(t, t % 8, &mut acc);
        }
        for (j, acc) in acc.iter().enumerate() {
            store_reduced(acc, c.as_mut_ptr().add(j * ldc + R * g));
        }
    }
    true
}

/// The prompt kernel on whole groups: per group and block, the 8 rows' quants are loaded
/// (and Q4_0's nibbles split) once into registers for every row of b in the chunk; each row
/// of b keeps its 8 accumulators (lanes = rows of a) in a small buffer.
///
/// # Safety
/// As for [`decode`]; `m` is a multiple of 8 rows of `lda` bytes, groups `8·lda` apart.
#[target_feature(enable = "avx2,f16c")]
unsafe fn prompt<const EVEX: bool, const Q4: bool>(g: &GemmArgs, c: &mut [f32]) {
    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
    let n = cols.plain.len();
    let (nbp, gb, shift) = (cols.nbp, legacy_block(Q4), legacy_shift(Q4));
    let want = if Q4 { GgmlType::Q4_0 } else { GgmlType::Q8_0 };
    assert!(ty == want && m.is_multiple_of(R) && lda == nb * gb / R && !cols.plain.contains(&true));
    assert!(a.len() >= m * lda && c.len() >= (n - 1) * ldc + m);
    let off = offsets(&cols.ysum[..(n - 1) * nbp + nb], shift);
    let mut acc = alloc::vec![_mm256_setzero_ps(); 8 * n];
    for g in 0..m / R {
        let p = a.as_ptr().add(g * R * lda);
        acc.fill(_mm256_setzero_ps());
        for t in 0..nb {
            let blk = p.add(t * gb);
            let (w, dx) = (weights::<Q4>(blk.add(LEGACY_QS)), scales(blk));
            for j in 0..n {
                let y = b.as_ptr().add(j * ldb + t * 34 + 2);
                let s = block_sums::<EVEX>(&w, y, off.as_ptr().add(j * nbp + t));
                let a = &mut acc[8 * j + t % 8];
                *a = add_block(*a, s, dx, cols.dy[j * nbp + t]);
            }
        }
        for j in 0..n {
            store_reduced(&acc[8 * j..8 * j + 8], c.as_mut_ptr().add(j * ldc + R * g));
        }
    }
}

// Q4_K in 8-row groups (`repack::layout`): per block the 8 rows' d and dmin (16 bytes
// each), byte k of their 12 scale bytes at 32 + 8k, then their nibbles 4 bytes of each row
// in turn. Lane r of a nibble vector's low halves holds 4 elements of sub-block 2c of row
// r, its high halves the same 4 of sub-block 2c + 1, so `vpdpbusd` against the activations
// broadcast gives each sub-block's exact sum per row in 8 lanes; the 6-bit scales and
// mins are decoded for the 8 rows at once. Per block the float steps are `q4_k_block`'s.
k_kernels!(PACKED_Q4_K, PROMPT_Q4_K, Q4_K, 144, cols: DECODE_COLS, decode: (k4_scales, q4_k_blocks), prompt: (k4_scales, q4_k_block));

/// The tables' entries for a K-quant (VEX and EVEX forms): the type, its block size, the most
/// rows of b a decode call takes (`cols`, at most [`DECODE_COLS`]), and for
/// a decode step and a prompt each what `prep(blk)` takes from a group block once (for every
/// row of b) and the per-block kernel `block::<EVEX>(blk, &prep, y)`.
macro_rules! k_kernels {
    ($packed:ident, $prompt:ident, $ty:ident, $bs:literal, cols: $cols:expr,
     decode: ($dprep:ident, $dblock:ident), prompt: ($pprep:ident, $pblock:ident)) => {
        pub(super) static $packed: [PackedKernel; 2] = [
            PackedKernel {
                name: "avx2 8-row groups (avx-vnni vpdpbusd)",
                decode: |g, c| unsafe { k_decode_cols!(g, c, $ty, $bs, $dprep, $dblock, false) },
                wants_sums: false,
                cols: $cols,
                prompt: Some(&$prompt[0]),
            },
            PackedKernel {
                name: "avx2 8-row groups (avx512-vnni vpdpbusd)",
                decode: |g, c| unsafe { k_decode_cols!(g, c, $ty, $bs, $dprep, $dblock, true) },
                wants_sums: false,
                cols: $cols,
                prompt: Some(&$prompt[1]),
            },
        ];
        static $prompt: [PromptGemm; 2] = [
            PromptGemm {
                name: "avx2 8-row groups (avx-vnni vpdpbusd)",
                rows: |g, c| unsafe {
                    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
                    assert!(ty == GgmlType::$ty && lda == nb * $bs, "packed prompt");
                    let n = cols.plain.len();
                    k_prompt(nb, m, lda, a, b, ldb, n, c, ldc, |p| $pprep(p), |p, x, y| $pblock::<false>(p, x, y))
                },
                needs_plain: false,
                wants_sums: false,
                chunk: crate::cpu::arch::L1_CHUNK,
            },
            PromptGemm {
                name: "avx2 8-row groups (avx512-vnni vpdpbusd)",
                rows: |g, c| unsafe {
                    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
                    assert!(ty == GgmlType::$ty && lda == nb * $bs, "packed prompt");
                    let n = cols.plain.len();
                    k_prompt(nb, m, lda, a, b, ldb, n, c, ldc, |p| $pprep(p), |p, x, y| $pblock::<true>(p, x, y))
                },
                needs_plain: false,
                wants_sums: false,
                chunk: crate::cpu::arch::L1_CHUNK,
            },
        ];
    };
}
use k_kernels;

/// A K-quant [`PackedKernel::decode`] on `cols.plain.len()` (1..=[`DECODE_COLS`]) rows of b:
/// [`k_decode`] with `block::<EVEX, M>` for that many.
macro_rules! k_decode_cols {
    ($g:ident, $c:ident, $ty:ident, $bs:literal, $prep:ident, $block:ident, $evex:literal) => {{
        let GemmArgs { ty, nb, m, a, b, ldb, cols, ldc, .. } = *$g;
        assert_eq!(ty, GgmlType::$ty, "packed decode");
        let (ng, gb) = (m / R, R * $bs);
        match cols.plain.len() {
            1 => k_decode::<_, 1>(nb, ng, gb, a, b, ldb, $c, ldc, |p| $prep(p), |p, x, y| $block::<$evex, 1>(p, x, y)),
            2 => k_decode::<_, 2>(nb, ng, gb, a, b, ldb, $c, ldc, |p| $prep(p), |p, x, y| $block::<$evex, 2>(p, x, y)),
            3 => k_decode::<_, 3>(nb, ng, gb, a, b, ldb, $c, ldc, |p| $prep(p), |p, x, y| $block::<$evex, 3>(p, x, y)),
            4 => k_decode::<_, 4>(nb, ng, gb, a, b, ldb, $c, ldc, |p| $prep(p), |p, x, y| $block::<$evex, 4>(p, x, y)),
            n => panic!("packed decode: {n} rows of b (at most {DECODE_COLS})"),
        }
    }};
}
use k_decode_cols;

/// A K-quant decode step: `ng` groups of `nb` blocks (`gb` bytes each) in address order
/// against `M` Q8_K rows `ldb` bytes apart; `block(p, &prep(p), y)` is a block's contribution
/// to each of them, lane r = row r, added into that row of b's `acc[t % 8]` as the scalar
/// does, then `reduce8` per lane into `c[j·ldc + R·g..]`. Each group block is read from
/// memory (and unpacked) once for the M rows of b.
///
/// # Safety
/// AVX2 and F16C (and what `block` needs) must be available.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn k_decode<P, const M: usize>(
    nb: usize,
    ng: usize,
    gb: usize,
    a: &[u8],
    b: &[u8],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    prep: impl Fn(*const u8) -> P,
    block: impl Fn(*const u8, &P, [*const u8; M]) -> [__m256; M],
) -> bool {
    assert!(M > 0 && a.len() >= ng * nb * gb && b.len() >= (M - 1) * ldb + nb * Y_SIZE);
    assert!(c.len() >= (M - 1) * ldc + R * ng);
    let pf = prefetching();
    for g in 0..ng {
        let p = a.as_ptr().add(g * nb * gb);
        let mut acc = [[_mm256_setzero_ps(); 8]; M];
        for t in 0..nb {
            let blk = p.add(t * gb);
            prefetch(pf, blk, gb);
            let r = block(blk, &prep(blk), core::array::from_fn(|j| b.as_ptr().add(j * ldb + t * Y_SIZE)));
            for (acc, r) in acc.iter_mut().zip(r) {
                acc[t % 8] = _mm256_add_ps(acc[t % 8], r);
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            store_reduced(acc, c.as_mut_ptr().add(j * ldc + R * g));
        }
    }
    true
}

/// A K-quant prompt on whole groups (`m` rows of `lda` bytes): `prep` once per group block
/// for every row of b; per row of b, 8 accumulators (lanes = rows of a) in a small buffer.
///
/// # Safety
/// As for [`k_decode`]; `n` rows of b `ldb` bytes apart.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn k_prompt<P>(
    nb: usize,
    m: usize,
    lda: usize,
    a: &[u8],
    b: &[u8],
    ldb: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    prep: impl Fn(*const u8) -> P,
    block: impl Fn(*const u8, &P, *const u8) -> __m256,
) {
    let gb = R * lda / nb.max(1);
    assert!(m.is_multiple_of(R) && n > 0 && a.len() >= m * lda);
    assert!(b.len() >= (n - 1) * ldb + nb * Y_SIZE && c.len() >= (n - 1) * ldc + m);
    let mut acc = alloc::vec![_mm256_setzero_ps(); 8 * n];
    for g in 0..m / R {
        let p = a.as_ptr().add(g * R * lda);
        acc.fill(_mm256_setzero_ps());
        for t in 0..nb {
            let blk = p.add(t * gb);
            let x = prep(blk);
            for j in 0..n {
                let a = &mut acc[8 * j + t % 8];
                *a = _mm256_add_ps(*a, block(blk, &x, b.as_ptr().add(j * ldb + t * Y_SIZE)));
            }
        }
        for j in 0..n {
            store_reduced(&acc[8 * j..8 * j + 8], c.as_mut_ptr().add(j * ldc + R * g));
        }
    }
}

/// Where a Q4_K group block's parts start, and Q8_K's size and parts.
const K4_SCALES: usize = 32;
const K4_QS: usize = 128;
const Y_SIZE: usize = 292;
const Y_QS: usize = 4;
const Y_BSUMS: usize = 260;

/// The 8 rows' sub-block scales and mins of one block (`scale_min_k4`), as i32 lanes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn k4_scales(p: *const u8) -> ([__m256i; 8], [__m256i; 8]) {
    let q: [__m256i; 12] =
        core::array::from_fn(|k| _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(K4_SCALES + 8 * k) as *const __m128i)));
    let (m63, m15) = (_mm256_set1_epi32(63), _mm256_set1_epi32(15));
    let top = |v: __m256i| _mm256_slli_epi32::<4>(_mm256_srli_epi32::<6>(v));
    let sc = core::array::from_fn(|j| {
        if j < 4 {
            _mm256_and_si256(q[j], m63)
        } else {
            _mm256_or_si256(_mm256_and_si256(q[j + 4], m15), top(q[j - 4]))
        }
    });
    let mn = core::array::from_fn(|j| {
        if j < 4 {
            _mm256_and_si256(q[j + 4], m63)
        } else {
            _mm256_or_si256(_mm256_srli_epi32::<4>(q[j + 4]), top(q[j]))
        }
    });
    (sc, mn)
}

/// One Q4_K group block (at `p`) against one Q8_K block (at `y`): lane r is row r's
/// `q4_k_block`, the exact `isum` and `summ` then the scalar's float steps.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn q4_k_block<const EVEX: bool>(p: *const u8, scales: &([__m256i; 8], [__m256i; 8]), y: *const u8) -> __m256 {
    let [r] = q4_k_blocks::<EVEX, 1>(p, scales, [y]);
    r
}

/// [`q4_k_block`] against `M` Q8_K blocks: the nibbles are loaded and split once for all M.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn q4_k_blocks<const EVEX: bool, const M: usize>(
    p: *const u8,
    scales: &([__m256i; 8], [__m256i; 8]),
    y: [*const u8; M],
) -> [__m256; M] {
    let (sc, mn) = scales;
    let m4 = _mm256_set1_epi8(0x0F);
    let bc = |r: usize, o: usize| _mm256_set1_epi32((y[r].add(Y_QS + o) as *const i32).read_unaligned());
    let mut isum = [_mm256_setzero_si256(); M];
    for c in 0..4 {
        let (mut lo, mut hi) = ([_mm256_setzero_si256(); M], [_mm256_setzero_si256(); M]);
        for i in 0..8 {
            let w = load256(p.add(K4_QS + (8 * c + i) * 32));
            let (wl, wh) = (_mm256_and_si256(w, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(w), m4));
            for r in 0..M {
                lo[r] = dpbusd::<EVEX>(lo[r], wl, bc(r, 64 * c + 4 * i));
                hi[r] = dpbusd::<EVEX>(hi[r], wh, bc(r, 64 * c + 32 + 4 * i));
            }
        }
        for r in 0..M {
            isum[r] = _mm256_add_epi32(
                isum[r],
                _mm256_add_epi32(_mm256_mullo_epi32(sc[2 * c], lo[r]), _mm256_mullo_epi32(sc[2 * c + 1], hi[r])),
            );
        }
    }
    let d = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    let dmin = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i));
    core::array::from_fn(|r| {
        let bs = |j: usize| (y[r].add(Y_BSUMS + 2 * j) as *const i16).read_unaligned() as i32;
        let mut summ = _mm256_setzero_si256();
        for (j, m) in mn.iter().enumerate() {
            summ = _mm256_add_epi32(summ, _mm256_mullo_epi32(*m, _mm256_set1_epi32(bs(2 * j) + bs(2 * j + 1))));
        }
        let yd = _mm256_set1_ps((y[r] as *const f32).read_unaligned());
        let (d, dmin) = (_mm256_mul_ps(d, yd), _mm256_mul_ps(dmin, yd));
        _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[r])), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(summ)))
    })
}

// Q6_K in 8-row groups (`repack::layout`): per block the 8 rows' d (16 bytes), byte k of
// their 16 i8 scales at 16 + 8k, then their `ql` and `qh` 4 bytes of each row in turn, in
// the order read here ([`k6_bytes`]).
// Four bytes of `ql` and `qh` give 4 elements in each of 4 sub-blocks of 16 (q + 32, in
// 0..64: unsigned for `vpdpbusd`, the 32 taken out through Q8_K's `bsums`). Per block the
// float steps are `q6_k_block`'s.
k_kernels!(PACKED_Q6_K, PROMPT_Q6_K, Q6_K, 210, cols: 1, decode: (no_prep, k6_block_once), prompt: (k6_unpack, k6_block));

/// Where a Q6_K group block's parts start.
const K6_SCALES: usize = 16;
const K6_QUANTS: usize = 144;

/// The 8 rows' `ql` at 64h + 4i and 64h + 32 + 4i and `qh` at 32h + 4i (96 bytes in a row).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn k6_bytes(p: *const u8, h: usize, i: usize) -> (__m256i, __m256i, __m256i) {
    let q = p.add(K6_QUANTS + (8 * h + i) * 96);
    (load256(q), load256(q.add(32)), load256(q.add(64)))
}

/// The quants + 32 (unsigned, < 64) of 4 elements in each of 4 sub-blocks from 4 bytes of
/// `ql` at two places (`a`, `b`) and of `qh` (`hb`), per row: elements `l`, `l + 32`, `l + 64`,
/// `l + 96` of their half, as `q6_k_signed` takes them.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn k6_quants(a: __m256i, b: __m256i, hb: __m256i) -> [__m256i; 4] {
    let (m0f, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let lo = |v: __m256i| _mm256_and_si256(v, m0f);
    let hi = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m0f);
    [
        _mm256_or_si256(lo(a), _mm256_and_si256(_mm256_slli_epi16::<4>(hb), m30)),
        _mm256_or_si256(lo(b), _mm256_and_si256(_mm256_slli_epi16::<2>(hb), m30)),
        _mm256_or_si256(hi(a), _mm256_and_si256(hb, m30)),
        _mm256_or_si256(hi(b), _mm256_and_si256(_mm256_srli_epi16::<2>(hb), m30)),
    ]
}

/// A Q6_K group block's quants + 32: vector `16·(2h + q) + 4k + j` holds, per row, elements
/// `128h + 32k + 16q + 4j ..+4` (sub-block `8h + 2k + q`).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn k6_unpack(p: *const u8) -> [__m256i; 64] {
    let mut u = [_mm256_setzero_si256(); 64];
    for h in 0..2 {
        for i in 0..8 {
            let (a, b, hb) = k6_bytes(p, h, i);
            let at = 16 * (2 * h + i / 4) + i % 4;
            for (k, v) in k6_quants(a, b, hb).into_iter().enumerate() {
                u[at + 4 * k] = v;
            }
        }
    }
    u
}

/// Q6_K's sums of Q8_K block `y`: `s` (lanes = rows) of sub-block `sb` with the 32 taken out,
/// times the 8 rows' scales `sc` of that sub-block ([`k6_scale`]), into `isum`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn k6_add(isum: __m256i, s: __m256i, sc: __m256i, sb: usize, y: *const u8) -> __m256i {
    let bsum = (y.add(Y_BSUMS + 2 * sb) as *const i16).read_unaligned() as i32;
    let s = _mm256_sub_epi32(s, _mm256_set1_epi32(32 * bsum));
    _mm256_add_epi32(isum, _mm256_mullo_epi32(sc, s))
}

/// The 8 rows' i8 scales of sub-block `sb` of the group block at `p`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn k6_scale(p: *const u8, sb: usize) -> __m256i {
    _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(K6_SCALES + 8 * sb) as *const __m128i))
}

/// `q6_k_block`'s float step per lane: `(d·dy)·isum`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn k6_finish(p: *const u8, isum: __m256i, y: *const u8) -> __m256 {
    let yd = _mm256_set1_ps((y as *const f32).read_unaligned());
    let d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)), yd);
    _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum))
}

/// One Q6_K group block (at `p`, quants unpacked in `u`) against one Q8_K block: lane r is
/// row r's `q6_k_block`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn k6_block<const EVEX: bool>(p: *const u8, u: &[__m256i; 64], y: *const u8) -> __m256 {
    let bc = |o: usize| _mm256_set1_epi32((y.add(Y_QS + o) as *const i32).read_unaligned());
    let mut isum = _mm256_setzero_si256();
    for h in 0..2 {
        for q in 0..2 {
            for k in 0..4 {
                let at = 16 * (2 * h + q) + 4 * k;
                let e = 128 * h + 32 * k + 16 * q;
                let s = dpbusd::<EVEX>(_mm256_setzero_si256(), u[at], bc(e));
                let s = dpbusd::<EVEX>(s, u[at + 1], bc(e + 4));
                let s = dpbusd::<EVEX>(s, u[at + 2], bc(e + 8));
                let s = dpbusd::<EVEX>(s, u[at + 3], bc(e + 12));
                let sb = 8 * h + 2 * k + q;
                isum = k6_add(isum, s, k6_scale(p, sb), sb, y);
            }
        }
    }
    k6_finish(p, isum, y)
}

/// [`k6_block`] unpacking as it goes (a decode step meets each block once): per quarter
/// (h, q), 4 bytes of `ql` twice and of `qh` once make 4 elements of 4 sub-blocks. `M` rows
/// of b one after the other (the 4 × M sums would not fit in 16 registers); Q6_K's `cols` is
/// 1: a form sharing each sub-block's vector among 4 rows of b (a quarter a sub-block at a
/// time) ran ~7% slower from memory than the prompt kernel for 4 (`GGWEB_NO_ZMM=1`, Intel
/// Xeon with AVX-512, 2026-12-06).
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn k6_block_once<const EVEX: bool, const M: usize>(p: *const u8, _: &(), y: [*const u8; M]) -> [__m256; M] {
    y.map(|y| k6_block_once1::<EVEX>(p, y))
}

/// [`k6_block_once`] against one Q8_K block.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn k6_block_once1<const EVEX: bool>(p: *const u8, y: *const u8) -> __m256 {
    let bc = |o: usize| _mm256_set1_epi32((y.add(Y_QS + o) as *const i32).read_unaligned());
    let mut isum = _mm256_setzero_si256();
    for h in 0..2 {
        for q in 0..2 {
            let mut s = [_mm256_setzero_si256(); 4];
            for j in 0..4 {
                let i = 4 * q + j;
                let (a, b, hb) = k6_bytes(p, h, i);
                for (k, u) in k6_quants(a, b, hb).into_iter().enumerate() {
                    s[k] = dpbusd::<EVEX>(s[k], u, bc(128 * h + 32 * k + 4 * i));
                }
            }
            for (k, s) in s.into_iter().enumerate() {
                let sb = 8 * h + 2 * k + q;
                isum = k6_add(isum, s, k6_scale(p, sb), sb, y);
            }
        }
    }
    k6_finish(p, isum, y)
}

/// No per-block preparation (a Q6_K decode step unpacks as it goes).
#[inline(always)]
fn no_prep(_: *const u8) {}
