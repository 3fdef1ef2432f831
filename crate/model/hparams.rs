//! GPT-2's hyperparameters (llama.cpp's `llama-hparams`), read from a GGUF file's `gpt2.*`
//! keys: what the graph ([`super::gpt2`]), the KV cache and the hook points are sized by.

/// `gpt2.*` keys of a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct Hparams {
    pub n_vocab: usize,
    /// Positions the model was trained for (rows of `position_embd`).
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub eps: f32,
}

impl Hparams {
    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }
}
