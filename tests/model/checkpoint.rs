//! Optimizer checkpoints (issue 39 item 3, crate/model/checkpoint.rs): `save` / `saveLora`
//! with `optimizer: true`, loaded back, resume training where it stopped: 10 updates, save,
//! load, 10 more give the uninterrupted 20-update run's losses and trained logits (bit for
//! bit), and PyTorch's (tests/fixtures/tiny-f32.train-ref.json, its tolerances). Resuming
//! under another optimizer, adapter or trained-tensor set is `invalid` naming what differs.

use std::rc::Rc;

use ggweb::common::options::{from_value, TrainParams};
use ggweb::cpu::CpuBackend;
use ggweb::gguf::{read_header, GgufWriter, Limits};
use ggweb::model::context::Gpt2Options;
use ggweb::model::export::SaveType;
use ggweb::model::loader::load_from_bytes_on;
use ggweb::model::session::Session;
use ggweb::model::train::TrainConfig;
use ggweb::model::ModelError;
use ggweb::types::GgmlType;
use serde_json::Value;

use crate::support::tl_ref::fixture;
use crate::support::train_ref::{held_logits, load, run, untied};

fn base(untie: bool) -> Vec<u8> {
    let bytes = std::fs::read(fixture("tiny-f32.gguf")).unwrap();
    if untie {
        untied(&bytes)
    } else {
        bytes
    }
}

fn session(bytes: &[u8]) -> Session {
    Session::new(load_from_bytes_on(bytes, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap())
}

/// The case's options with `steps` (and any change `edit` makes).
fn config(case: &Value, steps: u32, edit: impl Fn(&mut Value)) -> TrainConfig {
    let mut o = case["options"].clone();
    o["steps"] = steps.into();
    edit(&mut o);
    let p: TrainParams = from_value("train options", o).unwrap();
    p.config(256).unwrap()
}

/// 10 updates, a checkpoint, 10 more on the model loaded from it, against 20 in one run and
/// PyTorch's 20.
fn resume_case(name: &str) {
    let r = load();
    let case = r.case(name);
    let untie = case["model"] == "untied";
    let lora = case["options"]["lora"].is_object();
    let mut whole = session(&base(untie));
    let all = run(&mut whole, &r, config(&case, 20, |_| {}));
    let want = held_logits(&mut whole, &r);

    let mut first = session(&base(untie));
    let head = run(&mut first, &r, config(&case, 10, |_| {}));
    assert_eq!(head[..], all[..10], "{name}: the first 10 updates");
    let mut resumed = if lora {
        let file = first.save_lora(GgmlType::F32, true).unwrap();
        let mut s = session(&base(untie));
        s.load_lora(&file).unwrap();
        s
    } else {
        session(&first.save_checkpoint(SaveType::F32).unwrap())
    };
    let tail = run(&mut resumed, &r, config(&case, 10, |_| {}));
    assert_eq!(tail[..], all[10..], "{name}: updates 11..20 after the checkpoint against the run of 20");
    let got = held_logits(&mut resumed, &r);
    assert!(got == want, "{name}: the resumed model's logits are not the uninterrupted run's");
    let losses: Vec<f64> = case["losses"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    for (k, &(step, loss)) in tail.iter().enumerate() {
        let rel = (loss as f64 - losses[10 + k]).abs() / losses[10 + k];
        assert!(rel <= 1e-4, "{name}: resumed step {step} loss {loss} against PyTorch's {}", losses[10 + k]);
    }
    let (_, last) = r.block(&format!("{name}/final_last_logits"));
    let n_vocab = resumed.model.hparams.n_vocab;
    let worst = got[got.len() - n_vocab..].iter().zip(last).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= 1e-3, "{name}: resumed logits {worst} from PyTorch's");
    eprintln!("{name}: resumed losses and logits equal the 20-update run's; PyTorch's logits within {worst:.1e}");
}

#[test]
fn adamw_resumes_from_a_checkpoint_as_one_run() {
    resume_case("adamw");
}

/// Plain SGD keeps no state but the update count and data position, which the file carries.
#[test]
fn plain_sgd_resumes_from_a_checkpoint_as_one_run() {
    resume_case("sgd");
}

#[test]
fn sgd_momentum_resumes_from_a_checkpoint_as_one_run() {
    resume_case("sgd_momentum_decay");
}

#[test]
fn lora_adamw_resumes_from_an_adapter_checkpoint_as_one_run() {
    resume_case("lora_adamw");
}

fn invalid<T>(r: Result<T, ModelError>) -> String {
    match r {
        Err(ModelError::Invalid(m)) => m,
        Err(e) => panic!("expected invalid, got {e:?}"),
        Ok(_) => panic!("expected invalid, got Ok"),
    }
}

/// The file less the state tensors of `weight`.
fn without_state_of(file: &[u8], weight: &str) -> Vec<u8> {
    let h = read_header(file, file.len() as u64, Limits::default()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &h.metadata {
        if k != "general.alignment" {
            w.add_kv(k, v.clone()).unwrap();
        }
    }
    for t in h.tensors.iter().filter(|t| !t.name.starts_with(&format!("{weight}."))) {
        let start = (h.data_offset + t.offset) as usize;
        w.add_tensor(&t.name, t.ty, &t.ne[..t.n_dims as usize], file[start..start + t.nbytes].to_vec()).unwrap();
    }
    w.to_bytes()
}

#[test]
fn resuming_under_another_optimizer_adapter_or_tensor_set_is_invalid() {
    let r = load();
    let case = r.case("adamw");
    let mut s = session(&base(false));
    // Nothing to save before a run.
    assert!(invalid(s.save_checkpoint(SaveType::F32)).contains("no optimizer state"));
    run(&mut s, &r, config(&case, 3, |_| {}));
    assert!(invalid(s.save_checkpoint(SaveType::Q8_0)).contains("q8_0"));
    let file = s.save_checkpoint(SaveType::F32).unwrap();
    let h = read_header(&file, file.len() as u64, Limits::default()).unwrap();
    assert_eq!(h.get_str("ggweb.optimizer.type").unwrap(), "adamw");
    assert_eq!(h.get_u32("ggweb.optimizer.step").unwrap(), 3);
    assert_eq!(h.get_u64("ggweb.train.sequences").unwrap(), 6);
    assert!(h.tensor_info("blk.0.attn_qkv.weight.adam_v").is_some());

    let mut c = session(&file);
    let before = held_logits(&mut c, &r);
    let m = invalid(c.train_start(r.sequences(), config(&case, 2, |o| o["optimizer"]["type"] = "sgd".into())));
    assert!(m.contains("AdamW") && m.contains("SGD"), "{m}");
    let m = invalid(c.train_start(r.sequences(), config(&case, 2, |o| o["lora"] = serde_json::json!({"rank": 2}))));
    assert!(m.contains("full weights") && m.contains("LoRA adapter of rank 2"), "{m}");
    assert!(held_logits(&mut c, &r) == before, "a refused resume changed the model");
    // Refusals keep the checkpoint's state: the run of the same optimizer resumes at update 4.
    let steps = run(&mut c, &r, config(&case, 2, |_| {}));
    assert_eq!(steps.iter().map(|s| s.0).collect::<Vec<_>>(), [4, 5]);
    // A plain save of a checkpoint's model is a plain file again (llama.cpp's).
    let plain = c.save(SaveType::F32).unwrap();
    let h = read_header(&plain, plain.len() as u64, Limits::default()).unwrap();
    assert!(h.get("ggweb.optimizer.type").is_none() && h.get("ggweb.optimizer.step").is_none());
    assert!(!h.tensors.iter().any(|t| t.name.ends_with(".adam_m")));
    assert!(invalid(c.save_lora(GgmlType::F32, true)).contains("no LoRA adapter"));

    // A checkpoint that lacks one trained tensor's state.
    let mut d = session(&without_state_of(&file, "blk.0.attn_norm.weight"));
    let m = invalid(d.train_start(r.sequences(), config(&case, 1, |_| {})));
    assert!(m.contains("no optimizer state of 'blk.0.attn_norm.weight'"), "{m}");

    // An adapter checkpoint: another rank is refused by name; the full weights' state is not the adapter's.
    let lcase = r.case("lora_adamw");
    let mut l = session(&base(true));
    run(&mut l, &r, config(&lcase, 2, |_| {}));
    assert!(invalid(l.save_checkpoint(SaveType::F32)).contains("saveLora"));
    let adapter = l.save_lora(GgmlType::F32, true).unwrap();
    let mut e = session(&base(true));
    e.load_lora(&adapter).unwrap();
    let m = invalid(e.train_start(r.sequences(), config(&lcase, 1, |o| o["lora"]["rank"] = 3.into())));
    assert!(m.contains("rank 2") && m.contains("rank 3"), "{m}");
    let m = invalid(e.train_start(r.sequences(), config(&lcase, 1, |o| o["optimizer"]["type"] = "sgd".into())));
    assert!(m.contains("AdamW"), "{m}");
    // dropLora drops the adapter's state with it.
    e.drop_lora();
    assert!(e.model.opt_state.is_none());
}

/// `Model.inspect` of a checkpoint plans what its load holds: the weights, the optimizer
/// state's tensors and the gradient row beside each (the plan's total is the loaded model's
/// host bytes to the byte: a budget of exactly that leaves nothing over).
#[test]
fn inspect_of_a_checkpoint_plans_its_optimizer_state() {
    use ggweb::model::plan::{HeaderPlan, HeaderReader};
    let r = load();
    let case = r.case("adamw");
    let mut s = session(&base(true));
    run(&mut s, &r, config(&case, 1, |_| {}));
    let file = s.save_checkpoint(SaveType::F32).unwrap();
    let plain = s.save(SaveType::F32).unwrap();
    let plan_of = |bytes: &[u8]| {
        let mut h = HeaderReader::new(Some(bytes.len() as u64));
        for c in bytes.chunks(4096) {
            if h.feed(c).unwrap() {
                break;
            }
        }
        HeaderPlan::new(&h.into_header().unwrap(), vec![Rc::new(CpuBackend::new(1))], None, &Gpt2Options::default())
            .unwrap()
    };
    let (ckpt, base_plan) = (plan_of(&file), plan_of(&plain));
    // AdamW: m and v of every trained tensor, and its gradient: three times the weights more.
    let w = |p: &HeaderPlan| p.by_backend.iter().map(|b| b.weights as u64).sum::<u64>();
    assert_eq!(w(&ckpt), 4 * w(&base_plan), "weights + m + v + gradient");
    let m = crate::support::memory::load_with_budget(&file, Gpt2Options::default(), ckpt.total()).model;
    assert_eq!(m.host_left(), Some(0), "the plan is what the load holds");
}

/// The chunks of a [`SaveStream`](ggweb::model::save_stream::SaveStream) (`{ to: 'opfs' }`'s
/// path), each at most the header or about 1 MiB of one tensor, checked to sum to its size.
fn chunks(mut s: ggweb::model::save_stream::SaveStream) -> Vec<Vec<u8>> {
    let (size, bound) = (s.size() as usize, s.chunk_bytes());
    let mut out = Vec::new();
    while let Some(c) = s.next_chunk_sync().unwrap() {
        assert!(c.len() <= bound, "a chunk of {} bytes, over the stream's {bound}", c.len());
        out.push(c);
    }
    assert_eq!(out.iter().map(Vec::len).sum::<usize>(), size);
    out
}

/// A checkpoint made a chunk at a time (the header, then at most 1 MiB of one tensor at a time
/// past it) is the whole file byte for byte: the full AdamW checkpoint, an F16 save with a
/// LoRA adapter merged (converted rows), and the adapter's own checkpoint (saveLora).
#[test]
fn a_checkpoint_made_a_chunk_at_a_time_is_the_whole_file() {
    let r = load();
    let case = r.case("adamw");
    let mut s = session(&base(false));
    run(&mut s, &r, config(&case, 2, |_| {}));
    let whole = s.save_checkpoint(SaveType::F32).unwrap();
    let c = chunks(s.save_stream(SaveType::F32, true).unwrap());
    assert!(c.len() > 20, "{} chunks", c.len());
    let header = read_header(&whole, whole.len() as u64, Limits::default()).unwrap().data_offset as usize;
    assert_eq!(c[0].len(), header, "the first chunk is the header");
    assert!(c[1..].iter().all(|x| x.len() <= (1 << 20) + 32), "a data chunk over 1 MiB");
    assert!(c.concat() == whole, "the chunks of the AdamW checkpoint are not the whole file");

    let lcase = r.case("lora_adamw");
    let mut l = session(&base(true));
    run(&mut l, &r, config(&lcase, 2, |_| {}));
    let merged = l.save(SaveType::F16).unwrap();
    assert!(chunks(l.save_stream(SaveType::F16, false).unwrap()).concat() == merged, "the merged F16 save");
    let adapter = l.save_lora(GgmlType::F32, true).unwrap();
    assert!(chunks(l.save_lora_stream(GgmlType::F32, true).unwrap()).concat() == adapter, "the adapter checkpoint");
    assert!(
        chunks(l.save_lora_stream(GgmlType::F16, false).unwrap()).concat()
            == l.save_lora(GgmlType::F16, false).unwrap()
    );
}
