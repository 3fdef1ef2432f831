//! wasm32 SIMD128 (`-C target-feature=+simd128`): 4 lanes, multiply then add (fused
//! multiply-add is only in relaxed-simd, which not every browser has: a build with
//! `-C target-feature=+simd128,+relaxed-simd` uses `f32x4_relaxed_madd` in the gemm tiles,
//! the default build never does).

use crate::wasm_arch::*;

use crate::cpu::arch::OUT_PROD_J;

use super::super::{f16_bits_to_f32, F16_EXP_ADJUST, GELU_C, GELU_K, INV_FACT, LN2_HI, LN2_HI_F32, LN2_LO, LN2_LO_F32};

/// [`crate::cpu::arch::FloatGemm`] for f32 rows: register tiles of 4 rows of a × 2 of b.
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
    gemm::<F32Rows>(k, m, n, a as *const f32, lda, b, ldb, c, ldc)
}

/// [`gemm_f32`] for f16 rows (as bits), converted as they are loaded.
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
    gemm::<F16Rows>(k, m, n, a as *const u16, lda, b, ldb, c, ldc)
}

pub(crate) fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let c = F16Consts::load();
    let mut i = 0;
    // SAFETY: n elements of each.
    unsafe {
        while i + 8 <= n {
            let (lo, hi) = f16x8_to_f32(v128_load(s.add(i) as *const v128), &c);
            v128_store(d.add(i) as *mut v128, lo);
            v128_store(d.add(i + 4) as *mut v128, hi);
            i += 8;
        }
    }
    for j in i..n {
        dst[j] = f16_bits_to_f32(src[j]);
    }
}
pub(crate) fn gelu(x: &mut [f32]) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    // Four lanes of f32 through two f64x2.
    let gelu4 = |v: v128| {
        let lo = gelu_f64x2(f64x2_promote_low_f32x4(v));
        let hi = gelu_f64x2(f64x2_promote_low_f32x4(i64x2_shuffle::<1, 1>(v, v)));
        i64x2_shuffle::<0, 2>(f32x4_demote_f64x2_zero(lo), f32x4_demote_f64x2_zero(hi))
    };
    // SAFETY: loads and stores of 4 lanes stay inside the slice.
    unsafe {
        // 8 at a time: four independent exp polynomials in flight (~10% faster than
        // two; 16 at a time spills registers and is slower).
        while i + 8 <= n {
            let v: [v128; 2] = core::array::from_fn(|k| v128_load(p.add(i + 4 * k) as *const v128));
            // Not `v.map(gelu4)`: rustc left array::map's per-element closure out of line, a
            // call per 4 lanes that V8 keeps (1.4% of a LoRA training step).
            let r = [gelu4(v[0]), gelu4(v[1])];
            for (k, r) in r.into_iter().enumerate() {
                v128_store(p.add(i + 4 * k) as *mut v128, r);
            }
            i += 8;
        }
        while i + 4 <= n {
            v128_store(p.add(i) as *mut v128, gelu4(v128_load(p.add(i) as *const v128)));
            i += 4;
        }
    }
    for v in &mut x[i..] {
        *v = crate::cpu::gelu_f32(*v);
    }
}
pub(crate) fn exp_sum(x: &mut [f32], sub: f32) -> f64 {
    let n = x.len();
    let p = x.as_mut_ptr();
    let s = f32x4_splat(sub);
    let mut acc = [f64x2_splat(0.0); 2];
    let mut i = 0;
    // SAFETY: as above.
    unsafe {
        while i + 4 <= n {
            let e = exp_f32x4_nonpos(f32x4_sub(v128_load(p.add(i) as *const v128), s));
            v128_store(p.add(i) as *mut v128, e);
            acc[0] = f64x2_add(acc[0], f64x2_promote_low_f32x4(e));
            acc[1] = f64x2_add(acc[1], f64x2_promote_low_f32x4(i64x2_shuffle::<1, 1>(e, e)));
            i += 4;
        }
    }
    let a = f64x2_add(acc[0], acc[1]);
    let mut sum = f64x2_extract_lane::<0>(a) + f64x2_extract_lane::<1>(a);
    if i < n {
        let mut t = [f32::NEG_INFINITY; 4];
        t[..n - i].copy_from_slice(&x[i..]);
        // SAFETY: t is 4 lanes.
        let e = unsafe { exp_f32x4_nonpos(f32x4_sub(v128_load(t.as_ptr() as *const v128), s)) };
        unsafe { v128_store(t.as_mut_ptr() as *mut v128, e) };
        x[i..].copy_from_slice(&t[..n - i]);
        sum += t[..n - i].iter().map(|&v| v as f64).sum::<f64>();
    }
    sum
}
pub(crate) fn max(x: &[f32]) -> f32 {
    let n = x.len();
    let mut m = f32x4_splat(f32::NEG_INFINITY);
    let mut i = 0;
    // SAFETY: as above.
    unsafe {
        while i + 4 <= n {
            m = f32x4_pmax(m, v128_load(x.as_ptr().add(i) as *const v128));
            i += 4;
        }
    }
    let lanes = [
        f32x4_extract_lane::<0>(m),
        f32x4_extract_lane::<1>(m),
        f32x4_extract_lane::<2>(m),
        f32x4_extract_lane::<3>(m),
    ];
    lanes.iter().chain(&x[i..]).copied().fold(f32::NEG_INFINITY, f32::max)
}

/// e^y for 2 f64 lanes, as the AVX2 `exp_pd`: y clamped to [-708, 709], y = n·ln2 + r,
/// Taylor series of e^r to r^10, 2^n built in the exponent bits.
#[inline(always)]
fn exp_f64x2(y: v128) -> v128 {
    // pmin/pmax: one x86 instruction each (min/max order NaN and ±0, which this clamp
    // never needs: NaN stays NaN either way).
    let y = f64x2_pmin(f64x2_pmax(y, f64x2_splat(-708.0)), f64x2_splat(709.0));
    let magic = f64x2_splat(6_755_399_441_055_744.0);
    let t = f64x2_add(f64x2_mul(y, f64x2_splat(core::f64::consts::LOG2_E)), magic);
    let n = f64x2_sub(t, magic);
    let r = f64x2_sub(y, f64x2_mul(n, f64x2_splat(LN2_HI)));
    let r = f64x2_sub(r, f64x2_mul(n, f64x2_splat(LN2_LO)));
    let mut p = f64x2_splat(INV_FACT[10]);
    for c in INV_FACT[..10].iter().rev() {
        p = f64x2_add(f64x2_mul(p, r), f64x2_splat(*c));
    }
    let pow2 = i64x2_shl(i64x2_add(t, i64x2_splat(1023)), 52);
    f64x2_mul(p, pow2)
}

#[inline(always)]
fn gelu_f64x2(x: v128) -> v128 {
    let inner = f64x2_add(f64x2_mul(f64x2_mul(x, x), f64x2_splat(GELU_C)), f64x2_splat(1.0));
    let m2u = f64x2_mul(f64x2_mul(x, f64x2_splat(-2.0 * GELU_K)), inner);
    f64x2_div(x, f64x2_add(f64x2_splat(1.0), exp_f64x2(m2u)))
}

/// dy · GELU'(x) in f64, 2 lanes: s + 2x·s(1 − s)·u' with s = 1/(1 + e^(-2u)) (as the
/// AVX2 `gelu_back_pd`).
#[inline(always)]
fn gelu_back_f64x2(g: v128, x: v128) -> v128 {
    let one = f64x2_splat(1.0);
    let x2 = f64x2_mul(x, x);
    let inner = f64x2_add(f64x2_mul(x2, f64x2_splat(GELU_C)), one);
    let m2u = f64x2_mul(f64x2_mul(x, f64x2_splat(-2.0 * GELU_K)), inner);
    let s = f64x2_div(one, f64x2_add(one, exp_f64x2(m2u)));
    let du2 = f64x2_mul(f64x2_add(f64x2_mul(x2, f64x2_splat(3.0 * GELU_C)), one), f64x2_splat(2.0 * GELU_K));
    let t = f64x2_mul(f64x2_mul(x, f64x2_mul(s, f64x2_sub(one, s))), du2);
    f64x2_mul(g, f64x2_add(s, t))
}

pub(crate) fn gelu_back(dy: &[f32], x: &[f32], out: &mut [f32]) {
    let n = out.len().min(dy.len()).min(x.len());
    let mut i = 0;
    // SAFETY: loads and stores of 4 lanes stay inside the slices (i + 4 ≤ n).
    unsafe {
        while i + 4 <= n {
            let g = v128_load(dy.as_ptr().add(i) as *const v128);
            let v = v128_load(x.as_ptr().add(i) as *const v128);
            let hi = |a: v128| f64x2_promote_low_f32x4(i64x2_shuffle::<1, 1>(a, a));
            let lo = gelu_back_f64x2(f64x2_promote_low_f32x4(g), f64x2_promote_low_f32x4(v));
            let hi = gelu_back_f64x2(hi(g), hi(v));
            let r = i64x2_shuffle::<0, 2>(f32x4_demote_f64x2_zero(lo), f32x4_demote_f64x2_zero(hi));
            v128_store(out.as_mut_ptr().add(i) as *mut v128, r);
            i += 4;
        }
    }
    for ((o, &g), &v) in out[i..n].iter_mut().zip(&dy[i..n]).zip(&x[i..n]) {
        *o = crate::cpu::arch::gelu_back_f32(g, v);
    }
}

/// `Kernels::q8_0_group` on SIMD128 (wasm's layout: 4 rows, each row's 32 quants whole): per
/// row and block two loads, widened to i32 four at a time, converted and scaled.
pub(crate) fn q8_0_group(nb: usize, grp: &[u8], out: &mut [f32], ld: usize, bs: usize) {
    const _: () = assert!(crate::cpu::arch::kernel::Q8_0_GROUP.0 == 4 && crate::cpu::arch::kernel::Q8_0_GROUP.1 == 32);
    const BS: usize = 4 * 34;
    assert!(grp.len() >= nb * BS && (nb == 0 || out.len() >= 3 * ld + (nb - 1) * bs + 32));
    let (g, o) = (grp.as_ptr(), out.as_mut_ptr());
    for t in 0..nb {
        // SAFETY: block t of the group and its 4 rows' 32 values at r·ld + t·bs (asserted above).
        unsafe {
            let blk = g.add(t * BS);
            for r in 0..4 {
                let d = f32x4_splat(crate::quants::blocks::fp16_to_fp32(u16::from_le_bytes([
                    *blk.add(2 * r),
                    *blk.add(2 * r + 1),
                ])));
                let y = o.add(r * ld + t * bs);
                for h in 0..2 {
                    let q = v128_load(blk.add(8 + r * 32 + h * 16) as *const v128);
                    let (lo, hi) = (i16x8_extend_low_i8x16(q), i16x8_extend_high_i8x16(q));
                    let parts = [
                        i32x4_extend_low_i16x8(lo),
                        i32x4_extend_high_i16x8(lo),
                        i32x4_extend_low_i16x8(hi),
                        i32x4_extend_high_i16x8(hi),
                    ];
                    for (e, v) in parts.into_iter().enumerate() {
                        v128_store(y.add(h * 16 + e * 4) as *mut v128, f32x4_mul(f32x4_convert_i32x4(v), d));
                    }
                }
            }
        }
    }
}

/// `Kernels::out_prod_panel` on SIMD128 (fused with relaxed-simd): register tiles of 4
/// result rows × 8 columns (eight f32x4 sums, well inside the 16 registers an x86 engine
/// has), columns outermost: a tile's 8 columns of the panel's 32 rows are first copied into
/// one contiguous kilobyte (`blk`), which every result row then reads from L1. Read in place,
/// those 32 rows lie n0 floats apart: at n0 = 3072 (12 KiB, a multiple of 4 KiB) all 32 fall
/// in one L1 set, at n0 = 768 in four, so the tiles kept missing L1. Columns past a multiple
/// of 8 one at a time. The sums are the same as in place, in the same order.
pub(crate) fn out_prod_panel(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]) {
    let rows = acc.len() / n0;
    assert!(acc.len() == rows * n0 && panel.len() >= OUT_PROD_J * n0 && cs.len() >= rows * OUT_PROD_J);
    let (a, p, c) = (acc.as_mut_ptr(), panel.as_ptr(), cs.as_ptr());
    // [jj][8]: columns i..i + 8 of panel row jj.
    let mut blk = [f32x4_splat(0.0); 2 * OUT_PROD_J];
    let mut i = 0;
    // SAFETY (the copies and tiles): columns i..i + 8 < n0 of the panel's OUT_PROD_J rows and
    // of rows inside `rows` (asserted above).
    unsafe {
        while i + 8 <= n0 {
            for (jj, pair) in blk.chunks_exact_mut(2).enumerate() {
                let s = p.add(jj * n0 + i);
                pair[0] = v128_load(s as *const v128);
                pair[1] = v128_load(s.add(4) as *const v128);
            }
            let b = blk.as_ptr();
            let mut k = 0;
            while k + 4 <= rows {
                out_prod_tile::<4>(a, n0, b, c, k, i);
                k += 4;
            }
            while k < rows {
                out_prod_tile::<1>(a, n0, b, c, k, i);
                k += 1;
            }
            i += 8;
        }
    }
    for k in 0..rows {
        let ck: &[f32; OUT_PROD_J] = cs[k * OUT_PROD_J..(k + 1) * OUT_PROD_J].try_into().unwrap();
        crate::cpu::arch::scalar::simd::tail_row(&mut acc[k * n0..(k + 1) * n0], i, n0, panel, ck);
    }
}

/// Result rows k..k + T, columns i..i + 8, summed over the panel's rows in registers.
///
/// SAFETY: rows k..k + T of `acc` (n0 each) and `cs` (OUT_PROD_J each) exist, `blk` holds
/// 2·OUT_PROD_J vectors (columns i..i + 8 of each panel row), and i + 8 ≤ n0.
#[inline(always)]
unsafe fn out_prod_tile<const T: usize>(
    acc: *mut f32,
    n0: usize,
    blk: *const v128,
    cs: *const f32,
    k: usize,
    i: usize,
) {
    let mut lo = [f32x4_splat(0.0); T];
    let mut hi = [f32x4_splat(0.0); T];
    for jj in 0..OUT_PROD_J {
        let (p0, p1) = (*blk.add(2 * jj), *blk.add(2 * jj + 1));
        for t in 0..T {
            let cj = v128_load32_splat(cs.add((k + t) * OUT_PROD_J + jj) as *const u32);
            lo[t] = madd(cj, p0, lo[t]);
            hi[t] = madd(cj, p1, hi[t]);
        }
    }
    for t in 0..T {
        let o = acc.add((k + t) * n0 + i);
        v128_store(o as *mut v128, f32x4_add(v128_load(o as *const v128), lo[t]));
        v128_store(o.add(4) as *mut v128, f32x4_add(v128_load(o.add(4) as *const v128), hi[t]));
    }
}

/// e^x for 4 f32 lanes, x ≤ 0 (0 below -87.3), as the AVX2 version.
#[inline(always)]
fn exp_f32x4_nonpos(x: v128) -> v128 {
    let lo = f32x4_splat(-87.3);
    let keep = f32x4_ge(x, lo);
    let x = f32x4_pmax(x, lo);
    let n = f32x4_nearest(f32x4_mul(x, f32x4_splat(core::f32::consts::LOG2_E)));
    let r = f32x4_sub(x, f32x4_mul(n, f32x4_splat(LN2_HI_F32)));
    let r = f32x4_sub(r, f32x4_mul(n, f32x4_splat(LN2_LO_F32)));
    let mut p = f32x4_splat(INV_FACT[7] as f32);
    for c in INV_FACT[..7].iter().rev() {
        p = f32x4_add(f32x4_mul(p, r), f32x4_splat(*c as f32));
    }
    let pow2 = i32x4_shl(i32x4_add(i32x4_trunc_sat_f32x4(n), i32x4_splat(127)), 23);
    v128_and(f32x4_mul(p, pow2), keep)
}

/// The constants of the f16 steps below, read from memory once per call rather than written
/// as constants: LLVM puts a `v128.const` at every use, and V8's Turboshaft (Node 26's V8 14.6,
/// as Chromium's) builds such a constant anew at each use inside a loop (`movq`, `vmovq`,
/// `vpunpcklqdq`: 3 instructions; 24 per 4-row step of an F16 decode tile, 72 of its 167),
/// where a value loaded once stays in a register (as `packed_k`'s nibble mask).
#[derive(Clone, Copy)]
struct F16Consts {
    /// 0x7fff: exponent and mantissa.
    em: v128,
    /// 0x7bff: the largest finite f16's magnitude (signed compare: `em` is never negative).
    finite_max: v128,
    /// 0x7f80: the high half of an f32's all-ones exponent.
    inf_nan: v128,
    /// 0x8fff: sign | exponent-and-mantissa >> 3, after an arithmetic shift by 3.
    sign_em: v128,
    /// 2^112 in each f32 lane (`F16_EXP_ADJUST`).
    adjust: v128,
    /// 0x3800: the exponent's rebias 112 << 7 in the high half of an f32 ([`f16x8_exact`]).
    rebias: v128,
    /// 0x7fffffff: an f32's magnitude.
    abs: v128,
    /// 2^-14 in each f32 lane: f16's smallest normal.
    min_normal: v128,
    /// 0x0800: `h << 1` below it has exponent 0 (a subnormal or a zero).
    exp0: v128,
}

impl F16Consts {
    #[inline(always)]
    fn load() -> Self {
        #[repr(align(16))]
        struct Table([u32; 36]);
        const fn u16s(v: u32) -> [u32; 4] {
            [v << 16 | v; 4]
        }
        const A: u32 = F16_EXP_ADJUST.to_bits();
        const M14: u32 = 0x3880_0000; // 2^-14
        static TABLE: Table = {
            let (em, fm, inf, se) = (u16s(0x7fff), u16s(0x7bff), u16s(0x7f80), u16s(0x8fff));
            let (rb, e0) = (u16s(0x3800), u16s(0x0800));
            let ab = 0x7fff_ffff;
            Table([
                em[0], em[1], em[2], em[3], fm[0], fm[1], fm[2], fm[3], inf[0], inf[1], inf[2], inf[3], se[0], se[1],
                se[2], se[3], A, A, A, A, rb[0], rb[1], rb[2], rb[3], ab, ab, ab, ab, M14, M14, M14, M14, e0[0], e0[1],
                e0[2], e0[3],
            ])
        };
        let p = TABLE.0.as_ptr() as *const v128;
        // SAFETY: 9 readable vectors, 16-byte aligned.
        unsafe {
            Self {
                em: core::ptr::read_volatile(p),
                finite_max: core::ptr::read_volatile(p.add(1)),
                inf_nan: core::ptr::read_volatile(p.add(2)),
                sign_em: core::ptr::read_volatile(p.add(3)),
                adjust: core::ptr::read_volatile(p.add(4)),
                rebias: core::ptr::read_volatile(p.add(5)),
                abs: core::ptr::read_volatile(p.add(6)),
                min_normal: core::ptr::read_volatile(p.add(7)),
                exp0: core::ptr::read_volatile(p.add(8)),
            }
        }
    }
}

/// Eight f16 (as u16 lanes) → two f32x4 holding each value · 2^-112 (exact for every finite
/// f16; an infinity or NaN comes out as a finite value, so [`f16x8_to_f32`] adds their
/// exponent and the scaled tile checks for them): the high half of each f32 is sign |
/// exponent-and-mantissa >> 3 (one arithmetic shift and a mask), the low half the last 3
/// mantissa bits << 13, paired by a shuffle.
#[inline(always)]
fn f16x8_scaled(h: v128, c: &F16Consts) -> [v128; 2] {
    let hi = v128_and(i16x8_shr(h, 3), c.sign_em);
    f16x8_pair(h, hi)
}

/// Eight finite f16 (as u16 lanes) → two f32x4 holding each value itself, exactly as
/// `f16_bits_to_f32`, with no subnormal f32 as an operand (wasm keeps IEEE subnormals, and an
/// x86 core takes a microcode assist of ~100+ cycles on a multiply or FMA with one): the
/// exponent rebiased as an integer (`n`: the value for exponents ≥ 1, 2^-15·(1 + m/1024) for
/// exponent 0), then `2|n| − 2^-14`, which is m·2^-24 exactly and below |n| only for exponent 0;
/// the smaller of the two is the magnitude (0 for ±0), then the sign (the method of
/// `wasm.rs`'s `f16x4_finite`, here on 8 lanes already paired). Every operand is normal (≥ 2^-15), every result 0 or ≥ 2^-24.
#[inline(always)]
fn f16x8_exact(h: v128, c: &F16Consts) -> [v128; 2] {
    let hi = i16x8_add(v128_and(i16x8_shr(h, 3), c.sign_em), c.rebias);
    let fix = |n: v128| {
        let m = v128_and(n, c.abs);
        let t = f32x4_sub(f32x4_add(m, m), c.min_normal);
        v128_or(f32x4_pmin(m, t), v128_xor(n, m))
    };
    let [a, b] = f16x8_pair(h, hi);
    [fix(a), fix(b)]
}

/// The shuffles of [`f16x8_scaled`]: low halves `h << 13`, high halves `hi`.
#[inline(always)]
fn f16x8_pair(h: v128, hi: v128) -> [v128; 2] {
    let lo = i16x8_shl(h, 13);
    [i16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(lo, hi), i16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(lo, hi)]
}

/// Eight f16 (as u16 lanes) → two f32x4, exactly as `f16_bits_to_f32`: [`f16x8_scaled`]'s
/// halves with the exponent forced to all ones for infinities and NaNs, then one multiply
/// by 2^112 that rebiases the exponent (subnormals included).
#[inline(always)]
fn f16x8_to_f32(h: v128, c: &F16Consts) -> (v128, v128) {
    let inf_nan = v128_and(i16x8_gt(v128_and(h, c.em), c.finite_max), c.inf_nan);
    let hi = v128_or(v128_and(i16x8_shr(h, 3), c.sign_em), inf_nan);
    let [a, b] = f16x8_pair(h, hi);
    (f32x4_mul(a, c.adjust), f32x4_mul(b, c.adjust))
}

/// acc + x·y: fused with relaxed-simd, else a multiply and an add.
#[inline(always)]
fn madd(x: v128, y: v128, acc: v128) -> v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        f32x4_relaxed_madd(x, y, acc)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        f32x4_add(acc, f32x4_mul(x, y))
    }
}

/// Sums of four accumulators, one per lane (a 4×4 transpose by shuffles, then adds).
#[inline(always)]
fn sums4(v: &[v128; 4]) -> v128 {
    let t0 = i32x4_shuffle::<0, 4, 1, 5>(v[0], v[1]); // a0 b0 a1 b1
    let t1 = i32x4_shuffle::<2, 6, 3, 7>(v[0], v[1]); // a2 b2 a3 b3
    let t2 = i32x4_shuffle::<0, 4, 1, 5>(v[2], v[3]);
    let t3 = i32x4_shuffle::<2, 6, 3, 7>(v[2], v[3]);
    let s01 = f32x4_add(t0, t1); // a0+a2 b0+b2 a1+a3 b1+b3
    let s23 = f32x4_add(t2, t3);
    let lo = i64x2_shuffle::<0, 2>(s01, s23); // a02 b02 c02 d02
    let hi = i64x2_shuffle::<1, 3>(s01, s23); // a13 b13 c13 d13
    f32x4_add(lo, hi)
}

/// A row of `a` as f32 lanes: 4 at a time for f32, 8 (two vectors) for f16.
trait Rows: Sized {
    type T: Copy;
    /// What `load` needs besides the address, read once per tile.
    type Consts: Copy;
    /// Elements per step.
    const STEP: usize;
    fn consts() -> Self::Consts;
    unsafe fn load(p: *const Self::T, c: &Self::Consts) -> [v128; 2];
    /// One register tile ([`tile`]'s arguments).
    #[inline(always)]
    unsafe fn tile<const MR: usize, const NR: usize>(
        k: usize,
        a: *const Self::T,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        tile::<Self, MR, NR>(k, a, lda, b, ldb, c, ldc)
    }
}

struct F32Rows;
impl Rows for F32Rows {
    type T = f32;
    type Consts = ();
    const STEP: usize = 4;
    #[inline(always)]
    fn consts() {}
    #[inline(always)]
    unsafe fn load(p: *const f32, _: &()) -> [v128; 2] {
        [v128_load(p as *const v128), f32x4_splat(0.0)]
    }
}

struct F16Rows;
impl Rows for F16Rows {
    type T = u16;
    type Consts = F16Consts;
    const STEP: usize = 8;
    #[inline(always)]
    fn consts() -> F16Consts {
        F16Consts::load()
    }
    #[inline(always)]
    unsafe fn load(p: *const u16, c: &F16Consts) -> [v128; 2] {
        let (lo, hi) = f16x8_to_f32(v128_load(p as *const v128), c);
        [lo, hi]
    }
    /// [`tile_f16_scaled`], or where it cannot give the exact products, the converting tile.
    #[inline(always)]
    unsafe fn tile<const MR: usize, const NR: usize>(
        k: usize,
        a: *const u16,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        if !tile_f16_scaled::<MR, NR>(k, a, lda, b, ldb, c, ldc) {
            tile::<Self, MR, NR>(k, a, lda, b, ldb, c, ldc)
        }
    }
}

/// One register tile: `MR` rows of a × `NR` rows of b. 4×2 keeps 8 accumulators, the
/// b-vectors, an a-vector and a product within the 16 registers engines map v128 to.
/// The last `k % STEP` elements go through a scalar loop.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // index loops over the tile read clearer here
unsafe fn tile<R: Rows, const MR: usize, const NR: usize>(
    k: usize,
    a: *const R::T,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    let consts = R::consts();
    let mut acc = [[f32x4_splat(0.0); 4]; NR];
    let mut l = 0;
    while l + R::STEP <= k {
        let mut bv = [[f32x4_splat(0.0); 2]; NR];
        for j in 0..NR {
            for h in 0..R::STEP / 4 {
                bv[j][h] = v128_load(b.add(j * ldb + l + 4 * h) as *const v128);
            }
        }
        for i in 0..MR {
            let av = R::load(a.add(i * lda + l), &consts);
            for h in 0..R::STEP / 4 {
                for j in 0..NR {
                    acc[j][i] = madd(av[h], bv[j][h], acc[j][i]);
                }
            }
        }
        l += R::STEP;
    }
    for j in 0..NR {
        let mut out = [0f32; 4];
        v128_store(out.as_mut_ptr() as *mut v128, sums4(&acc[j]));
        for (i, o) in out.iter_mut().enumerate().take(MR) {
            for t in l..k {
                *o += elem::<R>(a.add(i * lda + t)) * *b.add(j * ldb + t);
            }
            *c.add(j * ldc + i) = *o;
        }
    }
}

/// [`tile`] for f16 rows with one f32 multiply fewer per 4 weights and no special cases: `a`
/// as value · 2^-112 ([`f16x8_scaled`]) against `b` · 2^112, the same real products, so the
/// same sums bit for bit (fused or not) — wherever both scalings are exact and nothing else
/// differs: no f16 infinity or NaN in the tile's rows (watched as `h << 1 ≥ 0xf800` in a
/// running maximum) and no |b| ≥ 2^16 (b · 2^112 would overflow; the sums then come out
/// infinite or NaN). Returns false, having written nothing, where either may have happened
/// (any non-finite sum, real ones included); the caller then runs [`tile`], which converts
/// each value exactly. Per 4-row step of a decode (4 rows × 8 weights, 64 bytes), the loop
/// V8 14.6 emits: 167 → 67 instructions (plain build), 159 → 59 (relaxed) with the constants
/// above (BENCHMARKS.md, "The browser's F16 decode without rebuilt constants", 2026-12-06).
/// A subnormal f16 · 2^-112 is a subnormal f32, which costs an x86 core a microcode assist per
/// product (~1.1% of GPT-2's `ffn_down` and `attn_output` weights, ~0.23% of the others'): a
/// step whose weights hold an exponent-0 lane takes [`f16x8_exact`]'s values against the
/// unscaled b instead (BENCHMARKS.md, "The browser's F16 decode without subnormal operands",
/// 2026-12-07).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // as in `tile`
unsafe fn tile_f16_scaled<const MR: usize, const NR: usize>(
    k: usize,
    a: *const u16,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) -> bool {
    let consts = F16Consts::load();
    let mut acc = [[f32x4_splat(0.0); 4]; NR];
    let mut seen = u16x8_splat(0);
    let mut l = 0;
    while l + 8 <= k {
        let mut bv = [[f32x4_splat(0.0); 2]; NR];
        for j in 0..NR {
            for h in 0..2 {
                bv[j][h] = f32x4_mul(v128_load(b.add(j * ldb + l + 4 * h) as *const v128), consts.adjust);
            }
        }
        // The step's rows (MR × 8 f16) and the lowest `h << 1` of each lane.
        let mut hs = [u16x8_splat(0); MR];
        let mut low = u16x8_splat(0xffff);
        for i in 0..MR {
            hs[i] = v128_load(a.add(i * lda + l) as *const v128);
            let h2 = i16x8_shl(hs[i], 1);
            seen = u16x8_max(seen, h2);
            low = u16x8_min(low, h2);
        }
        if v128_any_true(u16x8_lt(low, consts.exp0)) {
            // A subnormal (or a zero) among the step's weights: its value · 2^-112 would be a
            // subnormal f32 operand, so this step takes the values themselves against the
            // unscaled b (the same real products, so the same sums).
            for j in 0..NR {
                for h in 0..2 {
                    bv[j][h] = v128_load(b.add(j * ldb + l + 4 * h) as *const v128);
                }
            }
            for i in 0..MR {
                let av = f16x8_exact(hs[i], &consts);
                for h in 0..2 {
                    for j in 0..NR {
                        acc[j][i] = madd(av[h], bv[j][h], acc[j][i]);
                    }
                }
            }
        } else {
            for i in 0..MR {
                let av = f16x8_scaled(hs[i], &consts);
                for h in 0..2 {
                    for j in 0..NR {
                        acc[j][i] = madd(av[h], bv[j][h], acc[j][i]);
                    }
                }
            }
        }
        l += 8;
    }
    let sums = acc.map(|a| sums4(&a));
    let finite = |s: v128| i32x4_all_true(f32x4_lt(f32x4_abs(s), f32x4_splat(f32::INFINITY)));
    if v128_any_true(u16x8_ge(seen, u16x8_splat(0xf800))) || !sums.iter().all(|&s| finite(s)) {
        return false;
    }
    for j in 0..NR {
        let mut out = [0f32; 4];
        v128_store(out.as_mut_ptr() as *mut v128, sums[j]);
        for (i, o) in out.iter_mut().enumerate().take(MR) {
            for t in l..k {
                *o += f16_bits_to_f32(*a.add(i * lda + t)) * *b.add(j * ldb + t);
            }
            *c.add(j * ldc + i) = *o;
        }
    }
    true
}

#[inline(always)]
unsafe fn elem<R: Rows>(p: *const R::T) -> f32 {
    if R::STEP == 8 {
        f16_bits_to_f32(*(p as *const u16))
    } else {
        *(p as *const f32)
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn gemm<R: Rows>(
    k: usize,
    m: usize,
    n: usize,
    a: *const R::T,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    macro_rules! rows {
        ($nr:literal, $j:expr) => {{
            let (bj, cj) = (b.add($j * ldb), c.add($j * ldc));
            let mut i = 0;
            while i + 4 <= m {
                R::tile::<4, $nr>(k, a.add(i * lda), lda, bj, ldb, cj.add(i), ldc);
                i += 4;
            }
            let (ai, ci) = (a.add(i * lda), cj.add(i));
            match m - i {
                3 => R::tile::<3, $nr>(k, ai, lda, bj, ldb, ci, ldc),
                2 => R::tile::<2, $nr>(k, ai, lda, bj, ldb, ci, ldc),
                1 => R::tile::<1, $nr>(k, ai, lda, bj, ldb, ci, ldc),
                _ => {}
            }
        }};
    }
    let mut j = 0;
    while j + 2 <= n {
        rows!(2, j);
        j += 2;
    }
    if n - j == 1 {
        rows!(1, j);
    }
}
