//! Times single CPU ops on GPT-2-124M shapes: `mul_mat` of each weight type against 1 and
//! 32 (or `N`) activation rows, and the attention products. Reports the best of five trials in GFLOP/s,
//! by wall time and by thread CPU time (Linux; the latter is what counts on a loaded machine).
//!
//! ```text
//! cargo run --release --example kernel_bench -- [N] [THREADS]     # GGWEB_NO_VNNI=1: AVX2 without VNNI
//! GGWEB_BENCH_PACKED=1 cargo run --release --example kernel_bench  # the repacked decode kernels instead
//! ```
//!
//! `GGWEB_BENCH_PACKED=1` times `cpu::arch::repack::gemm_packed` against one row of b (a decode
//! step) for Q8_0, Q4_K and Q6_K, in cache (one matrix again and again) and streamed from
//! memory (rotating through copies that add up to ~256 MiB), in GB/s of weights and GMAC/s,
//! thread CPU time; with `GGWEB_NO_REPACK=1` ggml's layout through `cpu::arch::gemm`;
//! `GGWEB_BENCH_N=4` against 4 rows of b a call (a decode step of 4 sequences).
// Native only: `wasm-pack test` (cargo test for wasm32) builds the examples too.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use std::time::Instant;

use ggweb::backend::Backend;
use ggweb::cpu::CpuBackend;
use ggweb::tensor::{Context, ContextParams, Tensor};
use ggweb::{GgmlType, Graph};

fn thread_cpu() -> f64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock_id: i32, tp: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec; 3 = CLOCK_THREAD_CPUTIME_ID.
    unsafe { clock_gettime(3, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn fill(t: &Tensor, seed: u32) {
    t.set_bytes(&random_weights(t.ty, t.nelements() as usize, seed), 0);
}

/// `n` floats uniform in [-0.5, 0.5] from the xorshift state `s`.
fn uniform(s: &mut u32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *s ^= *s << 13;
            *s ^= *s >> 17;
            *s ^= *s << 5;
            *s as f32 / u32::MAX as f32 - 0.5
        })
        .collect()
}

/// `n` values of `ty` as bytes: quantized from uniform floats in [-0.5, 0.5] where ggweb can
/// quantize `ty`, else random quant bytes with small normal f16 block scales.
fn random_weights(ty: GgmlType, n: usize, seed: u32) -> Vec<u8> {
    let mut s = seed | 1;
    let v = uniform(&mut s, n);
    if ggweb::quants::can_quantize(ty) {
        return ggweb::quants::quantize(ty, &v).expect("quantize");
    }
    // Types read only from files (the K-quants): random quants and scale bytes, the f16
    // block scales set to a small normal value (no subnormal or NaN float steps).
    let mut bytes: Vec<u8> = (0..ty.row_size(n as i64))
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as u8
        })
        .collect();
    let ts = ty.type_size();
    let d = half::f16::from_f32(2e-4).to_le_bytes();
    let at: &[usize] = match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[ts - 4, ts - 2],
        _ => &[ts - 2], // Q3_K, Q6_K
    };
    for blk in bytes.chunks_exact_mut(ts) {
        for &o in at {
            blk[o..o + 2].copy_from_slice(&d);
        }
    }
    bytes
}

/// Five trials, each running `node` for at least 0.1 s of CPU time; returns the best
/// (wall, cpu) seconds per run: the trial least disturbed by other processes.
fn time(backend: &CpuBackend, node: &Tensor) -> (f64, f64) {
    let mut gf = Graph::new();
    gf.build_forward_expand(node);
    backend.graph_compute(&gf).expect("compute");
    let (mut best_w, mut best_c) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let (mut runs, t0, c0) = (0, Instant::now(), thread_cpu());
        while thread_cpu() - c0 < 0.1 || runs < 2 {
            backend.graph_compute(&gf).expect("compute");
            runs += 1;
        }
        best_w = best_w.min(t0.elapsed().as_secs_f64() / runs as f64);
        best_c = best_c.min((thread_cpu() - c0) / runs as f64);
    }
    (best_w, best_c)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: i64 = args.get(1).map(|s| s.parse().expect("N")).unwrap_or(32);
    let threads: usize = args.get(2).map(|s| s.parse().expect("THREADS")).unwrap_or(1);
    let backend = CpuBackend::new(threads);
    // GGWEB_NO_VNNI=1: the plain AVX2 integer kernels, for comparison.
    ggweb::cpu::arch::set_vnni_disabled(std::env::var("GGWEB_NO_VNNI").is_ok_and(|v| v == "1"));
    if std::env::var("GGWEB_BENCH_PACKED").is_ok_and(|v| v == "1") {
        return packed_decode();
    }
    let ctx = Context::new(ContextParams { mem_size: 512 << 20, no_alloc: false });
    println!("| op | type | K × M × N | GFLOP/s (wall) | GFLOP/s (thread CPU) |");
    println!("|---|---|---|---|---|");
    // GGWEB_BENCH_TYPES=q4_K,q6_K (ggml's names): only those weight types.
    let only = std::env::var("GGWEB_BENCH_TYPES").ok();
    use GgmlType::*;
    let types = [F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K];
    for ty in types.into_iter().filter(|t| only.as_ref().is_none_or(|o| o.split(',').any(|n| n == t.name()))) {
        for (k, m) in [(768i64, 2304i64), (768, 3072), (3072, 768)] {
            for cols in [1, n] {
                let a = ctx.new_tensor_2d(ty, k, m);
                fill(&a, 7);
                let b = ctx.new_tensor_2d(GgmlType::F32, k, cols);
                fill(&b, 11);
                let c = ctx.mul_mat(&a, &b);
                let (w, cpu) = time(&backend, &c);
                let flop = 2.0 * (k * m * cols) as f64;
                println!("| mul_mat | {ty} | {k} × {m} × {cols} | {:.2} | {:.2} |", flop / w * 1e-9, flop / cpu * 1e-9);
            }
        }
    }
    // Attention at 256 positions: KQ (K permuted out of the cache) and KQV (V transposed).
    let (hd, nh, l) = (64i64, 12i64, 256i64);
    for cols in [1, n] {
        let kc = ctx.new_tensor_2d(GgmlType::F32, hd * nh, l);
        fill(&kc, 3);
        let q = ctx.new_tensor_3d(GgmlType::F32, hd, nh, cols);
        fill(&q, 5);
        let k = ctx.permute(&ctx.reshape_3d(&kc, hd, nh, l), 0, 2, 1, 3);
        let kq = ctx.mul_mat(&k, &ctx.permute(&q, 0, 2, 1, 3));
        let (w, cpu) = time(&backend, &kq);
        let flop = 2.0 * (hd * l * cols * nh) as f64;
        println!("| kq | F32 | {hd} × {l} × {cols} × {nh} heads | {:.2} | {:.2} |", flop / w * 1e-9, flop / cpu * 1e-9);
        let v = ctx.new_tensor_3d(GgmlType::F32, l, hd, nh);
        fill(&v, 9);
        let p = ctx.new_tensor_3d(GgmlType::F32, l, cols, nh);
        fill(&p, 13);
        let kqv = ctx.mul_mat(&v, &p);
        let (w, cpu) = time(&backend, &kqv);
        println!(
            "| kqv | F32 | {l} × {hd} × {cols} × {nh} heads | {:.2} | {:.2} |",
            flop / w * 1e-9,
            flop / cpu * 1e-9
        );
    }
    // Training's backward products at N tokens (`-- 512` for a batch of 4 × 128): a weight's
    // gradient out_prod(x [K, N], dy [M, N]) → [K, M], and the input's out_prod(W [K, M],
    // dyᵀ [N, M]) → [K, N] (W F32 in full training, Q8_0 under LoRA).
    for (k, m) in [(768i64, 2304i64), (768, 3072), (3072, 768)] {
        let dy = ctx.new_tensor_2d(GgmlType::F32, m, n);
        fill(&dy, 17);
        let x = ctx.new_tensor_2d(GgmlType::F32, k, n);
        fill(&x, 19);
        let flop = 2.0 * (k * m * n) as f64;
        let dw = ctx.out_prod(&x, &dy);
        let (w, cpu) = time(&backend, &dw);
        println!("| out_prod dW | F32 | {k} × {m} × {n} | {:.2} | {:.2} |", flop / w * 1e-9, flop / cpu * 1e-9);
        for ty in [GgmlType::F32, GgmlType::Q8_0] {
            let wt = ctx.new_tensor_2d(ty, k, m);
            fill(&wt, 23);
            let dx = ctx.out_prod(&wt, &ctx.transpose(&dy));
            let (w, cpu) = time(&backend, &dx);
            println!("| out_prod dx | {ty} | {k} × {m} × {n} | {:.2} | {:.2} |", flop / w * 1e-9, flop / cpu * 1e-9);
        }
    }

    // What handing one op to two threads costs: the pool (wake a parked or spinning
    // worker, wait for both jobs) against spawning a scoped thread per op.
    if threads > 1 {
        let pool = ggweb::cpu::pool::ThreadPool::new(threads);
        let sink = std::sync::atomic::AtomicUsize::new(0);
        let job = |j: usize| {
            sink.fetch_add(j, std::sync::atomic::Ordering::Relaxed);
        };
        let median = |f: &dyn Fn()| {
            let mut t: Vec<f64> = (0..2000)
                .map(|_| {
                    let t0 = Instant::now();
                    f();
                    t0.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        let pooled = median(&|| pool.run(threads, &job));
        let spawned = median(&|| {
            std::thread::scope(|s| {
                for j in 1..threads {
                    s.spawn(move || job(j));
                }
                job(0);
            })
        });
        println!(
            "\nper parallel op, median of 2000 ({threads} threads): pool {pooled:.1} µs, scoped spawn {spawned:.1} µs"
        );
    }
}

/// Best thread-CPU seconds of one decode-step product over five trials of at least 0.1 s,
/// rotating through `copies` of the weights (packed, or in ggml's layout).
fn time_packed(ty: GgmlType, k: usize, m: usize, copies: &[Vec<u8>], b: &[u8], n: usize, packed: bool) -> f64 {
    use ggweb::cpu::arch::{self, repack};
    let mut c = vec![0f32; m * n];
    let ldb = b.len() / n;
    let run = |i: usize, c: &mut [f32]| {
        let a = &copies[i % copies.len()];
        if packed {
            repack::gemm_packed(ty, k, m, n, a, b, ldb, c, m);
        } else {
            arch::gemm(ty, k, m, n, a, ty.row_size(k as i64), b, ldb, c, m);
        }
    };
    (0..copies.len()).for_each(|i| run(i, &mut c));
    let (mut best, mut i) = (f64::MAX, 0);
    for _ in 0..5 {
        let (mut runs, c0) = (0, thread_cpu());
        while thread_cpu() - c0 < 0.1 || runs < copies.len() {
            run(i, &mut c);
            (i, runs) = (i + 1, runs + 1);
        }
        best = best.min((thread_cpu() - c0) / runs as f64);
    }
    std::hint::black_box(&c);
    best
}

/// `GGWEB_BENCH_PACKED=1`: the repacked decode kernels, in cache and from memory.
fn packed_decode() {
    use ggweb::cpu::arch::repack;
    use ggweb::quants;
    let only = std::env::var("GGWEB_BENCH_TYPES").ok();
    let no_repack = std::env::var("GGWEB_NO_REPACK").is_ok_and(|v| v == "1");
    let n: usize = std::env::var("GGWEB_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
    println!("{n} row(s) of b a call (`GGWEB_BENCH_N`): GB/s of weights per call, GMAC/s of all rows");
    println!("| type | K × M | layout | kernel table (`repack::kernel_name`) | in cache GB/s | GMAC/s | from memory GB/s | GMAC/s |");
    println!("|---|---|---|---|--:|--:|--:|--:|");
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K] {
        if only.as_ref().is_some_and(|o| !o.split(',').any(|n| n == ty.name())) {
            continue;
        }
        for (k, m) in [(768usize, 2304usize), (3072, 768), (768, 50257)] {
            let one = random_weights(ty, k * m, 7);
            let packed = !no_repack && repack::wants(ty, k, m, false);
            let mut copies = vec![one.clone(); ((256 << 20) / one.len()).max(2)];
            if packed {
                for a in &mut copies {
                    assert!(repack::pack(ty, k, m, a), "pack {ty}");
                }
            }
            let x = uniform(&mut 11, k * n);
            let b = quants::quantize(ty.vec_dot_type(), &x).expect("quantize b");
            let hot = time_packed(ty, k, m, &copies[..1], &b, n, packed);
            let cold = time_packed(ty, k, m, &copies, &b, n, packed);
            let (bytes, macs) = (one.len() as f64, (k * m * n) as f64);
            let name = if packed { repack::kernel_name(ty).unwrap_or("?") } else { "vec_dot rows" };
            println!(
                "| {ty} | {k} × {m} | {} | {name} | {:.1} | {:.1} | {:.1} | {:.1} |",
                if packed { "packed" } else { "ggml" },
                bytes / hot * 1e-9,
                macs / hot * 1e-9,
                bytes / cold * 1e-9,
                macs / cold * 1e-9
            );
        }
    }
}
