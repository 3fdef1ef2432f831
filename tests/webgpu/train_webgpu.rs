//! `model.train` (issue 39) on WebGPU, natively (wgpu on Vulkan: Mesa's lavapipe in CI): the
//! PyTorch fixtures of tests/fixtures/tiny-f32.train-ref.json with the model on WebGPU (every
//! layer, and split by layer with the CPU), so the forward and backward passes, the gradient
//! accumulation and the optimizer steps (shaders/opt.wgsl) run on the GPU; each step's loss
//! within 1e-4 relative and the trained logits within 1e-3 (support/train_ref.rs: the CPU's
//! tolerances, unchanged). LoRA: the lora fixtures, and the first loss is the base model's.
//!
//! Run: `cargo test --test webgpu train_webgpu::`.

use std::rc::Rc;

use ggweb::backend::Backend;
use ggweb::model::context::block_on;
use ggweb::model::session::Session;
use ggweb::webgpu::WebGpuOptions;

use crate::support::gpu;
use crate::support::sched::{load_split, weight_home};
use crate::support::tl_ref::fixture;
use crate::support::train_ref::{self, check_case_with, load, untied};

fn gpu() -> Option<Rc<dyn Backend>> {
    gpu::webgpu(WebGpuOptions::default()).map(|b| Rc::new(b) as Rc<dyn Backend>)
}

/// The fixture model (untied when the case says so) with its last `gpu_layers` blocks on
/// WebGPU (more than n_layer: every weight).
fn session(gpu: &Rc<dyn Backend>, untie: bool, gpu_layers: usize) -> Session {
    let bytes = std::fs::read(fixture("tiny-f32.gguf")).unwrap();
    let bytes = if untie { untied(&bytes) } else { bytes };
    Session::new(load_split(&bytes, gpu.clone(), gpu_layers))
}

/// Trains `name` with `gpu_layers` on WebGPU against PyTorch; the last block's weights stay
/// on WebGPU, trained there.
fn run_case(gpu: &Rc<dyn Backend>, name: &str, gpu_layers: usize, logit_tol: f64) {
    let r = load();
    let case = r.case(name);
    let mut s = session(gpu, case["model"] == "untied", gpu_layers);
    let n_layer = s.model.hparams.n_layer;
    let w = check_case_with(&mut s, &r, &case, logit_tol);
    eprintln!(
        "{name} (gpu_layers {gpu_layers}): worst loss {:.2e} relative, step-1 gradient norm {:.2e} ({}), logit {:.2e}",
        w.loss, w.norm, w.norm_at, w.logit
    );
    let last = format!("blk.{}.ffn_up.weight", n_layer - 1);
    if case["options"].get("lora").is_none() {
        assert!(weight_home(&s.model, &last).contains("WebGPU"), "{name}: {last} trained on WebGPU");
    }
}

#[test]
fn sgd_matches_pytorch_on_webgpu() {
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    run_case(&gpu, "sgd", usize::MAX, 1e-3);
    run_case(&gpu, "sgd_momentum_decay", usize::MAX, 1e-3);
}

/// AdamW with the model split between WebGPU and the CPU. The whole model on WebGPU runs the
/// same fixture's `adamw_untied_clip_cosine` in `adamw_over_the_buffer_limit_matches_pytorch`
/// (small buffers, which take the chunked paths and the plain ones both: one run, not two).
#[test]
fn adamw_split_between_webgpu_and_the_cpu_matches_pytorch() {
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    // The last block and the (untied) head on WebGPU, the rest on the CPU.
    run_case(&gpu, "adamw_batch1_linear", 1, 1e-3);
    // A tied head split from its embeddings would train as two tensors: refused.
    let mut s = session(&gpu, false, 1);
    let case = load().case("adamw");
    let params: ggweb::common::options::TrainParams =
        ggweb::common::options::from_value("train options", case["options"].clone()).unwrap();
    match s.train_start(load().sequences(), params.config(s.model.n_ctx()).unwrap()) {
        Err(ggweb::model::ModelError::Unsupported(m)) => assert!(m.contains("tied head"), "{m}"),
        Err(e) => panic!("expected unsupported, got {e}"),
        Ok(_) => panic!("a split tied head trained"),
    }
}

#[test]
fn lora_matches_pytorch_on_webgpu_and_starts_at_the_base_loss() {
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    run_case(&gpu, "lora_sgd", usize::MAX, 1e-3);
    run_case(&gpu, "lora_adamw", usize::MAX, 1e-3);
    // The first step's loss is the base model's (B starts at 0): a full-training run's first
    // loss, same data, on the same device.
    let r = load();
    let case = r.case("lora_adamw");
    let params: ggweb::common::options::TrainParams =
        ggweb::common::options::from_value("train options", case["options"].clone()).unwrap();
    let mut base = session(&gpu, true, usize::MAX);
    let mut cfg = params.config(base.model.n_ctx()).unwrap();
    cfg.lora = None;
    base.train_start(r.sequences(), cfg).unwrap();
    let base_loss = block_on(base.train_step()).unwrap().unwrap().loss;
    let mut s = session(&gpu, true, usize::MAX);
    s.train_start(r.sequences(), params.config(s.model.n_ctx()).unwrap()).unwrap();
    let lora_loss = block_on(s.train_step()).unwrap().unwrap().loss;
    assert_eq!(lora_loss, base_loss, "the first LoRA loss against the base model's");
}

/// Full training of weights larger than one storage binding (a browser's 128 MiB against the
/// 124M model's 154 MB token_embd at F32): the binding limit lowered to 4 MiB, under the
/// untied fixture's token_embd and head (6.4 MB each, their AdamW state 19 MB), so their
/// gradients (out_prod, get_rows_back: in ranges of rows), the gradients' store into the
/// state and the optimizer steps (in windows of elements, crate/webgpu/compute.rs
/// `flat_parts`) are all split, and the forward pass's get_rows and head as in inference.
/// adamw_batch1_linear: one sequence per update, so the logits ([n_vocab, 16], 3.2 MB) fit
/// the limit (two sequences' would not: 6.4 MB). The PyTorch fixture holds as in the unsplit
/// runs (losses 1e-4 relative, logits 1e-3).
#[test]
fn adamw_over_the_binding_limit_matches_pytorch() {
    let _shared = gpu::shared();
    let limit = 4u64 << 20;
    let opts = WebGpuOptions { max_binding_size_override: Some(limit), ..Default::default() };
    let Some(gpu) = gpu::webgpu(opts).map(|b| Rc::new(b) as Rc<dyn Backend>) else { return };
    let r = load();
    let case = r.case("adamw_batch1_linear");
    assert_eq!(case["model"], "untied");
    let mut s = session(&gpu, true, usize::MAX);
    for name in ["token_embd.weight", "output.weight"] {
        let t = s.model.weight_ctx.get_tensor(name).unwrap();
        assert!(t.nbytes() as u64 > limit, "{name}: {} bytes, not over the {limit}-byte bindings", t.nbytes());
        assert!(weight_home(&s.model, name).contains("WebGPU"), "{name} on WebGPU");
    }
    let w = check_case_with(&mut s, &r, &case, 1e-3);
    eprintln!(
        "adamw_batch1_linear over 4 MiB bindings: worst loss {:.2e} relative, step-1 gradient norm {:.2e} ({}), logit \
         {:.2e}",
        w.loss, w.norm, w.norm_at, w.logit
    );
}

/// Full training where one buffer is smaller than the optimizer state and the training
/// graph's compute buffer (a browser's 256 MiB maxBufferSize against the 124M model's 463 MB
/// of token_embd AdamW state and its compute buffer with two 154 MB gradients):
/// maxBufferSize lowered to 8 MiB, above the untied fixture's largest tensors (token_embd and
/// the head, 6.4 MB each) and under their AdamW state (19.3 MB each) and the compute buffer.
/// So the weights take several buffers (as in inference), each large param's state is in
/// chunks of elements stepped one at a time (checkpoint.rs `state_chunks`), the compute
/// buffer is several buffers (gallocr's chunked plan), and the gradient norms for clipping are
/// summed over the chunks (bindings are as large as a buffer here; with them lowered too:
/// `adamw_over_the_binding_limit_matches_pytorch`). The PyTorch fixture holds as in the
/// unsplit runs (losses 1e-4 relative, logits 1e-3), and no buffer the device made is over
/// the limit.
#[test]
fn adamw_over_the_buffer_limit_matches_pytorch() {
    let _shared = gpu::shared();
    let limit = 8u64 << 20;
    let opts = WebGpuOptions { max_buffer_size_override: Some(limit), ..Default::default() };
    let Some(backend) = gpu::webgpu(opts).map(Rc::new) else { return };
    let gpu: Rc<dyn Backend> = backend.clone();
    let r = load();
    let case = r.case("adamw_untied_clip_cosine");
    assert_eq!(case["model"], "untied");
    let mut s = session(&gpu, true, usize::MAX);
    for name in ["token_embd.weight", "output.weight"] {
        let t = s.model.weight_ctx.get_tensor(name).unwrap();
        let n = t.nbytes() as u64;
        assert!(n <= limit && 3 * n > limit, "{name}: {n} bytes, within {limit}-byte buffers, its AdamW state not");
        assert!(weight_home(&s.model, name).contains("WebGPU"), "{name} on WebGPU");
    }
    assert!(s.model.weight_buffers.len() > 1, "the weights in several buffers");
    let params: ggweb::common::options::TrainParams =
        ggweb::common::options::from_value("train options", case["options"].clone()).unwrap();
    let memory = s.train_start(r.sequences(), params.config(s.model.n_ctx()).unwrap()).unwrap();
    assert!(memory.state > limit && memory.compute > limit, "state and compute over one buffer: {memory:?}");
    let w = check_case_with(&mut s, &r, &case, 1e-3);
    eprintln!(
        "adamw_untied_clip_cosine in {} MiB buffers: worst loss {:.2e} relative, step-1 gradient norm {:.2e} ({}), \
         logit {:.2e}; largest buffer {} bytes; compute {} bytes, state {} bytes",
        limit >> 20,
        w.loss,
        w.norm,
        w.norm_at,
        w.logit,
        backend.largest_buffer(),
        memory.compute,
        memory.state
    );
    let state = s.model.opt_state.as_ref().expect("the run's state");
    for name in ["token_embd.weight", "output.weight"] {
        let chunks = state.get(name).unwrap();
        assert!(chunks.len() > 1, "{name}: state in {} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.nbytes() as u64 <= limit), "{name}: a chunk over the limit");
    }
    assert!(
        backend.largest_buffer() <= limit && backend.largest_buffer() > limit / 2,
        "largest WebGPU buffer {} bytes against the {limit}-byte limit",
        backend.largest_buffer()
    );
}

/// A checkpoint's optimizer state (read into host memory by the loader) resumes onto a
/// model wholly on WebGPU: its rows are copied into state on the device (`OptState::
/// copy_rows_from`). 3 AdamW updates on WebGPU, `save` with the optimizer, the file loaded
/// onto WebGPU, 3 more: the same losses and trained logits, bit for bit, as 6 updates in one
/// run on WebGPU (few updates: the CPU's checkpoint tests run the fixture's 20 against PyTorch). maxBufferSize is lowered to 8 MiB, so the state is in chunks on the
/// device both times and the checkpoint is written from the chunks.
#[test]
fn adamw_resumes_a_checkpoint_onto_webgpu_as_one_run() {
    use ggweb::model::export::SaveType;
    let _shared = gpu::shared();
    let opts = WebGpuOptions { max_buffer_size_override: Some(8 << 20), ..Default::default() };
    let Some(gpu) = gpu::webgpu(opts).map(|b| Rc::new(b) as Rc<dyn Backend>) else { return };
    let r = load();
    let case = r.case("adamw"); // no schedule: 3 + 3 updates are the 6 of one run
    let config = |s: &Session, steps: u32| {
        let mut o = case["options"].clone();
        o["steps"] = steps.into();
        let p: ggweb::common::options::TrainParams = ggweb::common::options::from_value("train options", o).unwrap();
        p.config(s.model.n_ctx()).unwrap()
    };
    let run = |s: &mut Session, steps: u32| {
        let cfg = config(s, steps);
        train_ref::run(s, &r, cfg)
    };
    let held = |s: &mut Session| train_ref::held_logits(s, &r);
    let mut whole = session(&gpu, false, usize::MAX);
    let all = run(&mut whole, 6);
    let want = held(&mut whole);
    drop(whole);
    let mut first = session(&gpu, false, usize::MAX);
    let head = run(&mut first, 3);
    assert_eq!(head[..], all[..3], "the first 3 updates");
    let file = first.save_checkpoint(SaveType::F32).unwrap();
    drop(first);
    let mut resumed = Session::new(load_split(&file, gpu.clone(), usize::MAX));
    assert!(resumed.model.opt_state.as_ref().is_some_and(|o| o.resume), "the checkpoint's state, to resume");
    let tail = run(&mut resumed, 3);
    assert_eq!(tail[..], all[3..], "updates 4..6 after the checkpoint against the run of 6");
    assert!(weight_home(&resumed.model, "token_embd.weight").contains("WebGPU"));
    let state = resumed.model.opt_state.as_ref().unwrap();
    assert!(state.get("token_embd.weight").unwrap().len() > 1, "the resumed state in chunks on WebGPU");
    assert!(held(&mut resumed) == want, "the resumed model's logits are not the uninterrupted run's");
}

/// With every layer on WebGPU the whole training graph (forward, loss, backward, gradient
/// accumulation) is one WebGPU split and the optimizer steps run there: nothing is copied
/// back to the CPU, which the browser could not do (a graph run cannot wait for a read).
#[test]
fn the_training_graph_runs_wholly_on_webgpu() {
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    let r = load();
    for name in ["adamw", "lora_sgd"] {
        let case = r.case(name);
        let params: ggweb::common::options::TrainParams =
            ggweb::common::options::from_value("train options", case["options"].clone()).unwrap();
        let mut s = session(&gpu, false, usize::MAX);
        s.train_start(r.sequences(), params.config(s.model.n_ctx()).unwrap()).unwrap();
        block_on(s.train_step()).unwrap().unwrap();
        let t = s.trainer().unwrap();
        let splits = t.splits();
        assert!(!splits.is_empty() && splits.iter().all(|l| l.contains(": WebGPU nodes")), "{name}: {splits:#?}");
        assert_eq!(t.optimizer_backends(), ["WebGPU"], "{name}");
    }
}

/// shaders/opt.wgsl against the CPU's kernels (cpu/ops_opt.rs) on the same inputs: AdamW and
/// SGD with momentum and decay (first step and a later one), 70 000 elements (274 workgroups),
/// each element within 2 ulp-level 1e-6 relative (WGSL's sqrt and division may be a few ulp
/// from the correctly rounded ones the CPU uses), the gradient rows zeroed.
#[test]
fn optimizer_steps_match_the_cpu_kernels() {
    use ggweb::graph::Graph;
    use ggweb::tensor::{Context, ContextParams, Tensor};
    use ggweb::types::GgmlType::F32;
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    let n = 70_000usize;
    let w0: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect();
    let g: Vec<f32> = (0..n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 30.0).collect();
    let m0: Vec<f32> = (0..n).map(|i| ((i % 13) as f32 - 6.0) / 50.0).collect();
    let v0: Vec<f32> = (0..n).map(|i| (i % 7) as f32 / 100.0).collect();
    let adamw_h = [1e-2f32, 0.8, 0.99, 1e-6, 0.1, 1.0 - 0.8f32.powi(3), (1.0 - 0.99f32.powi(3)).sqrt(), 0.5];
    let cases: Vec<(&str, Vec<f32>, Vec<f32>)> = vec![
        ("adamw", [g.clone(), m0.clone(), v0.clone()].concat(), adamw_h.to_vec()),
        ("sgd", [g.clone(), m0.clone()].concat(), vec![0.1, 0.9, 0.01, 0.7, 0.0, 0.0, 0.0, 0.0]),
        ("sgd first", [g.clone(), m0.clone()].concat(), vec![0.1, 0.9, 0.01, 1.0, 1.0, 0.0, 0.0, 0.0]),
        ("sgd plain", g.clone(), vec![0.1, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]),
    ];
    for (name, state, h) in cases {
        let rows = (state.len() / n) as i64;
        let run = |backend: Option<&Rc<dyn Backend>>| -> (Vec<f32>, Vec<f32>) {
            let ctx = Context::new(ContextParams { mem_size: 4 << 20, no_alloc: backend.is_some() });
            let w = ctx.new_tensor_1d(F32, n as i64);
            let s = ctx.new_tensor_2d(F32, n as i64, rows);
            let hy = ctx.new_tensor_1d(F32, 8);
            let _bufs = backend.map(|b| {
                ggweb::allocator::alloc_tensors(&[w.clone(), s.clone(), hy.clone()], &*b.buffer_type()).unwrap()
            });
            w.set_bytes(bytemuck::cast_slice(&w0), 0);
            s.set_bytes(bytemuck::cast_slice(&state), 0);
            hy.set_bytes(bytemuck::cast_slice(&h), 0);
            let step = if name == "adamw" { ctx.opt_step_adamw(&w, &s, &hy) } else { ctx.opt_step_sgd(&w, &s, &hy) };
            let mut gf = Graph::new();
            gf.build_forward_expand(&step);
            match backend {
                Some(b) => b.graph_compute(&gf).unwrap(),
                None => ggweb::cpu::compute_graph(&gf, 1).unwrap(),
            }
            let read = |t: &Tensor| {
                let mut v = vec![0f32; t.nelements() as usize];
                t.get_bytes(bytemuck::cast_slice_mut(&mut v), 0);
                v
            };
            (read(&w), read(&s))
        };
        let (want_w, want_s) = run(None);
        let (got_w, got_s) = run(Some(&gpu));
        for i in 0..n {
            let close = |a: f32, b: f32| (a - b).abs() <= 1e-6 * (1.0 + b.abs());
            assert!(close(got_w[i], want_w[i]), "{name}: param {i}: {} against the CPU's {}", got_w[i], want_w[i]);
            assert_eq!(got_s[i], 0.0, "{name}: gradient {i} consumed");
        }
        for i in n..want_s.len() {
            let close = (got_s[i] - want_s[i]).abs() <= 1e-6 * (1.0 + want_s[i].abs());
            assert!(close, "{name}: state {i}: {} against the CPU's {}", got_s[i], want_s[i]);
        }
    }
}

/// Issue 39's memory acceptance on WebGPU, natively on lavapipe: LoRA (rank 8 on every
/// target) on GPT-2 XL's shape at Q8_0 wholly on WebGPU (the frozen weights, the adapter, its
/// gradients and AdamW state in device memory) plans and runs two updates at seqLen 64; the
/// first loss is the base model's (from a forward pass on the same device), the second lower
/// on the repeated batch. Prints the plan, the WebGPU memory and the process's peak RSS
/// (lavapipe's device memory is host memory). GGWEB_SCALE_XL_Q8_0 (default
/// .models/bench-xl-q8_0.gguf, from tests/fixtures/make_scale_models.sh --shapes xl --types
/// q8_0); npm run test:scale runs it. Ignored by default (lavapipe runs the shaders on the CPU).
#[test]
#[ignore = "scale: needs the XL Q8_0 GGUF (GGWEB_SCALE_XL_Q8_0); npm run test:scale"]
fn lora_on_the_xl_shape_at_q8_0_on_webgpu_plans_and_runs() {
    use ggweb::common::options::{from_json, TrainParams};
    use ggweb::model::context::{Batch, Gpt2Options};
    let _shared = gpu::shared();
    let Some(gpu) = gpu() else { return };
    let path = std::env::var("GGWEB_SCALE_XL_Q8_0").unwrap_or_else(|_| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".models/bench-xl-q8_0.gguf").display().to_string()
    });
    use crate::support::memory::peak_rss;
    let before = peak_rss();
    let opts = Gpt2Options { n_ctx: 128, ..Default::default() };
    let mut s = Session::new(
        ggweb::model::loader::load_from_path(&path, gpu.clone(), opts)
            .unwrap_or_else(|e| panic!("{path}: {e} (tests/fixtures/make_scale_models.sh --shapes xl --types q8_0)")),
    );
    assert_eq!((s.model.hparams.n_layer, s.model.hparams.n_embd), (48, 1600), "not the XL shape");
    let loaded = peak_rss();
    let seq: Vec<u32> = (0..64u32).map(|i| (i * 7919 + 13) % 50257).collect();
    let n_vocab = s.model.hparams.n_vocab;
    let logits = block_on(s.model.decode(Batch::all(&seq, 0))).unwrap().logits;
    let mut base = 0f64;
    for p in 0..seq.len() - 1 {
        let row = &logits[p * n_vocab..(p + 1) * n_vocab];
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
        let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
        base += (lse - row[seq[p + 1] as usize] as f64) / (seq.len() - 1) as f64;
    }
    let params: TrainParams = from_json(
        "train options",
        r#"{"seqLen":64,"steps":2,"seed":1,"optimizer":{"type":"adamw","lr":1e-2},
            "lora":{"rank":8,"targets":["attn_qkv","attn_output","ffn_up","ffn_down"]}}"#,
    )
    .unwrap();
    let plan = s.train_start(vec![seq], params.config(s.model.n_ctx()).unwrap()).unwrap();
    eprintln!("XL Q8_0 LoRA on WebGPU: splits {:#?}", s.trainer().unwrap().splits());
    let t = std::time::Instant::now();
    let mut losses = Vec::new();
    while let Some(step) = block_on(s.train_step()).unwrap() {
        losses.push(step.loss);
        eprintln!("XL Q8_0 LoRA on WebGPU step {}: loss {} ({:?})", step.step, step.loss, t.elapsed());
    }
    s.train_end();
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "XL Q8_0 LoRA rank 8 on WebGPU, seqLen 64: plan {plan:?} ({:.1} MiB in all); peak RSS {:.0} MiB (before the \
         load {:.0}, after it {:.0})",
        mib(plan.weights + plan.state + plan.compute),
        mib(peak_rss()),
        mib(before),
        mib(loaded)
    );
    let rel = (losses[0] as f64 - base).abs() / base;
    assert!(rel <= 1e-4, "the first loss {} is not the base model's {base}", losses[0]);
    assert!(losses[1] < losses[0], "losses {losses:?}");
}
