//! `model.train` (issue 39) in wasm, in Chromium and Firefox: the `adamw_batch1_linear` case of
//! tests/fixtures/tiny-f32.train-ref (AdamW, the untied head, a linear schedule, batch 1) on
//! the session core, every step's loss within 1e-4 relative and the trained logits within 1e-3
//! of PyTorch's (tests/support/train_ref.rs, as natively in tests/model/train.rs).
//! And the `lora_adamw` case with `drop_lora` (as natively in tests/model/lora.rs), and an
//! optimizer checkpoint resumed as one run (tests/model/checkpoint.rs).

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::load_from_bytes_on;
use ggweb::model::session::Session;
use wasm_bindgen_test::*;

use crate::support::train_ref::{check_case, untied, Ref};

static TINY_F32: &[u8] = include_bytes!("../fixtures/tiny-f32.gguf");
static REF_JSON: &[u8] = include_bytes!("../fixtures/tiny-f32.train-ref.json");
static REF_BIN: &[u8] = include_bytes!("../fixtures/tiny-f32.train-ref.bin");

#[wasm_bindgen_test]
fn adamw_untied_linear_schedule_matches_pytorch() {
    let r = Ref::from_parts(REF_JSON, REF_BIN);
    let case = r.case("adamw_batch1_linear");
    let bytes = untied(TINY_F32);
    let mut s = Session::new(load_from_bytes_on(&bytes, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap());
    let w = check_case(&mut s, &r, &case);
    web_sys::console::log_1(&format!("adamw_batch1_linear: worst loss {:.2e}, logit {:.2e}", w.loss, w.logit).into());
}

/// LoRA in wasm: the `lora_adamw` case (an adapter on attn_qkv and ffn_down of the untied
/// file, AdamW with clipping; A drawn from ggweb's generator in the fixture script too) against
/// PyTorch as natively (tests/model/lora.rs), then `drop_lora` gives the base logits back bit
/// for bit.
#[wasm_bindgen_test]
fn lora_adamw_matches_pytorch_and_drop_lora_restores_the_base() {
    let r = Ref::from_parts(REF_JSON, REF_BIN);
    let case = r.case("lora_adamw");
    let bytes = untied(TINY_F32);
    let mut s = Session::new(load_from_bytes_on(&bytes, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap());
    let held = r.ids("held");
    let before = ggweb::model::context::block_on(s.logits(&held)).unwrap();
    let w = check_case(&mut s, &r, &case);
    web_sys::console::log_1(&format!("lora_adamw: worst loss {:.2e}, logit {:.2e}", w.loss, w.logit).into());
    let tuned = ggweb::model::context::block_on(s.logits(&held)).unwrap();
    assert!(tuned != before, "the adapter is not in later calls");
    assert!(s.drop_lora());
    let after = ggweb::model::context::block_on(s.logits(&held)).unwrap();
    assert!(before.iter().zip(&after).all(|(a, b)| a.to_bits() == b.to_bits()), "dropLora's logits are not the base's");
}

/// An optimizer checkpoint in wasm (as natively in tests/model/checkpoint.rs, shorter: the
/// page blocks while a test runs, and the runner gives up on a renderer silent for 30 s): the
/// `adamw` case's 3 updates, `save({ optimizer: true })`'s bytes loaded back, 3 more give the
/// 6-update run's losses and trained logits bit for bit, and PyTorch's losses within 1e-4.
#[wasm_bindgen_test]
fn adamw_resumes_from_an_optimizer_checkpoint_as_one_run() {
    use ggweb::common::options::{from_value, TrainParams};
    use ggweb::model::context::block_on;
    use ggweb::model::export::SaveType;
    let r = Ref::from_parts(REF_JSON, REF_BIN);
    let case = r.case("adamw");
    let cfg = |steps: u32| {
        let mut o = case["options"].clone();
        o["steps"] = steps.into();
        let p: TrainParams = from_value("train options", o).unwrap();
        p.config(256).unwrap()
    };
    let session = |bytes: &[u8]| {
        Session::new(load_from_bytes_on(bytes, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap())
    };
    let run = |s: &mut Session, steps: u32| {
        s.train_start(r.sequences(), cfg(steps)).unwrap();
        let mut out = Vec::new();
        while let Some(step) = block_on(s.train_step()).unwrap() {
            out.push((step.step, step.loss));
        }
        s.train_end().unwrap();
        out
    };
    let held = r.ids("held");
    let mut whole = session(TINY_F32);
    let all = run(&mut whole, 6);
    let want = block_on(whole.logits(&held)).unwrap();
    let mut first = session(TINY_F32);
    run(&mut first, 3);
    let mut resumed = session(&first.save_checkpoint(SaveType::F32).unwrap());
    let tail = run(&mut resumed, 3);
    assert_eq!(tail[..], all[3..]);
    assert!(block_on(resumed.logits(&held)).unwrap() == want, "the resumed logits are not the 6-update run's");
    let losses = case["losses"].as_array().unwrap();
    for &(step, loss) in &tail {
        let w = losses[step as usize - 1].as_f64().unwrap();
        assert!((loss as f64 - w).abs() <= 1e-4 * w, "step {step}: {loss} against PyTorch's {w}");
    }
}

/// Training on WebGPU in Chromium (SwiftShader): the `adamw_batch1_linear` case (AdamW, the
/// untied head, a linear schedule, batch 1) with every layer on WebGPU, so the forward and
/// backward passes and the optimizer steps (shaders/opt.wgsl) run on the browser's device and
/// only the losses are read back (asynchronously: the page cannot block); every step's loss
/// within 1e-4 relative and the trained logits within 1e-3 of PyTorch's, the CPU's tolerances
/// (as natively on lavapipe, tests/webgpu/train_webgpu.rs).
#[wasm_bindgen_test]
async fn adamw_on_webgpu_matches_pytorch_in_chromium() {
    use ggweb::common::options::{from_value, TrainParams};
    use ggweb::gguf::Limits;
    use ggweb::model::context::Batch;
    use ggweb::model::loader::ModelLoader;
    use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};
    let gpu = Rc::new(WebGpuBackend::new_async(WebGpuOptions::default()).await.expect("WebGPU in headless Chromium"));
    let r = Ref::from_parts(REF_JSON, REF_BIN);
    let case = r.case("adamw_batch1_linear");
    let bytes = untied(TINY_F32);
    let mut loader = ModelLoader::new_split(
        gpu,
        Rc::new(CpuBackend::new(1)),
        usize::MAX,
        Gpt2Options::default(),
        Limits::default(),
        None,
    );
    for chunk in bytes.chunks(1 << 20) {
        loader.feed(chunk).unwrap();
    }
    let mut s = Session::new(loader.finish().unwrap());
    let params: TrainParams = from_value("train options", case["options"].clone()).unwrap();
    s.train_start(r.sequences(), params.config(s.model.n_ctx()).unwrap()).unwrap();
    let want: Vec<f64> = case["losses"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let mut k = 0;
    let mut worst = 0f64;
    while let Some(step) = s.train_step().await.unwrap() {
        let rel = (step.loss as f64 - want[k]).abs() / want[k].abs();
        worst = worst.max(rel);
        assert!(rel <= 1e-4, "step {}: loss {} against PyTorch's {} ({rel:e})", k + 1, step.loss, want[k]);
        k += 1;
    }
    assert_eq!(k, want.len(), "updates done");
    s.train_end().unwrap();
    let held = r.ids("held");
    let cols = r.ids("logit_cols");
    let n_vocab = s.model.hparams.n_vocab;
    let out = s.model.decode(Batch::all(&held, 0)).await.unwrap().logits;
    let (_, last) = r.block("adamw_batch1_linear/final_last_logits");
    let (_, at_cols) = r.block("adamw_batch1_linear/final_logits_cols");
    let mut logit = 0f64;
    for (i, (&a, &b)) in out[(held.len() - 1) * n_vocab..].iter().zip(last).enumerate() {
        let d = (a as f64 - b as f64).abs();
        logit = logit.max(d);
        assert!(d <= 1e-3, "trained logit {i} at the last position {a} against PyTorch's {b}");
    }
    for p in 0..held.len() {
        for (j, &c) in cols.iter().enumerate() {
            let (a, b) = (out[p * n_vocab + c as usize], at_cols[p * cols.len() + j]);
            assert!((a as f64 - b as f64).abs() <= 1e-3, "trained logit of {c} at position {p}: {a} against {b}");
        }
    }
    web_sys::console::log_1(
        &format!("adamw_batch1_linear on WebGPU: worst loss {worst:.2e}, last-position logit {logit:.2e}").into(),
    );
}
