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

use serde_json::Value;

use crate::support::tl_ref::{check_hook_points, fixture, tl_shape, Ref};

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

/// The largest |Δ| between our logits at TransformerLens's columns and its block.
fn logits_delta(r: &Ref, logits: &[f32], n_vocab: usize, block: &str) -> f32 {
    let cols = r.ids("logit_ids");
    let (shape, want) = r.block(block);
    assert_eq!(shape, vec![(logits.len() / n_vocab) as i64, cols.len() as i64]);
    let mut worst = 0f32;
    for (p, row) in logits.chunks(n_vocab).enumerate() {
        for (j, &c) in cols.iter().enumerate() {
            worst = worst.max((row[c as usize] - want[p * cols.len() + j]).abs());
        }
    }
    worst
}

fn hooks_of(v: &Value) -> Vec<ggweb::model::hooks::Hook> {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn zero_scale_add_set_hooks_give_transformer_lens_logits() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    let n_vocab = s.model.hparams.n_vocab;
    let cases = r.json["hooks"].as_array().unwrap();
    assert_eq!(cases.len(), 16);
    for (i, case) in cases.iter().enumerate() {
        let hooks = hooks_of(&case["hooks"]);
        let run = block_on(s.run(&prompt, &[], &hooks)).unwrap();
        assert_eq!(run.logits.len(), prompt.len() * n_vocab);
        // The bound for hooked logits.
        let d = logits_delta(&r, &run.logits, n_vocab, &format!("hooks/{i}/logits"));
        assert!(d <= 1e-4, "hook case {i} ({}): max |Δ| {d:e}", case["hooks"]);
        let last = &run.logits[(prompt.len() - 1) * n_vocab..];
        let mut top: Vec<u32> = (0..n_vocab as u32).collect();
        top.sort_by(|&a, &b| last[b as usize].total_cmp(&last[a as usize]));
        let want: Vec<u32> = case["top_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(&top[..want.len()], &want[..], "hook case {i}: top ids");
    }
    // Unhooked, the same call gives the plain logits (the hooks left nothing behind).
    let plain = block_on(s.run(&prompt, &[], &[])).unwrap();
    let again = block_on(s.logits(&prompt)).unwrap();
    assert_eq!(&plain.logits[(prompt.len() - 1) * n_vocab..], &again[..]);
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
        (serde_json::json!([{ "at": "blocks.0.ln1.hook_scale", "op": "zero" }]), "a LayerNorm scale is a capture only"),
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
    let r = Ref::load();
    let mut s = session();
    for case in r.json["steer"].as_array().unwrap() {
        let prompt: Vec<u32> = case["prompt"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let want: Vec<u32> = case["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let unsteered: Vec<u32> =
            case["unsteered"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        for (hooks, want) in [(hooks_of(&case["hooks"]), &want), (Vec::new(), &unsteered)] {
            for reuse_prompt in [true, false] {
                let mut opts = ggweb::model::session::GenerateOptions {
                    max_tokens: want.len(),
                    ignore_eos: true,
                    hooks: hooks.clone(),
                    reuse_prompt,
                    ..Default::default()
                };
                opts.sampling.temperature = 0.0;
                s.start(prompt.clone(), opts).unwrap();
                while !block_on(s.prompt_step()).unwrap() {}
                let mut got = Vec::new();
                while let Some(item) = block_on(s.next()).unwrap() {
                    got.push(item.token);
                }
                assert_eq!(&got, want, "hooks {}, reusePrompt {reuse_prompt}", hooks.len());
            }
        }
    }
}

#[test]
fn patching_sweeps_equal_transformer_lens() {
    let r = Ref::load();
    let mut s = session();
    let (clean, corrupted) = (r.ids("clean"), r.ids("corrupted"));
    let (answer, against) = (r.json["answer"].as_u64().unwrap() as u32, r.json["against"].as_u64().unwrap() as u32);
    for at in ["resid_pre", "attn_out", "mlp_out", "z"] {
        let p = block_on(s.patch(&clean, &corrupted, at, answer, against)).unwrap();
        let (shape, want) = r.block(&format!("patch/{at}"));
        assert_eq!(p.shape.iter().map(|&x| x as i64).collect::<Vec<_>>(), shape, "{at}");
        let d = p.cells.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        // The bound per cell.
        assert!(d <= 1e-4, "{at}: max |Δ| {d:e}");
        assert!((p.clean_diff - r.json["patch"]["clean_diff"].as_f64().unwrap() as f32).abs() <= 1e-4);
        assert!((p.corrupted_diff - r.json["patch"]["corrupted_diff"].as_f64().unwrap() as f32).abs() <= 1e-4);
    }
    let e = block_on(s.patch(&clean, &corrupted[1..], "z", answer, against)).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("same length")), "{e}");
    let e = block_on(s.patch(&clean, &corrupted, "resid_post", answer, against)).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("got 'resid_post'")), "{e}");
}

#[test]
fn logit_lens_equals_transformer_lens() {
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    let k = r.json["lens"]["top_k"].as_u64().unwrap() as usize;
    let lens = block_on(s.logit_lens(&prompt, k)).unwrap();
    assert_eq!(lens.layers, s.model.hparams.n_layer + 1);
    let want_ids = &r.json["lens"]["top_ids"];
    let (_, want_top) = r.block("lens/top_logprobs");
    let (shape, want_lp) = r.block("lens/logprobs");
    assert_eq!(shape, vec![lens.layers as i64, prompt.len() as i64 - 1]);
    for l in 0..lens.layers {
        for p in 0..prompt.len() {
            let ids: Vec<u32> = lens.top[l][p].iter().map(|t| t.0).collect();
            let want: Vec<u32> =
                want_ids[l][p].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(ids, want, "layer {l} pos {p}: top ids");
            for (j, t) in lens.top[l][p].iter().enumerate() {
                assert!((t.1 - want_top[(l * prompt.len() + p) * k + j]).abs() <= 1e-4, "layer {l} pos {p} #{j}");
            }
        }
        let d = lens.logprobs[l]
            .iter()
            .zip(&want_lp[l * (prompt.len() - 1)..])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(d <= 1e-4, "layer {l}: logprobs max |Δ| {d:e}");
    }
    // The last layer is the model's own prediction.
    let score = block_on(s.score(&prompt, 0)).unwrap();
    let last = &lens.logprobs[lens.layers - 1];
    assert!(last.iter().zip(&score.logprobs).all(|(a, b)| (a - b).abs() <= 1e-5));
}

#[test]
fn direct_logit_attribution_equals_transformer_lens_and_sums_to_the_logit_difference() {
    let r = Ref::load();
    let mut s = session();
    let clean = r.ids("clean");
    let a = &r.json["attribution"];
    let (answer, against) = (a["answer"].as_u64().unwrap() as u32, a["against"].as_u64().unwrap() as u32);
    let got = block_on(s.attribute(&clean, answer, against, a["pos"].as_i64().unwrap())).unwrap();
    let close = |x: f32, y: f64, what: &str| assert!((x as f64 - y).abs() <= 1e-4, "{what}: {x} vs {y}");
    close(got.embed, a["embed"].as_f64().unwrap(), "embed");
    close(got.pos_embed, a["posEmbed"].as_f64().unwrap(), "posEmbed");
    close(got.ln_bias, a["lnBias"].as_f64().unwrap(), "lnBias");
    for (block, ours) in
        [("attribution/heads", &got.heads), ("attribution/attn_bias", &got.attn_bias), ("attribution/mlps", &got.mlps)]
    {
        let (_, want) = r.block(block);
        assert_eq!(ours.len(), want.len(), "{block}");
        for (i, (x, y)) in ours.iter().zip(want).enumerate() {
            close(*x, *y as f64, &format!("{block}[{i}]"));
        }
    }
    // The parts sum to the logit difference of the run itself.
    close(got.total, a["logit_diff"].as_f64().unwrap(), "total");
    let logits = block_on(s.logits(&clean)).unwrap();
    close(got.total, (logits[answer as usize] - logits[against as usize]) as f64, "total vs logits");
    let e = block_on(s.attribute(&clean, answer, against, 14)).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("pos 14 is out of range")), "{e}");
}

#[test]
fn an_sae_saved_by_saelens_encodes_as_saelens_does() {
    use ggweb::model::sae::Sae;
    let r = Ref::load();
    let mut s = session();
    let prompt = r.ids("prompt");
    let dir = fixture("tiny-sae");
    let cfg = std::fs::read_to_string(dir.join("cfg.json")).unwrap();
    let weights = std::fs::read(dir.join("sae_weights.safetensors")).unwrap();
    let sae = Sae::from_parts(&cfg, &weights).unwrap();
    assert_eq!((sae.d_in, sae.d_sae, sae.hook_name.as_str()), (32, 64, "blocks.1.hook_resid_pre"));
    let k = r.json["sae"]["top_k"].as_u64().unwrap() as usize;
    let enc = block_on(s.sae_encode(&prompt, &sae, k)).unwrap();
    let (_, want_v) = r.block("sae/top_values");
    let (_, want_l0) = r.block("sae/l0");
    let (_, want_mse) = r.block("sae/mse");
    for (p, top) in enc.top.iter().enumerate() {
        let ids: Vec<u32> = top.iter().map(|t| t.0).collect();
        let want: Vec<u32> =
            r.json["sae"]["top_ids"][p].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(ids, want, "pos {p}: top features");
        for (j, t) in top.iter().enumerate() {
            assert!((t.1 - want_v[p * k + j]).abs() <= 1e-4, "pos {p} #{j}: {} vs {}", t.1, want_v[p * k + j]);
        }
        assert_eq!(enc.l0[p], want_l0[p], "pos {p}: l0");
        assert!((enc.mse[p] - want_mse[p]).abs() <= 1e-4, "pos {p}: mse {} vs {}", enc.mse[p], want_mse[p]);
    }
    assert_eq!(sae.decoder_row(3).unwrap().len(), 32);
    assert!(matches!(sae.decoder_row(64), Err(ModelError::Invalid(_))));
    // Hostile files: typed errors naming what, never a panic.
    let cases: Vec<(String, Vec<u8>, &str)> = vec![
        (cfg.clone(), weights[..5].to_vec(), "too short for the header length"),
        (
            cfg.clone(),
            {
                let mut w = weights.clone();
                w[..8].copy_from_slice(&u64::MAX.to_le_bytes());
                w
            },
            "the header claims",
        ),
        (cfg.clone(), weights[..weights.len() - 4].to_vec(), "data_offsets"),
        (
            cfg.replace("\"d_sae\": 64", "\"d_sae\": 65"),
            weights.clone(),
            "shape [32,64] where cfg.json implies [32, 65]",
        ),
        (cfg.replace("\"standard\"", "\"jumprelu\""), weights.clone(), "architecture 'jumprelu'"),
        ("{".into(), weights.clone(), "cfg.json is not JSON"),
        (cfg.replace("\"hook_name\"", "\"hook\""), weights.clone(), "no metadata.hook_name"),
    ];
    for (c, w, msg) in cases {
        let e = Sae::from_parts(&c, &w).unwrap_err();
        assert!(matches!(&e, ModelError::Format(m) if m.contains(msg)), "{msg}: {e}");
    }
    // An SAE of the wrong width for its hook: invalid, the session usable after.
    let wide = Sae::from_parts(
        &cfg.replace("\"hook_name\": \"blocks.1.hook_resid_pre\"", "\"hook_name\": \"blocks.1.mlp.hook_post\""),
        &weights,
    )
    .unwrap();
    let e = block_on(s.sae_encode(&prompt, &wide, k)).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("has 128 values per position")), "{e}");
    assert!(block_on(s.sae_encode(&prompt, &sae, k)).is_ok());
}
