//! The AVX-512 table's blocked f32 product ([`crate::cpu::arch::F32Gemm`]), the backward
//! pass's `out_prod` on f32 operands (the weight gradients, and the input gradients through
//! F32 weights): BLIS's loops. Per block of [`KC`] values of l (from l = 0), Y's rows are
//! packed into panels [`NR`] columns wide, contiguous in l; per block of [`MC`] rows of X,
//! its rows are packed [`MR`] at a time, contiguous in l; then a register tile of MR rows ×
//! NR columns (24 zmm sums: X broadcast, the panel's two vectors loaded) over every pair,
//! the panel outermost: it (KC·NR·4 = 32 KiB) stays in L1 while X's micro-panels (12 KiB)
//! stream from L2. Each sum is a chain of FMAs in l order within a block, added to C once
//! per block: a result does not depend on m, n, or where its row and column fall.

use alloc::vec::Vec;
use core::arch::x86_64::*;
use core::mem::MaybeUninit;

/// Values of l per block (a panel of Y: KC × NR floats, 32 KiB of a 48 KiB L1).
pub(crate) const KC: usize = 256;
/// Rows of X per register tile.
const MR: usize = 12;
/// Columns of Y per register tile (two zmm).
const NR: usize = 32;
/// Rows of X per block (MC × KC floats, 384 KiB, stay in L2), a multiple of MR.
const MC: usize = 384;
const _: () = assert!(MC.is_multiple_of(MR));

const _: () = assert!(NR == crate::cpu::arch::F32_PANEL_WIDTH && KC == crate::cpu::arch::F32_PANEL_DEPTH);

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Room for `n` floats (or more), 64-byte aligned, not zeroed: the packing writes every
/// float a tile reads (padding included) before the tile reads it.
fn lines(n: usize) -> Vec<MaybeUninit<Line>> {
    let n = n.div_ceil(16).max(1);
    let mut v = Vec::with_capacity(n);
    // SAFETY: MaybeUninit needs no initialization; capacity is n.
    unsafe { v.set_len(n) };
    v
}

/// [`crate::cpu::arch::F32Gemm`] with AVX-512 F.
///
/// # Safety
/// As [`crate::cpu::arch::F32Gemm`] says; handed out only where AVX-512 F was detected.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f32(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    rsx: usize,
    csx: usize,
    y: *const f32,
    rsy: usize,
    csy: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    blocked(m, n, k, x, rsx, csx, y, rsy, csy, c, ldc, accumulate)
}

/// [`crate::cpu::arch::F32GemmPanels`] with AVX-512 F: [`gemm_f32`]'s one block of l, Y
/// already in its panels (NR = [`crate::cpu::arch::F32_PANEL_WIDTH`] columns).
///
/// # Safety
/// As [`crate::cpu::arch::F32GemmPanels`] says; handed out only where AVX-512 F was detected.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f32_panels(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    rsx: usize,
    csx: usize,
    yp: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    panels(m, n, k, x, rsx, csx, yp, c, ldc, accumulate)
}

#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn panels(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    rsx: usize,
    csx: usize,
    yp: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    assert!(k <= KC, "gemm_f32_panels: {k} values of l, one block holds {KC}");
    if m == 0 || n == 0 {
        return;
    }
    // As `blocked` on one block: a block of zeros in X (or none) leaves C, or stores zeros.
    if k == 0 || all_zero(m, k, x, rsx, csx) {
        if !accumulate {
            for i in 0..m {
                core::ptr::write_bytes(c.add(i * ldc), 0, n);
            }
        }
        return;
    }
    let mut xbuf = lines(k * MC.min(m.div_ceil(MR) * MR));
    block(m, n, k, x, rsx, csx, yp, xbuf.as_mut_ptr() as *mut f32, c, ldc, !accumulate);
}

#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn blocked(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    rsx: usize,
    csx: usize,
    y: *const f32,
    rsy: usize,
    csy: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let n_panels = n.div_ceil(NR);
    let kc_max = KC.min(k).max(1);
    let mut ybuf = lines(kc_max * n_panels * NR);
    let mut xbuf = lines(kc_max * MC.min(m.div_ceil(MR) * MR));
    let (yp, xp) = (ybuf.as_mut_ptr() as *mut f32, xbuf.as_mut_ptr() as *mut f32);
    // C is stored (not added to) by the first block computed.
    let mut first = !accumulate;
    let mut pc = 0;
    while pc < k {
        let kc = KC.min(k - pc);
        // A block of zeros in X (a logit difference's gradient of the head): Y's rows are not
        // even packed.
        if all_zero(m, kc, x.add(pc * csx), rsx, csx) {
            pc += kc;
            continue;
        }
        pack_y(kc, n, y.add(pc * rsy), rsy, csy, yp);
        block(m, n, kc, x.add(pc * csx), rsx, csx, yp, xp, c, ldc, first);
        first = false;
        pc += kc;
    }
    if first {
        // Every block of X was zero.
        for i in 0..m {
            core::ptr::write_bytes(c.add(i * ldc), 0, n);
        }
    }
}

/// C's `m` rows × `n` columns stored (`first`) or added to, the sums over one block of `kc`
/// values of l of X (`X[i·rsx + l·csx]`, packed into `xp` MC rows at a time) and Y's panels
/// `yp` (NR columns each, `kc` rows of NR floats).
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    m: usize,
    n: usize,
    kc: usize,
    x: *const f32,
    rsx: usize,
    csx: usize,
    yp: *const f32,
    xp: *mut f32,
    c: *mut f32,
    ldc: usize,
    first: bool,
) {
    let mut ic = 0;
    while ic < m {
        let mc = MC.min(m - ic);
        pack_x(mc, kc, x.add(ic * rsx), rsx, csx, xp);
        for jr in 0..n.div_ceil(NR) {
            let j0 = jr * NR;
            let w = NR.min(n - j0);
            let mask = |w: usize| if w >= 16 { 0xffff } else { ((1u32 << w) - 1) as __mmask16 };
            let (m0, m1) = (mask(w), mask(w.saturating_sub(16)));
            let panel = yp.add(jr * kc * NR);
            let mut ir = 0;
            while ir < mc {
                let rows = MR.min(mc - ir);
                tile(kc, xp.add(ir * kc), panel, c.add((ic + ir) * ldc + j0), ldc, rows, m0, m1, first);
                ir += MR;
            }
        }
        ic += mc;
    }
}

/// Whether X's `m` rows × `kc` values are all zero (read in address order; stops at the
/// first value that is not).
#[target_feature(enable = "avx512f")]
unsafe fn all_zero(m: usize, kc: usize, x: *const f32, rsx: usize, csx: usize) -> bool {
    let (outer, inner, so, si) = if csx == 1 { (m, kc, rsx, 1) } else { (kc, m, csx, rsx) };
    for o in 0..outer {
        let p = x.add(o * so);
        if (0..inner).any(|i| *p.add(i * si) != 0.0) {
            return false;
        }
    }
    true
}

/// Y's `kc` rows × `n` columns (`Y[l·rsy + j·csy]`) into panels of NR columns, each `kc`
/// rows of NR floats (columns past n zero).
#[target_feature(enable = "avx512f")]
unsafe fn pack_y(kc: usize, n: usize, y: *const f32, rsy: usize, csy: usize, out: *mut f32) {
    for jr in 0..n.div_ceil(NR) {
        let j0 = jr * NR;
        let w = NR.min(n - j0);
        let panel = out.add(jr * kc * NR);
        if csy == 1 {
            let mask = |w: usize| if w >= 16 { 0xffff } else { ((1u32 << w) - 1) as __mmask16 };
            let (m0, m1) = (mask(w), mask(w.saturating_sub(16)));
            for l in 0..kc {
                let src = y.add(l * rsy + j0);
                _mm512_store_ps(panel.add(l * NR), _mm512_maskz_loadu_ps(m0, src));
                _mm512_store_ps(panel.add(l * NR + 16), _mm512_maskz_loadu_ps(m1, src.wrapping_add(16)));
            }
        } else {
            // Columns contiguous in l (a transposed Y): each column read in address order.
            for jj in 0..NR {
                if jj < w {
                    let src = y.add((j0 + jj) * csy);
                    for l in 0..kc {
                        *panel.add(l * NR + jj) = *src.add(l * rsy);
                    }
                } else {
                    for l in 0..kc {
                        *panel.add(l * NR + jj) = 0.0;
                    }
                }
            }
        }
    }
}

/// X's `mc` rows × `kc` values (`X[i·rsx + l·csx]`) into micro-panels of MR rows, each `kc`
/// groups of MR floats (rows past mc zero).
#[target_feature(enable = "avx512f")]
unsafe fn pack_x(mc: usize, kc: usize, x: *const f32, rsx: usize, csx: usize, out: *mut f32) {
    let mut i0 = 0;
    while i0 < mc {
        let rows = MR.min(mc - i0);
        let dst = out.add(i0 * kc);
        if rsx == 1 {
            // Rows contiguous in i (a transposed X): MR values of one l at a time.
            for l in 0..kc {
                let src = x.add(i0 + l * csx);
                for r in 0..MR {
                    *dst.add(l * MR + r) = if r < rows { *src.add(r) } else { 0.0 };
                }
            }
        } else {
            for r in 0..MR {
                let src = x.wrapping_add((i0 + r) * rsx);
                for l in 0..kc {
                    *dst.add(l * MR + r) = if r < rows { *src.add(l * csx) } else { 0.0 };
                }
            }
        }
        i0 += MR;
    }
}

/// C rows 0..rows (of MR), columns under the masks `m0` (0..16) and `m1` (16..32): stored
/// (`first`) or added to, the sums over `kc` values of l of `xp[l·MR + r] · yp[l·NR + j]`.
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    kc: usize,
    xp: *const f32,
    yp: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    m0: __mmask16,
    m1: __mmask16,
    first: bool,
) {
    // C's rows are read (or written) once the kc steps are done: ask for their lines now.
    // C is 1.5–6 MiB at a training run's shapes (L3 or memory); without this each tile
    // waited on its 24 lines' latency after its last FMA. No effect on the values.
    for r in 0..MR {
        if r < rows {
            let o = c.wrapping_add(r * ldc) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(o);
            _mm_prefetch::<_MM_HINT_T0>(o.wrapping_add(4 * NR - 1));
        }
    }
    let mut s = [_mm512_setzero_ps(); 2 * MR];
    for l in 0..kc {
        let y0 = _mm512_load_ps(yp.add(l * NR));
        let y1 = _mm512_load_ps(yp.add(l * NR + 16));
        for r in 0..MR {
            let xv = _mm512_set1_ps(*xp.add(l * MR + r));
            s[2 * r] = _mm512_fmadd_ps(xv, y0, s[2 * r]);
            s[2 * r + 1] = _mm512_fmadd_ps(xv, y1, s[2 * r + 1]);
        }
    }
    for r in 0..MR {
        // A constant index per row (the sums stay in registers); rows past `rows` unwritten.
        if r < rows {
            let (o0, o1) = (c.add(r * ldc), c.add(r * ldc).wrapping_add(16));
            if first {
                _mm512_mask_storeu_ps(o0, m0, s[2 * r]);
                _mm512_mask_storeu_ps(o1, m1, s[2 * r + 1]);
            } else {
                _mm512_mask_storeu_ps(o0, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o0), s[2 * r]));
                _mm512_mask_storeu_ps(o1, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o1), s[2 * r + 1]));
            }
        }
    }
}

/// [`crate::cpu::arch::FloatGemm`] for f32 rows on 512-bit registers: 4×6 register tiles of
/// dot products, 16 lanes of l per step, each row's 16 sums reduced by one tree ([`sums4`]).
///
/// # Safety
/// As [`crate::cpu::arch::FloatGemm`] says; handed out only where AVX-512 F, BW and VL were
/// detected.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn dot_gemm_f32(
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
    zmm_gemm_f32(k, m, n, a as *const f32, lda, b, ldb, c, ldc)
}

/// [`dot_gemm_f32`] for f16 rows (as bits), converted as they are loaded: the bits of
/// [`dot_gemm_f32`] on the rows widened first (`mul_mat`'s prompt path), as a decode step
/// and a prompt must agree.
///
/// # Safety
/// As [`dot_gemm_f32`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn dot_gemm_f16(
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
    zmm_gemm_f16(k, m, n, a as *const u16, lda, b, ldb, c, ldc)
}

/// The sums of four accumulators' 16 lanes in lanes 0..4, each by the same tree: the
/// 256-bit halves added, then the 128-bit halves, then lanes (0 + 2) + (1 + 3). Missing
/// rows are zeros, so a row's sum does not depend on which tile it fell in.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn sums4(a: [__m512; 4]) -> __m128 {
    let s01 = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0b01_00_01_00>(a[0], a[1]),
        _mm512_shuffle_f32x4::<0b11_10_11_10>(a[0], a[1]),
    );
    let s23 = _mm512_add_ps(
        _mm512_shuffle_f32x4::<0b01_00_01_00>(a[2], a[3]),
        _mm512_shuffle_f32x4::<0b11_10_11_10>(a[2], a[3]),
    );
    let q =
        _mm512_add_ps(_mm512_shuffle_f32x4::<0b10_00_10_00>(s01, s23), _mm512_shuffle_f32x4::<0b11_01_11_01>(s01, s23));
    let t = _mm512_add_ps(q, _mm512_permute_ps::<0b01_00_11_10>(q));
    let u = _mm512_add_ps(t, _mm512_permute_ps::<0b10_11_00_01>(t));
    _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, u))
}

/// Values of l per slice of a deep product's sums in [`dot_gemm_f32`] / [`dot_gemm_f16`]
/// (a multiple of 16): a tile's 4 + 6 rows are 30 KiB per slice, in L1, where a whole row
/// of K = 3072 f32 (12 KiB) would not be. mul_mat sizes its blocks of a's rows by this many
/// values ([`crate::cpu::arch::Kernels::float_gemm_depth`]).
pub(crate) const DOT_KC: usize = 768;
const _: () = assert!(DOT_KC.is_multiple_of(16));
/// Rows of b from which a call deeper than [`DOT_KC`] is sliced (a decode step's 1 row is not).
const DOT_SLICE_MIN_N: usize = 6;

/// The slice of l a tile of the dot-product gemm sums over: `l0..l1` (`l1 == k` for the last
/// slice, which ends the sums), its 16-lane partial sums kept between slices in `part`
/// (the sums of row i of a and row j of b at `part[j·ldp + i]`; unused for a whole-k slice).
struct Slice {
    l0: usize,
    l1: usize,
    part: *mut __m512,
    ldp: usize,
}

/// One register tile of the 512-bit dot-product gemm: `MR` rows of a × `NR` rows of b, 16
/// lanes of `l` per step, each a-load feeding `NR` FMAs and each b-load `MR`, over the
/// slice `s` of l (the tile's rows are a's `i0..` and b's `j0..`: its partial sums in
/// `s.part`). Each lane's sum is one chain of FMAs in l order whatever the slices, so the
/// result does not depend on them. `$load(p, l)` gives 16 a-values as f32,
/// `$load_tail(p, l, mask)` the masked last ones (zeros past k).
macro_rules! zmm_gemm {
    ($gemm:ident, $tile:ident, $T:ty, $load:expr, $load_tail:expr) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $tile<const MR: usize, const NR: usize>(
            k: usize,
            a: *const $T,
            lda: usize,
            b: *const f32,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
            s: &Slice,
            i0: usize,
            j0: usize,
        ) {
            let mut acc = [[_mm512_setzero_ps(); MR]; NR];
            let part = s.part.wrapping_add(j0 * s.ldp + i0);
            if s.l0 > 0 {
                for j in 0..NR {
                    for i in 0..MR {
                        acc[j][i] = *part.add(j * s.ldp + i);
                    }
                }
            }
            let mut l = s.l0;
            while l + 16 <= s.l1 {
                let mut av = [_mm512_setzero_ps(); MR];
                for i in 0..MR {
                    av[i] = $load(a.add(i * lda), l);
                }
                for j in 0..NR {
                    let bv = _mm512_loadu_ps(b.add(j * ldb + l));
                    for i in 0..MR {
                        acc[j][i] = _mm512_fmadd_ps(av[i], bv, acc[j][i]);
                    }
                }
                l += 16;
            }
            if s.l1 < k {
                // Not the last slice: the sums wait in `part` for the next.
                for j in 0..NR {
                    for i in 0..MR {
                        *part.add(j * s.ldp + i) = acc[j][i];
                    }
                }
                return;
            }
            if l < k {
                let mask = ((1u32 << (k - l)) - 1) as __mmask16;
                let mut av = [_mm512_setzero_ps(); MR];
                for i in 0..MR {
                    av[i] = $load_tail(a.add(i * lda), l, mask);
                }
                for j in 0..NR {
                    let bv = _mm512_maskz_loadu_ps(mask, b.add(j * ldb + l));
                    for i in 0..MR {
                        acc[j][i] = _mm512_fmadd_ps(av[i], bv, acc[j][i]);
                    }
                }
            }
            let z = _mm512_setzero_ps();
            for j in 0..NR {
                let v = |i: usize| if i < MR { acc[j][i] } else { z };
                let sum = sums4([v(0), v(1), v(2), v(3)]);
                let o = c.add(j * ldc);
                if MR == 4 {
                    _mm_storeu_ps(o, sum);
                } else {
                    _mm_mask_storeu_ps(o, ((1u32 << MR) - 1) as __mmask8, sum);
                }
            }
        }

        /// Tiles of 4 rows of a × 6 rows of b (24 accumulators, 4 a-vectors and a b-vector
        /// of the 32 zmm registers), smaller ones at the edges; deeper than [`DOT_KC`] (and
        /// [`DOT_SLICE_MIN_N`] rows of b or more), every tile over one slice of l, then
        /// every tile over the next, the partial sums in memory between slices.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $gemm(
            k: usize,
            m: usize,
            n: usize,
            a: *const $T,
            lda: usize,
            b: *const f32,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
        ) {
            if k <= DOT_KC || n < DOT_SLICE_MIN_N {
                let s = Slice { l0: 0, l1: k, part: core::ptr::null_mut(), ldp: 0 };
                tile_grid!($tile, 6, [5, 4, 3, 2, 1], k, m, n, a, lda, b, ldb, c, ldc; &s);
                return;
            }
            // Written by the first slice before any is read.
            let mut part: Vec<__m512> = Vec::with_capacity(m * n);
            let mut l0 = 0;
            while l0 < k {
                let l1 = if k - l0 <= DOT_KC { k } else { l0 + DOT_KC };
                let s = Slice { l0, l1, part: part.as_mut_ptr(), ldp: m };
                tile_grid!($tile, 6, [5, 4, 3, 2, 1], k, m, n, a, lda, b, ldb, c, ldc; &s);
                l0 = l1;
            }
        }
    };
}

zmm_gemm!(
    zmm_gemm_f32,
    zmm_tile_f32,
    f32,
    |p: *const f32, l: usize| _mm512_loadu_ps(p.add(l)),
    |p: *const f32, l: usize, m: __mmask16| _mm512_maskz_loadu_ps(m, p.add(l))
);

zmm_gemm!(
    zmm_gemm_f16,
    zmm_tile_f16,
    u16,
    |p: *const u16, l: usize| _mm512_cvtph_ps(_mm256_loadu_si256(p.add(l) as *const __m256i)),
    |p: *const u16, l: usize, m: __mmask16| _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.add(l) as *const i16))
);
