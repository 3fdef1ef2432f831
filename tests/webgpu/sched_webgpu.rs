//! GPT-2 split layer by layer between WebGPU (natively: wgpu on Vulkan, Mesa's lavapipe
//! here) and the CPU, through the scheduler: for every number of GPU layers, logits within
//! 1e-3 of the CPU alone and the same greedy tokens; no allocation after the first reserve;
//! and the CLI's `--gpu-layers`.
//!
//! Run: `cargo test --features webgpu --test webgpu sched_webgpu::`. Without a Vulkan adapter
//! the tests fail with a message; `GGWEB_ALLOW_NO_GPU=1` turns that into a printed skip.

use crate::support::eval::Eval;
use ggweb::model::context::Batch;
use std::io::Write;
use std::process::{Command, Stdio};
use std::rc::Rc;

use ggweb::backend::Backend;
use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};
use serde_json::Value;

use crate::support::gpu;
use crate::support::sched::*;

fn gpu() -> Option<Rc<dyn Backend>> {
    gpu::webgpu(WebGpuOptions::default()).map(|b| Rc::new(b) as Rc<dyn Backend>)
}

#[test]
fn every_gpu_layer_count_matches_the_cpu() {
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    let (path, bytes) = tiny_f32();
    let mut cpu = load_cpu(&bytes).model;
    let want = run(&mut cpu, 20);
    let (n_layer, n_embd) = (cpu.hparams.n_layer, cpu.hparams.n_embd);
    for n in 0..=n_layer + 1 {
        let mut m = load_split(&bytes, gpu.clone(), n).model;
        let got = run(&mut m, 20);
        let d = max_abs_diff(&got.logits, &want.logits);
        eprintln!("{} gpu_layers {n}: max |split - cpu| = {d:.2e}", path.display());
        // Measured: 0 with no GPU layer, ~1e-6 otherwise (summation order on the GPU).
        assert!(d < 1e-3, "gpu_layers {n}: logits differ from the CPU by {d}");
        assert_eq!(got.greedy, want.greedy, "gpu_layers {n}: greedy tokens");
        let r = m.sched.last_run();
        let n_kv = PROMPT.len() + 20;
        assert_eq!(
            (r.splits, r.copies, r.copy_bytes),
            expected_token_split(n, n_layer, n_embd, n_kv),
            "gpu_layers {n}"
        );
        let names: Vec<&str> = m.sched.splits().iter().map(|s| m.sched.backend(s.backend).name()).collect();
        let want_names: &[&str] = match n {
            0 => &["CPU"],
            n if n <= n_layer => &["CPU", "WebGPU"],
            _ => &["WebGPU"],
        };
        assert_eq!(names, want_names, "gpu_layers {n}");
        let by = m.memory_by_backend();
        assert_eq!((by[0].backend.as_str(), by[1].backend.as_str()), ("WebGPU", "CPU"));
        assert_eq!(by[0].weights > 0, n > 0, "gpu_layers {n}: {by:?}");
        assert_eq!(by[1].weights > 0, n <= n_layer, "gpu_layers {n}: {by:?}");
    }
}

/// Reserved once at load; a batched prompt and 100 tokens through WebGPU + CPU then
/// allocate nothing: the same reserves, buffer allocations and buffer sizes.
#[test]
fn no_allocation_after_the_first_reserve_on_webgpu() {
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    let (_, bytes) = tiny_f32();
    let mut m = load_split(&bytes, gpu, 1).model;
    let g = m.galloc();
    let before = (g.n_reserves(), g.n_buffer_allocs(), g.buffer_size(0), g.buffer_size(1));
    assert_eq!((before.0, before.1), (1, 2));
    let mut logits = m.eval(&PROMPT, 0, false).unwrap();
    for n_past in PROMPT.len()..PROMPT.len() + 100 {
        let t = ggweb::model::sampling::argmax(&logits);
        logits = m.eval(&[t], n_past, false).unwrap();
        assert_eq!(m.sched.last_run().copies, 3); // the two boundary rows and the KQ mask
    }
    let g = m.galloc();
    assert_eq!((g.n_reserves(), g.n_buffer_allocs(), g.buffer_size(0), g.buffer_size(1)), before);
}

fn ggweb(args: &[&str]) -> (i32, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_ggweb"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.as_ref().unwrap().flush().unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// `ggweb generate --gpu-layers N` gives the CPU's greedy text; `ggweb inspect
/// --gpu-layers N --json` reports the split the library makes.
#[test]
fn cli_gpu_layers() {
    let _shared = gpu::shared();
    if gpu().is_none() {
        return;
    }
    let (path, bytes) = tiny_f32();
    let path = path.display().to_string();
    let n_layer = load_cpu(&bytes).model.hparams.n_layer;
    let generate = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", &path, "--prompt", "Hello, my name is", "--temp", "0", "-n", "12"];
        args.extend_from_slice(extra);
        args.push("--json");
        let (code, out, err) = ggweb(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        v["tokens"].clone()
    };
    let want = generate(&[]);
    for n in ["1", &n_layer.to_string(), "99"] {
        assert_eq!(generate(&["--gpu-layers", n]), want, "--gpu-layers {n}");
    }

    let (code, out, err) = ggweb(&["inspect", "--model", &path, "--gpu-layers", "1", "--batch", "8", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["gpu_blocks"], serde_json::json!([n_layer - 1]));
    assert_eq!(v["embeddings_on_gpu"], false);
    assert_eq!(v["backends"], serde_json::json!(["WebGPU", "CPU"]));
    let m = load_split(&bytes, gpu().unwrap(), 1).model;
    let by = m.memory_by_backend();
    for (i, b) in by.iter().enumerate() {
        let j = &v["memory_by_backend"][i];
        assert_eq!(
            (j["backend"].as_str().unwrap(), j["weights"].as_u64().unwrap() as usize),
            (b.backend.as_str(), b.weights)
        );
        assert_eq!(j["kv"].as_u64().unwrap() as usize, b.kv);
    }
    let n_embd = m.hparams.n_embd;
    let runs = v["runs"].as_array().unwrap();
    assert_eq!((runs[0]["n_tokens"].as_u64(), runs[1]["n_tokens"].as_u64()), (Some(1), Some(8)));
    for (r, n_tokens) in runs.iter().zip([1, 8]) {
        // The two boundary rows per token, and the KQ mask ([n_tokens, n_tokens] from position 0).
        assert_eq!((r["splits"].as_u64(), r["copies"].as_u64()), (Some(2), Some(3)));
        assert_eq!(r["copy_bytes"].as_u64(), Some((2 * 4 * n_embd * n_tokens + 4 * n_tokens * n_tokens) as u64));
    }

    let (code, out, err) = ggweb(&["inspect", "--model", &path, "--gpu-layers", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("gpu layers: 1 of {n_layer} on WebGPU (blocks {0}..={0})", n_layer - 1)), "{out}");
    // The two boundary rows per token and the KQ mask ([n_tokens, n_tokens] f32 from position 0).
    assert!(out.contains(&format!("one token: 2 splits, 3 copies per run ({} B)", 2 * 4 * n_embd + 4)), "{out}");
    assert!(
        out.contains(&format!(
            "a batch of 32 tokens: 2 splits, 3 copies per run ({} B)",
            2 * 4 * n_embd * 32 + 4 * 32 * 32
        )),
        "{out}"
    );
}

/// A device lost after a graph ran, then a blocking native read of its memory (the KV
/// cache it wrote, as a read-back after `graph_compute` would be): `DeviceLost`, not a panic.
#[test]
fn a_device_lost_before_the_logits_are_read_is_an_error() {
    let _shared = gpu::shared();
    use ggweb::backend::BackendError;

    if gpu().is_none() {
        return;
    }
    let (_, bytes) = tiny_f32();
    let lose_me = WebGpuBackend::new(WebGpuOptions::default()).unwrap();
    let n_layer = load_cpu(&bytes).model.hparams.n_layer;
    let mut m = load_split(&bytes, Rc::new(lose_me.clone()), n_layer + 1).model;
    m.eval(&PROMPT[..2], 0, false).unwrap();
    let k0 = m.kv.k[0].clone();
    let mut out = vec![0u8; 64];
    k0.try_get_bytes(&mut out, 0).unwrap();
    lose_me.destroy_device();
    match k0.try_get_bytes(&mut out, 0) {
        Err(BackendError::DeviceLost(why)) => assert!(why.starts_with("Destroyed: "), "{why}"),
        other => panic!("expected DeviceLost, got {other:?}"),
    }
}

/// A device destroyed between two generated tokens (a driver reset, or the browser taking
/// the device away): the next eval and every one after it is `DeviceLost`, with the
/// reason, and nothing panics; a model on a fresh device then generates the CPU's greedy
/// tokens. (The browser side, through the bindings: tests/e2e/model.spec.mjs.)
#[test]
fn a_lost_device_fails_every_later_eval_and_a_new_device_recovers() {
    let _shared = gpu::shared();
    use ggweb::backend::BackendError;
    use ggweb::model::sampling::argmax;
    use ggweb::model::ModelError;

    if gpu().is_none() {
        return;
    }
    let (_, bytes) = tiny_f32();
    let want = run(&mut load_cpu(&bytes).model, 3).greedy;
    let lose_me = WebGpuBackend::new(WebGpuOptions::default()).unwrap();
    let n_layer = load_cpu(&bytes).model.hparams.n_layer;
    // Everything on WebGPU (embeddings and head too): the logits are read back from it.
    let mut m = load_split(&bytes, Rc::new(lose_me.clone()), n_layer + 1).model;
    let logits = pollster::block_on(m.decode(Batch::last(&PROMPT, 0))).unwrap().logits;
    let first = argmax(&logits);
    assert_eq!(first, want[0]);
    let logits = pollster::block_on(m.decode(Batch::last(&[first], PROMPT.len()))).unwrap().logits;
    assert_eq!(argmax(&logits), want[1]);
    assert_eq!(lose_me.lost_reason(), None);

    lose_me.destroy_device();
    for attempt in 0..3 {
        match pollster::block_on(m.decode(Batch::last(&[want[1]], PROMPT.len() + 1))) {
            Err(ModelError::Backend(BackendError::DeviceLost(why))) => {
                assert!(why.starts_with("Destroyed: "), "attempt {attempt}: {why}")
            }
            Err(e) => panic!("attempt {attempt}: expected DeviceLost, got {e}"),
            Ok(_) => panic!("attempt {attempt}: an eval on a destroyed device succeeded"),
        }
    }
    match pollster::block_on(m.decode(Batch::last(&PROMPT, 0))) {
        Err(ModelError::Backend(BackendError::DeviceLost(_))) => {}
        other => panic!("a fresh prompt on the lost device: expected DeviceLost, got {:?}", other.err()),
    }
    assert!(lose_me.lost_reason().is_some_and(|r| r.starts_with("Destroyed: ")));
    drop(m);

    let mut fresh = load_split(&bytes, gpu().unwrap(), n_layer + 1).model;
    assert_eq!(run(&mut fresh, 3).greedy, want, "greedy tokens on a new device");
}

/// Dispatches the WebGPU splits of the graph split last take, derived from what they hold:
/// three for the embeddings (two get_rows, add), five per layer (crate/webgpu/fuse.rs: the
/// first layer norm read by the QKV projection, with its bias, the per-head Q and the K/V
/// cache stores; attention over the cache; the output projection with its bias and the
/// residual; the second layer norm read by the MLP's up projection, with its bias and GELU;
/// the down projection with its bias and the residual), one for the head (its layer norm
/// read by the logits' mul_mat), and one for each layer's last add that the scheduler put
/// with its GPU reader while the layer ran on the CPU. Every chunk fuses alike: lavapipe runs
/// the per-row mat-vec kernels at any column count. No weight of the tiny model is above
/// lavapipe's binding limit, so none is read in row ranges.
fn expected_dispatches(m: &ggweb::model::context::Gpt2) -> u64 {
    use ggweb::Op;
    let nodes = m.sched.nodes();
    let on_gpu = m.sched.splits().iter().filter(|s| m.sched.backend(s.backend).name() == "WebGPU");
    on_gpu
        .map(|s| {
            let ns = &nodes[s.nodes.clone()];
            let has = |name: &str| u64::from(ns.iter().any(|n| n.name() == name));
            let layers = ns.iter().filter(|n| matches!(n.op, Op::SoftMax { .. })).count() as u64;
            let l_outs = ns.iter().filter(|n| n.name().ends_with(".l_out")).count() as u64;
            3 * has("inpL") + 5 * layers + has("result_output") + (l_outs - layers)
        })
        .sum()
}

/// The WebGPU counters of a prompt and of a generated token, with the head on WebGPU (one
/// GPU layer, and everything): one submit per evaluated chunk, one read-back per chunk
/// whose logits are read, of n_vocab floats (only the last row goes through the head), and
/// the dispatches [`expected_dispatches`] derives. All on WebGPU a token is 3 + 5 per layer
/// + 1 dispatches: 3 + 5 * 12 + 1 = 64 for the 124M shape (257 before the layer fusions).
#[test]
fn webgpu_counters_per_token() {
    let _shared = gpu::shared();
    use ggweb::model::sampling::argmax;
    use ggweb::model::session::{GenerateOptions, Session};

    let Some(gpu) = gpu() else { return };
    let (_, bytes) = tiny_f32();
    let n_layer = load_cpu(&bytes).model.hparams.n_layer;
    for n in [1, n_layer + 1] {
        let mut m = load_split(&bytes, gpu.clone(), n).model;
        let logits_bytes = (m.hparams.n_vocab * 4) as u64;
        let s0 = m.webgpu_stats().expect("a WebGPU backend");
        let logits = m.eval(&PROMPT, 0, false).unwrap();
        let d = m.webgpu_stats().unwrap().since(&s0);
        // n_batch 4: chunks of 4, 4 and 2 tokens; only the last one is read.
        let mut want = 0;
        for (n_past, n_tokens) in [(0, 4), (4, 4), (8, 2)] {
            m.plan_split(n_past, n_tokens).unwrap();
            want += expected_dispatches(&m);
        }
        assert_eq!(
            (d.submits, d.readbacks, d.readback_bytes, d.dispatches),
            (3, 1, logits_bytes, want),
            "gpu_layers {n}"
        );

        let s1 = m.webgpu_stats().unwrap();
        m.eval(&[argmax(&logits)], PROMPT.len(), false).unwrap();
        let d = m.webgpu_stats().unwrap().since(&s1);
        m.plan_split(PROMPT.len(), 1).unwrap();
        let want = expected_dispatches(&m);
        assert_eq!(
            (d.submits, d.readbacks, d.readback_bytes, d.dispatches),
            (1, 1, logits_bytes, want),
            "gpu_layers {n}"
        );
        if n > n_layer {
            assert_eq!(want, 3 + 5 * n_layer as u64 + 1);
        }
        assert!(d.encode_ms > 0.0, "gpu_layers {n}: encode time {}", d.encode_ms);
    }

    // Through the session core: a generation's stats.webgpu. Its last token is sampled but
    // not evaluated (only a next step would need its K/V).
    let mut s = Session::new(load_split(&bytes, gpu, n_layer + 1));
    let opts = GenerateOptions { max_tokens: 5, ignore_eos: true, ..GenerateOptions::default() };
    s.start(PROMPT.to_vec(), opts).unwrap();
    while !pollster::block_on(s.prompt_step()).unwrap() {}
    while pollster::block_on(s.next()).unwrap().is_some() {}
    let st = s.stats();
    let w = st.webgpu.expect("stats.webgpu on WebGPU");
    let evals = 3 + st.tokens as u64 - 1;
    let logits_bytes = (s.model.hparams.n_vocab * 4) as u64;
    assert_eq!(st.tokens, 5);
    assert_eq!((w.submits, w.readbacks, w.readback_bytes), (evals, evals - 2, (evals - 2) * logits_bytes));
}

/// Several sequences and beam search on WebGPU (the KQ mask through `soft_max_ext`, the
/// cells' sequence sets): the same tokens and beams as the CPU alone, for each split.
#[test]
fn several_sequences_and_beams_match_the_cpu() {
    use ggweb::model::sampling::SamplingParams;
    use ggweb::model::session::{GenerateOptions, Session};
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    let (_, bytes) = tiny_f32();
    let run = |s: &mut Session, opts: GenerateOptions| {
        s.start(PROMPT.to_vec(), opts).unwrap();
        while !pollster::block_on(s.prompt_step()).unwrap() {}
        let mut items = Vec::new();
        while let Some(it) = pollster::block_on(s.next()).unwrap() {
            items.push((it.seq, it.token));
        }
        (items, s.beams().iter().map(|b| b.tokens.clone()).collect::<Vec<_>>())
    };
    let sampled = GenerateOptions {
        max_tokens: 6,
        n: 3,
        ignore_eos: true,
        // Top 3 only: the GPU's logits differ from the CPU's by ~1e-6, which over the
        // random model's flat full distribution moves a draw now and then.
        sampling: SamplingParams { temperature: 0.7, top_k: 3, top_p: 1.0, seed: 5, ..SamplingParams::default() },
        ..GenerateOptions::default()
    };
    let beams = GenerateOptions { max_tokens: 5, num_beams: 3, ..GenerateOptions::default() };
    let mut cpu = Session::new(load_cpu(&bytes));
    let want = (run(&mut cpu, sampled.clone()), run(&mut cpu, beams.clone()));
    assert_eq!(want.1 .1.len(), 3);
    let of = |i: usize| want.0 .0.iter().filter(|x| x.0 == i).map(|x| x.1).collect::<Vec<u32>>();
    assert!(of(0) != of(1) || of(1) != of(2), "the sequences differ: {:?}", want.0 .0);
    let n_layer = cpu.model.hparams.n_layer;
    for n in [1, n_layer + 1] {
        let mut s = Session::new(load_split(&bytes, gpu.clone(), n));
        let got = (run(&mut s, sampled.clone()), run(&mut s, beams.clone()));
        assert_eq!(got, want, "gpu_layers {n}");
    }
}

/// A backward pass over a graph whose weight lives on WebGPU: the forward product runs there,
/// and so do the backward ops (shaders/backward.wgsl, out_prod.wgsl: WebGPU has them all),
/// gelu_back and the out_prod that reads the weight included; the gradient is the f64 one.
#[test]
fn backward_ops_run_on_webgpu_beside_a_webgpu_forward() {
    use ggweb::allocator::alloc_ctx_tensors;
    use ggweb::cpu::CpuBackend;
    use ggweb::sched::Sched;
    use ggweb::{Context, ContextParams, GgmlType::F32, Graph};

    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    let (k, m, n) = (16usize, 8usize, 3usize);
    let wctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
    let w = wctx.new_tensor_2d(F32, k as i64, m as i64);
    let _wbuf = alloc_ctx_tensors(&wctx, &*gpu.buffer_type()).unwrap();
    let wv: Vec<f32> = (0..k * m).map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0).collect();
    w.set_bytes(&wv.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), 0);

    let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
    let x = ctx.new_tensor_2d(F32, k as i64, n as i64);
    let c = ctx.new_tensor_2d(F32, m as i64, n as i64);
    for t in [&x, &c] {
        t.set_input();
    }
    x.set_param();
    let z = ctx.mul_mat(&w, &x);
    let y = ctx.gelu(&z);
    let loss = ctx.mul(&y, &c);
    let mut gf = Graph::new();
    gf.build_forward_expand(&loss);
    gf.build_backward_expand(&ctx, &loss);
    let gx = gf.grad(&x).unwrap();

    let mut sched = Sched::new(vec![gpu.clone(), Rc::new(CpuBackend::new(1))]).unwrap();
    sched.alloc_graph(&gf).unwrap();
    let xv: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) / 6.0).collect();
    let cv: Vec<f32> = (0..m * n).map(|i| ((i * 3 % 7) as f32 - 3.0) / 3.0).collect();
    x.set_f32_slice(&xv);
    c.set_f32_slice(&cv);
    sched.graph_compute(&gf).unwrap();
    assert_eq!(sched.assignment(&z).map(|a| a.backend), Some(0), "the product goes to WebGPU, with its weight");
    let backward: Vec<_> =
        gf.nodes.iter().filter(|t| t.op.name().ends_with("_BACK") || t.op.name() == "OUT_PROD").collect();
    let names: Vec<&str> = backward.iter().map(|t| t.op.name()).collect();
    assert!(names.contains(&"GELU_BACK") && names.contains(&"OUT_PROD"), "backward ops {names:?}");
    for node in backward {
        assert_eq!(sched.assignment(node).map(|a| a.backend), Some(0), "{node:?} on WebGPU");
    }
    // The gradient is WebGPU memory now: read back through the scheduler.
    let mut bytes = vec![0u8; gx.nbytes()];
    pollster::block_on(sched.tensor_get(&gx, &mut bytes)).unwrap();
    let got: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    // dx[kk, j] = Σ_mm w[kk, mm] · gelu'(z[mm, j]) · c[mm, j], in f64.
    let s = (2.0 / std::f64::consts::PI).sqrt();
    for j in 0..n {
        for kk in 0..k {
            let mut want = 0f64;
            for mm in 0..m {
                let zz: f64 = (0..k).map(|q| wv[mm * k + q] as f64 * xv[j * k + q] as f64).sum();
                let t = (s * (zz + 0.044715 * zz * zz * zz)).tanh();
                let d = 0.5 * (1.0 + t) + 0.5 * zz * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * zz * zz);
                want += wv[mm * k + kk] as f64 * d * cv[j * m + mm] as f64;
            }
            // WebGPU sums in another order than the f64 reference (~1e-6), all in f32.
            let g = got[j * k + kk] as f64;
            assert!((g - want).abs() <= 1e-5 + 1e-4 * want.abs(), "dx[{kk}, {j}] = {g}, want {want}");
        }
    }
}
