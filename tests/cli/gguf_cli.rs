//! `ggweb inspect` on the reference models and on broken files.
//!
//! `cargo test --test cli gguf_cli::`

use std::process::Command;

use crate::support::fixtures::{model_bytes, models_dir};

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
    // Then the memory plan (inspect_prints_the_memory_plan_a_load_allocates).
    assert!(out.contains("\ntotal weight memory: 5321960 bytes (5.08 MiB)\nmemory plan (cpu, "), "{out}");
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
        (vec!["inspect", "--model"], "ggweb: --model needs a value".into()),
        (vec!["inspect", "--model", t, "--bogus"], "ggweb: unknown option --bogus".into()),
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

fn ggweb_env(args: &[&str], max_memory: &str) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ggweb"))
        .args(args)
        .env("GGWEB_MAX_MEMORY", max_memory)
        .output()
        .expect("runs ggweb");
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// The memory plan `ggweb inspect` prints from the header: exact bytes per part, equal to
/// what loading the file allocates with the same options, and the fit against the budget
/// (GGWEB_MAX_MEMORY here, so the numbers do not depend on the machine) and wasm32's 4 GiB.
#[test]
fn inspect_prints_the_memory_plan_a_load_allocates() {
    use ggweb::model::context::Gpt2Options;
    use ggweb::model::loader::load_from_bytes;
    use ggweb::GgmlType;

    let path = model("tiny-gpt2-f32.gguf");
    let bytes = model_bytes("tiny-gpt2-f32.gguf");
    // (options, the Gpt2Options they mean, weights, kv, compute): 2 layers x n_embd 64; the
    // KV cache is 2 x 2 x 64 x n_ctx elements of the KV type.
    let cases: [(&[&str], Gpt2Options, u64, u64, u64); 2] = [
        (&[], Gpt2Options::default(), 26164736, 2 * 2 * 64 * 128 * 4, 6449280),
        (
            &["--ctx", "64", "--batch", "8", "--kv-type", "f16", "--threads", "2"],
            Gpt2Options { n_ctx: 64, n_batch: 8, n_threads: 2, kv_type: GgmlType::F16, ..Default::default() },
            26164736,
            2 * 2 * 64 * 64 * 2,
            1612352,
        ),
    ];
    for (extra, opts, weights, kv, compute) in cases {
        let mut args = vec!["inspect", "--model", &path, "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = ggweb_env(&args, "100M");
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let plan = &v["plan"];
        let loaded = load_from_bytes(&bytes, opts.clone()).unwrap().model;
        let by = loaded.memory_by_backend();
        assert_eq!(by.len(), 1);
        assert_eq!((by[0].weights as u64, by[0].kv as u64, by[0].compute as u64), (weights, kv, compute), "{extra:?}");
        assert_eq!(
            plan["by_backend"][0],
            serde_json::json!({
                "backend": "CPU", "weights": weights, "kv": kv, "compute": compute,
                "budget": 100 << 20, "max_buffer_size": plan["by_backend"][0]["max_buffer_size"],
            }),
            "{extra:?}"
        );
        assert_eq!((&plan["weights"], &plan["kv"], &plan["compute"]), (&weights.into(), &kv.into(), &compute.into()));
        assert_eq!(plan["total"], weights + kv + compute);
        assert_eq!(
            (plan["n_ctx"].as_u64(), plan["n_batch"].as_u64()),
            (Some(loaded.n_ctx() as u64), Some(loaded.n_batch as u64))
        );
        assert_eq!(plan["kv_type"], opts.kv_type.name());
        assert_eq!((&plan["backend"], &plan["threads"]), (&"cpu".into(), &opts.n_threads.into()));
        assert_eq!(plan["fits"], serde_json::json!({ "ok": true, "reason": null }));
        assert_eq!((&plan["wasm32"]["ok"], &plan["wasm32"]["address_space"]), (&true.into(), &(4u64 << 30).into()));
        // The loader's estimate: the same weights and KV, a compute bound above the measured one.
        let est = &plan["wasm32"]["estimate"];
        assert_eq!((est["weights"].as_u64(), est["kv"].as_u64()), (Some(weights), Some(kv)));
        assert!(est["compute"].as_u64().unwrap() >= compute);
    }

    // The text form, and a budget the plan exceeds (refused before any compute is measured).
    let (code, out, err) = ggweb_env(&["inspect", "--model", &path], "100M");
    assert_eq!(code, 0, "{err}");
    let plan = &out[out.find("memory plan").expect("a plan section")..];
    let lines: Vec<&str> = plan.lines().collect();
    assert_eq!(lines[0], "memory plan (cpu, n_ctx 128, n_batch 32, kv f32, threads 1):");
    assert_eq!(lines[1], "  CPU      weights     26164736 B, kv     131072 B, compute    6449280 B");
    assert_eq!(lines[2], "  total    32745088 B (31.23 MiB): weights 26164736 + kv 131072 + compute 6449280");
    // What a gradient run over n_ctx tokens plans on top (tests/model/grad.rs checks it is
    // what a real run plans).
    assert_eq!(
        lines[3],
        "  gradient 155766784 B (148.55 MiB) more per gradient run over 128 tokens (backward to hook_embed)"
    );
    assert!(lines[4].starts_with("fits here: yes (CPU budget 104857600 B, largest buffer "), "{plan}");
    assert!(lines[5].starts_with("fits wasm32 (cpu, 4 GiB): yes (the loader's estimate "), "{plan}");
    assert_eq!(lines.len(), 6, "{plan}");
    let (code, out, err) = ggweb_env(&["inspect", "--model", &path], "20M");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  total    26295808 B (25.08 MiB): weights 26164736 + kv 131072 + compute not measured\n"),
        "{out}"
    );
    assert!(out.contains("fits here: no: model too large: needs "), "{out}");
    assert!(out.contains("20971520"), "{out}");
}
