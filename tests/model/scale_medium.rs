//! GPT-2 medium's shape (24 layers × 1024, 16 heads, vocabulary 50257, n_ctx 1024) at Q8_0,
//! generated here (tests/support/bench_gpt2.rs; seeded random weights, the real
//! tokenizer) into target/tmp/scale-models/ (~440 MB): the memory plan of `ggweb inspect`
//! in exact bytes, the wasm32 loader's checks (`with_usize_bits(32)`, a 4 GiB budget) on a
//! real-sized model, and the native CLI's greedy tokens and logits, which it writes beside
//! the model as the reference tests/e2e/medium.spec.mjs holds the browser to.
//!
//! `cargo test --test model scale_medium` (npm test runs it before the browser tests). The XL,
//! large and Q4_K_M files are `npm run test:scale`'s (scripts/test-scale.sh).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::gguf::{read_header, Limits};
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::ModelLoader;
use serde_json::{json, Value};

use crate::support::bench_gpt2::{file_name, file_type, shape, write_bench_gpt2, N_CTX, N_VOCAB};

const PROMPT: &str = "Hello, my name is Ada and I test GPT-2 medium in the browser.";
const N_PREDICT: usize = 8;

fn ggweb(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ggweb")).args(args).output().expect("runs ggweb");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ggweb {args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("ggweb {args:?}: {e}"))
}

/// Where the model and its reference go (git-ignored, under the target dir).
/// Writes the bench GPT-2 of `shape` and `ty` (seeded weights, the real tokenizer from the
/// tiny reference) into scale_dir(): its path and size.
fn write_shape(shape_name: &str, ty: &str) -> (PathBuf, u64) {
    let (sh, ty) = (shape(shape_name).unwrap(), file_type(ty).unwrap());
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llamacpp/tiny-gpt2-f32.gguf");
    let bytes = std::fs::read(&reference).unwrap();
    let tok_header = read_header(&bytes, bytes.len() as u64, Limits::default()).unwrap();
    let dir = scale_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file_name(&sh, &ty));
    let size = write_bench_gpt2(&tok_header, &sh, &ty, &path).unwrap();
    (path, size)
}

pub fn scale_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("scale-models")
}

#[test]
fn medium_q8_0_plan_32_bit_load_and_native_reference() {
    // Always rewritten (a few seconds): a file left by an older generator must not pass.
    let (path, size) = write_shape("medium", "q8_0");
    let (sh, ty) = (shape("medium").unwrap(), file_type("q8_0").unwrap());
    let p = path.to_str().unwrap();

    // Exact sizes: every tensor's Q8_0/F32 bytes are multiples of the 32-byte alignment, so
    // the weights are the file's data section; the F32 KV cache is 2 × 24 × 1024 × 1024 × 4.
    let (e, l) = (sh.n_embd as u64, sh.n_layer as u64);
    let q8 = |n: u64| n / 32 * 34;
    let per_layer = 4 * (e + e + 3 * e + e + e + e + 4 * e + e) + q8(e * 3 * e + e * e + 2 * e * 4 * e);
    let weights = 2 * q8(e * N_VOCAB as u64) + 4 * (e * N_CTX as u64 + 2 * e) + l * per_layer;
    let kv = 2 * l * e * N_CTX as u64 * 4;
    assert_eq!(kv, 201_326_592);

    let inspect = ggweb(&["inspect", "--model", p, "--json"]);
    let plan = &inspect["plan"];
    assert_eq!(inspect["file_size"].as_u64().unwrap(), size);
    assert_eq!(inspect["total_weight_bytes"].as_u64().unwrap(), weights);
    assert_eq!(size - inspect["data_offset"].as_u64().unwrap(), weights);
    assert_eq!((plan["weights"].as_u64().unwrap(), plan["kv"].as_u64().unwrap()), (weights, kv));
    assert_eq!((plan["n_ctx"].as_u64(), plan["n_batch"].as_u64()), (Some(1024), Some(32)));
    assert_eq!(plan["wasm32"]["ok"], true, "{plan}");
    let compute = plan["compute"].as_u64().unwrap();
    assert_eq!(plan["total"].as_u64().unwrap(), weights + kv + compute);

    // The wasm32 loader's path natively: 32-bit sizes, wasm32's whole address space as the
    // budget. It accepts the model and allocates exactly the plan.
    let opts = Gpt2Options::default();
    let mut loader = ModelLoader::new(Rc::new(CpuBackend::new(1)), opts, Limits::default(), Some(size))
        .with_usize_bits(32)
        .with_budget(4 << 30);
    let mut f = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut f, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        loader.feed(&buf[..n]).unwrap();
    }
    let est = loader.estimate().unwrap();
    assert_eq!((est.weights, est.kv), (weights, kv));
    assert!(est.compute >= compute, "the estimate bounds the measured compute: {} < {compute}", est.compute);
    let model = loader.finish().unwrap().model;
    let mem = model.memory_plan();
    assert_eq!((mem.weights as u64, mem.kv as u64, mem.compute as u64), (weights, kv, compute));
    drop(model);

    // The native CLI's greedy run and the prompt's logits: the browser's reference.
    let n = N_PREDICT.to_string();
    let gen = ggweb(&["generate", "--model", p, "--prompt", PROMPT, "--n-predict", &n, "--temp", "0", "--json"]);
    let all = ggweb(&["logits", "--model", p, "--prompt", PROMPT]);
    assert_eq!(all["tokens"], gen["prompt_tokens"]);
    let tokens: Vec<u64> = gen["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(tokens.len(), N_PREDICT, "{gen}");
    let last: Vec<f32> = all["logits"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(last.len(), N_VOCAB);
    // generate's first token is the argmax of logits' last row: both paths agree.
    let argmax = (0..last.len()).max_by(|&a, &b| last[a].total_cmp(&last[b])).unwrap();
    assert_eq!(argmax as u64, tokens[0]);
    // Sane logits (the init keeps them ~0.02·sqrt(n_embd) wide): finite, neither flat nor huge.
    let mean = last.iter().map(|&x| x as f64).sum::<f64>() / last.len() as f64;
    let std = (last.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / last.len() as f64).sqrt();
    assert!(last.iter().all(|x| x.is_finite()) && (0.2..5.0).contains(&std), "logit std {std}");

    let reference = json!({
        "file": file_name(&sh, &ty),
        "prompt": PROMPT,
        "n_predict": N_PREDICT,
        "prompt_ids": gen["prompt_tokens"],
        "tokens": tokens,
        "logits": last,
        "memory": { "weights": weights, "kv": kv, "compute": compute },
    });
    std::fs::write(scale_dir().join("bench-medium-q8_0.native.json"), reference.to_string()).unwrap();
}

/// GPT-2 124M's shape at Q8_0 (12 × 768, ~178 MB) beside the medium one, for
/// tests/e2e/load-memory.spec.mjs: the browser's peak memory during a load against the file's
/// size. Checked here only for what that test divides by: the file is its weights plus the
/// header, and the plan is the CLI's.
#[test]
fn small_q8_0_for_the_load_memory_test() {
    let (path, size) = write_shape("124m", "q8_0");
    let inspect = ggweb(&["inspect", "--model", path.to_str().unwrap(), "--json"]);
    assert_eq!(inspect["file_size"].as_u64().unwrap(), size);
    let weights = inspect["plan"]["weights"].as_u64().unwrap();
    assert!(size > weights && size - weights < 4 << 20, "file {size}, weights {weights}");
}
