//! The session's side of training ([`super::train`]): `model.train`'s text data, and one run
//! at a time held by the session, started, stepped and ended (the prompt cache forgotten,
//! since the runs write the KV cache and change the weights), and `dropLora`.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::lora::Lora;
use super::save_stream::SaveStream;
use super::session::Session;
use super::train::{TrainConfig, TrainMemory, TrainStats, TrainStep, Trainer};
use super::ModelError;
use crate::types::GgmlType;

impl Session {
    /// `train`'s text data: each text tokenized, the texts joined with the end-of-text token
    /// between them, cut into consecutive windows of `seq_len` (the remainder dropped).
    pub fn train_windows(&self, texts: &[String], seq_len: usize) -> Result<Vec<Vec<u32>>, ModelError> {
        let eot = self.tokenizer.eos().ok_or_else(|| {
            ModelError::Invalid("train: the model's tokenizer has no end-of-text token to join texts with".into())
        })?;
        let mut ids = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            if i > 0 {
                ids.push(eot);
            }
            ids.extend(self.tokenizer.encode(t, false));
        }
        if seq_len == 0 || ids.len() < seq_len {
            return Err(ModelError::Invalid(format!(
                "train: data is empty: the text is {} tokens, fewer than one window of seqLen ({seq_len})",
                ids.len()
            )));
        }
        Ok(ids.chunks_exact(seq_len).map(<[u32]>::to_vec).collect())
    }

    /// Starts a training run on `seqs` ([`Trainer::new`]): ends any generation and forgets the
    /// prompt cache (the runs overwrite the KV cache and change the weights). Returns the plan.
    pub fn train_start(&mut self, seqs: Vec<Vec<u32>>, cfg: TrainConfig) -> Result<TrainMemory, ModelError> {
        self.end_generation();
        self.train = None;
        let t = Trainer::new(&mut self.model, seqs, cfg)?;
        self.clear_cache();
        self.cache_hooks.clear();
        let memory = t.memory;
        self.train = Some(t);
        Ok(memory)
    }

    /// The next update of the run in progress; None when it has done every update (or none
    /// runs). An error ends the run (the weights those of the last finished update).
    pub async fn train_step(&mut self) -> Result<Option<TrainStep>, ModelError> {
        let n_vocab = self.model.hparams.n_vocab;
        let Some(t) = self.train.as_mut() else { return Ok(None) };
        if t.done() {
            return Ok(None);
        }
        let r = t.step(n_vocab).await;
        // The step wrote the KV cache: whatever a call between two steps left there is gone.
        self.clear_cache();
        match r {
            Ok(s) => Ok(Some(s)),
            Err(e) => {
                self.train = None;
                Err(e)
            }
        }
    }

    /// The run in progress, for its gradient norms and plan.
    pub fn trainer(&mut self) -> Option<&mut Trainer> {
        self.train.as_mut()
    }

    /// `model.dropLora()`: removes the model's LoRA adapter (ending any run in progress, which
    /// may be training it), so later calls run the base weights again; the prompt cache,
    /// computed with the adapter, is forgotten. Whether there was one.
    pub fn drop_lora(&mut self) -> bool {
        if self.model.weights.lora.is_none() {
            return false;
        }
        self.end_generation();
        self.train = None;
        self.model.weights.lora = None;
        if self.model.opt_state.as_ref().is_some_and(|o| o.lora.is_some()) {
            self.model.opt_state = None; // the adapter's
        }
        self.clear_cache();
        self.cache_hooks.clear();
        true
    }

    /// `model.saveLora({ type, optimizer })`: the model's adapter as a llama.cpp LoRA GGUF
    /// (F32 or F16); with `optimizer`, a ggweb checkpoint: the adapter's optimizer state
    /// beside it (checkpoint.rs). `invalid` when it has no adapter, or no state of it.
    pub fn save_lora(&self, ty: GgmlType, optimizer: bool) -> Result<Vec<u8>, ModelError> {
        self.save_lora_stream(ty, optimizer)?.into_vec(self.model.host_left())
    }

    /// [`Session::save_lora`]'s file a chunk at a time ([`SaveStream`]): `{ to: 'opfs' }`, and
    /// the whole file where reads must be awaited (an adapter on WebGPU in the browser).
    pub fn save_lora_stream(&self, ty: GgmlType, optimizer: bool) -> Result<SaveStream, ModelError> {
        let l = self.model.weights.lora.as_ref().ok_or_else(|| {
            ModelError::Invalid("saveLora: the model has no LoRA adapter (train one: train(data, { lora }))".into())
        })?;
        let state = match (optimizer, &self.model.opt_state) {
            (false, _) => None,
            (true, Some(o)) if o.lora.is_some() => Some(o),
            (true, Some(_)) => return Err(ModelError::Invalid(
                "saveLora: optimizer: the model's optimizer state is of its full weights (save({ optimizer: true }) \
                     writes it), not of the adapter"
                    .into(),
            )),
            (true, None) => {
                return Err(ModelError::Invalid(
                    "saveLora: optimizer: the model has no optimizer state of its adapter (train it first)".into(),
                ))
            }
        };
        l.gguf_stream(ty, state, self.model.sched.backends().to_vec())
    }

    /// `Model.load(base, { lora })`: puts the adapter of a llama.cpp LoRA GGUF on the model
    /// (replacing any), with its optimizer state when the file is a checkpoint
    /// (`saveLora({ optimizer: true })`): the next `train` of that adapter resumes it. The
    /// adapter and its state live where a trained one does: on the model's first backend (its
    /// device, WebGPU included, for a model on one, whole or split by layer; written there,
    /// nothing read back). Nothing changes when the file is refused.
    pub fn load_lora(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        let backend = self.model.sched.backend(0).clone();
        let (l, state) = Lora::from_gguf(bytes, &self.model.hparams, &*backend)?;
        self.end_generation();
        self.train = None;
        self.model.weights.lora = Some(l);
        self.model.opt_state = state;
        self.clear_cache();
        self.cache_hooks.clear();
        Ok(())
    }

    /// Ends the run in progress (its compute buffers freed): the model keeps the trained
    /// weights and the run's optimizer state, which `save` / `saveLora({ optimizer: true })`
    /// write, until the next run or `dropLora` (for an adapter's).
    pub fn train_end(&mut self) -> Option<TrainStats> {
        let t = self.train.take()?;
        let stats = TrainStats { stop: if t.done() { "steps" } else { "cancelled" }, steps: t.step, tokens: t.tokens };
        self.model.opt_state = Some(t.into_state());
        Some(stats)
    }
}
