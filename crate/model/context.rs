//! The model context (llama.cpp's `llama-context`): what runs a loaded [`Weights`] set —
//! the KV cache, the scheduler with its reserved compute buffers, and ONE way to run the
//! forward pass, the async [`Gpt2::decode`]. Every front end (the session, the CLI, the
//! warm-up, the tests) goes through it; synchronous callers drive the same future with
//! [`block_on`].
//!
//! ```no_run
//! # fn main() -> Result<(), ggweb::model::ModelError> {
//! use ggweb::model::context::{block_on, Batch, Gpt2Options};
//! use ggweb::model::loader::load_from_bytes;
//! let bytes = std::fs::read("tests/fixtures/tiny-f32.gguf").unwrap();
//! let mut model = load_from_bytes(&bytes, Gpt2Options::default())?.model;
//! let out = block_on(model.decode(Batch::last(&[15496, 11], 0)))?; // last position, [n_vocab]
//! assert_eq!(out.logits.len(), model.hparams.n_vocab);
//! # Ok(()) }
//! ```

use alloc::boxed::Box;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::gpt2::{build_graph, build_graph_with, graph_size, GraphIo, Hparams, Ubatch, Weights};
pub use super::hooks::TapValue;
use super::hooks::{Hook, NodeHook, Source};
pub use super::kv_cache::{Cell, KvCache};
use super::ModelError;
use crate::allocator::alloc_tensors;
use crate::allocator::gallocr::Gallocr;
use crate::backend::{Backend, Buffer, BufferType};
use crate::backend::{BackendError, BackendStats};
use crate::cpu::repack_buffer::Repack;
use crate::graph::Graph;
use crate::sched::Sched;
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use crate::types::GgmlType;

/// A token's place in a multi-sequence [`Batch`]: its position and the sequences (bitset)
/// it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqPos {
    pub pos: u32,
    pub seqs: u64,
}

/// Runtime choices that are not in the file.
#[derive(Clone, Debug)]
pub struct Gpt2Options {
    /// Context length (0 = the model's own). At most the model's.
    pub n_ctx: usize,
    /// Most tokens per graph run; longer prompts go in chunks.
    pub n_batch: usize,
    pub n_threads: usize,
    /// Element type of the KV cache: F32 (the default: logits as exact as the weights allow)
    /// or F16 (half the KV memory, llama.cpp's default; logits move by a measured bound,
    /// see tests/model/kv_type.rs).
    pub kv_type: GgmlType,
    /// Whether a CPU load keeps its matrix weights repacked for this machine's kernels
    /// (`cpu::repack_buffer`; `Auto` by default, `Off`/`Force` for tests).
    pub repack: Repack,
}

impl Gpt2Options {
    /// The one context rule: `n_ctx` (0 = the model's own, never more) and `n_batch` (at
    /// least 1, at most `n_ctx`), for the load's estimate and the context alike.
    pub fn resolve(&self, hp: &Hparams) -> Result<(usize, usize), ModelError> {
        let n_ctx = if self.n_ctx == 0 { hp.n_ctx_train } else { self.n_ctx };
        if n_ctx > hp.n_ctx_train {
            return Err(ModelError::Config(format!(
                "n_ctx {n_ctx} exceeds the model's context length {}",
                hp.n_ctx_train
            )));
        }
        if self.n_batch == 0 {
            return Err(ModelError::Config("n_batch must be at least 1".into()));
        }
        Ok((n_ctx, self.n_batch.min(n_ctx)))
    }
}

impl Default for Gpt2Options {
    fn default() -> Self {
        Gpt2Options { n_ctx: 0, n_batch: 32, n_threads: 1, kv_type: GgmlType::F32, repack: Repack::Auto }
    }
}

/// Bytes of each part of the memory plan.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryPlan {
    pub weights: usize,
    pub kv: usize,
    pub compute: usize,
}

/// The memory plan of one backend (see [`Gpt2::memory_by_backend`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendMemory {
    pub backend: String,
    pub weights: usize,
    pub kv: usize,
    pub compute: usize,
}

/// Which logits a [`Batch`] reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prompt chunk whose K/V is all that is wanted).
    None,
    /// The last position's (`[n_vocab]`).
    Last,
    /// Every position's (`[n_tokens][n_vocab]`), chunk by chunk through the sink.
    All,
    /// Position `p`'s of the batch (`[n_vocab]`): the head over that one row only, also in a
    /// gradient run, whose metric then reads that row alone ([`GradRun::w`] is `[n_vocab]`).
    Row(usize),
}

/// One call of [`Gpt2::decode`]: `tokens` at positions `n_past..`, the logits wanted,
/// graph nodes to keep alive and return (`taps`, by ggml name), and interventions at
/// TransformerLens's hook points (`hooks`, applied in the graph: see [`super::hooks`]).
///
/// With `seq` non-empty (one entry per token) the batch is multi-sequence: each token has its
/// own position and sequences, goes to free cells, and attends to the cells of its sequences
/// at positions up to its own (the KQ mask of [`Ubatch`]); `n_past` is unused. Empty `seq` is
/// one sequence, sequence 0, cell = position (the same mask, causal). Hooks and taps take one
/// sequence.
///
/// With `start` the pass begins at a block from a given residual stream instead of the
/// embeddings (`tokens` then only count the positions): see [`Start`].
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub tokens: &'a [u32],
    pub n_past: usize,
    pub logits: Logits,
    pub taps: &'a [String],
    pub hooks: &'a [Hook],
    pub seq: &'a [SeqPos],
    pub start: Option<Start<'a>>,
    /// A backward pass in the same run: see [`GradRun`].
    pub grad: Option<GradRun<'a>>,
}

/// The backward pass of a [`Batch`] (one ubatch of all its tokens, every position through
/// the head, or only position p's under [`Logits::Row`]; one sequence, or several at their
/// positions — their metrics add, and each row's gradient is its own sequence's): the metric
/// is `Σ w ⊙ logits`, or `Σ w ⊙ log_softmax(logits)` per row with `log_softmax` (`w`:
/// `[rows][n_vocab]` over the head's rows, the metric's coefficients), built in the graph
/// after the logits; its gradient with respect to each of `nodes` (graph names:
/// the node's value, after any hook on it) is appended to the graph
/// ([`Graph::build_backward_expand`]), planned with the forward nodes and read back into
/// [`Decoded::grads`]. The logits and taps are those of the same run without it.
#[derive(Clone, Copy, Debug)]
pub struct GradRun<'a> {
    pub nodes: &'a [String],
    pub w: &'a [f32],
    pub log_softmax: bool,
}

/// Where a [`Batch`] that skips the first blocks starts: block `layer`, with `resid`
/// (`[n_tokens][n_embd]`, TransformerLens's `blocks.{layer}.hook_resid_pre` at the batch's
/// positions) as the residual stream entering it. Blocks `layer..` run and write their K/V
/// cells of the batch's positions; the cells of earlier blocks are untouched, and hooks or
/// taps on earlier points are refused (`invalid`). Activation patching re-uses the corrupted
/// run this way instead of recomputing the blocks a patch cannot change.
#[derive(Clone, Copy, Debug)]
pub struct Start<'a> {
    pub layer: usize,
    pub resid: &'a [f32],
}

impl Default for Batch<'_> {
    fn default() -> Self {
        Batch { tokens: &[], n_past: 0, logits: Logits::Last, taps: &[], hooks: &[], seq: &[], start: None, grad: None }
    }
}

impl<'a> Batch<'a> {
    /// The last position's logits.
    pub fn last(tokens: &'a [u32], n_past: usize) -> Batch<'a> {
        Batch { tokens, logits: Logits::Last, n_past, ..Batch::default() }
    }
    /// Every position's logits.
    pub fn all(tokens: &'a [u32], n_past: usize) -> Batch<'a> {
        Batch { tokens, logits: Logits::All, n_past, ..Batch::default() }
    }
}

/// What [`Gpt2::decode`] returns.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    /// `Logits::Last`, `Logits::Row`: `[n_vocab]`; `Logits::All`: `[n_tokens][n_vocab]` (what
    /// the sink saw); `Logits::None`: empty.
    pub logits: Vec<f32>,
    /// The requested taps, in request order.
    pub taps: Vec<TapValue>,
    /// With [`Batch::grad`]: the gradient of each of its nodes, in request order (named and
    /// shaped as the node; zeros where the metric does not depend on it).
    pub grads: Vec<TapValue>,
    /// Bytes of the compute buffers a tapped run planned (0 on the reserved hot path).
    pub compute_bytes: usize,
    /// A tapped run's whole plan: its compute buffers and what it keeps besides them on the
    /// host (the taps, gradients and logits read back, a gradient run's metric weights, the
    /// KQ mask's copy); what [`Gpt2::gradient_bytes`] plans for a gradient run.
    pub planned_bytes: u64,
}

/// What [`Gpt2::decode`] reports after each ubatch it evaluated: the ubatch's first position
/// (in a multi-sequence batch: its first index in the batch), its tokens (now in the KV
/// cache), and its logits rows when they were read.
pub struct Chunk<'a> {
    pub first: usize,
    pub tokens: &'a [u32],
    pub logits: &'a [f32],
}

/// Drives a future to completion by polling it. For the synchronous entry points (the CLI,
/// native tests) over the async core: natively every read completes within its first poll,
/// so this never spins; in the browser nothing calls it (the JS event loop drives the futures).
pub fn block_on<F: core::future::Future>(f: F) -> F::Output {
    let mut f = core::pin::pin!(f);
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    loop {
        if let core::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        core::hint::spin_loop();
    }
}

/// A file without `output.weight` projects with `token_embd` itself. When the head
/// (`output_norm`) was placed on another backend than the embeddings, the projection gets
/// its own copy of `token_embd` there, as llama.cpp does (TENSOR_DUPLICATED): otherwise the
/// largest mul_mat of every token would run where the embeddings are. Returns the new buffer.
fn duplicate_tied_output(w: &mut Weights, sched: &Sched) -> Result<Option<Rc<dyn Buffer>>, ModelError> {
    // By backend, not buffer type: on the CPU alone the head may be in its repacking buffers.
    let last = sched.n_backends() - 1;
    let home =
        |t: &Tensor| t.data().map(|d| sched.backend_for_buffer_type(d.buffer.buffer_type_name()).unwrap_or(last));
    let (head, embd) = (home(&w.output_norm_w), home(&w.token_embd));
    if w.output != w.token_embd || head == embd {
        return Ok(None);
    }
    let Some(b) = head else { return Ok(None) };
    let ctx = Context::new(ContextParams { mem_size: TENSOR_OVERHEAD, no_alloc: true });
    let dup = ctx.dup_tensor(&w.token_embd);
    dup.set_name("output.weight");
    let buffer = alloc_tensors(core::slice::from_ref(&dup), &*sched.backend(b).buffer_type())?.remove(0);
    let n = w.token_embd.nbytes();
    match w.token_embd.host_ptr() {
        // SAFETY: the tensor's bytes lie inside its host buffer; `dup` is in another buffer.
        Some(p) => dup.set_bytes(unsafe { core::slice::from_raw_parts(p, n) }, 0),
        None => {
            let mut bytes = vec![0u8; n];
            w.token_embd.try_get_bytes(&mut bytes, 0)?;
            dup.set_bytes(&bytes, 0);
        }
    }
    w.output = dup;
    Ok(Some(buffer))
}

/// Every node of the worst-case graph must be one some backend runs: a weight of a type no
/// kernel reads (an `i32` bias, say, which the reader cannot tell from a float one by its
/// size) is the file's fault, found at load, not at the first token.
fn check_runnable(graph: &Graph, sched: &Sched) -> Result<(), ModelError> {
    let backends = sched.backends();
    for node in &graph.nodes {
        if backends.iter().any(|b| b.supports_op(node)) {
            continue;
        }
        let weights: Vec<String> = node
            .src
            .iter()
            .flatten()
            .filter(|t| t.op == crate::tensor::Op::None && t.data().is_some())
            .map(|t| format!("'{}' ({})", t.name(), t.ty))
            .collect();
        return Err(ModelError::Format(format!(
            "no backend runs node '{}' ({}) with weight {}: a weight type this model cannot use",
            node.name(),
            node.op.name(),
            if weights.is_empty() { "types of the file".to_string() } else { weights.join(", ") }
        )));
    }
    Ok(())
}

/// A loaded model ready to run: weights, KV cache and the reserved compute buffers.
/// Graphs run through a [`Sched`]: on one backend, or split between a GPU and the CPU
/// by where the weights are (see [`Gpt2::with_backends`]).
pub struct Gpt2 {
    pub hparams: Hparams,
    pub weights: Weights,
    pub weight_ctx: Context,
    pub weight_buffers: Vec<Rc<dyn Buffer>>,
    pub kv: KvCache,
    /// The scheduler, with one compute buffer per backend.
    pub sched: Sched,
    /// The first (highest-priority) backend.
    pub backend: Rc<dyn Backend>,
    pub n_batch: usize,
    /// Bytes of weights the CPU's repacking buffers hold packed (`cpu::repack_buffer`,
    /// chosen by the loader); in place, so the memory plan is unchanged.
    pub repacked_bytes: usize,
    /// Bytes of host memory the model may take in all (the load's budget: the host buffer
    /// type's, or the loader's lower one): a run planning buffers of its own (taps, hooks,
    /// gradients) fits what the model's own buffers leave of it, or is refused.
    pub budget: Option<u64>,
    /// The file's metadata less the tokenizer's vocabulary and merges (which the tokenizer
    /// holds), in file order: what `model.save` copies (`general.name`, ...; see export.rs).
    /// Empty for a model not loaded from a file.
    pub file_meta: Vec<(String, crate::gguf::GgufValue)>,
    /// The optimizer state of the last training run, or of the checkpoint the model was
    /// loaded from (which the next `train` resumes): see checkpoint.rs.
    pub opt_state: Option<super::checkpoint::OptState>,
}

impl Gpt2 {
    /// Builds the runtime around loaded weights: KV cache, then one reserve of the
    /// worst-case graph (a full batch at the end of the context), so no later run allocates.
    pub fn new(
        hparams: Hparams,
        weight_ctx: Context,
        weight_buffers: Vec<Rc<dyn Buffer>>,
        backend: Rc<dyn Backend>,
        opts: &Gpt2Options,
    ) -> Result<Gpt2, ModelError> {
        Gpt2::with_backends(hparams, weight_ctx, weight_buffers, vec![backend], opts)
    }

    /// [`Gpt2::new`] over several backends, in priority order with the CPU last (see
    /// [`Sched::new`]). Where the weights were loaded decides where each layer runs; each
    /// layer's KV cache goes to the backend of its weights.
    pub fn with_backends(
        hparams: Hparams,
        weight_ctx: Context,
        weight_buffers: Vec<Rc<dyn Buffer>>,
        backends: Vec<Rc<dyn Backend>>,
        opts: &Gpt2Options,
    ) -> Result<Gpt2, ModelError> {
        let (n_ctx, n_batch) = opts.resolve(&hparams)?;
        let mut weights = Weights::from_context(&weight_ctx, &hparams)?;
        let mut weight_buffers = weight_buffers;
        let mut sched = Sched::new(backends)?;
        if let Some(buffer) = duplicate_tied_output(&mut weights, &sched)? {
            weight_buffers.push(buffer);
        }
        let layer_bufts: Vec<Rc<dyn BufferType>> = weights
            .layers
            .iter()
            .map(|ly| {
                let b = ly.attn_qkv_w.data().and_then(|d| sched.backend_for_buffer_type(d.buffer.buffer_type_name()));
                sched.backend(b.unwrap_or(sched.n_backends() - 1)).buffer_type()
            })
            .collect();
        let kv = KvCache::new_per_layer(&hparams, n_ctx, opts.kv_type, &layer_bufts)?;
        let worst = build_graph(&hparams, &weights, &kv, n_ctx - n_batch, n_batch, n_batch);
        check_runnable(&worst.graph, &sched)?;
        sched.reserve(&worst.graph)?;
        let backend = sched.backend(0).clone();
        let repacked_bytes = weight_buffers.iter().map(|b| crate::cpu::repack_buffer::packed_bytes(&**b)).sum();
        let budget = sched.backend(sched.n_backends() - 1).buffer_type().budget();
        Ok(Gpt2 {
            hparams,
            weights,
            weight_ctx,
            weight_buffers,
            kv,
            sched,
            backend,
            n_batch,
            repacked_bytes,
            budget,
            file_meta: Vec::new(),
            opt_state: None,
        })
    }

    /// Host bytes the budget leaves for one run's own plan: the budget less the model's
    /// host buffers (weights, KV cache, reserved compute), at most a test's cap
    /// ([`crate::backend::host::set_headroom_for_tests`]). None: no budget is known.
    pub fn host_left(&self) -> Option<u64> {
        let held: u64 = self
            .memory_by_backend()
            .iter()
            .enumerate()
            .filter(|(i, _)| self.sched.backend(*i).buffer_type().is_host())
            .map(|(_, m)| m.weights as u64 + m.kv as u64 + m.compute as u64)
            .sum::<u64>()
            + self.opt_state.as_ref().map_or(0, |o| o.nbytes());
        let left = self.budget.map(|b| b.saturating_sub(held));
        match crate::backend::host::headroom() {
            Some(h) => Some(left.map_or(h, |l| l.min(h))),
            None => left,
        }
    }

    /// The memory a gradient run over `n` tokens plans (`Model.inspect`'s
    /// `memory.gradient`): the forward pass, the loss over every position and the backward
    /// pass to the token embeddings (`hook_embed`: through every block, the least any
    /// gradient run computes), its compute buffers planned as [`decode`](Self::decode)
    /// plans them, plus what it holds on the host besides (the logits and the gradient read
    /// back, the metric's weights, the mask: [`Decoded::planned_bytes`] of that run). Each further `wrt` point adds its own
    /// gradient, kept to the end of the run. For the model a memory plan measures (its
    /// backends' buffers hold nothing: [`super::plan::HeaderPlan`]); a loaded model would
    /// allocate the plan's buffers, and free them on return.
    pub fn gradient_bytes(&self, n: usize) -> Result<u64, ModelError> {
        let hp = &self.hparams;
        if n == 0 || n > self.n_ctx() {
            return Err(ModelError::ContextFull { needed: n, n_ctx: self.n_ctx() });
        }
        let Source::Node(embed) = super::hooks::hook_point("hook_embed", hp)?.source else {
            unreachable!("hook_embed is a node")
        };
        // The metric's weights (n x n_vocab floats) are the one host allocation of the plan:
        // sized against the budget first, and allocated fallibly, so a context of millions
        // (843 GB of weights at n_ctx 2^22) is a refusal, not an allocation abort (a trap in
        // wasm). The compute buffers are then planned against what is left, as a run's.
        let what = format!("a gradient run over {n} tokens (metric weights, compute buffers, gradients)");
        let left = self.host_left();
        let w_len = n.saturating_mul(hp.n_vocab);
        let w_bytes = (w_len as u64).saturating_mul(4);
        if let Some(l) = left.filter(|&l| w_bytes > l) {
            return Err(ModelError::RunTooLarge { what, needed: w_bytes, left: l });
        }
        let mut w: Vec<f32> = Vec::new();
        w.try_reserve_exact(w_len).map_err(|_| ModelError::RunTooLarge {
            what: what.clone(),
            needed: w_bytes,
            left: left.unwrap_or(0),
        })?;
        w.resize(w_len, 0.0);
        let grad = GradRun { nodes: core::slice::from_ref(&embed), w: &w, log_softmax: true };
        let ub = Ubatch { scores: true, own_kv: true, ..Ubatch::at(0, n, n) };
        let io = build_graph_with(hp, &self.weights, &self.kv, ub, &[]);
        let gctx = grad_context(&io, true);
        let (gf, bytes, _) = run_graph_of(&io, &gctx, &ub, &[], n, Some(&grad), hp.n_layer)?;
        drop(w);
        let mut sched = Sched::new(self.sched.backends().to_vec())?;
        alloc(&mut sched, &gf, Some(OwnPlan { what, bytes, left }))?;
        let compute: u64 = (0..sched.n_backends()).map(|i| sched.compute_buffer_size(i) as u64).sum();
        Ok(compute + bytes)
    }

    pub fn n_ctx(&self) -> usize {
        self.kv.n_ctx
    }

    /// The scheduler's graph allocator (one buffer id per backend).
    pub fn galloc(&self) -> &Gallocr {
        self.sched.galloc()
    }

    pub fn memory_plan(&self) -> MemoryPlan {
        MemoryPlan {
            weights: self.weight_buffers.iter().map(|b| b.size()).sum(),
            kv: self.kv.bytes(),
            compute: (0..self.sched.n_backends()).map(|i| self.sched.compute_buffer_size(i)).sum(),
        }
    }

    /// The memory plan per backend, in the scheduler's order. A buffer counts for the
    /// first backend of its buffer type (backends sharing a type share compute buffers).
    pub fn memory_by_backend(&self) -> Vec<BackendMemory> {
        let n = self.sched.n_backends();
        let mut out: Vec<BackendMemory> = (0..n)
            .map(|i| BackendMemory {
                backend: self.sched.backend(i).name().to_string(),
                compute: self.sched.compute_buffer_size(i),
                ..BackendMemory::default()
            })
            .collect();
        let of = |b: &Rc<dyn Buffer>| self.sched.backend_for_buffer_type(b.buffer_type_name()).unwrap_or(n - 1);
        // Saturating: a plan's buffers are only sizes, and on wasm32 a GPU's share can pass
        // usize (the plan then reports its u64 estimate instead).
        // A LoRA adapter's A and B count as weights (host buffers: lora.rs).
        let lora = self.weights.lora.iter().flat_map(|l| l.buffers.iter());
        for b in self.weight_buffers.iter().chain(lora) {
            let w = &mut out[of(b)].weights;
            *w = w.saturating_add(b.size());
        }
        for b in &self.kv.buffers {
            let k = &mut out[of(b)].kv;
            *k = k.saturating_add(b.size());
        }
        out
    }

    /// The counters of the scheduler's backends that keep them ([`Backend::stats`]: the
    /// WebGPU ones), summed (None when none does): totals since they were created; a call's share is the difference of two
    /// snapshots ([`BackendStats::since`]).
    pub fn webgpu_stats(&self) -> Option<BackendStats> {
        self.sched.backends().iter().filter_map(|b| b.stats()).reduce(|a, b| a.plus(&b))
    }

    /// Splits the graph of a run of `n_tokens` new tokens after `n_past` (without running
    /// it) and leaves the result in [`Gpt2::sched`] (`splits`, `copies`, `describe_splits`).
    pub fn plan_split(&mut self, n_past: usize, n_tokens: usize) -> Result<(), ModelError> {
        if n_tokens == 0 || n_tokens > self.n_batch || n_past + n_tokens > self.n_ctx() {
            return Err(ModelError::Config(format!(
                "plan_split: {n_tokens} tokens at {n_past} (n_batch {}, n_ctx {})",
                self.n_batch,
                self.n_ctx()
            )));
        }
        let io = build_graph(&self.hparams, &self.weights, &self.kv, n_past, n_tokens, 1);
        self.sched.split_graph(&io.graph)?;
        Ok(())
    }

    /// The one input check of every run: at least one token, all in the vocabulary,
    /// positions `n_past..n_past + len` within the context, and a [`Start`]'s block within the
    /// model and residual `[len][n_embd]`.
    pub fn check_batch(&self, tokens: &[u32], n_past: usize, start: Option<&Start<'_>>) -> Result<(), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Invalid("needs at least one token id".into()));
        }
        if let Some(s) = start {
            let (nl, e) = (self.hparams.n_layer, self.hparams.n_embd);
            if s.layer >= nl {
                return Err(ModelError::Invalid(format!("start: layer {} of a model of {nl} layers", s.layer)));
            }
            if s.resid.len() != tokens.len() * e {
                return Err(ModelError::Invalid(format!(
                    "start: the residual at layer {} has {} values; {} tokens of n_embd {e} need {}",
                    s.layer,
                    s.resid.len(),
                    tokens.len(),
                    tokens.len() * e
                )));
            }
        }
        let n_vocab = self.hparams.n_vocab;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ModelError::BadToken { id: bad, n_vocab });
        }
        let needed = n_past.saturating_add(tokens.len());
        if needed > self.n_ctx() {
            return Err(ModelError::ContextFull { needed, n_ctx: self.n_ctx() });
        }
        Ok(())
    }

    /// The forward pass: runs `batch.tokens` at positions `batch.n_past..` (or, with
    /// [`Batch::seq`], at their own positions and sequences), writing their K/V into the cache,
    /// and reads back the logits and taps asked for.
    ///
    /// One body for every batch (llama.cpp's `llama_context::decode`): the tokens go in ubatches
    /// through one loop, each into cells of the KV cache (one sequence: cell = position, the
    /// cells past `n_past` freed first; several: the first run of free cells), attending
    /// through the KQ mask built from the cells ([`Ubatch`]). `sink` hears of each ubatch once
    /// its K/V are in (with its logits rows under `Logits::All`), so a caller's record of the
    /// cache stays true if a later one fails; only ubatches whose logits are kept are read
    /// back. A failed ubatch leaves its cells free.
    ///
    /// Without taps or hooks the ubatches are `n_batch` tokens on the reserved compute buffers
    /// (no allocation). Taps and hooks see the whole sequence: such a run is one ubatch of all
    /// the tokens (any count up to the context), its graph pruned to what the taps, the K/V
    /// stores and the logits asked for need, on compute buffers of its own sized by that plan
    /// ([`Decoded::compute_bytes`]; the reserved hot-path buffers are untouched). The taps are
    /// read through the scheduler's eval callback ([`Sched::set_eval_callback`]): the nodes it
    /// asks for are kept alive to the end of the run, so only requested taps cost memory.
    pub async fn decode(&mut self, batch: Batch<'_>) -> Result<Decoded, ModelError> {
        self.decode_with(batch, &mut |_| ()).await
    }

    /// [`decode`](Self::decode) reporting each ubatch to `sink`.
    pub async fn decode_with(
        &mut self,
        batch: Batch<'_>,
        sink: &mut dyn FnMut(Chunk<'_>),
    ) -> Result<Decoded, ModelError> {
        let cells = self.check(&batch)?;
        let (tokens, n, e, n_ctx) = (batch.tokens, batch.tokens.len(), self.hparams.n_embd, self.n_ctx());
        let one_seq = batch.seq.is_empty();
        let hooks = match batch.hooks {
            [] => Vec::new(),
            h => super::hooks::plan(h, &self.hparams, n, batch.n_past, true)?,
        };
        let hooked: Vec<String> = hooks.iter().map(|h| h.node.clone()).collect();
        let inspect = !batch.taps.is_empty() || !hooks.is_empty() || batch.grad.is_some();
        // The head runs on every row when a tap or hook is in it (`result_norm`: HF's last
        // hidden state), every row's logits are asked for, or a gradient run's metric reads
        // every row (under `Logits::Row` it reads that one).
        let row = match batch.logits {
            Logits::Row(p) => Some(p),
            _ => None,
        };
        let in_head =
            batch.taps.iter().any(|t| matches!(t.as_str(), "out_rows" | "out_norm" | "result_norm" | "result_output"))
                || hooked.iter().any(|h| h == "out_norm")
                || (batch.grad.is_some() && row.is_none());
        let (ubatch, mut own) = match inspect {
            false => (self.n_batch, None),
            true => (n, Some(Sched::new(self.sched.backends().to_vec())?)),
        };
        if let Some(own) = &mut own {
            let names = batch.taps.to_vec();
            own.set_eval_callback(Some(Box::new(move |t| names.iter().any(|n| *n == t.name()))));
        }
        if one_seq {
            self.kv.set_causal(batch.n_past);
        }
        let mut out = Decoded::default();
        let left = if inspect { self.host_left() } else { None };
        let mut done = 0;
        while done < n {
            let end = (done + ubatch).min(n);
            let chunk = &tokens[done..end];
            let slot = match one_seq {
                true => batch.n_past + done,
                false => self
                    .kv
                    .find_slot(chunk.len())
                    .ok_or(ModelError::ContextFull { needed: self.kv.used() + n - done, n_ctx })?,
            };
            let ub_cells = slot..slot + chunk.len();
            // `Logits::Row`'s position in this ubatch, if it is in it.
            let ub_row = row.filter(|p| (done..end).contains(p)).map(|p| p - done);
            self.kv.cells[ub_cells.clone()].copy_from_slice(&cells[done..end]);
            let ub = Ubatch {
                slot,
                n_kv: self.kv.n_kv(),
                n_tokens: chunk.len(),
                n_out: if in_head || batch.logits == Logits::All { chunk.len() } else { 1 },
                out_row: if in_head { None } else { ub_row },
                start: batch.start.map(|s| s.layer),
                scores: inspect,
                // A gradient run over an empty cache reads its own K/V (no cache-sized gradient).
                own_kv: batch.grad.is_some() && slot == 0 && self.kv.n_kv() == chunk.len(),
                store_kv: true,
            };
            let io = build_graph_with(&self.hparams, &self.weights, &self.kv, ub, &hooked);
            let sched = own.as_mut().unwrap_or(&mut self.sched);
            let gctx = grad_context(&io, batch.grad.is_some());
            let mut backward: Option<(Tensor, Vec<Option<Tensor>>)> = None;
            let mut own_bytes = 0u64;
            let ran = (|| {
                let (gf, own_plan) = match inspect {
                    false => (None, None),
                    true => {
                        let rows = match batch.logits {
                            Logits::All => ub.n_out,
                            Logits::Last | Logits::Row(_) => 1,
                            Logits::None => 0,
                        };
                        let (gf, bytes, bw) =
                            run_graph_of(&io, &gctx, &ub, batch.taps, rows, batch.grad.as_ref(), self.hparams.n_layer)?;
                        backward = bw;
                        own_bytes = bytes;
                        let what = match &batch.grad {
                            None => format!("this run's {} captured nodes and compute buffer", batch.taps.len()),
                            Some(g) => format!(
                                "this gradient run's {} captured nodes, {} gradients read back and compute buffer \
                                 (activations, gradients)",
                                batch.taps.len(),
                                g.nodes.len()
                            ),
                        };
                        (Some(gf), Some(OwnPlan { what, bytes, left }))
                    }
                };
                let gf = gf.as_ref().unwrap_or(&io.graph);
                alloc(sched, gf, own_plan)?;
                let resid = batch.start.map(|s| &s.resid[done * e..end * e]);
                set_inputs(&io, chunk, &self.kv.cells, &cells[done..end], resid, &hooks);
                if let (Some((w, _)), Some(g)) = (&backward, &batch.grad) {
                    w.set_bytes(bytemuck::cast_slice(g.w), 0);
                }
                sched.graph_compute(gf)?;
                Ok::<_, ModelError>(())
            })();
            if let Err(err) = ran {
                self.kv.cells[ub_cells].fill(Cell::default());
                return Err(err);
            }
            out.planned_bytes += own_bytes;
            let sched = own.as_ref().unwrap_or(&self.sched);
            for name in batch.taps {
                let Some(t) = sched.observed().iter().find(|t| t.name() == *name) else {
                    return Err(ModelError::Invalid(format!("tap '{name}': the scheduler observed no such node")));
                };
                out.taps.push(TapValue { name: t.name(), ne: t.ne, data: read_f32(sched, t).await? });
            }
            if let (Some((_, grads)), Some(g)) = (&backward, &batch.grad) {
                for (name, gt) in g.nodes.iter().zip(grads) {
                    let t = io.graph.get_tensor(name).expect("add_backward found it");
                    let data = match gt {
                        Some(gt) => read_f32(sched, gt).await?,
                        None => vec![0f32; t.nelements() as usize],
                    };
                    out.grads.push(TapValue { name: name.clone(), ne: t.ne, data });
                }
            }
            let last = end == n;
            // Of this ubatch's head rows: all, or the one `Last` or `Row` reads (the head's only
            // row, or one of every row's when the head ran on all).
            let rows = match (batch.logits, ub_row) {
                (Logits::All, _) => read_f32(sched, &io.logits).await?,
                (Logits::Last, _) if last => read_row(sched, &io.logits, ub.n_out - 1).await?,
                (Logits::Row(_), Some(r)) => {
                    read_row(sched, &io.logits, if ub.out_row.is_some() { 0 } else { r }).await?
                }
                _ => Vec::new(),
            };
            sink(Chunk { first: if one_seq { batch.n_past + done } else { done }, tokens: chunk, logits: &rows });
            match batch.logits {
                // Moved, not copied, when it is the only ubatch: a run's logits are held once.
                Logits::All if out.logits.is_empty() => out.logits = rows,
                Logits::All => out.logits.extend_from_slice(&rows),
                Logits::Last if last => out.logits = rows,
                Logits::Row(_) if ub_row.is_some() => out.logits = rows,
                _ => {}
            }
            done = end;
        }
        if let Some(own) = &own {
            out.compute_bytes = (0..own.n_backends()).map(|i| own.compute_buffer_size(i)).sum();
            out.planned_bytes += out.compute_bytes as u64;
        }
        Ok(out)
    }

    /// The input check of every [`Batch`], before anything changes: returns each token's cell
    /// contents (position and sequences; one sequence is sequence 0, positions `n_past..`).
    fn check(&self, batch: &Batch<'_>) -> Result<Vec<Cell>, ModelError> {
        let (tokens, n_vocab, n_ctx) = (batch.tokens, self.hparams.n_vocab, self.n_ctx());
        if let Logits::Row(p) = batch.logits {
            if p >= tokens.len() {
                return Err(ModelError::Invalid(format!("logits of row {p}: the batch has {} tokens", tokens.len())));
            }
        }
        if batch.seq.is_empty() {
            self.check_batch(tokens, batch.n_past, batch.start.as_ref())?;
            if let Some(s) = &batch.start {
                super::hooks::check_after(batch.hooks, s.layer)?;
            }
            return Ok((batch.n_past..batch.n_past + tokens.len()).map(|p| Cell { pos: p as u32, seqs: 1 }).collect());
        }
        if batch.start.is_some() {
            return Err(ModelError::Invalid(
                "a batch that starts at a layer takes one sequence: it has sequence positions".into(),
            ));
        }
        // A gradient run over several sequences (integrated gradients' steps) may hook them:
        // its hooks see the batch's rows as positions, in batch order.
        if !batch.hooks.is_empty() && batch.grad.is_none() {
            return Err(ModelError::Invalid(format!(
                "hooks take one sequence: a batch with {} hooks has sequence positions",
                batch.hooks.len()
            )));
        }
        if tokens.is_empty() || tokens.len() != batch.seq.len() || !batch.taps.is_empty() {
            return Err(ModelError::Invalid(format!(
                "a multi-sequence batch needs one position per token and no taps ({} tokens, {} positions, {} taps)",
                tokens.len(),
                batch.seq.len(),
                batch.taps.len()
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(ModelError::BadToken { id: bad, n_vocab });
        }
        if let Some(p) = batch.seq.iter().find(|p| p.pos as usize >= n_ctx || p.seqs == 0) {
            if p.seqs == 0 {
                return Err(ModelError::Invalid(format!("a token at position {} belongs to no sequence", p.pos)));
            }
            return Err(ModelError::ContextFull { needed: p.pos as usize + 1, n_ctx });
        }
        Ok(batch.seq.iter().map(|p| Cell { pos: p.pos, seqs: p.seqs }).collect())
    }

    /// Runs a small graph over the model's weights, outside the forward pass (the logit
    /// lens's head, attribution's projections): `build` makes it in a context of its own and
    /// returns its inputs with their bytes and the f32 outputs to read; on compute buffers of
    /// its own.
    pub async fn run_graph(
        &mut self,
        build: impl FnOnce(&Context, &Weights) -> (Vec<(Tensor, Vec<u8>)>, Vec<Tensor>),
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let ctx =
            Context::new(ContextParams { mem_size: (8 * self.hparams.n_layer + 32) * TENSOR_OVERHEAD, no_alloc: true });
        let (inputs, outputs) = build(&ctx, &self.weights);
        let mut gf = Graph::with_size(graph_size(&self.hparams));
        for (t, _) in &inputs {
            t.set_input();
        }
        for t in &outputs {
            t.set_output();
            gf.build_forward_expand(t);
        }
        let mut sched = Sched::new(self.sched.backends().to_vec())?;
        sched.alloc_graph(&gf)?;
        for (t, bytes) in &inputs {
            t.set_bytes(bytes, 0);
        }
        sched.graph_compute(&gf)?;
        let mut out = Vec::with_capacity(outputs.len());
        for t in &outputs {
            out.push(self.read_f32(t).await?);
        }
        Ok(out)
    }

    /// The model's head on given residuals: `x` is `[rows][n_embd]`, each row through
    /// `ln_final` with its own statistics and the unembedding; returns `[rows][n_vocab]`
    /// (the logit lens).
    pub async fn head(&mut self, x: &[f32], rows: usize) -> Result<Vec<f32>, ModelError> {
        let (e, eps) = (self.hparams.n_embd, self.hparams.eps);
        if rows == 0 || x.len() != rows * e {
            return Err(ModelError::Invalid(format!("head: {} values for {rows} rows of {e}", x.len())));
        }
        let bytes = bytemuck::cast_slice(x).to_vec();
        let mut out = self
            .run_graph(|ctx, w| {
                let inp = ctx.new_tensor_2d(GgmlType::F32, e as i64, rows as i64); // [n_embd, rows]
                inp.set_name("lens_inp");
                let cur = ctx.norm(&inp, eps);
                let cur = ctx.add(&ctx.mul(&cur, &w.output_norm_w), &w.output_norm_b);
                let logits = ctx.mul_mat(&w.output, &cur); // [n_vocab, rows]
                logits.set_name("lens_logits");
                (vec![(inp, bytes)], vec![logits])
            })
            .await?;
        Ok(out.remove(0))
    }

    /// A computed contiguous f32 tensor's values, read by the backend whose buffer holds it
    /// ([`Backend::tensor_get_async`]: WebGPU memory reads back asynchronously).
    pub async fn read_f32(&self, t: &Tensor) -> Result<Vec<f32>, ModelError> {
        read_f32(&self.sched, t).await
    }

    /// One line: shape, context, batch, backends.
    pub fn describe(&self) -> String {
        let hp = &self.hparams;
        format!(
            "gpt2: {} layers, n_embd {}, {} heads, n_ff {}, n_vocab {}, n_ctx {} (train {}), n_batch {}, backend {}{}",
            hp.n_layer,
            hp.n_embd,
            hp.n_head,
            hp.n_ff,
            hp.n_vocab,
            self.n_ctx(),
            hp.n_ctx_train,
            self.n_batch,
            self.backend.name(),
            self.sched.backends()[1..].iter().map(|b| format!("+{}", b.name())).collect::<String>()
        )
    }
}

/// A computed contiguous f32 tensor's values, read through `sched` ([`Sched::tensor_get`]).
async fn read_f32(sched: &Sched, t: &Tensor) -> Result<Vec<f32>, ModelError> {
    if t.data().is_none() {
        return Err(ModelError::Invalid(format!("read of unallocated node '{}'", t.name())));
    }
    let mut out = vec![0f32; t.nelements() as usize];
    sched.tensor_get(t, bytemuck::cast_slice_mut(&mut out)).await?;
    Ok(out)
}

/// Row `r` of a `[ne0, rows]` f32 node (one position's logits of the head's rows).
async fn read_row(sched: &Sched, t: &Tensor, r: usize) -> Result<Vec<f32>, ModelError> {
    let ne0 = t.ne[0] as usize;
    Ok(match t.ne[1] {
        1 => read_f32(sched, t).await?,
        _ => read_f32(sched, t).await?[r * ne0..(r + 1) * ne0].to_vec(),
    })
}

/// The graph of a run with taps or hooks: only what the K/V stores of the blocks it runs, the
/// taps and (when `logits`) the logits need; with the bytes of the taps kept and read back.
/// Each tap must be a contiguous f32 node of `io`'s graph (`invalid` naming it otherwise).
fn pruned(
    io: &GraphIo,
    taps: &[String],
    logits: bool,
    start: Option<usize>,
    n_layer: usize,
) -> Result<(Graph, u64), ModelError> {
    let mut gf = Graph::with_size(io.graph.size());
    let mut tap_bytes = 0u64;
    for il in start.unwrap_or(0)..n_layer {
        for step in ["k_cpy", "v_cpy"] {
            let t = io.graph.get_tensor(&format!("l{il}.{step}")).expect("every layer stores K and V");
            gf.build_forward_expand(&t);
        }
    }
    for name in taps {
        let t = io.graph.get_tensor(name).ok_or_else(|| {
            ModelError::Invalid(format!(
                "no graph node named '{name}' (tap 'attn', 'hidden' or a node such as 'l0.ffn_gelu')"
            ))
        })?;
        if !(t.ty == GgmlType::F32 && t.is_contiguous()) {
            return Err(ModelError::Invalid(format!(
                "graph node '{name}' is a view or not f32 ({}): only contiguous f32 nodes can be tapped",
                t.ty
            )));
        }
        tap_bytes += 8 * t.nelements() as u64;
        gf.build_forward_expand(&t);
    }
    if logits {
        gf.build_forward_expand(&io.logits);
    }
    Ok((gf, tap_bytes))
}

/// The context a gradient run's metric and backward nodes are made in (empty otherwise).
fn grad_context(io: &GraphIo, grad: bool) -> Context {
    Context::new(ContextParams {
        mem_size: if grad { (6 * io.graph.nodes.len() + 64) * TENSOR_OVERHEAD } else { 0 },
        no_alloc: true,
    })
}

/// The graph of a run with taps, hooks or a gradient ([`pruned`], then [`add_backward`] in
/// `gctx`), and the bytes it keeps besides its compute buffers: the taps and gradients read
/// back, the `logit_rows` rows of logits read back (none: the logits are not computed), and
/// the KQ mask's host copy. One place for what [`Gpt2::decode`] runs and
/// [`Gpt2::gradient_bytes`] plans.
#[allow(clippy::type_complexity)]
fn run_graph_of(
    io: &GraphIo,
    gctx: &Context,
    ub: &Ubatch,
    taps: &[String],
    logit_rows: usize,
    grad: Option<&GradRun<'_>>,
    n_layer: usize,
) -> Result<(Graph, u64, Option<(Tensor, Vec<Option<Tensor>>)>), ModelError> {
    let (mut gf, mut bytes) = pruned(io, taps, logit_rows > 0, ub.start, n_layer)?;
    bytes += 4 * (logit_rows as u64) * io.logits.ne[0] as u64;
    let mut backward = None;
    if let Some(g) = grad {
        let (w, grads, grad_bytes) = add_backward(&mut gf, gctx, io, g)?;
        backward = Some((w, grads));
        bytes += grad_bytes;
    }
    bytes += 4 * (ub.n_kv * ub.n_tokens) as u64;
    Ok((gf, bytes, backward))
}

/// Appends a gradient run's metric ([`GradRun`]) after the logits of `gf` and the backward
/// pass to each of its nodes (made params); returns the metric's weight input, each node's
/// gradient (None where the metric does not depend on it) and the host bytes besides the
/// compute buffers: the gradients read back and the metric's weights. A node that is not in
/// the graph is `invalid`, naming it.
fn add_backward(
    gf: &mut Graph,
    ctx: &Context,
    io: &GraphIo,
    g: &GradRun<'_>,
) -> Result<(Tensor, Vec<Option<Tensor>>, u64), ModelError> {
    let logits = &io.logits;
    if g.w.len() as i64 != logits.ne[0] * logits.ne[1] {
        return Err(ModelError::Invalid(format!(
            "gradient run: {} metric weights for logits of {} x {}",
            g.w.len(),
            logits.ne[1],
            logits.ne[0]
        )));
    }
    // Per position the dot of its row with its weights, [1, 1, n_out]: a batched mul_mat of
    // [n_vocab, 1, n_out] rows, so neither the metric nor its seed is logits-sized (`mul`'s
    // product and a seed of ones were, each written once per run); the logits' gradient is
    // w times each position's seed, one out_prod.
    let (nv, rows) = (logits.ne[0], logits.ne[1]);
    let w = ctx.new_tensor_3d(GgmlType::F32, nv, 1, rows);
    w.set_name("metric_w");
    w.set_input();
    let base = if g.log_softmax { ctx.log_soft_max(logits) } else { logits.clone() };
    let metric = ctx.mul_mat(&w, &ctx.reshape_3d(&base, nv, 1, rows));
    metric.set_name("metric");
    gf.build_forward_expand(&metric);
    let mut params = Vec::with_capacity(g.nodes.len());
    // The metric's weights are held on the host too (the caller's `w`, copied in).
    let mut bytes = 4 * g.w.len() as u64;
    for name in g.nodes {
        let t = io
            .graph
            .get_tensor(name)
            .ok_or_else(|| ModelError::Invalid(format!("gradient run: no graph node named '{name}'")))?;
        bytes += 8 * t.nelements() as u64;
        if gf.contains(&t) {
            t.set_param();
        }
        params.push(t);
    }
    gf.build_backward_expand(ctx, &metric);
    // A gradient read back must be contiguous (a permute's is a strided view): copied then.
    gf.size = gf.size.max(gf.nodes.len() + params.len() + 1);
    let grads: Vec<Option<Tensor>> = params
        .iter()
        .map(|t| {
            gf.grad(t).map(|g| {
                if g.is_contiguous() {
                    return g;
                }
                let c = ctx.cont(&g);
                c.set_name(&format!("{}.cont", g.name()));
                c.set_output();
                gf.build_forward_expand(&c);
                c
            })
        })
        .collect();
    // A gradient passed through unchanged is a view of another one: keep what it views alive
    // to the end of the run too (the planner frees a view's source after its last reader).
    for g in grads.iter().flatten() {
        let mut t = g.clone();
        while let Some(src) = t.view_src.clone() {
            src.set_output();
            t = src;
        }
    }
    Ok((w, grads, bytes))
}

/// A run's own plan ([`alloc`]): `what` it is (for the refusal), the `bytes` it keeps
/// besides its compute buffers, and the host bytes the model's budget `left` for it.
struct OwnPlan {
    what: String,
    bytes: u64,
    left: Option<u64>,
}

/// Allocates a ubatch's graph on `sched`. A run with taps, hooks or a gradient plans its own
/// compute buffers; its plan (those buffers' peaks and `bytes`: the taps and gradients kept
/// and read back, the host's KQ mask) is sized against what the model's budget leaves
/// ([`Gpt2::host_left`]) and, on wasm32, against the address space left, before anything is
/// allocated: `RunTooLarge` with both sizes when it does not fit.
fn alloc(sched: &mut Sched, gf: &Graph, own_plan: Option<OwnPlan>) -> Result<(), ModelError> {
    let Some(OwnPlan { what, bytes, left }) = own_plan else { return Ok(sched.alloc_graph(gf)?) };
    let too_large = |needed: u64, left: u64| ModelError::RunTooLarge { what: what.clone(), needed, left };
    let left = match (left, crate::backend::host::address_space_left()) {
        (Some(b), Some(a)) if cfg!(target_family = "wasm") => Some(b.min(a)),
        (l, _) => l,
    };
    if let Some(left) = left.filter(|&l| bytes > l) {
        return Err(too_large(bytes, left));
    }
    sched.set_host_limit(left.map(|l| (l - bytes).min(usize::MAX as u64) as usize));
    sched.alloc_graph(gf).map_err(|e| match e {
        BackendError::OutOfMemory { requested, .. } => too_large(requested as u64 + bytes, left.unwrap_or(0)),
        e => e.into(),
    })
}

/// Fills a built ubatch graph's inputs: token ids and positions (or the residual of a graph
/// that starts at a block), the KQ mask from the cache's cells (`ub` the ubatch's own), and
/// the hooks' inputs (one not in the graph is skipped: pruned, as nothing this run computes
/// reads its node).
fn set_inputs(io: &GraphIo, tokens: &[u32], cells: &[Cell], ub: &[Cell], resid: Option<&[f32]>, hooks: &[NodeHook]) {
    match &io.resid {
        Some(r) => r.set_bytes(bytemuck::cast_slice(resid.expect("a residual for a graph that starts at a block")), 0),
        None => {
            let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
            let pos: Vec<i32> = ub.iter().map(|c| c.pos as i32).collect();
            io.tokens.set_bytes(bytemuck::cast_slice(&ids), 0);
            io.positions.set_bytes(bytemuck::cast_slice(&pos), 0);
        }
    }
    let n_kv = io.kq_mask.ne[0] as usize;
    let mut mask = Vec::with_capacity(n_kv * ub.len());
    for t in ub {
        let sees = |c: &Cell| c.seqs & t.seqs != 0 && c.pos <= t.pos;
        mask.extend(cells[..n_kv].iter().map(|c| if sees(c) { 0.0 } else { f32::NEG_INFINITY }));
    }
    if io.kq_mask.data().is_some() {
        io.kq_mask.set_bytes(bytemuck::cast_slice(&mask), 0);
    }
    for h in hooks {
        for (suffix, data) in [("hook_a", Some(&h.a)), ("hook_b", Some(&h.b)), ("hook_m", h.m.as_ref())] {
            let Some(data) = data else { continue };
            let name = format!("{}.{suffix}", h.node);
            let t = io.hook_inputs.iter().find(|t| t.name() == name).expect("build_graph_with makes every hook input");
            if t.data().is_none() {
                continue; // pruned: nothing this run computes reads the hooked node
            }
            assert_eq!(t.nelements() as usize, data.len(), "hook input '{name}': {:?} for shape {:?}", t.ne, h.shape);
            t.set_bytes(bytemuck::cast_slice(data), 0);
        }
    }
}
