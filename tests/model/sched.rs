//! GPT-2 split layer by layer through the scheduler, on machines without a GPU: the
//! "GPU" is a `HostBackend` (the CPU kernels in host memory of another buffer type, which
//! refuses any other memory), so every split, copy and placement is real, and the logits
//! must be the CPU's bit for bit. The same checks on WebGPU: tests/webgpu/sched_webgpu.rs.

use crate::support::eval::Eval;
use std::rc::Rc;

use ggweb::backend::Backend;
use ggweb::model::context::BackendMemory;
use ggweb::sched::Cause;
use ggweb::Op;

use crate::support::host_backend::HostBackend;
use crate::support::sched::*;

fn fake_gpu() -> Rc<dyn Backend> {
    Rc::new(HostBackend::new("FAKE", "FAKE", |_| true))
}

/// No SOFT_MAX and no GELU: each GPU layer hands two nodes back to the CPU.
fn partial_gpu() -> Rc<dyn Backend> {
    Rc::new(HostBackend::new("PARTIAL", "PARTIAL", |n| !matches!(n.op, Op::SoftMax { .. } | Op::Gelu)))
}

#[test]
fn every_gpu_layer_count_matches_the_cpu_bit_for_bit() {
    let (path, bytes) = tiny_f32();
    let mut cpu = load_cpu(&bytes).model;
    let want = run(&mut cpu, 20);
    let (n_layer, n_embd) = (cpu.hparams.n_layer, cpu.hparams.n_embd);
    eprintln!("{}: {n_layer} layers", path.display());
    for n in 0..=n_layer + 1 {
        let mut m = load_split(&bytes, fake_gpu(), n).model;
        let got = run(&mut m, 20);
        assert!(
            got.logits == want.logits,
            "gpu_layers {n}: logits differ by {}",
            max_abs_diff(&got.logits, &want.logits)
        );
        assert_eq!(got.greedy, want.greedy, "gpu_layers {n}: greedy tokens");
        let r = m.sched.last_run();
        let n_kv = PROMPT.len() + 20;
        assert_eq!(
            (r.splits, r.copies, r.copy_bytes),
            expected_token_split(n, n_layer, n_embd, n_kv),
            "gpu_layers {n}"
        );
    }
}

/// Ops the GPU lacks run on the CPU: each GPU layer then makes four more splits, and the
/// values still are the CPU's exactly.
#[test]
fn ops_the_gpu_lacks_fall_back_to_the_cpu() {
    let (_, bytes) = tiny_f32();
    let want = run(&mut load_cpu(&bytes).model, 5);
    let n_layer = load_cpu(&bytes).model.hparams.n_layer;
    for n in [1, n_layer, n_layer + 1] {
        let mut m = load_split(&bytes, partial_gpu(), n).model;
        let got = run(&mut m, 5);
        assert!(
            got.logits == want.logits,
            "gpu_layers {n}: logits differ by {}",
            max_abs_diff(&got.logits, &want.logits)
        );
        assert_eq!(got.greedy, want.greedy);
        let (splits, copies, _) = expected_token_split(n, n_layer, 64, PROMPT.len() + 5);
        let r = m.sched.last_run();
        // Per GPU layer: soft_max and GELU on the CPU, each read from and handed back to the GPU;
        // the KQ mask, read by soft_max alone, stays on the CPU.
        let layers = n.min(n_layer);
        assert_eq!((r.splits, r.copies), (splits + 4 * layers, copies - 1 + 4 * layers), "gpu_layers {n}");
        // The nodes pass 3 gave the CPU because the GPU could not run them.
        let fallback: Vec<&str> = m
            .sched
            .nodes()
            .iter()
            .filter(|t| m.sched.assignment(t).is_some_and(|a| a.cause == Cause::BestInputs && a.backend == 1))
            .map(|t| t.op.name())
            .collect();
        assert_eq!(fallback, ["SOFT_MAX", "GELU"].repeat(layers), "gpu_layers {n}");
    }
}

/// Where each weight and each layer's KV cache lives, and the bytes per backend.
#[test]
fn weights_and_kv_cache_follow_their_layer() {
    let (_, bytes) = tiny_f32();
    let n_layer = load_cpu(&bytes).model.hparams.n_layer;
    for n in 0..=n_layer + 1 {
        let m = load_split(&bytes, fake_gpu(), n).model;
        let home = |on_gpu: bool| if on_gpu { "FAKE" } else { "CPU" };
        for il in 0..n_layer {
            let on_gpu = il + n >= n_layer;
            for w in ["attn_norm.weight", "attn_qkv.weight", "attn_output.bias", "ffn_up.weight", "ffn_down.bias"] {
                assert_eq!(weight_home(&m, &format!("blk.{il}.{w}")), home(on_gpu), "gpu_layers {n}, blk.{il}.{w}");
            }
            let kv = |t: &ggweb::Tensor| t.data().unwrap().buffer.buffer_type_name().to_string();
            assert_eq!((kv(&m.kv.k[il]), kv(&m.kv.v[il])), (home(on_gpu).into(), home(on_gpu).into()), "layer {il}");
        }
        let home_of = |t: &ggweb::Tensor| t.data().unwrap().buffer.buffer_type_name().to_string();
        let w = &m.weights;
        assert_eq!(
            (home_of(&w.token_embd), home_of(&w.position_embd)),
            (home(n > n_layer).into(), home(n > n_layer).into())
        );
        let head = [home_of(&w.output_norm_w), home_of(&w.output_norm_b), home_of(&w.output)];
        assert_eq!(head, [home(n > 0); 3], "gpu_layers {n}");
        // A file without output.weight (tied to token_embd) gets a copy of token_embd on the
        // head's backend when the embeddings stay behind (llama.cpp's TENSOR_DUPLICATED).
        let tied = m.weight_ctx.get_tensor("output.weight").is_none();
        let duplicated = tied && n >= 1 && n <= n_layer;
        assert_eq!(w.output != w.token_embd, !tied || duplicated, "gpu_layers {n}");
        if duplicated {
            assert_eq!(w.output.to_f32_vec(), w.token_embd.to_f32_vec());
        }
        // Bytes per backend: weights and KV add up to what each backend's buffers hold.
        let by = m.memory_by_backend();
        assert_eq!(by.iter().map(|b| b.backend.as_str()).collect::<Vec<_>>(), ["FAKE", "CPU"]);
        let sum = |f: fn(&BackendMemory) -> usize| by.iter().map(f).sum::<usize>();
        let plan = m.memory_plan();
        assert_eq!((sum(|b| b.weights), sum(|b| b.kv), sum(|b| b.compute)), (plan.weights, plan.kv, plan.compute));
        let mut all = m.weight_ctx.tensors();
        if duplicated {
            all.push(w.output.clone());
        }
        let weights_on =
            |ty: &str| -> usize { all.iter().filter(|t| home_of(t) == ty).map(|t| t.nbytes().div_ceil(64) * 64).sum() };
        assert_eq!((by[0].weights, by[1].weights), (weights_on("FAKE"), weights_on("CPU")), "gpu_layers {n}");
        let kv_layer = 2 * 4 * m.hparams.n_embd * m.n_ctx();
        let gpu_kv_layers = n.min(n_layer);
        assert_eq!((by[0].kv, by[1].kv), (gpu_kv_layers * kv_layer, (n_layer - gpu_kv_layers) * kv_layer));
        // A backend with nothing to compute gets an empty compute buffer.
        assert_eq!(by[0].compute == 0, n == 0, "gpu_layers {n}: {by:?}");
        assert!(by[1].compute > 0, "gpu_layers {n}: the inputs are always on the CPU");
    }
}

/// The worst case is reserved once at load; a batched prompt and 100 generated tokens
/// through a split model then allocate nothing and plan nothing anew.
#[test]
fn no_allocation_after_the_first_reserve_with_a_split_model() {
    let (_, bytes) = tiny_f32();
    let mut m = load_split(&bytes, fake_gpu(), 1).model;
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
    assert_eq!(m.sched.n_computes(), 3 + 100);
}

/// Without the `webgpu` feature the CLI's `--gpu-layers` is a clear error, not a CPU run.
#[cfg(not(feature = "webgpu"))]
#[test]
fn cli_gpu_layers_needs_webgpu() {
    let (path, _) = tiny_f32();
    let path = path.display().to_string();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ggweb")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    let (code, err) = run(&["inspect", "--model", &path, "--gpu-layers", "1"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "ggweb: --gpu-layers: WebGPU: backend unavailable: ggweb was built without the `webgpu` feature"
    );
    let (code, err) = run(&["generate", "--model", &path, "--prompt", "Hi", "--gpu-layers", "1", "--backend", "cpu"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        err.trim(),
        "ggweb: --gpu-layers splits the model between webgpu and cpu: leave out --backend or pass webgpu"
    );
}

/// `usize::MAX` (what the browser bindings pass for `gpuLayers: -1`) places like any count
/// above n_layer: everything on the GPU, and no overflow in the layer arithmetic (block
/// il goes up when il + gpu_layers >= n_layer).
#[test]
fn gpu_layers_usize_max_is_everything() {
    let (_, bytes) = tiny_f32();
    let want = run(&mut load_cpu(&bytes).model, 3);
    let mut m = load_split(&bytes, fake_gpu(), usize::MAX).model;
    let (n_layer, n_embd) = (m.hparams.n_layer, m.hparams.n_embd);
    for il in 0..n_layer {
        assert_eq!(weight_home(&m, &format!("blk.{il}.attn_qkv.weight")), "FAKE", "block {il}");
    }
    for name in ["token_embd.weight", "position_embd.weight", "output_norm.weight"] {
        assert_eq!(weight_home(&m, name), "FAKE", "{name}");
    }
    let got = run(&mut m, 3);
    assert!(got.logits == want.logits, "logits differ by {}", max_abs_diff(&got.logits, &want.logits));
    assert_eq!(got.greedy, want.greedy);
    let r = m.sched.last_run();
    let n_kv = PROMPT.len() + 3;
    assert_eq!((r.splits, r.copies, r.copy_bytes), expected_token_split(n_layer + 1, n_layer, n_embd, n_kv));
}
