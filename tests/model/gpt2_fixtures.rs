//! GPT-2 end to end against the golden fixtures (`tests/fixtures/`, made by
//! `make_fixtures.py` with Hugging Face transformers; format in `tests/fixtures/README.md`).
//!
//! Which reference each file is held to, and why the tolerance:
//! - F32: the plain reference. Our graph is exact f32 (f32 GELU, f64 row sums in norm and
//!   softmax), so only summation order differs from PyTorch: 1e-4 is ~10× what we measure.
//! - F16: the plain reference too: F16 weights are dotted with f32 activations (no f16
//!   rounding of activations), and widening f16 is exact, so the same 1e-4 holds. The
//!   issue's bar is 2e-2 (llama.cpp: up to 1.4e-2).
//! - Q8_0 and Q4_0: activations are quantized to Q8_0 for `vec_dot`, as ggml does, so the
//!   `vec_dot` reference (which rounds them the same way) is the one we match: within 1e-4
//!   for all but one prompt, within 0.15 everywhere (see `check_dtype` on rounding ties);
//!   against the plain reference Q8_0 must stay within the 0.4.

use crate::support::eval::Eval;
use std::path::PathBuf;

use ggweb::model::context::{block_on, Batch, Gpt2Options, Logits};
use ggweb::model::loader::{load_from_bytes, LoadedModel};
use ggweb::model::sampling::argmax;
use serde_json::Value;

const FORMAT_VERSION: u64 = 1;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn reference() -> Value {
    let v: Value = serde_json::from_slice(&std::fs::read(fixtures().join("tiny.ref.json")).unwrap()).unwrap();
    let version = v["format_version"].as_u64().unwrap_or(0);
    assert_eq!(
        version, FORMAT_VERSION,
        "tests/fixtures/tiny.ref.json has format_version {version}, this test reads {FORMAT_VERSION}: \
         regenerate with `python tests/fixtures/make_fixtures.py` or update the test"
    );
    v
}

fn load(r: &Value, dtype: &str, n_batch: usize) -> LoadedModel {
    let file = r["dtypes"][dtype]["gguf"].as_str().unwrap();
    let bytes = std::fs::read(fixtures().join(file)).unwrap();
    load_from_bytes(&bytes, Gpt2Options { n_batch, ..Default::default() }).unwrap()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// For every stored logits block of `refr` (a dtype entry or its `vec_dot` entry) for
/// `prompt`: (position, largest absolute difference to our row there).
fn diffs_to_blocks(r: &Value, refr: &Value, prompt: usize, ours: &[f32]) -> Vec<(usize, f32)> {
    let n_vocab = 50257;
    let bin = std::fs::read(fixtures().join(refr["logits_bin"].as_str().unwrap())).unwrap();
    let mut out = Vec::new();
    for b in refr["blocks"].as_array().unwrap().iter().filter(|b| b["prompt"] == prompt) {
        let pos = b["position"].as_u64().unwrap() as usize;
        let (offset, count) = (b["offset"].as_u64().unwrap() as usize, b["count"].as_u64().unwrap() as usize);
        let cols: Vec<u32> = match b["columns"].as_str().unwrap() {
            "all" => (0..n_vocab as u32).collect(),
            set => u32s(&r["column_sets"][set]),
        };
        assert_eq!(cols.len(), count);
        let mut worst = 0f32;
        for (i, &c) in cols.iter().enumerate() {
            let want = f32::from_le_bytes(bin[offset + 4 * i..offset + 4 * i + 4].try_into().unwrap());
            worst = worst.max((ours[pos * n_vocab + c as usize] - want).abs());
        }
        out.push((pos, worst));
    }
    assert!(!out.is_empty(), "no blocks for prompt {prompt}");
    out
}

fn max_diff_to_blocks(r: &Value, refr: &Value, prompt: usize, ours: &[f32]) -> f32 {
    diffs_to_blocks(r, refr, prompt, ours).iter().map(|d| d.1).fold(0.0, f32::max)
}

/// Greedy generation with the KV cache; returns the ids.
fn greedy(m: &mut LoadedModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut logits = m.model.eval(prompt, 0, false).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let t = argmax(&logits);
        out.push(t);
        if i + 1 < n {
            logits = m.model.eval(&[t], prompt.len() + i, false).unwrap();
        }
    }
    out
}

/// Steps of the reference path we must reproduce: up to the first whose top-1/top-2
/// margin is within 2ε (there a correct implementation may legitimately flip).
fn comparable_steps(path: &Value, eps: f32) -> usize {
    let steps = path["greedy_steps"].as_array().unwrap();
    steps.iter().position(|s| (s["margin"].as_f64().unwrap() as f32) <= 2.0 * eps).unwrap_or(steps.len())
}

/// `tol` bounds every position of the plain references. The quantized-activation (`vec_dot`)
/// references cannot be bounded that tightly everywhere: q = round(x/d) of an activation lying
/// within float noise (~1e-6 relative) of a .5 step rounds the other way here than in PyTorch,
/// and a one-step change in a K or V row moves every later position's logits by up to ~0.1.
/// With ~10⁵ rounded activations per prompt a tie is expected now and then (measured: one,
/// at position 79 of the 132-token Q8_0 prompt; every later position inherits it through
/// attention). So for those we require all but one prompt entirely within `tol`, and every
/// position within `flip_tol`.
fn check_dtype(dtype: &str, use_vec_dot: bool, tol: f32, flip_tol: f32, min_greedy: usize) {
    let r = reference();
    let entry = &r["dtypes"][dtype];
    let refr = if use_vec_dot { &entry["vec_dot"] } else { entry };
    let mut m = load(&r, dtype, 32);
    let (mut n_prompts, mut n_tight) = (0, 0);
    for (pi, p) in r["prompts"].as_array().unwrap().iter().enumerate() {
        let ids = u32s(&p["ids"]);
        assert_eq!(m.tokenizer.encode(p["text"].as_str().unwrap(), false), ids, "tokenizer, prompt {}", p["key"]);
        let all = m.model.eval(&ids, 0, true).unwrap();
        let diffs = diffs_to_blocks(&r, refr, pi, &all);
        let worst = diffs.iter().map(|d| d.1).fold(0.0, f32::max);
        n_prompts += 1;
        n_tight += (worst <= tol) as usize;
        println!(
            "{dtype}{} {:>9}: max |logit - HF| = {worst:.2e}",
            if use_vec_dot { " vec_dot" } else { "" },
            p["key"]
        );
        assert!(worst <= flip_tol, "{dtype} prompt {}: max abs diff {worst} > {flip_tol}", p["key"]);

        let path = &refr["prompts"][pi];
        let want = u32s(&path["greedy_ids"]);
        let n_cmp = comparable_steps(path, worst.max(tol));
        let got = greedy(&mut m, &ids, n_cmp.min(want.len()));
        assert_eq!(got[..], want[..n_cmp], "{dtype} greedy path, prompt {} (first {n_cmp} steps)", p["key"]);
        // A prompt within `tol` everywhere must compare at least `min_greedy` steps (all 40
        // where the reference margins allow: see the callers); only the one prompt that
        // `flip_tol` admits may compare fewer, since after a rounding flip its margins are
        // measured against a worse bound.
        if worst <= tol {
            assert!(n_cmp >= min_greedy, "{dtype} prompt {}: only {n_cmp} comparable greedy steps", p["key"]);
        }
    }
    println!("{dtype}: {n_tight} of {n_prompts} prompts within {tol:e} at every position");
    assert!(n_tight + 1 >= n_prompts, "{dtype}: only {n_tight} of {n_prompts} prompts within {tol}");
}

#[test]
fn f32_matches_hf_within_1e_4_and_greedy_40_tokens() {
    // The smallest top-1/top-2 margin on the reference paths is 4.8e-4 (prompt `long`), above
    // 2 × 1e-4: all 40 steps of every prompt are comparable.
    check_dtype("f32", false, 1e-4, 1e-4, 40);
}

#[test]
fn f16_matches_hf_within_1e_4_and_greedy_40_tokens() {
    check_dtype("f16", false, 1e-4, 1e-4, 40);
}

// 40 greedy steps for every prompt within 1e-4: the smallest top-1/top-2 margin on the
// vec_dot reference paths of those prompts is above 2 × 1e-4, as for f32 (measured: every
// such prompt compares all 40 steps, for both types). The one prompt with a rounding flip
// ("long" for q8_0, "unicode" for q4_0; see check_dtype) compares 0 and 2 steps.
#[test]
fn q8_0_matches_the_vec_dot_reference() {
    check_dtype("q8_0", true, 1e-4, 0.15, 40);
}

#[test]
fn q4_0_matches_the_vec_dot_reference() {
    check_dtype("q4_0", true, 1e-4, 0.15, 40);
}

#[test]
fn q8_0_within_0_4_of_the_plain_reference() {
    let r = reference();
    let mut m = load(&r, "q8_0", 32);
    for (pi, p) in r["prompts"].as_array().unwrap().iter().enumerate() {
        let all = m.model.eval(&u32s(&p["ids"]), 0, true).unwrap();
        let worst = max_diff_to_blocks(&r, &r["dtypes"]["q8_0"], pi, &all);
        assert!(worst <= 0.4, "prompt {}: {worst}", p["key"]);
    }
}

/// A prompt in runs of 1, 7 or 32 tokens gives the same logits up to summation order (the
/// attention dot products run over n_past + N positions, and the SIMD kernels split a longer
/// row into lanes differently; masked positions add exact zeros) and the same greedy tokens.
#[test]
fn batch_size_does_not_change_results() {
    let r = reference();
    let long = u32s(&r["prompts"][6]["ids"]); // 132 tokens: 5 runs of 32, 19 of 7
    let want = u32s(&r["dtypes"]["f32"]["prompts"][6]["greedy_ids"]);
    let mut runs = Vec::new();
    for n_batch in [1, 7, 32] {
        let mut m = load(&r, "f32", n_batch);
        runs.push(m.model.eval(&long, 0, true).unwrap());
        assert_eq!(greedy(&mut m, &long, 40), want, "greedy path with n_batch {n_batch}");
    }
    for (run, n_batch) in runs.iter().zip([1, 7]) {
        let worst = run.iter().zip(&runs[2]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-5, "n_batch {n_batch} vs 32: logits differ by {worst}");
    }
}

/// Every named intermediate of the first layer(s) against HF's activations: finds the first
/// node where a graph change goes wrong.
#[test]
fn intermediates_match_hf_node_by_node() {
    let r = reference();
    let inter: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("tiny-f32.intermediates.json")).unwrap()).unwrap();
    let ids = u32s(&inter["ids"]);
    let mut m = load(&r, "f32", 32);
    // HF name → our node name (llama.cpp's names, with our per-layer prefix).
    let ours = |hf: &str| -> String {
        match hf.rsplit_once('-') {
            Some((base, il)) if il.chars().all(|c| c.is_ascii_digit()) => format!("l{il}.{base}"),
            _ => hf.to_string(),
        }
    };
    let names: Vec<String> = inter["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .filter(|n| inter["tensors"].get(*n).is_some())
        .map(|n| n.to_string())
        .collect();
    // An empty match would compare nothing and pass. The fixture holds inpL, 10 nodes of
    // each of its 3 blocks (attn_norm .. l_out) and result_norm (result_output is in its
    // order but not stored: the logits are checked elsewhere).
    assert_eq!(names.len(), 32, "reference tensors matched by name: {names:?}");
    let our_names: Vec<String> = names.iter().map(|n| ours(n)).collect();
    let refs: Vec<&str> = our_names.iter().map(|s| s.as_str()).collect();
    let taps: Vec<String> = refs.iter().map(|s| s.to_string()).collect();
    let batch = Batch { tokens: &ids, n_past: 0, logits: Logits::None, taps: &taps, ..Batch::default() };
    let dumped: Vec<(String, Vec<f32>)> =
        block_on(m.model.decode(batch)).unwrap().taps.into_iter().map(|t| (t.name, t.data)).collect();
    assert_eq!(dumped.len(), names.len());
    for (hf, (name, got)) in names.iter().zip(&dumped) {
        let want: Vec<f32> = inter["tensors"][hf]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
            .collect();
        assert_eq!(got.len(), want.len(), "{hf} ({name}): sizes");
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 2e-5, "{hf} ({name}): max abs diff {worst}");
    }
}
