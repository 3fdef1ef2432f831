//! Helpers shared by the op tests (native: tests/kernels/ops.rs, wasm: tests/wasm_simd.rs):
//! tensors filled with random values (contiguous or through views and permutations), and
//! naive f64 references.
#![allow(dead_code)]

use ggweb::tensor::{Context, ContextParams, Tensor};
use ggweb::types::GgmlType;
use ggweb::Graph;

use crate::support::rng::Rng;

pub fn ctx(mb: usize) -> Context {
    Context::new(ContextParams { mem_size: mb << 20, no_alloc: false })
}

pub fn compute(t: &Tensor, n_threads: usize) {
    let mut gf = Graph::new();
    gf.build_forward_expand(t);
    ggweb::cpu::compute_graph(&gf, n_threads).unwrap_or_else(|e| panic!("compute: {e}"));
}

/// Logical (i0 fastest) index of `ne`.
pub fn at(ne: [usize; 4], i0: usize, i1: usize, i2: usize, i3: usize) -> usize {
    ((i3 * ne[2] + i2) * ne[1] + i1) * ne[0] + i0
}

pub fn ne_of(t: &Tensor) -> [usize; 4] {
    t.ne.map(|n| n as usize)
}

/// A tensor of shape `ne` whose memory is NOT laid out contiguously: a tensor of permuted
/// shape is filled, then permuted (axes (1, 2, 0, 3) maps stored dim i to logical axes[i])
/// and offset inside a larger buffer through a strided view. Returns it and its values in
/// logical order.
pub fn random_strided(ctx: &Context, rng: &mut Rng, ty: GgmlType, ne: [i64; 4]) -> (Tensor, Vec<f32>) {
    // Stored dims: logical dim axes[i] is stored as dim i.
    let axes = [1usize, 2, 0, 3];
    let stored = [ne[axes[0]], ne[axes[1]], ne[axes[2]], ne[axes[3]]];
    // Rows 3 elements longer than needed, and a 1-row offset: a view with gaps.
    let big = ctx.new_tensor_4d(ty, stored[0] + 3, stored[1], stored[2], stored[3]);
    let es = ty.type_size();
    let v = ctx.view_4d(&big, stored[0], stored[1], stored[2], stored[3], big.nb[1], big.nb[2], big.nb[3], 2 * es);
    let perm = ctx.permute(&v, axes[0], axes[1], axes[2], axes[3]);
    assert_eq!(perm.ne, ne);
    assert!(!perm.is_contiguous());
    let vals = rng.vec(perm.nelements() as usize, -1.0, 1.0);
    let vals = round_to(ty, &vals);
    perm.set_f32_slice(&vals);
    (perm, vals)
}

/// A tensor of shape `ne` with packed rows (what mul_mat's operands need) that is still
/// not contiguous: dims 1 and 2 swapped in memory, and 3 elements of gap after each row
/// (like attention's Q, a permuted view of a strided view).
pub fn random_strided_rows(ctx: &Context, rng: &mut Rng, ty: GgmlType, ne: [i64; 4]) -> (Tensor, Vec<f32>) {
    let big = ctx.new_tensor_4d(ty, ne[0] + 3, ne[2], ne[1], ne[3]);
    let es = ty.type_size();
    let v = ctx.view_4d(&big, ne[0], ne[2], ne[1], ne[3], big.nb[1], big.nb[2], big.nb[3], es);
    let perm = ctx.permute(&v, 0, 2, 1, 3);
    assert_eq!(perm.ne, ne);
    assert!(!perm.is_contiguous() && perm.nb[0] == es);
    let vals = round_to(ty, &rng.vec(perm.nelements() as usize, -1.0, 1.0));
    perm.set_f32_slice(&vals);
    (perm, vals)
}

/// A contiguous tensor of random values (rounded to `ty`).
pub fn random_tensor(ctx: &Context, rng: &mut Rng, ty: GgmlType, ne: [i64; 4], lo: f32, hi: f32) -> (Tensor, Vec<f32>) {
    let t = ctx.new_tensor(ty, &ne);
    let vals = round_to(ty, &rng.vec(t.nelements() as usize, lo, hi));
    t.set_f32_slice(&vals);
    (t, vals)
}

pub fn round_to(ty: GgmlType, v: &[f32]) -> Vec<f32> {
    match ty {
        GgmlType::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
        GgmlType::BF16 => v.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
        _ => v.to_vec(),
    }
}

// --- f64 references, on logical-order data ---

/// c[m, n, i2, i3] = Σ_k a[k, m, i2/r2, i3/r3] · b[k, n, i2, i3]; also returns Σ|a·b| per
/// element, the scale a floating-point dot product's error is proportional to.
pub fn ref_mul_mat(a: &[f32], ane: [usize; 4], b: &[f32], bne: [usize; 4]) -> (Vec<f64>, Vec<f64>) {
    let (k, m, n) = (ane[0], ane[1], bne[1]);
    let (r2, r3) = (bne[2] / ane[2], bne[3] / ane[3]);
    let cne = [m, n, bne[2], bne[3]];
    let mut c = vec![0.0; m * n * bne[2] * bne[3]];
    let mut mag = c.clone();
    for i3 in 0..bne[3] {
        for i2 in 0..bne[2] {
            for j in 0..n {
                for i in 0..m {
                    let (mut s, mut sa) = (0.0f64, 0.0f64);
                    for kk in 0..k {
                        let p = a[at(ane, kk, i, i2 / r2, i3 / r3)] as f64 * b[at(bne, kk, j, i2, i3)] as f64;
                        s += p;
                        sa += p.abs();
                    }
                    c[at(cne, i, j, i2, i3)] = s;
                    mag[at(cne, i, j, i2, i3)] = sa;
                }
            }
        }
    }
    (c, mag)
}

/// softmax(x·scale + mask) per row; mask rows broadcast over dims 2, 3.
pub fn ref_soft_max(x: &[f32], ne: [usize; 4], mask: Option<(&[f32], [usize; 4])>, scale: f64) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                let row: Vec<f64> = (0..ne[0])
                    .map(|i0| {
                        let m = mask.map_or(0.0, |(m, mne)| m[at(mne, i0, i1, i2 % mne[2], i3 % mne[3])] as f64);
                        x[at(ne, i0, i1, i2, i3)] as f64 * scale + m
                    })
                    .collect();
                let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
                for i0 in 0..ne[0] {
                    out[at(ne, i0, i1, i2, i3)] = (row[i0] - max).exp() / sum;
                }
            }
        }
    }
    out
}

pub fn ref_norm(x: &[f32], n0: usize, eps: f64) -> Vec<f64> {
    x.chunks(n0)
        .flat_map(|r| {
            let mean = r.iter().map(|&v| v as f64).sum::<f64>() / n0 as f64;
            let var = r.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n0 as f64;
            r.iter().map(move |&v| (v as f64 - mean) / (var + eps).sqrt()).collect::<Vec<_>>()
        })
        .collect()
}

/// GELU's tanh form in f64. 0.5·x·(1 + tanh(u)) loses digits to cancellation in f64 too
/// when u ≪ 0 (1 + tanh(u) ≈ 2e^{2u}), so there the same value is taken as
/// x·e^{2u} / (1 + e^{2u}).
pub fn ref_gelu(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    if u > -2.0 {
        0.5 * x * (1.0 + u.tanh())
    } else {
        let e = (2.0 * u).exp();
        x * e / (1.0 + e)
    }
}

/// Asserts |got - want| ≤ tol(i) for every element; infinities must match exactly.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for i in 0..got.len() {
        let (g, w) = (got[i] as f64, want[i]);
        let ok = if w.is_infinite() { g == w } else { (g - w).abs() <= tol(i) };
        assert!(ok, "{what}: element {i}: got {g}, want {w} (tolerance {})", tol(i));
    }
}

/// A decode step (one row of b) visits the rows of a in another order than a batch does
/// (tiles of rows a quarter of the block apart, so they stream from four places): the value
/// of each row must still be, bit for bit, what a batch of three rows of b gives, for F32,
/// F16, Q8_0 and Q4_0 weights; and the same again on each of `threads`.
pub fn check_one_row_of_b_gives_the_batched_bits(threads: &[usize]) {
    use ggweb::types::GgmlType::{F16, F32, Q4_0, Q8_0};
    let ctx = ctx(32);
    let mut rng = Rng::new(29);
    for ty in [F32, F16, Q8_0, Q4_0] {
        // 300 rows: several jobs of whole tiles, and a last block of another size.
        let a = if ty.is_quantized() {
            let (_, v) = random_tensor(&ctx, &mut rng, F32, [768, 300, 1, 1], -1.0, 1.0);
            let a = ctx.new_tensor_2d(ty, 768, 300);
            a.set_bytes(&ggweb::quants::quantize(ty, &v).unwrap(), 0);
            a
        } else {
            random_tensor(&ctx, &mut rng, ty, [768, 300, 1, 1], -1.0, 1.0).0
        };
        let (b3, bv) = random_tensor(&ctx, &mut rng, F32, [768, 3, 1, 1], -1.0, 1.0);
        let b1 = ctx.new_tensor_2d(F32, 768, 1);
        b1.set_f32_slice(&bv[768..1536]);
        let (c3, c1) = (ctx.mul_mat(&a, &b3), ctx.mul_mat(&a, &b1));
        compute(&c3, 1);
        compute(&c1, 1);
        assert_eq!(c1.to_f32_vec(), c3.to_f32_vec()[300..600], "{ty}: one row of b");
        for &n in threads {
            let c1t = ctx.mul_mat(&a, &b1);
            compute(&c1t, n);
            assert_eq!(c1t.to_f32_vec(), c1.to_f32_vec(), "{ty}: one row of b on {n} threads");
        }
    }
}

/// A decode step's K·q over a permuted KV cache ([hd, L, n_head] over [hd, n_head, L]: the
/// heads of one position adjacent), which mul_mat runs position-block by position-block
/// across all heads: every value has the bits of the same product with three rows of q
/// (the prompt path, head by head), on 1 and on `threads` threads, for F32 and F16 caches.
pub fn check_decode_kq_gives_the_batched_bits(threads: &[usize]) {
    use ggweb::types::GgmlType::{F16, F32};
    let ctx = ctx(64);
    let mut rng = Rng::new(31);
    // 300 positions: several 48-row blocks and a shorter last one; 12 heads of 64.
    let (hd, nh, l) = (64i64, 12i64, 300i64);
    for ty in [F32, F16] {
        let (kflat, _) = random_tensor(&ctx, &mut rng, ty, [hd * nh, l, 1, 1], -1.0, 1.0);
        let (q3flat, qv) = random_tensor(&ctx, &mut rng, F32, [hd * nh, 3, 1, 1], -1.0, 1.0);
        let q1flat = ctx.new_tensor_2d(F32, hd * nh, 1);
        q1flat.set_f32_slice(&qv[(hd * nh) as usize..2 * (hd * nh) as usize]);
        let k = ctx.permute(&ctx.reshape_3d(&kflat, hd, nh, l), 0, 2, 1, 3); // [hd, l, nh]
        let q3 = ctx.permute(&ctx.reshape_3d(&q3flat, hd, nh, 3), 0, 2, 1, 3); // [hd, 3, nh]
        let q1 = ctx.permute(&ctx.reshape_3d(&q1flat, hd, nh, 1), 0, 2, 1, 3); // [hd, 1, nh]
        let (c3, c1) = (ctx.mul_mat(&k, &q3), ctx.mul_mat(&k, &q1));
        compute(&c3, 1);
        compute(&c1, 1);
        let (v3, v1) = (c3.to_f32_vec(), c1.to_f32_vec());
        let l = l as usize;
        for h in 0..nh as usize {
            let want = &v3[(h * 3 + 1) * l..(h * 3 + 2) * l];
            assert_eq!(&v1[h * l..(h + 1) * l], want, "{ty}: head {h}, one row of q");
        }
        for &n in threads {
            let c1t = ctx.mul_mat(&k, &q1);
            compute(&c1t, n);
            assert_eq!(c1t.to_f32_vec(), v1, "{ty}: one row of q on {n} threads");
        }
    }
}
