//! Speed of the CPU backend compiled to wasm32 (simd128, one thread), under Node: the
//! `mul_mat` kernels on GPT-2-124M shapes (GFLOP/s), and prompt/decode speed of a whole
//! 124M-shaped model with seeded random weights built in memory. Benchmarks, not checks:
//! ignored unless asked for.
//!
//! ```text
//! cargo test --release --target wasm32-unknown-unknown --test wasm_bench -- --include-ignored
//! ```
#![cfg(target_arch = "wasm32")]

use std::rc::Rc;
use support::eval::Eval;

use ggweb::allocator::alloc_ctx_tensors;
use ggweb::backend::Backend;
use ggweb::cpu::CpuBackend;
use ggweb::model::context::{Gpt2, Gpt2Options};
use ggweb::model::gpt2::Hparams;
use ggweb::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use ggweb::{GgmlType, Graph};
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

mod support {
    pub mod eval;
    pub mod rng;
}
use support::rng::Rng;

/// Wall seconds (Date.now(): ms resolution; every timing below runs for ≥ 0.3 s).
fn now() -> f64 {
    js_sys::Date::now() / 1000.0
}

/// CPU seconds of the Node process (`process.cpuUsage()`, user + system), or NaN
/// outside Node. On a loaded machine this, not wall time, says how fast the code is.
fn cpu_now() -> f64 {
    use wasm_bindgen::{JsCast, JsValue};
    let get = |o: &JsValue, k: &str| js_sys::Reflect::get(o, &JsValue::from_str(k)).ok();
    let usage = get(&js_sys::global(), "process")
        .and_then(|p| Some((get(&p, "cpuUsage")?.dyn_into::<js_sys::Function>().ok()?, p)))
        .and_then(|(f, p)| f.call0(&p).ok());
    match usage {
        Some(u) => {
            let us = |k| get(&u, k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
            (us("user") + us("system")) * 1e-6
        }
        None => f64::NAN,
    }
}

/// Fills `t` row by row with values of about `std` around `mean`, quantized to its type.
fn fill(t: &Tensor, rng: &mut Rng, std: f32, mean: f32) {
    let ne0 = t.ne[0] as usize;
    let rows = t.nelements() as usize / ne0;
    let rs = t.ty.row_size(ne0 as i64);
    let mut v = vec![0f32; ne0];
    for r in 0..rows {
        if !ggweb::quants::can_quantize(t.ty) {
            // K-quant weights (read-only types): random bytes, small block scales.
            let mut row: Vec<u8> = (0..rs).map(|_| (rng.unit_u32() * 256.0) as u8).collect();
            let (ts, d) = (t.ty.type_size(), ggweb::quants::blocks::fp32_to_fp16(0.01).to_le_bytes());
            for blk in row.chunks_exact_mut(ts) {
                match t.ty {
                    GgmlType::Q6_K => blk[ts - 2..].copy_from_slice(&d),
                    _ => {
                        blk[..2].copy_from_slice(&d);
                        blk[2..4].copy_from_slice(&d);
                    }
                }
            }
            t.set_bytes(&row, r * rs);
            continue;
        }
        v.iter_mut().for_each(|x| *x = mean + 3.4 * std * (rng.unit_u32() - 0.5));
        t.set_bytes(&ggweb::quants::quantize(t.ty, &v).unwrap(), r * rs);
    }
}

/// The 124M shape (12 layers, 768 wide, 12 heads, 1024 positions, 50257 tokens), 2-D
/// weights in `wty` (output in `out_ty`), the rest F32, as llama.cpp lays GPT-2 out.
fn model(wty: GgmlType, out_ty: GgmlType, n_batch: usize) -> Gpt2 {
    model_on(wty, out_ty, n_batch, Rc::new(CpuBackend::new(1)))
}

fn model_on(wty: GgmlType, out_ty: GgmlType, n_batch: usize, backend: Rc<dyn Backend>) -> Gpt2 {
    let (e, v, n_ctx, n_layer) = (768i64, 50257i64, 1024i64, 12usize);
    let hp = Hparams {
        n_vocab: v as usize,
        n_ctx_train: n_ctx as usize,
        n_embd: e as usize,
        n_head: 12,
        n_layer,
        n_ff: 4 * e as usize,
        eps: 1e-5,
    };
    let ctx = Context::new(ContextParams { mem_size: 256 * TENSOR_OVERHEAD, no_alloc: true });
    let mut rng = Rng::xorshift32(0x9e37_79b9);
    let mut specs: Vec<(String, GgmlType, Vec<i64>, f32, f32)> = vec![
        ("token_embd.weight".into(), wty, vec![e, v], 0.02, 0.0),
        ("position_embd.weight".into(), GgmlType::F32, vec![e, n_ctx], 0.02, 0.0),
        ("output_norm.weight".into(), GgmlType::F32, vec![e], 0.1, 1.0),
        ("output_norm.bias".into(), GgmlType::F32, vec![e], 0.02, 0.0),
        ("output.weight".into(), out_ty, vec![e, v], 0.02, 0.0),
    ];
    for il in 0..n_layer {
        let n = |s: &str| format!("blk.{il}.{s}");
        specs.extend([
            (n("attn_norm.weight"), GgmlType::F32, vec![e], 0.1, 1.0),
            (n("attn_norm.bias"), GgmlType::F32, vec![e], 0.02, 0.0),
            (n("attn_qkv.weight"), wty, vec![e, 3 * e], 0.02, 0.0),
            (n("attn_qkv.bias"), GgmlType::F32, vec![3 * e], 0.02, 0.0),
            (n("attn_output.weight"), wty, vec![e, e], 0.02, 0.0),
            (n("attn_output.bias"), GgmlType::F32, vec![e], 0.02, 0.0),
            (n("ffn_norm.weight"), GgmlType::F32, vec![e], 0.1, 1.0),
            (n("ffn_norm.bias"), GgmlType::F32, vec![e], 0.02, 0.0),
            (n("ffn_up.weight"), wty, vec![e, 4 * e], 0.02, 0.0),
            (n("ffn_up.bias"), GgmlType::F32, vec![4 * e], 0.02, 0.0),
            (n("ffn_down.weight"), wty, vec![4 * e, e], 0.02, 0.0),
            (n("ffn_down.bias"), GgmlType::F32, vec![e], 0.02, 0.0),
        ]);
    }
    let tensors: Vec<(Tensor, f32, f32)> = specs
        .iter()
        .map(|(name, ty, ne, std, mean)| {
            let t = ctx.new_tensor(*ty, ne);
            t.set_name(name);
            (t, *std, *mean)
        })
        .collect();
    let mut buffers = alloc_ctx_tensors(&ctx, &*backend.buffer_type()).unwrap();
    for (t, std, mean) in &tensors {
        fill(t, &mut rng, *std, *mean);
        // As the loader places them: the matrices in the CPU's repacking buffers.
        if ggweb::cpu::repack_buffer::enabled() && ggweb::model::gpt2::is_matrix_weight(&t.name(), false) {
            ggweb::cpu::repack_buffer::place_repacked(t, false).unwrap();
            buffers.push(t.data().unwrap().buffer);
        }
    }
    let opts = Gpt2Options { n_ctx: 0, n_batch, n_threads: 1, ..Default::default() };
    Gpt2::new(hp, ctx, buffers, backend, &opts).unwrap()
}

/// A row of `ty` with random quants and small normal f16 block scales (the K-quants cannot
/// be quantized here: their rows come from files).
fn random_weights(rng: &mut Rng, ty: GgmlType, k: usize, rows: usize) -> Vec<u8> {
    use GgmlType::*;
    if ggweb::quants::can_quantize(ty) {
        let v: Vec<f32> = (0..k * rows).map(|_| rng.unit_u32() - 0.5).collect();
        return ggweb::quants::quantize(ty, &v).unwrap();
    }
    let mut b: Vec<u8> = (0..ty.row_size(k as i64) * rows).map(|_| (rng.unit_u32() * 256.0) as u8).collect();
    let ts = ty.type_size();
    let d = half::f16::from_f32(2e-4).to_le_bytes();
    let at: &[usize] = match ty {
        Q4_K | Q5_K => &[0, 2],
        Q2_K => &[ts - 4, ts - 2],
        _ => &[ts - 2],
    };
    for blk in b.chunks_exact_mut(ts) {
        for &o in at {
            blk[o..o + 2].copy_from_slice(&d);
        }
    }
    b
}

/// `cpu::arch::gemm` (the prompt kernel of each type) against the loop of `vec_dot` it
/// replaced for Q4_1, Q5_0, Q5_1 and the K-quants: 768 × 2304 weights, 32 rows of b.
#[wasm_bindgen_test]
#[ignore = "benchmark (minutes): run with --include-ignored"]
fn bench_prompt_gemm_against_vec_dot_loop() {
    use GgmlType::*;
    let mut rng = Rng::xorshift32(11);
    let (k, m, n) = (768usize, 2304usize, 32usize);
    console_log!("| type | kernel | gemm GFLOP/s (CPU time) | vec_dot loop GFLOP/s | × |");
    console_log!("|---|---|---|---|---|");
    for ty in [Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
        let vt = ty.vec_dot_type();
        let a = random_weights(&mut rng, ty, k, m);
        let x: Vec<f32> = (0..k * n).map(|_| rng.unit_u32() - 0.5).collect();
        let b = ggweb::quants::quantize(vt, &x).unwrap();
        let (ra, rb) = (ty.row_size(k as i64), vt.row_size(k as i64));
        let mut c = vec![0f32; m * n];
        let best = |f: &mut dyn FnMut()| {
            let mut best = f64::MAX;
            for _ in 0..3 {
                let (c0, mut runs) = (cpu_now(), 0);
                while cpu_now() - c0 < 0.2 || runs < 2 {
                    f();
                    runs += 1;
                }
                best = best.min((cpu_now() - c0) / runs as f64);
            }
            2.0 * (k * m * n) as f64 / best * 1e-9
        };
        let g = best(&mut || ggweb::cpu::arch::gemm(ty, k, m, n, &a, ra, &b, rb, &mut c, m));
        let want = c.clone();
        let l = best(&mut || {
            for j in 0..n {
                for i in 0..m {
                    c[j * m + i] = ggweb::cpu::arch::vec_dot(ty, k, &a[i * ra..(i + 1) * ra], &b[j * rb..(j + 1) * rb]);
                }
            }
        });
        assert!(want.iter().zip(&c).all(|(p, q)| p.to_bits() == q.to_bits()), "{ty}: gemm ≠ vec_dot");
        let name = ggweb::cpu::arch::prompt_gemm_kernel(ty);
        console_log!("| {ty} | {name} | {g:.2} | {l:.2} | {:.2} |", g / l);
    }
}

/// Q8_0's prompt product on training's shapes (a batch of 4 × 128 tokens: 512 rows of b) with
/// the relaxed build's u8 panels and with the i16 panels (`set_vnni_disabled`), alternating
/// per round, CPU time: on a CPU with AVX-VNNI, where V8 emits `vpdpbusd` for the relaxed dot.
#[wasm_bindgen_test]
#[ignore = "benchmark (minutes): run with --include-ignored"]
fn bench_q8_0_prompt_u8_against_i16_panels() {
    use GgmlType::*;
    let mut rng = Rng::xorshift32(12);
    let n = 512usize;
    console_log!("| k × m (n = {n}) | u8 panels GOP/s (rounds) | i16 panels GOP/s (rounds) | kernel |");
    console_log!("|---|---|---|---|");
    for (k, m) in [(768usize, 2304usize), (768, 768), (768, 3072), (3072, 768)] {
        let a = random_weights(&mut rng, Q8_0, k, m);
        let x: Vec<f32> = (0..k * n).map(|_| rng.unit_u32() - 0.5).collect();
        let b = ggweb::quants::quantize(Q8_0, &x).unwrap();
        let (ra, rb) = (Q8_0.row_size(k as i64), Q8_0.row_size(k as i64));
        let mut c = vec![0f32; m * n];
        let mut run = |no_u8: bool| {
            ggweb::cpu::arch::set_vnni_disabled(no_u8);
            let (c0, mut runs) = (cpu_now(), 0);
            while cpu_now() - c0 < 0.3 || runs < 2 {
                ggweb::cpu::arch::gemm(Q8_0, k, m, n, &a, ra, &b, rb, &mut c, m);
                runs += 1;
            }
            let t = (cpu_now() - c0) / runs as f64;
            ggweb::cpu::arch::set_vnni_disabled(false);
            (2.0 * (k * m * n) as f64 / t * 1e-9, c.clone())
        };
        let (mut u8s, mut i16s) = (Vec::new(), Vec::new());
        for r in 0..4 {
            for no_u8 in if r % 2 == 0 { [false, true] } else { [true, false] } {
                let (g, out) = run(no_u8);
                if no_u8 {
                    i16s.push((g, out))
                } else {
                    u8s.push((g, out))
                }
            }
        }
        assert!(u8s[0].1.iter().zip(&i16s[0].1).all(|(p, q)| p.to_bits() == q.to_bits()), "u8 ≠ i16 panels");
        let f = |v: &[(f64, Vec<f32>)]| v.iter().map(|x| format!("{:.1}", x.0)).collect::<Vec<_>>().join(", ");
        console_log!("| {k} × {m} | {} | {} | {} |", f(&u8s), f(&i16s), ggweb::cpu::arch::prompt_gemm_kernel(Q8_0));
    }
}

#[wasm_bindgen_test]
#[ignore = "benchmark (minutes): run with --include-ignored"]
fn bench_mul_mat_kernels() {
    let ctx = Context::new(ContextParams { mem_size: 256 << 20, no_alloc: false });
    let mut rng = Rng::xorshift32(7);
    console_log!("| op | type | K × M × N | GFLOP/s (wall) | GFLOP/s (CPU time) |");
    console_log!("|---|---|---|---|---|");
    let only = option_env!("BENCH_TYPES").unwrap_or("q8_0,q4_0,q4_k,q6_k");
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K] {
        if !only.split(',').any(|t| t == ty.name()) {
            continue;
        }
        for (k, m) in [(768i64, 2304i64), (3072, 768), (768, 50257)] {
            for n in [1i64, 32] {
                for repack in [false, true] {
                    if repack && !matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q4_K | GgmlType::Q6_K) {
                        continue;
                    }
                    let a = ctx.new_tensor_2d(ty, k, m);
                    fill(&a, &mut rng, 0.3, 0.0);
                    if repack && !ggweb::cpu::repack_buffer::place_repacked(&a, false).unwrap() {
                        continue; // no packed kernel for ty here
                    }
                    let b = ctx.new_tensor_2d(GgmlType::F32, k, n);
                    fill(&b, &mut rng, 0.3, 0.0);
                    let c = ctx.mul_mat(&a, &b);
                    let mut gf = Graph::new();
                    gf.build_forward_expand(&c);
                    ggweb::cpu::compute_graph(&gf, 1).unwrap();
                    // Best of five trials of ≥ 0.1 s CPU each.
                    let (mut best_w, mut best_c) = (f64::MAX, f64::MAX);
                    for _ in 0..5 {
                        let (t0, c0, mut runs) = (now(), cpu_now(), 0);
                        while cpu_now() - c0 < 0.1 || now() - t0 < 0.1 || runs < 2 {
                            ggweb::cpu::compute_graph(&gf, 1).unwrap();
                            runs += 1;
                        }
                        best_w = best_w.min((now() - t0) / runs as f64);
                        best_c = best_c.min((cpu_now() - c0) / runs as f64);
                    }
                    let flop = 2.0 * (k * m * n) as f64;
                    console_log!(
                        "| mul_mat | {ty}{} | {k} × {m} × {n} | {:.2} | {:.2} |",
                        if repack { " repacked" } else { "" },
                        flop / best_w * 1e-9,
                        flop / best_c * 1e-9
                    );
                }
            }
        }
    }
}

#[wasm_bindgen_test]
#[ignore = "benchmark (minutes): run with --include-ignored"]
fn bench_gpt2_124m_shape() {
    let (n_prompt, n_gen) = (128usize, 64usize);
    console_log!("| weights | pp{n_prompt} tok/s | tg{n_gen} tok/s | pp{n_prompt} tok/CPU-s | tg{n_gen} tok/CPU-s |");
    console_log!("|---|---|---|---|---|");
    for (wty, out_ty) in [
        (GgmlType::F32, GgmlType::F32),
        (GgmlType::F16, GgmlType::F16),
        (GgmlType::Q8_0, GgmlType::Q8_0),
        (GgmlType::Q4_0, GgmlType::Q8_0),
    ] {
        let mut m = model(wty, out_ty, 32);
        let ids: Vec<u32> = (0..n_prompt as u64).map(|i| ((i * 2654435761 + 12345) % 50257) as u32).collect();
        // The first prompt run also grows the wasm memory: not timed.
        m.eval(&ids, 0, false).unwrap();
        let (t, c) = (now(), cpu_now());
        let logits = m.eval(&ids, 0, false).unwrap();
        let (pp, pp_cpu) = (n_prompt as f64 / (now() - t), n_prompt as f64 / (cpu_now() - c));
        let mut tok = ggweb::model::sampling::argmax(&logits);
        let (t, c) = (now(), cpu_now());
        for i in 0..n_gen {
            let l = m.eval(&[tok], n_prompt + i, false).unwrap();
            tok = ggweb::model::sampling::argmax(&l);
        }
        let (tg, tg_cpu) = (n_gen as f64 / (now() - t), n_gen as f64 / (cpu_now() - c));
        console_log!("| {wty} (output {out_ty}) | {pp:.2} | {tg:.2} | {pp_cpu:.2} | {tg_cpu:.2} |");
    }
}

/// `performance.now()` in seconds: the profiler needs sub-millisecond times per node.
fn perf_now() -> f64 {
    use wasm_bindgen::{JsCast, JsValue};
    let perf = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("performance")).unwrap();
    let f: js_sys::Function = js_sys::Reflect::get(&perf, &JsValue::from_str("now")).unwrap().dyn_into().unwrap();
    f.call0(&perf).unwrap().as_f64().unwrap() / 1000.0
}

/// Where a 64-token prompt's time goes in wasm, per node class (`ggweb bench --profile`'s
/// table, for the simd128 build).
#[wasm_bindgen_test]
#[ignore = "benchmark (minutes): run with --include-ignored"]
fn bench_gpt2_124m_profile() {
    let n_prompt = 64usize;
    for (wty, out_ty) in [(GgmlType::F32, GgmlType::F32), (GgmlType::Q8_0, GgmlType::Q8_0)] {
        let cpu = Rc::new(CpuBackend::with_profiler(1, perf_now));
        let mut m = model_on(wty, out_ty, 64, cpu.clone());
        let ids: Vec<u32> = (0..n_prompt as u64).map(|i| ((i * 2654435761 + 12345) % 50257) as u32).collect();
        m.eval(&ids, 0, false).unwrap();
        cpu.reset_profile();
        let t = now();
        m.eval(&ids, 0, false).unwrap();
        let wall = now() - t;
        let prof = cpu.profile();
        let total: f64 = prof.iter().map(|e| e.secs).sum();
        // On a shared machine one run says little: the best of 8 is the code's own speed.
        let best = (0..8)
            .map(|_| {
                let t = now();
                m.eval(&ids, 0, false).unwrap();
                now() - t
            })
            .fold(f64::MAX, f64::min);
        console_log!(
            "{wty}: pp{n_prompt} {:.1} tok/s (best of 8 more: {:.1}), {:.1} ms in nodes of {:.1} ms",
            n_prompt as f64 / wall,
            n_prompt as f64 / best,
            total * 1e3,
            wall * 1e3
        );
        for e in prof.iter().take(16) {
            console_log!(
                "  {:<28} {:<10} {:>4} calls {:>8.2} ms {:>5.1}%",
                e.class,
                e.op,
                e.calls,
                e.secs * 1e3,
                100.0 * e.secs / total
            );
        }
    }
}

/// Where a decode step's time goes in wasm (Q8_0, and Q4_0 with the Q8_0 output matrix):
/// per node class over 32 steps after a 64-token prompt, and the rest of the step (graph
/// building, allocation, sampling) as wall − nodes.
#[wasm_bindgen_test]
#[ignore = "benchmark (minutes): run with --include-ignored"]
fn bench_gpt2_124m_decode_profile() {
    let (n_prompt, n_gen) = (64usize, 32usize);
    for (wty, out_ty) in [(GgmlType::Q8_0, GgmlType::Q8_0), (GgmlType::Q4_0, GgmlType::Q8_0)] {
        let cpu = Rc::new(CpuBackend::with_profiler(1, perf_now));
        let mut m = model_on(wty, out_ty, 64, cpu.clone());
        let ids: Vec<u32> = (0..n_prompt as u64).map(|i| ((i * 2654435761 + 12345) % 50257) as u32).collect();
        let logits = m.eval(&ids, 0, false).unwrap();
        let mut tok = ggweb::model::sampling::argmax(&logits);
        // Warm-up steps (V8's tiers), then the profiled ones.
        for i in 0..8 {
            tok = ggweb::model::sampling::argmax(&m.eval(&[tok], n_prompt + i, false).unwrap());
        }
        cpu.reset_profile();
        let t = perf_now();
        for i in 0..n_gen {
            tok = ggweb::model::sampling::argmax(&m.eval(&[tok], n_prompt + 8 + i, false).unwrap());
        }
        let wall = perf_now() - t;
        let prof = cpu.profile();
        let total: f64 = prof.iter().map(|e| e.secs).sum();
        console_log!(
            "{wty}: tg{n_gen} {:.1} tok/s, {:.2} ms/token in nodes of {:.2} ms/token",
            n_gen as f64 / wall,
            total * 1e3 / n_gen as f64,
            wall * 1e3 / n_gen as f64
        );
        for e in prof.iter().take(14) {
            console_log!(
                "  {:<28} {:<10} {:>5} calls {:>7.3} ms/token {:>5.1}%",
                e.class,
                e.op,
                e.calls,
                e.secs * 1e3 / n_gen as f64,
                100.0 * e.secs / total
            );
        }
    }
}

/// Repacked weights against ggml's layout (`cpu::arch::repack`), one build: the 124M shape in
/// Q8_0 and Q4_0 (output Q8_0) loaded twice, repacking off and on, then rounds of a 64-token
/// prompt and 32 decoded tokens alternating between the two (tokens per CPU second of the
/// Node process, each round's; wall time in a browser: `WASM_BINDGEN_USE_BROWSER=1`; on a
/// shared machine the pairs say more than one run).
#[wasm_bindgen_test]
#[ignore = "benchmark (minutes): run with --include-ignored"]
fn bench_repack_ab() {
    let (n_prompt, n_gen, rounds) = (64usize, 32usize, 5);
    console_log!("| weights | layout | pp{n_prompt} tok/CPU-s (rounds) | tg{n_gen} tok/CPU-s (rounds) |");
    console_log!("|---|---|---|---|");
    for (wty, out_ty) in [(GgmlType::Q8_0, GgmlType::Q8_0), (GgmlType::Q4_0, GgmlType::Q8_0)] {
        ggweb::cpu::arch::repack::set_disabled(true);
        let plain = model(wty, out_ty, 64);
        ggweb::cpu::arch::repack::set_disabled(false);
        let packed = model(wty, out_ty, 64);
        assert!(plain.repacked_bytes == 0 && packed.repacked_bytes > 0);
        let mut ms = [plain, packed];
        let ids: Vec<u32> = (0..n_prompt as u64).map(|i| ((i * 2654435761 + 12345) % 50257) as u32).collect();
        let mut res = [[(0f64, 0f64); 5]; 2];
        for m in ms.iter_mut() {
            m.eval(&ids, 0, false).unwrap(); // grows the memory, warms the kernels
        }
        for r in 0..rounds {
            for (k, m) in ms.iter_mut().enumerate() {
                // CPU time under Node; in a browser (no process CPU time) wall time.
                let clock = || if cpu_now().is_nan() { perf_now() } else { cpu_now() };
                let c = clock();
                let logits = m.eval(&ids, 0, false).unwrap();
                let pp = n_prompt as f64 / (clock() - c);
                let mut tok = ggweb::model::sampling::argmax(&logits);
                let c = clock();
                for i in 0..n_gen {
                    tok = ggweb::model::sampling::argmax(&m.eval(&[tok], n_prompt + i, false).unwrap());
                }
                res[k][r] = (pp, n_gen as f64 / (clock() - c));
            }
        }
        for (k, name) in ["ggml", "repacked"].iter().enumerate() {
            let f = |sel: fn(&(f64, f64)) -> f64| {
                res[k].iter().map(|x| format!("{:.1}", sel(x))).collect::<Vec<_>>().join(", ")
            };
            console_log!("| {wty} | {name} | {} | {} |", f(|x| x.0), f(|x| x.1));
        }
    }
}
