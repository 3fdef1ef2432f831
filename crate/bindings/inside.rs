//! "Look inside, round two" for JS: TransformerLens's workflow on the session core
//! ([`Session::run`], `patch`, `logit_lens`, `attribute`, `sae_encode`: crate/model/inside.rs), values
//! crossing as serde-wasm-bindgen data with typed arrays, as `score` and `trace` do. Each call
//! takes a last, optional `checkpoint` function, asked between its steps whether the caller
//! stopped it ([`interrupt`]: the JS `signal`). Errors carry no method name: engine.js adds it.

use serde::Serialize;
use wasm_bindgen::prelude::*;

use super::model::{from_js, interrupt, model_error, to_js, WasmModel};
use crate::common::options::{
    AttributeParams, PatchParams, RunParams, TopKParams, ATTRIBUTE_WHAT, LENS_WHAT, PATCH_WHAT, RUN_WHAT,
    SAE_ENCODE_WHAT,
};
use crate::model::sae::{Sae, SaeStream};

const DEFAULT_TOP_K: u32 = 5;

#[wasm_bindgen]
impl WasmModel {
    /// `run(ids, { capture?, hooks? })`: `{ tokens, logits: Float32Array ([pos][n_vocab]),
    /// cache: { [hook]: { shape, data } } }`.
    pub async fn run(
        &mut self,
        ids: Vec<u32>,
        opts: JsValue,
        checkpoint: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        let p: RunParams = from_js(RUN_WHAT, opts)?;
        self.check_input("", &ids)?;
        let r = self
            .session
            .interruptible(interrupt(checkpoint), async |s| {
                s.run(&ids, &p.capture.unwrap_or_default(), &p.hooks.unwrap_or_default()).await
            })
            .await;
        Ok(to_js(&r.map_err(|e| model_error("", e))?))
    }

    /// `patch(clean, corrupted, { at, answer, against })`: `{ shape, cells: Float32Array,
    /// cleanDiff, corruptedDiff }`.
    pub async fn patch(
        &mut self,
        clean: Vec<u32>,
        corrupted: Vec<u32>,
        opts: JsValue,
        checkpoint: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        let p: PatchParams = from_js(PATCH_WHAT, opts)?;
        self.check_input("clean", &clean)?;
        self.check_input("corrupted", &corrupted)?;
        let r = self
            .session
            .interruptible(interrupt(checkpoint), async |s| {
                s.patch(&clean, &corrupted, &p.at, p.answer, p.against).await
            })
            .await;
        Ok(to_js(&r.map_err(|e| model_error("", e))?))
    }

    /// `logit_lens(ids, { topK? })`: `{ tokens, layers, top: [layer][pos][k] { token,
    /// logprob }, logprobs: Float32Array[] }`.
    #[wasm_bindgen(js_name = logitLens)]
    pub async fn logit_lens(
        &mut self,
        ids: Vec<u32>,
        opts: JsValue,
        checkpoint: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        let p: TopKParams = from_js(LENS_WHAT, opts)?;
        self.check_input("", &ids)?;
        let k = p.top_k.unwrap_or(DEFAULT_TOP_K) as usize;
        let r = self.session.interruptible(interrupt(checkpoint), async |s| s.logit_lens(&ids, k).await).await;
        Ok(to_js(&r.map_err(|e| model_error("", e))?))
    }

    /// `attribute(ids, { answer, against, pos? })`: each component's share of
    /// `logit[answer] − logit[against]` (see `Session::attribute`).
    pub async fn attribute(
        &mut self,
        ids: Vec<u32>,
        opts: JsValue,
        checkpoint: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        let p: AttributeParams = from_js(ATTRIBUTE_WHAT, opts)?;
        self.check_input("", &ids)?;
        let r = self
            .session
            .interruptible(interrupt(checkpoint), async |s| {
                s.attribute(&ids, p.answer, p.against, p.pos.unwrap_or(-1)).await
            })
            .await;
        Ok(to_js(&r.map_err(|e| model_error("", e))?))
    }

    /// `checkSae(sae)`: `invalid` unless the SAE's hook is a hook point of this model with
    /// `dIn` values per position ([`Sae::check_fits`]); `loadSae` calls it before it keeps one.
    #[wasm_bindgen(js_name = checkSae)]
    pub fn check_sae(&self, sae: &WasmSae) -> Result<(), JsValue> {
        sae.0.check_fits(&self.session.model.hparams).map_err(|e| model_error("", e))
    }

    /// `sae_encode(sae, ids, { topK? })`: `{ tokens, top: [pos][k] { index, value }, l0, mse }`.
    #[wasm_bindgen(js_name = saeEncode)]
    pub async fn sae_encode(
        &mut self,
        sae: &WasmSae,
        ids: Vec<u32>,
        opts: JsValue,
        checkpoint: Option<js_sys::Function>,
    ) -> Result<JsValue, JsValue> {
        let p: TopKParams = from_js(SAE_ENCODE_WHAT, opts)?;
        self.check_input("", &ids)?;
        let k = p.top_k.unwrap_or(DEFAULT_TOP_K) as usize;
        let r = self.session.interruptible(interrupt(checkpoint), async |s| s.sae_encode(&ids, &sae.0, k).await).await;
        Ok(to_js(&r.map_err(|e| model_error("", e))?))
    }
}

/// A sparse autoencoder in SAELens's format, checked ([`Sae::from_parts`]).
#[wasm_bindgen]
pub struct WasmSae(Sae);

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
