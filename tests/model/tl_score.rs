//! `score` with hooks (issue 24 item 3) and hooks on the LayerNorm scales, against
//! TransformerLens 3.x (tests/fixtures/tiny-f32.tl-score-ref.json, made by
//! `tests/fixtures/make_tl_ref.py --only score`). The checks are in tests/support/tl_ref.rs,
//! shared with tests/webgpu/tl_hooks_webgpu.rs.

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Gpt2Options};
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;
use ggweb::model::ModelError;
use serde_json::Value;

use crate::support::tl_ref::{self, fixture, hooks_of, score_reference};

fn session() -> Session {
    let path = fixture("tiny-f32.gguf");
    Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap())
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn score_with_hooks_equals_transformer_lens() {
    tl_ref::check_score_hooks(&mut session());
}

#[test]
fn score_hooks_with_pos_or_bad_specs_are_invalid_and_leave_the_session_usable() {
    let r = score_reference();
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
    tl_ref::check_ln_scale_hooks(&mut session());
}
