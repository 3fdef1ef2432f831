//! The GGUFs llama.cpp's own converter made (`tests/fixtures/llamacpp/`), against the Hugging Face
//! reference outputs beside them: our loader reads files from the wild, and our F32 graph
//! is exact where llama.cpp is not (its f16 GELU table puts it ~4e-3 away).

use crate::support::eval::Eval;
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::{load_from_bytes, LoadedModel};
use serde_json::Value;

use crate::support::fixtures;

fn reference() -> Value {
    fixtures::hf_reference()
}

/// The reference JSON stores some arrays as strings of JSON.
fn ids(v: &Value) -> Vec<u32> {
    let v = match v {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn load(name: &str, n_batch: usize) -> LoadedModel {
    let bytes = fixtures::model_bytes(name);
    load_from_bytes(&bytes, Gpt2Options { n_batch, ..Default::default() }).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Logits at the reference positions for every prompt, vs HF, within `tol`.
fn check_logits(file: &str, tol: f32) {
    let r = reference();
    let mut m = load(file, 32);
    for p in r["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        let want_ids = ids(&p["ids"]);
        assert_eq!(m.tokenizer.encode(text, false), want_ids, "tokenizer on {text:?}");
        let n_vocab = m.model.hparams.n_vocab;
        let all = m.model.eval(&want_ids, 0, true).unwrap();
        let positions = ids(&p["logits_positions"]);
        let rows = p["logits"].as_array().unwrap();
        let mut worst = 0f32;
        for (row, &pos) in rows.iter().zip(&positions) {
            let want: Vec<f32> = row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            let got = &all[pos as usize * n_vocab..(pos as usize + 1) * n_vocab];
            worst = worst.max(max_abs_diff(got, &want));
        }
        println!("{file} {:?}: max |logit - HF| = {worst:e}", p["key"]);
        assert!(worst <= tol, "{file} prompt {:?}: max abs diff {worst} > {tol}", p["key"]);
    }
}

#[test]
fn f32_logits_match_hf_within_1e_4() {
    check_logits("tiny-gpt2-f32.gguf", 1e-4);
}

#[test]
fn greedy_continuation_matches_hf() {
    let r = reference();
    let mut m = load("tiny-gpt2-f32.gguf", 32);
    for p in r["prompts"].as_array().unwrap() {
        let prompt = ids(&p["ids"]);
        let want = ids(&p["greedy_ids"]);
        let mut logits = m.model.eval(&prompt, 0, false).unwrap();
        let mut got = Vec::new();
        for n_past in prompt.len()..prompt.len() + want.len() {
            let t = ggweb::model::sampling::argmax(&logits);
            got.push(t);
            logits = m.model.eval(&[t], n_past, false).unwrap();
        }
        assert_eq!(got, want, "greedy ids for {:?}", p["key"]);
    }
}

/// The worst-case graph is reserved once when the model is built; prompts in several
/// batches and a long generation then run in that plan: no new reserve, no new buffer.
#[test]
fn no_buffer_allocation_after_the_first_reserve() {
    let mut m = load("tiny-gpt2-f32.gguf", 8);
    let (reserves, allocs, size) =
        (m.model.galloc().n_reserves(), m.model.galloc().n_buffer_allocs(), m.model.galloc().buffer_size(0));
    assert_eq!((reserves, allocs), (1, 1));
    let prompt: Vec<u32> = (0..21).map(|i| 1000 + 37 * i).collect(); // 3 batches of ≤ 8
    let mut logits = m.model.eval(&prompt, 0, false).unwrap();
    for n_past in prompt.len()..m.model.n_ctx() {
        let t = ggweb::model::sampling::argmax(&logits);
        logits = m.model.eval(&[t], n_past, false).unwrap();
    }
    assert_eq!(m.model.galloc().n_reserves(), reserves);
    assert_eq!(m.model.galloc().n_buffer_allocs(), allocs);
    assert_eq!(m.model.galloc().buffer_size(0), size);
    // The context is now full: one more token is a clear error, not a reallocation.
    let err = m.model.eval(&[0], m.model.n_ctx(), false).unwrap_err();
    assert!(err.to_string().contains("context full"), "{err}");
}
