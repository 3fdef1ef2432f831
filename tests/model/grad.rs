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

/// A metric of one position differentiates one row of the head (`Logits::Row`, what
/// attribution patching and saliency run): the same gradients and that row's logits as the
/// run over every row, within the products' rounding (one column against several); a row past
/// the batch is `invalid`.
#[test]
fn a_metric_of_one_position_runs_the_head_on_that_row_alone() {
    use ggweb::model::context::{Batch, GradRun, Logits};
    use ggweb::model::hooks::{hook_point, Source};
    let mut s = session();
    let hp = s.model.hparams.clone();
    let tokens = [3u32, 14, 15, 9, 2, 6, 5, 35];
    let (n, nv, p) = (tokens.len(), hp.n_vocab, 3);
    let node = |name: &str| match hook_point(name, &hp).unwrap().source {
        Source::Node(t) => t,
        _ => unreachable!(),
    };
    let nodes = [node("hook_embed"), node("blocks.1.attn.hook_z"), node("blocks.1.hook_resid_post")];
    let of = Metric::Logprob { token: 5, pos: Some(p as i64) };
    let (w, log_softmax) = of.weights(&tokens, nv, "of").unwrap();
    let mut run = |logits, w: &[f32]| {
        let grad = Some(GradRun { nodes: &nodes, w, log_softmax });
        block_on(s.model.decode(Batch { tokens: &tokens, logits, grad, ..Batch::default() })).unwrap()
    };
    let all = run(Logits::All, &w);
    let one = run(Logits::Row(p), &w[p * nv..(p + 1) * nv]);
    let close = |a: &[f32], b: &[f32], what: &str| {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(a.len() == b.len() && scale > 0.0 && worst <= 1e-5 * scale, "{what}: {worst:e} of {scale:e}");
    };
    close(&one.logits, &all.logits[p * nv..(p + 1) * nv], "row p's logits");
    let (m1, m) = (of.value_of_row(&one.logits).unwrap(), of.value(&all.logits, &tokens, nv));
    assert!((m1 - m).abs() <= 1e-5 * m.abs().max(1.0), "the metric {m1} against {m}");
    for (a, b) in one.grads.iter().zip(&all.grads) {
        close(&a.data, &b.data, &a.name);
    }
    assert_eq!(one.grads.len(), 3);
    let e =
        block_on(s.model.decode(Batch { tokens: &tokens, logits: Logits::Row(n), ..Batch::default() })).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("row 8")), "{e}");
}

/// With an F16 KV cache a gradient run reads its K and V as the cache holds them (rounded to
/// f16, `Ubatch::own_kv`): its logits are the plain run's bit for bit, and its gradients are
/// the F32 cache's within f16's rounding (each K and V element to 11 significant bits).
#[test]
fn a_grad_run_over_an_f16_kv_cache_reads_what_the_cache_holds() {
    let path = fixture("tiny-f32.gguf");
    let load = |kv_type| {
        let opts = Gpt2Options { kv_type, ..Gpt2Options::default() };
        Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), opts).unwrap())
    };
    let (mut s16, mut s32) = (load(ggweb::GgmlType::F16), load(ggweb::GgmlType::F32));
    let tokens = [3u32, 14, 15, 9, 2, 6, 5, 35];
    let spec: GradSpec = serde_json::from_value(serde_json::json!({
        "of": {"logprob": {"token": 5, "pos": -1}},
        "wrt": ["hook_embed", "blocks.0.attn.hook_k", "blocks.1.attn.hook_v"]
    }))
    .unwrap();
    let plain = block_on(s16.run(&tokens, &[], &[])).unwrap();
    let g16 = block_on(s16.run_grad(&tokens, &[], &[], Some(&spec))).unwrap();
    assert!(g16.logits == plain.logits, "an F16-cache gradient run's logits differ from a plain run's");
    let g32 = block_on(s32.run_grad(&tokens, &[], &[], Some(&spec))).unwrap();
    for (a, b) in g16.grads.unwrap().iter().zip(g32.grads.unwrap().iter()) {
        let scale = b.data.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.data.iter().zip(&b.data).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        eprintln!("{}: max |f16 − f32| {worst:e} of max |g| {scale:e}", a.name);
        assert!(scale > 0.0 && worst <= 2e-3 * scale, "{}: {worst} against {scale}", a.name);
    }
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

/// The model loaded from tiny-f32.gguf with `n_ctx` and, when given, a host budget.
fn load_budget(n_ctx: usize, budget: Option<u64>) -> ggweb::model::context::Gpt2 {
    use ggweb::model::loader::ModelLoader;
    let bytes = std::fs::read(fixture("tiny-f32.gguf")).unwrap();
    let opts = Gpt2Options { n_ctx, ..Gpt2Options::default() };
    let mut l = ModelLoader::new(Rc::new(CpuBackend::new(1)), opts, Default::default(), Some(bytes.len() as u64));
    if let Some(b) = budget {
        l = l.with_budget(b);
    }
    for c in bytes.chunks(1 << 16) {
        l.feed(c).unwrap();
    }
    l.finish().unwrap().model
}

/// A gradient run over `n` tokens' Batch: the loss over every position, the gradient to
/// hook_embed (what `Model.inspect`'s `memory.gradient` plans).
fn embed_grad(
    m: &mut ggweb::model::context::Gpt2,
    tokens: &[u32],
) -> Result<ggweb::model::context::Decoded, ModelError> {
    use ggweb::model::context::{Batch, GradRun, Logits};
    use ggweb::model::hooks::{hook_point, Source};
    let Source::Node(embed) = hook_point("hook_embed", &m.hparams).unwrap().source else { unreachable!() };
    let nv = m.hparams.n_vocab;
    let (w, log_softmax) = Metric::Loss(LossKind::Mean).weights(tokens, nv, "of").unwrap();
    let nodes = [embed];
    let batch = Batch {
        tokens,
        logits: Logits::All,
        grad: Some(GradRun { nodes: &nodes, w: &w, log_softmax }),
        ..Batch::default()
    };
    block_on(m.decode(batch))
}

/// `Model.inspect`'s `memory.gradient` (HeaderPlan::gradient, from the header alone) is what
/// a real gradient run over n_ctx tokens plans, byte for byte; and a run's plan is held to
/// the load's budget: with exactly that much left it runs, with one byte less it is refused
/// (`RunTooLarge`, the `unsupported` of the API) with both sizes, and the model runs as
/// before afterwards.
#[test]
fn inspect_states_a_gradient_runs_memory_and_the_budget_holds_it() {
    use ggweb::model::plan::{HeaderPlan, HeaderReader};
    let n_ctx = 48;
    let bytes = std::fs::read(fixture("tiny-f32.gguf")).unwrap();
    let mut r = HeaderReader::new(Some(bytes.len() as u64));
    for c in bytes.chunks(4096) {
        if r.feed(c).unwrap() {
            break;
        }
    }
    let opts = Gpt2Options { n_ctx, ..Gpt2Options::default() };
    let plan = HeaderPlan::new(&r.into_header().unwrap(), vec![Rc::new(CpuBackend::new(1))], None, &opts).unwrap();
    let planned = plan.gradient.expect("measured");
    let tokens: Vec<u32> = (0..n_ctx as u32).map(|i| (i * 37 + 11) % 1000).collect();
    let mut m = load_budget(n_ctx, None);
    let d = embed_grad(&mut m, &tokens).unwrap();
    eprintln!("a gradient run over {n_ctx} tokens plans {planned} bytes ({} of compute buffers)", d.compute_bytes);
    assert_eq!(d.planned_bytes, planned, "the run's own plan");
    assert!(d.compute_bytes as u64 > planned / 2 && d.grads[0].data.iter().any(|&v| v != 0.0));

    // The budget: the model's own buffers plus exactly the run's plan.
    let held = plan.total();
    let mut fits = load_budget(n_ctx, Some(held + planned));
    assert_eq!(fits.host_left(), Some(planned));
    let g = embed_grad(&mut fits, &tokens).unwrap();
    assert!(g.grads[0].data == d.grads[0].data);
    let mut tight = load_budget(n_ctx, Some(held + planned - 1));
    match embed_grad(&mut tight, &tokens) {
        Err(e @ ModelError::RunTooLarge { needed, left, .. }) => {
            assert_eq!((needed, left), (planned, planned - 1), "{e}");
            assert!(e.to_string().contains("gradient run"), "{e}");
        }
        other => panic!("not refused: {:?}", other.map(|d| d.planned_bytes)),
    }
    // Fewer tokens fit; the model is usable.
    let plain = block_on(tight.decode(ggweb::model::context::Batch::all(&tokens, 0))).unwrap();
    let plain_ref = block_on(m.decode(ggweb::model::context::Batch::all(&tokens, 0))).unwrap();
    assert!(plain.logits == plain_ref.logits);
    embed_grad(&mut tight, &tokens[..n_ctx / 2]).unwrap();
}

/// Integrated gradients' steps run as batches of sequences; where a batch's plan does not
/// fit what the budget leaves, it is halved (down to one sequence): with room for about
/// three single-sequence gradient runs, the scores are still the reference's.
#[test]
fn integrated_gradients_batches_shrink_to_the_budget() {
    use ggweb::model::loader::ModelLoader;
    use ggweb::model::plan::{HeaderPlan, HeaderReader};
    let bytes = std::fs::read(fixture("tiny-f32.gguf")).unwrap();
    let mut r = HeaderReader::new(Some(bytes.len() as u64));
    for c in bytes.chunks(4096) {
        if r.feed(c).unwrap() {
            break;
        }
    }
    let header = r.into_header().unwrap();
    let one = HeaderPlan::new(
        &header,
        vec![Rc::new(CpuBackend::new(1))],
        None,
        &Gpt2Options { n_ctx: 14, ..Default::default() },
    )
    .unwrap()
    .gradient
    .unwrap();
    let full = HeaderPlan::new(&header, vec![Rc::new(CpuBackend::new(1))], None, &Gpt2Options::default()).unwrap();
    let budget = full.total() + 3 * one;
    let mut l = ModelLoader::new(
        Rc::new(CpuBackend::new(1)),
        Gpt2Options::default(),
        Default::default(),
        Some(bytes.len() as u64),
    )
    .with_budget(budget);
    for c in bytes.chunks(1 << 16) {
        l.feed(c).unwrap();
    }
    let mut s = Session::new(l.finish().unwrap());
    // The whole batch of 32 steps would not fit.
    assert!(full.gradient.unwrap() > 3 * one);
    let worst = grad_ref::check_saliency(&mut s, &grad_ref::load());
    eprintln!("budget {budget} B (a 14-token gradient run plans {one} B): worst saliency difference {worst:e}");
}
