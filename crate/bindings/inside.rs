//! SAEs for JS (SAELens's format): `WasmSae`, `WasmSaeLoader` (streamed), and the model's
//! check that one fits it. Encoding is a long call of the method table (`callSae`,
//! crate/bindings/calls.rs). Errors carry no method name: engine.js adds it.

use serde::Serialize;
use wasm_bindgen::prelude::*;

use super::model::{model_error, to_js, WasmModel};
use crate::model::sae::{Sae, SaeStream};

#[wasm_bindgen]
impl WasmModel {
    /// `checkSae(sae)`: `invalid` unless the SAE's hook is a hook point of this model with
    /// `dIn` values per position ([`Sae::check_fits`]); `loadSae` calls it before it keeps one.
    #[wasm_bindgen(js_name = checkSae)]
    pub fn check_sae(&self, sae: &WasmSae) -> Result<(), JsValue> {
        sae.0.check_fits(&self.session.model.hparams).map_err(|e| model_error("", e))
    }
}

/// A sparse autoencoder in SAELens's format, checked ([`Sae::from_parts`]).
#[wasm_bindgen]
pub struct WasmSae(Sae);

impl WasmSae {
    /// The SAE itself, for `callSae` (crate/bindings/calls.rs).
    pub(super) fn sae(&self) -> &Sae {
        &self.0
    }
}

#[wasm_bindgen]
impl WasmSae {
    /// From `cfg.json`'s text and `sae_weights.safetensors`'s bytes.
    #[wasm_bindgen(constructor)]
    pub fn new(cfg: &str, weights: &[u8]) -> Result<WasmSae, JsValue> {
        Sae::from_parts(cfg, weights).map(WasmSae).map_err(|e| model_error("", e))
    }

    /// `{ dIn, dSae, hookName, applyBDecToInput }`.
    pub fn info(&self) -> JsValue {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Info<'a> {
            d_in: usize,
            d_sae: usize,
            hook_name: &'a str,
            apply_b_dec_to_input: bool,
        }
        let s = &self.0;
        to_js(&Info {
            d_in: s.d_in,
            d_sae: s.d_sae,
            hook_name: &s.hook_name,
            apply_b_dec_to_input: s.apply_b_dec_to_input,
        })
    }

    /// Row `i` of `W_dec` (`d_in` values). `i` crosses as the JS number it is (a `u32`
    /// parameter would wrap 2^32 + 7 to 7): any number that is not a whole one in range is
    /// `invalid`.
    #[wasm_bindgen(js_name = decoderRow)]
    pub fn decoder_row(&self, i: f64) -> Result<Vec<f32>, JsValue> {
        let d_sae = self.0.d_sae;
        if !(i.fract() == 0.0 && i >= 0.0 && i < d_sae as f64) {
            return Err(super::js_error("invalid", format!("feature {i} is not a whole number in 0..{d_sae}")));
        }
        self.0.decoder_row(i as usize).map_err(|e| model_error("", e))
    }
}

/// Streams `sae_weights.safetensors` into an SAE ([`SaeStream`]): `new(cfg)`, `feed` each
/// chunk as it arrives (any size), then `finish`. The file is never held whole.
#[wasm_bindgen]
pub struct WasmSaeLoader(SaeStream);

#[wasm_bindgen]
impl WasmSaeLoader {
    /// Checks `cfg.json`'s text.
    #[wasm_bindgen(constructor)]
    pub fn new(cfg: &str) -> Result<WasmSaeLoader, JsValue> {
        SaeStream::new(cfg).map(WasmSaeLoader).map_err(|e| model_error("", e))
    }

    /// The next bytes of the file.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), JsValue> {
        self.0.push(chunk).map_err(|e| model_error("", e))
    }

    /// Bytes fed so far.
    pub fn received(&self) -> f64 {
        self.0.received() as f64
    }

    /// The SAE; consumes the loader.
    pub fn finish(self) -> Result<WasmSae, JsValue> {
        self.0.finish().map(WasmSae).map_err(|e| model_error("", e))
    }
}
