//! The kernels of [`super::packed`] on 512-bit registers: the same 8-row groups, two at a
//! time. Lanes 0–7 of a `zmm` are the rows of group g and lanes 8–15 those of group g + 1,
//! so each instruction does the work of two `ymm` ones (on Zen 5, 2026-12-02: ~2.9 G
//! `vpdpbusd zmm` a second against ~3.6 G `ymm`, 1.6× the products). Every lane runs
//! exactly the integer and float steps of its `ymm` twin, so the bits are those of
//! `vec_dot`. A trailing odd group runs as a pair with itself and keeps its low half.
//!
//! These are the prompt kernels. They take four rows of b per pass over a group pair's
//! block: the weights are loaded (and their nibbles split) once for the four, which 32
//! registers can hold. A decode step of one sequence keeps `packed.rs`'s 256-bit kernels: it
//! streams the weights from memory, and reading two groups side by side (two streams a group
//! apart) ran 2–2.5× slower there than one group after the other (Zen 5, 2026-12-02). A
//! decode step of 2 to 4 sequences takes the prompt kernel with the weights
//! prefetched ahead ([`DECODE_COLS`]): on an Intel Xeon with AVX-512 (2026-12-06) it streamed
//! Q4_K at 7.2–8.8 GB/s against 5.9–6.7 without the prefetch and ~7–8 for one sequence.

use core::arch::x86_64::*;

use super::super::kernel::{GemmArgs, PackedKernel, PromptGemm};
use super::packed::{legacy_block, legacy_shift, LEGACY_QS};
use crate::types::GgmlType;

/// Rows per group ([`crate::cpu::arch::repack::group`]) and rows of b per prompt pass.
const R: usize = 8;
const N: usize = 4;

/// Q8_K's size and parts, and where a group block's parts start (as in `packed.rs`).
const Y_SIZE: usize = 292;
const Y_QS: usize = 4;
const Y_BSUMS: usize = 260;
const K4_SCALES: usize = 32;
const K4_QS: usize = 128;
const K6_SCALES: usize = 16;
const K6_QUANTS: usize = 144;

pub(super) static PACKED_Q8_0: PackedKernel = legacy::<false>(&PROMPT_Q8_0);
pub(super) static PACKED_Q4_0: PackedKernel = legacy::<true>(&PROMPT_Q4_0);

/// Q8_0's (`Q4` false) or Q4_0's entry: one row of b takes `packed.rs`'s EVEX decode kernel
/// (see above), 2 to 4 [`DECODE_COLS`] the group-pair kernel with the weights prefetched.
const fn legacy<const Q4: bool>(prompt: &'static PromptGemm) -> PackedKernel {
    PackedKernel {
        name: NAME,
        decode: |g, c| match g.cols.plain.len() {
            1 => (if Q4 { &super::packed::PACKED_Q4_0 } else { &super::packed::PACKED_Q8_0 }[1].decode)(g, c),
            // SAFETY: as for the prompt kernels below.
            _ => unsafe {
                legacy_prompt::<Q4>(g, c, super::packed::prefetching());
                true
            },
        },
        wants_sums: true,
        cols: DECODE_COLS,
        prompt: Some(prompt),
    }
}

pub(super) static PACKED_Q4_K: PackedKernel = PackedKernel {
    name: NAME,
    decode: |g, c| match g.cols.plain.len() {
        1 => (super::packed::PACKED_Q4_K[1].decode)(g, c),
        // SAFETY: as for the prompt kernels below.
        _ => unsafe {
            k_prompt_rows!(g, c, Q4_K, 144, k4_scales, q4_k_block, super::packed::prefetching());
            true
        },
    },
    wants_sums: false,
    cols: DECODE_COLS,
    prompt: Some(&PROMPT_Q4_K),
};
pub(super) static PACKED_Q6_K: PackedKernel = PackedKernel {
    name: NAME,
    decode: |g, c| match g.cols.plain.len() {
        1 => (super::packed::PACKED_Q6_K[1].decode)(g, c),
        // SAFETY: as for the prompt kernels below.
        _ => unsafe {
            k_prompt_rows!(g, c, Q6_K, 210, k6_unpack, k6_block, super::packed::prefetching());
            true
        },
    },
    wants_sums: false,
    cols: DECODE_COLS,
    prompt: Some(&PROMPT_Q6_K),
};
/// Rows of b one decode call takes: one goes to `packed.rs`'s 256-bit kernel
/// (one stream), 2 to 4 (a step of several sequences) to the group-pair prompt kernel with
/// [`super::packed::prefetch`] on, so each group pair's block is read from memory once for
/// all of them and the weights stream ahead of the products.
const DECODE_COLS: usize = N;
const NAME: &str = "avx512 8-row group pairs (avx512-vnni vpdpbusd zmm)";

// SAFETY of the closures above and below: [`super::table_512`] is handed out only where
// AVX-512 F/BW/VL/VNNI, AVX2 and F16C were detected; `gemm_packed` and `gemm_with` checked
// the rows and sized `cols`.
static PROMPT_Q8_0: PromptGemm = PromptGemm {
    name: NAME,
    rows: |g, c| unsafe { legacy_prompt::<false>(g, c, false) },
    needs_plain: false,
    wants_sums: true,
    chunk: crate::cpu::arch::L2_CHUNK,
};
static PROMPT_Q4_0: PromptGemm = PromptGemm {
    name: NAME,
    rows: |g, c| unsafe { legacy_prompt::<true>(g, c, false) },
    needs_plain: false,
    wants_sums: true,
    chunk: crate::cpu::arch::L2_CHUNK,
};
k_prompt_gemm!(PROMPT_Q4_K, Q4_K, 144, k4_scales, q4_k_block);
k_prompt_gemm!(PROMPT_Q6_K, Q6_K, 210, k6_unpack, k6_block);

/// A K-quant's prompt kernel: the type, its block size, `prep(p0, p1)` taken from a group
/// pair's block once for every row of b, and `block::<M>(p0, p1, &prep, y)` for M rows of b.
macro_rules! k_prompt_gemm {
    ($name:ident, $ty:ident, $bs:literal, $prep:ident, $block:ident) => {
        static $name: PromptGemm = PromptGemm {
            name: NAME,
            rows: |g, c| unsafe { k_prompt_rows!(g, c, $ty, $bs, $prep, $block, false) },
            needs_plain: false,
            wants_sums: false,
            chunk: crate::cpu::arch::L2_CHUNK,
        };
    };
}
use k_prompt_gemm;

/// [`k_prompt`] on a call's `GemmArgs` (`g`) for a K-quant, prefetching the weights ahead if
/// `$pf` (a decode step of several sequences; a prompt's chunks meet each block many times).
macro_rules! k_prompt_rows {
    ($g:ident, $c:ident, $ty:ident, $bs:literal, $prep:ident, $block:ident, $pf:expr) => {{
        let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *$g;
        assert!(ty == GgmlType::$ty && lda == nb * $bs, "packed prompt");
        let n = cols.plain.len();
        let (prep, block) = (|p0, p1| $prep(p0, p1), |p0, p1, x: &_, y| $block::<N>(p0, p1, x, y));
        k_prompt(nb, m, lda, a, b, ldb, n, $c, ldc, $pf, prep, block, |p0, p1, x, y| $block::<1>(p0, p1, x, y))
    }};
}
use k_prompt_rows;

/// 32 bytes at `p0` in the low half, at `p1` in the high half.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn pair(p0: *const u8, p1: *const u8) -> __m512i {
    let lo = _mm256_loadu_si256(p0 as *const __m256i);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), _mm256_loadu_si256(p1 as *const __m256i))
}

/// 8 bytes at `p0` and 8 at `p1` (a byte per row of each group).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn pair_bytes(p0: *const u8, p1: *const u8) -> __m128i {
    _mm_unpacklo_epi64(_mm_loadl_epi64(p0 as *const __m128i), _mm_loadl_epi64(p1 as *const __m128i))
}

/// The 16 rows' f16 values at `p0` (8) and `p1` (8), as f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn pair_f16(p0: *const u8, p1: *const u8) -> __m512 {
    let lo = _mm_loadu_si128(p0 as *const __m128i);
    _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), _mm_loadu_si128(p1 as *const __m128i)))
}

/// 4 bytes at `y` in every lane.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn bc(y: *const u8) -> __m512i {
    _mm512_set1_epi32((y as *const i32).read_unaligned())
}

/// `reduce8` per lane over the 8 accumulators: 16 sums for `out` (`both`) or the low 8.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn store_reduced(a: &[__m512], out: *mut f32, both: bool) {
    let r = _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
        _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])),
    );
    _mm512_mask_storeu_ps(out, if both { 0xFFFF } else { 0x00FF }, r)
}

/// Group pairs over `ng` groups `gs` bytes apart: `(p0, p1, both)` per pass, an odd last
/// group paired with itself.
fn pairs(a: *const u8, ng: usize, gs: usize) -> impl Iterator<Item = (usize, *const u8, *const u8, bool)> {
    (0..ng).step_by(2).map(move |g| {
        let both = g + 1 < ng;
        // SAFETY (of the offsets): both are groups inside `a`, which the callers checked.
        let p0 = a.wrapping_add(g * gs);
        (g, p0, if both { p0.wrapping_add(gs) } else { p0 }, both)
    })
}

/// The 16 rows' quants of one block (at `q0` and `q1`), unsigned, as 8 vectors: vector c
/// holds each row's elements 4c..4c+4 (`packed.rs`'s `weights` on both groups).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn legacy_weights<const Q4: bool>(q0: *const u8, q1: *const u8) -> [__m512i; 8] {
    if Q4 {
        let m4 = _mm512_set1_epi8(0x0F);
        let w: [__m512i; 4] = core::array::from_fn(|c| pair(q0.add(32 * c), q1.add(32 * c)));
        core::array::from_fn(|c| {
            if c < 4 {
                _mm512_and_si512(w[c], m4)
            } else {
                _mm512_and_si512(_mm512_srli_epi16::<4>(w[c - 4]), m4)
            }
        })
    } else {
        let flip = _mm512_set1_epi8(-128);
        core::array::from_fn(|c| _mm512_xor_si512(pair(q0.add(32 * c), q1.add(32 * c)), flip))
    }
}

/// Lane r of entry p: `off` + row r's Σ u·y over group pair p's weights `w[p]` against the 32
/// quants at `y` (`off`: `packed.rs`'s `offsets`), its exact block sum: one chain of
/// `vpdpbusd` per pair, as `packed.rs`'s `block_sums`. Each 4 quants of `y` are broadcast
/// into a register once for all P pairs: as a broadcast memory operand `vpdpbusd` ran ~1 a
/// cycle here (Intel Xeon with AVX-512, 2026-12-07), ~1.6 from registers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn legacy_sums<const P: usize>(w: &[[__m512i; 8]; P], y: *const u8, off: *const i32) -> [__m512i; P] {
    let mut s = [_mm512_set1_epi32(*off); P];
    for c in 0..8 {
        let yc = bc(y.add(4 * c));
        for (s, w) in s.iter_mut().zip(w) {
            *s = _mm512_dpbusd_epi32(*s, w[c], yc);
        }
    }
    s
}

/// `acc + s·(dx·dy)`, dx the 16 rows' scales ([`pair_f16`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn legacy_add(acc: __m512, s: __m512i, dx: __m512, dy: __m512) -> __m512 {
    _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dx, dy)))
}

/// Q8_0 (`Q4` false) and Q4_0 on group pairs ([`LegacyPass::run`]), a prompt's two pairs
/// (32 rows) per pass where there are two: ~1.15–1.2× a pair at a time for 128 rows of b
/// (`examples/kernel_bench.rs`, 2026-12-07); `pf`, a decode step of several sequences: a pair
/// per pass, each pair's block asking for the weights [`super::packed::PREFETCH`] bytes past
/// it in both groups (a prompt's chunks meet each block many times).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
unsafe fn legacy_prompt<const Q4: bool>(g: &GemmArgs, c: &mut [f32], pf: bool) {
    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
    let (n, nbp, gb, shift) = (cols.plain.len(), cols.nbp, legacy_block(Q4), legacy_shift(Q4));
    let want = if Q4 { GgmlType::Q4_0 } else { GgmlType::Q8_0 };
    assert!(ty == want && lda == nb * gb / R && !cols.plain.contains(&true), "packed prompt");
    assert!(m.is_multiple_of(R) && a.len() >= m * lda && c.len() >= (n - 1) * ldc + m);
    assert!(b.len() >= (n - 1) * ldb + nb * 34 && cols.dy.len() >= (n - 1) * nbp + nb);
    let off = super::packed::offsets(&cols.ysum[..(n - 1) * nbp + nb], shift);
    let mut acc = alloc::vec![_mm512_setzero_ps(); 2 * 8 * n];
    let args = LegacyPass { nb, n, gb, b: b.as_ptr(), ldb, off: off.as_ptr(), dy: cols.dy.as_ptr(), nbp, pf };
    let mut pairs = pairs(a.as_ptr(), m / R, R * lda).peekable();
    while let Some((g, p0, p1, both)) = pairs.next() {
        let out = c.as_mut_ptr().add(R * g);
        match pairs.peek() {
            Some(&(_, q0, q1, true)) if both && !pf => {
                pairs.next();
                args.run::<Q4, 2>([(p0, p1, true), (q0, q1, true)], &mut acc, out, ldc);
            }
            _ => args.run::<Q4, 1>([(p0, p1, both)], &mut acc[..8 * n], out, ldc),
        }
    }
}

/// What every pass of [`legacy_prompt`] reads besides its group pairs: `nb` blocks of `gb`
/// bytes per group, `n` rows of b (`ldb` bytes apart) and per row and block (`nbp` apart) the
/// offset and the scale.
struct LegacyPass {
    nb: usize,
    n: usize,
    gb: usize,
    b: *const u8,
    ldb: usize,
    off: *const i32,
    dy: *const f32,
    nbp: usize,
    pf: bool,
}

impl LegacyPass {
    /// P group pairs (`(p0, p1, both)`, consecutive: pair p's results go to `out + 16p`)
    /// against every row of b: per block the pairs' weights stay in registers for every row
    /// of b; a row's sums `acc[8P·j + 8p + t % 8]`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
    #[inline]
    unsafe fn run<const Q4: bool, const P: usize>(
        &self,
        gp: [(*const u8, *const u8, bool); P],
        acc: &mut [__m512],
        out: *mut f32,
        ldc: usize,
    ) {
        let LegacyPass { nb, n, gb, b, ldb, off, dy, nbp, pf } = *self;
        assert!(acc.len() >= 8 * P * n);
        acc[..8 * P * n].fill(_mm512_setzero_ps());
        for t in 0..nb {
            let o = t * gb;
            for &(p0, p1, both) in &gp {
                super::packed::prefetch(pf, p0.add(o), gb);
                super::packed::prefetch(pf && both, p1.add(o), gb);
            }
            let w: [[__m512i; 8]; P] =
                core::array::from_fn(|p| legacy_weights::<Q4>(gp[p].0.add(o + LEGACY_QS), gp[p].1.add(o + LEGACY_QS)));
            let dx: [__m512; P] = core::array::from_fn(|p| pair_f16(gp[p].0.add(o), gp[p].1.add(o)));
            for j in 0..n {
                let s = legacy_sums::<P>(&w, b.add(j * ldb + t * 34 + 2), off.add(j * nbp + t));
                let dyj = _mm512_set1_ps(*dy.add(j * nbp + t));
                for p in 0..P {
                    let a = &mut acc[8 * (P * j + p) + t % 8];
                    *a = legacy_add(*a, s[p], dx[p], dyj);
                }
            }
        }
        for j in 0..n {
            for (p, &(_, _, both)) in gp.iter().enumerate() {
                let k = 8 * (P * j + p);
                store_reduced(&acc[k..k + 8], out.add(j * ldc + 2 * R * p), both);
            }
        }
    }
}

/// A K-quant prompt on group pairs (`m` rows of `lda` bytes), as `packed::k_prompt` with
/// [`N`] rows of b per call of `block` (`block1` for the rows left); `pf`: each group pair's
/// block asks for the weights [`super::packed::PREFETCH`] bytes past it in both groups.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
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
    pf: bool,
    prep: impl Fn(*const u8, *const u8) -> P,
    block: impl Fn(*const u8, *const u8, &P, [*const u8; N]) -> [__m512; N],
    block1: impl Fn(*const u8, *const u8, &P, [*const u8; 1]) -> [__m512; 1],
) {
    let gb = R * lda / nb.max(1);
    assert!(m.is_multiple_of(R) && n > 0 && a.len() >= m * lda);
    assert!(b.len() >= (n - 1) * ldb + nb * Y_SIZE && c.len() >= (n - 1) * ldc + m);
    let mut acc = alloc::vec![_mm512_setzero_ps(); 8 * n];
    let y = |j: usize, t: usize| b.as_ptr().add(j * ldb + t * Y_SIZE);
    for (g, p0, p1, both) in pairs(a.as_ptr(), m / R, R * lda) {
        acc.fill(_mm512_setzero_ps());
        for t in 0..nb {
            let (b0, b1) = (p0.add(t * gb), p1.add(t * gb));
            super::packed::prefetch(pf, b0, gb);
            super::packed::prefetch(pf && both, b1, gb);
            let x = prep(b0, b1);
            let mut j = 0;
            while j + N <= n {
                let r = block(b0, b1, &x, core::array::from_fn(|i| y(j + i, t)));
                for (i, r) in r.into_iter().enumerate() {
                    let a = &mut acc[8 * (j + i) + t % 8];
                    *a = _mm512_add_ps(*a, r);
                }
                j += N;
            }
            for j in j..n {
                let [r] = block1(b0, b1, &x, [y(j, t)]);
                let a = &mut acc[8 * j + t % 8];
                *a = _mm512_add_ps(*a, r);
            }
        }
        for j in 0..n {
            store_reduced(&acc[8 * j..8 * j + 8], c.as_mut_ptr().add(j * ldc + R * g), both);
        }
    }
}

/// The 16 rows' sub-block scales and mins of one block (`scale_min_k4`), as i32 lanes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k4_scales(p0: *const u8, p1: *const u8) -> ([__m512i; 8], [__m512i; 8]) {
    let q: [__m512i; 12] = core::array::from_fn(|k| {
        let o = K4_SCALES + 8 * k;
        _mm512_cvtepu8_epi32(pair_bytes(p0.add(o), p1.add(o)))
    });
    let (m63, m15) = (_mm512_set1_epi32(63), _mm512_set1_epi32(15));
    let top = |v: __m512i| _mm512_slli_epi32::<4>(_mm512_srli_epi32::<6>(v));
    let sc = core::array::from_fn(|j| {
        if j < 4 {
            _mm512_and_si512(q[j], m63)
        } else {
            _mm512_or_si512(_mm512_and_si512(q[j + 4], m15), top(q[j - 4]))
        }
    });
    let mn = core::array::from_fn(|j| {
        if j < 4 {
            _mm512_and_si512(q[j + 4], m63)
        } else {
            _mm512_or_si512(_mm512_srli_epi32::<4>(q[j + 4]), top(q[j]))
        }
    });
    (sc, mn)
}

/// One Q4_K group-pair block against `M` Q8_K blocks: per row of b, lane r is row r's
/// `q4_k_block` (exact `isum` and `summ`, then the scalar's float steps).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn q4_k_block<const M: usize>(
    p0: *const u8,
    p1: *const u8,
    scales: &([__m512i; 8], [__m512i; 8]),
    y: [*const u8; M],
) -> [__m512; M] {
    let (sc, mn) = scales;
    let m4 = _mm512_set1_epi8(0x0F);
    let mut isum = [_mm512_setzero_si512(); M];
    for c in 0..4 {
        let (mut lo, mut hi) = ([_mm512_setzero_si512(); M], [_mm512_setzero_si512(); M]);
        for i in 0..8 {
            let o = K4_QS + (8 * c + i) * 32;
            let w = pair(p0.add(o), p1.add(o));
            let (wl, wh) = (_mm512_and_si512(w, m4), _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4));
            for r in 0..M {
                lo[r] = _mm512_dpbusd_epi32(lo[r], wl, bc(y[r].add(Y_QS + 64 * c + 4 * i)));
                hi[r] = _mm512_dpbusd_epi32(hi[r], wh, bc(y[r].add(Y_QS + 64 * c + 32 + 4 * i)));
            }
        }
        for r in 0..M {
            let s = _mm512_add_epi32(_mm512_mullo_epi32(sc[2 * c], lo[r]), _mm512_mullo_epi32(sc[2 * c + 1], hi[r]));
            isum[r] = _mm512_add_epi32(isum[r], s);
        }
    }
    let d = pair_f16(p0, p1);
    let dmin = pair_f16(p0.add(16), p1.add(16));
    core::array::from_fn(|r| {
        let bs = |j: usize| (y[r].add(Y_BSUMS + 2 * j) as *const i16).read_unaligned() as i32;
        let mut summ = _mm512_setzero_si512();
        for (j, m) in mn.iter().enumerate() {
            summ = _mm512_add_epi32(summ, _mm512_mullo_epi32(*m, _mm512_set1_epi32(bs(2 * j) + bs(2 * j + 1))));
        }
        let yd = _mm512_set1_ps((y[r] as *const f32).read_unaligned());
        let (d, dmin) = (_mm512_mul_ps(d, yd), _mm512_mul_ps(dmin, yd));
        _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[r])), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(summ)))
    })
}

/// The 16 rows' `ql` at 64h + 4i and 64h + 32 + 4i and `qh` at 32h + 4i (`packed::k6_bytes`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k6_bytes(p0: *const u8, p1: *const u8, h: usize, i: usize) -> (__m512i, __m512i, __m512i) {
    let o = K6_QUANTS + (8 * h + i) * 96;
    (pair(p0.add(o), p1.add(o)), pair(p0.add(o + 32), p1.add(o + 32)), pair(p0.add(o + 64), p1.add(o + 64)))
}

/// `packed::k6_quants` on 16 rows.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k6_quants(a: __m512i, b: __m512i, hb: __m512i) -> [__m512i; 4] {
    let (m0f, m30) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
    let lo = |v: __m512i| _mm512_and_si512(v, m0f);
    let hi = |v: __m512i| _mm512_and_si512(_mm512_srli_epi16::<4>(v), m0f);
    [
        _mm512_or_si512(lo(a), _mm512_and_si512(_mm512_slli_epi16::<4>(hb), m30)),
        _mm512_or_si512(lo(b), _mm512_and_si512(_mm512_slli_epi16::<2>(hb), m30)),
        _mm512_or_si512(hi(a), _mm512_and_si512(hb, m30)),
        _mm512_or_si512(hi(b), _mm512_and_si512(_mm512_srli_epi16::<2>(hb), m30)),
    ]
}

/// A Q6_K group-pair block's quants + 32, as `packed::k6_unpack` (vector `16·(2h + q) +
/// 4k + j`: elements `128h + 32k + 16q + 4j ..+4` of each row, sub-block `8h + 2k + q`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k6_unpack(p0: *const u8, p1: *const u8) -> [__m512i; 64] {
    let mut u = [_mm512_setzero_si512(); 64];
    for h in 0..2 {
        for i in 0..8 {
            let (a, b, hb) = k6_bytes(p0, p1, h, i);
            let at = 16 * (2 * h + i / 4) + i % 4;
            for (k, v) in k6_quants(a, b, hb).into_iter().enumerate() {
                u[at + 4 * k] = v;
            }
        }
    }
    u
}

/// Q6_K's sums: `s` of sub-block `sb` with the 32 taken out (Q8_K block `y`), times the
/// 16 rows' scales `sc` of that sub-block, into `isum`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k6_add(isum: __m512i, s: __m512i, sc: __m512i, sb: usize, y: *const u8) -> __m512i {
    let bsum = (y.add(Y_BSUMS + 2 * sb) as *const i16).read_unaligned() as i32;
    let s = _mm512_sub_epi32(s, _mm512_set1_epi32(32 * bsum));
    _mm512_add_epi32(isum, _mm512_mullo_epi32(sc, s))
}

/// The 16 rows' i8 scales of sub-block `sb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k6_scale(p0: *const u8, p1: *const u8, sb: usize) -> __m512i {
    let o = K6_SCALES + 8 * sb;
    _mm512_cvtepi8_epi32(pair_bytes(p0.add(o), p1.add(o)))
}

/// `q6_k_block`'s float step per lane: `(d·dy)·isum`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k6_finish(p0: *const u8, p1: *const u8, isum: __m512i, y: *const u8) -> __m512 {
    let yd = _mm512_set1_ps((y as *const f32).read_unaligned());
    _mm512_mul_ps(_mm512_mul_ps(pair_f16(p0, p1), yd), _mm512_cvtepi32_ps(isum))
}

/// One Q6_K group-pair block (quants unpacked in `u`) against `M` Q8_K blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")]
#[inline]
unsafe fn k6_block<const M: usize>(p0: *const u8, p1: *const u8, u: &[__m512i; 64], y: [*const u8; M]) -> [__m512; M] {
    let mut isum = [_mm512_setzero_si512(); M];
    for h in 0..2 {
        for q in 0..2 {
            for k in 0..4 {
                let at = 16 * (2 * h + q) + 4 * k;
                let e = Y_QS + 128 * h + 32 * k + 16 * q;
                let mut s = [_mm512_setzero_si512(); M];
                for v in 0..4 {
                    for r in 0..M {
                        s[r] = _mm512_dpbusd_epi32(s[r], u[at + v], bc(y[r].add(e + 4 * v)));
                    }
                }
                let (sb, sc) = (8 * h + 2 * k + q, k6_scale(p0, p1, 8 * h + 2 * k + q));
                for r in 0..M {
                    isum[r] = k6_add(isum[r], s[r], sc, sb, y[r]);
                }
            }
        }
    }
    core::array::from_fn(|r| k6_finish(p0, p1, isum[r], y[r]))
}
