//! `model.save` (issue 39) on the wasm side: the GGUF file of the current weights
//! (crate/model/export.rs), returned as bytes that wasm-bindgen copies into a JS
//! `Uint8Array` (the wasm copy is freed on return), or kept in wasm memory as a
//! `WasmSavedFile` that `{ to: 'opfs' }` reads out in pieces.

use alloc::vec::Vec;

use wasm_bindgen::prelude::*;

use super::model::{from_js, model_error, WasmModel};
use crate::common::options::SaveParams;

#[wasm_bindgen]
impl WasmModel {
    /// `opts`: `SaveParams` (`{ type: 'f32' | 'f16' | 'q8_0', optimizer }`, default 'f32';
    /// unknown keys refused). Returns the file's bytes.
    pub fn save(&mut self, opts: JsValue) -> Result<Vec<u8>, JsValue> {
        let p: SaveParams = from_js("save options", opts)?;
        let ty = p.save_type().map_err(|e| model_error("", e))?;
        let r = if p.optimizer == Some(true) { self.session.save_checkpoint(ty) } else { self.session.save(ty) };
        r.map_err(|e| model_error("", e))
    }
}

/// A file `save_file` / `save_lora_file` built in wasm memory, read out a piece at a time
/// (`{ to: 'opfs' }`: each piece is written before the next is copied out, so the file is
/// never whole in JS memory). Freed by `free()` (the engine does once it is written).
#[wasm_bindgen]
pub struct WasmSavedFile {
    bytes: Vec<u8>,
}

#[wasm_bindgen]
impl WasmSavedFile {
    /// The file's length in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// Bytes `[offset, offset + n)`, clamped to the end, copied into a JS `Uint8Array`.
    pub fn piece(&self, offset: usize, n: usize) -> Vec<u8> {
        let start = offset.min(self.bytes.len());
        let end = start.saturating_add(n).min(self.bytes.len());
        self.bytes[start..end].to_vec()
    }
}

#[wasm_bindgen]
impl WasmModel {
    /// `save` for `{ to: 'opfs' }`: the same file, kept in wasm memory to be read in pieces.
    pub fn save_file(&mut self, opts: JsValue) -> Result<WasmSavedFile, JsValue> {
        Ok(WasmSavedFile { bytes: self.save(opts)? })
    }

    /// `save_lora` for `{ to: 'opfs' }`: the adapter file, kept in wasm memory to be read in pieces.
    pub fn save_lora_file(&self, opts: JsValue) -> Result<WasmSavedFile, JsValue> {
        Ok(WasmSavedFile { bytes: self.save_lora(opts)? })
    }
}
