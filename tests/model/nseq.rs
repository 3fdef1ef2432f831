//! Several sequences and beam search over the KV cache with sequence ids: `n` sampled
//! sequences equal one-sequence runs seeded `seed + i`; a multi-sequence batch's logits equal
//! the single-sequence path's; beam search equals Hugging Face's `generate(num_beams=k, …)`
//! (tests/fixtures/tiny-gpt2.beam-ref.json, made by tests/fixtures/make_beam_ref.py).

use std::path::Path;
use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Batch, Gpt2Options, Logits, SeqPos};
use ggweb::model::loader::load_from_path;
use ggweb::model::sampling::SamplingParams;
use ggweb::model::session::{GenerateOptions, Item, Session, StopReason};
use serde_json::Value;

use crate::support::fixtures;

fn session_at(path: &Path, n_batch: usize) -> Session {
    let opts = Gpt2Options { n_batch, ..Gpt2Options::default() };
    Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), opts).unwrap())
}

fn models() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v = vec![root.join("tests/fixtures/tiny-f32.gguf")];
    for t in ["f32", "f16", "q8_0"] {
        v.push(fixtures::models_dir().join(format!("tiny-gpt2-{t}.gguf")));
    }
    v
}

fn run(s: &mut Session, prompt: &[u32], opts: GenerateOptions) -> Vec<Item> {
    s.start(prompt.to_vec(), opts).unwrap();
    while !block_on(s.prompt_step()).unwrap() {}
    let mut items = Vec::new();
    while let Some(it) = block_on(s.next()).unwrap() {
        items.push(it);
    }
    items
}

fn sampling(seed: u64) -> SamplingParams {
    SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, seed, ..SamplingParams::default() }
}

#[test]
fn n_sequences_equal_single_runs_seeded_seed_plus_i() {
    for path in models() {
        let mut s = session_at(&path, 32);
        let prompt = s.tokenizer.encode("The quick brown fox", false);
        let n = 4;
        let seed = u64::MAX - 1; // seed + i wraps
        let opts = GenerateOptions { max_tokens: 12, sampling: sampling(seed), n, ..GenerateOptions::default() };
        let items = run(&mut s, &prompt, opts.clone());
        let stats = s.stats();
        assert_eq!(stats.tokens, items.len());
        let mut total = 0;
        let mut distinct = std::collections::HashSet::new();
        for i in 0..n {
            let mine: Vec<u32> = items.iter().filter(|it| it.seq == i).map(|it| it.token).collect();
            let text: String = items.iter().filter(|it| it.seq == i).map(|it| it.text.as_str()).collect();
            let one = GenerateOptions { n: 1, sampling: sampling(seed.wrapping_add(i as u64)), ..opts.clone() };
            let single = run(&mut s, &prompt, one);
            let want: Vec<u32> = single.iter().map(|it| it.token).collect();
            assert_eq!(mine, want, "{}: sequence {i}", path.display());
            assert_eq!(text, single.iter().map(|it| it.text.as_str()).collect::<String>());
            assert!(!mine.is_empty());
            total += mine.len();
            distinct.insert(mine);
        }
        assert_eq!(total, items.len());
        assert!(distinct.len() > 1, "{}: the sequences differ", path.display());
    }
}

#[test]
fn n_sequences_stop_one_by_one() {
    // A stop string one sequence meets: that sequence ends early, the others run on, each as its single run.
    let path = fixtures::models_dir().join("tiny-gpt2-f32.gguf");
    let mut s = session_at(&path, 32);
    let prompt = s.tokenizer.encode("Hello, my name is", false);
    let base = GenerateOptions { max_tokens: 10, sampling: sampling(7), ..GenerateOptions::default() };
    let first = run(&mut s, &prompt, GenerateOptions { sampling: sampling(8), ..base.clone() });
    let stop: String = first[4].text.clone() + &first[5].text;
    assert!(!stop.is_empty());
    let opts = GenerateOptions { n: 3, stop: vec![stop.clone()], ..base.clone() };
    let items = run(&mut s, &prompt, opts.clone());
    let mut lens = Vec::new();
    for i in 0..3 {
        let mine: Vec<u32> = items.iter().filter(|it| it.seq == i).map(|it| it.token).collect();
        let single = run(&mut s, &prompt, GenerateOptions { n: 1, sampling: sampling(7 + i as u64), ..opts.clone() });
        assert_eq!(mine, single.iter().map(|it| it.token).collect::<Vec<_>>(), "sequence {i}");
        lens.push(mine.len());
    }
    assert!(lens[1] < 10, "sequence 1 met its stop string: {lens:?}");
    assert!(lens.contains(&10), "another ran to maxTokens: {lens:?}");
}

#[test]
fn multi_sequence_batch_logits_equal_single_path() {
    let path = fixtures::models_dir().join("tiny-gpt2-f32.gguf");
    let mut s = session_at(&path, 4);
    let a = s.tokenizer.encode("The quick brown fox jumps", false);
    let b = s.tokenizer.encode("Hello world, this is", false);
    let want_a = block_on(s.model.decode(Batch::last(&a, 0))).unwrap().logits;
    let want_b = block_on(s.model.decode(Batch::last(&b, 0))).unwrap().logits;
    // Both texts as sequences 0 and 1 of one batch, interleaved, in chunks of n_batch 4.
    let mut toks = Vec::new();
    let mut seq = Vec::new();
    for i in 0..a.len().max(b.len()) {
        for (j, t) in [&a, &b].into_iter().enumerate() {
            if let Some(&x) = t.get(i) {
                toks.push(x);
                seq.push(SeqPos { pos: i as u32, seqs: 1 << j });
            }
        }
    }
    s.model.kv.set_causal(0);
    let out =
        block_on(s.model.decode(Batch { tokens: &toks, logits: Logits::All, seq: &seq, ..Batch::default() })).unwrap();
    let v = s.model.hparams.n_vocab;
    let last = |j: u64| seq.iter().rposition(|p| p.seqs == 1 << j).unwrap();
    let diff = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max);
    let (ra, rb) = (&out.logits[last(0) * v..][..v], &out.logits[last(1) * v..][..v]);
    assert!(diff(ra, &want_a) < 1e-5, "{}", diff(ra, &want_a));
    assert!(diff(rb, &want_b) < 1e-5, "{}", diff(rb, &want_b));
    assert_eq!(s.model.kv.used(), a.len() + b.len());
}

#[test]
fn beam_search_equals_hugging_face() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-gpt2.beam-ref.json");
    let r: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    assert_eq!(r["version"], 1);
    let mut s = session_at(&fixtures::models_dir().join("tiny-gpt2-f32.gguf"), 32);
    for c in r["cases"].as_array().unwrap() {
        let ids: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let k = c["num_beams"].as_u64().unwrap() as usize;
        let opts = GenerateOptions {
            num_beams: k,
            length_penalty: c["length_penalty"].as_f64().unwrap() as f32,
            max_tokens: c["max_new_tokens"].as_u64().unwrap() as usize,
            // HF's sequence_bias on eos: added to its log-probability, as logit_bias is here.
            logit_bias: match c["eos_bias"].as_f64().unwrap() as f32 {
                0.0 => vec![],
                b => vec![(50256, b)],
            },
            ..GenerateOptions::default()
        };
        let items = run(&mut s, &ids, opts);
        let beams = s.beams().to_vec();
        let want = c["beams"].as_array().unwrap();
        assert_eq!(beams.len(), want.len());
        for (got, w) in beams.iter().zip(want) {
            let wt: Vec<u32> = w["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(got.tokens, wt, "case {c}");
            let ws = w["score"].as_f64().unwrap() as f32;
            assert!((got.score - ws).abs() <= 1e-4, "score {} vs {ws}", got.score);
        }
        // The items are the best beam's tokens (without a closing eos), all of sequence 0.
        let best = &beams[0].tokens;
        let eos = best.last() == Some(&50256);
        assert_eq!(items.iter().map(|it| it.token).collect::<Vec<_>>(), best[..best.len() - eos as usize]);
        assert!(items.iter().all(|it| it.seq == 0));
        assert_eq!(s.stats().stop, Some(if eos { StopReason::Eos } else { StopReason::MaxTokens }));
        let greedy: Vec<u32> = c["greedy"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_ne!(beams[0].tokens, greedy, "the case tells beam search from greedy");
    }
    // Beams still there after the generation ends; a plain generation after it is unaffected.
    let ids: Vec<u32> = r["cases"][0]["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let greedy = GenerateOptions { max_tokens: 8, sampling: SamplingParams::greedy(), ..GenerateOptions::default() };
    let g = run(&mut s, &ids, greedy);
    let want: Vec<u32> =
        r["cases"][0]["greedy"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    assert_eq!(g.iter().map(|it| it.token).collect::<Vec<_>>(), want);
}

#[test]
fn beam_search_that_cannot_fit_the_context_is_refused() {
    let mut s = session_at(&fixtures::models_dir().join("tiny-gpt2-f32.gguf"), 32);
    let ids = s.tokenizer.encode("Hello", false);
    let opts = GenerateOptions { num_beams: 8, max_tokens: 40, ..GenerateOptions::default() };
    assert!(matches!(s.start(ids.clone(), opts), Err(ggweb::model::ModelError::ContextFull { .. })));
    let both = GenerateOptions { num_beams: 2, n: 2, ..GenerateOptions::default() };
    assert!(matches!(s.start(ids, both), Err(ggweb::model::ModelError::Invalid(_))));
}

#[test]
fn options_n_num_beams_length_penalty_parse_strictly() {
    use ggweb::common::options::parse_generate;
    let o = parse_generate(r#"{"n":4,"seed":3}"#).unwrap();
    assert_eq!((o.n, o.num_beams, o.length_penalty), (4, 0, 1.0));
    let o = parse_generate(r#"{"numBeams":3,"lengthPenalty":-0.5,"maxTokens":5}"#).unwrap();
    assert_eq!((o.n, o.num_beams, o.length_penalty, o.max_tokens), (1, 3, -0.5, 5));
    for (json, msg) in [
        (r#"{"n":0}"#, "generation options: n must be an integer from 1 to 64, got 0"),
        (r#"{"n":65}"#, "generation options: n must be an integer from 1 to 64, got 65"),
        (r#"{"numBeams":0}"#, "generation options: numBeams must be an integer from 1 to 64, got 0"),
        (r#"{"lengthPenalty":"1"}"#, "generation options: lengthPenalty must be a number from -100 to 100, got \"1\""),
        (r#"{"n":2,"numBeams":2}"#, "generation options: n (2) and numBeams (2) cannot both be above 1"),
    ] {
        assert_eq!(parse_generate(json).unwrap_err().to_string(), msg);
    }
}

#[test]
fn hooks_take_one_sequence() {
    use ggweb::common::options::parse_generate;
    let path = fixtures::models_dir().join("tiny-gpt2-f32.gguf");
    let mut s = session_at(&path, 4);
    let ids = s.tokenizer.encode("Hello world", false);
    let hooks = r#""hooks":[{"at":"blocks.0.hook_resid_pre","op":"scale","value":2}]"#;
    for extra in [r#""n":2"#, r#""numBeams":2"#] {
        let opts = parse_generate(&format!("{{{hooks},{extra}}}")).unwrap();
        let e = s.start(ids.clone(), opts).unwrap_err().to_string();
        assert!(e.contains("hooks take one sequence"), "{e}");
    }
    // The model context refuses a multi-sequence batch with hooks, and keeps its cells free.
    let h = parse_generate(&format!("{{{hooks}}}")).unwrap().hooks;
    let (toks, seq) = ([ids[0], ids[0]], [SeqPos { pos: 0, seqs: 1 }, SeqPos { pos: 0, seqs: 2 }]);
    let batch = Batch { tokens: &toks, logits: Logits::All, seq: &seq, hooks: &h, ..Batch::default() };
    let e = block_on(s.model.decode(batch)).unwrap_err().to_string();
    assert!(e.contains("hooks take one sequence"), "{e}");
    assert_eq!(s.model.kv.used(), 0);
    // One hooked sequence generates, and differs from the unhooked run; n = 2 after it
    // (no hooks) gives sequence 0 equal to a fresh unhooked run: the hooked cache is not reused.
    let greedy = |extra: &str| parse_generate(&format!(r#"{{"temperature":0,"maxTokens":4,"ignoreEos":true{extra}}}"#));
    let hooked = run(&mut s, &ids, greedy(&format!(",{hooks}")).unwrap());
    let two = run(&mut s, &ids, greedy(r#","n":2"#).unwrap());
    let plain = run(&mut session_at(&path, 4), &ids, greedy("").unwrap());
    let toks_of = |items: &[Item], q: usize| items.iter().filter(|i| i.seq == q).map(|i| i.token).collect::<Vec<_>>();
    assert_eq!(hooked.len(), 4);
    assert_ne!(toks_of(&hooked, 0), toks_of(&plain, 0), "the hook changes the greedy tokens");
    assert_eq!(toks_of(&two, 0), toks_of(&plain, 0));
    assert_eq!(toks_of(&two, 1), toks_of(&plain, 0));
}
