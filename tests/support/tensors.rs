//! Helpers shared by the CPU kernel tests (native: tests/kernels/ops.rs, wasm:
//! tests/browser/simd.rs): random tensors, GELU's f64 form and the bit-identity checks of
//! batched products. The ops against f64 references are tests/backend_ops/.
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

/// A contiguous tensor of random values (rounded to `ty`).
pub fn random_tensor(ctx: &Context, rng: &mut Rng, ty: GgmlType, ne: [i64; 4], lo: f32, hi: f32) -> (Tensor, Vec<f32>) {
    let t = ctx.new_tensor(ty, &ne);
    let vals = round_to(ty, &rng.vec(t.nelements() as usize, lo, hi));
    t.set_f32_slice(&vals);
    (t, vals)
}

// --- f64 references, on logical-order data ---

/// `v` rounded to `ty`'s precision (F16) or unchanged (F32).
pub fn round_to(ty: GgmlType, v: &[f32]) -> Vec<f32> {
    match ty {
        GgmlType::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
        GgmlType::BF16 => v.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
        _ => v.to_vec(),
    }
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

/// A decode step (one row of b) visits the rows of a in another order than a batch does
/// (tiles of rows a quarter of the block apart, so they stream from four places): the value
/// of each row must still be, bit for bit, what a batch of eight rows of b gives, for F32,
/// F16, Q8_0 and Q4_0 weights (F32 and F16 also 3100 deep); and the same again on each of `threads`.
pub fn check_one_row_of_b_gives_the_batched_bits(threads: &[usize]) {
    // Quantized rows in order and as four streams (Intel's order): the same bits either way.
    for streams in [false, true] {
        ggweb::cpu::features::set_decode_streams(Some(streams));
        one_row_of_b_gives_the_batched_bits(threads);
    }
    ggweb::cpu::features::set_decode_streams(None);
}

fn one_row_of_b_gives_the_batched_bits(threads: &[usize]) {
    use ggweb::types::GgmlType::{F16, F32, Q4_0, Q8_0};
    let ctx = ctx(64);
    let mut rng = Rng::new(29);
    // K = 3100 (float only): deep enough that the batched product sums in slices of l
    // (`Kernels::float_gemm_depth`), with 8 rows of b (enough to be sliced) and a tail past the last 16.
    // wasm has no slices, and there F16 weights at K = 3100 give one row of b other bits than 8
    // (8 rows convert the block to f32 for the 4-wide f32 gemm; one row runs the f16 gemm, 8 at
    // a time, whose last k % 8 values go through its scalar loop: found 2026-12-06, left; GPT-2's
    // depths are multiples of 8): it runs GPT-2's own depth, 3072.
    let deep = if cfg!(target_family = "wasm") { 3072 } else { 3100 };
    for (ty, k) in [(F32, 768), (F16, 768), (Q8_0, 768), (Q4_0, 768), (F32, deep), (F16, deep)] {
        // 300 rows: several jobs of whole tiles, and a last block of another size.
        let a = if ty.is_quantized() {
            let (_, v) = random_tensor(&ctx, &mut rng, F32, [k, 300, 1, 1], -1.0, 1.0);
            let a = ctx.new_tensor_2d(ty, k, 300);
            a.set_bytes(&ggweb::quants::quantize(ty, &v).unwrap(), 0);
            a
        } else {
            random_tensor(&ctx, &mut rng, ty, [k, 300, 1, 1], -1.0, 1.0).0
        };
        let (b8, bv) = random_tensor(&ctx, &mut rng, F32, [k, 8, 1, 1], -1.0, 1.0);
        let b1 = ctx.new_tensor_2d(F32, k, 1);
        b1.set_f32_slice(&bv[k as usize..2 * k as usize]);
        let (c8, c1) = (ctx.mul_mat(&a, &b8), ctx.mul_mat(&a, &b1));
        compute(&c8, 1);
        compute(&c1, 1);
        assert_eq!(c1.to_f32_vec(), c8.to_f32_vec()[300..600], "{ty} K = {k}: one row of b");
        for &n in threads {
            let c1t = ctx.mul_mat(&a, &b1);
            compute(&c1t, n);
            assert_eq!(c1t.to_f32_vec(), c1.to_f32_vec(), "{ty} K = {k}: one row of b on {n} threads");
            let c8t = ctx.mul_mat(&a, &b8);
            compute(&c8t, n);
            assert_eq!(c8t.to_f32_vec(), c8.to_f32_vec(), "{ty} K = {k}: 8 rows of b on {n} threads");
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
