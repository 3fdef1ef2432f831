//! `ggweb inspect` on the reference models and on broken files.
//!
//! `cargo test --test gguf_cli`
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test file for wasm32

mod gguf_support;

use std::process::Command;

use gguf_support::{model_bytes, models_dir};

fn ggweb(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ggweb")).args(args).output().expect("runs ggweb");
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn model(name: &str) -> String {
    models_dir().join(name).to_str().unwrap().to_string()
}

#[test]
fn inspect_prints_metadata_and_tensors() {
    let path = model("tiny-gpt2-q4_0.gguf");
    let (code, out, err) = ggweb(&["inspect", "--model", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("{path}: GGUF v3, 7090592 bytes, alignment 32, data at byte 1768576\n")), "{out}");
    assert!(out.contains("metadata (20 keys):\n  general.architecture: str = \"gpt2\"\n"), "{out}");
    assert!(out.contains("  gpt2.block_count: u32 = 2\n"));
    assert!(out.contains("  gpt2.attention.layer_norm_epsilon: f32 = 1e-5\n"));
    assert!(
        out.contains("  tokenizer.ggml.tokens: arr[str], 50257 items = [\"!\", \"\\\"\", \"#\", \"$\", \"%\", \"&\", ... (50251 more)]\n"),
        "{out}"
    );
    assert!(out.contains("  tokenizer.ggml.merges: arr[str], 50000 items = [\"Ġ t\", "));
    assert!(out.contains("tensors (29):\n"));
    let line = out.lines().find(|l| l.contains(" output.weight ")).unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields, ["0", "output.weight", "q8_0", "[64,", "50257]", "3417476", "0"]);
    let line = out.lines().find(|l| l.contains(" blk.1.ffn_up.weight ")).unwrap();
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        ["28", "blk.1.ffn_up.weight", "q4_0", "[64,", "256]", "9216", "5312800"]
    );
    assert!(out.ends_with("total weight memory: 5321960 bytes (5.08 MiB)\n"), "{out}");
    // The whole output stays small: the 100k-entry vocab is summarized.
    assert!(out.len() < 8000, "{} bytes", out.len());
}

#[test]
fn inspect_json() {
    let path = model("tiny-gpt2-f16.gguf");
    let (code, out, err) = ggweb(&["inspect", "--model", &path, "--json", "--items", "3"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["version"], 3);
    assert_eq!(v["file_size"], 14870912);
    assert_eq!(v["alignment"], 32);
    assert_eq!(v["data_offset"], 1768576);
    let meta = v["metadata"].as_array().unwrap();
    assert_eq!(meta.len(), 20);
    assert_eq!(meta[0], serde_json::json!({"key": "general.architecture", "type": "str", "value": "gpt2"}));
    let tokens = meta.iter().find(|m| m["key"] == "tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens["type"], "arr[str]");
    assert_eq!(tokens["value"], serde_json::json!({"len": 50257, "head": ["!", "\"", "#"]}));
    let eps = meta.iter().find(|m| m["key"] == "gpt2.attention.layer_norm_epsilon").unwrap();
    assert_eq!(eps["value"].as_f64().unwrap() as f32, 1e-5f32);
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 29);
    let embd = tensors.iter().find(|t| t["name"] == "token_embd.weight").unwrap();
    assert_eq!(embd["type"], "f16");
    assert_eq!(embd["ne"], serde_json::json!([64, 50257]));
    assert_eq!(embd["bytes"], 64 * 50257 * 2);
    let total: u64 = tensors.iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
    assert_eq!(v["total_weight_bytes"], total);
    assert_eq!(total, 14870912 - 1768576); // F16 tensor sizes here are all multiples of 32: no padding
}

#[test]
fn inspect_errors_go_to_stderr_with_exit_1() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let truncated = dir.join("gguf-cli-truncated.gguf");
    std::fs::write(&truncated, &model_bytes("tiny-gpt2-q8_0.gguf")[..100_000]).unwrap();
    let t = truncated.to_str().unwrap();
    let missing = dir.join("does-not-exist.gguf");
    let m = missing.to_str().unwrap();
    let cases: Vec<(Vec<&str>, String)> = vec![
        // The cut falls inside the u64 length of a token string that starts at byte 99996.
        (
            vec!["inspect", "--model", t],
            format!("ggweb: {t}: GGUF: truncated: needed at least 100004 bytes, the stream ended after 100000"),
        ),
        (vec!["inspect", "--model", m], format!("ggweb: {m}: No such file")),
        (vec!["inspect"], "ggweb: missing --model".into()),
        (vec!["inspect", "--model"], "ggweb: --model needs a file".into()),
        (vec!["inspect", "--model", t, "--bogus"], "ggweb: unknown argument '--bogus'".into()),
        (vec!["frobnicate"], "ggweb: unknown command 'frobnicate'".into()),
    ];
    for (args, want) in cases {
        let (code, out, err) = ggweb(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.starts_with(&want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A tensor reaching past the end of the file is caught from the header and the size.
    let cut = dir.join("gguf-cli-cut-data.gguf");
    std::fs::write(&cut, &model_bytes("tiny-gpt2-q8_0.gguf")[..2_000_000]).unwrap();
    let (code, _, err) = ggweb(&["inspect", "--model", cut.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("tensor data ends at byte 8747940, past the end of the file (2000000 bytes)"), "{err}");
}
