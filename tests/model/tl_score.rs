//! `score` with hooks (issue 24 item 3) and hooks on the LayerNorm scales, against
//! TransformerLens 3.x (tests/fixtures/tiny-f32.tl-score-ref.json, made by
//! `tests/fixtures/make_tl_ref.py --only score`).

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Gpt2Options};
use ggweb::model::hooks::Hook;
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;
use ggweb::model::ModelError;
use serde_json::Value;

use crate::support::tl_ref::{fixture, hooks_of};

fn session() -> Session {
    let path = fixture("tiny-f32.gguf");
    Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap())
}

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(fixture("tiny-f32.tl-score-ref.json")).unwrap()).unwrap()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn max_delta(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

#[test]
fn score_with_hooks_equals_transformer_lens() {
    let r = reference();
    assert_eq!(r["version"], 1);
    let prompt = u32s(&r["prompt"]);
    let k = r["top_k"].as_u64().unwrap() as usize;
    let cases = r["score"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    let mut s = session();
    let plain = block_on(s.score(&prompt, k, &[])).unwrap();
    for case in cases {
        let hooks: Vec<Hook> = hooks_of(&case["hooks"]);
        let sc = block_on(s.score(&prompt, k, &hooks)).unwrap();
        // Different hooks than the cached run's: nothing is reused.
        assert_eq!(sc.cached_tokens, 0, "{}", case["hooks"]);
        let d = max_delta(&sc.logprobs, &f32s(&case["logprobs"]));
        assert!(d <= 1e-4, "{}: logprobs max |Δ| {d:e}", case["hooks"]);
        let d = max_delta(&sc.entropies, &f32s(&case["entropies"]));
        assert!(d <= 1e-4, "{}: entropies max |Δ| {d:e}", case["hooks"]);
        assert_eq!(sc.ranks, u32s(&case["ranks"]), "{}", case["hooks"]);
        for (i, row) in sc.top.iter().enumerate() {
            let ids: Vec<u32> = row.iter().map(|t| t.0).collect();
            assert_eq!(ids, u32s(&case["top_ids"][i]), "{}: row {i}", case["hooks"]);
            let lps: Vec<f32> = row.iter().map(|t| t.1).collect();
            let d = max_delta(&lps, &f32s(&case["top_logprobs"][i]));
            assert!(d <= 1e-4, "{}: row {i} top logprobs max |Δ| {d:e}", case["hooks"]);
        }
        assert!(max_delta(&sc.logprobs, &plain.logprobs) > 1e-3, "{}: the hooks change the scores", case["hooks"]);
        // The same hooks again: every row from the cache, the same values.
        let again = block_on(s.score(&prompt, k, &hooks)).unwrap();
        assert_eq!(again.cached_tokens, prompt.len());
        assert_eq!(again.logprobs, sc.logprobs);
        // A longer text under the same hooks reuses the prompt's positions and equals a fresh run.
        let longer: Vec<u32> = prompt.iter().copied().chain([262, 3290]).collect();
        let grown = block_on(s.score(&longer, k, &hooks)).unwrap();
        assert_eq!(grown.cached_tokens, prompt.len() - 1);
        let fresh = block_on(session().score(&longer, k, &hooks)).unwrap();
        assert!(max_delta(&grown.logprobs, &fresh.logprobs) <= 1e-5, "{}", case["hooks"]);
        assert_eq!(grown.ranks, fresh.ranks);
    }
    // Back to no hooks: nothing reused from the hooked cache; the unhooked values.
    let back = block_on(s.score(&prompt, k, &[])).unwrap();
    assert_eq!(back.cached_tokens, 0);
    assert!(max_delta(&back.logprobs, &plain.logprobs) <= 1e-6);
}

#[test]
fn score_hooks_with_pos_or_bad_specs_are_invalid_and_leave_the_session_usable() {
    let r = reference();
    let prompt = u32s(&r["prompt"]);
    let mut s = session();
    let before = block_on(s.score(&prompt, 3, &[])).unwrap();
    for (spec, msg) in [
        (serde_json::json!([{ "at": "blocks.0.hook_resid_pre", "op": "zero", "pos": 0 }]), "'pos' is not allowed here"),
        (serde_json::json!([{ "at": "blocks.7.hook_resid_pre", "op": "zero" }]), "no hook point named"),
        (serde_json::json!([{ "at": "hook_embed", "op": "add", "value": [1.0] }]), "an 'add' value has 1 numbers"),
        (
            serde_json::json!([{ "at": "ln_final.hook_scale", "op": "set", "value": [1.0] }]),
            "a LayerNorm scale can be captured, and changed only by 'scale' or 'zero'",
        ),
    ] {
        let e = block_on(s.score(&prompt, 3, &hooks_of(&spec))).unwrap_err();
        assert!(matches!(&e, ModelError::Invalid(m) if m.contains(msg)), "{spec}: {e}");
    }
    // The cache was not touched by the refused calls.
    let after = block_on(s.score(&prompt, 3, &[])).unwrap();
    assert_eq!(after.cached_tokens, prompt.len());
    assert_eq!(after.logprobs, before.logprobs);
}

#[test]
fn layer_norm_scale_hooks_equal_transformer_lens() {
    let r = reference();
    let prompt = u32s(&r["prompt"]);
    let mut s = session();
    let n_vocab = s.model.hparams.n_vocab;
    let cases = r["ln_scale"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let hooks: Vec<Hook> = hooks_of(&case["hooks"]);
        let capture: Vec<String> = case["capture"].as_object().unwrap().keys().cloned().collect();
        let run = block_on(s.run(&prompt, &capture, &hooks)).unwrap();
        let cols = u32s(&case["logit_ids"]);
        let mut worst = 0f32;
        for (p, row) in run.logits.chunks(n_vocab).enumerate() {
            let got: Vec<f32> = cols.iter().map(|&c| row[c as usize]).collect();
            worst = worst.max(max_delta(&got, &f32s(&case["logits"][p])));
        }
        assert!(worst <= 1e-4, "{}: logits max |Δ| {worst:e}", case["hooks"]);
        // The captured scale is the hooked one; the normalized values were divided by it.
        for name in &capture {
            let v = run.cache.iter().find(|v| &v.name == name).unwrap();
            let d = max_delta(&v.data, &f32s(&case["capture"][name]));
            assert!(d <= 2e-5, "{}: capture {name} max |Δ| {d:e}", case["hooks"]);
        }
    }
    // zero: TransformerLens divides by 0 and every row's logits become ±inf/NaN.
    let z = &r["ln_scale_zero"];
    let run = block_on(s.run(&prompt, &[], &hooks_of(&z["hooks"]))).unwrap();
    let finite: Vec<bool> = run.logits.chunks(n_vocab).map(|row| row.iter().all(|x| x.is_finite())).collect();
    let want: Vec<bool> = z["finite_rows"].as_array().unwrap().iter().map(|b| b.as_bool().unwrap()).collect();
    assert_eq!(finite, want);
    // Still usable: a clean run is finite.
    assert!(block_on(s.run(&prompt, &[], &[])).unwrap().logits.iter().all(|x| x.is_finite()));
}
