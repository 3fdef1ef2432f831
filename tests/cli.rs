//! The `ggweb` binary's commands, run as a user would, against the llama.cpp-made tiny
//! GPT-2 and its Hugging Face reference (`../shared/models/`).
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test file for wasm32

#[path = "gguf_support/mod.rs"]
mod gguf_support;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

fn model() -> String {
    gguf_support::models_dir().join("tiny-gpt2-f32.gguf").display().to_string()
}

fn reference_prompt(key: &str) -> Value {
    let p = gguf_support::models_dir().join("tiny-gpt2.hf-ref.json");
    let r: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_ggweb"))
        .args(args)
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
}
