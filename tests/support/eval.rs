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

/// Logits of `n` sequences decoded side by side (each step's products take `n` rows of
/// activations: the kernels' several-sequence path): `prompt` into sequence 0, shared with
/// sequences `1..n`, then `steps` batches of one token per sequence, sequence j's own
/// token at its next position. Every batch's logits (`[n][n_vocab]` each).
pub fn seq_steps(m: &mut Gpt2, prompt: &[u32], n: usize, steps: usize) -> Result<Vec<Vec<f32>>, ModelError> {
    use ggweb::model::context::{Logits, SeqPos};
    m.kv.seq_rm(!0);
    block_on(m.decode(Batch::last(prompt, 0)))?;
    m.kv.seq_cp(0, ((1u64 << n) - 1) & !1);
    let n_vocab = m.hparams.n_vocab as u32;
    let mut out = Vec::new();
    for s in 0..steps {
        let pos = (prompt.len() + s) as u32;
        let tokens: Vec<u32> = (0..n as u32).map(|j| (pos * 7 + 131 * j + 17 * s as u32 + 5) % n_vocab).collect();
        let seq: Vec<SeqPos> = (0..n).map(|j| SeqPos { pos, seqs: 1 << j }).collect();
        out.push(
            block_on(m.decode(Batch { tokens: &tokens, logits: Logits::All, seq: &seq, ..Batch::default() }))?.logits,
        );
    }
    Ok(out)
}
