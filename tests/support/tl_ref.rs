//! TransformerLens's references (tests/fixtures/tiny-f32.tl-ref.json + .bin, made by
//! tests/fixtures/make_tl_ref.py) and the hook-point comparison that tests/model/tl_hooks.rs
//! (CPU) and tests/webgpu/tl_hooks_webgpu.rs run.

use ggweb::model::context::block_on;
use ggweb::model::hooks::hook_names;
use ggweb::model::session::Session;
use ggweb::model::ModelError;
use serde_json::Value;

pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

pub struct Ref {
    pub json: Value,
    pub bin: Vec<f32>,
}

impl Ref {
    pub fn load() -> Ref {
        Ref::load_from("tiny-f32.tl-ref.json")
    }

    /// A reference index of tests/fixtures (`.json`) with the float blocks of its `bin`.
    pub fn load_from(name: &str) -> Ref {
        let json: Value = serde_json::from_slice(&std::fs::read(fixture(name)).unwrap()).unwrap();
        let bytes = std::fs::read(fixture(json["bin"].as_str().unwrap())).unwrap();
        let bin = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        Ref { json, bin }
    }

    /// A block's shape and values.
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
}

/// TransformerLens's shape from a node's ggml `ne`: `ne` reversed, the unused outer axes dropped.
pub fn tl_shape(ne: [i64; 4], rank: usize) -> Vec<i64> {
    assert!(ne[rank..].iter().all(|&x| x == 1), "ne {ne:?} has more than {rank} axes");
    ne[..rank].iter().rev().copied().collect()
}

/// Traces every hook point of `prompt` by its TransformerLens name and checks each against the
/// reference: shape, −∞ exactly where TransformerLens masks, the rest within `tol`. Returns
/// the largest difference and where.
pub fn check_hook_points(s: &mut Session, r: &Ref, tol: f32) -> (f32, String) {
    let prompt = r.ids("prompt");
    let names = hook_names(&s.model.hparams);
    let want: Vec<String> =
        r.json["hook_names"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect();
    assert_eq!(names, want, "the model's hook names are TransformerLens's");
    assert_eq!(names.len(), 2 + 17 * 3 + 2);

    let t = block_on(s.trace(&prompt, &names)).unwrap();
    assert_eq!(t.nodes.len(), names.len(), "one value per hook name");
    let mut worst = (0f32, String::new());
    let mut masked = 0;
    for name in &names {
        let got = t.nodes.iter().find(|v| &v.name == name).unwrap_or_else(|| panic!("{name} not traced"));
        let (shape, want) = r.block(&format!("capture/{name}"));
        assert_eq!(tl_shape(got.ne, shape.len()), shape, "{name}: shape");
        assert_eq!(got.data.len(), want.len(), "{name}: size");
        for (i, (&a, &b)) in got.data.iter().zip(want).enumerate() {
            if b == f32::NEG_INFINITY {
                // A masked score: −∞ in both (the key after the query).
                assert_eq!(a, b, "{name}[{i}]: masked entry");
                masked += 1;
                continue;
            }
            let d = (a - b).abs();
            assert!(d <= tol, "{name}[{i}]: ours {a}, TransformerLens {b} (diff {d})");
            if d > worst.0 {
                worst = (d, name.clone());
            }
        }
    }
    // 3 layers × 4 heads × the 45 keys after their query in 10 positions.
    assert_eq!(masked, 3 * 4 * 45);
    worst
}

pub fn hooks_of(v: &Value) -> Vec<ggweb::model::hooks::Hook> {
    serde_json::from_value(v.clone()).unwrap()
}

/// The largest |Δ| between our logits at TransformerLens's columns and its block.
pub fn logits_delta(r: &Ref, logits: &[f32], n_vocab: usize, block: &str) -> f32 {
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

/// The check of tests/model/tl_hooks.rs `zero_scale_add_set_hooks_give_transformer_lens_logits`, on any session's backends.
pub fn check_hooks(s: &mut Session, r: &Ref) {
    let prompt = r.ids("prompt");
    let n_vocab = s.model.hparams.n_vocab;
    let cases = r.json["hooks"].as_array().unwrap();
    assert_eq!(cases.len(), 16);
    for (i, case) in cases.iter().enumerate() {
        let hooks = hooks_of(&case["hooks"]);
        let run = block_on(s.run(&prompt, &[], &hooks)).unwrap();
        assert_eq!(run.logits.len(), prompt.len() * n_vocab);
        // The bound for hooked logits.
        let d = logits_delta(r, &run.logits, n_vocab, &format!("hooks/{i}/logits"));
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

/// The check of tests/model/tl_hooks.rs `steered_greedy_generation_equals_transformer_lens_without_a_kv_cache`, on any session's backends.
pub fn check_steering(s: &mut Session, r: &Ref) {
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

/// The check of tests/model/tl_hooks.rs `patching_sweeps_equal_transformer_lens`, on any session's backends.
pub fn check_patching(s: &mut Session, r: &Ref) {
    let (clean, corrupted) = (r.ids("clean"), r.ids("corrupted"));
    let (answer, against) = (r.json["answer"].as_u64().unwrap() as u32, r.json["against"].as_u64().unwrap() as u32);
    for at in ["resid_pre", "attn_out", "mlp_out", "z"] {
        let p = block_on(s.patch(&clean, &corrupted, at, answer, against, None)).unwrap();
        let (shape, want) = r.block(&format!("patch/{at}"));
        assert_eq!(p.shape.iter().map(|&x| x as i64).collect::<Vec<_>>(), shape, "{at}");
        let d = p.cells.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        // The bound per cell.
        assert!(d <= 1e-4, "{at}: max |Δ| {d:e}");
        assert!((p.clean_diff - r.json["patch"]["clean_diff"].as_f64().unwrap() as f32).abs() <= 1e-4);
        assert!((p.corrupted_diff - r.json["patch"]["corrupted_diff"].as_f64().unwrap() as f32).abs() <= 1e-4);
    }
    let e = block_on(s.patch(&clean, &corrupted[1..], "z", answer, against, None)).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("same length")), "{e}");
    let e = block_on(s.patch(&clean, &corrupted, "resid_post", answer, against, None)).unwrap_err();
    assert!(matches!(&e, ModelError::Invalid(m) if m.contains("got 'resid_post'")), "{e}");
}

/// The check of tests/model/tl_hooks.rs `logit_lens_equals_transformer_lens`, on any session's backends.
pub fn check_lens(s: &mut Session, r: &Ref) {
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
    let score = block_on(s.score(&prompt, 0, &[])).unwrap();
    let last = &lens.logprobs[lens.layers - 1];
    assert!(last.iter().zip(&score.logprobs).all(|(a, b)| (a - b).abs() <= 1e-5));
}

/// The check of tests/model/tl_hooks.rs `direct_logit_attribution_equals_transformer_lens_and_sums_to_the_logit_difference`, on any session's backends.
pub fn check_attribution(s: &mut Session, r: &Ref) {
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

/// The check of tests/model/tl_hooks.rs `an_sae_saved_by_saelens_encodes_as_saelens_does`, on any session's backends.
pub fn check_sae(s: &mut Session, r: &Ref) {
    use ggweb::model::sae::Sae;
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

/// tests/fixtures/tiny-f32.tl-score-ref.json (`make_tl_ref.py --only score`).
pub fn score_reference() -> Value {
    serde_json::from_slice(&std::fs::read(fixture("tiny-f32.tl-score-ref.json")).unwrap()).unwrap()
}

fn json_u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn json_f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn max_delta(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

/// The check of tests/model/tl_score.rs `score_with_hooks_equals_transformer_lens`, on any session's backends.
pub fn check_score_hooks(s: &mut Session) {
    let r = score_reference();
    assert_eq!(r["version"], 1);
    let prompt = json_u32s(&r["prompt"]);
    let k = r["top_k"].as_u64().unwrap() as usize;
    let cases = r["score"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    let plain = block_on(s.score(&prompt, k, &[])).unwrap();
    for case in cases {
        let hooks: Vec<ggweb::model::hooks::Hook> = hooks_of(&case["hooks"]);
        let sc = block_on(s.score(&prompt, k, &hooks)).unwrap();
        // Different hooks than the cached run's: nothing is reused.
        assert_eq!(sc.cached_tokens, 0, "{}", case["hooks"]);
        let d = max_delta(&sc.logprobs, &json_f32s(&case["logprobs"]));
        assert!(d <= 1e-4, "{}: logprobs max |Δ| {d:e}", case["hooks"]);
        let d = max_delta(&sc.entropies, &json_f32s(&case["entropies"]));
        assert!(d <= 1e-4, "{}: entropies max |Δ| {d:e}", case["hooks"]);
        assert_eq!(sc.ranks, json_u32s(&case["ranks"]), "{}", case["hooks"]);
        for (i, row) in sc.top.iter().enumerate() {
            let ids: Vec<u32> = row.iter().map(|t| t.0).collect();
            assert_eq!(ids, json_u32s(&case["top_ids"][i]), "{}: row {i}", case["hooks"]);
            let lps: Vec<f32> = row.iter().map(|t| t.1).collect();
            let d = max_delta(&lps, &json_f32s(&case["top_logprobs"][i]));
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
        s.clear_cache();
        let fresh = block_on(s.score(&longer, k, &hooks)).unwrap();
        assert_eq!(fresh.cached_tokens, 0);
        assert!(max_delta(&grown.logprobs, &fresh.logprobs) <= 1e-5, "{}", case["hooks"]);
        assert_eq!(grown.ranks, fresh.ranks);
    }
    // Back to no hooks: nothing reused from the hooked cache; the unhooked values.
    let back = block_on(s.score(&prompt, k, &[])).unwrap();
    assert_eq!(back.cached_tokens, 0);
    assert!(max_delta(&back.logprobs, &plain.logprobs) <= 1e-6);
}

/// The check of tests/model/tl_score.rs `layer_norm_scale_hooks_equal_transformer_lens`, on any session's backends.
pub fn check_ln_scale_hooks(s: &mut Session) {
    let r = score_reference();
    let prompt = json_u32s(&r["prompt"]);
    let n_vocab = s.model.hparams.n_vocab;
    let cases = r["ln_scale"].as_array().unwrap();
    assert_eq!(cases.len(), 4);
    for case in cases {
        let hooks: Vec<ggweb::model::hooks::Hook> = hooks_of(&case["hooks"]);
        let capture: Vec<String> = case["capture"].as_object().unwrap().keys().cloned().collect();
        let run = block_on(s.run(&prompt, &capture, &hooks)).unwrap();
        let cols = json_u32s(&case["logit_ids"]);
        let mut worst = 0f32;
        for (p, row) in run.logits.chunks(n_vocab).enumerate() {
            let got: Vec<f32> = cols.iter().map(|&c| row[c as usize]).collect();
            worst = worst.max(max_delta(&got, &json_f32s(&case["logits"][p])));
        }
        assert!(worst <= 1e-4, "{}: logits max |Δ| {worst:e}", case["hooks"]);
        // The captured scale is the hooked one; the normalized values were divided by it.
        for name in &capture {
            let v = run.cache.iter().find(|v| &v.name == name).unwrap();
            let d = max_delta(&v.data, &json_f32s(&case["capture"][name]));
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
