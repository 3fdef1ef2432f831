//! The KV cache (llama.cpp's `llama-kv-cache`): K and V of every past position per layer,
//! and the cells that say which position and sequences each slot holds. The model context
//! ([`super::context`]) owns one and the graph ([`super::gpt2`]) reads and writes it.

use alloc::format;
use alloc::rc::Rc;
use alloc::vec;
use alloc::vec::Vec;

use super::hparams::Hparams;
use super::ModelError;
use crate::allocator::alloc_tensors;
use crate::backend::{Backend, Buffer, BufferType};
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use crate::types::GgmlType;

/// K and V of every past position, one pair of flat tensors per layer ([n_embd * n_ctx]
/// each, F32 or F16: [`Gpt2Options::kv_type`](super::context::Gpt2Options::kv_type)), in their own buffer: they live across
/// graph runs. With F16 the `cpy` that stores each run's K and V rounds them to f16, and
/// attention's mul_mat reads the F16 views as it reads F16 weights. K holds
/// position after position ([n_embd, n_ctx]); V is transposed ([n_ctx, n_embd]), as
/// llama.cpp keeps it, so that attention multiplies by it without a copy.
pub struct KvCache {
    pub ctx: Context,
    pub k: Vec<Tensor>,
    pub v: Vec<Tensor>,
    pub buffers: Vec<Rc<dyn Buffer>>,
    pub n_ctx: usize,
    /// F32 or F16.
    pub ty: GgmlType,
    /// What each cell holds (llama.cpp's kv cells): its position and sequences.
    pub cells: Vec<Cell>,
}

/// One KV cell: the position of the token whose K/V it holds and the sequences (a bitset,
/// sequence ids 0..64) that see it. Empty when `seqs` is 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    pub pos: u32,
    pub seqs: u64,
}

impl KvCache {
    pub fn new(hp: &Hparams, n_ctx: usize, ty: GgmlType, backend: &dyn Backend) -> Result<KvCache, ModelError> {
        KvCache::new_per_layer(hp, n_ctx, ty, &vec![backend.buffer_type(); hp.n_layer])
    }

    /// Layer `il`'s K and V in buffers of `bufts[il]`: each layer's cache on the device
    /// that runs the layer (llama.cpp's llama-kv-cache), so attention never crosses devices.
    pub fn new_per_layer(
        hp: &Hparams,
        n_ctx: usize,
        ty: GgmlType,
        bufts: &[Rc<dyn BufferType>],
    ) -> Result<KvCache, ModelError> {
        if !matches!(ty, GgmlType::F32 | GgmlType::F16) {
            return Err(ModelError::Config(format!("KV cache type {ty}: only f32 and f16 are supported")));
        }
        if bufts.len() != hp.n_layer {
            return Err(ModelError::Config(format!(
                "KV cache: {} buffer types for {} layers",
                bufts.len(),
                hp.n_layer
            )));
        }
        let ctx = Context::new(ContextParams { mem_size: (2 * hp.n_layer + 1) * TENSOR_OVERHEAD, no_alloc: true });
        let n = (hp.n_embd * n_ctx) as i64;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for il in 0..hp.n_layer {
            let kt = ctx.new_tensor_1d(ty, n);
            kt.set_name(&format!("cache_k_l{il}"));
            let vt = ctx.new_tensor_1d(ty, n);
            vt.set_name(&format!("cache_v_l{il}"));
            k.push(kt);
            v.push(vt);
        }
        // Layers of one buffer type share buffers, in layer order (K then V per layer).
        let mut groups: Vec<(Rc<dyn BufferType>, Vec<Tensor>)> = Vec::new();
        for il in 0..hp.n_layer {
            let pair = [k[il].clone(), v[il].clone()];
            match groups.iter_mut().find(|(b, _)| b.name() == bufts[il].name()) {
                Some((_, ts)) => ts.extend(pair),
                None => groups.push((bufts[il].clone(), pair.to_vec())),
            }
        }
        let mut buffers = Vec::new();
        for (buft, ts) in &groups {
            buffers.extend(alloc_tensors(ts, &**buft)?);
        }
        for b in &buffers {
            b.clear(0);
        }
        Ok(KvCache { ctx, k, v, buffers, n_ctx, ty, cells: vec![Cell::default(); n_ctx] })
    }

    /// Cells an attention over the cache must read: one past the last non-empty cell.
    pub fn n_kv(&self) -> usize {
        self.cells.iter().rposition(|c| c.seqs != 0).map_or(0, |i| i + 1)
    }

    /// Cells in use.
    pub fn used(&self) -> usize {
        self.cells.iter().filter(|c| c.seqs != 0).count()
    }

    /// The first run of `n` empty cells (llama.cpp's find_slot).
    pub fn find_slot(&self, n: usize) -> Option<usize> {
        let mut run = 0;
        for (i, c) in self.cells.iter().enumerate() {
            run = if c.seqs == 0 { run + 1 } else { 0 };
            if run == n {
                return Some(i + 1 - n);
            }
        }
        None
    }

    /// The causal layout's view: cells `0..len` hold positions `0..len` of sequence 0, the
    /// rest nothing.
    pub fn set_causal(&mut self, len: usize) {
        for (i, c) in self.cells.iter_mut().enumerate() {
            *c = if i < len { Cell { pos: i as u32, seqs: 1 } } else { Cell::default() };
        }
    }

    /// Adds the sequences `to` (bitset) to every cell of sequence `from` (llama.cpp's seq_cp).
    pub fn seq_cp(&mut self, from: usize, to: u64) {
        for c in self.cells.iter_mut().filter(|c| c.seqs >> from & 1 == 1) {
            c.seqs |= to;
        }
    }

    /// Removes the sequences `seqs` (bitset) from every cell, freeing cells left without one.
    pub fn seq_rm(&mut self, seqs: u64) {
        for c in self.cells.iter_mut() {
            c.seqs &= !seqs;
        }
    }

    /// Reorders sequences: new sequence `j` sees exactly the cells old sequence `src[j]` saw;
    /// sequences `src.len()..64` are dropped. Beams reorder this way, without moving K/V.
    pub fn seq_permute(&mut self, src: &[usize]) {
        for c in self.cells.iter_mut() {
            let old = c.seqs;
            c.seqs = src.iter().enumerate().fold(0, |acc, (j, &s)| acc | ((old >> s & 1) << j));
        }
    }

    pub fn bytes(&self) -> usize {
        self.buffers.iter().map(|b| b.size()).sum()
    }
}
