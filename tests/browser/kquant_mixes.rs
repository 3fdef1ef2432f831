//! Every llama.cpp-made mix of tests/fixtures/mixes/ on the wasm32 CPU backend (SIMD128
//! kernels) in headless Chromium, against llama.cpp's logits and ggweb's F32 run, with the
//! bounds of the native test (tests/model/kquants_llamacpp.rs; the `vec_dot` kernels give the same
//! bits on every instruction set); then each mix wholly on Chromium's WebGPU. The files are
//! embedded at compile time (15 MB).

use wasm_bindgen_test::*;

macro_rules! files {
    ($($mix:literal),*) => {
        fn read(name: &str) -> Vec<u8> {
            $(
                if name == concat!("gpt2-mini-", $mix, ".gguf") {
                    return include_bytes!(concat!("../fixtures/mixes/gpt2-mini-", $mix, ".gguf")).to_vec();
                }
                if name == concat!("gpt2-mini-", $mix, ".logits.bin") {
                    return include_bytes!(concat!("../fixtures/mixes/gpt2-mini-", $mix, ".logits.bin")).to_vec();
                }
            )*
            panic!("no embedded fixture {name}");
        }
    };
}

files!(
    "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_0", "q4_1", "q4_k_s", "q4_k_m", "q5_0", "q5_1", "q5_k_s", "q5_k_m",
    "q6_k", "q8_0"
);

#[wasm_bindgen_test]
fn every_mix_matches_llama_cpp_on_wasm() {
    crate::support::kquants::check_every_mix(include_bytes!("../fixtures/mixes/mixes.json"), &read);
}

/// Every mix wholly on Chromium's WebGPU (SwiftShader): the shaders dequantize the weights and
/// multiply with f32 activations, so the reference is the F32 run on the dequantized weights
/// (on this wasm CPU backend). Natively on lavapipe they agree to 1.5e-5; 1e-4 as there.
#[cfg(feature = "webgpu")]
#[wasm_bindgen_test]
async fn every_mix_on_chromium_webgpu_matches_the_f32_run() {
    use crate::support::kquants::*;
    use ggweb::cpu::CpuBackend;
    use ggweb::gguf::Limits;
    use ggweb::model::context::{Batch, Gpt2Options};
    use ggweb::model::loader::ModelLoader;
    use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};
    use std::rc::Rc;
    let gpu = Rc::new(WebGpuBackend::new_async(WebGpuOptions::default()).await.expect("WebGPU in headless Chromium"));
    let m = parse_meta(include_bytes!("../fixtures/mixes/mixes.json"));
    let ids = ids(&m);
    let n_vocab = m["hparams"]["n_vocab"].as_u64().unwrap() as usize;
    let n_layer = m["hparams"]["n_layer"].as_u64().unwrap() as usize;
    let opts = Gpt2Options { n_batch: 64, ..Gpt2Options::default() };
    for (mix, e) in m["mixes"].as_object().unwrap() {
        let file = read(e["gguf"].as_str().unwrap());
        // More GPU layers than blocks: the embeddings and the head on WebGPU too.
        let mut loader = ModelLoader::new_split(
            gpu.clone(),
            Rc::new(CpuBackend::new(1)),
            n_layer + 1,
            opts.clone(),
            Limits::default(),
            None,
        );
        loader.feed(&file).unwrap();
        let mut model = loader.finish().unwrap().model;
        let got = model.decode(Batch::all(&ids, 0)).await.unwrap().logits;
        let want = logits(&dequantized(&file), &ids);
        let d = compare(&got, &want, n_vocab, 1e-4);
        web_sys::console::log_1(&format!("{mix}: chromium webgpu vs F32 run max |Δ| {:.2e}", d.max).into());
        assert!(d.max <= 1e-4 && d.flips.is_empty(), "{mix}: max |Δ| {:e}, top-1 differs at {:?}", d.max, d.flips);
    }
}
