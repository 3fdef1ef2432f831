//! x86_64 AVX2 (+F16C) dot products, bit-identical to [`super::scalar`].
//!
//! Integer sums per block are exact (no saturating `maddubs` on operands that could
//! overflow: signed×signed goes through i16 widening, unsigned nibbles × i8 stay far from
//! the i16 limit), eight blocks are reduced at once into one i32 lane each, and the float
//! part repeats the scalar operations lane by lane: same products, same lane sums.
//!
//! ```
//! use ggweb::cpu::arch::{vec_dot_isa, Isa};
//! use ggweb::quants::quantize;
//! use ggweb::GgmlType;
//! let x: Vec<f32> = (0..320).map(|i| (i % 17) as f32 - 8.0).collect();
//! let q = quantize(GgmlType::Q8_0, &x).unwrap();
//! let scalar = vec_dot_isa(Isa::Scalar, GgmlType::Q8_0, 320, &q, &q).unwrap();
//! if let Some(avx2) = vec_dot_isa(Isa::Avx2, GgmlType::Q8_0, 320, &q, &q) {
//!     assert_eq!(avx2.to_bits(), scalar.to_bits());
//! }
//! ```

use core::arch::x86_64::*;

use alloc::vec;
use alloc::vec::Vec;

use bytemuck::cast_slice;

use super::kernel::{GemmArgs, Kernels, PromptGemm};
use super::scalar::{self, reduce8, LANES};
use crate::quants::blocks::*;
use crate::types::GgmlType;

/// The tile loop of the dot-product gemms (simd.rs on ymm, gemm512.rs on zmm): tiles of 4
/// rows of a × `$w` rows of b through `$tile::<MR, NR>`, smaller ones at the edges (`$edge`,
/// the widths below `$w`). A macro, not a function: each tile must inline into its caller's
/// `target_feature`. With `; $ctx` after the arguments, each tile also gets `$ctx`, its first
/// row of a and its first row of b (`$tile::<MR, NR>(k, a, lda, b, ldb, c, ldc, $ctx, i, j)`).
macro_rules! tile_grid {
    ($tile:ident, $w:literal, [$($edge:literal),+], $k:expr, $m:expr, $n:expr, $a:expr, $lda:expr, $b:expr, $ldb:expr, $c:expr, $ldc:expr $(; $ctx:expr)?) => {{
        let (k, m, n, a, lda, b, ldb, c, ldc) = ($k, $m, $n, $a, $lda, $b, $ldb, $c, $ldc);
        macro_rules! rows {
            ($nr:literal, $j:expr) => {{
                let (j0, bj, cj) = ($j, b.add($j * ldb), c.add($j * ldc));
                let mut i = 0;
                while i + 4 <= m {
                    $tile::<4, $nr>(k, a.add(i * lda), lda, bj, ldb, cj.add(i), ldc $(, $ctx, i, j0)?);
                    i += 4;
                }
                let (ai, ci) = (a.add(i * lda), cj.add(i));
                match m - i {
                    3 => $tile::<3, $nr>(k, ai, lda, bj, ldb, ci, ldc $(, $ctx, i, j0)?),
                    2 => $tile::<2, $nr>(k, ai, lda, bj, ldb, ci, ldc $(, $ctx, i, j0)?),
                    1 => $tile::<1, $nr>(k, ai, lda, bj, ldb, ci, ldc $(, $ctx, i, j0)?),
                    _ => {}
                }
                let _ = j0;
            }};
        }
        let mut j = 0;
        while j + $w <= n {
            rows!($w, j);
            j += $w;
        }
        match n - j {
            $($edge => rows!($edge, j),)+
            _ => {}
        }
    }};
}

mod activations;
mod gemm512;
mod kquants;
mod packed;
mod packed512;
mod simd;

/// The AVX2 table: the scalar one with every `vec_dot` of its own, and the prompt kernel
/// for Q8_0 and Q4_0 in the `vpdpbusd` form `vnni` names. The closures call `unsafe`
/// kernels: SAFETY for all of them, [`super::traits`] hands this table out only where
/// AVX2 and F16C were detected (`Isa::Avx2`), a VNNI form only where that was, and the
/// rows passed are checked by the callers in [`super`].
pub(super) const fn table(vnni: Vnni) -> Kernels {
    use GgmlType::*;
    let mut t = super::kernel::scalar_table();
    macro_rules! blocks {
        ($($ty:ident => $kernel:ident),*) => {
            $(t.types[$ty as usize].vec_dot = Some(|_, a, b| unsafe { $kernel(cast_slice(a), cast_slice(b)) });)*
        };
    }
    blocks!(Q8_0 => q8_0_q8_0, Q4_0 => q4_0_q8_0, Q4_1 => q4_1_q8_1, Q5_0 => q5_0_q8_0, Q5_1 => q5_1_q8_1,
        Q2_K => q2_k_q8_k, Q3_K => q3_k_q8_k, Q4_K => q4_k_q8_k, Q5_K => q5_k_q8_k, Q6_K => q6_k_q8_k);
    t.types[F32 as usize].vec_dot = Some(|n, a, b| unsafe { f32_dot(n, a, b) });
    t.types[F32 as usize].float_gemm = Some(simd::gemm_f32);
    t.types[F16 as usize].float_gemm = Some(simd::gemm_f16);
    t.name = "avx2";
    t.f16_to_f32 = simd::f16_to_f32;
    t.gelu = simd::gelu;
    t.exp_sum = simd::exp_sum;
    t.max = simd::max;
    t.out_prod_panel = simd::out_prod_panel;
    t.q8_0_group = simd::q8_0_group;
    t.gelu_back = simd::gelu_back;
    t.prep_q8_0 = |row, nb, dy, ys, sums, _| unsafe { activations::col_prep_q8_0(row, nb, dy, ys, sums) };
    t.types[F16 as usize].vec_dot = Some(|n, a, b| unsafe { f16_dot(n, a, b) });
    t.types[BF16 as usize].vec_dot = Some(|n, a, b| unsafe { bf16_dot(n, a, b) });
    let (q8, q4) = match vnni {
        Vnni::None => (&PLAIN_Q8_0, &PLAIN_Q4_0),
        Vnni::Vex => (&VEX, &VEX),
        Vnni::Evex => (&EVEX, &EVEX),
    };
    t.types[Q8_0 as usize].from_float = Some(|src, dst| unsafe { activations::quantize_q8_0(src, dst) });
    t.types[Q8_K as usize].from_float = Some(|src, dst| unsafe { activations::quantize_q8_k(src, dst) });
    t.types[Q8_0 as usize].gemm = Some(q8);
    t.types[Q8_0 as usize].packed = match vnni {
        Vnni::None => None,
        Vnni::Vex => Some(&packed::PACKED_Q8_0[0]),
        Vnni::Evex => Some(&packed::PACKED_Q8_0[1]),
    };
    t.types[Q4_0 as usize].packed = match vnni {
        Vnni::None => None,
        Vnni::Vex => Some(&packed::PACKED_Q4_0[0]),
        Vnni::Evex => Some(&packed::PACKED_Q4_0[1]),
    };
    t.types[Q4_K as usize].packed = match vnni {
        Vnni::None => None,
        Vnni::Vex => Some(&packed::PACKED_Q4_K[0]),
        Vnni::Evex => Some(&packed::PACKED_Q4_K[1]),
    };
    t.types[Q6_K as usize].packed = match vnni {
        Vnni::None => None,
        Vnni::Vex => Some(&packed::PACKED_Q6_K[0]),
        Vnni::Evex => Some(&packed::PACKED_Q6_K[1]),
    };
    t.types[Q4_0 as usize].gemm = Some(q4);
    let v = vnni as usize;
    t.types[Q5_0 as usize].gemm = Some(&U_GEMMS[v][0]);
    t.types[Q4_1 as usize].gemm = Some(&U_GEMMS[v][1]);
    t.types[Q5_1 as usize].gemm = Some(&U_GEMMS[v][2]);
    t.types[Q2_K as usize].gemm = Some(&kquants::GEMMS[0]);
    t.types[Q3_K as usize].gemm = Some(&kquants::GEMMS[1]);
    t.types[Q4_K as usize].gemm = Some(&kquants::GEMMS[2]);
    t.types[Q5_K as usize].gemm = Some(&kquants::GEMMS[3]);
    t.types[Q6_K as usize].gemm = Some(&kquants::GEMMS[4]);
    t
}

/// [`table`] with AVX512-VNNI, its packed Q8_0/Q4_0/Q4_K/Q6_K kernels, out_prod's panel tile and f32
/// product ([`gemm512`]) on 512-bit registers
/// ([`packed512`]); handed out only where AVX-512 F, BW, VL and VNNI were detected.
pub(super) const fn table_512() -> Kernels {
    use GgmlType::*;
    let mut t = table(Vnni::Evex);
    t.types[Q8_0 as usize].packed = Some(&packed512::PACKED_Q8_0);
    t.types[Q4_0 as usize].packed = Some(&packed512::PACKED_Q4_0);
    t.types[Q4_K as usize].packed = Some(&packed512::PACKED_Q4_K);
    t.types[Q6_K as usize].packed = Some(&packed512::PACKED_Q6_K);
    t.out_prod_panel = simd::out_prod_panel_512;
    t.f32_gemm = Some(gemm512::gemm_f32);
    t.f32_gemm_panels = Some(gemm512::gemm_f32_panels);
    t.types[F32 as usize].float_gemm = Some(gemm512::dot_gemm_f32);
    t.types[F16 as usize].float_gemm = Some(gemm512::dot_gemm_f16);
    t.float_gemm_depth = gemm512::DOT_KC;
    t
}

/// The prompt kernels of Q5_0, Q4_1, Q5_1 per [`Vnni`] form (the names of Q4_0's).
static U_GEMMS: [[PromptGemm; 3]; 3] = {
    macro_rules! u_gemm {
        ($X:ty, $v:literal, $name:expr) => {
            PromptGemm {
                name: $name,
                // SAFETY: as in [`table`]; `gemm` checked the rows and sized `cols`.
                rows: |g, c| unsafe { gemm_rows_u::<$X, $v>(g, c) },
                needs_plain: false,
                wants_sums: true,
                chunk: crate::cpu::arch::L1_CHUNK,
            }
        };
    }
    macro_rules! form {
        ($v:literal, $name:expr) => {
            [u_gemm!(BlockQ5_0, $v, $name), u_gemm!(BlockQ4_1, $v, $name), u_gemm!(BlockQ5_1, $v, $name)]
        };
    }
    [form!(0, PLAIN.name), form!(1, VEX.name), form!(2, EVEX.name)]
};

/// Which `vpdpbusd` (four u8 × i8 products summed into each i32 lane, no saturation) a
/// table's prompt kernel uses on 256-bit registers ([`crate::cpu::features`] finds them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Vnni {
    None = 0,
    /// AVX-VNNI: the VEX form.
    Vex,
    /// AVX512-VNNI with AVX512-VL: the same instruction in its EVEX form, on CPUs (Ice
    /// Lake to Cascade Lake servers, Zen 4) that have AVX-512 but not AVX-VNNI.
    Evex,
}

// SAFETY of the closures: as in [`table`]; `gemm` checked the rows and sized `cols`.
const PLAIN: PromptGemm = PromptGemm {
    name: "avx2 tiles",
    rows: |g, c| unsafe { gemm_rows(g, c) },
    needs_plain: false,
    wants_sums: true,
    chunk: crate::cpu::arch::L1_CHUNK,
};
/// Q8_0's plain product (`|x|·sign(y, x)` through `maddubs`) is exact only while y ≠ -128.
static PLAIN_Q8_0: PromptGemm = PromptGemm { needs_plain: true, ..PLAIN };
static PLAIN_Q4_0: PromptGemm = PLAIN;
static VEX: PromptGemm = PromptGemm {
    name: "avx2 tiles (avx-vnni vpdpbusd)",
    rows: |g, c| unsafe { gemm_rows_vnni::<false>(g, c) },
    needs_plain: false,
    wants_sums: true,
    chunk: crate::cpu::arch::L1_CHUNK,
};
static EVEX: PromptGemm = PromptGemm {
    name: "avx2 tiles (avx512-vnni vpdpbusd)",
    rows: |g, c| unsafe { gemm_rows_vnni::<true>(g, c) },
    needs_plain: false,
    wants_sums: true,
    chunk: crate::cpu::arch::L1_CHUNK,
};

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn load128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p as *const __m128i)
}

/// Exact i8×i8 products of 32 pairs, summed into 8 i32 lanes.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
    let xl = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(x));
    let xh = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(x));
    let yl = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(y));
    let yh = _mm256_cvtepi8_epi16(_mm256_extracti128_si256::<1>(y));
    _mm256_add_epi32(_mm256_madd_epi16(xl, yl), _mm256_madd_epi16(xh, yh))
}

/// Σ (u - off)·y for unsigned quants u ≤ 31 (pairs stay below 8000: no saturation) into
/// 8 i32 lanes; `off` = 0 for the `d·q + m` types.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn dot_u8_off(u: __m256i, y: __m256i, off: i8) -> __m256i {
    let mut p = _mm256_maddubs_epi16(u, y);
    if off != 0 {
        p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(_mm256_set1_epi8(off), y));
    }
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// Lane k of the result = the sum of all lanes of v[k].
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn transpose_sum(v: &[__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    let h67 = _mm256_hadd_epi32(v[6], v[7]);
    let h0123 = _mm256_hadd_epi32(h01, h23); // [0..4 of low halves | 0..4 of high halves]
    let h4567 = _mm256_hadd_epi32(h45, h67);
    let lo = _mm256_permute2x128_si256::<0x20>(h0123, h4567);
    let hi = _mm256_permute2x128_si256::<0x31>(h0123, h4567);
    _mm256_add_epi32(lo, hi)
}

/// Eight f16 values as f32 (exact).
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn f16x8(h: [u16; 8]) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
}

/// The 32 nibbles of a legacy block as bytes in element order (low nibbles first).
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn nibbles(qs: &[u8; 16]) -> __m256i {
    let q = load128(qs.as_ptr());
    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), _mm256_set1_epi8(0x0F))
}

/// The 5-bit quants of a Q5_0/Q5_1 block: nibbles plus bit j of `qh` as 0x10 in byte j.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn q5_bytes(qs: &[u8; 16], qh: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_or_si256(nibbles(qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

/// Adds the leftover blocks (beyond whole groups of 8) with the scalar contribution and
/// reduces the lanes.
#[inline(always)]
fn finish<X, Y>(acc: [f32; LANES], x: &[X], y: &[Y], block: impl Fn(&X, &Y) -> f32) -> f32 {
    let mut acc = acc;
    let done = x.len() - x.len() % LANES;
    for b in done..x.len() {
        acc[b % LANES] += block(&x[b], &y[b]);
    }
    reduce8(&acc)
}

#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn store(acc: __m256) -> [f32; LANES] {
    let mut out = [0f32; LANES];
    _mm256_storeu_ps(out.as_mut_ptr(), acc);
    out
}

/// The `d_x·d_y·Σ` kernels (Q8_0, Q4_0, Q5_0): `isum(k)` gives block k's 8 partial sums.
macro_rules! symmetric_kernel {
    ($name:ident, $X:ty, $block:path, |$x:ident, $y:ident| $isum:expr) => {
        #[target_feature(enable = "avx2,f16c")]
        unsafe fn $name(xs: &[$X], ys: &[BlockQ8_0]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (xg, yg) in xs.chunks_exact(LANES).zip(ys.chunks_exact(LANES)) {
                let mut v = [_mm256_setzero_si256(); LANES];
                for k in 0..LANES {
                    let ($x, $y) = (&xg[k], &yg[k]);
                    v[k] = $isum;
                }
                let s = _mm256_cvtepi32_ps(transpose_sum(&v));
                let dx = f16x8(core::array::from_fn(|k| xg[k].d()));
                let dy = f16x8(core::array::from_fn(|k| yg[k].d()));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(s, _mm256_mul_ps(dx, dy)));
            }
            finish(store(acc), xs, ys, $block)
        }
    };
}

symmetric_kernel!(q8_0_q8_0, BlockQ8_0, scalar::dot_q8_0_block, |x, y| dot_i8(
    load256(x.qs.as_ptr() as *const u8),
    load256(y.qs.as_ptr() as *const u8)
));
symmetric_kernel!(q4_0_q8_0, BlockQ4_0, scalar::dot_q4_0_block, |x, y| dot_u8_off(
    nibbles(&x.qs),
    load256(y.qs.as_ptr() as *const u8),
    8
));
symmetric_kernel!(q5_0_q8_0, BlockQ5_0, scalar::dot_q5_0_block, |x, y| dot_u8_off(
    q5_bytes(&x.qs, x.qh()),
    load256(y.qs.as_ptr() as *const u8),
    16
));

/// The `d·q + m` kernels (Q4_1, Q5_1) against Q8_1: `(dx·dy)·Σq·y + m·s_y` per block.
macro_rules! affine_kernel {
    ($name:ident, $X:ty, $block:path, |$x:ident| $q:expr) => {
        #[target_feature(enable = "avx2,f16c")]
        unsafe fn $name(xs: &[$X], ys: &[BlockQ8_1]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            for (xg, yg) in xs.chunks_exact(LANES).zip(ys.chunks_exact(LANES)) {
                let mut v = [_mm256_setzero_si256(); LANES];
                for k in 0..LANES {
                    let $x = &xg[k];
                    let y = load256(yg[k].qs.as_ptr() as *const u8);
                    v[k] = dot_u8_off($q, y, 0);
                }
                let s = _mm256_cvtepi32_ps(transpose_sum(&v));
                let dx = f16x8(core::array::from_fn(|k| xg[k].d()));
                let mx = f16x8(core::array::from_fn(|k| xg[k].m()));
                let dy = f16x8(core::array::from_fn(|k| yg[k].d()));
                let sy = f16x8(core::array::from_fn(|k| yg[k].s()));
                let c = _mm256_add_ps(_mm256_mul_ps(s, _mm256_mul_ps(dx, dy)), _mm256_mul_ps(mx, sy));
                acc = _mm256_add_ps(acc, c);
            }
            finish(store(acc), xs, ys, $block)
        }
    };
}

affine_kernel!(q4_1_q8_1, BlockQ4_1, scalar::dot_q4_1_block, |x| nibbles(&x.qs));
affine_kernel!(q5_1_q8_1, BlockQ5_1, scalar::dot_q5_1_block, |x| q5_bytes(&x.qs, x.qh()));

#[target_feature(enable = "avx2,f16c")]
unsafe fn q4_k_q8_k(xs: &[BlockQ4_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let mask = _mm256_set1_epi8(0x0F);
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let (sc, m) = x.scales_mins();
        let mut isum = _mm256_setzero_si256();
        for c in 0..4 {
            let q = load256(x.qs.as_ptr().add(32 * c));
            let ylo = load256(y.qs.as_ptr().add(64 * c) as *const u8);
            let yhi = load256(y.qs.as_ptr().add(64 * c + 32) as *const u8);
            // nibble × i8 pairs ≤ 2·15·128: exact in i16; then × the 6-bit scale into i32
            let plo = _mm256_maddubs_epi16(_mm256_and_si256(q, mask), ylo);
            let phi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(q), mask), yhi);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c] as i16)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1] as i16)));
        }
        acc[b % LANES] += scalar::q4_k_block(hsum_i32(isum), scalar::q4_k_summ(&m, y), x, y.d());
    }
    reduce8(&acc)
}

/// Bits `shift..` of every byte of `v`, masked by `mask` (a 16-bit shift then a byte mask:
/// the bits that cross into a neighbouring byte are masked off).
#[inline(always)]
unsafe fn bits(v: __m256i, shift: u32, mask: __m256i) -> __m256i {
    _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift as i32)), mask)
}

/// Two sub-blocks of 16 in one vector: `sc_lo·Σ(first 16 pairs) + sc_hi·Σ(last 16)`, from
/// the i16 pair sums `p`, into 8 i32 lanes.
#[inline(always)]
unsafe fn scale_pairs(p: __m256i, sc_lo: i16, sc_hi: i16) -> __m256i {
    _mm256_madd_epi16(p, _mm256_set_m128i(_mm_set1_epi16(sc_hi), _mm_set1_epi16(sc_lo)))
}

#[target_feature(enable = "avx2,f16c")]
unsafe fn q2_k_q8_k(xs: &[BlockQ2_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let m3 = _mm256_set1_epi8(3);
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let mut isum = _mm256_setzero_si256();
        for half in 0..2 {
            let qs = load256(x.qs.as_ptr().add(32 * half));
            for k in 0..4 {
                let j = 8 * half + 2 * k;
                let yv = load256(y.qs.as_ptr().add(128 * half + 32 * k) as *const u8);
                // 2-bit × i8 pairs ≤ 2·3·128: exact in i16
                let p = _mm256_maddubs_epi16(bits(qs, 2 * k as u32, m3), yv);
                isum =
                    _mm256_add_epi32(isum, scale_pairs(p, (x.scales[j] & 0xF) as i16, (x.scales[j + 1] & 0xF) as i16));
            }
        }
        acc[b % LANES] += scalar::qk_min_block(hsum_i32(isum), scalar::q2_k_summ(x, y), x.d(), x.dmin(), y.d());
    }
    reduce8(&acc)
}

#[target_feature(enable = "avx2,f16c")]
unsafe fn q3_k_q8_k(xs: &[BlockQ3_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let (m3, m1, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1), _mm256_set1_epi8(4));
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let sc = x.scales6();
        let hm = load256(x.hmask.as_ptr());
        let mut isum = _mm256_setzero_si256();
        for half in 0..2 {
            let qs = load256(x.qs.as_ptr().add(32 * half));
            for k in 0..4 {
                let j = 8 * half + 2 * k;
                let yv = load256(y.qs.as_ptr().add(128 * half + 32 * k) as *const u8);
                // u = low 2 bits + 4·(high bit) in 0..8; q = u - 4. Both maddubs stay in i16.
                let u = _mm256_or_si256(
                    bits(qs, 2 * k as u32, m3),
                    _mm256_slli_epi16::<2>(bits(hm, (4 * half + k) as u32, m1)),
                );
                let p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, yv), _mm256_maddubs_epi16(four, yv));
                isum = _mm256_add_epi32(isum, scale_pairs(p, sc[j] as i16 - 32, sc[j + 1] as i16 - 32));
            }
        }
        acc[b % LANES] += scalar::q3_k_block(hsum_i32(isum), x.d(), y.d());
    }
    reduce8(&acc)
}

#[target_feature(enable = "avx2,f16c")]
unsafe fn q5_k_q8_k(xs: &[BlockQ5_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let (m4, m1) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(1));
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let (sc, m) = scales_mins_k4(&x.scales);
        let qh = load256(x.qh.as_ptr());
        let mut isum = _mm256_setzero_si256();
        for c in 0..4 {
            let q = load256(x.qs.as_ptr().add(32 * c));
            let ylo = load256(y.qs.as_ptr().add(64 * c) as *const u8);
            let yhi = load256(y.qs.as_ptr().add(64 * c + 32) as *const u8);
            let lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16::<4>(bits(qh, 2 * c as u32, m1)));
            let hi = _mm256_or_si256(bits(q, 4, m4), _mm256_slli_epi16::<4>(bits(qh, 2 * c as u32 + 1, m1)));
            // 5-bit × i8 pairs ≤ 2·31·128: exact in i16; then × the 6-bit scale into i32
            let plo = _mm256_maddubs_epi16(lo, ylo);
            let phi = _mm256_maddubs_epi16(hi, yhi);
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * c] as i16)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * c + 1] as i16)));
        }
        acc[b % LANES] += scalar::qk_min_block(hsum_i32(isum), scalar::q4_k_summ(&m, y), x.d(), x.dmin(), y.d());
    }
    reduce8(&acc)
}

#[target_feature(enable = "avx2,f16c")]
unsafe fn q6_k_q8_k(xs: &[BlockQ6_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(0x30);
    let m32 = _mm256_set1_epi8(32);
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let mut isum = _mm256_setzero_si256();
        for half in 0..2 {
            let ql0 = load256(x.ql.as_ptr().add(64 * half));
            let ql1 = load256(x.ql.as_ptr().add(64 * half + 32));
            let qh = load256(x.qh.as_ptr().add(32 * half));
            // unsigned 6-bit quants of elements 32k..32k+32 of this half
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m2)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), _mm256_and_si256(qh, m2)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2),
                ),
            ];
            for (k, q) in q.iter().enumerate() {
                let j = 8 * half + 2 * k; // the sub-blocks of 16 in this vector: j, j + 1
                let yv = load256(y.qs.as_ptr().add(128 * half + 32 * k) as *const u8);
                // (q - 32)·y pairs: 2·63·128 and 2·32·128 stay inside i16, so does their difference
                let p = _mm256_sub_epi16(_mm256_maddubs_epi16(*q, yv), _mm256_maddubs_epi16(m32, yv));
                let s = _mm256_set_m128i(_mm_set1_epi16(x.scales[j + 1] as i16), _mm_set1_epi16(x.scales[j] as i16));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
            }
        }
        acc[b % LANES] += scalar::q6_k_block(hsum_i32(isum), x, y.d());
    }
    reduce8(&acc)
}

/// The float dot products: 8 elements per step, element `i` in lane `i % 8`, product
/// then add (no FMA), as the scalar loop; the tail goes through the scalar lanes.
macro_rules! float_kernel {
    ($name:ident, $w:literal, |$p:ident| $load:expr, |$b:ident| $get:expr) => {
        #[target_feature(enable = "avx2,f16c")]
        unsafe fn $name(n: usize, x: &[u8], y: &[u8]) -> f32 {
            let mut acc = _mm256_setzero_ps();
            let main = n - n % LANES;
            let mut i = 0;
            while i < main {
                let ($p, q) = (x.as_ptr().add($w * i), y.as_ptr().add($w * i));
                let xv = $load;
                let $p = q;
                acc = _mm256_add_ps(acc, _mm256_mul_ps(xv, $load));
                i += LANES;
            }
            let mut lanes = store(acc);
            for i in main..n {
                let get = |$b: &[u8]| -> f32 { $get };
                lanes[i % LANES] += get(&x[$w * i..$w * i + $w]) * get(&y[$w * i..$w * i + $w]);
            }
            reduce8(&lanes)
        }
    };
}

float_kernel!(f32_dot, 4, |p| _mm256_loadu_ps(p as *const f32), |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
float_kernel!(f16_dot, 2, |p| _mm256_cvtph_ps(load128(p)), |b| fp16_to_fp32(u16::from_le_bytes([b[0], b[1]])));
float_kernel!(bf16_dot, 2, |p| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(load128(p)))), |b| {
    bf16_to_fp32(u16::from_le_bytes([b[0], b[1]]))
});

/// [`super::gemm`] for Q8_0 and Q4_0: row by row of `a` (scales converted, Q4_0 nibbles
/// unpacked once), each against every row of `b` not marked `plain`.
///
/// # Safety
/// AVX2 and F16C must be available; `m` rows of `a` (`lda` apart) and the rows of `b`
/// (`ldb` apart) must be whole rows of `nb` blocks; `c` must hold `(n-1)·ldc + m`.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn gemm_rows(g: &GemmArgs, c: &mut [f32]) {
    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
    let nbp = cols.nbp;
    let mut dx = vec![0f32; nbp];
    // Unpacking Q4_0 nibbles into a buffer pays off when several rows of b reuse them.
    let n_live = cols.plain.iter().filter(|&&p| !p).count();
    let mut u = if n_live > 1 { vec![_mm256_setzero_si256(); nb] } else { Vec::new() };
    for step in 0..m {
        let i = if n_live == 1 { super::decode_row(step, m) } else { step };
        let row = &a[i * lda..];
        match ty {
            GgmlType::Q4_0 => {
                let xs: &[BlockQ4_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ4_0>()]);
                scales(xs, &mut dx, |x| x.d());
                for (t, x) in xs.iter().enumerate().take(u.len()) {
                    u[t] = nibbles(&x.qs);
                }
            }
            _ => {
                let xs: &[BlockQ8_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ8_0>()]);
                scales(xs, &mut dx, |x| x.d());
            }
        }
        for (j, _) in cols.plain.iter().enumerate().filter(|(_, &p)| !p) {
            let y = b.as_ptr().add(j * ldb) as *const BlockQ8_0;
            let (dy, ys) = (&cols.dy[j * nbp..], &cols.ysum[j * nbp..]);
            c[j * ldc + i] = match ty {
                GgmlType::Q4_0 if u.is_empty() => {
                    let xs = row.as_ptr() as *const BlockQ4_0;
                    q4_0_row_dot(nb, |t| nibbles(&(*xs.add(t)).qs), &dx, y, dy, ys)
                }
                GgmlType::Q4_0 => q4_0_row_dot(nb, |t| u[t], &dx, y, dy, ys),
                _ => q8_0_row_dot(nb, row.as_ptr() as *const BlockQ8_0, &dx, y, dy),
            };
        }
    }
}

/// The f16 scales of `xs` as f32 into `dx`, eight at a time through F16C.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn scales<X>(xs: &[X], dx: &mut [f32], d: impl Fn(&X) -> u16) {
    let mut groups = xs.chunks_exact(LANES);
    for (g, xg) in (&mut groups).enumerate() {
        _mm256_storeu_ps(dx.as_mut_ptr().add(LANES * g), f16x8(core::array::from_fn(|k| d(&xg[k]))));
    }
    let done = xs.len() - groups.remainder().len();
    for (t, x) in groups.remainder().iter().enumerate() {
        dx[done + t] = fp16_to_fp32(d(x));
    }
}

/// The float part shared by both kernels, as in `symmetric_kernel!`: block sums `s` (lane
/// k = block 8g + k) scaled by dx·dy and added into the lane accumulators.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn add_group(acc: __m256, s: __m256i, dx: &[f32], dy: &[f32], g: usize) -> __m256 {
    let dxv = _mm256_loadu_ps(dx.as_ptr().add(8 * g));
    let dyv = _mm256_loadu_ps(dy.as_ptr().add(8 * g));
    _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dxv, dyv)))
}

/// Blocks past the last group of 8: one contribution each into lane `t % 8`, then the sum.
#[inline(always)]
fn finish_rows(acc: [f32; LANES], nb: usize, dx: &[f32], dy: &[f32], isum: impl Fn(usize) -> i32) -> f32 {
    let mut acc = acc;
    for t in nb - nb % LANES..nb {
        acc[t % LANES] += isum(t) as f32 * (dx[t] * dy[t]);
    }
    reduce8(&acc)
}

/// Q4_0 × Q8_0: Σ u·y (u the unsigned nibbles) - 8·Σy per block.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn q4_0_row_dot(
    nb: usize,
    u: impl Fn(usize) -> __m256i,
    dx: &[f32],
    y: *const BlockQ8_0,
    dy: &[f32],
    ysum: &[i32],
) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let isum = |t: usize| {
        let yq = load256((*y.add(t)).qs.as_ptr() as *const u8);
        _mm256_madd_epi16(_mm256_maddubs_epi16(u(t), yq), ones)
    };
    let mut acc = _mm256_setzero_ps();
    for g in 0..nb / LANES {
        let v: [__m256i; LANES] = core::array::from_fn(|k| isum(LANES * g + k));
        let ys = _mm256_loadu_si256(ysum.as_ptr().add(8 * g) as *const __m256i);
        acc = add_group(acc, _mm256_sub_epi32(transpose_sum(&v), _mm256_slli_epi32::<3>(ys)), dx, dy, g);
    }
    finish_rows(store(acc), nb, dx, dy, |t| hsum_i32(isum(t)) - 8 * ysum[t])
}

/// Q8_0 × Q8_0: |x|·sign(y, x) pairs (≤ 2·128·127, exact in i16 for y ≠ -128).
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn q8_0_row_dot(nb: usize, x: *const BlockQ8_0, dx: &[f32], y: *const BlockQ8_0, dy: &[f32]) -> f32 {
    let ones = _mm256_set1_epi16(1);
    let isum = |t: usize| {
        let xq = load256((*x.add(t)).qs.as_ptr() as *const u8);
        let yq = load256((*y.add(t)).qs.as_ptr() as *const u8);
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(xq), _mm256_sign_epi8(yq, xq)), ones)
    };
    let mut acc = _mm256_setzero_ps();
    for g in 0..nb / LANES {
        let v: [__m256i; LANES] = core::array::from_fn(|k| isum(LANES * g + k));
        acc = add_group(acc, transpose_sum(&v), dx, dy, g);
    }
    finish_rows(store(acc), nb, dx, dy, |t| hsum_i32(isum(t)))
}

/// `acc + Σ u·y` per i32 lane (4 products each, u unsigned, y signed): `vpdpbusd` in its
/// VEX (AVX-VNNI) or EVEX (AVX512-VNNI + VL) form, the same exact integer sums.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dpbusd<const EVEX: bool>(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
    let mut acc = acc;
    if EVEX {
        core::arch::asm!(
            "{{evex}} vpdpbusd {acc}, {u}, {y}",
            acc = inout(ymm_reg) acc,
            u = in(ymm_reg) u,
            y = in(ymm_reg) y,
            options(pure, nomem, nostack, preserves_flags)
        );
    } else {
        core::arch::asm!(
            "{{vex}} vpdpbusd {acc}, {u}, {y}",
            acc = inout(ymm_reg) acc,
            u = in(ymm_reg) u,
            y = in(ymm_reg) y,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// [`gemm_rows`] with AVX-VNNI: both types become unsigned × signed products, one
/// `vpdpbusd` per block pair, with the offset taken out through the block sums of b —
/// Q4_0's nibbles are `q - 8` with q in 0..16, Q8_0's quants `(x + 128) - 128` with
/// x + 128 (x ^ 0x80) in 0..256. The integer sums are the same exact numbers, so every
/// value is still bit for bit `vec_dot`'s, for any row of b (no -128 exception).
///
/// # Safety
/// As for [`gemm_rows`], and the `vpdpbusd` form asked for must be available ([`vnni`]:
/// `EVEX` for [`Vnni::Evex`], else [`Vnni::Vex`]).
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn gemm_rows_vnni<const EVEX: bool>(g: &GemmArgs, c: &mut [f32]) {
    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
    let nbp = cols.nbp;
    let n = cols.plain.len();
    let mut dx = vec![0f32; nbp];
    let flip = _mm256_set1_epi8(-128);
    // The unsigned quants of a row, into a buffer when several rows of b reuse them.
    let mut u = if n > 1 { vec![_mm256_setzero_si256(); nb] } else { Vec::new() };
    for step in 0..m {
        let i = if n == 1 { super::decode_row(step, m) } else { step };
        let row = &a[i * lda..];
        let q4 = row.as_ptr() as *const BlockQ4_0;
        let q8 = row.as_ptr() as *const BlockQ8_0;
        match ty {
            GgmlType::Q4_0 => {
                let xs: &[BlockQ4_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ4_0>()]);
                scales(xs, &mut dx, |x| x.d());
                for (t, x) in xs.iter().enumerate().take(u.len()) {
                    u[t] = nibbles(&x.qs);
                }
            }
            _ => {
                let xs: &[BlockQ8_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ8_0>()]);
                scales(xs, &mut dx, |x| x.d());
                for (t, x) in xs.iter().enumerate().take(u.len()) {
                    u[t] = _mm256_xor_si256(load256(x.qs.as_ptr() as *const u8), flip);
                }
            }
        }
        for j in 0..n {
            let y = b.as_ptr().add(j * ldb) as *const BlockQ8_0;
            let (dy, ys) = (&cols.dy[j * nbp..], &cols.ysum[j * nbp..]);
            c[j * ldc + i] = match (ty, u.is_empty()) {
                (GgmlType::Q4_0, true) => u8_row_dot_vnni::<3, EVEX>(nb, |t| nibbles(&(*q4.add(t)).qs), &dx, y, dy, ys),
                (GgmlType::Q4_0, false) => u8_row_dot_vnni::<3, EVEX>(nb, |t| u[t], &dx, y, dy, ys),
                (_, true) => u8_row_dot_vnni::<7, EVEX>(
                    nb,
                    |t| _mm256_xor_si256(load256((*q8.add(t)).qs.as_ptr() as *const u8), flip),
                    &dx,
                    y,
                    dy,
                    ys,
                ),
                (_, false) => u8_row_dot_vnni::<7, EVEX>(nb, |t| u[t], &dx, y, dy, ys),
            };
        }
    }
}

/// Σ u·y - 2^SHIFT·Σy per block, `u` unsigned quants of a row of a, `y` a row of Q8_0.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn u8_row_dot_vnni<const SHIFT: i32, const EVEX: bool>(
    nb: usize,
    u: impl Fn(usize) -> __m256i,
    dx: &[f32],
    y: *const BlockQ8_0,
    dy: &[f32],
    ysum: &[i32],
) -> f32 {
    let isum = |t: usize| {
        let yq = load256((*y.add(t)).qs.as_ptr() as *const u8);
        dpbusd::<EVEX>(_mm256_setzero_si256(), u(t), yq)
    };
    let mut acc = _mm256_setzero_ps();
    for g in 0..nb / LANES {
        let v: [__m256i; LANES] = core::array::from_fn(|k| isum(LANES * g + k));
        let ys = _mm256_loadu_si256(ysum.as_ptr().add(8 * g) as *const __m256i);
        acc = add_group(acc, _mm256_sub_epi32(transpose_sum(&v), _mm256_slli_epi32::<SHIFT>(ys)), dx, dy, g);
    }
    finish_rows(store(acc), nb, dx, dy, |t| hsum_i32(isum(t)) - (ysum[t] << SHIFT))
}

/// The legacy types whose quants are unsigned bytes (Q4_0, Q5_0: `q - 2^SHIFT`; Q4_1, Q5_1:
/// `d·q + m` against Q8_1) for [`gemm_rows_u`].
trait UBlock: bytemuck::Pod {
    /// The offset `2^SHIFT` the symmetric types take out through the block sums of b.
    const SHIFT: i32;
    /// `d·q + m` against Q8_1 (no offset; `m·s_y` added per block).
    const AFFINE: bool;
    /// The size of a block of b and where its quants start.
    const Y_SIZE: usize;
    const Y_QS: usize;
    fn d(&self) -> u16;
    fn m(&self) -> u16;
    /// The unsigned quants in element order.
    unsafe fn quants(&self) -> __m256i;
}

macro_rules! ublock {
    ($X:ty, $shift:expr, $affine:expr, $Y:ty, $yqs:expr, |$x:ident| $q:expr, |$xm:ident| $m:expr) => {
        impl UBlock for $X {
            const SHIFT: i32 = $shift;
            const AFFINE: bool = $affine;
            const Y_SIZE: usize = core::mem::size_of::<$Y>();
            const Y_QS: usize = $yqs;
            #[inline(always)]
            fn d(&self) -> u16 {
                <$X>::d(self)
            }
            #[inline(always)]
            fn m(&self) -> u16 {
                let $xm = self;
                $m
            }
            #[inline(always)]
            unsafe fn quants(&self) -> __m256i {
                let $x = self;
                $q
            }
        }
    };
}
ublock!(BlockQ4_0, 3, false, BlockQ8_0, 2, |x| nibbles(&x.qs), |_x| 0);
ublock!(BlockQ5_0, 4, false, BlockQ8_0, 2, |x| q5_bytes(&x.qs, x.qh()), |_x| 0);
ublock!(BlockQ4_1, 0, true, BlockQ8_1, 4, |x| nibbles(&x.qs), |x| x.m());
ublock!(BlockQ5_1, 0, true, BlockQ8_1, 4, |x| q5_bytes(&x.qs, x.qh()), |x| x.m());

/// [`super::gemm`] for Q5_0, Q4_1 and Q5_1 (`V` = 0: `maddubs`, exact as u ≤ 31; 1: the VEX
/// `vpdpbusd`; 2: the EVEX one): per row of `a` its scales (and mins) converted and its
/// quants unpacked once, then against every row of b. The float steps are `vec_dot`'s
/// (`symmetric_kernel!` / `affine_kernel!`), lane by lane.
///
/// # Safety
/// As for [`gemm_rows`]; `V` > 0 only where that `vpdpbusd` form was detected.
#[target_feature(enable = "avx2,f16c")]
unsafe fn gemm_rows_u<X: UBlock, const V: u8>(g: &GemmArgs, c: &mut [f32]) {
    let GemmArgs { nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
    let nbp = cols.nbp;
    let n = cols.plain.len();
    let mut dx = vec![0f32; nbp];
    let mut mx = vec![0f32; if X::AFFINE { nbp } else { 0 }];
    let mut u = if n > 1 { vec![_mm256_setzero_si256(); nb] } else { Vec::new() };
    for step in 0..m {
        let i = if n == 1 { super::decode_row(step, m) } else { step };
        let xs: &[X] = cast_slice(&a[i * lda..i * lda + nb * core::mem::size_of::<X>()]);
        scales(xs, &mut dx, |x| x.d());
        if X::AFFINE {
            scales(xs, &mut mx, |x| x.m());
        }
        for (t, x) in xs.iter().enumerate().take(u.len()) {
            u[t] = x.quants();
        }
        for j in 0..n {
            let y = b.as_ptr().add(j * ldb);
            c[j * ldc + i] = if u.is_empty() {
                u_row_dot::<X, V>(nb, |t| xs[t].quants(), &dx, &mx, y, cols, j)
            } else {
                u_row_dot::<X, V>(nb, |t| u[t], &dx, &mx, y, cols, j)
            };
        }
    }
}

/// One row of a (its quants `u(t)`, scales `dx`, mins `mx`) against row `j` of b at `y`.
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn u_row_dot<X: UBlock, const V: u8>(
    nb: usize,
    u: impl Fn(usize) -> __m256i,
    dx: &[f32],
    mx: &[f32],
    y: *const u8,
    cols: &super::ColPrep,
    j: usize,
) -> f32 {
    let nbp = cols.nbp;
    let dy = &cols.dy[j * nbp..];
    let ones = _mm256_set1_epi16(1);
    let isum = |t: usize| {
        let yq = load256(y.add(t * X::Y_SIZE + X::Y_QS));
        match V {
            0 => _mm256_madd_epi16(_mm256_maddubs_epi16(u(t), yq), ones),
            1 => dpbusd::<false>(_mm256_setzero_si256(), u(t), yq),
            _ => dpbusd::<true>(_mm256_setzero_si256(), u(t), yq),
        }
    };
    let shift = _mm_cvtsi32_si128(X::SHIFT);
    let mut acc = _mm256_setzero_ps();
    if X::AFFINE {
        let sy = &cols.sy[j * nbp..];
        for g in 0..nb / LANES {
            let v: [__m256i; LANES] = core::array::from_fn(|k| isum(LANES * g + k));
            let s = _mm256_cvtepi32_ps(transpose_sum(&v));
            let d = _mm256_mul_ps(_mm256_loadu_ps(dx.as_ptr().add(8 * g)), _mm256_loadu_ps(dy.as_ptr().add(8 * g)));
            let ms = _mm256_mul_ps(_mm256_loadu_ps(mx.as_ptr().add(8 * g)), _mm256_loadu_ps(sy.as_ptr().add(8 * g)));
            acc = _mm256_add_ps(acc, _mm256_add_ps(_mm256_mul_ps(s, d), ms));
        }
        let mut lanes = store(acc);
        for t in nb - nb % LANES..nb {
            lanes[t % LANES] += hsum_i32(isum(t)) as f32 * (dx[t] * dy[t]) + mx[t] * sy[t];
        }
        reduce8(&lanes)
    } else {
        let ysum = &cols.ysum[j * nbp..];
        for g in 0..nb / LANES {
            let v: [__m256i; LANES] = core::array::from_fn(|k| isum(LANES * g + k));
            let ys = _mm256_loadu_si256(ysum.as_ptr().add(8 * g) as *const __m256i);
            acc = add_group(acc, _mm256_sub_epi32(transpose_sum(&v), _mm256_sll_epi32(ys, shift)), dx, dy, g);
        }
        finish_rows(store(acc), nb, dx, dy, |t| hsum_i32(isum(t)) - (ysum[t] << X::SHIFT))
    }
}
