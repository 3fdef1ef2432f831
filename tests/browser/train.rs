//! `model.train` (issue 39) in wasm, in Chromium and Firefox: the `adamw_batch1_linear` case of
//! tests/fixtures/tiny-f32.train-ref (AdamW, the untied head, a linear schedule, batch 1) on
//! the session core, every step's loss within 1e-4 relative and the trained logits within 1e-3
//! of PyTorch's (tests/support/train_ref.rs, as natively in tests/model/train.rs).
//! And the `lora_adamw` case with `drop_lora` (as natively in tests/model/lora.rs).

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::load_from_bytes_on;
use ggweb::model::session::Session;
use wasm_bindgen_test::*;

use crate::support::train_ref::{check_case, untied, Ref};

static TINY_F32: &[u8] = include_bytes!("../fixtures/tiny-f32.gguf");
static REF_JSON: &[u8] = include_bytes!("../fixtures/tiny-f32.train-ref.json");
static REF_BIN: &[u8] = include_bytes!("../fixtures/tiny-f32.train-ref.bin");

#[wasm_bindgen_test]
fn adamw_untied_linear_schedule_matches_pytorch() {
    let r = Ref::from_parts(REF_JSON, REF_BIN);
    let case = r.case("adamw_batch1_linear");
    let bytes = untied(TINY_F32);
    let mut s = Session::new(load_from_bytes_on(&bytes, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap());
    let w = check_case(&mut s, &r, &case);
    web_sys::console::log_1(&format!("adamw_batch1_linear: worst loss {:.2e}, logit {:.2e}", w.loss, w.logit).into());
}

/// LoRA in wasm: the `lora_adamw` case (an adapter on attn_qkv and ffn_down of the untied
/// file, AdamW with clipping; A drawn from ggweb's generator in the fixture script too) against
/// PyTorch as natively (tests/model/lora.rs), then `drop_lora` gives the base logits back bit
/// for bit.
#[wasm_bindgen_test]
fn lora_adamw_matches_pytorch_and_drop_lora_restores_the_base() {
    let r = Ref::from_parts(REF_JSON, REF_BIN);
    let case = r.case("lora_adamw");
    let bytes = untied(TINY_F32);
    let mut s = Session::new(load_from_bytes_on(&bytes, Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap());
    let held = r.ids("held");
    let before = ggweb::model::context::block_on(s.logits(&held)).unwrap();
    let w = check_case(&mut s, &r, &case);
    web_sys::console::log_1(&format!("lora_adamw: worst loss {:.2e}, logit {:.2e}", w.loss, w.logit).into());
    let tuned = ggweb::model::context::block_on(s.logits(&held)).unwrap();
    assert!(tuned != before, "the adapter is not in later calls");
    assert!(s.drop_lora());
    let after = ggweb::model::context::block_on(s.logits(&held)).unwrap();
    assert!(before.iter().zip(&after).all(|(a, b)| a.to_bits() == b.to_bits()), "dropLora's logits are not the base's");
}
