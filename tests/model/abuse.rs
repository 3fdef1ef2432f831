//! Under abuse, round two (issue 35), on the session core: hostile hook selections and capture
//! patterns are refused by size before any work (a 100 000-index selection used to allocate
//! its product and trap the wasm; a glob of 40 stars backtracked for ever), and a long call
//! stops between two of its steps when its caller's interrupt says so, leaving the session
//! usable with unchanged results.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ggweb::model::context::block_on;
use ggweb::model::hooks::{MAX_CAPTURE_PATTERNS, MAX_HOOKED_VALUES};
use ggweb::model::session::{Interrupt, Session};
use ggweb::model::ModelError;
use serde_json::json;

use crate::support::tl_ref::{fixture, hooks_of, Ref};

fn session() -> Session {
    let path = fixture("tiny-f32.gguf");
    let loaded = ggweb::model::loader::load_from_path(
        path.to_str().unwrap(),
        Rc::new(ggweb::cpu::CpuBackend::new(1)),
        ggweb::model::context::Gpt2Options::default(),
    )
    .unwrap();
    Session::new(loaded)
}

fn invalid(r: Result<impl Sized, ModelError>, msg: &str) {
    match r {
        Err(ModelError::Invalid(m)) => assert!(m.contains(msg), "want '{msg}', got: {m}"),
        Err(e) => panic!("want invalid '{msg}', got {e:?}"),
        Ok(_) => panic!("want invalid '{msg}', got a result"),
    }
}

#[test]
fn a_selection_longer_than_its_axis_or_with_a_repeated_index_is_invalid_before_any_work() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    let want = block_on(s.run(&prompt, &[], &[])).unwrap().logits;
    // Issue 35 item 1: 100 000 ids on two axes selected 10^10 values, allocated before a check.
    let many = vec![0; 100_000];
    let t0 = Instant::now();
    let hooks = hooks_of(&json!([{ "at": "blocks.0.hook_resid_pre", "op": "zero", "pos": many, "index": many }]));
    invalid(block_on(s.run(&prompt, &[], &hooks)), "pos lists 100000 indices, the axis has 10");
    let hooks = hooks_of(&json!([{ "at": "blocks.0.hook_resid_pre", "op": "zero", "index": many }]));
    invalid(block_on(s.run(&prompt, &[], &hooks)), "index lists 100000 indices, the axis has 32");
    assert!(t0.elapsed() < Duration::from_secs(5), "refusing took {:?}", t0.elapsed());
    // A repeated index, also through a negative position that names the same one.
    let hooks = hooks_of(&json!([{ "at": "blocks.1.attn.hook_z", "op": "zero", "head": [1, 1] }]));
    invalid(block_on(s.run(&prompt, &[], &hooks)), "head 1 is selected twice");
    let hooks = hooks_of(&json!([{ "at": "blocks.1.hook_mlp_out", "op": "zero", "pos": [9, -1] }]));
    invalid(block_on(s.run(&prompt, &[], &hooks)), "pos -1 is selected twice");
    let hooks = hooks_of(&json!([{ "at": "blocks.1.hook_mlp_out", "op": "zero", "pos": [i64::MIN, 0] }]));
    invalid(block_on(s.run(&prompt, &[], &hooks)), &format!("pos {} is out of range (0..10)", i64::MIN));
    // Still the same model.
    assert_eq!(block_on(s.run(&prompt, &[], &[])).unwrap().logits, want);
}

#[test]
fn hooks_that_select_too_many_values_together_are_invalid_before_any_work() {
    let r = Ref::load();
    let mut s = session();
    // 100 positions: one hook over the whole pattern is 4 heads × 100 × 100 values.
    let prompt: Vec<u32> = r.ids("prompt").into_iter().cycle().take(100).collect();
    let per_hook = 4 * 100 * 100;
    let n = (MAX_HOOKED_VALUES / per_hook + 1) as usize;
    let one = json!({ "at": "blocks.0.attn.hook_pattern", "op": "scale", "value": 1.0 });
    let hooks = hooks_of(&serde_json::Value::Array(vec![one; n]));
    let t0 = Instant::now();
    invalid(
        block_on(s.run(&prompt, &[], &hooks)),
        &format!("the {n} hooks select more than {MAX_HOOKED_VALUES} values together (at hook {}", n - 1),
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "refusing took {:?}", t0.elapsed());
    // One fewer is within the bound (and a no-op: the logits are the plain run's).
    let hooks = &hooks[..n - 1];
    let plain = block_on(s.run(&prompt, &[], &[])).unwrap().logits;
    assert_eq!(block_on(s.run(&prompt, &[], hooks)).unwrap().logits, plain);
}

#[test]
fn capture_patterns_match_in_linear_time_and_their_number_is_bounded() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    // Issue 35 item 2: a backtracking glob took exponential time on this.
    let t0 = Instant::now();
    let stars = format!("blocks.0.attn.{}Q", "*".repeat(40));
    invalid(block_on(s.run(&prompt, &[stars], &[])), "capture 'blocks.0.attn.*Q' names no hook point");
    let long = format!("blocks.0.{}", "*a".repeat(50_000));
    invalid(block_on(s.run(&prompt, &[long], &[])), "names no hook point");
    let near = format!("{}x", "*h*o*o*k*_".repeat(2));
    invalid(block_on(s.run(&prompt, &[near], &[])), "names no hook point");
    assert!(t0.elapsed() < Duration::from_secs(2), "matching took {:?}", t0.elapsed());
    // Stars that do match, one run of them or several.
    let run = block_on(s.run(&prompt, &["b*l**o*c*k*s.1.h*o*o*k*_*r*e*s*i*d*_*p***r*e".into()], &[])).unwrap();
    assert_eq!(run.cache.iter().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["blocks.1.hook_resid_pre"]);
    let run = block_on(s.run(&prompt, &["*.*.*n*.hook_*".into()], &[])).unwrap();
    assert_eq!(run.cache.len(), 3 * 10, "every ln1, ln2 and attn hook point of 3 blocks");
    let many: Vec<String> = vec!["hook_embed".into(); MAX_CAPTURE_PATTERNS + 1];
    invalid(block_on(s.run(&prompt, &many, &[])), &format!("capture lists {} patterns", MAX_CAPTURE_PATTERNS + 1));
    assert_eq!(block_on(s.run(&prompt, &many[1..], &[])).unwrap().cache.len(), 1);
}

/// An interrupt that says "stopped" from its `at`-th question on, counting the questions.
fn stop_at(at: usize) -> (Interrupt, Rc<Cell<usize>>) {
    let asked = Rc::new(Cell::new(0));
    let n = asked.clone();
    let f: Interrupt = Box::new(move || {
        n.set(n.get() + 1);
        let stop = n.get() >= at;
        Box::pin(async move { stop })
    });
    (f, asked)
}

#[test]
fn a_long_call_stops_between_steps_when_interrupted_and_the_session_gives_the_same_results_after() {
    let r = Ref::load();
    let mut s = session();
    let (clean, corrupted) = (r.ids("clean"), r.ids("corrupted"));
    let (answer, against) = (r.json["answer"].as_u64().unwrap() as u32, r.json["against"].as_u64().unwrap() as u32);
    let want = block_on(s.patch(&clean, &corrupted, "resid_pre", answer, against, None)).unwrap();
    let lens = block_on(s.logit_lens(&clean, 3)).unwrap();
    // A patch sweep asks before each of its passes: stopped at the 5th, it asked exactly 5 times.
    let (f, asked) = stop_at(5);
    s.interrupt = Some(f);
    assert!(matches!(
        block_on(s.patch(&clean, &corrupted, "resid_pre", answer, against, None)),
        Err(ModelError::Aborted)
    ));
    assert_eq!(asked.get(), 5);
    assert!(s.cached().is_empty(), "an aborted call leaves no half-written cache");
    for (at, call) in [(1, "run"), (2, "logitLens"), (2, "attribute"), (1, "trace")] {
        let (f, _) = stop_at(at);
        s.interrupt = Some(f);
        let r = match call {
            "run" => block_on(s.run(&clean, &[], &[])).map(|_| ()),
            "logitLens" => block_on(s.logit_lens(&clean, 3)).map(|_| ()),
            "attribute" => block_on(s.attribute(&clean, answer, against, -1)).map(|_| ()),
            _ => block_on(s.trace(&clean, &["attn".into()])).map(|_| ()),
        };
        assert!(matches!(r, Err(ModelError::Aborted)), "{call}: {r:?}");
    }
    // Never stopped: the same results as before, asked once per step.
    let (f, asked) = stop_at(usize::MAX);
    s.interrupt = Some(f);
    let got = block_on(s.patch(&clean, &corrupted, "resid_pre", answer, against, None)).unwrap();
    assert_eq!((got.cells, got.clean_diff, got.corrupted_diff), (want.cells, want.clean_diff, want.corrupted_diff));
    assert_eq!(asked.get(), 2 + s.model.hparams.n_layer * clean.len(), "two runs, then one per cell");
    assert_eq!(block_on(s.logit_lens(&clean, 3)).unwrap().top, lens.top);
}

#[test]
fn score_stops_between_chunks_and_scores_the_same_after() {
    let r = Ref::load();
    let mut s = session();
    // 3 chunks of n_batch 32.
    let text: Vec<u32> = r.ids("prompt").into_iter().cycle().take(70).collect();
    let want = block_on(s.score(&text, 3, &[])).unwrap();
    s.clear_cache();
    let (f, asked) = stop_at(2);
    s.interrupt = Some(f);
    assert!(matches!(block_on(s.score(&text, 3, &[])), Err(ModelError::Aborted)));
    assert_eq!(asked.get(), 2, "stopped before the second chunk");
    let (f, asked) = stop_at(usize::MAX);
    s.interrupt = Some(f);
    let got = block_on(s.score(&text, 3, &[])).unwrap();
    assert_eq!(asked.get(), 3, "one question per chunk");
    assert_eq!((got.logprobs, got.ranks, got.top), (want.logprobs, want.ranks, want.top));
}
