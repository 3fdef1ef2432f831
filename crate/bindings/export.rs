//! `model.save` / `saveLora` (issue 39) on the wasm side: the GGUF file of the current
//! weights (crate/model/export.rs) or of the adapter (lora_gguf.rs), made a chunk at a time
//! (crate/model/save_stream.rs). Without `to` the chunks are gathered into the file's bytes,
//! which wasm-bindgen copies into a JS `Uint8Array` (the wasm copy is freed on return); with
//! `{ to: 'opfs' }` engine.js takes them one at a time from a `WasmSaveStream` and writes each
//! before asking for the next, so neither side ever holds the whole file. Reads of WebGPU
//! memory are awaited (`map_async`).

use wasm_bindgen::prelude::*;

use super::model::{from_js, model_error, WasmModel};
use crate::common::options::{SaveLoraParams, SaveParams};
use crate::model::save_stream::SaveStream;

/// A file `save_stream` / `save_lora_stream` hands out a chunk at a time: `size()`, then
/// `next_chunk()` until it resolves to `undefined`. It reads the model's tensors as it goes:
/// the model must not change meanwhile (engine.js keeps it busy). Freed by `free()`.
#[wasm_bindgen]
pub struct WasmSaveStream {
    s: SaveStream,
}

#[wasm_bindgen]
impl WasmSaveStream {
    /// The whole file's length in bytes.
    pub fn size(&self) -> f64 {
        self.s.size() as f64
    }

    /// The next chunk of the file (a `Uint8Array`: the header, then a few rows of one tensor
    /// at a time), or `undefined` after the last.
    pub async fn next_chunk(&mut self) -> Result<JsValue, JsValue> {
        match self.s.next_chunk().await.map_err(|e| model_error("", e))? {
            Some(c) => Ok(js_sys::Uint8Array::from(&c[..]).into()),
            None => Ok(JsValue::UNDEFINED),
        }
    }
}

impl WasmModel {
    fn save_params(opts: JsValue) -> Result<(crate::model::export::SaveType, bool), JsValue> {
        let p: SaveParams = from_js("save options", opts)?;
        let ty = p.save_type().map_err(|e| model_error("", e))?;
        Ok((ty, p.optimizer == Some(true)))
    }

    fn save_lora_params(opts: JsValue) -> Result<(crate::types::GgmlType, bool), JsValue> {
        let p: SaveLoraParams = if opts.is_undefined() || opts.is_null() {
            SaveLoraParams::default()
        } else {
            from_js("saveLora options", opts)?
        };
        Ok((p.ty().map_err(|e| model_error("", e))?, p.optimizer == Some(true)))
    }
}

#[wasm_bindgen]
impl WasmModel {
    /// `opts`: `SaveParams` (`{ type: 'f32' | 'f16' | 'q8_0', optimizer }`, default 'f32';
    /// unknown keys refused). Resolves to the file's bytes; a file larger than the memory
    /// left is refused (`unsupported`, the sizes).
    pub async fn save(&mut self, opts: JsValue) -> Result<js_sys::Uint8Array, JsValue> {
        let (ty, optimizer) = Self::save_params(opts)?;
        let s = self.session.save_stream(ty, optimizer).map_err(|e| model_error("", e))?;
        let file = s.into_vec_async(self.session.model.host_left()).await.map_err(|e| model_error("", e))?;
        Ok(js_sys::Uint8Array::from(&file[..]))
    }

    /// `save` for `{ to: 'opfs' }`: the same file a chunk at a time (refused, `unsupported`,
    /// when the memory left cannot hold even a chunk).
    pub fn save_stream(&mut self, opts: JsValue) -> Result<WasmSaveStream, JsValue> {
        let (ty, optimizer) = Self::save_params(opts)?;
        let s = self.session.save_stream(ty, optimizer).map_err(|e| model_error("", e))?;
        s.check_chunks(self.session.model.host_left()).map_err(|e| model_error("", e))?;
        Ok(WasmSaveStream { s })
    }

    /// `model.saveLora(opts)` (`SaveLoraParams`): the adapter as a llama.cpp LoRA GGUF.
    pub async fn save_lora(&self, opts: JsValue) -> Result<js_sys::Uint8Array, JsValue> {
        let (ty, optimizer) = Self::save_lora_params(opts)?;
        let s = self.session.save_lora_stream(ty, optimizer).map_err(|e| model_error("", e))?;
        let file = s.into_vec_async(self.session.model.host_left()).await.map_err(|e| model_error("", e))?;
        Ok(js_sys::Uint8Array::from(&file[..]))
    }

    /// `saveLora` for `{ to: 'opfs' }`: the adapter file a chunk at a time.
    pub fn save_lora_stream(&self, opts: JsValue) -> Result<WasmSaveStream, JsValue> {
        let (ty, optimizer) = Self::save_lora_params(opts)?;
        let s = self.session.save_lora_stream(ty, optimizer).map_err(|e| model_error("", e))?;
        s.check_chunks(self.session.model.host_left()).map_err(|e| model_error("", e))?;
        Ok(WasmSaveStream { s })
    }
}
