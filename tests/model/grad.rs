//! The gradient calls (issue 37) on tiny-f32.gguf against PyTorch autograd through
//! TransformerLens 3.x (tests/fixtures/tiny-f32.grad-ref.json + .bin, made by
//! tests/fixtures/make_grad_ref.py): `run`'s `grad` for the three metrics at every hook point
//! and, under forward hooks, at one point of each kind; saliency's three methods; attribution
//! patching's cells.

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Gpt2Options};
use ggweb::model::grad::{GradSpec, LossKind, Metric};
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;
use ggweb::model::ModelError;

use crate::support::grad_ref;
use crate::support::tl_ref::fixture;

fn session() -> Session {
    let path = fixture("tiny-f32.gguf");
    Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap())
}

#[test]
fn run_grads_match_pytorch_autograd_at_every_hook_point() {
    let (cases, points, worst, at) = grad_ref::check_grads(&mut session(), &grad_ref::load());
    eprintln!("{cases} cases, {points} gradients; worst relative error {worst:e} at {at}");
    assert_eq!((cases, points), (6, 3 * 55 + 3 * 21));
}

#[test]
fn saliency_matches_pytorch_autograd() {
    let worst = grad_ref::check_saliency(&mut session(), &grad_ref::load());
    eprintln!("worst saliency score difference {worst:e}");
}

#[test]
fn attribution_patching_matches_pytorch_autograd() {
    let worst = grad_ref::check_atp(&mut session(), &grad_ref::load());
    eprintln!("worst attribution patching cell difference {worst:e}");
}

/// A gradient run's forward part is the plain run: the same logits bit for bit, and the
/// same prompt cache afterwards (its tokens, no hooks); the gradient of a logit difference at
/// the logits' own node is ±1 at the two entries (a check independent of the reference).
#[test]
fn a_grad_run_is_the_plain_run_plus_gradients() {
    let r = grad_ref::load();
    let mut s = session();
    let case = &r.json["grad"][0];
    let tokens: Vec<u32> = case["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let plain = block_on(s.run(&tokens, &["blocks.1.hook_resid_post".into()], &[])).unwrap();
    let cached = s.cached().to_vec();
    let spec: GradSpec = serde_json::from_value(serde_json::json!({
        "of": {"logitDiff": {"answer": 5, "against": 7, "pos": -2}},
        "wrt": ["ln_final.hook_normalized", "blocks.1.hook_resid_post"]
    }))
    .unwrap();
    let g = block_on(s.run_grad(&tokens, &["blocks.1.hook_resid_post".into()], &[], Some(&spec))).unwrap();
    assert!(g.logits == plain.logits, "a gradient run's logits differ from a plain run's");
    assert!(g.cache[0].data == plain.cache[0].data);
    assert_eq!(s.cached(), &cached[..]);
    let nv = s.model.hparams.n_vocab;
    let n = tokens.len();
    let row = &g.logits[(n - 2) * nv..(n - 1) * nv];
    assert_eq!(g.metric.unwrap(), row[5] - row[7]);
    let grads = g.grads.unwrap();
    // In TransformerLens's forward order, as captures are.
    assert_eq!(
        grads.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(),
        ["blocks.1.hook_resid_post", "ln_final.hook_normalized"]
    );
    // Nothing after position n − 2 reaches its logits: the last position's gradient is 0.
    let e = s.model.hparams.n_embd;
    assert!(grads[1].data[(n - 1) * e..].iter().all(|&v| v == 0.0));
    assert!(grads[1].data[(n - 2) * e..(n - 1) * e].iter().any(|&v| v != 0.0));
}

/// Bad specs are `invalid`, naming the bad key, value, token or field, and the session runs
/// as before afterwards.
#[test]
fn bad_grad_specs_are_invalid_by_name_and_leave_the_model_usable() {
    use ggweb::common::options::RunParams;
    let mut s = session();
    let tokens = [464u32, 2068, 7586, 21831];
    let want = block_on(s.run(&tokens, &[], &[])).unwrap().logits;
    let parse = |v: serde_json::Value| serde_json::from_value::<RunParams>(v).map(|p| p.grad.unwrap());
    for (spec, named) in [
        (serde_json::json!({"grad": {"of": {"logitDif": {"answer": 1, "against": 2}}, "wrt": "*"}}), "logitDif"),
        (serde_json::json!({"grad": {"of": {"loss": "sum"}, "wrt": "*"}}), "sum"),
        (serde_json::json!({"grad": {"of": {"loss": "mean"}}}), "wrt"),
        (serde_json::json!({"grad": {"of": {"logprob": {"token": 1, "pos": 0}}, "wrt": "*", "extra": 1}}), "extra"),
        (serde_json::json!({"grad": {"of": {"logitDiff": {"answer": 1, "against": 2, "po": 0}}, "wrt": "*"}}), "po"),
    ] {
        let e = parse(spec.clone()).expect_err(&spec.to_string()).to_string();
        assert!(e.contains(named), "{spec}: {e}");
    }
    let invalid = |s: &mut Session, spec: serde_json::Value, named: &str| {
        let g = parse(serde_json::json!({ "grad": spec.clone() })).unwrap();
        match block_on(s.run_grad(&tokens, &[], &[], Some(&g))) {
            Err(ModelError::Invalid(m)) => assert!(m.contains(named), "{spec}: {m}"),
            other => panic!("{spec}: {:?}", other.map(|r| r.metric)),
        }
    };
    invalid(&mut s, serde_json::json!({"of": {"loss": "mean"}, "wrt": []}), "grad.wrt is empty");
    invalid(&mut s, serde_json::json!({"of": {"loss": "mean"}, "wrt": ["blocks.0.hook_nope"]}), "'blocks.0.hook_nope'");
    invalid(&mut s, serde_json::json!({"of": {"loss": "mean"}, "wrt": "all"}), "'all'");
    invalid(
        &mut s,
        serde_json::json!({"of": {"logprob": {"token": 99999}}, "wrt": "*"}),
        "grad.of.logprob.token 99999",
    );
    invalid(
        &mut s,
        serde_json::json!({"of": {"logitDiff": {"answer": 1, "against": 50257}}, "wrt": "*"}),
        "grad.of.logitDiff.against 50257",
    );
    invalid(
        &mut s,
        serde_json::json!({"of": {"logitDiff": {"answer": 1, "against": 2, "pos": 4}}, "wrt": "*"}),
        "grad.of.logitDiff.pos 4",
    );
    let e = block_on(s.saliency(&tokens, &Metric::Loss(LossKind::Mean), "gradients", None)).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("'gradients'")), "{e}");
    let e = block_on(s.patch(&tokens, &tokens, "z", 1, 2, Some("attributions"))).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("'attributions'")), "{e}");
    assert!(block_on(s.run(&tokens, &[], &[])).unwrap().logits == want);
}
