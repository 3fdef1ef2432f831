//! The `ggweb` binary's commands, run as a user would, against the llama.cpp-made tiny
//! GPT-2 and its Hugging Face reference (`tests/fixtures/llamacpp/`).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::fixtures;

fn model() -> String {
    fixtures::models_dir().join("tiny-gpt2-f32.gguf").display().to_string()
}

fn reference_prompt(key: &str) -> Value {
    let r: Value = fixtures::hf_reference();
    r["prompts"].as_array().unwrap().iter().find(|p| p["key"] == key).unwrap().clone()
}

/// Arrays stored as strings of JSON in the reference file.
fn ids(v: &Value) -> Vec<u64> {
    let v: Value = match v {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        v => v.clone(),
    };
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn ggweb(args: &[&str], stdin: &str) -> (i32, String, String) {
    ggweb_env(args, stdin, &[])
}

fn ggweb_env(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ggweb"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn generate_json_greedy_equals_hf() {
    let p = reference_prompt("hello");
    let want = ids(&p["greedy_ids"]);
    let n = want.len().to_string();
    let (code, out, err) = ggweb(
        &["generate", "--model", &model(), "--prompt", "Hello, my name is", "--temp", "0", "-n", &n, "--json"],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids(&v["prompt_tokens"]), ids(&p["ids"]));
    assert_eq!(ids(&v["tokens"]), want);
    assert_eq!(v["text"], p["greedy_text"]);
}

#[test]
fn generate_streams_text_and_seeds_reproduce() {
    let run = |seed: &str| {
        let (code, out, err) =
            ggweb(&["generate", "-m", &model(), "-p", "Once upon", "-n", "12", "--seed", seed, "--temp", "1.0"], "");
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with("Once upon"), "{out}");
        out
    };
    assert_eq!(run("5"), run("5"));
}

#[test]
fn logits_rows_match_hf_and_batches() {
    let p = reference_prompt("fox");
    let (code, out, err) =
        ggweb(&["logits", "--model", &model(), "--prompt", p["text"].as_str().unwrap(), "--batch", "3"], "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids(&v["tokens"]), ids(&p["ids"]));
    let rows = v["logits"].as_array().unwrap();
    assert_eq!(rows.len(), ids(&p["ids"]).len());
    let want = p["logits"].as_array().unwrap();
    for (pos, row) in ids(&p["logits_positions"]).iter().zip(want) {
        let got = rows[*pos as usize].as_array().unwrap();
        assert_eq!(got.len(), 50257);
        let worst = got
            .iter()
            .zip(row.as_array().unwrap())
            .map(|(a, b)| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-4, "position {pos}: {worst}");
    }
}

#[test]
fn tokenize_and_decode_lines() {
    let (code, out, err) = ggweb(&["tokenize", "--model", &model()], "\"Hello, my name is\"\n\"<|endoftext|>\"\n");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "[15496,11,616,1438,318]");
    // Literal by default: the special token's text is ordinary characters.
    assert_ne!(lines[1], "[50256]");
    let (_, out, _) = ggweb(&["tokenize", "--model", &model(), "--special"], "\"<|endoftext|>\"\n");
    assert_eq!(out.trim(), "[50256]");
    let (code, out, _) = ggweb(&["tokenize", "--model", &model(), "--decode"], "[15496,11,616,1438,318]\n");
    assert_eq!(code, 0);
    assert_eq!(out.trim(), "\"Hello, my name is\"");
}

#[test]
fn bench_json_reports_speed_and_memory() {
    let (code, out, err) = ggweb(&["bench", "--model", &model(), "-p", "16", "-n", "4", "--reps", "1", "--json"], "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["prompt_tok_s"].as_f64().unwrap() > 0.0 && v["gen_tok_s"].as_f64().unwrap() > 0.0);
    // 2 layers × 2 (K, V) × n_ctx 128 × n_embd 64 × 4 bytes
    assert_eq!(v["memory"]["kv"], 2 * 2 * 128 * 64 * 4);
    assert!(v["memory"]["weights"].as_u64().unwrap() > 25_000_000);
    assert_eq!(v["webgpu_per_token"], Value::Null, "no WebGPU counters on the CPU");
    // One repetition: its spread is the one value.
    for (med, sp) in [("prompt_tok_s", "prompt_tok_s_spread"), ("gen_tok_s", "gen_tok_s_spread")] {
        assert_eq!(v[sp][0], v[med], "{sp}");
        assert_eq!(v[sp][1], v[med], "{sp}");
    }
}

/// `--reps`: the median lies inside the repetitions' spread (min–max), in the JSON and in
/// the table.
#[test]
fn bench_reports_the_spread_of_its_repetitions() {
    let (code, out, err) = ggweb(&["bench", "--model", &model(), "-p", "8", "-n", "2", "--reps", "3", "--json"], "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    for (med, sp, all) in [
        ("prompt_tok_s", "prompt_tok_s_spread", "prompt_tok_s_all"),
        ("gen_tok_s", "gen_tok_s_spread", "gen_tok_s_all"),
    ] {
        let all: Vec<f64> = v[all].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(all.len(), 3);
        let (lo, hi) = (v[sp][0].as_f64().unwrap(), v[sp][1].as_f64().unwrap());
        assert_eq!(lo, all.iter().copied().fold(f64::INFINITY, f64::min), "{sp}");
        assert_eq!(hi, all.iter().copied().fold(0.0, f64::max), "{sp}");
        let m = v[med].as_f64().unwrap();
        assert!(lo <= m && m <= hi && lo > 0.0, "{med} {m} outside {lo}–{hi}");
    }
    let (code, out, err) = ggweb(&["bench", "--model", &model(), "-p", "8", "-n", "2", "--reps", "2"], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| test | tokens/s (median of 2) | min–max | tokens per CPU second | min–max |"), "{out}");
    let pp = out.lines().find(|l| l.starts_with("| pp8 |")).unwrap_or_else(|| panic!("{out}"));
    // | pp8 | median | lo–hi | cpu median | lo–hi |
    let cells: Vec<&str> = pp.split('|').map(str::trim).collect();
    let (lo, hi) = cells[3].split_once('–').unwrap();
    let (lo, hi, m): (f64, f64, f64) = (lo.parse().unwrap(), hi.parse().unwrap(), cells[2].parse().unwrap());
    assert!(lo <= m && m <= hi, "{pp}");
}

/// `--n-past`: one row per depth, in order, slowdown against the first; bad depth lists and
/// depths past the context are messages.
#[test]
fn bench_n_past_reports_each_depth() {
    let args =
        ["bench", "--model", &model(), "--n-past", "8,100", "-n", "4", "--reps", "1", "--kv-type", "f16", "--json"];
    let (code, out, err) = ggweb(&args, "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!((v["kv_type"].as_str(), v["n_ctx"].as_u64(), v["n_gen"].as_u64()), (Some("f16"), Some(128), Some(4)));
    let d = v["depths"].as_array().unwrap();
    assert_eq!(d.iter().map(|r| r["n_past"].as_u64().unwrap()).collect::<Vec<_>>(), [8, 100]);
    assert_eq!(d[0]["slowdown"], 1.0);
    assert!(d.iter().all(|r| r["gen_tok_s"].as_f64().unwrap() > 0.0), "{d:?}");
    for (bad, why) in [("100,8", "increasing"), ("8,x", "'x'"), ("125", "exceeds the context (128)")] {
        let (code, _, err) = ggweb(&["bench", "--model", &model(), "--n-past", bad, "-n", "4"], "");
        assert_eq!(code, 1, "--n-past {bad}");
        assert!(err.starts_with("ggweb: --n-past") && err.contains(why), "--n-past {bad}: {err}");
    }
}

#[test]
fn errors_are_messages_not_panics() {
    let cases: &[&[&str]] = &[
        &["generate", "--model", "/nonexistent.gguf", "--prompt", "x"],
        &["generate", "--model", &model()],
        &["generate", "--model", &model(), "--prompt", "x", "--ctx", "4096"],
        &["logits", "--model", &model(), "--prompt", "x", "--batch", "0"],
        &["bench", "--model", &model(), "-p", "200", "-n", "10"],
        &["frobnicate"],
        &["generate", "--model", &model(), "--prompt", "x", "--bogus", "1"],
    ];
    for args in cases {
        let (code, _, err) = ggweb(args, "");
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.starts_with("ggweb: ") && !err.contains("panicked"), "{args:?}: {err}");
    }
    let (code, _, err) = ggweb(&["tokenize", "--model", &model(), "--decode"], "[99999999]\n");
    assert_eq!(code, 1);
    assert!(err.contains("99999999"), "{err}");
    let (code, _, err) = ggweb(&["generate", "--model", &model(), "--prompt", &"word ".repeat(200), "-n", "4"], "");
    assert_eq!(code, 1);
    assert!(err.contains("context full"), "{err}");
}

/// `--backend webgpu` natively (Vulkan; lavapipe on machines without a GPU): the same greedy
/// tokens as the CPU and HF, logits within 1e-3 of HF, and a bench.
#[test]
fn webgpu_backend_generates_logits_and_benches() {
    let p = reference_prompt("hello");
    let want = ids(&p["greedy_ids"]);
    let n = want.len().to_string();
    let (code, out, err) = ggweb(
        &[
            "generate",
            "--model",
            &model(),
            "--prompt",
            "Hello, my name is",
            "--temp",
            "0",
            "-n",
            &n,
            "--json",
            "--backend",
            "webgpu",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids(&v["tokens"]), want);

    let (code, out, err) =
        ggweb(&["logits", "--model", &model(), "--prompt", "Hello, my name is", "--backend", "webgpu"], "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let rows = v["logits"].as_array().unwrap();
    for (pos, row) in ids(&p["logits_positions"]).iter().zip(p["logits"].as_array().unwrap()) {
        let worst = rows[*pos as usize]
            .as_array()
            .unwrap()
            .iter()
            .zip(row.as_array().unwrap())
            .map(|(a, b)| (a.as_f64().unwrap() - b.as_f64().unwrap()).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-3, "position {pos}: {worst}");
    }

    let (code, out, err) = ggweb(
        &["bench", "--model", &model(), "-p", "8", "-n", "2", "--reps", "1", "--json", "--backend", "webgpu"],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["backend"], "WebGPU");
    // A token all on WebGPU: one submit, one read-back of the n_vocab logits, and (2 layers)
    // 3 dispatches for the embeddings, 5 per layer and 1 for the head (crate/webgpu/fuse.rs's
    // chains; tests/webgpu/sched_webgpu.rs derives them from the graph). The 8-token prompt is
    // one chunk, 3 dispatches more: in its graph the allocator puts the last layer's attention
    // result where the KQ mask was (free after that layer's softmax), and a fused kernel never
    // writes what its other workgroups still read, so those four nodes run unfused.
    let (tg, pp) = (&v["webgpu_per_token"]["tg"], &v["webgpu_per_token"]["pp"]);
    let dispatches = 3.0 + 5.0 * 2.0 + 1.0;
    let prompt_dispatches = dispatches + 3.0;
    assert_eq!((tg["submits"].as_f64(), tg["readbacks"].as_f64()), (Some(1.0), Some(1.0)), "{v}");
    assert_eq!((tg["readbackBytes"].as_f64(), tg["dispatches"].as_f64()), (Some(50257.0 * 4.0), Some(dispatches)));
    assert_eq!(
        (pp["submits"].as_f64(), pp["dispatches"].as_f64()),
        (Some(1.0 / 8.0), Some(prompt_dispatches / 8.0)),
        "{v}"
    );
    assert!(tg["encodeMs"].as_f64().unwrap() > 0.0, "{v}");
}

/// The WebGPU kernel variants forced through the environment (scripts/device-bench.sh's
/// comparisons): each gives HF's greedy tokens, `GGWEB_WEBGPU_INFO` names the one in use,
/// and a bad value is a message naming the variable.
#[test]
fn webgpu_kernel_variants_from_the_environment() {
    let p = reference_prompt("hello");
    let want = ids(&p["greedy_ids"]);
    let n = want.len().to_string();
    let args = [
        "generate",
        "--model",
        &model(),
        "--prompt",
        "Hello, my name is",
        "--temp",
        "0",
        "-n",
        &n,
        "--json",
        "--backend",
        "webgpu",
    ];
    for (sg, f16) in [("1", "1"), ("0", "0")] {
        let env = [
            ("GGWEB_WEBGPU_KERNELS", "workgroup"),
            ("GGWEB_WEBGPU_SUBGROUPS", sg),
            ("GGWEB_WEBGPU_F16", f16),
            ("GGWEB_WEBGPU_INFO", "1"),
        ];
        let (code, out, err) = ggweb_env(&args, "", &env);
        if code != 0 && sg == "1" && err.contains("lacks") {
            eprintln!("NOTE: this adapter lacks subgroups or shader-f16: {err}");
            continue;
        }
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(ids(&v["tokens"]), want, "subgroups {sg}, f16 {f16}");
        let on = |b: &str| if b == "1" { "true" } else { "false" };
        let info = format!("subgroup_kernels: {}, f16_kernels: {}", on(sg), on(f16));
        assert!(err.contains(&info) && err.contains("mat_mul_kernels: Workgroup"), "{err}");
    }
    for (k, v, msg) in [
        ("GGWEB_WEBGPU_SUBGROUPS", "yes", "GGWEB_WEBGPU_SUBGROUPS=yes: expected 0 or 1"),
        ("GGWEB_WEBGPU_KERNELS", "tiled", "GGWEB_WEBGPU_KERNELS=tiled: expected workgroup or per-row"),
    ] {
        let (code, _, err) = ggweb_env(&args, "", &[(k, v)]);
        assert_ne!(code, 0);
        assert!(err.contains(msg), "{err}");
    }
}

/// tests/fixtures/tiny-gpt2.inside-ref.json (made by tests/fixtures/make_inside_ref.py).
fn inside_ref(key: &str) -> Value {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-gpt2.inside-ref.json");
    let r: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    r["prompts"].as_array().unwrap().iter().find(|p| p["key"] == key).unwrap().clone()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn worst(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn score_json_matches_hf() {
    let p = inside_ref("fox");
    let text = p["text"].as_str().unwrap();
    let (code, out, err) =
        ggweb(&["score", "--model", &model(), "--prompt", text, "--top-k", "5", "--batch", "4", "--json"], "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids(&v["tokens"]), ids(&p["ids"]));
    // f32 against HF's f32: summation order only (the bound).
    assert!(worst(&floats(&v["logprobs"]), &floats(&p["logprobs"])) <= 1e-4);
    assert!(worst(&floats(&v["entropies"]), &floats(&p["entropies"])) <= 1e-4);
    let (ranks, lo, hi) = (ids(&v["ranks"]), ids(&p["rank_lo"]), ids(&p["rank_hi"]));
    for i in 0..ranks.len() {
        assert!(lo[i] <= ranks[i] && ranks[i] <= hi[i], "row {i}: {} not in [{}, {}]", ranks[i], lo[i], hi[i]);
    }
    assert_eq!(v["top"][0].as_array().unwrap().len(), 5);
    assert_eq!(v["top"][0][0]["token"], p["top5"][0][0][0]);
}

#[test]
fn trace_json_matches_hf() {
    let p = inside_ref("hello");
    let (code, out, err) = ggweb(
        &["trace", "--model", &model(), "--prompt", "Hello, my name is", "--taps", "attn,hidden,l0.ffn_gelu", "--json"],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    for (l, want) in p["attentions"].as_array().unwrap().iter().enumerate() {
        assert!(worst(&floats(&v["attn"][l]), &floats(want)) <= 1e-4, "attn {l}");
    }
    for (l, want) in p["hidden"].as_array().unwrap().iter().enumerate() {
        assert!(worst(&floats(&v["hidden"][l]), &floats(want)) <= 1e-4, "hidden {l}");
    }
    assert_eq!(v["nodes"]["l0.ffn_gelu"]["shape"], serde_json::json!([5, 256]));
    let (code, _, err) = ggweb(&["trace", "--model", &model(), "--prompt", "Hi", "--taps", "l7.nope"], "");
    assert_eq!(code, 1);
    assert!(err.contains("no graph node named 'l7.nope'"), "{err}");
}

#[test]
fn generate_stop_and_top_logprobs_agree_with_score() {
    let base = ["generate", "--model", &model(), "--prompt", "Hello, my name is", "--temp", "0", "-n", "12", "--json"];
    let (code, out, err) = ggweb(&[&base[..], &["--top-logprobs", "3"]].concat(), "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let (prompt, toks) = (ids(&v["prompt_tokens"]), ids(&v["tokens"]));
    let text = v["text"].as_str().unwrap().to_string();
    assert_eq!(v["stop"], "maxTokens");
    // The same text scored in one pass gives the same logprobs (one token at a time vs a
    // batch: summation order only).
    // By ids: the generated text would re-tokenize differently.
    let mut all = prompt.clone();
    all.extend(&toks);
    let list: Vec<String> = all.iter().map(|t| t.to_string()).collect();
    let (code, out, err) = ggweb(&["score", "--model", &model(), "--ids", &list.join(","), "--json"], "");
    assert_eq!(code, 0, "{err}");
    let s: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids(&s["tokens"]), all);
    let lp = floats(&s["logprobs"]);
    assert!(worst(&floats(&v["logprobs"]), &lp[prompt.len() - 1..]) <= 1e-5);
    assert_eq!(v["top_logprobs"][0].as_array().unwrap().len(), 3);
    assert_eq!(v["top_logprobs"][0][0]["token"].as_u64().unwrap(), toks[0]);
    // A stop string inside the text: the output ends right before it.
    let stop: String = text.chars().skip(4).take(3).collect();
    let at = text.find(&stop).unwrap();
    let (code, out, err) = ggweb(&[&base[..], &["--stop", &stop]].concat(), "");
    assert_eq!(code, 0, "{err}");
    let c: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(c["text"].as_str().unwrap(), &text[..at]);
    assert_eq!(c["stop"], "stop");
}

#[test]
fn every_command_answers_help_and_version_and_refuses_unknown_options() {
    for cmd in ["generate", "score", "trace", "logits", "tokenize", "bench", "inspect"] {
        let (code, out, err) = ggweb(&[cmd, "--help"], "");
        assert_eq!(code, 0, "{cmd}: {err}");
        assert!(out.starts_with(&format!("usage: ggweb {cmd}")), "{cmd}: {out}");
        let (code, out, _) = ggweb(&[cmd, "--version"], "");
        assert_eq!((code, out.trim()), (0, concat!("ggweb ", env!("CARGO_PKG_VERSION"))), "{cmd}");
    }
    for cmd in ["generate", "score", "trace"] {
        let (code, _, err) = ggweb(&[cmd, "--model", &model(), "--prompt", "Hi", "--bogus", "1"], "");
        assert_eq!(code, 1, "{cmd}");
        assert!(err.contains("unknown option --bogus"), "{cmd}: {err}");
    }
}

#[test]
fn score_and_trace_on_webgpu_match_hf() {
    // WebGPU (lavapipe here) reads results back asynchronously: the session's one seam.
    let p = inside_ref("hello");
    let (code, out, err) =
        ggweb(&["score", "--model", &model(), "--prompt", "Hello, my name is", "--backend", "webgpu", "--json"], "");
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    // The bound; measured ~2e-6 on lavapipe (the kernels' summation order).
    assert!(worst(&floats(&v["logprobs"]), &floats(&p["logprobs"])) <= 1e-4);
    let (code, out, err) = ggweb(
        &[
            "trace",
            "--model",
            &model(),
            "--prompt",
            "Hello, my name is",
            "--backend",
            "webgpu",
            "--taps",
            "attn,hidden",
            "--json",
        ],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    for (l, want) in p["attentions"].as_array().unwrap().iter().enumerate() {
        assert!(worst(&floats(&v["attn"][l]), &floats(want)) <= 1e-4, "attn {l}");
    }
    for (l, want) in p["hidden"].as_array().unwrap().iter().enumerate() {
        assert!(worst(&floats(&v["hidden"][l]), &floats(want)) <= 1e-4, "hidden {l}");
    }
}

/// One policy with the JS options: the flags are their names in kebab case with the older
/// spellings as aliases, the defaults shown are `GenerateOptions::default()`'s (maxTokens
/// 128 in both), and values go through the same checks (crate/common/options.rs).
#[test]
fn flags_are_the_js_options_names_with_their_defaults_and_checks() {
    use ggweb::model::session::GenerateOptions;
    let (code, help, err) = ggweb(&["generate", "--help"], "");
    assert_eq!(code, 0, "{err}");
    assert_eq!(GenerateOptions::default().max_tokens, 128);
    let line = |flag: &str| {
        let at = help.find(flag).unwrap_or_else(|| panic!("{flag} in {help}"));
        help[at..].split("\n  -").next().unwrap().to_string()
    };
    assert!(line("--max-tokens").contains("[default: 128]") && line("--max-tokens").contains("n-predict"), "{help}");
    assert!(line("--temperature").contains("[default: 0.8]") && line("--temperature").contains("temp"), "{help}");
    for flag in [
        "--n-ctx",
        "--n-batch",
        "--n-threads",
        "--kv-type",
        "--backend",
        "--gpu-layers",
        "--top-logprobs",
        "--ignore-eos",
    ] {
        line(flag);
    }
    // --max-tokens, its alias --n-predict and -n are one option.
    let run = |n: &[&str]| {
        let (code, out, err) = ggweb(
            &[&["generate", "--model", &model(), "--prompt", "Hello", "--temperature", "0", "--json"], n].concat(),
            "",
        );
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(out.trim()).unwrap()["tokens"].as_array().unwrap().len()
    };
    assert_eq!([run(&["--max-tokens", "3"]), run(&["--n-predict", "3"]), run(&["-n", "3"])], [3, 3, 3]);
    // The shared checks, in the flags' names.
    for (args, msg) in [
        (&["--n-threads", "0"][..], "--n-threads must be an integer from 1 to 64, got 0"),
        (&["--top-p", "2"][..], "--top-p must be a number from 0 to 1, got 2"),
        (&["--backend", "tpu"][..], "--backend must be \"cpu\", \"webgpu\" or \"auto\", got \"tpu\""),
        (&["--backend", "cpu", "--gpu-layers", "1"][..], "--gpu-layers splits the model between webgpu and cpu"),
    ] {
        let (code, _, err) = ggweb(&[&["generate", "--model", &model(), "--prompt", "Hi"], args].concat(), "");
        assert_eq!(code, 1, "{args:?}");
        assert!(err.starts_with(&format!("ggweb: {msg}")), "{args:?}: {err}");
    }
}
