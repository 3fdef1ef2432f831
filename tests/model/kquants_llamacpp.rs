//! Every llama-quantize mix of a small GPT-2, against llama.cpp on the same file.
//!
//! The files in tests/fixtures/mixes/ were written by llama.cpp itself (`llama_model_quantize`
//! through llama-cpp-python: tests/fixtures/make_llamacpp_mixes.py), with llama.cpp's logits at
//! every position of one prompt (logits_all, F32 KV cache). For each mix this checks:
//! - the file loads and carries the types llama.cpp chose (so each K-quant type is exercised
//!   the way real downloads use it, e.g. Q3_K_M's Q4_K/Q5_K attention and output), and every
//!   tensor dequantizes bit for bit as PyPI gguf does (checksums in mixes.json);
//! - ggweb's tokenizer gives llama.cpp's token ids for the prompt (a 512-token GPT-2 BPE);
//! - ggweb's logits vs llama.cpp's: max and mean |Δ| within twice what was measured
//!   ([`MEASURED`], with why they are what they are), and the same top-1 at every position
//!   where llama.cpp's top logit leads the second by more than the measured max |Δ| (at the
//!   others two runs this far apart may rank a near-tie either way; at most half the
//!   positions may be such);
//! - ggweb's logits vs ggweb's own F32 run on the file's dequantized weights: what quantizing
//!   the activations (Q8_0, Q8_1 or Q8_K, as ggml's `vec_dot_type`) costs, checked the same way.

use crate::support::eval::Eval;
use std::path::PathBuf;

use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::load_from_bytes;
use serde_json::Value;

use crate::support::kquants::*;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mixes")
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("tests/fixtures/mixes/{name}: {e}"))
}

fn meta() -> Value {
    parse_meta(&read("mixes.json"))
}

#[test]
fn every_mix_matches_llama_cpp() {
    check_every_mix(&read("mixes.json"), &read);
}

/// Every K-quant and legacy type of the mixes appears in some file, so each of their
/// dequantize and vec_dot paths ran against llama.cpp above.
#[test]
fn mixes_cover_every_weight_type() {
    let m = meta();
    let mut seen = std::collections::BTreeSet::new();
    for e in m["mixes"].as_object().unwrap().values() {
        for t in e["tensor_types"].as_object().unwrap().values() {
            seen.insert(t.as_str().unwrap().to_uppercase());
        }
    }
    for t in ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F32"] {
        assert!(seen.contains(t), "no mix has {t} tensors: {seen:?}");
    }
}

/// ggweb's BPE on the cut-down GPT-2 vocabulary gives llama.cpp's token ids.
#[test]
fn tokenizer_matches_llama_cpp_on_the_reduced_vocabulary() {
    let m = meta();
    let e = &m["mixes"]["q8_0"];
    let file = std::fs::read(dir().join(e["gguf"].as_str().unwrap())).unwrap();
    let loaded = load_from_bytes(&file, Gpt2Options::default()).unwrap();
    assert_eq!(loaded.tokenizer.encode(m["prompt"].as_str().unwrap(), false), ids(&m));
}

/// Every mix on WebGPU (natively: wgpu on Vulkan, lavapipe in CI). The shaders dequantize
/// the weights and multiply with f32 activations, so the reference is ggweb's F32 run on the
/// dequantized weights: the same arithmetic up to summation order and fused multiply-adds
/// (measured max |Δ| 5.7e-6 to 1.5e-5 on lavapipe; 1e-4 bound), and the same top-1 everywhere
/// but at near-ties within that bound.
#[cfg(feature = "webgpu")]
#[test]
fn every_mix_on_webgpu_matches_the_f32_run() {
    use ggweb::model::loader::load_from_bytes_on;
    use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};
    use std::rc::Rc;
    let gpu = match WebGpuBackend::new(WebGpuOptions::default()) {
        Ok(b) => Rc::new(b),
        Err(e) if std::env::var("GGWEB_ALLOW_NO_GPU").as_deref() == Ok("1") => {
            eprintln!("SKIPPED: no WebGPU adapter ({e}); GGWEB_ALLOW_NO_GPU=1");
            return;
        }
        Err(e) => panic!("no WebGPU adapter: {e} (install mesa-vulkan-drivers or set GGWEB_ALLOW_NO_GPU=1)"),
    };
    let m = meta();
    let ids = ids(&m);
    let n_vocab = m["hparams"]["n_vocab"].as_u64().unwrap() as usize;
    let mut worst = 0f32;
    for (mix, e) in m["mixes"].as_object().unwrap() {
        let file = std::fs::read(dir().join(e["gguf"].as_str().unwrap())).unwrap();
        let mut on_gpu = load_from_bytes_on(&file, gpu.clone(), Gpt2Options::default()).unwrap();
        let got = on_gpu.model.eval(&ids, 0, true).unwrap();
        let want = logits(&dequantized(&file), &ids);
        let d = compare(&got, &want, n_vocab, 1e-4);
        eprintln!("{mix}: webgpu vs F32 run max |Δ| {:.2e}, mean {:.2e}", d.max, d.mean);
        assert!(d.max <= 1e-4 && d.flips.is_empty(), "{mix}: max |Δ| {:e}, top-1 differs at {:?}", d.max, d.flips);
        worst = worst.max(d.max);
    }
    assert!(worst > 0.0, "identical bits would mean the GPU did not run");
}
