//! Weights repacked at load for the CPU's matrix products (llama.cpp's CPU "extra" buffer
//! types): rows of a Q8_0 or Q4_0 weight in groups, each group's blocks side by side, so
//! one pass over a row of activations serves every row of the group.
//!
//! Layout of group g (rows `R·g..R·g + R`, the same bytes those rows held before): for
//! each block t, each field of the block in turn (a scale, the quants, …), `il` bytes of it
//! from row 0, `il` from row 1, … then the field's next `il` bytes of each row: R blocks'
//! bytes, so the repack is in place and the memory plan is unchanged (0 extra bytes). Rows
//! past the last whole group keep ggml's layout. [`layout`] gives R and the fields per type
//! and target:
//! - wasm: R = 4; Q8_0 and Q4_0 as (scale, quants whole): each row's quants a run that
//!   `i32x4.dot_i16x8_s` takes whole, the 4 rows' sums one transpose-add. Q4_K as (d, dmin,
//!   its 12 scale bytes 4 at a time, its nibbles 4 bytes at a time): every 16-byte vector of
//!   quants holds 4 bytes of each row, 4 consecutive elements of one sub-block of a row in its
//!   low nibbles and 4 of the next sub-block in its high ones, one row per i32 lane of a relaxed
//!   dot (`cpu/arch/wasm/packed_k.rs`). Q6_K by a byte map instead of fields ([`byte_map`]):
//!   the 4 rows' d, then its quants 4 bytes of each row in turn, each 4-byte group one
//!   sub-block's (an i32 lane of a relaxed dot), bits regrouped ([`q6_k_fuse`]).
//! - x86_64: R = 8; Q8_0's quants and Q4_0's and Q4_K's nibbles 4 bytes at a time, so one
//!   32-byte load holds 4 bytes of each of 8 rows and one `vpdpbusd` against 4 activations
//!   broadcast adds 8 rows' partial sums in 8 lanes (no horizontal adds; Q4_0's low and high
//!   nibbles against elements 4c.. and 16 + 4c..); Q4_K's 12 scale bytes and
//!   Q6_K's 16 one at a time, so byte k of the 8 rows is one 8-byte load; Q6_K's `ql` and
//!   `qh` 4 bytes at a time, in the order its kernel reads them.
//!
//! Which types are repacked is the kernel table's call ([`super::TypeTraitsCpu::packed`]: the
//! ISA has a kernel that reads the layout); results are bit for bit those of the plain
//! layout (the same exact integer block sums, the same float steps in the scalar order).
//! Which weights are packed, and when, is the CPU's repacking buffer type's business
//! ([`crate::cpu::repack_buffer`]); anything that reads the bytes back (its `get_bytes`,
//! `get_rows`, `out_prod`) sees ggml's layout again through [`unpack_row`], or for Q8_0's
//! whole groups in `out_prod`, their values through [`dequantize_group`].
//!
//! ```
//! use ggweb::cpu::arch::{gemm, repack};
//! use ggweb::quants::quantize;
//! use ggweb::GgmlType::{Q8_0, Q4_0};
//! let (k, m) = (64, 10);
//! let w: Vec<f32> = (0..k * m).map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0).collect();
//! let x: Vec<f32> = (0..k).map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0).collect();
//! let (a, b) = (quantize(Q4_0, &w).unwrap(), quantize(Q8_0, &x).unwrap());
//! let mut packed = a.clone();
//! assert!(repack::pack(Q4_0, k, m, &mut packed));
//! let (mut plain, mut got) = ([0f32; 10], [0f32; 10]);
//! gemm(Q4_0, k, m, 1, &a, Q4_0.row_size(k as i64), &b, 0, &mut plain, m);
//! repack::gemm_packed(Q4_0, k, m, 1, &packed, &b, 0, &mut got, m);
//! assert_eq!(plain.map(f32::to_bits), got.map(f32::to_bits));
//! let mut row = vec![0u8; Q4_0.row_size(k as i64)];
//! repack::unpack_row(Q4_0, k, m, &packed, 5, &mut row);
//! assert_eq!(row, a[5 * row.len()..6 * row.len()]);
//! ```

use alloc::vec;
use core::sync::atomic::{AtomicBool, Ordering};

use super::kernel::{GemmArgs, Q8_0_GROUP};
pub use super::kernel::{PackedKernel, GROUP};
use super::{cpu_traits, ColPrep};
use crate::types::GgmlType;

/// One field of a block in a group: `size` bytes at `offset` in ggml's block, laid out `il`
/// bytes of each row in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
    pub il: usize,
}

const fn f(offset: usize, size: usize, il: usize) -> Field {
    Field { offset, size, il }
}

/// A type's group layout on this target (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Rows per group.
    pub rows: usize,
    /// The block's fields in their packed order; their sizes add up to the block's.
    pub fields: &'static [Field],
}

/// The packed layout of `ty` on this target, or None: `ty` is never repacked. It depends
/// on the target only (not on the CPU found at run time), so bytes packed under one kernel
/// table read back the same under any other (tests switch tables).
pub fn layout(ty: GgmlType) -> Option<Layout> {
    const X86: bool = cfg!(target_arch = "x86_64");
    const WASM: bool = cfg!(target_family = "wasm");
    const Q8_0: &[Field] = &[f(0, 2, 2), f(2, 32, Q8_0_GROUP.1)];
    const Q4_0_WASM: &[Field] = &[f(0, 2, 2), f(2, 16, 16)];
    // d, the nibbles 4 bytes of each row in turn (as Q8_0's quants: one 32-byte load holds
    // elements 4c..4c+4 of each row in its low nibbles, 16 + 4c.. in its high ones).
    const Q4_0_X86: &[Field] = &[f(0, 2, 2), f(2, 16, 4)];
    // d, dmin, the 12 bytes of 6-bit scales and mins, the nibbles.
    const Q4_K_X86: &[Field] = &[f(0, 2, 2), f(2, 2, 2), f(4, 12, 1), f(16, 128, 4)];
    // d, dmin, the scale bytes as 3 vectors (bytes 0..4, 4..8, 8..12 of each row), the
    // nibbles 4 bytes of each row in turn (vector 8j + c: row r's `qs[32j + 4c..]` at 4r).
    const Q4_K_WASM: &[Field] = &[f(0, 2, 2), f(2, 2, 2), f(4, 12, 4), f(16, 128, 4)];
    const Q6_K_X86: &[Field] = &q6_k_x86();
    Some(match ty {
        GgmlType::Q8_0 => Layout { rows: Q8_0_GROUP.0, fields: Q8_0 },
        GgmlType::Q4_0 if X86 => Layout { rows: 8, fields: Q4_0_X86 },
        GgmlType::Q4_0 => Layout { rows: GROUP, fields: Q4_0_WASM },
        GgmlType::Q4_K if X86 => Layout { rows: 8, fields: Q4_K_X86 },
        GgmlType::Q6_K if X86 => Layout { rows: 8, fields: Q6_K_X86 },
        GgmlType::Q4_K if WASM => Layout { rows: GROUP, fields: Q4_K_WASM },
        // No fields: bytes placed by `byte_map` (and its bits regrouped).
        GgmlType::Q6_K if WASM => Layout { rows: GROUP, fields: &[] },
        _ => return None,
    })
}

/// Q6_K on x86: d, the 16 i8 scales, then per half h and i < 8 the 4 bytes of `ql` at
/// 64h + 4i and 64h + 32 + 4i and of `qh` at 32h + 4i, the order the kernel reads them (4
/// elements of 4 sub-blocks each), so a block streams through once, in address order.
const fn q6_k_x86() -> [Field; 50] {
    let mut out = [f(0, 0, 1); 50];
    out[0] = f(208, 2, 2);
    out[1] = f(192, 16, 1);
    let mut n = 2;
    while n < 50 {
        let (h, i) = ((n - 2) / 24, (n - 2) / 3 % 8);
        out[n] = f(64 * h + 4 * i, 4, 4);
        out[n + 1] = f(64 * h + 32 + 4 * i, 4, 4);
        out[n + 2] = f(128 + 32 * h + 4 * i, 4, 4);
        n += 3;
    }
    out
}

/// Rows per group of `ty`'s layout on this target ([`GROUP`] for a type without one).
pub fn group(ty: GgmlType) -> usize {
    layout(ty).map_or(GROUP, |l| l.rows)
}

/// Copies one row's block from ggml's layout (`plain`) to its place in a group's block
/// (`packed`, R blocks).
fn move_block(l: &Layout, r: usize, plain: &[u8], packed: &mut [u8]) {
    let mut o = 0;
    for fd in l.fields {
        let (il, n) = (fd.il, fd.size / fd.il);
        // Piece c of the field: plain fd.offset + c·il ↔ packed o + (c·R + r)·il.
        strided(&mut packed[o + r * il..], l.rows * il, &plain[fd.offset..], il, il, n);
        o += fd.size * l.rows;
    }
}

/// `n` pieces of `il` bytes: piece c from `src[c·ss..]` to `dst[c·sd..]`, in loops of a
/// constant piece size (a byte loop per piece becomes a `memcpy` call each, which cost the
/// backward pass's `out_prod` more than its products).
#[inline(always)]
fn strided(dst: &mut [u8], sd: usize, src: &[u8], ss: usize, il: usize, n: usize) {
    #[inline(always)]
    fn pieces<const IL: usize>(dst: &mut [u8], sd: usize, src: &[u8], ss: usize, n: usize) {
        for c in 0..n {
            let v: [u8; IL] = src[c * ss..c * ss + IL].try_into().unwrap();
            dst[c * sd..c * sd + IL].copy_from_slice(&v);
        }
    }
    match il {
        1 => pieces::<1>(dst, sd, src, ss, n),
        2 => pieces::<2>(dst, sd, src, ss, n),
        4 => pieces::<4>(dst, sd, src, ss, n),
        8 => pieces::<8>(dst, sd, src, ss, n),
        16 => pieces::<16>(dst, sd, src, ss, n),
        32 => pieces::<32>(dst, sd, src, ss, n),
        _ => {
            for c in 0..n {
                dst[c * sd..c * sd + il].copy_from_slice(&src[c * ss..c * ss + il]);
            }
        }
    }
}

/// wasm's Q6_K layout (fields cannot say it): where byte `s` of row `r`'s block lands in its
/// group's block (`4·bs` bytes), `map[r·bs + s]` (its kernel in `cpu/arch/wasm/packed_k.rs`
/// says why): the 4 `d`, the scales by pairs of sub-blocks, then the quants 4 bytes of each
/// row in turn, so that every 4-byte group holds 4 elements of one sub-block of one row (their
/// bits regrouped, [`q6_k_fuse`]; [`q6_k_map`]).
fn byte_map(ty: GgmlType) -> Option<&'static [u16]> {
    match ty {
        GgmlType::Q6_K if cfg!(target_family = "wasm") => Some(&MAP_Q6_K),
        _ => None,
    }
}

static MAP_Q6_K: [u16; 4 * 210] = q6_k_map();

// pack and unpack_row move 2-byte pairs: every even byte lands on an even place, the odd
// one next to it; and the map is a permutation of the group's block (so every place is in
// bounds: their unchecked u16 moves rely on it).
const _: () = assert!(pairs(&q6_k_map()));

const fn pairs(m: &[u16]) -> bool {
    let mut seen = [false; 4 * 210];
    let mut i = 0;
    while i < m.len() {
        let p = m[i] as usize;
        if p >= m.len() || seen[p] || (i % 2 == 0 && (!p.is_multiple_of(2) || m[i + 1] as usize != p + 1)) {
            return false;
        }
        seen[p] = true;
        i += 1;
    }
    true
}

/// wasm's Q6_K group block (840 bytes): the 4 `d` (bytes 0..8); the 4 rows' 16 scales by pairs
/// of sub-blocks, `8 + 8(s/2) + 2r + s % 2` (sub-block s of row r), so that one 8-byte load
/// holds sub-blocks s, s + 1 of every row; then 16 units of 48 bytes, unit `8h + i` (half h,
/// i = 0..8) at `72 + 48(8h + i)`: 3 vectors (the bytes at `ql[64h + l]`, `ql[64h + 32 + l]`,
/// `qh[32h + l]`, [`q6_k_fuse`]d) of 4 bytes a row, row r's `l = 4i..4i + 4` at `4r`. So
/// each 4-byte group of a quarter's unsigned quants (`packed_k`'s `q6_k_quarters`) holds 4
/// consecutive elements `128h + 32K + 4i..` of one sub-block (`8h + 2K + i/4`) of one row,
/// which `i32x4.relaxed_dot_i8x16_i7x16_add_s` sums into that row's i32 lane against b's 4
/// quants at the same elements.
const fn q6_k_map() -> [u16; 4 * 210] {
    let mut m = [0u16; 4 * 210];
    let mut r = 0;
    while r < 4 {
        let o = 210 * r;
        // ql's two runs of 64 (2 per half h: l and 32 + l), qh's runs of 32 (one per h).
        let mut p = 0;
        while p < 192 {
            let (h, kind, l) =
                if p < 128 { (p / 64, (p % 64) / 32, p % 32) } else { ((p - 128) / 32, 2, (p - 128) % 32) };
            m[o + p] = (72 + 48 * (8 * h + l / 4) + 16 * kind + 4 * r + l % 4) as u16;
            p += 1;
        }
        let mut s = 0;
        while s < 16 {
            m[o + 192 + s] = (8 + 8 * (s / 2) + 2 * r + s % 2) as u16;
            s += 1;
        }
        m[o + 208] = (2 * r) as u16;
        m[o + 209] = (2 * r + 1) as u16;
        r += 1;
    }
    m
}

static DISABLED: AtomicBool = AtomicBool::new(false);

/// Turns repacking at load off (or on again) for models loaded from now on, so one build can
/// A/B it (`GGWEB_NO_REPACK=1` for the native CLI and tests). Loaded models keep their layout.
pub fn set_disabled(off: bool) {
    DISABLED.store(off, Ordering::Relaxed);
}

/// Whether [`set_disabled`] is in effect.
pub fn disabled() -> bool {
    DISABLED.load(Ordering::Relaxed)
}

/// Whether weights of `ty` (`k` × `m`, 2-D) are worth repacking here: this machine's kernels
/// read the packed layout for `ty` (or `force`: any type with the layout, whose products then
/// unpack the groups per call, so tests can check the whole path on any machine) and there
/// is a whole group.
pub fn wants(ty: GgmlType, k: usize, m: usize, force: bool) -> bool {
    let kernel = cpu_traits(ty).packed.is_some() || (force && layout(ty).is_some());
    kernel && m >= group(ty) && k.is_multiple_of(ty.blck_size()) && k > 0
}

/// The name of the packed decode kernel for `ty` on this machine, if any.
#[doc(hidden)]
pub fn kernel_name(ty: GgmlType) -> Option<&'static str> {
    cpu_traits(ty).packed.map(|p| p.name)
}

/// Repacks `m` rows of `k` elements of `ty` in place (`data` holds at least the rows).
/// False, `data` untouched, for a type without a packed layout, Q8_0 weights holding a
/// quant of -128 (the relaxed-SIMD kernel negates weights; ggml's quantizer never writes -128),
/// or Q8_0, Q4_K and Q6_K weights with an inf or NaN scale (`d`, Q4_K's `dmin`: the wasm
/// kernels convert them without the special case; a quantizer writes none).
pub fn pack(ty: GgmlType, k: usize, m: usize, data: &mut [u8]) -> bool {
    let Some(l) = layout(ty) else { return false };
    let (bs, qk) = (ty.type_size(), ty.blck_size());
    if !k.is_multiple_of(qk) {
        return false;
    }
    let (nb, rs) = (k / qk, ty.row_size(k as i64));
    assert!(data.len() >= m * rs, "repack::pack: {m} rows of {rs} bytes in {}", data.len());
    if ty == GgmlType::Q8_0 && data[..m * rs].chunks_exact(bs).any(|b| b[2..].contains(&0x80)) {
        return false;
    }
    if data[..m * rs].chunks_exact(bs).any(|b| scale_offsets(ty).iter().any(|&o| b[o + 1] & 0x7c == 0x7c)) {
        return false;
    }
    let mut tmp = vec![0u8; l.rows * rs];
    for grp in data[..m / l.rows * l.rows * rs].chunks_exact_mut(l.rows * rs) {
        tmp.copy_from_slice(grp);
        if let Some(map) = byte_map(ty) {
            if ty == GgmlType::Q6_K {
                tmp.chunks_exact_mut(bs).for_each(q6_k_fuse);
            }
            for t in 0..nb {
                let dst = &mut grp[t * GROUP * bs..(t + 1) * GROUP * bs];
                for r in 0..GROUP {
                    let (src, map) = (&tmp[r * rs + t * bs..r * rs + (t + 1) * bs], &map[r * bs..(r + 1) * bs]);
                    assert!(src.len() == bs && dst.len() == GROUP * bs && map.len() == bs);
                    for (j, &p) in map.iter().enumerate().step_by(2) {
                        // SAFETY: j + 1 < bs = src.len(); p + 1 < GROUP·bs = dst.len() (`pairs`).
                        unsafe {
                            let v = (src.as_ptr().add(j) as *const u16).read_unaligned();
                            (dst.as_mut_ptr().add(p as usize) as *mut u16).write_unaligned(v);
                        }
                    }
                }
            }
            continue;
        }
        for t in 0..nb {
            let out = &mut grp[t * l.rows * bs..(t + 1) * l.rows * bs];
            for r in 0..l.rows {
                move_block(&l, r, &tmp[r * rs + t * bs..r * rs + (t + 1) * bs], out);
            }
        }
    }
    true
}

/// Where a block of `ty` keeps the f16 scales the packed kernels convert as finite values
/// ([`pack`] leaves a matrix with an inf or NaN one, exponent bits all set, in ggml's layout).
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q8_0 => &[0],
        GgmlType::Q4_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// Row `i` of `m` packed rows of `k` elements of `ty`, in ggml's layout, into `out`
/// (`ty.row_size(k)` bytes).
pub fn unpack_row(ty: GgmlType, k: usize, m: usize, data: &[u8], i: usize, out: &mut [u8]) {
    let l = layout(ty).unwrap_or_else(|| panic!("repack::unpack_row: {ty} has no packed layout"));
    let (bs, nb, rs) = (ty.type_size(), k / ty.blck_size(), ty.row_size(k as i64));
    assert!(i < m && out.len() >= rs && data.len() >= m * rs, "repack::unpack_row: row {i} of {m}");
    if i >= m / l.rows * l.rows {
        out[..rs].copy_from_slice(&data[i * rs..(i + 1) * rs]);
        return;
    }
    let (g, r) = (i / l.rows, i % l.rows);
    let grp = &data[g * l.rows * rs..(g + 1) * l.rows * rs];
    if let Some(map) = byte_map(ty) {
        let map = &map[r * bs..(r + 1) * bs];
        for t in 0..nb {
            let (src, dst) = (&grp[t * GROUP * bs..(t + 1) * GROUP * bs], &mut out[t * bs..(t + 1) * bs]);
            assert!(map.len() == bs);
            for (j, &p) in map.iter().enumerate().step_by(2) {
                // SAFETY: p + 1 < GROUP·bs = src.len() (`pairs`); j + 1 < bs = dst.len().
                unsafe {
                    let v = (src.as_ptr().add(p as usize) as *const u16).read_unaligned();
                    (dst.as_mut_ptr().add(j) as *mut u16).write_unaligned(v);
                }
            }
            if ty == GgmlType::Q6_K {
                q6_k_split(dst);
            }
        }
        return;
    }
    // Read in place (a copy of the group's block per row would move R times the row), a
    // field at a time over every block (its piece count divided out once, not per block).
    let mut o = 0;
    for fd in l.fields {
        let (il, n) = (fd.il, fd.size / fd.il);
        for t in 0..nb {
            let packed = &grp[t * l.rows * bs + o + r * il..(t + 1) * l.rows * bs];
            strided(&mut out[t * bs + fd.offset..(t + 1) * bs], il, packed, l.rows * il, il, n);
        }
        o += fd.size * l.rows;
    }
}

/// Rows `i..i + R` (one whole group: `i` a multiple of R = [`group`]) of `m` packed Q8_0 rows
/// of `k` elements, their columns `cols` (whole blocks), dequantized straight into `out` (row
/// r's values `cols.start + 32t..` at `r·ld + t·bs`: rows of f32 for `bs` = 32,
/// `f32_gemm_panels`' panels for `ld` = 32), with the bits `dequantize_row` gives (the ISA
/// table's `q8_0_group`); false (out untouched) for any other type or rows past the last
/// whole group. The backward pass's `out_prod` reads every weight row once per run:
/// unpacking each row to ggml's layout first cost it more than its products.
#[allow(clippy::too_many_arguments)]
pub fn dequantize_group(
    ty: GgmlType,
    k: usize,
    m: usize,
    data: &[u8],
    i: usize,
    cols: core::ops::Range<usize>,
    out: &mut [f32],
    ld: usize,
    bs: usize,
) -> bool {
    let r = Q8_0_GROUP.0;
    if ty != GgmlType::Q8_0 || !k.is_multiple_of(ty.blck_size()) || !i.is_multiple_of(r) || i + r > m / r * r {
        return false;
    }
    let (rs, qk, nb) = (ty.row_size(k as i64), ty.blck_size(), cols.len() / ty.blck_size());
    assert!(
        cols.end <= k && cols.start.is_multiple_of(qk) && cols.end.is_multiple_of(qk),
        "repack::dequantize_group: columns {cols:?} of {k}"
    );
    assert!(
        data.len() >= m * rs && (nb == 0 || out.len() >= (r - 1) * ld + (nb - 1) * bs + 32),
        "repack::dequantize_group: rows {i}.. of {m}, {} values out",
        out.len()
    );
    // A group's block t (its R rows' block t) lies at t·R·type_size from the group's start.
    let at = i * rs + cols.start / qk * r * ty.type_size();
    (super::kernels().q8_0_group)(nb, &data[at..(i + r) * rs], out, ld, bs);
    true
}

/// The places of one Q6_K block that hold elements `128h + 32K + l` (K = 0..4): `ql[64h + l]`,
/// `ql[64h + 32 + l]`, `qh[32h + l]`.
fn q6_k_places(h: usize, l: usize) -> [usize; 3] {
    [64 * h + l, 64 * h + 32 + l, 128 + 32 * h + l]
}

/// Q6_K's packed quant bytes: at each place the 4 six-bit quants u0..u3 as u0, u1, u2 in the
/// low 6 bits of the three bytes and u3 in their top 2 bits (bits 4-5 in the first, 2-3 in
/// the second, 0-1 in the third), so a kernel gets u0..u2 with one mask each (ggml's nibbles
/// and 2-bit fields take a shift, two masks and an or per quant).
fn q6_k_fuse(blk: &mut [u8]) {
    let blk: &mut [u8; 210] = blk.try_into().expect("a Q6_K block");
    for h in 0..2 {
        for l in 0..32 {
            let [a, b, c] = q6_k_places(h, l);
            let (ql0, ql1, qh) = (blk[a], blk[b], blk[c]);
            let u0 = (ql0 & 0xF) | ((qh & 3) << 4);
            let u1 = (ql1 & 0xF) | (((qh >> 2) & 3) << 4);
            let u2 = (ql0 >> 4) | (((qh >> 4) & 3) << 4);
            let u3 = (ql1 >> 4) | ((qh >> 6) << 4);
            blk[a] = u0 | ((u3 >> 4) << 6);
            blk[b] = u1 | (((u3 >> 2) & 3) << 6);
            blk[c] = u2 | ((u3 & 3) << 6);
        }
    }
}

/// The inverse of [`q6_k_fuse`].
fn q6_k_split(blk: &mut [u8]) {
    let blk: &mut [u8; 210] = blk.try_into().expect("a Q6_K block");
    for h in 0..2 {
        for l in 0..32 {
            let [a, b, c] = q6_k_places(h, l);
            let (x, y, z) = (blk[a], blk[b], blk[c]);
            let (u0, u1, u2) = (x & 63, y & 63, z & 63);
            let u3 = ((x >> 6) << 4) | ((y >> 6) << 2) | (z >> 6);
            blk[a] = (u0 & 0xF) | ((u2 & 0xF) << 4);
            blk[b] = (u1 & 0xF) | ((u3 & 0xF) << 4);
            blk[c] = (u0 >> 4) | ((u1 >> 4) << 2) | ((u2 >> 4) << 4) | ((u3 >> 4) << 6);
        }
    }
}

/// Bytes `offset..offset + out.len()` of `m` packed rows as ggml's layout would hold them.
pub fn unpack_bytes(ty: GgmlType, k: usize, m: usize, data: &[u8], offset: usize, out: &mut [u8]) {
    let rs = ty.row_size(k as i64);
    let mut row = vec![0u8; rs];
    let (mut pos, end) = (offset, offset + out.len());
    while pos < end {
        let i = pos / rs;
        unpack_row(ty, k, m, data, i, &mut row);
        let (from, to) = (pos - i * rs, (end - i * rs).min(rs));
        out[pos - offset..pos - offset + to - from].copy_from_slice(&row[from..to]);
        pos = i * rs + to;
    }
}

/// [`super::gemm`] with `a` packed: `m` rows of `k` elements from a group boundary (whole
/// groups, then at most 3 plain rows), `n` rows of b `ldb` bytes apart, `c[j·ldc + i]`.
/// Every value has the bits [`super::vec_dot`] gives. A few rows of b (a decode step of one or
/// several sequences) go through the ISA's packed kernel, as many rows a call as it takes
/// ([`PackedKernel::cols`]); more (a prompt) through its packed prompt kernel, or the plain
/// kernels on the groups unpacked once per call.
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed(
    ty: GgmlType,
    k: usize,
    m: usize,
    n: usize,
    a: &[u8],
    b: &[u8],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    let rs = ty.row_size(k as i64);
    let vt = ty.vec_dot_type();
    let vrs = vt.row_size(k as i64);
    let rows = group(ty);
    let ng = m / rows;
    let gs = rows * rs;
    assert!(layout(ty).is_some() && k.is_multiple_of(ty.blck_size()), "repack::gemm_packed: {ty} K {k}");
    assert!(a.len() >= m * rs, "repack::gemm_packed: {m} rows of {rs} bytes in {}", a.len());
    if n == 0 || m == 0 {
        return;
    }
    assert!(b.len() >= (n - 1) * ldb + vrs && c.len() >= (n - 1) * ldc + m, "repack::gemm_packed: b or c too short");
    if m > rows * ng {
        super::gemm(ty, k, m - rows * ng, n, &a[rows * ng * rs..m * rs], rs, b, ldb, &mut c[rows * ng..], ldc);
    }
    if ng == 0 {
        return;
    }
    let nb = k / ty.blck_size();
    let mut left = vec![false; n];
    match cpu_traits(ty).packed {
        // A decode step: `kern.cols` rows of b a call, each group's weights unpacked once for
        // all of them.
        Some(kern) if n < PACKED_MAX_N || n <= kern.cols => {
            for j0 in (0..n).step_by(kern.cols) {
                let nc = kern.cols.min(n - j0);
                let bj = &b[j0 * ldb..(j0 + nc - 1) * ldb + vrs];
                let cols = ColPrep::new(vt, nb, nc, bj, ldb, false, kern.wants_sums);
                let g = GemmArgs { ty, nb, m: rows * ng, a: &a[..ng * gs], lda: rs, b: bj, ldb, cols: &cols, ldc };
                let cj = &mut c[j0 * ldc..(j0 + nc - 1) * ldc + rows * ng];
                if !(kern.decode)(&g, cj) {
                    left[j0..j0 + nc].fill(true);
                }
            }
        }
        _ => left.fill(true),
    }
    if !left.contains(&true) {
        return;
    }
    // The packed prompt kernel takes a prompt's rows of b (from PACKED_MAX_N: wasm's panels need
    // 4), never a decode step's that its kernel handed back (a relaxed product's -128).
    if let (Some(g), false, true) =
        (cpu_traits(ty).packed.and_then(|p| p.prompt), left.contains(&false), n >= PACKED_MAX_N)
    {
        return super::gemm_with(Some(g), ty, k, rows * ng, n, &a[..ng * gs], rs, b, ldb, c, ldc);
    }
    // The groups in ggml's layout, then the plain kernels for the rows of b left.
    let mut plain = vec![0u8; ng * gs];
    for (i, row) in plain.chunks_exact_mut(rs).enumerate() {
        unpack_row(ty, k, m, a, i, row);
    }
    if !left.contains(&false) {
        return super::gemm(ty, k, rows * ng, n, &plain, rs, b, ldb, c, ldc);
    }
    for j in (0..n).filter(|&j| left[j]) {
        super::gemm(ty, k, rows * ng, 1, &plain, rs, &b[j * ldb..j * ldb + vrs], vrs, &mut c[j * ldc..], ldc);
    }
}

/// Below this many rows of b a kernel that takes one row of b per call ([`PackedKernel::cols`])
/// runs once per row (a decode step of a few sequences: the block of weights stays in cache
/// between them); kernels taking several run on up to `cols` rows of b per call.
const PACKED_MAX_N: usize = 4;
