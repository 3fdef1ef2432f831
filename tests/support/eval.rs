//! Synchronous runs for tests: the one forward pass ([`Gpt2::decode`]) driven to completion
//! with [`block_on`] (natively every read completes within its first poll).

use ggweb::model::context::{block_on, Batch, Gpt2};
use ggweb::model::ModelError;

pub trait Eval {
    /// Logits of `tokens` at positions `n_past..` (in chunks of `n_batch`): every
    /// position's (`[n][n_vocab]`) when `all`, else the last one's.
    fn eval(&mut self, tokens: &[u32], n_past: usize, all: bool) -> Result<Vec<f32>, ModelError>;
}

impl Eval for Gpt2 {
    fn eval(&mut self, tokens: &[u32], n_past: usize, all: bool) -> Result<Vec<f32>, ModelError> {
        let batch = if all { Batch::all(tokens, n_past) } else { Batch::last(tokens, n_past) };
        block_on(self.decode(batch)).map(|o| o.logits)
    }
}
