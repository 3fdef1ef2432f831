//! mul_mat on the CPU backend for every weight type of llama.cpp's GPT-2 mixes (and BF16):
//! the graph path (activations converted once to the weight type's `vec_dot_type`, then
//! `cpu::arch::gemm`), for a decode step (1 column) and a prompt (many), on 1 and 2 threads,
//! against an f64 reference of the same rounding: dequantized weights · dequantized
//! `quantize(vec_dot_type, activations)`.

use ggweb::allocator::alloc_ctx_tensors;
use ggweb::backend::Backend;
use ggweb::cpu::CpuBackend;
use ggweb::quants;
use ggweb::{Context, ContextParams, GgmlType, Graph};

use GgmlType::*;

use crate::support::rng::Rng;

/// Weights of `ty` from normal-ish f32: quantized where quants writes the type, else (the
/// K-quant weight types, read-only here) random blocks with small f16 scales.
fn weights(rng: &mut Rng, ty: GgmlType, k: usize, m: usize) -> Vec<u8> {
    if quants::can_quantize(ty) {
        let w: Vec<f32> = (0..k * m).map(|_| rng.uniform(-1.0, 1.0) * 0.5).collect();
        return quants::quantize(ty, &w).unwrap();
    }
    let ts = ty.type_size();
    let mut b: Vec<u8> = (0..ty.row_size((k * m) as i64)).map(|_| (rng.next_u64() >> 56) as u8).collect();
    // (d, dmin) byte offsets in the block, as ggml lays them out.
    let (d_at, dmin_at) = match ty {
        Q2_K => (ts - 4, Some(ts - 2)),
        Q3_K | Q6_K => (ts - 2, None),
        _ => (0, Some(2)), // Q4_K, Q5_K
    };
    for blk in b.chunks_exact_mut(ts) {
        let d = half::f16::from_f32(0.001 + 0.01 * rng.uniform(-1.0, 1.0).abs()).to_bits().to_le_bytes();
        blk[d_at..d_at + 2].copy_from_slice(&d);
        if let Some(o) = dmin_at {
            let dm = half::f16::from_f32(0.005 * rng.uniform(-1.0, 1.0).abs()).to_bits().to_le_bytes();
            blk[o..o + 2].copy_from_slice(&dm);
        }
    }
    b
}

/// The f16 at the start of `b`.
fn h(b: &[u8]) -> f64 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64()
}

#[test]
fn mul_mat_every_weight_type_on_cpu() {
    let mut rng = Rng::xorshift64_star(0x5eed_1234_abcd_0001);
    let (k, m) = (512usize, 24usize);
    for ty in [BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
        let a_bytes = weights(&mut rng, ty, k, m);
        let wa = quants::dequantize(ty, &a_bytes).unwrap();
        for n in [1usize, 7, 33] {
            let x: Vec<f32> = (0..k * n).map(|_| rng.uniform(-1.0, 1.0) * 2.0).collect();
            let vt = ty.vec_dot_type();
            let xq8 = quants::quantize(vt, &x).unwrap();
            let xq = quants::dequantize(vt, &xq8).unwrap();
            for threads in [1, 2] {
                let cpu = CpuBackend::new(threads);
                let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
                let a = ctx.new_tensor_2d(ty, k as i64, m as i64);
                let b = ctx.new_tensor_2d(F32, k as i64, n as i64);
                let c = ctx.mul_mat(&a, &b);
                let mut gf = Graph::new();
                gf.build_forward_expand(&c);
                let _bufs = alloc_ctx_tensors(&ctx, &*cpu.buffer_type()).unwrap();
                a.set_bytes(&a_bytes, 0);
                b.set_bytes(bytemuck::cast_slice(&x), 0);
                assert!(cpu.supports_op(&c), "{ty}");
                cpu.graph_compute(&gf).unwrap();
                let mut out = vec![0f32; m * n];
                c.get_bytes(bytemuck::cast_slice_mut(&mut out), 0);
                for j in 0..n {
                    for i in 0..m {
                        let (wr, xr) = (&wa[i * k..(i + 1) * k], &xq[j * k..(j + 1) * k]);
                        let mut want: f64 = wr.iter().zip(xr).map(|(&w, &v)| w as f64 * v as f64).sum();
                        if vt == Q8_1 {
                            // ggml's `m · s` (s: Q8_1's f16 d·Σq) instead of `m · Σx`.
                            let ts = ty.type_size();
                            let arow = &a_bytes[i * ty.row_size(k as i64)..];
                            let brow = &xq8[j * vt.row_size(k as i64)..];
                            for blk in 0..k / 32 {
                                let m = h(&arow[blk * ts + 2..]);
                                let s = h(&brow[blk * 36 + 2..]);
                                let sum: f64 = xr[32 * blk..32 * blk + 32].iter().map(|&v| v as f64).sum();
                                want += m * (s - sum);
                            }
                        }
                        let mag: f64 = wr.iter().zip(xr).map(|(&w, &v)| (w as f64 * v as f64).abs()).sum();
                        let got = out[j * m + i] as f64;
                        // The integer block sums are exact; f32 rounding of scales, block
                        // products and their sums stays below 1e-6 of Σ|w·x| (quants.rs
                        // measures < 1e-7 for vec_dot), plus the cancellation inside `d·q - m`
                        // weights, which 1e-5 covers.
                        assert!(
                            (got - want).abs() <= 1e-5 * mag + 1e-6,
                            "{ty} n {n} threads {threads} ({i}, {j}): {got} vs {want} (Σ|w·x| {mag})"
                        );
                    }
                }
            }
        }
    }
}
