//! LoRA adapters (issue 39's `train(data, { lora })`): low-rank matrices A and B beside a
//! block's matrix weight W, so the layer computes `W·x + (alpha/rank)·B·A·x` (PEFT's LoRA,
//! llama.cpp's `build_lora_mm`) while W stays as the file has it, quantized or not.
//!
//! Shapes (ggml order, as llama.cpp's LoRA GGUFs hold them): W `[n_in, n_out]`, A
//! `[n_in, rank]` (`{weight}.lora_a`), B `[rank, n_out]` (`{weight}.lora_b`). A new adapter
//! starts as PEFT's `reset_lora_parameters`: A Kaiming-uniform with a = √5, that is uniform
//! in ±1/√n_in, B zero (so the model's outputs start unchanged).
//!
//! An adapter lives in [`Weights::lora`](super::gpt2::Weights): every graph the model builds
//! reads it until it is dropped.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::hparams::Hparams;
use super::sampling::Rng;
use super::ModelError;
use crate::allocator::alloc_tensors;
use crate::backend::{Backend, Buffer};
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use crate::types::GgmlType;

/// A block matrix an adapter may sit beside, in the one order adapters are laid out and
/// initialized in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    AttnQkv = 0,
    AttnOutput = 1,
    FfnUp = 2,
    FfnDown = 3,
}

pub const TARGETS: [Target; 4] = [Target::AttnQkv, Target::AttnOutput, Target::FfnUp, Target::FfnDown];

impl Target {
    /// The API's (and the GGUF tensor's) name: `attn_qkv`, ...
    pub fn name(self) -> &'static str {
        ["attn_qkv", "attn_output", "ffn_up", "ffn_down"][self as usize]
    }

    pub fn parse(s: &str) -> Option<Target> {
        TARGETS.into_iter().find(|t| t.name() == s)
    }

    /// `(n_in, n_out)` of the weight.
    pub fn dims(self, hp: &Hparams) -> (usize, usize) {
        let (e, f) = (hp.n_embd, hp.n_ff);
        match self {
            Target::AttnQkv => (e, 3 * e),
            Target::AttnOutput => (e, e),
            Target::FfnUp => (e, f),
            Target::FfnDown => (f, e),
        }
    }
}

/// An adapter's shape: `lora: { rank, alpha, targets }` checked, targets in [`TARGETS`] order.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f32,
    pub targets: Vec<Target>,
}

impl LoraConfig {
    /// `invalid` naming the option: rank at least 1 (its upper bound, n_embd, is the
    /// model's: [`LoraConfig::check_model`]), alpha (default: rank) finite and positive, targets
    /// (default `['attn_qkv']`, PEFT's for GPT-2) known, non-empty, each once.
    pub fn new(rank: u32, alpha: Option<f32>, targets: Option<&[String]>) -> Result<Self, ModelError> {
        let bad = |m: String| Err(ModelError::Invalid(m));
        if rank == 0 {
            return bad(format!("lora.rank must be at least 1, got {rank}"));
        }
        let alpha = alpha.unwrap_or(rank as f32);
        if !(alpha.is_finite() && alpha > 0.0) {
            return bad(format!("lora.alpha must be a finite number above 0, got {alpha}"));
        }
        let mut ts = Vec::new();
        for name in targets.unwrap_or(&[String::from("attn_qkv")]) {
            let Some(t) = Target::parse(name) else {
                return bad(format!(
                    "lora.targets: unknown target {name:?} (the targets are 'attn_qkv', 'attn_output', 'ffn_up', 'ffn_down')"
                ));
            };
            if ts.contains(&t) {
                return bad(format!("lora.targets: {name:?} is listed twice"));
            }
            ts.push(t);
        }
        if ts.is_empty() {
            return bad(
                "lora.targets is empty: name at least one of 'attn_qkv', 'attn_output', 'ffn_up', 'ffn_down'".into()
            );
        }
        ts.sort();
        Ok(LoraConfig { rank: rank as usize, alpha, targets: ts })
    }

    /// `invalid` when the rank is above the model's n_embd (a rank no weight's smaller side
    /// reaches is no longer low-rank).
    pub fn check_model(&self, hp: &Hparams) -> Result<(), ModelError> {
        if self.rank > hp.n_embd {
            return Err(ModelError::Invalid(format!(
                "lora.rank must be from 1 to the model's n_embd ({}), got {}",
                hp.n_embd, self.rank
            )));
        }
        Ok(())
    }

    /// Bytes of the adapter's f32 A and B over every block.
    pub fn nbytes(&self, hp: &Hparams) -> u64 {
        let per_layer: usize = self.targets.iter().map(|t| t.dims(hp)).map(|(i, o)| self.rank * (i + o)).sum();
        4 * (per_layer * hp.n_layer) as u64
    }
}

/// One adapted weight's A `[n_in, rank]` and B `[rank, n_out]`.
pub struct LoraPair {
    pub a: Tensor,
    pub b: Tensor,
}

/// An adapter over a model's blocks, in f32 host memory.
pub struct Lora {
    pub cfg: LoraConfig,
    /// Per block, per [`Target`] (indexed by it).
    pub layers: Vec<[Option<LoraPair>; 4]>,
    _ctx: Context,
    pub buffers: Vec<Rc<dyn Buffer>>,
}

impl Lora {
    /// Allocates an adapter (zeros) in `backend`'s buffer type, its tensors named as
    /// llama.cpp's LoRA GGUFs name them (`blk.{il}.{target}.weight.lora_a` / `.lora_b`).
    pub fn alloc(hp: &Hparams, cfg: LoraConfig, backend: &dyn Backend) -> Result<Lora, ModelError> {
        let n = 2 * cfg.targets.len() * hp.n_layer;
        let ctx = Context::new(ContextParams { mem_size: (n + 1) * TENSOR_OVERHEAD, no_alloc: true });
        let r = cfg.rank as i64;
        let layers: Vec<[Option<LoraPair>; 4]> = (0..hp.n_layer)
            .map(|il| {
                let mut l: [Option<LoraPair>; 4] = [None, None, None, None];
                for &t in &cfg.targets {
                    let (n_in, n_out) = t.dims(hp);
                    let a = ctx.new_tensor_2d(GgmlType::F32, n_in as i64, r);
                    a.set_name(&format!("blk.{il}.{}.weight.lora_a", t.name()));
                    let b = ctx.new_tensor_2d(GgmlType::F32, r, n_out as i64);
                    b.set_name(&format!("blk.{il}.{}.weight.lora_b", t.name()));
                    l[t as usize] = Some(LoraPair { a, b });
                }
                l
            })
            .collect();
        let lora = Lora { cfg, layers, _ctx: ctx, buffers: Vec::new() };
        let buffers = alloc_tensors(&lora.tensors(), &*backend.buffer_type())
            .map_err(|e| ModelError::oom("the LoRA adapter's A and B", e))?;
        for b in &buffers {
            b.clear(0);
        }
        Ok(Lora { buffers, ..lora })
    }

    /// PEFT's initialization from `seed` through the project's generator ([`Rng`]): every A
    /// in block order, then [`Target`] order, its values in memory order (A's rows of n_in),
    /// each `(2u − 1)/√n_in` for u uniform in [0, 1) (computed in f64, rounded to f32); B zero.
    /// tests/fixtures/make_train_ref.py draws the same values.
    pub fn init(&self, seed: u64) {
        let mut rng = Rng::new(seed);
        for l in &self.layers {
            for p in l.iter().flatten() {
                let n_in = p.a.ne[0] as usize;
                let bound = 1.0 / libm::sqrt(n_in as f64);
                let a: Vec<f32> = (0..p.a.nelements()).map(|_| ((2.0 * rng.next_f64() - 1.0) * bound) as f32).collect();
                p.a.set_bytes(bytemuck::cast_slice(&a), 0);
                p.b.set_bytes(&vec![0u8; p.b.nbytes()], 0);
            }
        }
    }

    /// `alpha / rank`.
    pub fn scale(&self) -> f32 {
        self.cfg.alpha / self.cfg.rank as f32
    }

    /// Every A and B, A before B, in [`Lora::init`]'s order.
    pub fn tensors(&self) -> Vec<Tensor> {
        self.layers.iter().flat_map(|l| l.iter().flatten().flat_map(|p| [p.a.clone(), p.b.clone()])).collect()
    }

    pub fn nbytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.size() as u64).sum()
    }
}

/// `W·x` for block `il`'s `target` weight `w`, plus `(alpha/rank)·B·(A·x)` when `lora` adapts
/// it (nodes `l{il}.{target}.lora_a`, `.lora_b`, `.lora_scaled`, `.base`, `.lora_sum`). Without an
/// adapter the one `mul_mat` node of the plain graph.
pub fn lora_mm(ctx: &Context, w: &Tensor, x: &Tensor, lora: Option<&Lora>, il: usize, target: Target) -> Tensor {
    let base = ctx.mul_mat(w, x); // [n_out, N]
    let Some((l, p)) = lora.and_then(|l| Some((l, l.layers.get(il)?[target as usize].as_ref()?))) else {
        return base;
    };
    let name = |s: &str| format!("l{il}.{}.{s}", target.name());
    base.set_name(&name("base"));
    let ax = ctx.mul_mat(&p.a, x); // [rank, N]
    ax.set_name(&name("lora_a"));
    let bax = ctx.mul_mat(&p.b, &ax); // [n_out, N]
    bax.set_name(&name("lora_b"));
    let scaled = ctx.scale(&bax, l.scale()); // [n_out, N]
    scaled.set_name(&name("lora_scaled"));
    let sum = ctx.add(&base, &scaled); // [n_out, N]
    sum.set_name(&name("lora_sum"));
    sum
}
