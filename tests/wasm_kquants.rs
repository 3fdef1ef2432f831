//! Every llama.cpp-made mix of tests/fixtures/mixes/ on the wasm32 CPU backend (SIMD128
//! kernels) in headless Chromium, against llama.cpp's logits and ggweb's F32 run, with the
//! bounds of the native test (tests/kquants_llamacpp.rs; the `vec_dot` kernels give the same
//! bits on every instruction set). The files are embedded at compile time (15 MB).
#![cfg(target_arch = "wasm32")]

use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[path = "kquants_support/mod.rs"]
mod kquants_support;

macro_rules! files {
    ($($mix:literal),*) => {
        fn read(name: &str) -> Vec<u8> {
            $(
                if name == concat!("gpt2-mini-", $mix, ".gguf") {
                    return include_bytes!(concat!("fixtures/mixes/gpt2-mini-", $mix, ".gguf")).to_vec();
                }
                if name == concat!("gpt2-mini-", $mix, ".logits.bin") {
                    return include_bytes!(concat!("fixtures/mixes/gpt2-mini-", $mix, ".logits.bin")).to_vec();
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
    kquants_support::check_every_mix(include_bytes!("fixtures/mixes/mixes.json"), &read);
}
