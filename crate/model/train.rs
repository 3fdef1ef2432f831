//! Full fine-tuning (issue 39's `model.train`), the way ggml-opt trains: the weights are the
//! params, the forward pass of a batch's sequences with its loss and backward pass is one
//! graph built once (its compute buffers planned once) and run for every batch of every
//! step, and the optimizer step is a second graph of `opt_step_adamw` / `opt_step_sgd`
//! nodes, one per weight, that update the weights in place from their optimizer state.
//!
//! - Params: every weight tensor as the file has it (a tied head, `token_embd` read twice, is
//!   one tensor whose gradient sums both uses). Weights must be F32, F16 or BF16; unless all
//!   are already plain F32 host tensors they are converted to F32 copies once, before the first
//!   step, and the model keeps those (quantized: `unsupported`, naming the tensor).
//! - State: per weight one tensor `[n, rows]` planned with the weights: row 0 the gradient
//!   accumulated over the batch (zeroed by the optimizer step that consumes it), then AdamW's
//!   m and v (SGD: the momentum buffer); in chunks of elements `[len_c, rows]` where that is
//!   over one buffer (WebGPU's maxBufferSize; checkpoint.rs `state_chunks`), each chunk with
//!   its own gradient store and optimizer step over its elements.
//! - Batching: update k trains on sequences `(k·batchSize + i) mod n`, i = 0..batchSize−1;
//!   each sequence's loss is weighted `−1/(batchSize·(seqLen−1))` at its targets, so the
//!   accumulated gradient is that of the mean next-token cross-entropy over the batch. The
//!   batch's sequences are one graph run of `batchSize·seqLen` tokens (positions from 0 in
//!   each, a block-diagonal causal KQ mask), so every weight product is one wide gemm, when
//!   they fit [`MAX_RUN_TOKENS`] and the plan fits the budget; else a divisor
//!   of the batch per run, the runs' gradients added up (LoRA: one sequence per run).
//! - Clipping (global L2 norm, `clip_grad_norm_`) scales the gradient inside the optimizer
//!   step; the norm is summed on the host from the accumulated gradients (f64).
//! - Memory: the f32 weights (when converted) and the state are checked against the budget
//!   before anything is allocated, the activations and gradients by planning the graph
//!   (`OverBudget` with the sizes either way); the model is untouched when this fails.
//!
//! The graph reads each run's own K and V and writes nothing into the model's KV cache
//! (`Ubatch::store_kv` off); callers still forget the prompt cache (`Session::train_start`,
//! session_train.rs), as a run that changes the weights makes it stale.
//! Backends: training runs where inference does, on the model's scheduler (a model split by
//! layer between WebGPU and the CPU trains split the same way): each param's state is allocated
//! on the backend whose memory holds the param, the gradients accumulate there, and its
//! optimizer step runs there (shaders/opt.wgsl on WebGPU, cpu/ops_opt.rs on the CPU), one
//! optimizer graph per backend; weights, gradients and m/v stay in that memory between steps.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::checkpoint::{describe, OptMeta, OptState};
use super::context::Gpt2;
use super::gpt2::{build_graph_with, GraphIo, Ubatch, Weights};
use super::lora::{Lora, LoraConfig};
pub use super::optimizer::{Optimizer, MAX_STEPS};
use super::ModelError;
use crate::allocator::alloc_tensors;
use crate::backend::{Backend, Buffer};
use crate::graph::Graph;
use crate::sched::Sched;
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use crate::types::GgmlType;

/// How the learning rate falls after the warmup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decay {
    Cosine,
    Linear,
    None,
}

/// `lrSchedule`: Hugging Face's `get_{cosine,linear,constant}_schedule_with_warmup` over the
/// run's `steps` (the factor of update k, from 0: with a warmup the first update has lr 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LrSchedule {
    pub warmup: u32,
    pub decay: Decay,
}

impl LrSchedule {
    /// The learning rate's factor at update `k` of `total`.
    pub fn factor(&self, k: u32, total: u32) -> f64 {
        let (k, w, t) = (k as f64, self.warmup as f64, total as f64);
        if k < w {
            return k / w.max(1.0);
        }
        let progress = (k - w) / (t - w).max(1.0);
        match self.decay {
            Decay::None => 1.0,
            Decay::Linear => ((t - k) / (t - w).max(1.0)).max(0.0),
            // num_cycles 0.5: half a cosine from 1 to 0.
            Decay::Cosine => (0.5 * (1.0 + libm::cos(core::f64::consts::PI * progress))).max(0.0),
        }
    }
}

/// A training run's settings, checked ([`TrainConfig::check`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    pub seq_len: usize,
    pub batch_size: usize,
    pub steps: u32,
    pub optimizer: Optimizer,
    pub grad_clip: Option<f32>,
    pub schedule: Option<LrSchedule>,
    /// For what draws random numbers (a new LoRA adapter's A); full training draws none
    /// (no dropout, the data in order).
    pub seed: u64,
    /// Train a low-rank adapter ([`super::lora`]) instead of the weights.
    pub lora: Option<LoraConfig>,
}

impl TrainConfig {
    /// `invalid` naming the option (in the API's spelling) that cannot work.
    pub fn check(&self, n_ctx: usize) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Invalid(m));
        if self.seq_len < 2 || self.seq_len > n_ctx {
            return bad(format!("seqLen must be from 2 to nCtx ({n_ctx}), got {}", self.seq_len));
        }
        if self.batch_size == 0 {
            return bad("batchSize must be at least 1, got 0".into());
        }
        if self.steps == 0 || self.steps > MAX_STEPS {
            return bad(format!("steps must be from 1 to {MAX_STEPS}, got {}", self.steps));
        }
        let real = |k: &str, v: f32, lo: f32, hi: f32, lo_open: bool, hi_open: bool| {
            let ok = v.is_finite() && if lo_open { v > lo } else { v >= lo } && if hi_open { v < hi } else { v <= hi };
            if ok {
                Ok(())
            } else {
                let (l, h) = (if lo_open { "(" } else { "[" }, if hi_open { ")" } else { "]" });
                Err(ModelError::Invalid(format!("{k} must be a number in {l}{lo}, {hi}{h}, got {v}")))
            }
        };
        match self.optimizer {
            Optimizer::AdamW { lr, beta1, beta2, eps, weight_decay } => {
                real("optimizer.lr", lr, 0.0, f32::MAX, false, false)?;
                real("optimizer.beta1", beta1, 0.0, 1.0, false, true)?;
                real("optimizer.beta2", beta2, 0.0, 1.0, false, true)?;
                real("optimizer.eps", eps, 0.0, f32::MAX, false, false)?;
                real("optimizer.weightDecay", weight_decay, 0.0, f32::MAX, false, false)?;
            }
            Optimizer::Sgd { lr, momentum, weight_decay } => {
                real("optimizer.lr", lr, 0.0, f32::MAX, false, false)?;
                real("optimizer.momentum", momentum, 0.0, 1.0, false, true)?;
                real("optimizer.weightDecay", weight_decay, 0.0, f32::MAX, false, false)?;
            }
        }
        if let Some(c) = self.grad_clip {
            real("gradClip", c, 0.0, f32::MAX, true, false)?;
        }
        if let Some(s) = self.schedule {
            if s.warmup > self.steps {
                return bad(format!("lrSchedule.warmup must be at most steps ({}), got {}", self.steps, s.warmup));
            }
        }
        Ok(())
    }
}

// ts: export TrainMemory
/// Bytes of a training run's memory plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct TrainMemory {
    /// F32 copies of the weights (0 when the weights are trained where they are); for LoRA,
    /// a new adapter's A and B (0 when the model's adapter trains on).
    pub weights: u64,
    /// Gradients accumulated over the batch and the optimizer's state.
    pub state: u64,
    /// The training graph's compute buffers: activations kept for the backward pass and
    /// the gradients.
    pub compute: u64,
}

// ts: export TrainItem
/// What one update reports (JS `TrainStep` adds `tokensPerSecond`, which engine.js times).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct TrainStep {
    /// Updates done (from 1; a run resumed from a checkpoint goes on from its count).
    pub step: u32,
    /// The batch's mean loss, before this update.
    pub loss: f32,
    /// Tokens trained on so far (every token of every sequence of every update; a resumed
    /// run's include the checkpoint's).
    pub tokens: u64,
}

/// One trained weight: the tensor and its state (`[n, rows]`: gradient, then optimizer state;
/// in chunks of consecutive elements `[len_c, rows]` where that is over one buffer's
/// `max_size`: checkpoint.rs `state_chunks`).
struct Param {
    t: Tensor,
    state: Vec<Tensor>,
    /// Weight decay applies (two or more dimensions: matrices and embeddings).
    decay: bool,
    /// The backend (index in the run's) whose memory holds the param and its state.
    home: usize,
}

/// A training run over a model's weights (see the module docs).
pub struct Trainer {
    pub cfg: TrainConfig,
    pub memory: TrainMemory,
    seqs: Vec<Vec<u32>>,
    params: Vec<Param>,
    /// Hyper-parameters of the optimizer step, per backend: `[0]` for decayed weights, `[1]`
    /// for the rest.
    hyper: Vec<[Tensor; 2]>,
    /// The training graph (forward, loss, backward, accumulation) and its scheduler.
    tg: TrainGraph,
    /// The optimizer graphs: per backend that holds params, its step nodes.
    opt: Vec<(Rc<dyn Backend>, Graph)>,
    /// Headers of the optimizer nodes; the hyper-parameters' header and memory.
    _ctx: Context,
    _hyper_ctx: Context,
    _hyper_buffers: Vec<Rc<dyn Buffer>>,
    /// The params' state (a resumed checkpoint's, or new), kept by the model after the run.
    state: OptState,
    /// Updates done, counting a resumed checkpoint's (`step − start` by this run).
    pub step: u32,
    start: u32,
    pub tokens: u64,
    /// Sequences trained on, counting a resumed checkpoint's: the next batch starts here.
    sequences: u64,
    /// Each weight's gradient L2 norm (GGUF name, norm) at the last update, before clipping,
    /// and their global norm: computed when clipping, or when asked ([`Trainer::norms`]).
    pub grad_norms: Vec<(String, f64)>,
    pub grad_norm: Option<f64>,
    /// Compute the gradient norms at every update even without clipping (a debugging aid).
    pub norms: bool,
}

/// The weights of `w`, each once (a tied head is `token_embd`), in the file's order.
fn weight_list(w: &Weights) -> Vec<Tensor> {
    let mut v = vec![w.token_embd.clone(), w.position_embd.clone()];
    for ly in &w.layers {
        v.extend(ly.tensors().map(Tensor::clone));
    }
    v.extend([w.output_norm_w.clone(), w.output_norm_b.clone()]);
    if w.output != w.token_embd {
        v.push(w.output.clone());
    }
    v
}

/// The backend of `backends` whose memory holds `t` (the scheduler's rule for weights: the
/// backend of its buffer's type), else the host's, the last.
fn backend_index(backends: &[Rc<dyn Backend>], t: &Tensor) -> usize {
    let host = backends.len() - 1;
    let Some(d) = t.data() else { return host };
    let name = d.buffer.buffer_type_name();
    backends.iter().position(|b| b.buffer_type().name() == name).unwrap_or(host)
}

/// What a run may take: the least of `backend`'s budget and what the model's budget leaves
/// besides its own buffers ([`Gpt2::host_left`], taken before the run installs anything).
/// A resumed checkpoint's state (`resume`) is counted in the plan's state, and on a host
/// backend it already sits in the memory whose budget is read (on wasm, the address space
/// left now): its bytes are given back to that budget, so they are not counted twice.
fn run_limit(backend: &dyn Backend, left: Option<u64>, resume: Option<&OptState>) -> Option<u64> {
    let buft = backend.buffer_type();
    let held = if buft.is_host() { resume.map_or(0, |r| r.nbytes()) } else { 0 };
    match (buft.budget().map(|b| b.saturating_add(held)), left) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `OverBudget` when `memory`'s params (`what`), state and compute cannot fit `limit`: before
/// anything is allocated (compute 0: "before the activations"), then with the planned compute.
fn check_budget(limit: Option<u64>, memory: &TrainMemory, what: &str) -> Result<(), ModelError> {
    let Some(limit) = limit else { return Ok(()) };
    let needed = memory.weights + memory.state + memory.compute;
    if needed > limit {
        let compute = match memory.compute {
            0 => String::from("before the activations"),
            c => format!("{c} bytes of activations and gradients (the training graph's compute buffer)"),
        };
        return Err(over_budget(
            format!(
                "training: {} bytes of {what}, {} bytes of gradients and optimizer state, {compute}",
                memory.weights, memory.state
            ),
            needed,
            limit,
        ));
    }
    Ok(())
}

fn over_budget(what: String, needed: u64, limit: u64) -> ModelError {
    ModelError::OverBudget { what, needed, limit }
}

/// F32 copies of `weights`, each in a buffer of the backend that holds it (`backends`): their
/// context (same names) and buffers. Each weight is read and converted one at a time.
fn f32_copies(weights: &[Tensor], backends: &[Rc<dyn Backend>]) -> Result<(Context, Vec<Rc<dyn Buffer>>), ModelError> {
    let ctx = Context::new(ContextParams { mem_size: (weights.len() + 1) * TENSOR_OVERHEAD, no_alloc: true });
    let copies: Vec<Tensor> = weights
        .iter()
        .map(|w| {
            let t = ctx.new_tensor(GgmlType::F32, &w.ne);
            t.set_name(&w.name());
            t
        })
        .collect();
    let mut buffers = Vec::new();
    for (b, backend) in backends.iter().enumerate() {
        let group: Vec<Tensor> = weights
            .iter()
            .zip(&copies)
            .filter(|(w, _)| backend_index(backends, w) == b)
            .map(|(_, c)| c.clone())
            .collect();
        if !group.is_empty() {
            buffers.extend(
                alloc_tensors(&group, &*backend.buffer_type())
                    .map_err(|e| ModelError::oom("training's f32 weights", e))?,
            );
        }
    }
    for (w, c) in weights.iter().zip(&copies) {
        let mut bytes = vec![0u8; w.nbytes()];
        w.try_get_bytes(&mut bytes, 0)?;
        let vals = crate::quants::dequantize(w.ty, &bytes)
            .map_err(|e| ModelError::Unsupported(format!("training: weight '{}': {e:?}", w.name())))?;
        c.set_bytes(bytemuck::cast_slice(&vals), 0);
    }
    Ok((ctx, buffers))
}

/// Tokens one training graph run may hold: several of a batch's sequences per run make every
/// weight product one wide gemm, but the activations (and attention's block-diagonal scores,
/// quadratic in it) grow with it.
const MAX_RUN_TOKENS: usize = 512;

/// How many sequences one graph run may take, most first: the divisors of `batch` whose
/// tokens fit [`MAX_RUN_TOKENS`]; 1 always.
fn seqs_per_run(batch: usize, seq_len: usize) -> Vec<usize> {
    let cap = MAX_RUN_TOKENS.max(seq_len);
    let mut v: Vec<usize> = (2..=batch).rev().filter(|g| batch.is_multiple_of(*g) && g * seq_len <= cap).collect();
    v.push(1);
    v
}

/// The training graph of `seqs` sequences per run: their forward pass (one ubatch of
/// `seqs·seqLen` tokens, each attending only to its own sequence through the KQ mask), the
/// weighted log-probabilities (the loss), the backward pass, and each param's gradient added
/// into its state's row 0; planned by its own scheduler.
struct TrainGraph {
    seqs: usize,
    /// The forward graph's inputs (and its headers), the loss's weights and per-row losses.
    io: GraphIo,
    w_in: Tensor,
    /// [seqs·(seqLen−1)] i32: where each predicted position's target is in the flattened loss.
    loss_at: Tensor,
    loss_rows: Tensor,
    gf: Graph,
    sched: Sched,
    /// Bytes of the compute buffers.
    compute: u64,
    /// Headers of the loss, backward and accumulation nodes.
    _ctx: Context,
}

impl TrainGraph {
    fn build(
        model: &Gpt2,
        w: &Weights,
        params: &[Param],
        cfg: &TrainConfig,
        seqs: usize,
        backends: Vec<Rc<dyn Backend>>,
    ) -> Result<TrainGraph, ModelError> {
        let t = seqs * cfg.seq_len;
        // Attention reads the run's own K/V (Ubatch::own_kv): no gradient of the cache, and
        // nothing written to it (the run may hold more tokens than the cache has cells).
        let ub = Ubatch { own_kv: true, store_kv: false, ..Ubatch::at(0, t, t) };
        let mut io = build_graph_with(&model.hparams, w, &model.kv, ub, &[]);
        let ctx = Context::new(ContextParams {
            mem_size: (8 * io.graph.nodes.len() + 8 * params.iter().map(|p| p.state.len()).sum::<usize>() + 64)
                * TENSOR_OVERHEAD,
            no_alloc: true,
        });
        let mut gf = core::mem::replace(&mut io.graph, Graph::with_size(1));
        gf.size = usize::MAX;
        let logits = &io.logits; // [n_vocab, T]
        let w_in = ctx.new_tensor_2d(GgmlType::F32, logits.ne[0], logits.ne[1]);
        w_in.set_name("loss_w");
        w_in.set_input();
        // The loss is Σ w ⊙ log_softmax(logits), w = −1/(B(T−1)) at each predicted position's
        // target and 0 elsewhere (`loss_w`, an input): the backward pass is seeded with w as
        // log_softmax's gradient (no [n_vocab, T] product nor its backward), and each term is
        // log p(target), picked here and scaled by w on the host (the same f32 product).
        let lsm = ctx.log_soft_max(logits); // [n_vocab, T]
        lsm.set_name("loss_log_softmax");
        gf.build_forward_expand(&lsm);
        // Each predicted position's log-probability, picked at its target (an element per
        // row: a gather, not a sum over the vocabulary).
        let loss_at = ctx.new_tensor_1d(GgmlType::I32, (seqs * (cfg.seq_len - 1)) as i64);
        loss_at.set_name("loss_at");
        loss_at.set_input();
        let flat = ctx.reshape_2d(&lsm, 1, logits.ne[0] * logits.ne[1]); // [1, n_vocab·T]
        let loss_rows = ctx.get_rows(&flat, &loss_at); // [1, seqs·(seqLen−1)]
        loss_rows.set_name("loss_rows");
        loss_rows.set_output();
        gf.build_forward_expand(&loss_rows);
        for p in params {
            p.t.set_param();
        }
        // The seed copied into the compute buffer (one pass over [n_vocab, T]): freed after
        // its one reader, its memory takes `output.weight`'s gradient as the product's did
        // (866 MiB of compute for the 124M shape at batch 4 × 128; the input itself as the
        // seed planned 1013).
        let seed = ctx.cont(&w_in); // [n_vocab, T]
        seed.set_name("loss_w_seed");
        gf.build_backward_expand_seeded(&ctx, &lsm, Some(&seed));
        for p in params {
            p.t.clear_param();
        }
        // One run per update: the gradient row is zero before it (the optimizer step zeroes
        // it), so the run's gradient is stored, not added (0 + g is g).
        let one_run = seqs == cfg.batch_size;
        for p in params {
            let Some(g) = gf.grad(&p.t) else { continue }; // a weight the loss does not read
                                                           // Row 0 of each state chunk takes its elements of the gradient: all of it
                                                           // (p.t's shape) when the state is one tensor, else [len_c] from element start_c.
            let whole = p.state.len() == 1;
            let g = if whole || g.is_contiguous() { g } else { ctx.cont(&g) };
            let mut start = 0usize;
            for (c, chunk) in p.state.iter().enumerate() {
                let len = chunk.ne[0];
                let tag = if whole { String::new() } else { format!(".{c}") };
                let (acc, gc) = if whole {
                    (ctx.reshape(&ctx.view_1d(chunk, p.t.nelements(), 0), &p.t.ne), g.clone())
                // p.t.ne
                } else {
                    let gc = ctx.view_1d(&g, len, 4 * start); // [len_c]
                    gc.set_name(&format!("{}.grad{tag}", p.t.name()));
                    (ctx.view_1d(chunk, len, 0), gc) // [len_c]
                };
                acc.set_name(&format!("{}.grad_acc{tag}", p.t.name()));
                let sum = if one_run {
                    gc
                } else {
                    let sum = ctx.add(&acc, &gc); // as acc
                    sum.set_name(&format!("{}.grad_sum{tag}", p.t.name()));
                    sum
                };
                let store = ctx.cpy(&sum, &acc); // as acc
                store.set_name(&format!("{}.grad_store{tag}", p.t.name()));
                gf.build_forward_expand(&store);
                start += len as usize;
            }
        }
        gf.size = gf.nodes.len().max(gf.leafs.len());

        let mut sched = Sched::new(backends)?;
        sched.reserve(&gf).map_err(|e| ModelError::oom("training's compute buffer (activations and gradients)", e))?;
        sched
            .alloc_graph(&gf)
            .map_err(|e| ModelError::oom("training's compute buffer (activations and gradients)", e))?;
        let compute = (0..sched.n_backends()).map(|i| sched.compute_buffer_size(i) as u64).sum();
        Ok(TrainGraph { seqs, io, w_in, loss_at, loss_rows, gf, sched, compute, _ctx: ctx })
    }
}

impl Trainer {
    /// Plans a run over `model`'s weights on `seqs` (token ids, each `cfg.seq_len` long):
    /// converts the weights to F32 when needed (the model keeps them), allocates the state,
    /// builds and plans the training and optimizer graphs. A model loaded from a checkpoint
    /// with optimizer state (checkpoint.rs) resumes it, when it is of this optimizer, adapter
    /// shape and trained tensors (`invalid` naming what differs); any other state the model
    /// holds (its last run's) is freed first, and the run starts a new one. Nothing else of
    /// the model changes when this fails.
    pub fn new(model: &mut Gpt2, seqs: Vec<Vec<u32>>, cfg: TrainConfig) -> Result<Trainer, ModelError> {
        let mut resume = model.opt_state.take().filter(|o| o.resume);
        let r = Trainer::new_with(model, seqs, cfg, &mut resume);
        if r.is_err() {
            model.opt_state = resume; // still the checkpoint's, to resume later
        }
        r
    }

    fn new_with(
        model: &mut Gpt2,
        seqs: Vec<Vec<u32>>,
        cfg: TrainConfig,
        resume: &mut Option<OptState>,
    ) -> Result<Trainer, ModelError> {
        let hp = model.hparams.clone();
        cfg.check(model.n_ctx())?;
        if seqs.is_empty() {
            return Err(ModelError::Invalid("train: data is empty: no training sequence".into()));
        }
        for (i, s) in seqs.iter().enumerate() {
            if s.len() != cfg.seq_len {
                return Err(ModelError::Invalid(format!(
                    "train: data[{i}] has {} tokens; each sequence must have exactly seqLen ({})",
                    s.len(),
                    cfg.seq_len
                )));
            }
            if let Some(&t) = s.iter().find(|&&t| t as usize >= hp.n_vocab) {
                return Err(ModelError::Invalid(format!(
                    "train: data[{i}] has token id {t}, outside the vocabulary (n_vocab {})",
                    hp.n_vocab
                )));
            }
        }
        let backends = model.sched.backends().to_vec();
        if let Some(r) = resume.as_ref() {
            check_resume(r, &cfg)?;
        }
        if let Some(lc) = &cfg.lora {
            return Trainer::new_lora(model, seqs, cfg.clone(), lc.clone(), backends, resume);
        }
        if let Some(l) = &model.weights.lora {
            return Err(ModelError::Invalid(format!(
                "train: the model has a LoRA adapter (rank {}); full training would leave it beside the \
                 trained weights: call dropLora() first, or pass lora to train the adapter",
                l.cfg.rank
            )));
        }
        // A tied head split from its embeddings (the loader's copy of token_embd beside the
        // head, on the other backend) would train as two tensors, not the file's one.
        if model.weights.output != model.weights.token_embd && model.weight_ctx.get_tensor("output.weight").is_none() {
            return Err(ModelError::Unsupported(format!(
                "train: full training of a tied head split across {}: token_embd.weight is on one backend and \
                 its copy for the head on the other; load the model with every layer on one backend (gpu_layers \
                 0, or above n_layer), or train a LoRA adapter",
                backends.iter().map(|b| b.name()).collect::<Vec<_>>().join(" and ")
            )));
        }
        let weights = weight_list(&model.weights);
        if let Some(q) = weights.iter().find(|w| !matches!(w.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)) {
            return Err(ModelError::Unsupported(format!(
                "train: full training needs F32, F16 or BF16 weights, and weight '{}' is {} (train a \
                 low-rank adapter on a quantized file: lora: {{ rank }})",
                q.name(),
                q.ty
            )));
        }
        // Trained in place when every weight is already a plain f32 tensor in memory one of
        // the backends computes in: its own buffer type's, or the CPU's repacking one (which
        // holds F32 in ggml's layout: F32 has no packed one), not a planned buffer's.
        let in_place = weights.iter().all(|w| {
            w.ty == GgmlType::F32
                && w.data().is_some_and(|d| {
                    let name = d.buffer.buffer_type_name();
                    backends.iter().any(|b| b.buffer_type().name() == name)
                        || (name == crate::cpu::repack_buffer::NAME
                            && crate::cpu::repack_buffer::packed(w) == Ok(false))
                })
        });
        let rows = cfg.optimizer.state_rows();
        let n_elems: u64 = weights.iter().map(|w| w.nelements() as u64).sum();
        let memory = TrainMemory {
            weights: if in_place { 0 } else { 4 * n_elems },
            state: 4 * n_elems * rows as u64 + 64,
            compute: 0,
        };
        let limit = run_limit(&*backends[0], model.host_left(), resume.as_ref());
        check_budget(limit, &memory, "f32 weights")?;
        let converted = if in_place { None } else { Some(f32_copies(&weights, &backends)?) };
        let new_weights = match &converted {
            Some((ctx, _)) => Some(Weights::from_context(ctx, &hp)?),
            None => None,
        };
        let w = new_weights.as_ref().unwrap_or(&model.weights);
        let params: Vec<(Tensor, bool)> = weight_list(w).into_iter().map(|t| (t.clone(), t.n_dims() >= 2)).collect();
        let t = Trainer::plan(model, w, seqs, cfg, params, (memory, limit, "f32 weights"), backends, resume)?;
        // Everything planned: the model trains (and keeps) the f32 weights from here on.
        if let (Some((wctx, buffers)), Some(nw)) = (converted, new_weights) {
            model.weights = nw;
            model.weight_ctx = wctx;
            model.weight_buffers = buffers;
            model.repacked_bytes = 0;
        }
        Ok(t)
    }

    /// [`Trainer::new`] of a LoRA run: the params are the adapter's A and B (all decayed: they
    /// are matrices), the weights frozen whatever their type. A model that has an adapter of
    /// this shape trains it on (A is not drawn again); one of another shape is `invalid`. A
    /// new adapter is drawn from `cfg.seed` and stays on the model once the run is planned.
    fn new_lora(
        model: &mut Gpt2,
        seqs: Vec<Vec<u32>>,
        cfg: TrainConfig,
        lc: LoraConfig,
        backends: Vec<Rc<dyn Backend>>,
        resume: &mut Option<OptState>,
    ) -> Result<Trainer, ModelError> {
        let hp = model.hparams.clone();
        lc.check_model(&hp)?;
        let rows = cfg.optimizer.state_rows() as u64;
        let fresh = match &model.weights.lora {
            Some(l) if l.cfg == lc => false,
            Some(l) => {
                let names = |c: &LoraConfig| c.targets.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
                return Err(ModelError::Invalid(format!(
                    "train: the model has a LoRA adapter of rank {}, alpha {} on {}, not the asked rank {}, \
                     alpha {} on {}: call dropLora() first",
                    l.cfg.rank,
                    l.cfg.alpha,
                    names(&l.cfg),
                    lc.rank,
                    lc.alpha,
                    names(&lc)
                )));
            }
            None => true,
        };
        let bytes = lc.nbytes(&hp);
        let memory = TrainMemory { weights: if fresh { bytes } else { 0 }, state: bytes * rows + 64, compute: 0 };
        let limit = run_limit(&*backends[0], model.host_left(), resume.as_ref());
        check_budget(limit, &memory, "LoRA A and B")?;
        if fresh {
            let l = Lora::alloc(&hp, lc, &*backends[0])?;
            l.init(cfg.seed);
            model.weights.lora = Some(l);
        }
        let params: Vec<(Tensor, bool)> =
            model.weights.lora.as_ref().expect("installed").tensors().into_iter().map(|t| (t, true)).collect();
        let r =
            Trainer::plan(model, &model.weights, seqs, cfg, params, (memory, limit, "LoRA A and B"), backends, resume);
        if r.is_err() && fresh {
            model.weights.lora = None; // nothing of the model changes when planning fails
        }
        r
    }

    /// Allocates the params' state and builds and plans the training and optimizer graphs
    /// over the weights `w` (the model's, or their f32 copies); `params` with whether weight
    /// decay applies to each; the plan is checked against `limit` with the compute included.
    fn plan(
        model: &Gpt2,
        w: &Weights,
        seqs: Vec<Vec<u32>>,
        cfg: TrainConfig,
        params: Vec<(Tensor, bool)>,
        (memory, limit, what): (TrainMemory, Option<u64>, &str),
        backends: Vec<Rc<dyn Backend>>,
        resume: &mut Option<OptState>,
    ) -> Result<Trainer, ModelError> {
        let names: Vec<(String, i64)> = params.iter().map(|(t, _)| (t.name(), t.nelements())).collect();
        // Each param's state lives with it: on the backend whose memory holds the param.
        let homes: Vec<usize> = params.iter().map(|(t, _)| backend_index(&backends, t)).collect();
        let bufts: Vec<Rc<dyn crate::backend::BufferType>> = backends.iter().map(|b| b.buffer_type()).collect();
        let buft_of = |i: usize| -> &dyn crate::backend::BufferType { &*bufts[homes[i]] };
        // The state: the checkpoint's (of these tensors), or new, planned with the weights.
        // Plain SGD's is the gradient alone: nothing of a checkpoint to resume but the counts.
        let keeps = cfg.optimizer.state_rows() > 1;
        let fresh = match resume.as_ref() {
            Some(r) if keeps => {
                check_resume_tensors(r, &names)?;
                if state_is_home(r, &params, &backends) {
                    None
                } else {
                    // A checkpoint is read into host memory: its rows go where the params are
                    // (WebGPU), into new state there, as the optimizer steps both in place.
                    let f = OptState::alloc_on(r.meta, cfg.lora.clone(), &names, &buft_of)?;
                    f.copy_rows_from(r)?;
                    Some(f)
                }
            }
            Some(r) => Some(OptState::alloc_on(r.meta, cfg.lora.clone(), &names, &buft_of)?),
            None => {
                let meta = OptMeta {
                    optimizer: cfg.optimizer,
                    step: 0,
                    tokens: 0,
                    sequences: 0,
                    seq_len: cfg.seq_len as u32,
                    batch_size: cfg.batch_size as u32,
                };
                Some(OptState::alloc_on(meta, cfg.lora.clone(), &names, &buft_of).map_err(|e| match e {
                    ModelError::OverBudget { needed, limit, .. } => {
                        over_budget("training's optimizer state".into(), needed, limit)
                    }
                    e => e,
                })?)
            }
        };
        let state_of = |name: &str| -> Vec<Tensor> {
            let s = fresh.as_ref().or(resume.as_ref()).expect("one of them");
            s.get(name).expect("a state per param").to_vec()
        };
        // The optimizer's hyper-parameters, per backend: `[0]` for decayed weights, `[1]` for
        // the rest.
        let hyper_ctx =
            Context::new(ContextParams { mem_size: (2 * backends.len() + 1) * TENSOR_OVERHEAD, no_alloc: true });
        let n_hyper = 8;
        let mut hyper = Vec::new();
        let mut hyper_buffers = Vec::new();
        for b in &backends {
            let h = [hyper_ctx.new_tensor_1d(GgmlType::F32, n_hyper), hyper_ctx.new_tensor_1d(GgmlType::F32, n_hyper)];
            h[0].set_name("opt_hyper");
            h[1].set_name("opt_hyper.no_decay");
            hyper_buffers.extend(
                alloc_tensors(&h, &*b.buffer_type()).map_err(|e| ModelError::oom("training's optimizer state", e))?,
            );
            hyper.push(h);
        }
        let params: Vec<Param> = params
            .into_iter()
            .zip(&homes)
            .map(|((t, decay), &home)| Param { state: state_of(&t.name()), t, decay, home })
            .collect();

        // The optimizer graphs: one step node per param (per state chunk: over the param's
        // elements that chunk holds, a view), in place, on the param's backend.
        let n_chunks: usize = params.iter().map(|p| p.state.len()).sum();
        let ctx = Context::new(ContextParams { mem_size: (2 * n_chunks + 8) * TENSOR_OVERHEAD, no_alloc: true });
        let mut opt = Vec::new();
        for (b, backend) in backends.iter().enumerate() {
            let mut g = Graph::with_size(8 * n_chunks + 8); // each step node and view; each param, state, hyper leaf
            for p in params.iter().filter(|p| p.home == b) {
                let h = &hyper[b][if p.decay { 0 } else { 1 }];
                let mut start = 0usize;
                for (c, chunk) in p.state.iter().enumerate() {
                    let len = chunk.ne[0];
                    let t = if p.state.len() == 1 {
                        p.t.clone()
                    } else {
                        let v = ctx.view_1d(&p.t, len, 4 * start); // [len_c]: the chunk's elements
                        v.set_name(&format!("{}.{c}", p.t.name()));
                        v
                    };
                    start += len as usize;
                    let step = match cfg.optimizer {
                        Optimizer::AdamW { .. } => ctx.opt_step_adamw(&t, chunk, h),
                        Optimizer::Sgd { .. } => ctx.opt_step_sgd(&t, chunk, h),
                    };
                    if !backend.supports_op(&step) {
                        return Err(ModelError::Unsupported(format!(
                            "train: {} cannot run the optimizer step of '{}' (ne {:?})",
                            backend.name(),
                            t.name(),
                            t.ne
                        )));
                    }
                    g.build_forward_expand(&step);
                }
            }
            if !g.nodes.is_empty() {
                opt.push((backend.clone(), g));
            }
        }

        // The largest run that fits the budget: all of a batch's sequences in one graph run
        // when they fit MAX_RUN_TOKENS, else fewer per run. LoRA keeps one
        // sequence per run: its wide products are the frozen weights' input gradients, which
        // gain little from the width, while the block-diagonal scores and the compute buffer
        // grow (124M, batch 4: 160 → 756 MB, 191 → 158 tokens per CPU second).
        let mut runs = match cfg.lora {
            Some(_) => vec![1],
            None => seqs_per_run(cfg.batch_size, cfg.seq_len),
        };
        let (tg, memory) = loop {
            let g = runs.remove(0);
            let r = TrainGraph::build(model, w, &params, &cfg, g, backends.clone()).and_then(|tg| {
                let memory = TrainMemory { compute: tg.compute, ..memory };
                check_budget(limit, &memory, what).map(|()| (tg, memory))
            });
            match r {
                Err(ModelError::OverBudget { .. }) if !runs.is_empty() => continue,
                r => break r?,
            }
        };
        // Planned: a resumed checkpoint's state is the run's from here on.
        let mut state = match fresh {
            Some(mut f) => {
                if let Some(r) = resume.take() {
                    f.meta = r.meta;
                }
                f
            }
            None => resume.take().expect("resumed"),
        };
        state.resume = false;
        let (start, tokens, sequences) = (state.meta.step, state.meta.tokens, state.meta.sequences);
        state.meta.optimizer = cfg.optimizer;
        state.meta.seq_len = cfg.seq_len as u32;
        state.meta.batch_size = cfg.batch_size as u32;
        Ok(Trainer {
            memory,
            seqs,
            params,
            hyper,
            tg,
            opt,
            _ctx: ctx,
            _hyper_ctx: hyper_ctx,
            _hyper_buffers: hyper_buffers,
            state,
            step: start,
            start,
            tokens,
            sequences,
            grad_norms: Vec::new(),
            grad_norm: None,
            norms: false,
            cfg,
        })
    }

    /// Whether every update has been done.
    pub fn done(&self) -> bool {
        self.step - self.start >= self.cfg.steps
    }

    /// The learning rate of the next update.
    pub fn lr(&self) -> f32 {
        // A resumed run's schedule spans the checkpoint's updates and its own.
        let f = self.cfg.schedule.map_or(1.0, |s| s.factor(self.step, self.start + self.cfg.steps));
        (self.cfg.optimizer.lr() as f64 * f) as f32
    }

    /// One update: the batch's forward and backward passes (gradients accumulated), then the
    /// optimizer step. Returns the batch's loss (before the update). After an error the run
    /// cannot go on (a gradient may be half accumulated): drop it; the weights are those of
    /// the last finished update.
    pub async fn step(&mut self, n_vocab: usize) -> Result<TrainStep, ModelError> {
        // The gradient rows are zero here: allocated so, and each optimizer step zeroes them.
        let (b, t, g) = (self.cfg.batch_size, self.cfg.seq_len, self.tg.seqs);
        let n = g * t; // tokens per graph run
        let mut loss = 0f64;
        let coef = -1.0 / (b * (t - 1)) as f32;
        let mut w = vec![0f32; n_vocab * n];
        // Block-diagonal causal mask ([n_kv, N], n_kv = N): each token attends to its own
        // sequence's tokens up to itself.
        let mask: Vec<f32> = (0..n)
            .flat_map(|i| (0..n).map(move |j| if j / t == i / t && j <= i { 0.0 } else { f32::NEG_INFINITY }))
            .collect();
        let pos: Vec<i32> = (0..n as i32).map(|i| i % t as i32).collect();
        let tg = &mut self.tg;
        for r in 0..b / g {
            let mut ids = Vec::with_capacity(n);
            // Where each predicted position's term is in the flattened [n_vocab, N] loss.
            let mut at = Vec::with_capacity(g * (t - 1));
            for s in 0..g {
                let k = (self.sequences + (r * g + s) as u64) % self.seqs.len() as u64;
                let seq = &self.seqs[k as usize];
                for p in 0..t - 1 {
                    w[(s * t + p) * n_vocab + seq[p + 1] as usize] = coef;
                    at.push(((s * t + p) * n_vocab + seq[p + 1] as usize) as i32);
                }
                ids.extend(seq.iter().map(|&x| x as i32));
            }
            tg.sched.alloc_graph(&tg.gf)?;
            tg.io.tokens.set_bytes(bytemuck::cast_slice(&ids), 0);
            tg.io.positions.set_bytes(bytemuck::cast_slice(&pos), 0);
            tg.io.kq_mask.set_bytes(bytemuck::cast_slice(&mask), 0);
            tg.w_in.set_bytes(bytemuck::cast_slice(&w), 0);
            tg.loss_at.set_bytes(bytemuck::cast_slice(&at), 0);
            // Zero again where this run set w (its targets), not the whole [n_vocab, N]
            // (LoRA's four runs a step each cleared 26 MB).
            for &i in &at {
                w[i as usize] = 0.0;
            }
            tg.sched.graph_compute(&tg.gf)?;
            let mut rows = vec![0f32; g * (t - 1)];
            tg.sched.tensor_get(&tg.loss_rows, bytemuck::cast_slice_mut(&mut rows)).await?;
            // Summed per sequence, then over the batch: the order a run of one sequence gives.
            for s in 0..g {
                // Each term as the graph's product gave it before: log p(target) · w in f32.
                loss += rows[s * (t - 1)..(s + 1) * (t - 1)].iter().map(|&r| (r * coef) as f64).sum::<f64>();
            }
        }
        let gscale = self.clip_scale().await?;
        self.set_hyper(gscale);
        for (backend, g) in &self.opt {
            backend.graph_compute(g)?;
        }
        self.step += 1;
        self.tokens += (b * t) as u64;
        self.sequences += b as u64;
        Ok(TrainStep { step: self.step, loss: loss as f32, tokens: self.tokens })
    }

    /// The gradient's scale from clipping (1 without), computing the norms when needed.
    async fn clip_scale(&mut self) -> Result<f32, ModelError> {
        if self.cfg.grad_clip.is_none() && !self.norms {
            return Ok(1.0);
        }
        self.grad_norms.clear();
        let mut total = 0f64;
        for p in &self.params {
            let mut sq = 0f64;
            for chunk in &p.state {
                let mut g = vec![0f32; chunk.ne[0] as usize];
                // Row 0 of the chunk (read asynchronously: it may be WebGPU memory).
                self.tg.sched.tensor_get(chunk, bytemuck::cast_slice_mut(&mut g)).await?;
                sq += g.iter().map(|&x| x as f64 * x as f64).sum::<f64>();
            }
            total += sq;
            self.grad_norms.push((p.t.name(), libm::sqrt(sq)));
        }
        let norm = libm::sqrt(total);
        self.grad_norm = Some(norm);
        // clip_grad_norm_: max_norm / (norm + 1e-6), at most 1.
        Ok(self.cfg.grad_clip.map_or(1.0, |c| (c as f64 / (norm + 1e-6)).min(1.0) as f32))
    }

    /// The optimizer step's hyper-parameters for the next update.
    fn set_hyper(&self, gscale: f32) {
        let lr = self.lr();
        let t = self.step as i32 + 1;
        for (i, h) in self.hyper.iter().flat_map(|h| h.iter().enumerate()) {
            let v: [f32; 8] = match self.cfg.optimizer {
                Optimizer::AdamW { beta1, beta2, eps, weight_decay, .. } => {
                    let bc1 = 1.0 - libm::pow(beta1 as f64, t as f64);
                    let bc2 = 1.0 - libm::pow(beta2 as f64, t as f64);
                    let wd = if i == 0 { weight_decay } else { 0.0 };
                    [lr, beta1, beta2, eps, wd, bc1 as f32, libm::sqrt(bc2) as f32, gscale]
                }
                Optimizer::Sgd { momentum, weight_decay, .. } => {
                    let wd = if i == 0 { weight_decay } else { 0.0 };
                    [lr, momentum, wd, gscale, if t == 1 { 1.0 } else { 0.0 }, 0.0, 0.0, 0.0]
                }
            };
            h.set_bytes(bytemuck::cast_slice(&v), 0);
        }
    }
}

impl Trainer {
    /// The training graph's splits by backend (the scheduler's description, one line each),
    /// once the graph is planned: where the forward and backward passes run.
    pub fn splits(&self) -> Vec<String> {
        self.tg.sched.describe_splits()
    }

    /// The backends the optimizer steps run on, in order.
    pub fn optimizer_backends(&self) -> Vec<String> {
        self.opt.iter().map(|(b, _)| String::from(b.name())).collect()
    }

    /// Updates done by this run (not a resumed checkpoint's).
    pub fn run_steps(&self) -> u32 {
        self.step - self.start
    }

    /// The run's optimizer state, for the model to keep once the run ends (its gradient
    /// rows are zero: each update's optimizer step zeroes them).
    pub fn into_state(self) -> OptState {
        let mut s = self.state;
        s.meta.step = self.step;
        s.meta.tokens = self.tokens;
        s.meta.sequences = self.sequences;
        s
    }
}

/// `invalid` when a checkpoint's state cannot go on under `cfg`: another optimizer (or SGD's
/// momentum buffer present on one side only), or an adapter where it has the weights' state
/// or the other way round, or an adapter of another shape.
fn check_resume(r: &OptState, cfg: &TrainConfig) -> Result<(), ModelError> {
    let (had, asked) = (r.meta.optimizer, cfg.optimizer);
    if core::mem::discriminant(&had) != core::mem::discriminant(&asked) || had.state_rows() != asked.state_rows() {
        return Err(ModelError::Invalid(format!(
            "train: the model's checkpoint has the optimizer state of {}, and optimizer asks for {}: resume \
             with the same optimizer (or load the weights without optimizer state)",
            describe(&had),
            describe(&asked)
        )));
    }
    let shape = |l: &Option<LoraConfig>| match l {
        None => String::from("the full weights"),
        Some(c) => format!(
            "a LoRA adapter of rank {}, alpha {} on {}",
            c.rank,
            c.alpha,
            c.targets.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
        ),
    };
    if r.lora != cfg.lora {
        return Err(ModelError::Invalid(format!(
            "train: the model's checkpoint has the optimizer state of {}, and this run trains {}",
            shape(&r.lora),
            shape(&cfg.lora)
        )));
    }
    Ok(())
}

/// Whether a checkpoint's state of every param is in the memory of the param's backend (a
/// checkpoint is read into host memory; a model on WebGPU holds its params there).
fn state_is_home(r: &OptState, params: &[(Tensor, bool)], backends: &[Rc<dyn Backend>]) -> bool {
    params.iter().all(|(t, _)| {
        r.get(&t.name()).is_none_or(|s| s.iter().all(|s| backend_index(backends, s) == backend_index(backends, t)))
    })
}

/// `invalid` naming the first trained tensor whose state the checkpoint lacks (or has of
/// another size), or the first it has state of that the run does not train.
fn check_resume_tensors(r: &OptState, params: &[(String, i64)]) -> Result<(), ModelError> {
    for (name, n) in params {
        match r.get(name).map(|c| c.iter().map(|t| t.ne[0]).sum::<i64>()) {
            Some(m) if m == *n => {}
            Some(m) => {
                return Err(ModelError::Invalid(format!(
                    "train: the checkpoint's optimizer state of '{name}' has {m} elements, the tensor {n}"
                )))
            }
            None => {
                return Err(ModelError::Invalid(format!(
                    "train: the checkpoint has no optimizer state of '{name}', which this run trains"
                )))
            }
        }
    }
    if let Some((extra, _)) = r.tensors.iter().find(|(n, _)| !params.iter().any(|(p, _)| p == n)) {
        return Err(ModelError::Invalid(format!(
            "train: the checkpoint has optimizer state of '{extra}', which this run does not train"
        )));
    }
    Ok(())
}

// ts: export TrainStats
/// How a training run ended (`await run.stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct TrainStats {
    /// 'steps': every update asked for was done; 'cancelled': stopped before (break, return(),
    /// the signal or dispose()).
    // ts: 'steps' | 'cancelled'
    pub stop: &'static str,
    /// Updates done: the model holds the weights after the last of them (a run resumed from a
    /// checkpoint counts the checkpoint's, as its items' `step` does).
    pub steps: u32,
    /// Tokens trained on (a resumed run: the checkpoint's included).
    pub tokens: u64,
}
