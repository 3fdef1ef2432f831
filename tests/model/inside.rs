//! The session core against Hugging Face on the shared tiny model: score (logprobs, ranks,
//! entropies, top-k), trace (attentions, hidden states, any node), generation logprobs,
//! the prompt cache, stop strings, and the strict option parser.
//!
//! Reference: tests/fixtures/tiny-gpt2.inside-ref.json, made by
//! tests/fixtures/make_inside_ref.py from tiny-gpt2-f32.gguf ($GGWEB_MODELS_DIR).

use std::rc::Rc;

use ggweb::common::options::{parse_generate, parse_score, parse_trace, GENERATE_KEYS};
use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Gpt2Options};
use ggweb::model::loader::load_from_path;
use ggweb::model::sampling::SamplingParams;
use ggweb::model::session::{GenerateOptions, Item, Score, Session, StopReason};
use ggweb::model::ModelError;
use serde_json::Value;

use crate::support::fixtures;

/// HF runs float32 too; ours differs by summation order only. Measured ~1e-6 here; the
/// issue's bound.
const TOL: f32 = 1e-4;

fn session(n_batch: usize) -> Session {
    let path = fixtures::models_dir().join("tiny-gpt2-f32.gguf");
    let opts = Gpt2Options { n_batch, ..Gpt2Options::default() };
    Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), opts).unwrap())
}

fn reference() -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-gpt2.inside-ref.json");
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn greedy(max_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_tokens, sampling: SamplingParams::greedy(), ..GenerateOptions::default() }
}

fn run(s: &mut Session, prompt: &[u32], opts: GenerateOptions) -> (Vec<Item>, usize) {
    let cached = s.start(prompt.to_vec(), opts).unwrap();
    while !block_on(s.prompt_step()).unwrap() {}
    let mut items = Vec::new();
    while let Some(it) = block_on(s.next()).unwrap() {
        items.push(it);
    }
    (items, cached)
}

#[test]
fn score_matches_hf() {
    let r = reference();
    // n_batch 3: the 10-token prompt is scored in four chunks.
    let mut s = session(3);
    for p in r["prompts"].as_array().unwrap() {
        let ids = u32s(&p["ids"]);
        let sc = block_on(s.score(&ids, 5, &[])).unwrap();
        assert_eq!(sc.tokens, ids);
        let key = p["key"].as_str().unwrap();
        let d = max_diff(&sc.logprobs, &f32s(&p["logprobs"]));
        assert!(d <= TOL, "{key}: logprobs differ by {d}");
        let d = max_diff(&sc.entropies, &f32s(&p["entropies"]));
        assert!(d <= TOL, "{key}: entropies differ by {d}");
        let (lo, hi) = (u32s(&p["rank_lo"]), u32s(&p["rank_hi"]));
        for (i, &rank) in sc.ranks.iter().enumerate() {
            // Equal up to ties within 2e-4: between the entries clearly above and those not clearly below.
            assert!(lo[i] <= rank && rank <= hi[i], "{key} row {i}: rank {rank} outside [{}, {}]", lo[i], hi[i]);
        }
        for (i, (row, want)) in sc.top.iter().zip(p["top5"].as_array().unwrap()).enumerate() {
            let want: Vec<(u32, f32)> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap() as f32))
                .collect();
            assert_eq!(row.len(), 5);
            for (j, (&(id, lp), &(wid, wlp))) in row.iter().zip(&want).enumerate() {
                assert!((lp - wlp).abs() <= TOL, "{key} row {i} top {j}: {lp} vs {wlp}");
                // Ids may swap only between entries tied within the tolerance.
                if id != wid {
                    let other = want.iter().find(|w| w.0 == id).map(|w| w.1);
                    assert!(other.is_some_and(|o| (o - lp).abs() <= 2e-4), "{key} row {i} top {j}: id {id} vs {wid}");
                }
            }
        }
    }
}

#[test]
fn score_reuses_the_cache_and_equals_a_fresh_score() {
    let r = reference();
    let fox = u32s(&r["prompts"][1]["ids"]);
    let mut s = session(4);
    let first = block_on(s.score(&fox, 3, &[])).unwrap();
    assert_eq!(first.cached_tokens, 0);
    // The same text again: nothing to evaluate.
    let again = block_on(s.score(&fox, 3, &[])).unwrap();
    assert_eq!(again.cached_tokens, fox.len());
    assert_eq!(again, Score { cached_tokens: fox.len(), ..first.clone() });
    // A text sharing 6 tokens: rows 0..5 reused (row 5 predicts the first differing token).
    let mut other = fox[..6].to_vec();
    other.extend([198, 40, 13]); // "\nI." instead of " the lazy dog."
    let cached = block_on(s.score(&other, 3, &[])).unwrap();
    assert_eq!(cached.cached_tokens, 5);
    let fresh = block_on(session(4).score(&other, 3, &[])).unwrap();
    assert!(max_diff(&cached.logprobs, &fresh.logprobs) <= 1e-5);
    assert_eq!(cached.ranks, fresh.ranks);
    // More top entries than were kept: rows are recomputed.
    assert_eq!(block_on(s.score(&other, 4, &[])).unwrap().cached_tokens, 0);
}

#[test]
fn trace_matches_hf_attentions_and_hidden_states() {
    let r = reference();
    let mut s = session(32);
    let hp = s.model.hparams.clone();
    for p in r["prompts"].as_array().unwrap() {
        let ids = u32s(&p["ids"]);
        let n = ids.len();
        let taps = vec!["attn".to_string(), "hidden".to_string(), "l1.ffn_gelu".to_string()];
        let t = block_on(s.trace(&ids, &taps)).unwrap();
        let key = p["key"].as_str().unwrap();
        let attn = t.attn.unwrap();
        assert_eq!(attn.len(), hp.n_layer);
        for (l, (a, want)) in attn.iter().zip(p["attentions"].as_array().unwrap()).enumerate() {
            assert_eq!(a.len(), hp.n_head * n * n);
            let d = max_diff(a, &f32s(want));
            assert!(d <= TOL, "{key} attn layer {l}: {d}");
            // Masked entries (key after query) are exactly 0.
            for h in 0..hp.n_head {
                for q in 0..n {
                    for k in q + 1..n {
                        assert_eq!(a[(h * n + q) * n + k], 0.0);
                    }
                }
            }
        }
        let hidden = t.hidden.unwrap();
        assert_eq!(hidden.len(), hp.n_layer + 1);
        for (l, (h, want)) in hidden.iter().zip(p["hidden"].as_array().unwrap()).enumerate() {
            assert_eq!(h.len(), n * hp.n_embd);
            let d = max_diff(h, &f32s(want));
            assert!(d <= TOL, "{key} hidden {l}: {d}");
        }
        assert_eq!(t.nodes.len(), 1);
        assert_eq!((t.nodes[0].name.as_str(), t.nodes[0].ne), ("l1.ffn_gelu", [hp.n_ff as i64, n as i64, 1, 1]));
        // The taps are kept alive: the plan is bigger than without them.
        let plain = block_on(s.trace(&ids, &["l1.ffn_gelu".to_string()])).unwrap();
        assert!(t.compute_bytes > plain.compute_bytes, "{} vs {}", t.compute_bytes, plain.compute_bytes);
    }
    let err = block_on(s.trace(&[1, 2], &["l9.nothing".to_string()])).unwrap_err();
    assert!(matches!(&err, ModelError::Invalid(m) if m.contains("'l9.nothing'")), "{err}");
}

#[test]
fn generation_logprobs_equal_score() {
    let r = reference();
    let hello = u32s(&r["prompts"][0]["ids"]);
    let mut s = session(32);
    let opts = GenerateOptions { top_logprobs: 3, ..greedy(8) };
    let (items, _) = run(&mut s, &hello, opts);
    assert_eq!(items.len(), 8);
    let mut all = hello.clone();
    all.extend(items.iter().map(|i| i.token));
    let sc = block_on(session(32).score(&all, 3, &[])).unwrap();
    for (k, it) in items.iter().enumerate() {
        let row = hello.len() - 1 + k;
        // One token at a time against one batched pass: summation order only.
        assert!((it.logprob.unwrap() - sc.logprobs[row]).abs() <= 1e-5, "token {k}");
        let top: Vec<u32> = it.top.iter().map(|t| t.token).collect();
        assert_eq!(top, sc.top[row].iter().map(|t| t.0).collect::<Vec<_>>(), "token {k}");
        // Greedy: the token is the top one.
        assert_eq!(it.token, top[0]);
    }
}

#[test]
fn prompt_cache_continuation_equals_fresh_greedy() {
    let r = reference();
    let hello = u32s(&r["prompts"][0]["ids"]);
    let mut s = session(4);
    let (first, cached) = run(&mut s, &hello, greedy(6));
    assert_eq!(cached, 0);
    let mut cont = hello.clone();
    cont.extend(first.iter().map(|i| i.token));
    // The KV cache holds the prompt and all generated tokens but the last (never evaluated).
    assert_eq!(s.cached(), &cont[..cont.len() - 1]);
    let (second, cached) = run(&mut s, &cont, greedy(6));
    let shared = cont.len() - 1;
    assert!(cached >= shared, "cachedTokens {cached} < shared prefix {shared}");
    assert_eq!(s.stats().cached_tokens, cached);
    let (fresh, _) = run(&mut session(4), &cont, greedy(6));
    // reuse_prompt false: the same prompt again is evaluated from position 0, same tokens.
    let (again, none) = run(&mut s, &cont, GenerateOptions { reuse_prompt: false, ..greedy(6) });
    assert_eq!((none, s.stats().cached_tokens), (0, 0));
    assert_eq!(again.iter().map(|i| i.token).collect::<Vec<_>>(), fresh.iter().map(|i| i.token).collect::<Vec<_>>());
    assert_eq!(second.iter().map(|i| i.token).collect::<Vec<_>>(), fresh.iter().map(|i| i.token).collect::<Vec<_>>());
    // And a fresh greedy run of 12 from the prompt gives the same 12 tokens.
    let (twelve, _) = run(&mut session(32), &hello, greedy(12));
    let both: Vec<u32> = first.iter().chain(&second).map(|i| i.token).collect();
    assert_eq!(both, twelve.iter().map(|i| i.token).collect::<Vec<_>>());
    // logits() uses the cache too and equals a fresh evaluation.
    let a = block_on(s.logits(&cont)).unwrap();
    let b = block_on(session(32).logits(&cont)).unwrap();
    assert!(max_diff(&a, &b) <= 1e-5);
}

#[test]
fn stop_strings_cut_text_split_across_tokens() {
    let r = reference();
    let hello = u32s(&r["prompts"][0]["ids"]);
    let mut s = session(32);
    let (items, _) = run(&mut s, &hello, greedy(16));
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
    let full: String = texts.concat();
    // A stop string made of the end of one token's text and the start of the next's.
    let k = (2..texts.len() - 1).find(|&k| texts[k].len() >= 2 && texts[k + 1].len() >= 2).unwrap();
    let (a, b) = (texts[k], texts[k + 1]);
    let stop = format!("{}{}", &a[a.len() - 2..], &b[..2]);
    let at = full.find(&stop).unwrap();
    let opts = GenerateOptions { stop: vec![stop.clone()], ..greedy(16) };
    let (cut, _) = run(&mut s, &hello, opts);
    let text: String = cut.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(text, full[..at], "stop {stop:?}");
    assert_eq!(s.stats().stop, Some(StopReason::Stop));
    assert!(!text.contains(&stop));
    // Tokens after the one where the stop string begins are not yielded.
    assert_eq!(cut.len(), k + 1);
}

#[test]
fn eos_ignore_eos_logit_bias_and_context() {
    let r = reference();
    let hello = u32s(&r["prompts"][0]["ids"]);
    let mut s = session(32);
    let eos = s.tokenizer.eos().unwrap();
    // Forcing the end-of-text token ends the run before yielding anything.
    let opts = GenerateOptions { logit_bias: vec![(eos, 1e4)], ..greedy(5) };
    let (items, _) = run(&mut s, &hello, opts);
    assert!(items.is_empty());
    assert_eq!(s.stats().stop, Some(StopReason::Eos));
    // ignoreEos bans it whatever its bias.
    let opts = GenerateOptions { logit_bias: vec![(eos, 1e4)], ignore_eos: true, ..greedy(5) };
    let (items, _) = run(&mut s, &hello, opts);
    assert_eq!(items.len(), 5);
    assert!(items.iter().all(|i| i.token != eos));
    assert_eq!(s.stats().stop, Some(StopReason::MaxTokens));
    // -inf bans the greedy choice: the next best comes instead.
    let (plain, _) = run(&mut s, &hello, greedy(1));
    let opts = GenerateOptions { logit_bias: vec![(plain[0].token, f32::NEG_INFINITY)], top_logprobs: 2, ..greedy(1) };
    let (banned, _) = run(&mut s, &hello, opts);
    assert_ne!(banned[0].token, plain[0].token);
    assert_eq!(banned[0].top[1].token, banned[0].token, "the raw distribution still ranks the banned token first");
    // Prompt and output fit the context: at most n_ctx - prompt tokens.
    let n_ctx = s.model.n_ctx();
    let long: Vec<u32> = (0..n_ctx as u32 - 3).map(|i| 100 + i).collect();
    let (items, _) = run(&mut s, &long, greedy(100));
    assert_eq!(items.len(), 3);
    assert_eq!(s.stats().stop, Some(StopReason::ContextFull));
}

#[test]
fn every_unknown_option_is_refused_by_name() {
    for (json, key) in [(r#"{"ctx":512}"#, "ctx"), (r#"{"threads":1}"#, "threads"), (r#"{"top_k":3}"#, "top_k")] {
        let e = parse_generate(json).unwrap_err();
        assert!(
            matches!(&e, ModelError::Invalid(m) if m.starts_with(&format!("generation options: unknown option \"{key}\""))),
            "{e}"
        );
        let e = parse_score(json).unwrap_err();
        assert!(e.to_string().starts_with(&format!("score options: unknown option \"{key}\"")), "{e}");
        let e = parse_trace(json).unwrap_err();
        assert!(e.to_string().starts_with(&format!("trace options: unknown option \"{key}\"")), "{e}");
    }
    // Every documented key is accepted.
    let all = r#"{"maxTokens":1,"temperature":0,"topK":1,"topP":1,"minP":0.1,"seed":1,"repeatPenalty":1,
        "repeatLastN":8,"topLogprobs":2,"stop":["x"],"logitBias":{"5":-1.5,"6":"-Infinity"},"ignoreEos":true,"reusePrompt":false,
        "hooks":[{"at":"blocks.0.hook_resid_pre","op":"scale","value":2}],"n":1,"numBeams":1,"lengthPenalty":1}"#;
    let o = parse_generate(all).unwrap();
    assert_eq!(GENERATE_KEYS.len(), 17);
    assert_eq!(o.hooks.len(), 1);
    let e = parse_generate(r#"{"hooks":[{"at":"hook_embed","op":"zero","heads":1}]}"#).unwrap_err();
    assert!(e.to_string().contains("unknown option \"heads\" (known: at, op, head, pos, index, value)"), "{e}");
    assert!(!o.reuse_prompt);
    assert!(parse_generate("{}").unwrap().reuse_prompt, "the prompt cache is on by default");
    let e = parse_generate(r#"{"reusePrompt":0}"#).unwrap_err();
    assert_eq!(e.to_string(), "generation options: reusePrompt must be true or false, got 0");
    assert_eq!(o.logit_bias, vec![(5, -1.5), (6, f32::NEG_INFINITY)]);
    assert_eq!((o.sampling.min_p, o.top_logprobs, o.ignore_eos), (0.1, 2, true));
    assert_eq!(parse_score(r#"{"topK":7}"#).unwrap().top_k, 7);
    assert_eq!(parse_trace(r#"{"taps":["attn","l0.ffn_gelu"]}"#).unwrap(), ["attn", "l0.ffn_gelu"]);
    assert!(parse_trace("{}").is_err());
    assert!(parse_generate(r#"{"logitBias":{"x":1}}"#).is_err());
    assert!(parse_generate(r#"{"stop":[1]}"#).is_err());
}

#[test]
fn a_call_out_of_order_leaves_the_run_usable() {
    let mut s = session(4);
    assert!(matches!(block_on(s.next()), Err(ModelError::Invalid(m)) if m.contains("no generation was started")));
    s.start(vec![15496, 11, 616, 1438, 318], greedy(2)).unwrap();
    let e = block_on(s.next()).unwrap_err();
    assert!(e.to_string().contains("the prompt is not evaluated yet (0 of 5 tokens"), "{e}");
    while !block_on(s.prompt_step()).unwrap() {}
    assert_eq!(block_on(s.next()).unwrap().unwrap().token, 31026);
}

#[test]
fn a_trace_leaves_a_valid_prompt_cache() {
    // The traced graph is pruned to the taps and the K/V stores: the cache it leaves must
    // still equal a fresh evaluation's.
    let r = reference();
    let fox = u32s(&r["prompts"][1]["ids"]);
    let mut s = session(4);
    block_on(s.trace(&fox[..6], &["l0.attn_norm".to_string()])).unwrap();
    assert_eq!(s.cached(), &fox[..6]);
    let cached = block_on(s.logits(&fox)).unwrap();
    let fresh = block_on(session(4).logits(&fox)).unwrap();
    assert!(max_diff(&cached, &fresh) <= 1e-5);
}
