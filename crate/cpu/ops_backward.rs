//! Kernels of the ops that backward passes add to a graph (`crate::backward`): out_prod,
//! soft_max_back, gelu_back, norm_back, repeat_back, get_rows_back, acc, diag_mask_zero,
//! fill (ggml-cpu's ops.cpp has them beside the forward ones). Portable Rust but for
//! out_prod's panel product, gelu_back and the log-softmaxes' exponentials, the ISA table's
//! (`Kernels`): every result is f32,
//! sums over a row are kept in f64 as the forward norm and soft_max keep theirs (8 partial
//! sums, [`sum_f64`]), and each
//! result row is one thread's, so results do not depend on the thread count.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::ops::{map_rows, par_rows, read_row, unsupported, write_row, Exec, KResult, KernelError, TensorView};
use crate::cpu::arch::OUT_PROD_J;
use crate::tensor::MAX_DIMS;
use crate::types::GgmlType;

fn invalid(msg: alloc::string::String) -> KResult {
    Err(KernelError::Invalid(msg))
}

fn want_f32(t: &TensorView, role: &str) -> KResult {
    if t.ty != GgmlType::F32 {
        return unsupported(format!("{role} of type {} (backward ops are f32)", t.ty));
    }
    Ok(())
}

/// Rows of an out_prod result computed together: each pass over `a`'s rows serves them all.
const OUT_PROD_ROWS: usize = 64;
/// Floats of out_prod's sums in one run of result rows where `a`'s rows are converted
/// (dequantized: LoRA's frozen weights): each run converts all of `a` again, and in runs of
/// OUT_PROD_ROWS a 512-token step dequantized every weight 8 times (`q8_0_group`, ~4% of a
/// wasm LoRA step). As many rows as 64 of 3072 floats (768 KiB, inside L2): 256 of 768.
/// An f32 `a` (only copied) keeps OUT_PROD_ROWS.
const OUT_PROD_ACC: usize = OUT_PROD_ROWS * 3072;
/// Rows of a non-f32 `a` converted to f32 at a time for the blocked product, straight into
/// its panels (`Kernels::f32_gemm_panels`: one block of its depth, 256 rows of 768 are
/// 768 KiB, inside L2).
const OUT_PROD_KB: usize = crate::cpu::arch::F32_PANEL_DEPTH;
/// Values per run of a row that [`a_rows_f32`] places: a Q8_0 block, a panel's width.
const RUN: usize = crate::cpu::arch::F32_PANEL_WIDTH;
/// Columns of a non-f32 `a` (of its ne[0]) converted into the blocked product's panels per
/// call: 256 rows of 768 are 768 KiB, inside L2 with the call's X and C; at `ffn_down`'s 3072
/// the whole block's panels (3 MiB) were written to L3 and read back. A multiple of RUN and of
/// every block size (256).
const OUT_PROD_NC: usize = 768;
const _: () = assert!(OUT_PROD_NC.is_multiple_of(RUN) && OUT_PROD_NC.is_multiple_of(256));

/// ggml_out_prod: dst[i0, i1, i2, i3] = Σ_j a[i0, j, i2 / r2, i3 / r3] · b[i1, j, i2, i3].
/// `a` may be any weight type (a row dequantized at a time, a repacked weight's row unpacked
/// first); `b` is f32 through its strides (mul_mat's gradients pass a transposed view).
pub(crate) fn out_prod(a: &TensorView, b: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    want_f32(b, "out_prod src1")?;
    want_f32(dst, "out_prod result")?;
    let (n0, nj) = (a.ne[0], a.ne[1]);
    if b.ne[1] != nj
        || dst.ne != [n0, b.ne[0], b.ne[2], b.ne[3]]
        || a.ne[2] == 0
        || a.ne[3] == 0
        || !b.ne[2].is_multiple_of(a.ne[2])
        || !b.ne[3].is_multiple_of(a.ne[3])
    {
        return invalid(format!("out_prod: a ne={:?}, b ne={:?}, result ne={:?}", a.ne, b.ne, dst.ne));
    }
    if a.nb[0] != a.ty.type_size() {
        return unsupported(format!("out_prod: src0 {} with strided rows (nb0 = {})", a.ty, a.nb[0]));
    }
    if a.packed && (a.ne[2] != 1 || a.ne[3] != 1) {
        return unsupported(format!("out_prod: a repacked weight of ne {:?}", a.ne));
    }
    let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
    let kernels = crate::cpu::arch::kernels();
    let f32_strides = |t: &TensorView| (t.ptr as usize).is_multiple_of(4) && t.nb.iter().all(|s| s.is_multiple_of(4));
    // The blocked product (`Kernels::f32_gemm`), per run of result rows with the same (i2, i3):
    // C = X·Y with X[i1, j] = b[i1, j] and Y[j, i0] = a[i0, j]: [len, n0] = [len, nj] · [nj, n0].
    // An f32 a is read in place, in one call; another type's rows (LoRA's frozen quantized
    // weights, F16) OUT_PROD_KB at a time as f32 straight into the product's panels
    // (`f32_gemm_panels`, the same sums as `f32_gemm` on those rows), each block's product
    // added to C.
    let direct = a.ty == GgmlType::F32 && !a.packed && f32_strides(a);
    let to_panels = kernels.f32_gemm_panels.filter(|_| !direct && a.ty != GgmlType::F32 && n0 > 0);
    if let Some(gemm) = kernels
        .f32_gemm
        .filter(|_| (direct || to_panels.is_some()) && f32_strides(b) && f32_strides(dst) && dst.nb[0] == 4)
    {
        let kb = if direct { nj } else { OUT_PROD_KB };
        // Columns per panel conversion: OUT_PROD_NC where a's blocks allow slices (the same
        // tiles, so the same sums, whatever the slices), else all n0.
        let nc_max = if n0 > OUT_PROD_NC && n0.is_multiple_of(a.ty.blck_size()) { OUT_PROD_NC } else { n0 };
        return par_rows(exec, dst.nrows(), n0.saturating_mul(nj), &|rows| {
            // 64-byte aligned panels (`F32GemmPanels`): [nc_max / RUN panels][kb rows][RUN].
            #[derive(Clone, Copy)]
            #[repr(C, align(64))]
            struct Line([f32; 16]);
            let panel_floats = kb.min(nj) * nc_max.div_ceil(RUN) * RUN;
            let mut lines = if direct { Vec::new() } else { vec![Line([0.0; 16]); panel_floats.div_ceil(16)] };
            // SAFETY: `lines` holds panel_floats f32s (Line is 16 of them, no padding).
            let block = unsafe { core::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut f32, panel_floats) };
            let mut plain = if a.packed { vec![0u8; a.nb[1]] } else { Vec::new() };
            let mut one = if direct { Vec::new() } else { vec![0.0f32; nc_max] };
            let mut r = rows.start;
            while r < rows.end {
                let (i1, i2, i3) = dst.row_index(r);
                let len = (rows.end - r).min(dst.ne[1] - i1);
                let c = dst.row(i1, i2, i3) as *mut f32;
                // At least one call, which stores C (zeros when nj is 0), then added to.
                let mut j = 0;
                loop {
                    let jb = kb.min(nj - j);
                    let x = b.ptr.wrapping_add(i1 * b.nb[0] + j * b.nb[1] + i2 * b.nb[2] + i3 * b.nb[3]);
                    if direct {
                        // SAFETY: rows i1..i1 + len of b and dst, and a's rows j..j + jb, are
                        // inside their buffers; strides in f32s.
                        unsafe {
                            gemm(
                                len,
                                n0,
                                jb,
                                x as *const f32,
                                b.nb[0] / 4,
                                b.nb[1] / 4,
                                a.row(j, i2 / r2, i3 / r3) as *const f32,
                                a.nb[1] / 4,
                                1,
                                c,
                                dst.nb[1] / 4,
                                j > 0,
                            );
                        }
                    } else {
                        // SAFETY: elements (i1..i1 + len, j..j + jb, i2, i3) are inside b.
                        let zero = (0..len).all(|k| {
                            (0..jb).all(|jj| unsafe { (x.add(k * b.nb[0] + jj * b.nb[1]) as *const f32).read_unaligned() } == 0.0)
                        });
                        let gemm_panels = to_panels.expect("checked above");
                        // Columns c0.. of C from a's columns c0.. (nc_max at a time: C's
                        // [len, nc] = X [len, jb] · Y [jb, nc]).
                        for c0 in (0..n0).step_by(nc_max) {
                            let nc = nc_max.min(n0 - c0);
                            // A block of zeros in b (a logit difference's gradient of the head):
                            // the gemm skips it without reading Y, so its rows of a are not
                            // converted.
                            if !zero {
                                let at = (i2 / r2, i3 / r3);
                                let out = (&mut block[..], RUN, jb * RUN);
                                a_rows_f32(a, j, jb, at, c0..c0 + nc, out, &mut plain, &mut one)?;
                            }
                            // SAFETY: rows i1..i1 + len of b and dst are inside their buffers
                            // (strides in f32s), columns c0..c0 + nc of dst's rows too; `block`
                            // holds a's rows j..j + jb, columns c0..c0 + nc, as the panels of nc
                            // columns, jb deep, 64-byte aligned; jb ≤ F32_PANEL_DEPTH.
                            unsafe {
                                gemm_panels(
                                    len,
                                    nc,
                                    jb,
                                    x as *const f32,
                                    b.nb[0] / 4,
                                    b.nb[1] / 4,
                                    block.as_ptr(),
                                    c.add(c0),
                                    dst.nb[1] / 4,
                                    j > 0,
                                );
                            }
                        }
                    }
                    j += jb;
                    if j >= nj {
                        break;
                    }
                }
                r += len;
            }
            Ok(())
        });
    }
    // The panel product is the ISA table's (`Kernels::out_prod_panel`).
    let panel_product = kernels.out_prod_panel;
    par_rows(exec, dst.nrows(), n0.saturating_mul(nj), &|rows| {
        let mut panel = vec![0.0f32; OUT_PROD_J * n0];
        let mut plain = if a.packed { vec![0u8; a.nb[1]] } else { Vec::new() };
        let max_rows = if a.ty == GgmlType::F32 { OUT_PROD_ROWS } else { OUT_PROD_ROWS.max(OUT_PROD_ACC / n0.max(1)) };
        let n_acc = max_rows.min(rows.len());
        let mut accs = vec![0.0f32; n_acc * n0];
        let mut cs = vec![0.0f32; n_acc * OUT_PROD_J];
        let mut r = rows.start;
        while r < rows.end {
            // A run of rows with the same (i2, i3), at most max_rows of them.
            let (i1, i2, i3) = dst.row_index(r);
            let len = (rows.end - r).min(dst.ne[1] - i1).min(max_rows);
            let acc = &mut accs[..len * n0];
            acc.iter_mut().for_each(|x| *x = 0.0);
            let mut j = 0;
            while j < nj {
                // A panel of OUT_PROD_J rows of a, converted once for every result row.
                let jb = OUT_PROD_J.min(nj - j);
                let mut any = false;
                for k in 0..len {
                    let row = &mut cs[k * OUT_PROD_J..(k + 1) * OUT_PROD_J];
                    let src = b.ptr.wrapping_add((i1 + k) * b.nb[0] + j * b.nb[1] + i2 * b.nb[2] + i3 * b.nb[3]);
                    if b.nb[1] == 4 {
                        // Consecutive in b (the transposed gradient every weight product passes):
                        // one copy of jb floats.
                        // SAFETY: elements (i1 + k, j..j + jb, i2, i3) are inside b, 4 bytes apart.
                        unsafe { core::ptr::copy_nonoverlapping(src, row.as_mut_ptr() as *mut u8, jb * 4) };
                    } else {
                        for (jj, c) in row[..jb].iter_mut().enumerate() {
                            // SAFETY: element (i1 + k, j + jj, i2, i3) is inside b.
                            *c = unsafe { (src.add(jj * b.nb[1]) as *const f32).read_unaligned() };
                        }
                    }
                    row[jb..].iter_mut().for_each(|c| *c = 0.0);
                    any |= row.iter().any(|&c| c != 0.0);
                }
                if !any {
                    // A block of zeros in b (a logit difference's gradient of the head): the
                    // rows of a are not even converted.
                    j += jb;
                    continue;
                }
                a_rows_f32(a, j, jb, (i2 / r2, i3 / r3), 0..n0, (&mut panel[..], n0, RUN), &mut plain, &mut [])?;
                // Rows past jb have zero coefficients; a stale row there could hold ±∞ (0·∞ = NaN).
                panel[jb * n0..].iter_mut().for_each(|x| *x = 0.0);
                panel_product(acc, n0, &panel, &cs[..len * OUT_PROD_J]);
                j += jb;
            }
            for (k, out) in acc.chunks_exact(n0).enumerate() {
                write_row(dst, i1 + k, i2, i3, out)?;
            }
            r += len;
        }
        Ok(())
    })
}

/// Rows `j..j + jb` of `a`'s matrix `(i2, i3)`, columns `cols` (all of `a.ne[0]`, or whole
/// blocks of it), as f32 into `out`, row jj's values `c0 + RUN·t..` at `jj·ld + t·bs`: rows
/// of the columns for `(ld, bs) = (cols.len(), RUN)`, the blocked product's panels for
/// `(RUN, jb·RUN)` (a last run past the columns filled with zeros there). A repacked
/// weight's whole groups go straight from the packed layout, other rows are dequantized or
/// converted one at a time (`plain`: a row's unpacked bytes, for a packed weight; `one`: a
/// row of the columns as f32, for rows placed other than whole).
#[allow(clippy::too_many_arguments)]
fn a_rows_f32(
    a: &TensorView,
    j: usize,
    jb: usize,
    (i2, i3): (usize, usize),
    cols: core::ops::Range<usize>,
    (out, ld, bs): (&mut [f32], usize, usize),
    plain: &mut [u8],
    one: &mut [f32],
) -> KResult {
    let (n0, c0, nc) = (a.ne[0], cols.start, cols.len());
    let blck = a.ty.blck_size();
    assert!(
        cols.end <= n0 && (nc == n0 || (c0.is_multiple_of(blck) && nc.is_multiple_of(blck))),
        "a_rows_f32: {cols:?}"
    );
    let whole = ld == nc && bs == RUN;
    let mut jj = 0;
    if a.packed {
        // SAFETY: a is one contiguous matrix of ne[1] rows (checked by the caller).
        let data = unsafe { core::slice::from_raw_parts(a.ptr as *const u8, a.ne[1] * a.nb[1]) };
        // Whole groups of a repacked Q8_0 weight straight into the panel.
        let g = crate::cpu::arch::repack::group(a.ty);
        while jj + g <= jb
            && crate::cpu::arch::repack::dequantize_group(
                a.ty,
                n0,
                a.ne[1],
                data,
                j + jj,
                cols.clone(),
                &mut out[jj * ld..],
                ld,
                bs,
            )
        {
            jj += g;
        }
    }
    for jj in jj..jb {
        let mut src = a.row(j + jj, i2, i3);
        if a.packed {
            // SAFETY: a is one contiguous matrix of ne[1] rows (checked by the caller).
            let data = unsafe { core::slice::from_raw_parts(a.ptr as *const u8, a.ne[1] * a.nb[1]) };
            crate::cpu::arch::repack::unpack_row(a.ty, n0, a.ne[1], data, j + jj, plain);
            src = plain.as_mut_ptr();
        }
        let row = if whole { &mut out[jj * nc..(jj + 1) * nc] } else { &mut one[..nc] };
        if a.ty.is_quantized() && n0.is_multiple_of(blck) {
            // Straight into the panel (convert_row would go through a copy).
            // SAFETY: row j + jj of a (or its unpacked copy): whole blocks of n0, of which
            // the columns are whole blocks (asserted above).
            let q = unsafe {
                let at = src.add(c0 / blck * a.ty.type_size());
                core::slice::from_raw_parts(at as *const u8, a.ty.row_size(nc as i64))
            };
            crate::quants::dequantize_row(a.ty, q, row);
        } else {
            // SAFETY: row j + jj of a (or its unpacked copy), its columns (all of them for
            // a quantized type here), into the panel.
            unsafe {
                let at = src.add(c0 / blck * a.nb[0]);
                super::ops::convert_row(at, a.ty, a.nb[0], row.as_mut_ptr() as *mut u8, GgmlType::F32, 4, nc)?
            };
        }
        if !whole {
            for (t, run) in one[..nc].chunks(RUN).enumerate() {
                let dst = &mut out[jj * ld + t * bs..][..RUN];
                dst[..run.len()].copy_from_slice(run);
                dst[run.len()..].iter_mut().for_each(|x| *x = 0.0);
            }
        }
    }
    Ok(())
}

/// A row function of [`pair_rows`]: (dy, x, out).
type PairRow<'a> = &'a (dyn Fn(&[f32], &[f32], &mut [f32]) + Sync);

/// The bytes `t`'s elements span from `t.ptr` (0 for an empty tensor).
fn span(t: &TensorView) -> usize {
    if t.ne.contains(&0) {
        return 0;
    }
    (0..MAX_DIMS).map(|i| (t.ne[i] - 1) * t.nb[i]).sum::<usize>() + t.ty.type_size()
}

/// Whether `t` is f32 with packed, 4-byte aligned rows (a row can be an `&[f32]` in place).
fn f32_rows(t: &TensorView) -> bool {
    t.ty == GgmlType::F32
        && !t.packed
        && t.nb[0] == 4
        && (t.ptr as usize).is_multiple_of(4)
        && t.nb.iter().all(|s| s.is_multiple_of(4))
}

/// Σ `f(i)` for i in 0..n in f64, over 8 partial sums (i mod 8) added as a tree: a chain of
/// f64 adds per element waited on the add's latency (4 cycles) for rows of 50 257.
#[inline(always)]
fn sum_f64(n: usize, f: impl Fn(usize) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let whole = n - n % 8;
    for i in (0..whole).step_by(8) {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += f(i + l);
        }
    }
    for (l, i) in (whole..n).enumerate() {
        acc[l] += f(i);
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// Calls `f(dy, x, out)` per row of `dy` and `x` (same shapes as `dst`), as f32 rows: in
/// place where all three have f32 rows and `dst` overlaps neither source (an in-place
/// result, or another type, goes through copies of the rows).
fn pair_rows(exec: &Exec, dy: &TensorView, x: &TensorView, dst: &TensorView, what: &str, f: PairRow<'_>) -> KResult {
    want_f32(dst, what)?;
    if dy.ne != dst.ne || x.ne != dst.ne {
        return invalid(format!("{what}: dy ne={:?}, x ne={:?}, result ne={:?}", dy.ne, x.ne, dst.ne));
    }
    let n = dst.ne[0];
    let apart = |a: &TensorView| {
        let (a0, d0) = (a.ptr as usize, dst.ptr as usize);
        a0 + span(a) <= d0 || d0 + span(dst) <= a0
    };
    if [dy, x, dst].iter().all(|t| f32_rows(t)) && apart(dy) && apart(x) {
        return par_rows(exec, dst.nrows(), n, &|rows| {
            for r in rows {
                let (i1, i2, i3) = dst.row_index(r);
                // SAFETY: rows of n f32s (packed, aligned) inside their tensors; dst's row is
                // this job's own and overlaps neither source (checked above).
                let (g, v, out) = unsafe {
                    (
                        core::slice::from_raw_parts(dy.row(i1, i2, i3) as *const f32, n),
                        core::slice::from_raw_parts(x.row(i1, i2, i3) as *const f32, n),
                        core::slice::from_raw_parts_mut(dst.row(i1, i2, i3) as *mut f32, n),
                    )
                };
                f(g, v, out);
            }
            Ok(())
        });
    }
    par_rows(exec, dst.nrows(), n, &|rows| {
        let (mut g, mut v, mut out) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
        for r in rows {
            let (i1, i2, i3) = dst.row_index(r);
            read_row(dy, i1, i2, i3, &mut g)?;
            read_row(x, i1, i2, i3, &mut v)?;
            f(&g, &v, &mut out);
            write_row(dst, i1, i2, i3, &out)?;
        }
        Ok(())
    })
}

/// ggml_soft_max_ext_back: dx = scale · y ⊙ (dy − Σ dy ⊙ y), per row (the sum in f64).
pub(crate) fn soft_max_back(dy: &TensorView, y: &TensorView, dst: &TensorView, scale: f32, exec: &Exec) -> KResult {
    pair_rows(exec, dy, y, dst, "soft_max_back", &|g, y, out| {
        let dot = sum_f64(g.len(), |i| g[i] as f64 * y[i] as f64) as f32;
        for ((o, &gi), &yi) in out.iter_mut().zip(g).zip(y) {
            *o = scale * yi * (gi - dot);
        }
    })
}

/// log(softmax(x)) per row: x − max − log Σ exp(x − max); the exponentials are the ISA
/// table's (`exp_sum`, f32 within 2 ulp, as the forward soft_max's), the sum and the
/// subtraction in f64. The model's loss runs this over n_vocab × seqLen logits: f64 exps
/// per element cost more than the head's forward product.
pub(crate) fn log_soft_max(a: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    let k = crate::cpu::arch::kernels();
    pair_rows(exec, a, a, dst, "log_soft_max", &|_, x, out| {
        let max = (k.max)(x);
        out.copy_from_slice(x);
        let lse = max as f64 + libm::log((k.exp_sum)(out, max));
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (v as f64 - lse) as f32;
        }
    })
}

/// `log_soft_max`'s backward: dx = dy − exp(y) · Σ dy per row (the sum and the products in
/// f64, the exponentials the ISA table's, as in `log_soft_max`).
pub(crate) fn log_soft_max_back(dy: &TensorView, y: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    let k = crate::cpu::arch::kernels();
    pair_rows(exec, dy, y, dst, "log_soft_max_back", &|g, y, out| {
        let sum = sum_f64(g.len(), |i| g[i] as f64);
        out.copy_from_slice(y);
        (k.exp_sum)(out, 0.0);
        for (o, &gi) in out.iter_mut().zip(g) {
            *o = (gi as f64 - *o as f64 * sum) as f32;
        }
    })
}

/// GELU's (tanh form) derivative times dy, in f64 per element ([`crate::cpu::arch::gelu_back_f32`];
/// the ISA table's `gelu_back`).
pub(crate) fn gelu_back(dy: &TensorView, x: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    let kernel = crate::cpu::arch::kernels().gelu_back;
    pair_rows(exec, dy, x, dst, "gelu_back", &|g, x, out| kernel(g, x, out))
}

/// Layer norm's backward: with y = (x − μ)/σ, dx = (dy − mean(dy) − y · mean(dy ⊙ y)) / σ;
/// the means and the variance in f64.
pub(crate) fn norm_back(dy: &TensorView, x: &TensorView, dst: &TensorView, eps: f32, exec: &Exec) -> KResult {
    pair_rows(exec, dy, x, dst, "norm_back", &|g, x, out| {
        let n = x.len() as f64;
        if x.is_empty() {
            return;
        }
        let mean = sum_f64(x.len(), |i| x[i] as f64) / n;
        let var = sum_f64(x.len(), |i| (x[i] as f64 - mean) * (x[i] as f64 - mean)) / n;
        let inv = 1.0 / libm::sqrt(var + eps as f64);
        let mg = sum_f64(x.len(), |i| g[i] as f64) / n;
        let mgy = sum_f64(x.len(), |i| g[i] as f64 * (x[i] as f64 - mean) * inv) / n;
        for ((o, &gi), &xi) in out.iter_mut().zip(g).zip(x) {
            let y = (xi as f64 - mean) * inv;
            *o = ((gi as f64 - mg - y * mgy) * inv) as f32;
        }
    })
}

/// ggml_repeat_back: dst[j] = Σ a[i] over every i with i mod dst.ne = j (sums in f64).
pub(crate) fn repeat_back(a: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    want_f32(dst, "repeat_back result")?;
    if (0..MAX_DIMS).any(|i| dst.ne[i] == 0 || !a.ne[i].is_multiple_of(dst.ne[i])) {
        return invalid(format!("repeat_back: ne={:?} onto ne={:?}", a.ne, dst.ne));
    }
    let n0 = dst.ne[0];
    let reps = [a.ne[1] / dst.ne[1], a.ne[2] / dst.ne[2], a.ne[3] / dst.ne[3]];
    par_rows(exec, dst.nrows(), a.nelements() / dst.nrows().max(1), &|rows| {
        let mut row = vec![0.0f32; a.ne[0]];
        let mut sum = vec![0.0f64; n0];
        let mut out = vec![0.0f32; n0];
        for r in rows {
            let (j1, j2, j3) = dst.row_index(r);
            sum.iter_mut().for_each(|s| *s = 0.0);
            for k3 in 0..reps[2] {
                for k2 in 0..reps[1] {
                    for k1 in 0..reps[0] {
                        let (i1, i2, i3) = (j1 + k1 * dst.ne[1], j2 + k2 * dst.ne[2], j3 + k3 * dst.ne[3]);
                        read_row(a, i1, i2, i3, &mut row)?;
                        for chunk in row.chunks_exact(n0) {
                            sum.iter_mut().zip(chunk).for_each(|(s, &v)| *s += v as f64);
                        }
                    }
                }
            }
            out.iter_mut().zip(&sum).for_each(|(o, &s)| *o = s as f32);
            write_row(dst, j1, j2, j3, &out)?;
        }
        Ok(())
    })
}

/// ggml_get_rows_back: dst = zeros, then row a[:, i] added into row idx[i] for every i, in
/// index order (each thread owns a range of dst's rows and scans every index).
pub(crate) fn get_rows_back(a: &TensorView, idx: &TensorView, dst: &TensorView, exec: &Exec) -> KResult {
    want_f32(dst, "get_rows_back result")?;
    if idx.ty != GgmlType::I32 {
        return unsupported(format!("get_rows_back indices must be i32, not {}", idx.ty));
    }
    let n = idx.ne[0];
    if a.ne[0] != dst.ne[0] || a.ne[1] != n || a.nrows() != n || idx.nrows() != 1 || dst.nrows() != dst.ne[1] {
        return invalid(format!("get_rows_back: a ne={:?}, indices ne={:?}, result ne={:?}", a.ne, idx.ne, dst.ne));
    }
    let n0 = dst.ne[0];
    // SAFETY (both): indices below ne[0] of idx.
    let index = |i: usize| unsafe { (idx.ptr.add(i * idx.nb[0]) as *const i32).read_unaligned() };
    if let Some(i) = (0..n).find(|&i| index(i) < 0 || index(i) as usize >= dst.ne[1]) {
        return invalid(format!("get_rows_back: index {} at [{i}] is outside 0..{}", index(i), dst.ne[1]));
    }
    par_rows(exec, dst.ne[1], n0, &|rows| {
        let mut acc = vec![0.0f32; n0];
        let mut row = vec![0.0f32; n0];
        let zeros = vec![0.0f32; n0];
        for r in rows.clone() {
            write_row(dst, r, 0, 0, &zeros)?;
        }
        for i in 0..n {
            let v = index(i) as usize;
            if !rows.contains(&v) {
                continue;
            }
            read_row(dst, v, 0, 0, &mut acc)?;
            read_row(a, i, 0, 0, &mut row)?;
            acc.iter_mut().zip(&row).for_each(|(o, &x)| *o += x);
            write_row(dst, v, 0, 0, &acc)?;
        }
        Ok(())
    })
}

/// ggml_acc: dst = a (skipped when the allocator gave dst a's memory), then b added into the
/// view of dst at byte `offset` with strides (4, nb[0], nb[1], nb[2]). One thread: a view's
/// rows need not be disjoint.
pub(crate) fn acc(a: &TensorView, b: &TensorView, dst: &TensorView, nb: [usize; 3], offset: usize) -> KResult {
    want_f32(a, "acc src0")?;
    want_f32(dst, "acc result")?;
    if a.ne != dst.ne || !a.is_contiguous() || !dst.is_contiguous() {
        return invalid(format!("acc: src0 ne={:?} nb={:?}, result ne={:?} nb={:?}", a.ne, a.nb, dst.ne, dst.nb));
    }
    let bytes = dst.nelements() * 4;
    let span = (0..3).map(|i| (b.ne[i + 1].max(1) - 1) * nb[i]).sum::<usize>() + b.ne[0] * 4;
    if b.nelements() == 0 || offset + span > bytes {
        return invalid(format!("acc: ne={:?} at offset {offset}, strides {nb:?} past {bytes} bytes", b.ne));
    }
    if a.ptr != dst.ptr {
        // SAFETY: both are `bytes` long, distinct allocations or the same one.
        unsafe { core::ptr::copy(a.ptr, dst.ptr, bytes) };
    }
    let mut row = vec![0.0f32; b.ne[0]];
    b.for_each_row(|i1, i2, i3| {
        read_row(b, i1, i2, i3, &mut row)?;
        let base = dst.ptr.wrapping_add(offset + i1 * nb[0] + i2 * nb[1] + i3 * nb[2]);
        for (i0, &v) in row.iter().enumerate() {
            // SAFETY: inside dst (offset + span checked above).
            unsafe {
                let p = base.add(i0 * 4) as *mut f32;
                p.write_unaligned(p.read_unaligned() + v);
            }
        }
        Ok(())
    })
}

/// diag_mask_inf's backward: a[i0, i1] = 0 where i0 > n_past + i1.
pub(crate) fn diag_mask_zero(a: &TensorView, dst: &TensorView, n_past: i32, exec: &Exec) -> KResult {
    map_rows(
        exec,
        a,
        dst,
        || (),
        |_, row, [i1, _, _]| {
            let first = (n_past as i64 + i1 as i64 + 1).max(0) as usize;
            if first < row.len() {
                row[first..].iter_mut().for_each(|x| *x = 0.0);
            }
            Ok(())
        },
    )
}

/// Every element of dst set to `v`.
pub(crate) fn fill(dst: &TensorView, v: f32, exec: &Exec) -> KResult {
    want_f32(dst, "fill result")?;
    let row = vec![v; dst.ne[0]];
    par_rows(exec, dst.nrows(), dst.ne[0], &|rows| {
        for r in rows {
            let (i1, i2, i3) = dst.row_index(r);
            write_row(dst, i1, i2, i3, &row)?;
        }
        Ok(())
    })
}
