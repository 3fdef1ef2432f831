//! Weights repacked at load (`quants::repack`) on wasm, with the SIMD128 packed kernels (and
//! the relaxed one in the relaxed build): Q8_0 matrices repacked, Q4_0 ones not; logits of a prompt and of decode steps equal those
//! of the same model loaded with repacking off, bit for bit.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 cargo test --target wasm32-unknown-unknown --test browser -- repack::
//! ```

use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::{load_from_bytes, LoadedModel};
use ggweb::quants::repack;
use wasm_bindgen_test::*;

use crate::support::eval::Eval;

static Q8_0_GGUF: &[u8] = include_bytes!("../fixtures/llamacpp/tiny-gpt2-q8_0.gguf");
static Q4_0_GGUF: &[u8] = include_bytes!("../fixtures/llamacpp/tiny-gpt2-q4_0.gguf");

fn load(bytes: &[u8], off: bool) -> LoadedModel {
    repack::set_disabled(off);
    let m = load_from_bytes(bytes, Gpt2Options { n_batch: 16, ..Default::default() });
    repack::set_disabled(false);
    m.unwrap()
}

#[wasm_bindgen_test]
fn repacked_logits_equal_plain_bit_for_bit() {
    for (name, bytes) in [("q8_0", Q8_0_GGUF), ("q4_0", Q4_0_GGUF)] {
        let mut plain = load(bytes, true);
        let mut packed = load(bytes, false);
        assert_eq!(plain.model.repacked_bytes, 0, "{name}");
        // Q8_0 matrices are repacked on wasm; Q4_0 ones keep ggml's layout (measured slower).
        let q8 = name == "q8_0";
        assert_eq!(packed.model.weights.layers[0].ffn_up_w.is_repacked(), q8, "{name}");
        assert_eq!(
            packed.model.repacked_bytes > 0,
            q8 || packed.model.weights.output.ty == ggweb::GgmlType::Q8_0,
            "{name}"
        );
        // A prompt (the packed panels), then one-token steps (the packed decode kernel).
        let prompt: Vec<u32> = (0..21).map(|i| (i * 977 + 13) % 50257).collect();
        let (a, b) = (plain.model.eval(&prompt, 0, true).unwrap(), packed.model.eval(&prompt, 0, true).unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}: prompt logits");
        let mut tok = 50256;
        for step in 0..4 {
            let n_past = prompt.len() + step;
            let (a, b) =
                (plain.model.eval(&[tok], n_past, false).unwrap(), packed.model.eval(&[tok], n_past, false).unwrap());
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}: step {step}");
            tok = ggweb::model::sampling::argmax(&a);
        }
    }
}
