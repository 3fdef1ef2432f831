//! TransformerLens's hook points (issue 24 item 1) traced by their TransformerLens names on
//! tiny-f32.gguf against TransformerLens 3.x itself (tests/fixtures/tiny-f32.tl-ref.json +
//! .bin, made by tests/fixtures/make_tl_ref.py).
//!
//! Axis order: a traced node's `ne` (fastest first) reversed is TransformerLens's shape without
//! the batch axis (`[pos, d_model]`, `[pos, head, d_head]`, `[head, query, key]`, `[pos, 1]`),
//! and the data is in that row-major order: no permutation is needed (crate/model/hooks.rs).

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Gpt2Options};
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;
use ggweb::model::ModelError;

use crate::support::tl_ref::{self, check_hook_points, fixture, hooks_of, tl_shape, Ref};

/// The bound for captures (two correct f32 implementations differ by ~1e-5).
const TOL: f32 = 2e-5;

fn session() -> Session {
    let path = fixture("tiny-f32.gguf");
    Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap())
}

#[test]
fn every_hook_point_matches_transformer_lens() {
    let (worst, at) = check_hook_points(&mut session(), &Ref::load(), TOL);
    eprintln!("worst hook-point difference {worst} at {at}");
}

#[test]
fn tl_names_and_graph_names_trace_the_same_nodes() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("clean");
    let taps: Vec<String> = [
        "l1.ffn_gelu",
        "blocks.1.mlp.hook_post",
        "attn",
        "blocks.2.attn.hook_pattern",
        "ln_final.hook_normalized",
        "l2.kqv_merged_cont",
        "blocks.2.attn.hook_z",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t = block_on(s.trace(&prompt, &taps)).unwrap();
    let get = |n: &str| t.nodes.iter().find(|v| v.name == n).unwrap_or_else(|| panic!("{n} not traced"));
    assert_eq!(get("l1.ffn_gelu").data, get("blocks.1.mlp.hook_post").data);
    assert_eq!(t.attn.as_ref().unwrap()[2], get("blocks.2.attn.hook_pattern").data);
    // hook_z: the same bytes as the graph's [n_embd, N] node, shaped [pos, head, d_head].
    assert_eq!(get("l2.kqv_merged_cont").data, get("blocks.2.attn.hook_z").data);
    assert_eq!(get("blocks.2.attn.hook_z").ne, [8, 4, prompt.len() as i64, 1]);
    // The final LayerNorm's rows are every position's, not only the last one's.
    assert_eq!(get("ln_final.hook_normalized").ne, [32, prompt.len() as i64, 1, 1]);
    // Only what was asked for comes back (no helper taps under their graph names).
    assert_eq!(t.nodes.len(), 6, "{:?}", t.nodes.iter().map(|v| &v.name).collect::<Vec<_>>());
}

#[test]
fn a_bad_hook_name_is_invalid_by_name_and_leaves_the_session_usable() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    for bad in [
        "blocks.3.hook_resid_pre",
        "blocks.0.hook_nope",
        "blocks.01.hook_resid_pre",
        "blocks.-1.hook_resid_pre",
        "hook_embedding",
        "ln_final.hook_x",
        "blocks..hook_resid_pre",
    ] {
        match block_on(s.trace(&prompt, &[bad.to_string()])) {
            Err(ModelError::Invalid(m)) => assert!(m.contains(&format!("'{bad}'")), "{bad}: {m}"),
            other => panic!("{bad}: {:?}", other.map(|t| t.nodes.len())),
        }
    }
    let t = block_on(s.trace(&prompt, &["blocks.0.hook_resid_pre".to_string()])).unwrap();
    let (_, want) = r.block("capture/blocks.0.hook_resid_pre");
    let d = t.nodes[0].data.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(d <= TOL, "after the errors: {d}");
}

/// The reference's own invariants, so a regenerated fixture cannot silently lose content.
#[test]
fn the_reference_is_complete() {
    let r = Ref::load();
    let j = &r.json;
    assert_eq!(j["version"], 1);
    let (nl, nh) = (3, 4);
    assert_eq!(j["config"]["n_layer"], nl);
    let n = r.ids("clean").len() as i64;
    assert_eq!(r.ids("corrupted").len() as i64, n);
    for at in ["resid_pre", "attn_out", "mlp_out"] {
        assert_eq!(r.block(&format!("patch/{at}")).0, [nl, n]);
    }
    assert_eq!(r.block("patch/z").0, [nl, nh]);
    // Layer 0's resid_pre is the embeddings: patched at the one position where the prompts
    // differ it makes the clean run (the clean difference), anywhere else it changes nothing.
    let (_, rp) = r.block("patch/resid_pre");
    let diff = |k: &str| j["patch"][k].as_f64().unwrap() as f32;
    let at = r.ids("clean").iter().zip(r.ids("corrupted")).position(|(a, b)| *a != b).unwrap();
    assert!((rp[at] - diff("clean_diff")).abs() < 1e-5, "{} vs {}", rp[at], diff("clean_diff"));
    assert!((rp[0] - diff("corrupted_diff")).abs() < 1e-5, "{} vs {}", rp[0], diff("corrupted_diff"));
    let p = r.ids("prompt").len() as i64;
    assert_eq!(r.block("lens/top_logprobs").0, [nl + 1, p, 5]);
    assert_eq!(r.block("lens/logprobs").0, [nl + 1, p - 1]);
    // Attribution: the parts sum to the logit difference.
    let a = &j["attribution"];
    let parts = ["embed", "posEmbed", "lnBias"].iter().map(|k| a[k].as_f64().unwrap()).sum::<f64>()
        + ["attribution/heads", "attribution/attn_bias", "attribution/mlps"]
            .iter()
            .map(|b| r.block(b).1.iter().map(|&x| x as f64).sum::<f64>())
            .sum::<f64>();
    assert!((parts - a["logit_diff"].as_f64().unwrap()).abs() < 1e-4, "{parts} vs {}", a["logit_diff"]);
    assert_eq!(j["steer"].as_array().unwrap().len(), 2);
    for st in j["steer"].as_array().unwrap() {
        assert_eq!(st["tokens"].as_array().unwrap().len(), 32);
    }
    assert_eq!(r.block("sae/l0").0, [p]);
    assert!(fixture("tiny-sae/cfg.json").exists() && fixture("tiny-sae/sae_weights.safetensors").exists());
}

#[test]
fn zero_scale_add_set_hooks_give_transformer_lens_logits() {
    tl_ref::check_hooks(&mut session(), &Ref::load());
}

#[test]
fn run_captures_equal_trace_and_the_hooked_value_is_captured() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    let run = block_on(s.run(&prompt, &["blocks.*.hook_resid_post".into(), "hook_embed".into()], &[])).unwrap();
    let names: Vec<&str> = run.cache.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post", "blocks.2.hook_resid_post"]
    );
    for v in &run.cache {
        let (shape, want) = r.block(&format!("capture/{}", v.name));
        assert_eq!(tl_shape(v.ne, shape.len()), shape);
        let d = v.data.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d <= TOL, "{}: max |Δ| {d:e}", v.name);
    }
    // A zero hook at a point: its capture is the hooked value (all zeros at head 2).
    let hooks = hooks_of(&serde_json::json!([{ "at": "blocks.1.attn.hook_z", "op": "zero", "head": 2 }]));
    let run = block_on(s.run(&prompt, &["blocks.1.attn.hook_z".into()], &hooks)).unwrap();
    let z = &run.cache[0];
    let (n_head, hd) = (z.ne[1] as usize, z.ne[0] as usize);
    for (i, x) in z.data.iter().enumerate() {
        if (i / hd) % n_head == 2 {
            assert_eq!(*x, 0.0);
        }
    }
    assert!(z.data.iter().any(|&x| x != 0.0));
}

#[test]
fn bad_hooks_and_captures_are_invalid_by_name_and_leave_the_session_usable() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    let bad = [
        (
            serde_json::json!([{ "at": "blocks.9.hook_resid_pre", "op": "zero" }]),
            "no hook point named 'blocks.9.hook_resid_pre'",
        ),
        (serde_json::json!([{ "at": "blocks.0.hook_resid_pre", "op": "zero", "head": 0 }]), "it has no head axis"),
        (
            serde_json::json!([{ "at": "blocks.0.attn.hook_z", "op": "zero", "head": 4 }]),
            "head 4 is out of range (0..4)",
        ),
        (
            serde_json::json!([{ "at": "blocks.0.hook_resid_pre", "op": "zero", "pos": -11 }]),
            "pos -11 is out of range (0..10)",
        ),
        (
            serde_json::json!([{ "at": "blocks.0.hook_resid_pre", "op": "add", "value": [1.0, 2.0] }]),
            "an 'add' value has 2 numbers, the slice at one position has 32",
        ),
        (
            serde_json::json!([{ "at": "blocks.0.hook_resid_pre", "op": "set", "pos": 0, "value": [1.0] }]),
            "a 'set' value has 1 numbers, the slice has 32",
        ),
        (serde_json::json!([{ "at": "blocks.0.hook_resid_pre", "op": "scale" }]), "'scale' needs a number 'value'"),
        (
            serde_json::json!([{ "at": "blocks.0.ln1.hook_scale", "op": "add", "value": 1.0 }]),
            "a LayerNorm scale can be captured, and changed only by 'scale' or 'zero'",
        ),
    ];
    for (spec, msg) in bad {
        let e = block_on(s.run(&prompt, &[], &hooks_of(&spec))).unwrap_err();
        assert!(matches!(&e, ModelError::Invalid(m) if m.contains(msg)), "{spec}: {e}");
    }
    let e = block_on(s.run(&prompt, &["blocks.*.hook_nothing".into()], &[])).unwrap_err();
    assert!(
        matches!(&e, ModelError::Invalid(m) if m.contains("capture 'blocks.*.hook_nothing' names no hook point")),
        "{e}"
    );
    let opts = ggweb::model::session::GenerateOptions {
        hooks: hooks_of(&serde_json::json!([{ "at": "blocks.0.hook_resid_pre", "op": "zero", "pos": 0 }])),
        ..Default::default()
    };
    let e = s.start(prompt.clone(), opts).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("'pos' is not allowed here")), "{e}");
    // Still usable.
    assert!(block_on(s.run(&prompt, &[], &[])).is_ok());
}

#[test]
fn steered_greedy_generation_equals_transformer_lens_without_a_kv_cache() {
    tl_ref::check_steering(&mut session(), &Ref::load());
}

#[test]
fn patching_sweeps_equal_transformer_lens() {
    tl_ref::check_patching(&mut session(), &Ref::load());
}

#[test]
fn logit_lens_equals_transformer_lens() {
    tl_ref::check_lens(&mut session(), &Ref::load());
}

#[test]
fn direct_logit_attribution_equals_transformer_lens_and_sums_to_the_logit_difference() {
    tl_ref::check_attribution(&mut session(), &Ref::load());
}

#[test]
fn an_sae_saved_by_saelens_encodes_as_saelens_does() {
    tl_ref::check_sae(&mut session(), &Ref::load());
}
