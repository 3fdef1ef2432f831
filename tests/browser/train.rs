//! `model.train` (issue 39) in wasm, in Chromium and Firefox: the `adamw_batch1_linear` case of
//! tests/fixtures/tiny-f32.train-ref (AdamW, the untied head, a linear schedule, batch 1) on
//! the session core, every step's loss within 1e-4 relative and the trained logits within 1e-3
//! of PyTorch's (tests/support/train_ref.rs, as natively in tests/model/train.rs).

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
