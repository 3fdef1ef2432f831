//! The training references of issue 39 (tests/fixtures/tiny-f32.train-ref.json + .bin, made
//! by tests/fixtures/make_train_ref.py): each case's options in `model.train`'s form, its
//! per-step losses, step 1's gradient norms and the trained model's logits on a held prompt;
//! and the runner that trains a session through them and compares.

use ggweb::common::options::{from_value, TrainParams};
use ggweb::gguf::{read_header, GgufWriter, Limits};
use ggweb::model::context::{block_on, Batch};
use ggweb::model::session::Session;

use ggweb::types::GgmlType;
use serde_json::Value;

/// The index and its float blocks (`blocks`: name → offset, shape).
pub struct Ref {
    pub json: Value,
    pub bin: Vec<f32>,
}

impl Ref {
    /// From the two files' contents (the browser tests include them).
    pub fn from_parts(json: &[u8], bin: &[u8]) -> Ref {
        let json: Value = serde_json::from_slice(json).unwrap();
        let bin = bin.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        Ref { json, bin }
    }

    /// A block's values.
    pub fn block(&self, name: &str) -> (Vec<i64>, &[f32]) {
        let b = &self.json["blocks"][name];
        assert!(b.is_object(), "no block {name} in the reference");
        let shape: Vec<i64> = b["shape"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
        let off = b["offset"].as_u64().unwrap() as usize;
        let n = shape.iter().product::<i64>() as usize;
        (shape, &self.bin[off..off + n])
    }

    pub fn ids(&self, key: &str) -> Vec<u32> {
        self.json[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
    }

    /// A case by name.
    /// The training sequences every case draws its batches from.
    pub fn sequences(&self) -> Vec<Vec<u32>> {
        self.json["sequences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect())
            .collect()
    }

    pub fn case(&self, name: &str) -> Value {
        self.json["cases"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap().clone()
    }
}

/// Trains `s` through `cfg` on the reference's sequences: each update's (step, loss).
#[cfg(not(target_arch = "wasm32"))]
pub fn run(s: &mut Session, r: &Ref, cfg: ggweb::model::train::TrainConfig) -> Vec<(u32, f32)> {
    s.train_start(r.sequences(), cfg).unwrap();
    let mut out = Vec::new();
    while let Some(step) = block_on(s.train_step()).unwrap() {
        out.push((step.step, step.loss));
    }
    s.train_end().unwrap();
    out
}

/// The model's logits on the reference's held prompt.
#[cfg(not(target_arch = "wasm32"))]
pub fn held_logits(s: &mut Session, r: &Ref) -> Vec<f32> {
    block_on(s.model.decode(Batch::all(&r.ids("held"), 0))).unwrap().logits
}

/// tests/fixtures/tiny-f32.train-ref.json and .bin.
#[cfg(not(target_arch = "wasm32"))]
pub fn load() -> Ref {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    Ref::from_parts(
        &std::fs::read(dir.join("tiny-f32.train-ref.json")).unwrap(),
        &std::fs::read(dir.join("tiny-f32.train-ref.bin")).unwrap(),
    )
}

/// A tied file (no `output.weight`) with `output.weight` added as a copy of `token_embd.weight`:
/// llama.cpp's GPT-2 layout, the head trained as a tensor of its own (the `untied` cases).
pub fn untied(file: &[u8]) -> Vec<u8> {
    let h = read_header(file, file.len() as u64, Limits::default()).unwrap();
    assert!(!h.tensors.iter().any(|t| t.name == "output.weight"), "the file is untied already");
    let mut w = GgufWriter::new();
    for (k, v) in &h.metadata {
        if k != "general.alignment" {
            w.add_kv(k, v.clone()).unwrap();
        }
    }
    let mut embd = None;
    for t in &h.tensors {
        let start = (h.data_offset + t.offset) as usize;
        let data = file[start..start + t.nbytes].to_vec();
        if t.name == "token_embd.weight" {
            embd = Some((t.ty, t.ne[..t.n_dims as usize].to_vec(), data.clone()));
        }
        w.add_tensor(&t.name, t.ty, &t.ne[..t.n_dims as usize], data).unwrap();
    }
    let (ty, ne, data) = embd.expect("token_embd.weight");
    assert_eq!(ty, GgmlType::F32);
    w.add_tensor("output.weight", ty, &ne, data).unwrap();
    w.to_bytes()
}

/// The worst differences of one case: each step's loss (relative), step 1's per-tensor
/// gradient norms (relative) and the trained model's held-prompt logits (absolute).
#[derive(Debug, Default)]
pub struct Worst {
    pub loss: f64,
    pub norm: f64,
    pub norm_at: String,
    pub logit: f64,
}

/// Trains `s` through `case` (its options parsed as the API parses them) and compares with
/// the reference, asserting the tolerances: losses within 1e-4 relative, logits
/// within 1e-3; step 1's gradient norms within 1e-3 relative (a debugging aid).
pub fn check_case(s: &mut Session, r: &Ref, case: &Value) -> Worst {
    check_case_with(s, r, case, 1e-3)
}

/// [`check_case`] with the trained logits within `logit_tol` (a caller says why it differs).
pub fn check_case_with(s: &mut Session, r: &Ref, case: &Value, logit_tol: f64) -> Worst {
    let name = case["name"].as_str().unwrap();
    let params: TrainParams = from_value("train options", case["options"].clone()).unwrap();
    let cfg = params.config(s.model.n_ctx()).unwrap();
    let seqs: Vec<Vec<u32>> = r.sequences();
    s.train_start(seqs, cfg).unwrap();
    s.trainer().unwrap().norms = true;
    let want: Vec<f64> = case["losses"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let mut w = Worst::default();
    let mut k = 0;
    let mut rels = Vec::new();
    while let Some(step) = block_on(s.train_step()).unwrap() {
        assert_eq!(step.step as usize, k + 1);
        let rel = (step.loss as f64 - want[k]).abs() / want[k].abs();
        w.loss = w.loss.max(rel);
        rels.push(format!("{rel:.1e}"));
        assert!(
            rel <= 1e-4,
            "{name}: step {} loss {} against PyTorch's {} ({rel:e} relative; steps so far {})",
            k + 1,
            step.loss,
            want[k],
            rels.join(" ")
        );
        if k == 0 {
            let t = s.trainer().unwrap();
            let norms = &case["grad_norms_step1"];
            assert_eq!(t.grad_norms.len(), norms.as_object().unwrap().len(), "{name}: trained tensors");
            for (tensor, got) in &t.grad_norms {
                let want = norms[tensor.as_str()].as_f64().unwrap_or_else(|| panic!("{name}: no norm for {tensor}"));
                let rel = (got - want).abs() / want.abs().max(1e-12);
                if rel > w.norm {
                    w.norm = rel;
                    w.norm_at.clone_from(tensor);
                }
            }
            let total = case["grad_norm_step1"].as_f64().unwrap();
            let rel = (t.grad_norm.unwrap() - total).abs() / total;
            assert!(rel <= 1e-4, "{name}: step 1's global gradient norm {:?} against {total}", t.grad_norm);
            assert!(w.norm <= 1e-3, "{name}: step 1's gradient norm of {} off by {:e}", w.norm_at, w.norm);
        }
        k += 1;
    }
    assert_eq!(k, want.len(), "{name}: updates done");
    let stats = s.train_end().unwrap();
    assert!(stats.stop == "steps" && stats.steps as usize == want.len());
    // The trained model (the session's weights now) on the held prompt.
    let held = r.ids("held");
    let cols = r.ids("logit_cols");
    let n_vocab = s.model.hparams.n_vocab;
    let out = block_on(s.model.decode(Batch::all(&held, 0))).unwrap().logits;
    let (_, last) = r.block(&format!("{name}/final_last_logits"));
    let (_, at_cols) = r.block(&format!("{name}/final_logits_cols"));
    let got_last = &out[(held.len() - 1) * n_vocab..];
    for (i, (&a, &b)) in got_last.iter().zip(last).enumerate() {
        let d = (a as f64 - b as f64).abs();
        w.logit = w.logit.max(d);
        assert!(d <= logit_tol, "{name}: trained logit {i} at the last position {a} against PyTorch's {b}");
    }
    for p in 0..held.len() {
        for (j, &c) in cols.iter().enumerate() {
            let (a, b) = (out[p * n_vocab + c as usize], at_cols[p * cols.len() + j]);
            let d = (a as f64 - b as f64).abs();
            w.logit = w.logit.max(d);
            assert!(d <= logit_tol, "{name}: trained logit of {c} at position {p}: {a} against PyTorch's {b}");
        }
    }
    w
}
