//! `model.save` (issue 39) on the wasm side: the GGUF file of the current weights
//! (crate/model/export.rs), returned as bytes that wasm-bindgen copies into a JS
//! `Uint8Array` (the wasm copy is freed on return).

use alloc::vec::Vec;

use wasm_bindgen::prelude::*;

use super::model::{from_js, model_error, WasmModel};
use crate::common::options::SaveParams;

#[wasm_bindgen]
impl WasmModel {
    /// `opts`: `SaveParams` (`{ type: 'f32' | 'f16' | 'q8_0' }`, default 'f32'; unknown keys
    /// refused). Returns the file's bytes.
    pub fn save(&mut self, opts: JsValue) -> Result<Vec<u8>, JsValue> {
        let p: SaveParams = from_js("save options", opts)?;
        let ty = p.save_type().map_err(|e| model_error("", e))?;
        self.session.save(ty).map_err(|e| model_error("", e))
    }
}
