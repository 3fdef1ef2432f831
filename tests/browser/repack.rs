//! Weights repacked at load (`cpu::arch::repack`) on wasm, with the SIMD128 packed kernels (and
//! the relaxed ones in the relaxed build): Q8_0, Q4_K and Q6_K matrices repacked, Q4_0 ones
//! not; logits of a prompt and of decode steps (one sequence, then 2 to 4 a step) equal those
//! of the same model loaded with repacking off, bit for bit.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 cargo test --target wasm32-unknown-unknown --test browser -- repack::
//! ```

use ggweb::cpu::arch::repack;
use ggweb::cpu::repack_buffer::is_packed;
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::{load_from_bytes, LoadedModel};
use wasm_bindgen_test::*;

use crate::support::eval::{seq_steps, Eval};

static Q8_0_GGUF: &[u8] = include_bytes!("../fixtures/llamacpp/tiny-gpt2-q8_0.gguf");
static Q4_0_GGUF: &[u8] = include_bytes!("../fixtures/llamacpp/tiny-gpt2-q4_0.gguf");
/// llama.cpp's Q4_K_M mix: Q4_K matrices, Q6_K ones in layer 1 and the Q6_K output.
static Q4_K_M_GGUF: &[u8] = include_bytes!("../fixtures/mixes/gpt2-mini-q4_k_m.gguf");

fn load(bytes: &[u8], off: bool) -> LoadedModel {
    repack::set_disabled(off);
    let m = load_from_bytes(bytes, Gpt2Options { n_batch: 16, ..Default::default() });
    repack::set_disabled(false);
    m.unwrap()
}

#[wasm_bindgen_test]
fn repacked_logits_equal_plain_bit_for_bit() {
    // The relaxed build's Q8_0 decode has two forms: weights made unsigned against b's quants
    // where the relaxed dot is `vpdpbusd` (`u8_dot_exact`: Chromium on AVX-VNNI), the sign
    // trick elsewhere; its Q6_K decode the i32 dot there, i16 pairs elsewhere. With the VNNI
    // switch off the second forms run here too.
    let files = [
        ("q8_0", Q8_0_GGUF),
        ("q8_0 without vnni", Q8_0_GGUF),
        ("q4_0", Q4_0_GGUF),
        ("q4_k_m", Q4_K_M_GGUF),
        ("q4_k_m without vnni", Q4_K_M_GGUF),
    ];
    for (name, bytes) in files {
        ggweb::cpu::arch::set_vnni_disabled(name.ends_with("without vnni"));
        let mut plain = load(bytes, true);
        let mut packed = load(bytes, false);
        assert_eq!(plain.model.repacked_bytes, 0, "{name}");
        // Q8_0 and K-quant matrices are repacked on wasm; Q4_0 ones keep ggml's layout
        // (measured slower).
        let w = &packed.model.weights;
        assert_eq!(is_packed(&w.layers[0].ffn_up_w), name != "q4_0", "{name}");
        assert_eq!(packed.model.repacked_bytes > 0, name != "q4_0" || w.output.ty == ggweb::GgmlType::Q8_0, "{name}");
        if name.starts_with("q4_k_m") {
            use ggweb::GgmlType::{Q4_K, Q6_K};
            let l1 = &w.layers[1];
            assert!(w.layers[0].attn_qkv_w.ty == Q4_K && l1.ffn_down_w.ty == Q6_K && w.output.ty == Q6_K);
            let mats: Vec<_> =
                w.layers.iter().flat_map(|l| [&l.attn_qkv_w, &l.attn_out_w, &l.ffn_up_w, &l.ffn_down_w]).collect();
            assert!(mats.iter().all(|t| is_packed(t)) && is_packed(&w.output), "every matrix repacked");
            let bytes: usize = mats.iter().map(|t| t.nbytes()).sum::<usize>() + w.output.nbytes();
            assert_eq!(packed.model.repacked_bytes, bytes, "{name}: repacked bytes");
        }
        // A prompt (the packed panels), then one-token steps (the packed decode kernel).
        let n_vocab = packed.model.hparams.n_vocab as u32;
        let prompt: Vec<u32> = (0..21).map(|i| (i * 977 + 13) % n_vocab).collect();
        let (a, b) = (plain.model.eval(&prompt, 0, true).unwrap(), packed.model.eval(&prompt, 0, true).unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}: prompt logits");
        let mut tok = n_vocab - 1;
        for step in 0..4 {
            let n_past = prompt.len() + step;
            let (a, b) =
                (plain.model.eval(&[tok], n_past, false).unwrap(), packed.model.eval(&[tok], n_past, false).unwrap());
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}: step {step}");
            tok = ggweb::model::sampling::argmax(&a);
        }
        // 2 to 4 sequences a step: the packed decode kernels' several-column forms.
        for n in 2..=4 {
            let a = seq_steps(&mut plain.model, &prompt, n, 3).unwrap();
            let b = seq_steps(&mut packed.model, &prompt, n, 3).unwrap();
            for (step, (a, b)) in a.iter().zip(&b).enumerate() {
                assert_eq!(a.len(), n * n_vocab as usize);
                assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}: {n} sequences, step {step}");
            }
        }
    }
    ggweb::cpu::arch::set_vnni_disabled(false);
}
