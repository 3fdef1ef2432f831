//! Every CPU op on random inputs — contiguous, viewed and permuted — against naive f64
//! references. Each check states its tolerance and why.
//!
//! Tests named `quant_*` need crate::quants (dequantize_row, quantize_row, vec_dot).

use ggweb::backend::{Backend, BackendError, BufferType};
use ggweb::cpu::{compute_graph, CpuBackend, CpuBufferType};
use ggweb::tensor::{Context, ContextParams, Tensor};
use ggweb::types::GgmlType::{self, F16, F32, I32};
use ggweb::Graph;
use half::f16;

use crate::support::rng::Rng;
use crate::support::simd_checks;
use crate::support::tensors;
use crate::support::tensors::*;

fn try_compute(t: &Tensor) -> Result<(), BackendError> {
    let mut gf = Graph::new();
    gf.build_forward_expand(t);
    compute_graph(&gf, 1)
}

// --- cont, cpy ---

/// Copies are exact: the result must equal the source's logical order bit for bit.
#[test]
fn cont_of_permuted_4d() {
    let ctx = ctx(8);
    let mut rng = Rng::new(1);
    for ty in [F32, F16] {
        let (a, vals) = random_strided(&ctx, &mut rng, ty, [5, 3, 4, 2]);
        let c = ctx.cont(&a);
        // Every axis order, through a second permute of the strided tensor.
        let p = ctx.permute(&a, 3, 1, 0, 2);
        let cp = ctx.cont(&p);
        compute(&c, 1);
        compute(&cp, 1);
        assert!(c.is_contiguous() && c.ty == ty);
        assert_eq!(c.to_f32_vec(), vals, "{ty}");
        let ane = ne_of(&a);
        let pne = ne_of(&p);
        let mut want = vec![0.0f32; vals.len()];
        // p's dim j is a's dim i where axes[i] = j: p[j0, j1, j2, j3] = a[i0, i1, i2, i3].
        for i3 in 0..ane[3] {
            for i2 in 0..ane[2] {
                for i1 in 0..ane[1] {
                    for i0 in 0..ane[0] {
                        let (j3, j1, j0, j2) = (i0, i1, i2, i3);
                        want[at(pne, j0, j1, j2, j3)] = vals[at(ane, i0, i1, i2, i3)];
                    }
                }
            }
        }
        assert_eq!(cp.to_f32_vec(), want, "{ty} permuted twice");
    }
}

/// cont_4d copies in the source's logical order into a new shape.
#[test]
fn cont_4d_reshapes_while_copying() {
    let ctx = ctx(4);
    let mut rng = Rng::new(2);
    let (a, vals) = random_strided(&ctx, &mut rng, F32, [6, 4, 3, 1]);
    let c = ctx.cont_4d(&a, 8, 3, 3, 1);
    let c2 = ctx.cont_2d(&a, 24, 3);
    compute(&c, 1);
    compute(&c2, 1);
    assert_eq!(c.ne, [8, 3, 3, 1]);
    assert_eq!(c.to_f32_vec(), vals);
    assert_eq!(c2.to_f32_vec(), vals);
}

/// F32 → F16 rounds to nearest (what half::f16::from_f32 gives); F16 → F32 is exact.
#[test]
fn cpy_f32_to_f16_and_back() {
    let ctx = ctx(4);
    let mut rng = Rng::new(3);
    let (a, vals) = random_strided(&ctx, &mut rng, F32, [7, 5, 2, 1]);
    let h = ctx.new_tensor_3d(F16, 7, 5, 2);
    let c = ctx.cpy(&a, &h);
    compute(&c, 1);
    let want: Vec<f32> = vals.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
    assert_eq!(h.to_f32_vec(), want);
    assert_eq!(c.to_f32_vec(), want, "cpy's result is a view of b");

    let back = ctx.new_tensor_3d(F32, 7, 5, 2);
    let c = ctx.cpy(&h, &back);
    compute(&c, 1);
    assert_eq!(back.to_f32_vec(), want);
}

/// Writing new tokens' V into a transposed F16 cache through strided views on both sides
/// (llama.cpp's V layout): same shapes, neither contiguous.
#[test]
fn cpy_into_strided_cache_view() {
    let ctx = ctx(4);
    let mut rng = Rng::new(4);
    let (d, n, n_ctx, n_past) = (8i64, 3i64, 10i64, 4i64);
    let (vcur, vals) = random_tensor(&ctx, &mut rng, F32, [d, n, 1, 1], -1.0, 1.0);
    let cache = ctx.new_tensor_2d(F16, n_ctx, d); // row i = dim i across positions
    cache.set_f32_slice(&vec![9.0; (n_ctx * d) as usize]);
    let dst = ctx.view_2d(&cache, n, d, cache.nb[1], n_past as usize * 2);
    let c = ctx.cpy(&ctx.transpose(&vcur), &dst);
    compute(&c, 1);
    let got = cache.to_f32_vec();
    for i in 0..d as usize {
        for p in 0..n_ctx as usize {
            let want = if p >= n_past as usize && p < (n_past + n) as usize {
                f16::from_f32(vals[(p - n_past as usize) * d as usize + i]).to_f32()
            } else {
                9.0
            };
            assert_eq!(got[i * n_ctx as usize + p], want, "dim {i} pos {p}");
        }
    }
}

/// Different shapes, destination strided: element by element in logical order.
#[test]
fn cpy_between_shapes_into_transposed_view() {
    let ctx = ctx(4);
    let mut rng = Rng::new(5);
    let (a, vals) = random_tensor(&ctx, &mut rng, F32, [8, 3, 1, 1], -1.0, 1.0);
    let c = ctx.new_tensor_2d(F32, 4, 6);
    let b = ctx.transpose(&c); // ne [6, 4], nb [16, 4]
    compute(&ctx.cpy(&a, &b), 1);
    let got = c.to_f32_vec();
    for (k, &v) in vals.iter().enumerate() {
        let (j0, j1) = (k % 6, k / 6); // b's logical index of element k
        assert_eq!(got[j0 * 4 + j1], v, "element {k}"); // b[j0, j1] = c[j1, j0]
    }
}

// --- get_rows ---

/// Row lookups are copies (F32, I32) or exact conversions (F16 → F32).
#[test]
fn get_rows_f32_f16_i32() {
    let ctx = ctx(4);
    let mut rng = Rng::new(6);
    for ty in [F32, F16] {
        let (a, vals) = random_tensor(&ctx, &mut rng, ty, [10, 7, 1, 1], -1.0, 1.0);
        let idx = ctx.new_tensor_1d(I32, 5);
        let rows = [3, 0, 6, 3, 1];
        idx.set_i32_slice(&rows);
        let g = ctx.get_rows(&a, &idx);
        assert_eq!((g.ty, g.ne), (F32, [10, 5, 1, 1]));
        compute(&g, 1);
        let want: Vec<f32> = rows.iter().flat_map(|&r| vals[r as usize * 10..][..10].to_vec()).collect();
        assert_eq!(g.to_f32_vec(), want, "{ty}");
    }
    let a = ctx.new_tensor_2d(I32, 2, 3);
    a.set_i32_slice(&[10, 11, 20, 21, 30, 31]);
    let idx = ctx.new_tensor_1d(I32, 2);
    idx.set_i32_slice(&[2, 0]);
    let g = ctx.get_rows(&a, &idx);
    compute(&g, 1);
    assert_eq!(g.to_i32_vec(), [30, 31, 10, 11]);
}

/// 3-d: indices [n, ne11, ne12] pick rows of a's matrix i11 (a.ne2 = ne11), from a
/// permuted (strided) a.
#[test]
fn get_rows_batched_from_strided() {
    let ctx = ctx(4);
    let mut rng = Rng::new(7);
    let (a, vals) = random_strided(&ctx, &mut rng, F32, [6, 5, 3, 1]);
    let idx = ctx.new_tensor_3d(I32, 4, 3, 1);
    let rows: Vec<i32> = (0..12).map(|_| rng.below(5) as i32).collect();
    idx.set_i32_slice(&rows);
    let g = ctx.get_rows(&a, &idx);
    compute(&g, 1);
    let got = g.to_f32_vec();
    for i11 in 0..3 {
        for i10 in 0..4 {
            let r = rows[i11 * 4 + i10] as usize;
            for i0 in 0..6 {
                assert_eq!(got[at([6, 4, 3, 1], i0, i10, i11, 0)], vals[at([6, 5, 3, 1], i0, r, i11, 0)]);
            }
        }
    }
}

/// Bad data is an error naming the index, not a panic.
#[test]
fn get_rows_out_of_range_is_an_error() {
    let ctx = ctx(1);
    let a = ctx.new_tensor_2d(F32, 4, 3);
    let idx = ctx.new_tensor_1d(I32, 2);
    idx.set_i32_slice(&[1, 3]);
    let g = ctx.get_rows(&a, &idx);
    match try_compute(&g) {
        Err(BackendError::Other(msg)) => assert!(msg.contains("index 3") && msg.contains("0..3"), "{msg}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

// --- add, mul, scale ---

/// f32 a ± b and a·b are correctly rounded, and so is the f64 result rounded to f32 (the
/// f64 product of two f32 is exact): the results must be equal.
#[test]
fn add_mul_broadcast() {
    let ctx = ctx(8);
    let mut rng = Rng::new(8);
    let ane = [8i64, 6, 3, 2];
    for bne in [[8i64, 6, 3, 2], [8, 1, 1, 1], [8, 6, 1, 2], [1, 6, 3, 1], [4, 1, 3, 1], [1, 1, 1, 1]] {
        for strided in [false, true] {
            let (a, av) = if strided {
                random_strided(&ctx, &mut rng, F32, ane)
            } else {
                random_tensor(&ctx, &mut rng, F32, ane, -1.0, 1.0)
            };
            let (b, bv) = random_tensor(&ctx, &mut rng, F32, bne, -1.0, 1.0);
            let add = ctx.add(&a, &b);
            let mul = ctx.mul(&a, &b);
            compute(&add, 1);
            compute(&mul, 1);
            let (an, bn) = (ane.map(|x| x as usize), bne.map(|x| x as usize));
            let mut want_add = vec![0.0f32; av.len()];
            let mut want_mul = vec![0.0f32; av.len()];
            for i3 in 0..an[3] {
                for i2 in 0..an[2] {
                    for i1 in 0..an[1] {
                        for i0 in 0..an[0] {
                            let x = av[at(an, i0, i1, i2, i3)] as f64;
                            let y = bv[at(bn, i0 % bn[0], i1 % bn[1], i2 % bn[2], i3 % bn[3])] as f64;
                            want_add[at(an, i0, i1, i2, i3)] = (x + y) as f32;
                            want_mul[at(an, i0, i1, i2, i3)] = (x * y) as f32;
                        }
                    }
                }
            }
            assert_eq!(add.to_f32_vec(), want_add, "add b={bne:?} strided={strided}");
            assert_eq!(mul.to_f32_vec(), want_mul, "mul b={bne:?} strided={strided}");
        }
    }
}

/// x·s in f32 is correctly rounded: equal to the f64 product rounded.
#[test]
fn scale_strided() {
    let ctx = ctx(4);
    let mut rng = Rng::new(9);
    let (a, av) = random_strided(&ctx, &mut rng, F32, [7, 3, 2, 2]);
    let s = ctx.scale(&a, 0.125 + 1e-3);
    compute(&s, 1);
    let want: Vec<f32> = av.iter().map(|&x| (x as f64 * (0.125f32 + 1e-3) as f64) as f32).collect();
    assert_eq!(s.to_f32_vec(), want);
}

// --- norm, gelu ---

/// Mean and variance are summed in f64; what is left is f32 rounding of x - mean, of the
/// variance and of 1/sqrt: a few ulp of outputs of size ≤ ~4, so 2e-6 absolute.
#[test]
fn norm_rows_contiguous_and_strided() {
    let ctx = ctx(8);
    let mut rng = Rng::new(10);
    for (ne, strided) in [([768i64, 5, 1, 1], false), ([64, 4, 3, 1], true), ([1, 3, 1, 1], false)] {
        let (a, mut av) = if strided {
            random_strided(&ctx, &mut rng, F32, ne)
        } else {
            random_tensor(&ctx, &mut rng, F32, ne, -2.0, 3.0)
        };
        if !strided && ne[0] == 768 {
            // An offset far from zero: catches a one-pass variance.
            av.iter_mut().for_each(|x| *x += 100.0);
            a.set_f32_slice(&av);
        }
        let n = ctx.norm(&a, 1e-5);
        compute(&n, 1);
        let want = ref_norm(&av, ne[0] as usize, 1e-5);
        assert_close(&format!("norm {ne:?}"), &n.to_f32_vec(), &want, |_| 2e-6);
    }
}

/// GELU is evaluated in f64 and rounded once: within 1e-6 relative of the f64 tanh form
/// everywhere (no f16 table as in ggml's CPU default, whose error is ~1e-3), down to f32's
/// smallest subnormal (1.4e-45) where results underflow.
#[test]
fn gelu_matches_tanh_form() {
    let ctx = ctx(4);
    let mut rng = Rng::new(11);
    let mut xs = rng.vec(4000, -10.0, 10.0);
    xs.extend([0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 3.0, -3.0, 5.0, -5.0, 20.0, -20.0, 88.0, -88.0]);
    let a = ctx.new_tensor_1d(F32, xs.len() as i64);
    a.set_f32_slice(&xs);
    let g = ctx.gelu(&a);
    compute(&g, 1);
    let want: Vec<f64> = xs.iter().map(|&x| ref_gelu(x as f64)).collect();
    assert_close("gelu", &g.to_f32_vec(), &want, |i| 1e-6 * want[i].abs() + 1e-45);
    // Strided input gives the same values.
    let (s, sv) = random_strided(&ctx, &mut rng, F32, [9, 4, 2, 1]);
    let g = ctx.gelu(&s);
    compute(&g, 1);
    let want: Vec<f64> = sv.iter().map(|&x| ref_gelu(x as f64)).collect();
    assert_close("gelu strided", &g.to_f32_vec(), &want, |i| 1e-6 * want[i].abs() + 1e-45);
    assert_eq!(ggweb::cpu::gelu_f32(1.0), ref_gelu(1.0) as f32);
}

// --- soft_max, diag_mask_inf ---

/// softmax(x·scale + mask): x·scale + mask is rounded to f32 before the exp (≤ 1 ulp of
/// values ≤ ~5, i.e. 5e-7 relative change of the exp), expf is within 1 ulp, sums are
/// f64: 2e-6 relative plus 1e-9 absolute for outputs near zero.
#[test]
fn soft_max_ext_mask_scale() {
    let ctx = ctx(8);
    let mut rng = Rng::new(12);
    let ne = [11i64, 4, 3, 2];
    for mask_ty in [None, Some(F32), Some(F16)] {
        for strided in [false, true] {
            let (a, av) = if strided {
                random_strided(&ctx, &mut rng, F32, ne)
            } else {
                random_tensor(&ctx, &mut rng, F32, ne, -4.0, 4.0)
            };
            // Mask: 6 rows (padded past a's 4), one matrix for dims 2 and 3 broadcast
            // across a's 2 in dim 3: causal -inf plus small values.
            let mne = [11usize, 6, 3, 1];
            let mv: Vec<f32> = (0..11 * 6 * 3)
                .map(|i| {
                    let (i0, i1) = (i % 11, (i / 11) % 6);
                    if i0 > i1 + 6 {
                        f32::NEG_INFINITY
                    } else {
                        f16::from_f32(rng.uniform(-1.0, 1.0)).to_f32()
                    }
                })
                .collect();
            let mask = mask_ty.map(|ty| {
                let m = ctx.new_tensor(ty, &[11, 6, 3, 1]);
                m.set_f32_slice(&mv);
                m
            });
            let s = ctx.soft_max_ext(&a, mask.as_ref(), 0.3, 0.0);
            compute(&s, 1);
            let want = ref_soft_max(&av, ne_of(&a), mask.as_ref().map(|_| (&mv[..], mne)), 0.3f32 as f64);
            let got = s.to_f32_vec();
            assert_close(&format!("soft_max mask={mask_ty:?} strided={strided}"), &got, &want, |i| {
                2e-6 * want[i] + 1e-9
            });
            for row in got.chunks(11) {
                let sum: f64 = row.iter().map(|&x| x as f64).sum();
                assert!((sum - 1.0).abs() < 1e-6, "row sums to {sum}");
            }
        }
    }
    // Plain soft_max; a row masked out entirely gives zeros.
    let a = ctx.new_tensor_2d(F32, 3, 2);
    a.set_f32_slice(&[1.0, 2.0, 3.0, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY]);
    let s = ctx.soft_max(&a);
    compute(&s, 1);
    let e = [1f64.exp(), 2f64.exp(), 3f64.exp()];
    let want = [e[0] / (e[0] + e[1] + e[2]), e[1] / (e[0] + e[1] + e[2]), e[2] / (e[0] + e[1] + e[2]), 0.0, 0.0, 0.0];
    assert_close("soft_max", &s.to_f32_vec(), &want, |_| 2e-7);
}

/// Masking copies or writes -inf: exact.
#[test]
fn diag_mask_inf_causal() {
    let ctx = ctx(4);
    let mut rng = Rng::new(13);
    for n_past in [0i32, 2] {
        let (a, av) = random_strided(&ctx, &mut rng, F32, [6, 4, 3, 1]);
        let m = ctx.diag_mask_inf(&a, n_past);
        compute(&m, 1);
        let got = m.to_f32_vec();
        for (i, &g) in got.iter().enumerate() {
            let (i0, i1) = (i % 6, (i / 6) % 4);
            let want = if i0 as i32 > n_past + i1 as i32 { f32::NEG_INFINITY } else { av[i] };
            assert_eq!(g, want, "n_past {n_past} element {i}");
        }
    }
}

// --- mul_mat ---

/// f32 dot products with several partial sums: error ≤ ~(K/lanes + log lanes)·2^-24 of
/// Σ|a·b| — under 1e-5·Σ|a·b| for K ≤ 1024.
fn mul_mat_tol(mag: &[f64]) -> impl Fn(usize) -> f64 + '_ {
    |i| 1e-5 * mag[i] + 1e-30
}

#[test]
fn mul_mat_f32_shapes_and_broadcast() {
    let ctx = ctx(32);
    let mut rng = Rng::new(14);
    // (K, M, N, a batch, b batch): K values exercise every SIMD tail; a ne2=1 broadcast
    // over b ne2=3; ne3 broadcast too.
    let cases = [
        (1i64, 3i64, 2i64, [1i64, 1], [1i64, 1]),
        (3, 5, 4, [1, 1], [3, 1]),
        (17, 9, 3, [1, 1], [3, 1]),
        (64, 16, 7, [2, 1], [4, 2]),
        (255, 33, 5, [1, 2], [3, 2]),
        (768, 70, 3, [1, 1], [1, 1]),
        (1000, 4, 1, [1, 1], [2, 1]),
    ];
    for (k, m, n, abat, bbat) in cases {
        let (a, av) = random_tensor(&ctx, &mut rng, F32, [k, m, abat[0], abat[1]], -1.0, 1.0);
        let (b, bv) = random_tensor(&ctx, &mut rng, F32, [k, n, bbat[0], bbat[1]], -1.0, 1.0);
        let c = ctx.mul_mat(&a, &b);
        assert_eq!(c.ne, [m, n, bbat[0], bbat[1]]);
        compute(&c, 1);
        let (want, mag) = ref_mul_mat(&av, ne_of(&a), &bv, ne_of(&b));
        assert_close(&format!("mul_mat K={k} M={m} N={n}"), &c.to_f32_vec(), &want, mul_mat_tol(&mag));
    }
}

/// Attention's products: K and Q permuted views of packed memory (rows packed, heads
/// interleaved), then V made contiguous by cont — and b strided in dim 0 (a transposed
/// view), which the kernel gathers first.
#[test]
fn mul_mat_permuted_like_attention() {
    let ctx = ctx(16);
    let mut rng = Rng::new(15);
    let (hd, nh, n, l) = (64i64, 4i64, 5i64, 9i64);
    let (qflat, qv) = random_tensor(&ctx, &mut rng, F32, [hd * nh, n, 1, 1], -1.0, 1.0);
    let (kflat, kv) = random_tensor(&ctx, &mut rng, F32, [hd * nh, l, 1, 1], -1.0, 1.0);
    let q = ctx.permute(&ctx.reshape_3d(&qflat, hd, nh, n), 0, 2, 1, 3); // [hd, n, nh]
    let k = ctx.permute(&ctx.reshape_3d(&kflat, hd, nh, l), 0, 2, 1, 3); // [hd, l, nh]
    let kq = ctx.mul_mat(&k, &q);
    assert_eq!(kq.ne, [l, n, nh, 1]);
    compute(&kq, 1);
    // Reference on the logical (permuted) values.
    let qp: Vec<f32> = q.to_f32_vec();
    let kp: Vec<f32> = k.to_f32_vec();
    let (want, mag) = ref_mul_mat(&kp, ne_of(&k), &qp, ne_of(&q));
    assert_close("KQ", &kq.to_f32_vec(), &want, mul_mat_tol(&mag));
    // And directly from the flat buffers, to be sure the views read the right bytes.
    let (hd, nh, n, l) = (hd as usize, nh as usize, n as usize, l as usize);
    let got = kq.to_f32_vec();
    for h in 0..nh {
        for t in 0..n {
            for j in 0..l {
                let s: f64 =
                    (0..hd).map(|d| kv[j * hd * nh + h * hd + d] as f64 * qv[t * hd * nh + h * hd + d] as f64).sum();
                assert!((got[(h * n + t) * l + j] as f64 - s).abs() < 1e-5 * hd as f64);
            }
        }
    }

    // b = a transposed view: nb0 > element size, gathered before the dots.
    let (w, wv) = random_tensor(&ctx, &mut rng, F32, [7, 6, 1, 1], -1.0, 1.0);
    let (x, _) = random_tensor(&ctx, &mut rng, F32, [5, 7, 1, 1], -1.0, 1.0);
    let xt = ctx.transpose(&x); // [7, 5], nb [20, 4]
    let c = ctx.mul_mat(&w, &xt);
    compute(&c, 1);
    let (want, mag) = ref_mul_mat(&wv, [7, 6, 1, 1], &xt.to_f32_vec(), [7, 5, 1, 1]);
    assert_close("b transposed", &c.to_f32_vec(), &want, mul_mat_tol(&mag));

    // a a strided view (rows with gaps, like Qcur) and b permuted in dims 1..3.
    let (a, av) = random_strided_rows(&ctx, &mut rng, F32, [16, 6, 3, 1]);
    let (b, bv) = random_strided_rows(&ctx, &mut rng, F32, [16, 4, 3, 1]);
    let c = ctx.mul_mat(&a, &b);
    compute(&c, 1);
    let (want, mag) = ref_mul_mat(&av, ne_of(&a), &bv, ne_of(&b));
    assert_close("strided a and b", &c.to_f32_vec(), &want, mul_mat_tol(&mag));
}

/// F16 weights: the kernel multiplies the f16 values by f32 activations (b is not rounded),
/// so against a reference on the same f16 values only f32 summation error remains.
#[test]
fn mul_mat_f16_weights() {
    let ctx = ctx(16);
    let mut rng = Rng::new(16);
    for (k, m, n, abat, bbat) in
        [(5i64, 3i64, 2i64, 1i64, 1i64), (31, 7, 4, 1, 3), (768, 40, 3, 1, 1), (129, 9, 2, 2, 4)]
    {
        let (a, av) = random_tensor(&ctx, &mut rng, F16, [k, m, abat, 1], -1.0, 1.0);
        let (b, bv) = random_tensor(&ctx, &mut rng, F32, [k, n, bbat, 1], -1.0, 1.0);
        let c = ctx.mul_mat(&a, &b);
        compute(&c, 1);
        let (want, mag) = ref_mul_mat(&av, ne_of(&a), &bv, ne_of(&b));
        assert_close(&format!("f16 mul_mat K={k}"), &c.to_f32_vec(), &want, mul_mat_tol(&mag));
    }
    // b in F16 as well is converted to f32 rows first.
    let (a, av) = random_tensor(&ctx, &mut rng, F16, [40, 5, 1, 1], -1.0, 1.0);
    let (b, bv) = random_tensor(&ctx, &mut rng, F16, [40, 3, 1, 1], -1.0, 1.0);
    let c = ctx.mul_mat(&a, &b);
    compute(&c, 1);
    let (want, mag) = ref_mul_mat(&av, [40, 5, 1, 1], &bv, [40, 3, 1, 1]);
    assert_close("f16 x f16", &c.to_f32_vec(), &want, mul_mat_tol(&mag));
}

/// Splitting rows over threads changes no element's arithmetic: results are identical.
#[test]
fn mul_mat_threads_give_identical_results() {
    let ctx = ctx(32);
    let mut rng = Rng::new(17);
    for ty in [F32, F16] {
        let (a, _) = random_tensor(&ctx, &mut rng, ty, [256, 300, 2, 1], -1.0, 1.0);
        let (b, _) = random_tensor(&ctx, &mut rng, F32, [256, 9, 4, 1], -1.0, 1.0);
        let c1 = ctx.mul_mat(&a, &b);
        let c4 = ctx.mul_mat(&a, &b);
        compute(&c1, 1);
        compute(&c4, 4);
        assert_eq!(c1.to_f32_vec(), c4.to_f32_vec(), "{ty}");
    }
}

/// Row-wise ops, copies and get_rows split their rows over the threads once a tensor has
/// 32K elements or more: each row is computed by one thread exactly as before, so results
/// must be identical, in place as well (each thread reads a row before writing it).
#[test]
fn row_ops_threads_give_identical_results() {
    let mut rng = Rng::new(23);
    // [300, 70, 3]: 63000 elements, over the threshold; rows of 300 split unevenly.
    let ne = [300i64, 70, 3, 1];
    let n = 300 * 70 * 3;
    let av = rng.vec(n, -4.0, 4.0);
    let bv = rng.vec(300 * 70, -1.0, 1.0);
    let idx: Vec<i32> = (0..150).map(|i| (i * 37 % 70) as i32).collect();
    type Build = fn(&Context, &Tensor, &Tensor, &Tensor) -> Tensor;
    let ops: [(&str, Build); 11] = [
        ("add", |c, a, b, _| c.add(a, b)),
        ("mul", |c, a, b, _| c.mul(a, b)),
        ("scale", |c, a, _, _| c.scale(a, -0.7)),
        ("gelu", |c, a, _, _| c.gelu(a)),
        ("norm", |c, a, _, _| c.norm(a, 1e-5)),
        ("soft_max", |c, a, b, _| c.soft_max_ext(a, Some(b), 0.5, 0.0)),
        ("diag_mask_inf", |c, a, _, _| c.diag_mask_inf(a, 3)),
        ("cont of a permutation", |c, a, _, _| c.cont(&c.permute(a, 1, 0, 2, 3))),
        ("cpy to f16", |c, a, _, _| c.cpy(a, &c.new_tensor(F16, &[300, 70, 3, 1]))),
        ("cont_4d into another shape", |c, a, _, _| c.cont_4d(&c.transpose(a), 70, 100, 9, 1)),
        ("get_rows", |c, _, b, i| c.get_rows(b, i)),
    ];
    for (name, build) in ops {
        let mut results = Vec::new();
        for threads in [1, 2, 3] {
            let ctx = ctx(8);
            let a = ctx.new_tensor(F32, &ne);
            let b = ctx.new_tensor_2d(F32, 300, 70);
            let i = ctx.new_tensor_1d(I32, 150);
            a.set_f32_slice(&av);
            b.set_f32_slice(&bv);
            i.set_i32_slice(&idx);
            let r = build(&ctx, &a, &b, &i);
            assert!(r.nelements() >= 32 * 1024, "{name}: too small to be split");
            compute(&r, threads);
            results.push(r.to_f32_vec());
        }
        assert_eq!(results[0], results[1], "{name}: 2 threads");
        assert_eq!(results[0], results[2], "{name}: 3 threads");
    }

    // In place on 3 threads, as the graph allocator would place it.
    let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
    let a = ctx.new_tensor(F32, &ne);
    let r = ctx.norm(&a, 1e-5);
    let buf = CpuBufferType.alloc_buffer(a.nbytes()).unwrap();
    a.set_data(buf.clone(), 0);
    r.set_data(buf.clone(), 0);
    a.set_f32_slice(&av);
    let mut gf = Graph::new();
    gf.build_forward_expand(&r);
    CpuBackend::new(3).graph_compute(&gf).unwrap();
    let ctx1 = tensors::ctx(8);
    let a1 = ctx1.new_tensor(F32, &ne);
    a1.set_f32_slice(&av);
    let r1 = ctx1.norm(&a1, 1e-5);
    compute(&r1, 1);
    assert_eq!(r.to_f32_vec(), r1.to_f32_vec(), "norm in place on 3 threads");

    // A bad index is reported as on one thread: the first one in row order.
    let ctx = tensors::ctx(8);
    let b = ctx.new_tensor_2d(F32, 300, 70);
    let i = ctx.new_tensor_1d(I32, 150);
    let mut bad = idx.clone();
    bad[100] = 70;
    bad[140] = -1;
    i.set_i32_slice(&bad);
    let g = ctx.get_rows(&b, &i);
    let mut gf = Graph::new();
    gf.build_forward_expand(&g);
    match CpuBackend::new(3).graph_compute(&gf) {
        Err(BackendError::Other(msg)) => assert!(msg.contains("index 70 at [100, 0, 0]"), "{msg}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A decode step's row order changes no row's bits (tensors::check_..., also on 3 threads).
#[test]
fn mul_mat_one_row_of_b_gives_the_batched_bits() {
    check_one_row_of_b_gives_the_batched_bits(&[3]);
}

/// A decode step's K·q (position blocks across all heads) has the prompt path's bits.
#[test]
fn mul_mat_decode_kq_gives_the_batched_bits() {
    check_decode_kq_gives_the_batched_bits(&[3]);
}

// --- in place: the graph allocator may give a node its src[0]'s memory ---

/// Each elementwise/row-wise op with the result placed exactly on src[0] must give what it
/// gives out of place.
#[test]
fn inplace_ops_match_out_of_place() {
    let mut rng = Rng::new(18);
    let ne = [37i64, 5, 2, 1];
    let n = 37 * 5 * 2;
    let av = rng.vec(n, -3.0, 3.0);
    let bv = rng.vec(37 * 5, -1.0, 1.0);
    type Build = fn(&Context, &Tensor, &Tensor) -> Tensor;
    let ops: [(&str, Build); 7] = [
        ("add", |c, a, b| c.add(a, b)),
        ("mul", |c, a, b| c.mul(a, b)),
        ("scale", |c, a, _| c.scale(a, -0.7)),
        ("gelu", |c, a, _| c.gelu(a)),
        ("norm", |c, a, _| c.norm(a, 1e-5)),
        ("soft_max", |c, a, b| c.soft_max_ext(a, Some(b), 0.5, 0.0)),
        ("diag_mask_inf", |c, a, _| c.diag_mask_inf(a, 1)),
    ];
    for (name, build) in ops {
        // Out of place, in an allocating context.
        let ctx = ctx(1);
        let a = ctx.new_tensor(F32, &ne);
        let b = ctx.new_tensor_2d(F32, 37, 5);
        a.set_f32_slice(&av);
        b.set_f32_slice(&bv);
        let r = build(&ctx, &a, &b);
        compute(&r, 1);
        let want = r.to_f32_vec();

        // In place: r's data set to a's.
        let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
        let a = ctx.new_tensor(F32, &ne);
        let b = ctx.new_tensor_2d(F32, 37, 5);
        let r = build(&ctx, &a, &b);
        let buf = CpuBufferType.alloc_buffer(a.nbytes() + 64 + b.nbytes()).unwrap();
        a.set_data(buf.clone(), 0);
        b.set_data(buf.clone(), a.nbytes().div_ceil(64) * 64);
        r.set_data(buf.clone(), 0);
        a.set_f32_slice(&av);
        b.set_f32_slice(&bv);
        let mut gf = Graph::new();
        gf.build_forward_expand(&r);
        CpuBackend::new(1).graph_compute(&gf).unwrap();
        assert_eq!(r.to_f32_vec(), want, "{name} in place");
        assert_eq!(a.to_f32_vec(), want, "{name}: a's memory holds the result");
    }
}

// --- errors ---

#[test]
fn unsupported_nodes_are_errors_naming_the_node() {
    let ctx = ctx(1);
    let a = ctx.new_tensor_2d(F32, 4, 3);
    let s = ctx.soft_max_ext(&a, None, 1.0, 8.0);
    s.set_name("alibi_softmax");
    assert!(!CpuBackend::new(1).supports_op(&s));
    match try_compute(&s) {
        Err(BackendError::Unsupported { node, reason }) => {
            assert!(node.contains("alibi_softmax"), "{node}");
            assert!(reason.contains("max_bias"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // I32 weights in mul_mat.
    let w = ctx.new_tensor_2d(I32, 4, 3);
    let x = ctx.new_tensor_2d(F32, 4, 2);
    let y = ctx.mul_mat(&w, &x);
    y.set_name("int_matmul");
    assert!(!CpuBackend::new(1).supports_op(&y));
    match try_compute(&y) {
        Err(BackendError::Unsupported { node, reason }) => {
            assert!(node.contains("int_matmul") && reason.contains("i32"), "{node}: {reason}");
        }
        other => panic!("{other:?}"),
    }
    // A tensor with no data.
    let noalloc = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
    let a = noalloc.new_tensor_1d(F32, 4);
    a.set_name("nowhere");
    let g = noalloc.gelu(&a);
    match try_compute(&g) {
        Err(BackendError::Unsupported { reason, .. }) => assert!(reason.contains("'nowhere'"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Copying into Q4_K: read-only type, refused before any quants call.
    let x = ctx.new_tensor_1d(F32, 256);
    let q = ctx.new_tensor_1d(GgmlType::Q4_K, 256);
    let c = ctx.cpy(&x, &q);
    assert!(!CpuBackend::new(1).supports_op(&c));
    match try_compute(&c) {
        Err(BackendError::Unsupported { reason, .. }) => assert!(reason.contains("q4_K"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(CpuBackend::new(1).supports_op(&ctx.gelu(&ctx.new_tensor_1d(F16, 4))));
}

// --- quantized (need crate::quants) ---

/// A weight matrix of `ty` made of random blocks (every bit pattern of the quant bytes is a
/// valid block; only the f16 scales are set, to finite values of a sensible size), and its
/// values as dequantize_row gives them. Q4_K and Q6_K cannot be quantized to (weights only
/// come from files), so random blocks are how to get them.
fn quantized_weights(ctx: &Context, rng: &mut Rng, ty: GgmlType, k: i64, m: i64) -> (Tensor, Vec<f32>) {
    use GgmlType::*;
    // (byte offset of an f16 scale in the block, its range)
    let scales: &[(usize, f32)] = match ty {
        Q8_0 => &[(0, 1.0 / 127.0)],
        Q4_0 => &[(0, 1.0 / 8.0)],
        Q4_K => &[(0, 1.0 / 900.0), (2, 1.0 / 900.0)], // d, dmin
        Q6_K => &[(208, 1.0 / 4000.0)],
        _ => panic!("{ty}"),
    };
    let a = ctx.new_tensor_2d(ty, k, m);
    let n_blocks = (k * m) as usize / ty.blck_size();
    let mut bytes: Vec<u8> = (0..n_blocks * ty.type_size()).map(|_| rng.next_u64() as u8).collect();
    for blk in bytes.chunks_mut(ty.type_size()) {
        for &(off, scale) in scales {
            let d = f16::from_f32(rng.uniform(0.2, 1.0) * scale);
            blk[off..off + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    let mut deq = vec![0.0f32; (k * m) as usize];
    let rs = ty.row_size(k);
    for r in 0..m as usize {
        ggweb::quants::dequantize_row(ty, &bytes[r * rs..(r + 1) * rs], &mut deq[r * k as usize..][..k as usize]);
    }
    a.set_bytes(&bytes, 0);
    (a, deq)
}

/// Quantized weights: the kernel quantizes each b row to ty.vec_dot_type() (Q8_0 or Q8_K),
/// which moves each b value by at most half a quantization step, amax(block)/254, plus the
/// rounding of the block scale to f16 (Q8_0; ≤ 2^-11 relative). Against dequantized-a · f32-b
/// the error is then bounded by Σ_blocks amax_b·(1/254 + 1/1024)·Σ_block |a| (plus f32
/// summation, 1e-5·Σ|a·b|) — ggml's own error for these types.
#[test]
fn quant_mul_mat_q8_0_q4_0_q4_k_q6_k() {
    let ctx = ctx(16);
    let mut rng = Rng::new(19);
    for (ty, k) in [
        (GgmlType::Q8_0, 96i64),
        (GgmlType::Q8_0, 768),
        (GgmlType::Q4_0, 64),
        (GgmlType::Q4_0, 768),
        (GgmlType::Q4_K, 256),
        (GgmlType::Q4_K, 768),
        (GgmlType::Q6_K, 512),
    ] {
        let (m, n) = (11i64, 3i64);
        let (a, av) = quantized_weights(&ctx, &mut rng, ty, k, m);
        let (b, bv) = random_tensor(&ctx, &mut rng, F32, [k, n, 2, 1], -1.0, 1.0);
        let c = ctx.mul_mat(&a, &b);
        compute(&c, 1);
        let (want, mag) = ref_mul_mat(&av, [k as usize, m as usize, 1, 1], &bv, ne_of(&b));
        let blck = ty.vec_dot_type().blck_size();
        let (ku, mu, nu) = (k as usize, m as usize, n as usize);
        let bound = |i: usize| {
            let (im, jn, i2) = (i % mu, (i / mu) % nu, i / (mu * nu));
            let brow = &bv[(i2 * nu + jn) * ku..][..ku];
            let arow = &av[im * ku..][..ku];
            let q: f64 = (0..ku / blck)
                .map(|bi| {
                    let amax = brow[bi * blck..][..blck].iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
                    let sa: f64 = arow[bi * blck..][..blck].iter().map(|x| x.abs() as f64).sum();
                    amax * (1.0 / 254.0 + 1.0 / 1024.0) * sa
                })
                .sum();
            q + 1e-5 * mag[i]
        };
        assert_close(&format!("{ty} mul_mat K={k}"), &c.to_f32_vec(), &want, bound);
        // And threads change nothing.
        let c4 = ctx.mul_mat(&a, &b);
        compute(&c4, 3);
        assert_eq!(c4.to_f32_vec(), c.to_f32_vec(), "{ty} threads");
    }
}

/// get_rows of quantized rows is dequantize_row; cpy F32 → Q8_0 is quantize_row.
#[test]
fn quant_get_rows_and_cpy() {
    let ctx = ctx(4);
    let mut rng = Rng::new(20);
    let ty = GgmlType::Q8_0;
    let (a, deq) = quantized_weights(&ctx, &mut rng, ty, 64, 5);
    let idx = ctx.new_tensor_1d(I32, 3);
    idx.set_i32_slice(&[4, 0, 2]);
    let g = ctx.get_rows(&a, &idx);
    compute(&g, 1);
    let want: Vec<f32> = [4usize, 0, 2].iter().flat_map(|&r| deq[r * 64..][..64].to_vec()).collect();
    assert_eq!(g.to_f32_vec(), want);

    let (x, xv) = random_tensor(&ctx, &mut rng, F32, [64, 2, 1, 1], -1.0, 1.0);
    let q = ctx.new_tensor_2d(ty, 64, 2);
    compute(&ctx.cpy(&x, &q), 1);
    let mut want = vec![0u8; ty.row_size(64) * 2];
    for r in 0..2 {
        ggweb::quants::quantize_row(ty, &xv[r * 64..][..64], &mut want[r * ty.row_size(64)..][..ty.row_size(64)]);
    }
    let mut got = vec![0u8; want.len()];
    q.get_bytes(&mut got, 0);
    assert_eq!(got, want);
}

// --- the SIMD kernels of every ISA this machine runs (tests/support/simd_checks.rs) ---

#[test]
fn simd_f16_rows_convert_exactly() {
    simd_checks::f16_rows_convert_exactly();
}

#[test]
fn simd_gemm_tiles() {
    simd_checks::gemm_tiles_agree_with_f64_and_with_single_dots();
}

#[test]
fn simd_gelu_exp_sum_max() {
    simd_checks::gelu_exp_sum_and_max_of_every_isa();
}
