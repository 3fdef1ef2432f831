//! `model.train` (issue 39) on the wasm side: a run is started with its data and options,
//! then driven one update per `train_step` by engine.js (which yields between updates, so a
//! `break`, `signal` or `dispose` stops it after the current one), and ended with `train_end`.

use alloc::string::String;
use alloc::vec::Vec;

use wasm_bindgen::prelude::*;

use super::js_error;
use super::model::{from_js, model_error, to_js, WasmModel};
use crate::common::options::TrainParams;

const TRAIN_WHAT: &str = "train options";

#[wasm_bindgen]
impl WasmModel {
    /// Starts a training run: `ids` the training sequences concatenated (`n_seqs` of equal
    /// length), or `texts` (an array of strings: tokenized, joined with end-of-text, cut into
    /// windows of `seqLen`) when `n_seqs` is 0; `opts` train's options without `signal`
    /// (`TrainParams`). Returns the memory plan `{ weights, state, compute }`. The weights are
    /// F32 from here on (converted when they were F16/BF16); the prompt cache is forgotten.
    pub fn train_start(
        &mut self,
        ids: Vec<u32>,
        n_seqs: u32,
        texts: JsValue,
        opts: JsValue,
    ) -> Result<JsValue, JsValue> {
        let p: TrainParams = from_js(TRAIN_WHAT, opts)?;
        let cfg = p.config(self.session.model.n_ctx()).map_err(|e| model_error("train", e))?;
        let seqs: Vec<Vec<u32>> = if n_seqs == 0 {
            let texts: Vec<String> = serde_wasm_bindgen::from_value(texts)
                .map_err(|e| js_error("invalid", alloc::format!("train: data must be a string or strings: {e}")))?;
            self.session.train_windows(&texts, cfg.seq_len).map_err(|e| model_error("", e))?
        } else {
            let n = n_seqs as usize;
            if !ids.len().is_multiple_of(n) {
                return Err(js_error("invalid", "train: the sequences are not of one length"));
            }
            ids.chunks_exact(ids.len() / n).map(<[u32]>::to_vec).collect()
        };
        let m = self.session.train_start(seqs, cfg).map_err(|e| model_error("", e))?;
        Ok(to_js(&m))
    }

    /// The next update of the run: `{ step, loss, tokens }`, or `undefined` when it has done
    /// every update.
    pub async fn train_step(&mut self) -> Result<JsValue, JsValue> {
        match self.session.train_step().await {
            Ok(Some(s)) => Ok(to_js(&s)),
            Ok(None) => Ok(JsValue::UNDEFINED),
            Err(e) => Err(model_error("train", e)),
        }
    }

    /// Tokens the run in progress has trained on itself (a resumed run's items count the
    /// checkpoint's too): what engine.js times `tokensPerSecond` by.
    pub fn train_run_tokens(&mut self) -> f64 {
        self.session.trainer().map_or(0.0, |t| (t.run_steps() as usize * t.cfg.batch_size * t.cfg.seq_len) as f64)
    }

    /// `model.dropLora()`: removes the model's LoRA adapter (later calls run the base
    /// weights); whether it had one.
    pub fn drop_lora(&mut self) -> bool {
        self.session.drop_lora()
    }

    /// `Model.load(base, { lora })`: puts the adapter of a llama.cpp LoRA GGUF on the model.
    pub fn load_lora(&mut self, bytes: &[u8]) -> Result<(), JsValue> {
        self.session.load_lora(bytes).map_err(|e| model_error("Model.load: lora", e))
    }

    /// Ends the run: its `TrainStats` (null when none ran). The model keeps the weights of
    /// the last finished update.
    pub fn train_end(&mut self) -> JsValue {
        self.session.train_end().map_or(JsValue::NULL, |s| to_js(&s))
    }
}
