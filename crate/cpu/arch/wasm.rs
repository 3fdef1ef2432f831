//! wasm32 SIMD128 dot products, bit-identical to [`super::scalar`].
//!
//! Built whenever the target has `+simd128` (the repo's .cargo/config.toml sets it), so
//! there is no run-time detection. i8×i8 products are exact in i16 (`extmul`), pairs
//! widen to i32 before any further sum, and eight blocks' sums are gathered into two
//! i32x4 so the float part runs four blocks per instruction, in the scalar's order.

use crate::wasm_arch::*;

use bytemuck::cast_slice;

use super::kernel::{GemmArgs, Kernels, PromptGemm};
use super::scalar::{self, reduce8, LANES};
use crate::quants::blocks::*;
use crate::types::GgmlType;

/// The SIMD128 table: the scalar one with every `vec_dot` of its own, Q8_0's quantization,
/// the prompt kernels, and the packed (repacked at load) kernels of Q8_0, Q4_K and Q6_K.
pub(super) const fn table() -> Kernels {
    use GgmlType::*;
    let mut t = super::kernel::scalar_table();
    macro_rules! blocks {
        ($($ty:ident => $kernel:ident),*) => {
            $(t.types[$ty as usize].vec_dot = Some(|_, a, b| $kernel(cast_slice(a), cast_slice(b)));)*
        };
    }
    blocks!(Q8_0 => q8_0_q8_0, Q4_0 => q4_0_q8_0, Q4_1 => q4_1_q8_1, Q5_0 => q5_0_q8_0, Q5_1 => q5_1_q8_1,
        Q2_K => q2_k_q8_k, Q3_K => q3_k_q8_k, Q4_K => q4_k_q8_k, Q5_K => q5_k_q8_k, Q6_K => q6_k_q8_k);
    t.types[F32 as usize].vec_dot = Some(f32_dot);
    t.types[F32 as usize].float_gemm = Some(simd::gemm_f32);
    t.types[F16 as usize].float_gemm = Some(simd::gemm_f16);
    t.name = "simd128";
    t.f16_to_f32 = simd::f16_to_f32;
    t.gelu = simd::gelu;
    t.gelu_back = simd::gelu_back;
    t.out_prod_panel = simd::out_prod_panel;
    t.q8_0_group = simd::q8_0_group;
    t.exp_sum = simd::exp_sum;
    t.max = simd::max;
    t.types[F16 as usize].vec_dot = Some(f16_dot);
    t.types[BF16 as usize].vec_dot = Some(bf16_dot);
    t.types[Q8_0 as usize].from_float = Some(quantize_q8_0);
    t.types[Q8_0 as usize].gemm = Some(&PANELS);
    t.types[Q4_0 as usize].gemm = Some(&PANELS_Q4_0);
    t.types[Q5_0 as usize].gemm = Some(&PANELS);
    t.types[Q4_1 as usize].gemm = Some(&affine::GEMMS[0]);
    t.types[Q5_1 as usize].gemm = Some(&affine::GEMMS[1]);
    t.types[Q2_K as usize].gemm = Some(&kquants::GEMMS[0]);
    t.types[Q3_K as usize].gemm = Some(&kquants::GEMMS[1]);
    t.types[Q4_K as usize].gemm = Some(&kquants::GEMMS[2]);
    t.types[Q5_K as usize].gemm = Some(&kquants::GEMMS[3]);
    t.types[Q6_K as usize].gemm = Some(&kquants::GEMMS[4]);
    t.types[Q8_0 as usize].packed = Some(&packed::PACKED_Q8_0);
    t.types[Q4_K as usize].packed = Some(&packed_k::PACKED_Q4_K);
    t.types[Q6_K as usize].packed = Some(&packed_k::PACKED_Q6_K);
    t
}

mod affine;
mod kquants;
mod packed;
mod packed_k;
mod simd;

static PANELS: PromptGemm = PromptGemm {
    name: "simd128 i16 panels",
    rows: gemm_rows,
    needs_plain: false,
    wants_sums: false,
    chunk: crate::cpu::arch::L1_CHUNK,
};
/// With relaxed SIMD, Q4_0 takes the relaxed dot product on its nibbles, which needs the
/// block sums of b for the -8 offset.
#[cfg(target_feature = "relaxed-simd")]
static PANELS_Q4_0: PromptGemm = PromptGemm {
    name: "simd128 nibble panels (relaxed dot)",
    rows: gemm_rows,
    needs_plain: false,
    wants_sums: true,
    chunk: crate::cpu::arch::L1_CHUNK,
};
#[cfg(not(target_feature = "relaxed-simd"))]
static PANELS_Q4_0: PromptGemm = PromptGemm {
    name: "simd128 i16 panels",
    rows: gemm_rows,
    needs_plain: false,
    wants_sums: false,
    chunk: crate::cpu::arch::L1_CHUNK,
};

#[inline(always)]
fn load<T>(s: &[T]) -> v128 {
    assert!(core::mem::size_of_val(s) >= 16);
    // SAFETY: at least 16 readable bytes (checked above); v128.load has no alignment need.
    unsafe { v128_load(s.as_ptr() as *const v128) }
}

/// Σ x·y of 16 i8 pairs into 4 i32 lanes (exact).
#[inline(always)]
fn dot_i8(x: v128, y: v128) -> v128 {
    i32x4_add(
        i32x4_extadd_pairwise_i16x8(i16x8_extmul_low_i8x16(x, y)),
        i32x4_extadd_pairwise_i16x8(i16x8_extmul_high_i8x16(x, y)),
    )
}

/// `scale · Σ x·y` of 16 pairs whose products fit i16, into 4 i32 lanes (exact).
#[inline(always)]
fn dot_i8_scaled(x: v128, y: v128, scale: i16) -> v128 {
    let s = i16x8_splat(scale);
    i32x4_add(i32x4_dot_i16x8(i16x8_extmul_low_i8x16(x, y), s), i32x4_dot_i16x8(i16x8_extmul_high_i8x16(x, y), s))
}

#[inline(always)]
fn hsum_i32(v: v128) -> i32 {
    let v = i32x4_add(v, i32x4_shuffle::<2, 3, 0, 1>(v, v));
    let v = i32x4_add(v, i32x4_shuffle::<1, 0, 3, 2>(v, v));
    i32x4_extract_lane::<0>(v)
}

/// Lane k of the result = the sum of the lanes of v[k].
#[inline(always)]
fn transpose_sum(v: &[v128; 4]) -> v128 {
    let t0 = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]), i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]));
    let t1 = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]), i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]));
    i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(t0, t1), i32x4_shuffle::<2, 3, 6, 7>(t0, t1))
}

/// Four f16 (in the low 16 bits of u32 lanes) to f32, exactly as
/// [`fp16_to_fp32`]: rescale by 2^112, full exponent for inf/NaN, then the sign.
#[inline(always)]
fn f16x4_to_f32(h: v128) -> v128 {
    let em = i32x4_shl(v128_and(h, u32x4_splat(0x7fff)), 13);
    let scaled = f32x4_mul(em, f32x4_splat(f32::from_bits(0x7780_0000)));
    let special = i32x4_eq(v128_and(h, u32x4_splat(0x7c00)), u32x4_splat(0x7c00));
    let r = v128_bitselect(v128_or(em, u32x4_splat(0x7f80_0000)), scaled, special);
    v128_or(r, i32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16))
}

/// [`f16x4_to_f32`]'s constants in each u32 lane: exponent and mantissa, 2^112 (as f32 bits),
/// the exponent, an f32's all-ones exponent, the sign.
const F16X4_SPLATS: [u32; 5] = [0x7fff, 0x7780_0000, 0x7c00, 0x7f80_0000, 0x8000];
/// [`F16X4_SPLATS`] for [`Kept::read`].
static F16X4_KEPT: Kept<5> = Kept([
    [F16X4_SPLATS[0]; 4],
    [F16X4_SPLATS[1]; 4],
    [F16X4_SPLATS[2]; 4],
    [F16X4_SPLATS[3]; 4],
    [F16X4_SPLATS[4]; 4],
]);

/// [`f16x4_to_f32`] with its constants `k` ([`F16X4_SPLATS`] as vectors) given: the same steps.
/// Kept apart from it: `f16x4_to_f32` written through this one (constant `k`) ran the
/// one-sequence Q4_0 decode step ~10% slower under Node 26's V8 (steps per CPU second).
#[inline(always)]
fn f16x4_to_f32_in(h: v128, k: &[v128; 5]) -> v128 {
    let em = i32x4_shl(v128_and(h, k[0]), 13);
    let scaled = f32x4_mul(em, k[1]);
    let special = i32x4_eq(v128_and(h, k[2]), k[2]);
    let r = v128_bitselect(v128_or(em, k[3]), scaled, special);
    v128_or(r, i32x4_shl(v128_and(h, k[4]), 16))
}

/// Vectors a loop uses, read from memory once per call ([`Kept::read`], before the loop)
/// rather than written as constants: LLVM puts a `v128.const` at every use, and V8's
/// Turboshaft (Node 26's V8 14.6, as Chromium's) builds each anew there, inside the loop
/// (`movq` imm64, `vmovq`, `vpunpcklqdq`, or `movl`, `vmovd`, `vpshufd`: 3 to 4 instructions a
/// use), where a value read once stays in a register or one memory operand away (as
/// `simd::F16Consts` and `packed_k`'s nibble mask). 16-byte aligned u32 lanes.
#[repr(align(16))]
struct Kept<const N: usize>([[u32; 4]; N]);

impl<const N: usize> Kept<N> {
    #[inline(always)]
    fn read(&'static self) -> [v128; N] {
        // SAFETY: N readable vectors, 16-byte aligned (repr); a volatile read, so LLVM cannot
        // turn it back into a constant.
        core::array::from_fn(|i| unsafe { core::ptr::read_volatile(self.0[i].as_ptr() as *const v128) })
    }
}

/// A legacy block's nibble mask (0x0F in each byte) and Q4_0's offset (8 in each byte), for
/// [`Kept::read`].
static NIBBLE_KEPT: Kept<2> = Kept([[0x0F0F_0F0F; 4], [0x0808_0808; 4]]);

/// [`f16x4_finite`]'s constants (the f16's exponent and mantissa after the shift, the
/// exponent's rebias 112 << 23, 2^-14, the sign), for a [`Kept`] read once per group: written
/// as constants, V8 rebuilt them in every block step (3 to 4 instructions a use).
const F16_K: [[u32; 4]; 4] = [[0x0fff_e000; 4], [112 << 23; 4], [0x3880_0000; 4], [0x8000_0000; 4]];

/// [`F16_K`] for [`Kept::read`].
static F16_KEPT: Kept<4> = Kept(F16_K);

/// [`F16_K`] as read ([`Kept::read`]).
type F16K = [v128; 4];

/// The four f16 at `p` (8 bytes) as f32, for scales that hold no inf or NaN
/// ([`crate::cpu::arch::repack::pack`] leaves matrices with such a scale in ggml's layout):
/// [`f16x4_to_f32`]'s bits (ggml's `fp16_to_fp32`) for every finite f16, without a subnormal
/// f32 as an operand. Multiplying the shifted bits by 2^112 (this function's former form) makes
/// a subnormal f32 of a subnormal f16 (exponent 0), and an x86 core without DAZ (wasm keeps
/// IEEE subnormals) takes a microcode assist of ~100+ cycles on such a product: 16% of the
/// Q8_0 scales of GPT-2's `attn_output` and `ffn_down` are subnormal f16 (their weights are
/// ~5× smaller than the other matrices'), half their 4-row blocks hold one, and those two
/// products ran at less than half the others' rate per byte (BENCHMARKS.md 2026-12-07,
/// "Subnormal block scales"). Here the exponent is rebiased as an integer (`n`: the value itself
/// for exponents ≥ 1, 2^-15·(1 + m/1024) for exponent 0), and `2n − 2^-14` is `m·2^-24`, the
/// subnormal's value, exactly, and below `n` only for exponent 0: the smaller of the two is
/// the magnitude (zero for ±0), then the sign. Every operand is normal (≥ 2^-15) and every
/// result 0 or ≥ 2^-24. `k`: [`F16_K`] as read.
///
/// # Safety
/// `p` points at 8 readable bytes.
#[inline(always)]
unsafe fn f16x4_finite(p: *const u8, k: &F16K) -> v128 {
    let [mag, bias, m14, sign] = *k;
    let h = i32x4_load_extend_i16x4(p as *const i16);
    let n = i32x4_add(v128_and(i32x4_shl(h, 13), mag), bias);
    let t = f32x4_sub(f32x4_add(n, n), m14);
    v128_or(f32x4_pmin(n, t), v128_and(h, sign))
}

/// Reads one byte of each 64-byte line of the `len` bytes `ahead` bytes past address `at` (each
/// at most `last`, the weights' last byte): wasm has no prefetch instruction, and a packed
/// decode kernel read its weights from memory at about half its in-cache rate; a load that
/// nothing waits on starts the line's fill early, as a prefetch would. Called once per block
/// step of a kernel (`len`: the step's block; `ahead`: tuned per kernel, [`packed`],
/// [`packed_k`]). Changes no value.
///
/// # Safety
/// Every address from `at` to `last` lies inside one allocation (the weights).
#[inline(always)]
unsafe fn touch_ahead(at: usize, len: usize, ahead: usize, last: usize) {
    for i in 0..len.div_ceil(64) {
        core::ptr::read_volatile((at + ahead + 64 * i).min(last) as *const u8);
    }
}

#[inline(always)]
fn f16x4(h: [u16; 4]) -> v128 {
    f16x4_to_f32(u32x4(h[0] as u32, h[1] as u32, h[2] as u32, h[3] as u32))
}

/// [`f16x4`] with [`f16x4_to_f32_in`]'s constants given.
#[inline(always)]
fn f16x4_in(h: [u16; 4], k: &[v128; 5]) -> v128 {
    f16x4_to_f32_in(u32x4(h[0] as u32, h[1] as u32, h[2] as u32, h[3] as u32), k)
}

/// Scalar contributions of the blocks past the last whole group of 8, then the lanes'
/// sum.
#[inline(always)]
fn finish<X, Y>(lo: v128, hi: v128, x: &[X], y: &[Y], block: impl Fn(&X, &Y) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    // SAFETY: 8 f32 of room for two unaligned 16-byte stores.
    unsafe {
        v128_store(acc.as_mut_ptr() as *mut v128, lo);
        v128_store(acc.as_mut_ptr().add(4) as *mut v128, hi);
    }
    let done = x.len() - x.len() % LANES;
    for b in done..x.len() {
        acc[b % LANES] += block(&x[b], &y[b]);
    }
    reduce8(&acc)
}

/// The 32 nibbles of a legacy block: (elements 0..16, elements 16..32), as u8.
#[inline(always)]
fn nibbles(qs: &[u8; 16]) -> (v128, v128) {
    let q = load(qs);
    (v128_and(q, u8x16_splat(0x0F)), u8x16_shr(q, 4))
}

/// [`nibbles`] of the 16 bytes `q` with the mask 0x0F in each byte given (`m0f`, read once
/// per call: [`NIBBLE_KEPT`]): the same values (a u16 shift by 4 then the mask is a u8 shift).
#[inline(always)]
fn nibbles_in(q: v128, m0f: v128) -> (v128, v128) {
    (v128_and(q, m0f), v128_and(u16x8_shr(q, 4), m0f))
}

/// 5-bit quants of a Q5 block: nibbles plus bit j of `qh` as 0x10 in byte j.
#[inline(always)]
fn q5(qs: &[u8; 16], qh: u32) -> (v128, v128) {
    let (lo, hi) = nibbles(qs);
    let h = u32x4_splat(qh);
    let bits = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    let spread_lo = i8x16_swizzle(h, u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    let spread_hi = i8x16_swizzle(h, u8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    let top = |s: v128| v128_and(i8x16_eq(v128_and(s, bits), bits), u8x16_splat(0x10));
    (v128_or(lo, top(spread_lo)), v128_or(hi, top(spread_hi)))
}

/// The `d_x·d_y·Σ` kernels: `$isum` is a block's i32x4 of partial sums.
macro_rules! symmetric_kernel {
    ($name:ident, $X:ty, $block:path, |$x:ident, $y:ident| $isum:expr) => {
        fn $name(xs: &[$X], ys: &[BlockQ8_0]) -> f32 {
            let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
            for (xg, yg) in xs.chunks_exact(LANES).zip(ys.chunks_exact(LANES)) {
                let mut v = [i32x4_splat(0); LANES];
                for k in 0..LANES {
                    let ($x, $y) = (&xg[k], &yg[k]);
                    v[k] = $isum;
                }
                for (h, acc) in [&mut lo, &mut hi].into_iter().enumerate() {
                    let s = f32x4_convert_i32x4(transpose_sum(&[v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]]));
                    let dx = f16x4(core::array::from_fn(|k| xg[4 * h + k].d()));
                    let dy = f16x4(core::array::from_fn(|k| yg[4 * h + k].d()));
                    *acc = f32x4_add(*acc, f32x4_mul(s, f32x4_mul(dx, dy)));
                }
            }
            finish(lo, hi, xs, ys, $block)
        }
    };
}

symmetric_kernel!(q8_0_q8_0, BlockQ8_0, scalar::dot_q8_0_block, |x, y| i32x4_add(
    dot_i8(load(&x.qs[..16]), load(&y.qs[..16])),
    dot_i8(load(&x.qs[16..]), load(&y.qs[16..]))
));
symmetric_kernel!(q4_0_q8_0, BlockQ4_0, scalar::dot_q4_0_block, |x, y| {
    let (lo, hi) = nibbles(&x.qs);
    let eight = i8x16_splat(8);
    i32x4_add(dot_i8(i8x16_sub(lo, eight), load(&y.qs[..16])), dot_i8(i8x16_sub(hi, eight), load(&y.qs[16..])))
});
symmetric_kernel!(q5_0_q8_0, BlockQ5_0, scalar::dot_q5_0_block, |x, y| {
    let (lo, hi) = q5(&x.qs, x.qh());
    let sixteen = i8x16_splat(16);
    i32x4_add(dot_i8(i8x16_sub(lo, sixteen), load(&y.qs[..16])), dot_i8(i8x16_sub(hi, sixteen), load(&y.qs[16..])))
});

/// The `d·q + m` kernels against Q8_1: `(dx·dy)·Σq·y + m·s_y` per block.
macro_rules! affine_kernel {
    ($name:ident, $X:ty, $block:path, |$x:ident| $q:expr) => {
        fn $name(xs: &[$X], ys: &[BlockQ8_1]) -> f32 {
            let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
            for (xg, yg) in xs.chunks_exact(LANES).zip(ys.chunks_exact(LANES)) {
                let mut v = [i32x4_splat(0); LANES];
                for k in 0..LANES {
                    let $x = &xg[k];
                    let (q0, q1): (v128, v128) = $q;
                    let (y0, y1) = (load(&yg[k].qs[..16]), load(&yg[k].qs[16..]));
                    v[k] = i32x4_add(dot_i8(q0, y0), dot_i8(q1, y1));
                }
                for (h, acc) in [&mut lo, &mut hi].into_iter().enumerate() {
                    let four = |v: &[v128; LANES]| [v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]];
                    let s = f32x4_convert_i32x4(transpose_sum(&four(&v)));
                    let dx = f16x4(core::array::from_fn(|k| xg[4 * h + k].d()));
                    let mx = f16x4(core::array::from_fn(|k| xg[4 * h + k].m()));
                    let dy = f16x4(core::array::from_fn(|k| yg[4 * h + k].d()));
                    let sy = f16x4(core::array::from_fn(|k| yg[4 * h + k].s()));
                    let c = f32x4_add(f32x4_mul(s, f32x4_mul(dx, dy)), f32x4_mul(mx, sy));
                    *acc = f32x4_add(*acc, c);
                }
            }
            finish(lo, hi, xs, ys, $block)
        }
    };
}

affine_kernel!(q4_1_q8_1, BlockQ4_1, scalar::dot_q4_1_block, |x| nibbles(&x.qs));
affine_kernel!(q5_1_q8_1, BlockQ5_1, scalar::dot_q5_1_block, |x| q5(&x.qs, x.qh()));

fn q4_k_q8_k(xs: &[BlockQ4_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let mask = u8x16_splat(0x0F);
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let (sc, m) = x.scales_mins();
        let mut isum = i32x4_splat(0);
        for c in 0..4 {
            let (sl, sh) = (sc[2 * c] as i16, sc[2 * c + 1] as i16);
            for p in 0..2 {
                let q = load(&x.qs[32 * c + 16 * p..]);
                let ylo = load(&y.qs[64 * c + 16 * p..]);
                let yhi = load(&y.qs[64 * c + 32 + 16 * p..]);
                isum = i32x4_add(isum, dot_i8_scaled(v128_and(q, mask), ylo, sl));
                isum = i32x4_add(isum, dot_i8_scaled(u8x16_shr(q, 4), yhi, sh));
            }
        }
        acc[b % LANES] += scalar::q4_k_block(hsum_i32(isum), scalar::q4_k_summ(&m, y), x, y.d());
    }
    reduce8(&acc)
}

fn q2_k_q8_k(xs: &[BlockQ2_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let m3 = u8x16_splat(3);
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let mut isum = i32x4_splat(0);
        for half in 0..2 {
            for p in 0..2 {
                // elements 128·half + 32k + 16p .. +16: sub-block 8·half + 2k + p
                let qs = load(&x.qs[32 * half + 16 * p..]);
                for k in 0..4 {
                    let q = v128_and(u8x16_shr(qs, 2 * k as u32), m3);
                    let yv = load(&y.qs[128 * half + 32 * k + 16 * p..]);
                    let j = 8 * half + 2 * k + p;
                    isum = i32x4_add(isum, dot_i8_scaled(q, yv, (x.scales[j] & 0xF) as i16));
                }
            }
        }
        acc[b % LANES] += scalar::qk_min_block(hsum_i32(isum), scalar::q2_k_summ(x, y), x.d(), x.dmin(), y.d());
    }
    reduce8(&acc)
}

fn q3_k_q8_k(xs: &[BlockQ3_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let (m3, m1, four) = (u8x16_splat(3), u8x16_splat(1), i8x16_splat(4));
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let sc = x.scales6();
        let mut isum = i32x4_splat(0);
        for half in 0..2 {
            for p in 0..2 {
                let qs = load(&x.qs[32 * half + 16 * p..]);
                let hm = load(&x.hmask[16 * p..]);
                for k in 0..4 {
                    let low = v128_and(u8x16_shr(qs, 2 * k as u32), m3);
                    let high = i8x16_shl(v128_and(u8x16_shr(hm, (4 * half + k) as u32), m1), 2);
                    let q = i8x16_sub(v128_or(low, high), four); // -4..4: products fit i16
                    let yv = load(&y.qs[128 * half + 32 * k + 16 * p..]);
                    let j = 8 * half + 2 * k + p;
                    isum = i32x4_add(isum, dot_i8_scaled(q, yv, sc[j] as i16 - 32));
                }
            }
        }
        acc[b % LANES] += scalar::q3_k_block(hsum_i32(isum), x.d(), y.d());
    }
    reduce8(&acc)
}

fn q5_k_q8_k(xs: &[BlockQ5_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let (mask, m1) = (u8x16_splat(0x0F), u8x16_splat(1));
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let (sc, m) = scales_mins_k4(&x.scales);
        let mut isum = i32x4_splat(0);
        for c in 0..4 {
            let (sl, sh) = (sc[2 * c] as i16, sc[2 * c + 1] as i16);
            for p in 0..2 {
                let q = load(&x.qs[32 * c + 16 * p..]);
                let qh = load(&x.qh[16 * p..]);
                let hlo = i8x16_shl(v128_and(u8x16_shr(qh, 2 * c as u32), m1), 4);
                let hhi = i8x16_shl(v128_and(u8x16_shr(qh, 2 * c as u32 + 1), m1), 4);
                let ylo = load(&y.qs[64 * c + 16 * p..]);
                let yhi = load(&y.qs[64 * c + 32 + 16 * p..]);
                isum = i32x4_add(isum, dot_i8_scaled(v128_or(v128_and(q, mask), hlo), ylo, sl));
                isum = i32x4_add(isum, dot_i8_scaled(v128_or(u8x16_shr(q, 4), hhi), yhi, sh));
            }
        }
        acc[b % LANES] += scalar::qk_min_block(hsum_i32(isum), scalar::q4_k_summ(&m, y), x.d(), x.dmin(), y.d());
    }
    reduce8(&acc)
}

fn q6_k_q8_k(xs: &[BlockQ6_K], ys: &[BlockQ8_K]) -> f32 {
    let mut acc = [0f32; LANES];
    let (m4, m3, off) = (u8x16_splat(0x0F), u8x16_splat(3), i8x16_splat(32));
    for (b, (x, y)) in xs.iter().zip(ys).enumerate() {
        let mut isum = i32x4_splat(0);
        for half in 0..2 {
            for p in 0..2 {
                // elements 128·half + 32k + 16p .. +16: sub-block 8·half + 2k + p
                let ql0 = load(&x.ql[64 * half + 16 * p..]);
                let ql1 = load(&x.ql[64 * half + 32 + 16 * p..]);
                let qh = load(&x.qh[32 * half + 16 * p..]);
                let low = [v128_and(ql0, m4), v128_and(ql1, m4), u8x16_shr(ql0, 4), u8x16_shr(ql1, 4)];
                for (k, low) in low.into_iter().enumerate() {
                    let high = i8x16_shl(v128_and(u8x16_shr(qh, 2 * k as u32), m3), 4);
                    let q = i8x16_sub(v128_or(low, high), off); // -32..32: products fit i16
                    let yv = load(&y.qs[128 * half + 32 * k + 16 * p..]);
                    let j = 8 * half + 2 * k + p;
                    isum = i32x4_add(isum, dot_i8_scaled(q, yv, x.scales[j] as i16));
                }
            }
        }
        acc[b % LANES] += scalar::q6_k_block(hsum_i32(isum), x, y.d());
    }
    reduce8(&acc)
}

/// Float dot products: 8 elements per step in two f32x4 (lanes 0..4, 4..8), product then
/// add, the tail through the scalar lanes.
macro_rules! float_kernel {
    ($name:ident, $w:literal, |$b8:ident| $load:expr, |$b:ident| $get:expr) => {
        fn $name(n: usize, x: &[u8], y: &[u8]) -> f32 {
            let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
            let main = n - n % LANES;
            for i in (0..main).step_by(LANES) {
                let load8 = |$b8: &[u8]| -> (v128, v128) { $load };
                let (x0, x1) = load8(&x[$w * i..$w * (i + LANES)]);
                let (y0, y1) = load8(&y[$w * i..$w * (i + LANES)]);
                lo = f32x4_add(lo, f32x4_mul(x0, y0));
                hi = f32x4_add(hi, f32x4_mul(x1, y1));
            }
            let mut acc = [0f32; LANES];
            // SAFETY: 8 f32 of room for two unaligned 16-byte stores.
            unsafe {
                v128_store(acc.as_mut_ptr() as *mut v128, lo);
                v128_store(acc.as_mut_ptr().add(4) as *mut v128, hi);
            }
            let get = |$b: &[u8]| -> f32 { $get };
            for i in main..n {
                acc[i % LANES] += get(&x[$w * i..$w * i + $w]) * get(&y[$w * i..$w * i + $w]);
            }
            reduce8(&acc)
        }
    };
}

float_kernel!(f32_dot, 4, |b| (load(&b[..16]), load(&b[16..])), |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
float_kernel!(
    f16_dot,
    2,
    |b| {
        let h = load(b);
        (f16x4_to_f32(u32x4_extend_low_u16x8(h)), f16x4_to_f32(u32x4_extend_high_u16x8(h)))
    },
    |b| fp16_to_fp32(u16::from_le_bytes([b[0], b[1]]))
);
float_kernel!(
    bf16_dot,
    2,
    |b| {
        let h = load(b);
        (i32x4_shl(u32x4_extend_low_u16x8(h), 16), i32x4_shl(u32x4_extend_high_u16x8(h), 16))
    },
    |b| bf16_to_fp32(u16::from_le_bytes([b[0], b[1]]))
);

/// [`super::gemm`] for Q8_0 and Q4_0 (see the x86 version): quants widened to i16 once
/// (each row of `a` per row, each row of `b` per call) so that every pair of rows costs one
/// `i32x4.dot_i16x8_s` per 8 products (exact: two i16 products summed in i32), instead of
/// the sign extensions and multiplies of `extmul` per pair; scales converted once.
///
/// From [`PANEL_MIN_N`] rows of b on (a prompt), rows of a are packed into panels, 4 rows
/// across the lanes ([`panel_gemm`]): no horizontal sums, and 8 rows × 4 rows of b per pass
/// fit V8's registers (~1.45× the row tiles below on a 64-token prompt). For fewer rows of
/// b (a decode step), pairs go in register tiles of [`MR`] rows of a × [`NR`] rows of b
/// ([`tile_dot`]), so each loaded vector serves several products; pairs outside whole
/// tiles through [`row_dot`].
pub(super) fn gemm_rows(g: &GemmArgs, c: &mut [f32]) {
    gemm_rows_form(false, g, c)
}

/// [`gemm_rows`] on weights repacked at load ([`super::repack`]): `m` rows of whole groups and
/// at least [`PANEL_MIN_N`] rows of b, so the panel kernels, whose panels are the groups.
pub(super) fn gemm_rows_packed(g: &GemmArgs, c: &mut [f32]) {
    let cols = g.cols;
    assert!(
        g.ty == GgmlType::Q8_0
            && g.m.is_multiple_of(PANEL)
            && cols.plain.len() >= PANEL_MIN_N
            && !cols.plain.contains(&true)
    );
    gemm_rows_form(true, g, c)
}

#[inline(always)]
fn gemm_rows_form(packed: bool, g: &GemmArgs, c: &mut [f32]) {
    let GemmArgs { ty, nb, m, a, lda, b, ldb, cols, ldc, .. } = *g;
    let nbp = cols.nbp;
    let n = cols.plain.len();
    // A decode step of 2 to 4 sequences: each row of a read once, its nibbles split once for
    // the rows of b (decode_nibbles_n); packing 4 rows into panels per call cost as much as
    // their products here.
    #[cfg(target_feature = "relaxed-simd")]
    if ty == GgmlType::Q4_0 && (2..=DECODE_MAX_N).contains(&n) && !cols.plain.contains(&true) {
        return match n {
            2 => decode_nibbles_n::<2>(nb, m, a, lda, b, ldb, cols, c, ldc),
            3 => decode_nibbles_n::<3>(nb, m, a, lda, b, ldb, cols, c, ldc),
            _ => decode_nibbles_n::<4>(nb, m, a, lda, b, ldb, cols, c, ldc),
        };
    }
    #[cfg(target_feature = "relaxed-simd")]
    if ty == GgmlType::Q4_0 && n >= PANEL_MIN_N && !cols.plain.contains(&true) {
        let mut form = NibblePanels { b, ldb, ysum: &cols.ysum, nbp };
        // Rows past the last whole panel: as vec_dot (the same bits).
        let rest = |i: usize, c: &mut [f32]| {
            for j in 0..n {
                c[j * ldc + i] = q4_0_q8_0(
                    cast_slice(&a[i * lda..i * lda + nb * core::mem::size_of::<BlockQ4_0>()]),
                    cast_slice(&b[j * ldb..j * ldb + nb * core::mem::size_of::<BlockQ8_0>()]),
                );
            }
        };
        return panel_gemm(&mut form, nb, m, a, lda, cols, c, ldc, rest);
    }
    // A decode step of the relaxed build's Q4_0 kernel reads b's quants as they are: no
    // widened copy (decode_rows takes none for it).
    #[cfg(target_feature = "relaxed-simd")]
    if ty == GgmlType::Q4_0 && n == 1 && !cols.plain[0] {
        return decode_rows(ty, nb, m, a, lda, b, &[], cols, c);
    }
    // Q8_0 where the relaxed dot multiplies u8 by i8 exactly (AVX-VNNI's `vpdpbusd` under
    // V8): one instruction per 16 products instead of two per 8.
    #[cfg(target_feature = "relaxed-simd")]
    if ty == GgmlType::Q8_0 && n >= PANEL_MIN_N && !cols.plain.contains(&true) && u8_dot_exact() {
        let mut form = U8Panels::new(nb, n, b, ldb, packed);
        // Rows past the last whole panel: as vec_dot (the same bits).
        let rest = |i: usize, c: &mut [f32]| {
            let size = core::mem::size_of::<BlockQ8_0>();
            for j in 0..n {
                c[j * ldc + i] = q8_0_q8_0(
                    cast_slice(&a[i * lda..i * lda + nb * size]),
                    cast_slice(&b[j * ldb..j * ldb + nb * size]),
                );
            }
        };
        return panel_gemm(&mut form, nb, m, a, lda, cols, c, ldc, rest);
    }
    // Rows of b as i16: 4 vectors of 8 per block.
    let mut yw = alloc::vec![i16x8_splat(0); n * nb * 4];
    for j in 0..n {
        let ys: &[BlockQ8_0] = cast_slice(&b[j * ldb..j * ldb + nb * core::mem::size_of::<BlockQ8_0>()]);
        for (t, y) in ys.iter().enumerate() {
            widen(load(&y.qs[..16]), load(&y.qs[16..]), &mut yw[(j * nb + t) * 4..]);
        }
    }
    // Columns the products take (on wasm, every one: `plain` is never marked here).
    let js: alloc::vec::Vec<usize> = (0..n).filter(|&j| !cols.plain[j]).collect();
    // A decode step of 2 or 3 sequences on Q4_0: each row's blocks unpacked and widened once
    // in registers for the rows of b (decode_rows_n), not widened into memory per row
    // (row_dot). At 4 the panels stay: this form ran a 4-sequence Q4_0 step ~10% slower, and
    // its kernel no faster with N accumulators live (q4n: 2.6-3.0 GB/s against 2.9-3.0).
    #[cfg(not(target_feature = "relaxed-simd"))]
    if ty == GgmlType::Q4_0 && (2..PANEL_MIN_N).contains(&n) && js.len() == n {
        return match n {
            2 => decode_rows_n::<2>(nb, m, a, lda, &yw, cols, c, ldc),
            _ => decode_rows_n::<3>(nb, m, a, lda, &yw, cols, c, ldc),
        };
    }
    if n >= PANEL_MIN_N && js.len() == n {
        let mut form = I16Panels { ty, packed, yw: &yw };
        // Rows past the last whole panel: row_dot (the same bits).
        let (mut xw, mut dx) = (alloc::vec![i16x8_splat(0); nb * 4], alloc::vec![0f32; nbp]);
        let rest = |i: usize, c: &mut [f32]| {
            widen_row(ty, nb, &a[i * lda..], &mut xw, &mut dx);
            for j in 0..n {
                c[j * ldc + i] =
                    row_dot(nb, &xw, &dx, &yw[j * nb * 4..(j + 1) * nb * 4], &cols.dy[j * nbp..(j + 1) * nbp]);
            }
        };
        return panel_gemm(&mut form, nb, m, a, lda, cols, c, ldc, rest);
    }
    if n == 1 && js.len() == 1 {
        return decode_rows(ty, nb, m, a, lda, b, &yw, cols, c);
    }
    let mut dx = alloc::vec![0f32; MR * nbp];
    let mut xw = alloc::vec![i16x8_splat(0); MR * nb * 4];
    // Row of a at step s: the decode order (super::decode_row) for one row of b.
    let row_at = |s: usize| if n == 1 { super::decode_row(s, m) } else { s };
    let mut i0 = 0;
    while i0 < m {
        let mr = MR.min(m - i0);
        for r in 0..mr {
            let row = &a[row_at(i0 + r) * lda..];
            widen_row(ty, nb, row, &mut xw[r * nb * 4..(r + 1) * nb * 4], &mut dx[r * nbp..]);
        }
        let yrow = |j: usize| &yw[j * nb * 4..(j + 1) * nb * 4];
        let dyrow = |j: usize| &cols.dy[j * nbp..(j + 1) * nbp];
        let mut q = 0;
        if mr == MR {
            let xs: [&[v128]; MR] = core::array::from_fn(|r| &xw[r * nb * 4..(r + 1) * nb * 4]);
            let dxs: [&[f32]; MR] = core::array::from_fn(|r| &dx[r * nbp..(r + 1) * nbp]);
            while q + NR <= js.len() {
                let jj: [usize; NR] = core::array::from_fn(|t| js[q + t]);
                let out = tile_dot::<MR, NR>(nb, xs, dxs, jj.map(yrow), jj.map(dyrow));
                for r in 0..MR {
                    for (t, &j) in jj.iter().enumerate() {
                        c[j * ldc + i0 + r] = out[r][t];
                    }
                }
                q += NR;
            }
        }
        // Edges: pairs outside whole tiles.
        for r in 0..mr {
            let (xr, dxr) = (&xw[r * nb * 4..(r + 1) * nb * 4], &dx[r * nbp..(r + 1) * nbp]);
            for &j in &js[if mr == MR { q } else { 0 }..] {
                c[j * ldc + row_at(i0 + r)] = row_dot(nb, xr, dxr, yrow(j), dyrow(j));
            }
        }
        i0 += mr;
    }
}

/// One row of b (a decode step). Each row of a is read once, so its quants are widened in
/// registers and dotted at once, not widened into memory and read back ([`widen_row`]),
/// and its scales are converted four at a time; rows in [`super::decode_row`]'s order.
/// With relaxed SIMD, Q4_0's nibbles go straight into `relaxed_dot_i8x16_i7x16` (see
/// [`NibblePanels`]). The float steps are [`row_dot`]'s in its order, so every result has
/// row_dot's bits (= `vec_dot`'s). `yw` is b widened to i16, which only the relaxed
/// Q4_0 kernel does without (it is then empty).
#[allow(clippy::too_many_arguments)]
fn decode_rows(
    ty: GgmlType,
    nb: usize,
    m: usize,
    a: &[u8],
    lda: usize,
    b: &[u8],
    yw: &[v128],
    cols: &super::ColPrep,
    c: &mut [f32],
) {
    let dy = &cols.dy[..cols.nbp];
    #[cfg(not(target_feature = "relaxed-simd"))]
    let _ = b;
    // The nibble mask, Q4_0's offset and the f16 constants read once ([`Kept`]): as constants
    // V8 rebuilt them at every use inside the block loop (~60 instructions per 8 Q4_0 blocks).
    let [m0f, eight] = NIBBLE_KEPT.read();
    let f16k = F16X4_KEPT.read();
    for s in 0..m {
        let i = super::decode_row(s, m);
        let row = &a[i * lda..];
        c[i] = match ty {
            GgmlType::Q4_0 => {
                let xs: &[BlockQ4_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ4_0>()]);
                #[cfg(target_feature = "relaxed-simd")]
                {
                    let ys: &[BlockQ8_0] = cast_slice(&b[..nb * core::mem::size_of::<BlockQ8_0>()]);
                    let _ = eight;
                    decode_dot_nibbles(xs, ys, &cols.ysum[..cols.nbp], dy, m0f, &f16k)
                }
                #[cfg(not(target_feature = "relaxed-simd"))]
                {
                    decode_dot(xs, yw, dy, &f16k, BlockQ4_0::d, |x| {
                        let (lo, hi) = nibbles_in(load(&x.qs), m0f);
                        (i8x16_sub(lo, eight), i8x16_sub(hi, eight))
                    })
                }
            }
            GgmlType::Q5_0 => {
                let xs: &[BlockQ5_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ5_0>()]);
                let sixteen = i8x16_splat(16);
                decode_dot(xs, yw, dy, &f16k, BlockQ5_0::d, |x| {
                    let (lo, hi) = q5(&x.qs, x.qh());
                    (i8x16_sub(lo, sixteen), i8x16_sub(hi, sixteen))
                })
            }
            _ => {
                let xs: &[BlockQ8_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ8_0>()]);
                decode_dot(xs, yw, dy, &f16k, BlockQ8_0::d, |x| (load(&x.qs[..16]), load(&x.qs[16..])))
            }
        };
    }
}

/// [`decode_rows`] of Q4_0 against N = 2 to 4 rows of b (`yw`: each widened, `nb` blocks a
/// row) in the plain build: per row of a (in [`super::decode_row`]'s order), 4 blocks at a
/// time widened once for the N rows of b ([`packed::rows_shared`]: their sums as
/// [`transpose_sum`] gives them), then each row of b's float steps as [`decode_dot`]'s: every
/// result has `vec_dot`'s bits.
#[cfg(not(target_feature = "relaxed-simd"))]
#[allow(clippy::too_many_arguments)]
fn decode_rows_n<const N: usize>(
    nb: usize,
    m: usize,
    a: &[u8],
    lda: usize,
    yw: &[v128],
    cols: &super::ColPrep,
    c: &mut [f32],
    ldc: usize,
) {
    let nbp = cols.nbp;
    assert!(yw.len() >= 4 * nb * N && cols.dy.len() >= nbp * N && c.len() >= (N - 1) * ldc + m);
    assert!(nbp >= nb.div_ceil(LANES) * LANES);
    let (yp, dyp) = (yw.as_ptr(), cols.dy.as_ptr());
    let [m0f, eight] = NIBBLE_KEPT.read();
    let f16k = F16X4_KEPT.read();
    // Block t of a row, its 32 quants − 8 widened to i16.
    let wide = |x: &BlockQ4_0| -> [v128; 4] {
        let (lo, hi) = nibbles_in(load(&x.qs), m0f);
        widened(i8x16_sub(lo, eight), i8x16_sub(hi, eight))
    };
    // SAFETY (here and below): t < nb reads vectors 4t..4t+4 of row j of yw, o + 4 ≤ nbp
    // scales of row j of dy (asserted).
    let dot = |w: &[v128; 4], t: usize, j: usize| unsafe { dot_wide(*w, yp.add(4 * (j * nb + t))) };
    for s in 0..m {
        let i = super::decode_row(s, m);
        let xs: &[BlockQ4_0] = cast_slice(&a[i * lda..i * lda + nb * core::mem::size_of::<BlockQ4_0>()]);
        // Lanes 0..4 of acc[t % 8] over the row, then lanes 4..8 (as decode_nibbles_n): N
        // float accumulators live, not 2N.
        let mut accs = [[0f32; LANES]; N];
        for h in 0..2 {
            let mut sum = [f32x4_splat(0.0); N];
            for (g, xg) in xs.chunks_exact(LANES).enumerate() {
                let o = LANES * g + 4 * h;
                // Blocks o..o+4 (each with its index), widened once for the N rows of b.
                let s: [v128; N] =
                    packed::rows_shared::<_, N>(|k| (wide(&xg[4 * h + k]), o + k), |(w, t), j| dot(w, *t, j));
                let dx = f16x4_in(core::array::from_fn(|k| xg[4 * h + k].d()), &f16k);
                for j in 0..N {
                    // SAFETY: see `dot`.
                    let dyv = unsafe { v128_load(dyp.add(j * nbp + o) as *const v128) };
                    sum[j] = f32x4_add(sum[j], f32x4_mul(f32x4_convert_i32x4(s[j]), f32x4_mul(dx, dyv)));
                }
            }
            for (acc, sum) in accs.iter_mut().zip(sum) {
                // SAFETY: 4 f32 of room for one unaligned 16-byte store.
                unsafe { v128_store(acc.as_mut_ptr().add(4 * h) as *mut v128, sum) };
            }
        }
        for (j, acc) in accs.iter_mut().enumerate() {
            for t in nb - nb % LANES..nb {
                let x = &xs[t];
                acc[t % LANES] += hsum_i32(dot(&wide(x), t, j)) as f32 * (fp16_to_fp32(x.d()) * cols.dy[j * nbp + t]);
            }
            c[j * ldc + i] = reduce8(acc);
        }
    }
}

/// Σ of 32 i8 (two vectors) times 32 widened activations (4 i16x8 at `y`), in 4 i32 lanes.
///
/// # Safety
/// `y..y+4` must be readable vectors.
#[inline(always)]
pub(super) unsafe fn dot32(lo: v128, hi: v128, y: *const v128) -> v128 {
    dot_wide(widened(lo, hi), y)
}

/// [`row_dot`] of one raw row of a (`quants` gives a block's 32 quants as two i8x16) with
/// one widened row of b; `f16k`: [`F16X4_KEPT`] read.
#[inline(always)]
fn decode_dot<X>(
    xs: &[X],
    yw: &[v128],
    dy: &[f32],
    f16k: &[v128; 5],
    d: impl Fn(&X) -> u16,
    quants: impl Fn(&X) -> (v128, v128),
) -> f32 {
    let nb = xs.len();
    assert!(yw.len() >= 4 * nb && dy.len() >= nb.div_ceil(LANES) * LANES);
    let (yp, dyp) = (yw.as_ptr(), dy.as_ptr());
    let isum = |t: usize, x: &X| {
        let (lo, hi) = quants(x);
        // SAFETY: t < nb: vectors 4t..4t+4 are inside yw (asserted).
        unsafe { dot32(lo, hi, yp.add(4 * t)) }
    };
    let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for (g, xg) in xs.chunks_exact(LANES).enumerate() {
        for (h, acc) in [&mut lo, &mut hi].into_iter().enumerate() {
            let o = LANES * g + 4 * h;
            let v: [v128; 4] = core::array::from_fn(|k| isum(o + k, &xg[4 * h + k]));
            let s = f32x4_convert_i32x4(transpose_sum(&v));
            let dx = f16x4_in(core::array::from_fn(|k| d(&xg[4 * h + k])), f16k);
            // SAFETY: o + 4 ≤ the padded length of dy (asserted).
            let dyv = unsafe { v128_load(dyp.add(o) as *const v128) };
            *acc = f32x4_add(*acc, f32x4_mul(s, f32x4_mul(dx, dyv)));
        }
    }
    let mut acc = [0f32; LANES];
    // SAFETY: 8 f32 of room for two unaligned 16-byte stores.
    unsafe {
        v128_store(acc.as_mut_ptr() as *mut v128, lo);
        v128_store(acc.as_mut_ptr().add(4) as *mut v128, hi);
    }
    for t in nb - nb % LANES..nb {
        acc[t % LANES] += hsum_i32(isum(t, &xs[t])) as f32 * (fp16_to_fp32(d(&xs[t])) * dy[t]);
    }
    reduce8(&acc)
}

/// [`decode_dot`] for Q4_0 with relaxed SIMD: each block is two
/// `relaxed_dot_i8x16_i7x16_add` of the raw Q8_0 bytes of b with the nibbles (0..15, so
/// every implementation gives the exact sums), then `− 8·Σy` per block (`ysum`): the same
/// exact i32 block sums, and the same float steps. `m0f` and `f16k`: [`NIBBLE_KEPT`]'s mask and
/// [`F16X4_KEPT`], read.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn decode_dot_nibbles(
    xs: &[BlockQ4_0],
    ys: &[BlockQ8_0],
    ysum: &[i32],
    dy: &[f32],
    m0f: v128,
    f16k: &[v128; 5],
) -> f32 {
    let nb = xs.len();
    let nbp = nb.div_ceil(LANES) * LANES;
    assert!(ys.len() == nb && ysum.len() >= nbp && dy.len() >= nbp);
    let isum = |x: &BlockQ4_0, y: &BlockQ8_0| nibble_dot(x, y, m0f);
    let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for (g, (xg, yg)) in xs.chunks_exact(LANES).zip(ys.chunks_exact(LANES)).enumerate() {
        for (h, acc) in [&mut lo, &mut hi].into_iter().enumerate() {
            let o = LANES * g + 4 * h;
            let v: [v128; 4] = core::array::from_fn(|k| isum(&xg[4 * h + k], &yg[4 * h + k]));
            let s = i32x4_sub(transpose_sum(&v), i32x4_shl(load(&ysum[o..o + 4]), 3));
            let dx = f16x4_in(core::array::from_fn(|k| xg[4 * h + k].d()), f16k);
            let dyv = load(&dy[o..o + 4]);
            *acc = f32x4_add(*acc, f32x4_mul(f32x4_convert_i32x4(s), f32x4_mul(dx, dyv)));
        }
    }
    let mut acc = [0f32; LANES];
    // SAFETY: 8 f32 of room for two unaligned 16-byte stores.
    unsafe {
        v128_store(acc.as_mut_ptr() as *mut v128, lo);
        v128_store(acc.as_mut_ptr().add(4) as *mut v128, hi);
    }
    nibble_tail(xs, ys, ysum, dy, m0f, &mut acc);
    reduce8(&acc)
}

/// One Q4_0 block against one Q8_0 block with relaxed SIMD: the nibbles (0..15) times b's raw
/// bytes, two `relaxed_dot_i8x16_i7x16_add`, lane sums before the `− 8·Σy` offset.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn nibble_dot(x: &BlockQ4_0, y: &BlockQ8_0, m0f: v128) -> v128 {
    let (lo, hi) = nibbles_in(load(&x.qs), m0f);
    i32x4_relaxed_dot_i8x16_i7x16_add(
        load(&y.qs[16..]),
        hi,
        i32x4_relaxed_dot_i8x16_i7x16_add(load(&y.qs[..16]), lo, i32x4_splat(0)),
    )
}

/// The blocks past the last whole group of [`LANES`] ([`decode_dot_nibbles`] and
/// [`decode_nibbles_n`]), one at a time into `acc[t % 8]`: the same float steps as a group's.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn nibble_tail(xs: &[BlockQ4_0], ys: &[BlockQ8_0], ysum: &[i32], dy: &[f32], m0f: v128, acc: &mut [f32; LANES]) {
    let nb = xs.len();
    for t in nb - nb % LANES..nb {
        let s = hsum_i32(nibble_dot(&xs[t], &ys[t], m0f)) - 8 * ysum[t];
        acc[t % LANES] += s as f32 * (fp16_to_fp32(xs[t].d()) * dy[t]);
    }
}

/// Rows of b up to which the relaxed build's Q4_0 takes [`decode_nibbles_n`] (a decode step of
/// that many sequences), not [`NibblePanels`].
#[cfg(target_feature = "relaxed-simd")]
const DECODE_MAX_N: usize = 4;

/// [`decode_dot_nibbles`] against N = 2 to [`DECODE_MAX_N`] rows of b (`ldb` bytes apart): per
/// row of a (in [`super::decode_row`]'s order), 4 blocks at a time split into nibbles once for
/// the N rows of b and turned ([`transpose4`]) so that lane r holds block r's nibbles; the rows
/// of b are turned the same way once per call (`yt`), so each lane's relaxed dots sum one
/// block, with no [`transpose_sum`] per row of b, and `−8·Σy` (`off`) starts the sums. Lanes
/// 0..4 of the row's `acc[t % 8]` (blocks 8g..8g+4) first, then lanes 4..8 (the row from L1):
/// N float accumulators live, not 2N. The same exact i32 block sums and each row of b's float
/// steps as decode_dot_nibbles': `vec_dot`'s bits.
#[cfg(target_feature = "relaxed-simd")]
#[allow(clippy::too_many_arguments)]
fn decode_nibbles_n<const N: usize>(
    nb: usize,
    m: usize,
    a: &[u8],
    lda: usize,
    b: &[u8],
    ldb: usize,
    cols: &super::ColPrep,
    c: &mut [f32],
    ldc: usize,
) {
    let (nbp, size) = (cols.nbp, core::mem::size_of::<BlockQ8_0>());
    assert!(b.len() >= (N - 1) * ldb + nb * size && c.len() >= (N - 1) * ldc + m);
    assert!(nbp >= nb.div_ceil(LANES) * LANES && cols.dy.len() >= nbp * N && cols.ysum.len() >= nbp * N);
    // Blocks in whole groups of 8, and their groups of 4.
    let (nf, nq) = (nb - nb % LANES, (nb - nb % LANES) / 4);
    // Per row of b and 4 blocks, 8 vectors: vector q's lane r is 4 bytes of block r's quants,
    // 4q.. (q < 4) or 16 + 4(q − 4).. (q ≥ 4), as the nibbles are turned below.
    let mut yt = alloc::vec![i32x4_splat(0); N * nq * 8];
    let mut off = alloc::vec![0i32; N * nbp];
    for j in 0..N {
        let ys: &[BlockQ8_0] = cast_slice(&b[j * ldb..j * ldb + nb * size]);
        for u in 0..nq {
            let y: [&BlockQ8_0; 4] = core::array::from_fn(|r| &ys[4 * u + r]);
            let w = &mut yt[(j * nq + u) * 8..(j * nq + u + 1) * 8];
            w[..4].copy_from_slice(&transpose4(y.map(|y| load(&y.qs[..16]))));
            w[4..].copy_from_slice(&transpose4(y.map(|y| load(&y.qs[16..]))));
        }
        for t in 0..nb {
            off[j * nbp + t] = -8 * cols.ysum[j * nbp + t];
        }
    }
    let (ytp, offp, dyp) = (yt.as_ptr(), off.as_ptr(), cols.dy.as_ptr());
    let [m0f, _] = NIBBLE_KEPT.read();
    let f16k = F16X4_KEPT.read();
    for s in 0..m {
        let i = super::decode_row(s, m);
        let xs: &[BlockQ4_0] = cast_slice(&a[i * lda..i * lda + nb * core::mem::size_of::<BlockQ4_0>()]);
        let mut acc = [[0f32; LANES]; N];
        for h in 0..2 {
            let mut sum = [f32x4_splat(0.0); N];
            for o in (4 * h..nf).step_by(LANES) {
                let xg = &xs[o..o + 4];
                // The 4 blocks' bytes turned, then split: the split is bytewise, so one
                // transpose4 serves both halves.
                let q = transpose4(core::array::from_fn(|r| load(&xg[r].qs))).map(|q| nibbles_in(q, m0f));
                let (lo, hi) = (q.map(|q| q.0), q.map(|q| q.1));
                let dx = f16x4_in(core::array::from_fn(|k| xg[k].d()), &f16k);
                for (j, sum) in sum.iter_mut().enumerate() {
                    // SAFETY: o + 4 ≤ nf ≤ nbp: row j's 8 vectors of blocks o..o+4 in yt, its
                    // offsets and scales o..o+4 (the lengths above and asserted).
                    let (s, dyv) = unsafe {
                        let y = ytp.add((j * nq + o / 4) * 8);
                        // Four chains of two dots: one chain of 8 waited on each dot's latency.
                        let mut p = [
                            v128_load(offp.add(j * nbp + o) as *const v128),
                            i32x4_splat(0),
                            i32x4_splat(0),
                            i32x4_splat(0),
                        ];
                        for k in 0..4 {
                            p[k] = i32x4_relaxed_dot_i8x16_i7x16_add(*y.add(k), lo[k], p[k]);
                        }
                        for k in 0..4 {
                            p[k] = i32x4_relaxed_dot_i8x16_i7x16_add(*y.add(4 + k), hi[k], p[k]);
                        }
                        let s = i32x4_add(i32x4_add(p[0], p[1]), i32x4_add(p[2], p[3]));
                        (s, v128_load(dyp.add(j * nbp + o) as *const v128))
                    };
                    *sum = f32x4_add(*sum, f32x4_mul(f32x4_convert_i32x4(s), f32x4_mul(dx, dyv)));
                }
            }
            for (acc, sum) in acc.iter_mut().zip(sum) {
                // SAFETY: 4 f32 of room for one unaligned 16-byte store.
                unsafe { v128_store(acc.as_mut_ptr().add(4 * h) as *mut v128, sum) };
            }
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            let ys: &[BlockQ8_0] = cast_slice(&b[j * ldb..j * ldb + nb * size]);
            nibble_tail(xs, ys, &cols.ysum[j * nbp..], &cols.dy[j * nbp..], m0f, acc);
            c[j * ldc + i] = reduce8(acc);
        }
    }
}

/// Register tile: rows of a × rows of b per pass over the blocks.
const MR: usize = 2;
const NR: usize = 4;

/// Row of `a` widened to i16 (4 vectors a block) and its scales as f32.
#[inline(always)]
fn widen_row(ty: GgmlType, nb: usize, row: &[u8], xw: &mut [v128], dx: &mut [f32]) {
    match ty {
        GgmlType::Q4_0 => {
            let xs: &[BlockQ4_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ4_0>()]);
            let eight = i8x16_splat(8);
            for (t, x) in xs.iter().enumerate() {
                dx[t] = fp16_to_fp32(x.d());
                let (lo, hi) = nibbles(&x.qs);
                widen(i8x16_sub(lo, eight), i8x16_sub(hi, eight), &mut xw[t * 4..]);
            }
        }
        GgmlType::Q5_0 => {
            let xs: &[BlockQ5_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ5_0>()]);
            let sixteen = i8x16_splat(16);
            for (t, x) in xs.iter().enumerate() {
                dx[t] = fp16_to_fp32(x.d());
                let (lo, hi) = q5(&x.qs, x.qh());
                widen(i8x16_sub(lo, sixteen), i8x16_sub(hi, sixteen), &mut xw[t * 4..]);
            }
        }
        _ => {
            let xs: &[BlockQ8_0] = cast_slice(&row[..nb * core::mem::size_of::<BlockQ8_0>()]);
            for (t, x) in xs.iter().enumerate() {
                dx[t] = fp16_to_fp32(x.d());
                widen(load(&x.qs[..16]), load(&x.qs[16..]), &mut xw[t * 4..]);
            }
        }
    }
}

/// [`row_dot`] for `R`×`C` pairs at once, each x and y vector loaded once for all the pairs
/// it is in. Every pair's integer block sums are exact (any order gives the same i32) and
/// its float steps are row_dot's, in row_dot's order, so each result is row_dot's bits.
#[inline(always)]
fn tile_dot<const R: usize, const C: usize>(
    nb: usize,
    xw: [&[v128]; R],
    dx: [&[f32]; R],
    yw: [&[v128]; C],
    dy: [&[f32]; C],
) -> [[f32; C]; R] {
    let nbp = nb.div_ceil(8) * 8;
    for r in 0..R {
        assert!(xw[r].len() >= 4 * nb && dx[r].len() >= nbp);
    }
    for t in 0..C {
        assert!(yw[t].len() >= 4 * nb && dy[t].len() >= nbp);
    }
    let xp: [*const v128; R] = xw.map(|x| x.as_ptr());
    let yp: [*const v128; C] = yw.map(|y| y.as_ptr());
    let dxp: [*const f32; R] = dx.map(|x| x.as_ptr());
    let dyp: [*const f32; C] = dy.map(|y| y.as_ptr());
    // Block t's i32x4 of partial sums for every pair.
    // SAFETY (here and below): t < nb reads vectors 4t..4t+4, o + 4 ≤ nbp scales, inside
    // the asserted lengths.
    let isum = |t: usize| -> [[v128; C]; R] {
        unsafe {
            let mut s = [[i32x4_splat(0); C]; R];
            for v in 0..4 {
                let x: [v128; R] = core::array::from_fn(|r| *xp[r].add(4 * t + v));
                for c in 0..C {
                    let y = *yp[c].add(4 * t + v);
                    for r in 0..R {
                        s[r][c] = if v == 0 {
                            i32x4_dot_i16x8(x[r], y)
                        } else {
                            i32x4_add(s[r][c], i32x4_dot_i16x8(x[r], y))
                        };
                    }
                }
            }
            s
        }
    };
    let mut lo = [[f32x4_splat(0.0); C]; R];
    let mut hi = [[f32x4_splat(0.0); C]; R];
    for g in 0..nb / LANES {
        for h in 0..2 {
            let o = 8 * g + 4 * h;
            // transpose_sum of the 4 blocks, as two halves so fewer vectors stay live.
            let pair = |t: usize| {
                let (v0, v1) = (isum(t), isum(t + 1));
                let mut p = [[i32x4_splat(0); C]; R];
                for r in 0..R {
                    for c in 0..C {
                        let (a, b) = (v0[r][c], v1[r][c]);
                        p[r][c] = i32x4_add(i32x4_shuffle::<0, 4, 1, 5>(a, b), i32x4_shuffle::<2, 6, 3, 7>(a, b));
                    }
                }
                p
            };
            let (t0, t1) = (pair(o), pair(o + 2));
            let dyv: [v128; C] = core::array::from_fn(|c| unsafe { v128_load(dyp[c].add(o) as *const v128) });
            for r in 0..R {
                let dxv = unsafe { v128_load(dxp[r].add(o) as *const v128) };
                for c in 0..C {
                    let (a, b) = (t0[r][c], t1[r][c]);
                    let s = i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(a, b), i32x4_shuffle::<2, 3, 6, 7>(a, b));
                    let acc = if h == 0 { &mut lo[r][c] } else { &mut hi[r][c] };
                    *acc = f32x4_add(*acc, f32x4_mul(f32x4_convert_i32x4(s), f32x4_mul(dxv, dyv[c])));
                }
            }
        }
    }
    let mut out = [[0f32; C]; R];
    let mut acc = [[[0f32; LANES]; C]; R];
    for r in 0..R {
        for c in 0..C {
            // SAFETY: 8 f32 of room for two unaligned 16-byte stores.
            unsafe {
                v128_store(acc[r][c].as_mut_ptr() as *mut v128, lo[r][c]);
                v128_store(acc[r][c].as_mut_ptr().add(4) as *mut v128, hi[r][c]);
            }
        }
    }
    for t in nb - nb % LANES..nb {
        let s = isum(t);
        for r in 0..R {
            for c in 0..C {
                acc[r][c][t % LANES] += hsum_i32(s[r][c]) as f32 * (dx[r][t] * dy[c][t]);
            }
        }
    }
    for r in 0..R {
        for c in 0..C {
            out[r][c] = reduce8(&acc[r][c]);
        }
    }
    out
}

/// Rows of `a` one panel vector holds: an i16x8 is 4 rows × 2 consecutive k, so
/// `i32x4.dot_i16x8_s` against a splat pair of one row of b gives 4 rows' partial sums at
/// once, with no horizontal sum per block.
const PANEL: usize = 4;
/// Panel tile: [`TP`] panels (8 rows of a) × [`TN`] rows of b: 8 i32x4 sums, 2 panel
/// vectors and one splat live, inside the 15 vector registers V8 hands out (the 2×4 row
/// tile of [`tile_dot`] needs 24 and spills).
const TP: usize = 2;
const TN: usize = 4;
/// From this many rows of b on, [`gemm_rows`] packs rows of a into panels ([`panel_gemm`]).
const PANEL_MIN_N: usize = 4;
/// Below this many rows of b, [`panel_gemm`]'s panels take rows a quarter of a apart.
const SPREAD_MAX_N: usize = 16;

/// 4×4 transpose of i32 lanes: lane r of result q = lane q of `x[r]`.
#[cfg(target_feature = "relaxed-simd")] // NibblePanels' and U8Panels' layouts
#[inline(always)]
fn transpose4(x: [v128; PANEL]) -> [v128; 4] {
    let t0 = i32x4_shuffle::<0, 4, 1, 5>(x[0], x[1]);
    let t1 = i32x4_shuffle::<0, 4, 1, 5>(x[2], x[3]);
    let t2 = i32x4_shuffle::<2, 6, 3, 7>(x[0], x[1]);
    let t3 = i32x4_shuffle::<2, 6, 3, 7>(x[2], x[3]);
    [
        i32x4_shuffle::<0, 1, 4, 5>(t0, t1),
        i32x4_shuffle::<2, 3, 6, 7>(t0, t1),
        i32x4_shuffle::<0, 1, 4, 5>(t2, t3),
        i32x4_shuffle::<2, 3, 6, 7>(t2, t3),
    ]
}

/// One panel of [`I16Panels`]: 4 rows' blocks into `pw` (vectors 16t + p: k pair p of
/// block t for the 4 rows, as i16), their scales 4 at a time into `pd`. `half(x, h)` gives
/// quants 16h..16h+16 of a block as i8x16. The 4 rows' halves are interleaved as i8 pairs
/// first (two rounds of unpacks: vector j = k pairs 2j, 2j+1 of the 4 rows), then widened:
/// half the shuffles of widening first and transposing i32 lanes, and few live vectors
/// (with whole blocks in flight V8 spilled, and packing cost twice what reading the rows
/// from memory did).
/// `half(r, t, h)` and `scales(t)` (the 4 rows' f32 scales of block t) read the rows,
/// from ggml's layout or from a repacked group ([`super::repack`]).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // t also addresses pw's blocks
fn pack_i16(
    nb: usize,
    pw: &mut [v128],
    pd: &mut [v128],
    scales: impl Fn(usize) -> v128,
    half: impl Fn(usize, usize, bool) -> v128,
) {
    let (pw, pd) = (&mut pw[..16 * nb], &mut pd[..nb]);
    let out = pw.as_mut_ptr();
    for t in 0..nb {
        for h in 0..2 {
            let [r0, r1, r2, r3]: [v128; PANEL] = core::array::from_fn(|r| half(r, t, h == 1));
            let t0 = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(r0, r1);
            let t1 = i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(r2, r3);
            let t2 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(r0, r1);
            let t3 = i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(r2, r3);
            let v = [
                i32x4_shuffle::<0, 4, 1, 5>(t0, t1),
                i32x4_shuffle::<2, 6, 3, 7>(t0, t1),
                i32x4_shuffle::<0, 4, 1, 5>(t2, t3),
                i32x4_shuffle::<2, 6, 3, 7>(t2, t3),
            ];
            // SAFETY: 16t + 8h + 8 ≤ 16·nb, pw's length (sliced above).
            unsafe {
                for (j, &x) in v.iter().enumerate() {
                    v128_store(out.add(16 * t + 8 * h + 2 * j), i16x8_extend_low_i8x16(x));
                    v128_store(out.add(16 * t + 8 * h + 2 * j + 1), i16x8_extend_high_i8x16(x));
                }
            }
        }
        pd[t] = scales(t);
    }
}

/// The 4 rows' f32 scales of a repacked group's block at `p` (4 f16 side by side).
#[inline(always)]
fn group_scales(p: &[u8]) -> v128 {
    assert!(p.len() >= 8);
    // SAFETY: 8 readable bytes (asserted).
    f16x4_to_f32(u32x4_extend_low_u16x8(unsafe { v128_load64_zero(p.as_ptr() as *const u64) }))
}

/// What a panel kernel's layout and integer product are: [`I16Panels`] everywhere,
/// [`NibblePanels`] for Q4_0 where relaxed SIMD is built in. [`panel_gemm`] and
/// [`panel_tile`] do the rest (the float steps, which fix the results' bits) for both.
trait PanelForm {
    /// Panel vectors per block.
    const VECS: usize;
    /// Rows `rows[p]` of a into panel p: `pw` holds `VECS` vectors a block per panel, `pd`
    /// one f32x4 a block per panel (the 4 rows' scales).
    fn pack(&mut self, nb: usize, a: &[u8], lda: usize, rows: &[[usize; PANEL]], pw: &mut [v128], pd: &mut [v128]);
    /// Where rows `jj` of b start, for [`PanelForm::sums`] (asserts they are whole).
    fn rows<const C: usize>(&self, nb: usize, jj: [usize; C]) -> [*const u8; C];
    /// Rows of a are repacked groups: panel k is a group, not rows gathered by `pack`.
    fn packed(&self) -> bool;
    /// Block t's exact i32 sums, lanes = the rows of each panel.
    ///
    /// # Safety
    /// `pp[p]` holds at least `VECS·(t+1)` vectors, `yr` comes from `rows` with the same
    /// `jj`, t < nb.
    unsafe fn sums<const P: usize, const C: usize>(
        &self,
        t: usize,
        pp: [*const v128; P],
        yr: [*const u8; C],
        jj: [usize; C],
    ) -> [[v128; C]; P];
}

/// Quants as i16: a panel vector holds 4 rows × 2 consecutive k, and
/// `i32x4.dot_i16x8_s` against a splat pair of a row of b gives the 4 rows' partial sums.
struct I16Panels<'a> {
    ty: GgmlType,
    /// Rows of a are repacked groups ([`super::repack`]), not ggml's layout.
    packed: bool,
    /// Rows of b widened to i16 (4 vectors a block).
    yw: &'a [v128],
}

impl PanelForm for I16Panels<'_> {
    const VECS: usize = 16;
    fn pack(&mut self, nb: usize, a: &[u8], lda: usize, rows: &[[usize; PANEL]], pw: &mut [v128], pd: &mut [v128]) {
        // Constants read once ([`Kept`]), not rebuilt per block (Q4_0's rows).
        let [m0f, eight] = NIBBLE_KEPT.read();
        let f16k = F16X4_KEPT.read();
        let q4 = |q: v128, h: bool| {
            let (lo, hi) = nibbles_in(q, m0f);
            i8x16_sub(if h { hi } else { lo }, eight)
        };
        for (p, ii) in rows.iter().enumerate() {
            let (pw, pd) = (&mut pw[p * nb * 16..(p + 1) * nb * 16], &mut pd[p * nb..(p + 1) * nb]);
            if self.packed {
                // A repacked Q8_0 group (rows 4g..4g+4): block t at 136·t, 4 scales then 4×32 quants.
                let g = &a[ii[0] * lda..(ii[0] + PANEL) * lda];
                pack_i16(
                    nb,
                    pw,
                    pd,
                    |t| group_scales(&g[136 * t..]),
                    |r, t, h| load(&g[136 * t + 8 + 32 * r + 16 * h as usize..]),
                );
                continue;
            }
            let rows: [&[u8]; PANEL] = ii.map(|i| &a[i * lda..]);
            macro_rules! blocks {
                ($X:ty) => {{
                    let xs: [&[$X]; PANEL] = rows.map(|r| cast_slice(&r[..nb * core::mem::size_of::<$X>()]));
                    xs
                }};
            }
            match self.ty {
                GgmlType::Q4_0 => {
                    let xs = blocks!(BlockQ4_0);
                    pack_i16(
                        nb,
                        pw,
                        pd,
                        |t| f16x4_in(core::array::from_fn(|r| xs[r][t].d()), &f16k),
                        |r, t, h| q4(load(&xs[r][t].qs), h),
                    )
                }
                GgmlType::Q5_0 => {
                    let xs = blocks!(BlockQ5_0);
                    let sixteen = i8x16_splat(16);
                    pack_i16(
                        nb,
                        pw,
                        pd,
                        |t| f16x4(core::array::from_fn(|r| xs[r][t].d())),
                        |r, t, h| {
                            let (lo, hi) = q5(&xs[r][t].qs, xs[r][t].qh());
                            i8x16_sub(if h { hi } else { lo }, sixteen)
                        },
                    )
                }
                _ => {
                    let xs = blocks!(BlockQ8_0);
                    pack_i16(
                        nb,
                        pw,
                        pd,
                        |t| f16x4(core::array::from_fn(|r| xs[r][t].d())),
                        |r, t, h| load(if h { &xs[r][t].qs[16..] } else { &xs[r][t].qs[..16] }),
                    )
                }
            }
        }
    }
    fn packed(&self) -> bool {
        self.packed
    }
    fn rows<const C: usize>(&self, nb: usize, jj: [usize; C]) -> [*const u8; C] {
        jj.map(|j| self.yw[j * nb * 4..(j + 1) * nb * 4].as_ptr() as *const u8)
    }
    #[inline(always)]
    unsafe fn sums<const P: usize, const C: usize>(
        &self,
        t: usize,
        pp: [*const v128; P],
        yr: [*const u8; C],
        _jj: [usize; C],
    ) -> [[v128; C]; P] {
        let yp: [*const u32; C] = yr.map(|y| y as *const u32);
        let mut s = [[i32x4_splat(0); C]; P];
        for k in 0..16 {
            let x: [v128; P] = core::array::from_fn(|p| *pp[p].add(16 * t + k));
            for c in 0..C {
                let y = v128_load32_splat(yp[c].add(16 * t + k));
                for p in 0..P {
                    s[p][c] = i32x4_add(s[p][c], i32x4_dot_i16x8(x[p], y));
                }
            }
        }
        s
    }
}

/// Q4_0 with relaxed SIMD: `i32x4.relaxed_dot_i8x16_i7x16_add_s` multiplies 16 i8 by 16
/// values of its second operand and adds groups of 4 into i32 lanes. Every implementation
/// agrees when that operand's lanes are in 0..=127, as Q4_0's raw nibbles (0..15) are, so
/// Σ(q−8)·y = Σq·y − 8·Σy comes out exact. A panel vector holds 4 rows × 4 consecutive k
/// of nibbles (8 a block); rows of b stay Q8_0 bytes, 4 of them splat at a time. In
/// Chromium 156 here a 64-row Q4_0 product runs ~1.25× faster than with the i16 panels
/// (16 products per instruction instead of 8); Node 20's older V8 runs it slower.
#[cfg(target_feature = "relaxed-simd")]
struct NibblePanels<'a> {
    b: &'a [u8],
    ldb: usize,
    /// Σy of block t of row j of b at j·nbp + t ([`super::ColPrep`]'s sums).
    ysum: &'a [i32],
    nbp: usize,
}

#[cfg(target_feature = "relaxed-simd")]
impl PanelForm for NibblePanels<'_> {
    const VECS: usize = 8;
    fn pack(&mut self, nb: usize, a: &[u8], lda: usize, rows: &[[usize; PANEL]], pw: &mut [v128], pd: &mut [v128]) {
        let size = core::mem::size_of::<BlockQ4_0>();
        // Packing costs a decode step of 4 sequences about what their products do (Node 26
        // profile: 25% of the step each): its constants read once ([`Kept`]), not rebuilt
        // per block (46 of its ~120 instructions a block under V8 14.6).
        let [m0f, _] = NIBBLE_KEPT.read();
        let f16k = F16X4_KEPT.read();
        for (p, ii) in rows.iter().enumerate() {
            let (pw, pd) = (&mut pw[p * nb * 8..(p + 1) * nb * 8], &mut pd[p * nb..(p + 1) * nb]);
            let xs: [&[BlockQ4_0]; PANEL] = ii.map(|i| cast_slice(&a[i * lda..i * lda + nb * size]));
            for t in 0..nb {
                // Nibbles of elements 0..16 and 16..32 of each row's block.
                let q: [(v128, v128); PANEL] = core::array::from_fn(|r| nibbles_in(load(&xs[r][t].qs), m0f));
                pw[8 * t..8 * t + 4].copy_from_slice(&transpose4(q.map(|q| q.0)));
                pw[8 * t + 4..8 * t + 8].copy_from_slice(&transpose4(q.map(|q| q.1)));
                pd[t] = f16x4_in(core::array::from_fn(|r| xs[r][t].d()), &f16k);
            }
        }
    }
    fn rows<const C: usize>(&self, nb: usize, jj: [usize; C]) -> [*const u8; C] {
        jj.map(|j| self.b[j * self.ldb..j * self.ldb + nb * core::mem::size_of::<BlockQ8_0>()].as_ptr())
    }
    fn packed(&self) -> bool {
        false
    }
    #[inline(always)]
    unsafe fn sums<const P: usize, const C: usize>(
        &self,
        t: usize,
        pp: [*const v128; P],
        yr: [*const u8; C],
        jj: [usize; C],
    ) -> [[v128; C]; P] {
        let mut s = [[i32x4_splat(0); C]; P];
        for q in 0..8 {
            let x: [v128; P] = core::array::from_fn(|p| *pp[p].add(8 * t + q));
            for c in 0..C {
                // Block t's quants start 2 bytes in (after the f16 scale).
                let y = v128_load32_splat(yr[c].add(34 * t + 2 + 4 * q) as *const u32);
                for p in 0..P {
                    s[p][c] = i32x4_relaxed_dot_i8x16_i7x16_add(y, x[p], s[p][c]);
                }
            }
        }
        for (c, &j) in jj.iter().enumerate() {
            let z = i32x4_splat(8 * self.ysum[j * self.nbp + t]);
            for row in s.iter_mut() {
                row[c] = i32x4_sub(row[c], z);
            }
        }
        s
    }
}

/// Whether `i32x4.relaxed_dot_i8x16_i7x16_add_s` multiplies its second operand as u8 (0..=255)
/// by the first's i8 exactly, with no saturation of pair sums: what V8 emits on x86 with
/// AVX-VNNI (`vpdpbusd`). Elsewhere (`pmaddubsw`'s saturating pairs, Arm's signed `sdot`)
/// only operands in 0..=127 agree, so [`U8Panels`] is used only where this probe, run once
/// on extreme and mixed operands through the same instruction, finds the exact products.
/// What [`super::prompt_gemm_kernel`] names Q8_0's prompt kernel where [`u8_dot_exact`].
#[cfg(target_feature = "relaxed-simd")]
pub(super) const U8_PANELS_NAME: &str = "simd128 u8 panels (relaxed dot as vpdpbusd)";

#[cfg(target_feature = "relaxed-simd")]
pub(super) fn u8_dot_exact() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering};
    if crate::cpu::features::vnni_disabled() {
        return false;
    }
    // 0: not probed yet, 1: exact, 2: not.
    static EXACT: AtomicU8 = AtomicU8::new(0);
    match EXACT.load(Ordering::Relaxed) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    // (i8 operand, u8 operand) byte patterns: the extremes, where pmaddubsw saturates and a
    // signed reading of the u8 differs, then a mixed stream.
    let mut cases: alloc::vec::Vec<([i8; 16], [u8; 16])> =
        alloc::vec![([-128; 16], [255; 16]), ([127; 16], [255; 16]), ([-128; 16], [128; 16]), ([-1; 16], [129; 16])];
    let mut seed = 0x9e37_79b9u32;
    for _ in 0..8 {
        let mut x = [0i8; 16];
        let mut y = [0u8; 16];
        for k in 0..16 {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            x[k] = (seed >> 8) as u8 as i8;
            y[k] = (seed >> 20) as u8;
        }
        cases.push((x, y));
    }
    let exact = cases.iter().all(|(x, y)| {
        // Through black_box, so the compiler cannot fold the instruction away.
        let (xv, yv) = core::hint::black_box((load(&x[..]), load(&y[..])));
        let acc = core::hint::black_box(i32x4(1, -2, 3, -4));
        let got = i32x4_relaxed_dot_i8x16_i7x16_add(xv, yv, acc);
        (0..4).all(|l| {
            let want = [1, -2, 3, -4][l] + (0..4).map(|k| x[4 * l + k] as i32 * y[4 * l + k] as i32).sum::<i32>();
            let lane = match l {
                0 => i32x4_extract_lane::<0>(got),
                1 => i32x4_extract_lane::<1>(got),
                2 => i32x4_extract_lane::<2>(got),
                _ => i32x4_extract_lane::<3>(got),
            };
            lane == want
        })
    });
    EXACT.store(if exact { 1 } else { 2 }, Ordering::Relaxed);
    exact
}

/// Q8_0 × Q8_0 with the relaxed dot where it is exact on u8 × i8 ([`u8_dot_exact`]): a panel
/// vector holds 4 rows × 4 consecutive k of the weights as they are (i8), 8 a block, and a
/// 9th holds the 4 rows' `−128·Σw` of the block; rows of b are copied once per call with
/// their quants made unsigned (`y + 128`), 4 bytes splat at a time. Each block's sum starts
/// at `−128·Σw` and adds `Σ w·(y + 128)`: exactly `Σ w·y`, so the float steps
/// ([`panel_tile`]) give every result `vec_dot`'s bits.
///
/// The copy of b interleaves each [`TN`] rows as the panels do a's (vector 8t + q: k 4q..4q+4
/// of block t for the 4 rows), so a tile's splats all come from one address plus constants:
/// with a pointer per row of b, V8 spent 6 integer adds per 8 dot products stepping them and
/// spilled them around each block.
#[cfg(target_feature = "relaxed-simd")]
struct U8Panels {
    packed: bool,
    /// Rows of b, quants + 128 as u8, in groups of TN rows (the last one padded with zeros):
    /// 8 vectors a block, `nb` blocks a group.
    yu: alloc::vec::Vec<v128>,
}

#[cfg(target_feature = "relaxed-simd")]
impl U8Panels {
    fn new(nb: usize, n: usize, b: &[u8], ldb: usize, packed: bool) -> Self {
        let groups = n.div_ceil(TN);
        let mut yu = alloc::vec![i8x16_splat(0); groups * nb * 8];
        let top = u8x16_splat(0x80);
        let size = core::mem::size_of::<BlockQ8_0>();
        for g in 0..groups {
            let ys: [Option<&[BlockQ8_0]>; TN] = core::array::from_fn(|c| {
                let j = TN * g + c;
                (j < n).then(|| cast_slice(&b[j * ldb..j * ldb + nb * size]))
            });
            for t in 0..nb {
                let half =
                    |c: usize, h: usize| ys[c].map_or(i8x16_splat(0), |y| v128_xor(load(&y[t].qs[16 * h..]), top));
                let out = &mut yu[(g * nb + t) * 8..];
                out[..4].copy_from_slice(&transpose4(core::array::from_fn(|c| half(c, 0))));
                out[4..8].copy_from_slice(&transpose4(core::array::from_fn(|c| half(c, 1))));
            }
        }
        U8Panels { packed, yu }
    }
}

/// One panel of [`U8Panels`]: block t's 8 vectors (4 rows × 4 k each) at 9t.., the rows'
/// `−128·Σw` at 9t + 8, their scales at `pd[t]`. `half(r, t, h)` gives quants 16h..16h+16
/// of row r's block t.
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn pack_u8(
    nb: usize,
    pw: &mut [v128],
    pd: &mut [v128],
    scales: impl Fn(usize) -> v128,
    half: impl Fn(usize, usize, usize) -> v128,
) {
    let (pw, pd) = (&mut pw[..9 * nb], &mut pd[..nb]);
    let (one, minus128) = (i8x16_splat(1), i32x4_splat(-128));
    for t in 0..nb {
        let lo = transpose4(core::array::from_fn(|r| half(r, t, 0)));
        let hi = transpose4(core::array::from_fn(|r| half(r, t, 1)));
        let mut sum = i32x4_splat(0);
        for v in lo.iter().chain(&hi) {
            // Σ of each row's 4 quants (an operand of 1: exact everywhere).
            sum = i32x4_relaxed_dot_i8x16_i7x16_add(*v, one, sum);
        }
        pw[9 * t..9 * t + 4].copy_from_slice(&lo);
        pw[9 * t + 4..9 * t + 8].copy_from_slice(&hi);
        pw[9 * t + 8] = i32x4_mul(sum, minus128);
        pd[t] = scales(t);
    }
}

#[cfg(target_feature = "relaxed-simd")]
impl PanelForm for U8Panels {
    const VECS: usize = 9;
    fn pack(&mut self, nb: usize, a: &[u8], lda: usize, rows: &[[usize; PANEL]], pw: &mut [v128], pd: &mut [v128]) {
        for (p, ii) in rows.iter().enumerate() {
            let (pw, pd) = (&mut pw[p * nb * 9..(p + 1) * nb * 9], &mut pd[p * nb..(p + 1) * nb]);
            if self.packed {
                // A repacked Q8_0 group (rows 4g..4g+4): block t at 136·t, 4 scales then 4×32 quants.
                let g = &a[ii[0] * lda..(ii[0] + PANEL) * lda];
                pack_u8(
                    nb,
                    pw,
                    pd,
                    |t| group_scales(&g[136 * t..]),
                    |r, t, h| load(&g[136 * t + 8 + 32 * r + 16 * h..]),
                );
            } else {
                let size = core::mem::size_of::<BlockQ8_0>();
                let xs: [&[BlockQ8_0]; PANEL] = ii.map(|i| cast_slice(&a[i * lda..i * lda + nb * size]));
                pack_u8(
                    nb,
                    pw,
                    pd,
                    |t| f16x4(core::array::from_fn(|r| xs[r][t].d())),
                    |r, t, h| load(&xs[r][t].qs[16 * h..]),
                );
            }
        }
    }
    /// Row j's 4 bytes of (block t, k 4q..) at `128·t + 16·q` from its pointer; the rows of a
    /// tile are consecutive in one group (`panel_gemm`'s tiles start at multiples of TN).
    #[inline(always)]
    fn rows<const C: usize>(&self, nb: usize, jj: [usize; C]) -> [*const u8; C] {
        let j = jj[0];
        assert!(C <= TN && (C == 1 || j.is_multiple_of(TN)) && (0..C).all(|c| jj[c] == j + c));
        let g = &self.yu[j / TN * nb * 8..(j / TN + 1) * nb * 8];
        // SAFETY: j % TN + c < TN bytes into the group's first vector.
        let p = unsafe { (g.as_ptr() as *const u8).add(4 * (j % TN)) };
        core::array::from_fn(|c| p.wrapping_add(4 * c))
    }
    fn packed(&self) -> bool {
        self.packed
    }
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // c also picks the lane of b's load
    unsafe fn sums<const P: usize, const C: usize>(
        &self,
        t: usize,
        pp: [*const v128; P],
        yr: [*const u8; C],
        _jj: [usize; C],
    ) -> [[v128; C]; P] {
        let mut s: [[v128; C]; P] = core::array::from_fn(|p| [*pp[p].add(9 * t + 8); C]);
        // A loop V8 sees as one: unrolled, LLVM emits each sum's 8 products as one expression
        // (all 16 panel vectors and 32 splats live at once), which V8 spilled to the stack
        // (124 moves beside the 64 dot products of a 2 × 4 tile). An opaque trip count keeps
        // 8 sums, 2 panel vectors and a splat live.
        for q in 0..core::hint::black_box(8) {
            let x: [v128; P] = core::array::from_fn(|p| *pp[p].add(9 * t + q));
            // A whole group's 4 rows: one load, each row's 4 bytes splatted from it (a
            // `v128.load32_splat` keeps its constant offset as an `i32.add`, which wasm-opt
            // folds into plain loads only: a `lea` per splat in V8's code).
            let y4 = if C == TN { v128_load(yr[0].add(128 * t + 16 * q) as *const v128) } else { u32x4_splat(0) };
            for c in 0..C {
                let y = if C == TN {
                    match c {
                        0 => i32x4_shuffle::<0, 0, 0, 0>(y4, y4),
                        1 => i32x4_shuffle::<1, 1, 1, 1>(y4, y4),
                        2 => i32x4_shuffle::<2, 2, 2, 2>(y4, y4),
                        _ => i32x4_shuffle::<3, 3, 3, 3>(y4, y4),
                    }
                } else {
                    v128_load32_splat(yr[0].add(128 * t + 16 * q + 4 * c) as *const u32)
                };
                for p in 0..P {
                    s[p][c] = i32x4_relaxed_dot_i8x16_i7x16_add(x[p], y, s[p][c]);
                }
            }
        }
        s
    }
}

/// `P` panels × `C` rows of b: out[p][c] lane r = the dot product of row r of panel p with
/// row `jj[c]` of b, bit for bit [`scalar::vec_dot_q8_0_q8_0`]'s (and Q4_0's): each
/// block's exact i32 sum ([`PanelForm::sums`]), times `dx·dy`, added into accumulator
/// `t % 8` of that pair (here in memory, lanes = rows), then [`reduce8`] of the 8.
#[inline(always)]
fn panel_tile<F: PanelForm, const P: usize, const C: usize>(
    form: &F,
    nb: usize,
    pw: [&[v128]; P],
    pd: [&[v128]; P],
    jj: [usize; C],
    dy: [&[f32]; C],
) -> [[[f32; PANEL]; C]; P] {
    for p in 0..P {
        assert!(pw[p].len() >= F::VECS * nb && pd[p].len() >= nb);
    }
    assert!(dy.iter().all(|d| d.len() >= nb));
    let pp: [*const v128; P] = pw.map(|x| x.as_ptr());
    let yr = form.rows(nb, jj);
    let mut acc = [[[f32x4_splat(0.0); LANES]; C]; P];
    for t in 0..nb {
        // SAFETY: the panels hold VECS·nb vectors (asserted), `yr` comes from `rows`.
        let s = unsafe { form.sums::<P, C>(t, pp, yr, jj) };
        for p in 0..P {
            let d = pd[p][t];
            for c in 0..C {
                let v = f32x4_mul(f32x4_convert_i32x4(s[p][c]), f32x4_mul(d, f32x4_splat(dy[c][t])));
                let a = &mut acc[p][c][t % LANES];
                *a = f32x4_add(*a, v);
            }
        }
    }
    let mut out = [[[0f32; PANEL]; C]; P];
    for p in 0..P {
        for c in 0..C {
            let mut lanes = [[0f32; PANEL]; LANES];
            for (l, v) in lanes.iter_mut().zip(&acc[p][c]) {
                // SAFETY: 4 f32 of room for one unaligned 16-byte store.
                unsafe { v128_store(l.as_mut_ptr() as *mut v128, *v) };
            }
            for r in 0..PANEL {
                out[p][c][r] = reduce8(&core::array::from_fn(|l| lanes[l][r]));
            }
        }
    }
    out
}

/// [`gemm_rows`] from [`PANEL_MIN_N`] rows of b on: rows of a in groups of [`TP`] panels,
/// each group packed once per call and then multiplied by every row of b in tiles of
/// [`TN`]; rows past the last whole panel through `rest(i)`.
///
/// With fewer than [`SPREAD_MAX_N`] rows of b (a decode step of several sequences), where
/// every row of a is read from memory for only those few products, panel k holds rows k,
/// k + q, k + 2q, k + 3q (q = m/4) instead of 4k..4k+4: four streams in different pages, as
/// [`super::decode_row`] visits rows for one row of b, which the prefetchers follow better
/// than groups of short rows side by side. Each row's result is the same either way.
#[allow(clippy::too_many_arguments)]
fn panel_gemm<F: PanelForm>(
    form: &mut F,
    nb: usize,
    m: usize,
    a: &[u8],
    lda: usize,
    cols: &super::ColPrep,
    c: &mut [f32],
    ldc: usize,
    mut rest: impl FnMut(usize, &mut [f32]),
) {
    let (nbp, n) = (cols.nbp, cols.plain.len());
    let mut pw = alloc::vec![i16x8_splat(0); TP * nb * F::VECS];
    let mut pd = alloc::vec![f32x4_splat(0.0); TP * nb];
    let dyrow = |j: usize| &cols.dy[j * nbp..(j + 1) * nbp];
    let n_panels = m / PANEL;
    let packed = form.packed();
    let panel_rows = |k: usize| -> [usize; PANEL] {
        if packed {
            // Groups are panels already; under SPREAD_MAX_N rows of b in 4 streams.
            let g = if n < SPREAD_MAX_N { super::decode_row(k, n_panels) } else { k };
            core::array::from_fn(|r| PANEL * g + r)
        } else if n < SPREAD_MAX_N {
            core::array::from_fn(|r| k + r * n_panels)
        } else {
            core::array::from_fn(|r| PANEL * k + r)
        }
    };
    let mut k0 = 0;
    while k0 < n_panels {
        let np = (n_panels - k0).min(TP);
        // Only the first np are packed and used (the rest repeat the last, to fill the array).
        let rows: [[usize; PANEL]; TP] = core::array::from_fn(|p| panel_rows(k0 + p.min(np - 1)));
        form.pack(nb, a, lda, &rows[..np], &mut pw, &mut pd);
        let panels: [&[v128]; TP] = core::array::from_fn(|p| &pw[p * nb * F::VECS..(p + 1) * nb * F::VECS]);
        let scales: [&[v128]; TP] = core::array::from_fn(|p| &pd[p * nb..(p + 1) * nb]);
        // `$p` panels × `$c` rows of b from row j of b.
        macro_rules! tile {
            ($p:tt, $c:tt, $j:expr) => {{
                let jj: [usize; $c] = core::array::from_fn(|t| $j + t);
                let (ps, ss) = (core::array::from_fn(|p| panels[p]), core::array::from_fn(|p| scales[p]));
                let o = panel_tile::<F, $p, $c>(form, nb, ps, ss, jj, jj.map(dyrow));
                for (p, o) in o.iter().enumerate() {
                    for (t, vals) in o.iter().enumerate() {
                        let cj = &mut c[($j + t) * ldc..];
                        for (r, &v) in vals.iter().enumerate() {
                            cj[rows[p][r]] = v;
                        }
                    }
                }
            }};
        }
        // Whole tiles, then the rows of b left one at a time (chunks of b are whole tiles
        // but for the last).
        let mut j = 0;
        while j < n {
            match (np == TP, j + TN <= n) {
                (true, true) => tile!(TP, TN, j),
                (true, false) => tile!(TP, 1, j),
                (false, true) => tile!(1, TN, j),
                (false, false) => tile!(1, 1, j),
            }
            j += if j + TN <= n { TN } else { 1 };
        }
        k0 += np;
    }
    // Rows past the last whole panel: the same rows (PANEL·q..m) in either order.
    for i in PANEL * n_panels..m {
        rest(i, c);
    }
}

/// 32 i8 (two vectors) as four i16x8, in element order.
#[inline(always)]
fn widened(lo: v128, hi: v128) -> [v128; 4] {
    [i16x8_extend_low_i8x16(lo), i16x8_extend_high_i8x16(lo), i16x8_extend_low_i8x16(hi), i16x8_extend_high_i8x16(hi)]
}

/// [`widened`] into `out[..4]`.
#[inline(always)]
fn widen(lo: v128, hi: v128, out: &mut [v128]) {
    out[..4].copy_from_slice(&widened(lo, hi));
}

/// Σ of 32 widened weights (`w`) times 32 widened activations (4 i16x8 at `y`), in 4 i32
/// lanes: the i16 products of a block, summed in one order everywhere.
///
/// # Safety
/// `y..y+4` must be readable vectors.
#[inline(always)]
pub(super) unsafe fn dot_wide(w: [v128; 4], y: *const v128) -> v128 {
    i32x4_add(
        i32x4_add(i32x4_dot_i16x8(w[0], *y), i32x4_dot_i16x8(w[1], *y.add(1))),
        i32x4_add(i32x4_dot_i16x8(w[2], *y.add(2)), i32x4_dot_i16x8(w[3], *y.add(3))),
    )
}

/// One pair of widened rows; raw pointers keep bounds checks out of the block loop
/// (`xw`, `yw` hold `4·nb` vectors, `dx`, `dy` at least `nb` scales, padded to groups of 8).
#[inline(always)]
fn row_dot(nb: usize, xw: &[v128], dx: &[f32], yw: &[v128], dy: &[f32]) -> f32 {
    assert!(xw.len() >= 4 * nb && yw.len() >= 4 * nb && dx.len() >= nb.div_ceil(8) * 8 && dy.len() >= dx.len());
    let (xp, yp, dxp, dyp) = (xw.as_ptr(), yw.as_ptr(), dx.as_ptr(), dy.as_ptr());
    // SAFETY: t < nb reads vectors 4t..4t+4 of each, inside the asserted lengths.
    let isum = |t: usize| unsafe {
        let x = xp.add(4 * t);
        dot_wide([*x, *x.add(1), *x.add(2), *x.add(3)], yp.add(4 * t))
    };
    let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for g in 0..nb / LANES {
        let v: [v128; LANES] = core::array::from_fn(|k| isum(LANES * g + k));
        for (h, acc) in [&mut lo, &mut hi].into_iter().enumerate() {
            let s = f32x4_convert_i32x4(transpose_sum(&[v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]]));
            let o = 8 * g + 4 * h;
            // SAFETY: o + 4 ≤ the padded length of dx and dy.
            let d = unsafe { f32x4_mul(v128_load(dxp.add(o) as *const v128), v128_load(dyp.add(o) as *const v128)) };
            *acc = f32x4_add(*acc, f32x4_mul(s, d));
        }
    }
    let mut acc = [0f32; LANES];
    // SAFETY: 8 f32 of room for two unaligned 16-byte stores.
    unsafe {
        v128_store(acc.as_mut_ptr() as *mut v128, lo);
        v128_store(acc.as_mut_ptr().add(4) as *mut v128, hi);
    }
    for t in nb - nb % LANES..nb {
        acc[t % LANES] += hsum_i32(isum(t)) as f32 * (dx[t] * dy[t]);
    }
    reduce8(&acc)
}

/// [`scalar::quantize_q8_0`] four lanes at a time, bit for bit: the lanes' running
/// `pmax` skips NaN as the scalar fold does (and max is order-free otherwise); rounding
/// is trunc, then ±1 where the exact remainder reaches ±0.5 (what `roundf` does, and a
/// no-op past 2^23, for ±inf and NaN); saturating narrows give `as i8`.
pub fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let blocks: &mut [BlockQ8_0] = bytemuck::cast_slice_mut(dst);
    let (half, one) = (f32x4_splat(0.5), f32x4_splat(1.0));
    for (x, y) in src.chunks_exact(crate::types::QK).zip(blocks) {
        let v: [v128; 8] = core::array::from_fn(|k| load(&x[4 * k..4 * k + 4]));
        let mut m = f32x4_splat(0.0);
        for &v in &v {
            m = f32x4_pmax(m, f32x4_abs(v));
        }
        let amax = f32x4_pmax(
            f32x4_pmax(f32x4_splat(f32x4_extract_lane::<0>(m)), f32x4_splat(f32x4_extract_lane::<1>(m))),
            f32x4_pmax(f32x4_splat(f32x4_extract_lane::<2>(m)), f32x4_splat(f32x4_extract_lane::<3>(m))),
        );
        let amax = f32x4_extract_lane::<0>(amax);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        y.d = fp32_to_fp16(d).to_le_bytes();
        let idv = f32x4_splat(id);
        let q: [v128; 8] = core::array::from_fn(|k| {
            let s = f32x4_mul(v[k], idv);
            let t = f32x4_trunc(s);
            let frac = f32x4_sub(s, t);
            let up = v128_and(f32x4_ge(frac, half), one);
            let down = v128_and(f32x4_le(frac, f32x4_neg(half)), one);
            i32x4_trunc_sat_f32x4(f32x4_sub(f32x4_add(t, up), down))
        });
        let w0 = i16x8_narrow_i32x4(q[0], q[1]);
        let w1 = i16x8_narrow_i32x4(q[2], q[3]);
        let w2 = i16x8_narrow_i32x4(q[4], q[5]);
        let w3 = i16x8_narrow_i32x4(q[6], q[7]);
        // SAFETY: qs is 32 bytes; v128 stores have no alignment need.
        unsafe {
            v128_store(y.qs.as_mut_ptr() as *mut v128, i8x16_narrow_i16x8(w0, w1));
            v128_store(y.qs.as_mut_ptr().add(16) as *mut v128, i8x16_narrow_i16x8(w2, w3));
        }
    }
}
