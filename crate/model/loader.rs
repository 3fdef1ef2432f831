//! Loading a GPT-2 GGUF from a stream of chunks into a runnable model.
//!
//! ```no_run
//! use ggweb::model::loader::ModelLoader;
//! use ggweb::model::context::Gpt2Options;
//! let bytes = std::fs::read("tests/fixtures/tiny-f16.gguf").unwrap();
//! let mut loader = ModelLoader::new_cpu(Gpt2Options::default());
//! for chunk in bytes.chunks(64 * 1024) {      // as fetch delivers them
//!     loader.feed(chunk).unwrap();
//! }
//! let loaded = loader.finish().unwrap();
//! let ids = loaded.tokenizer.encode("Hello, my name is", false);
//! ```
//!
//! The architecture and hyperparameters are checked when the header has arrived, before
//! any weight buffer is allocated: first against the file's own tensor infos (a file
//! whose numbers contradict its tensors is a format error), then the memory they imply:
//! weights and the KV cache for the chosen `n_ctx` first (in u64), then with the compute
//! buffers as gallocr plans them for the worst-case graph ([`measure`]), are compared with
//! the memory budget (the backend's [`BufferType::budget`]: on wasm32 the
//! free part of the 4 GiB address space, natively the machine's memory or
//! `GGWEB_MAX_MEMORY`; or a lower one from [`ModelLoader::with_budget`]).

use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;

use super::checkpoint::{plan_state, read_meta, split_state_name, OptState};
use super::context::{Gpt2, Gpt2Options};
use super::gpt2::{block_index, global_weight_shapes, is_matrix_weight, layer_weight_shapes, weight_on_gpu, Hparams};
use super::plan_backend::PlanBackend;
use super::ModelError;
use crate::backend::{Backend, BufferType};
use crate::cpu::repack_buffer::{Repack, RepackBufferType};
use crate::cpu::CpuBackend;
use crate::gguf::{BufferLoader, GgufError, GgufHeader, GgufStreamReader, Limits, TensorInfo, TensorSink};
use crate::tensor::contiguous_nbytes;
use crate::tokenizer::Tokenizer;

impl From<GgufError> for ModelError {
    fn from(e: GgufError) -> Self {
        ModelError::Format(format!("{e}"))
    }
}

impl Hparams {
    /// Reads the `gpt2.*` keys; `n_vocab` comes from `token_embd.weight`.
    pub fn from_gguf(h: &GgufHeader) -> Result<Hparams, ModelError> {
        let arch = h.get_str("general.architecture").map_err(meta)?;
        if arch != "gpt2" {
            return Err(ModelError::UnsupportedArch(arch.to_string()));
        }
        let u = |k: &str| h.get_u32(k).map(|v| v as usize).map_err(meta);
        let hp = Hparams {
            n_vocab: h
                .tensor_info("token_embd.weight")
                .map(|t| t.ne[1] as usize)
                .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?,
            n_ctx_train: u("gpt2.context_length")?,
            n_embd: u("gpt2.embedding_length")?,
            n_head: u("gpt2.attention.head_count")?,
            n_layer: u("gpt2.block_count")?,
            n_ff: u("gpt2.feed_forward_length")?,
            eps: h.get_f32("gpt2.attention.layer_norm_epsilon").map_err(meta)?,
        };
        let bad = |what: String| Err(ModelError::Metadata(what));
        if hp.n_embd == 0 || hp.n_head == 0 || !hp.n_embd.is_multiple_of(hp.n_head) {
            return bad(format!(
                "embedding_length {} is not a positive multiple of head_count {}",
                hp.n_embd, hp.n_head
            ));
        }
        if hp.n_layer == 0 || hp.n_ctx_train == 0 || hp.n_ff == 0 || hp.n_vocab == 0 {
            return bad(format!("zero-sized hyperparameter in {hp:?}"));
        }
        if !(hp.eps > 0.0 && hp.eps < 1.0) {
            return bad(format!("layer_norm_epsilon {} out of range", hp.eps));
        }
        Ok(hp)
    }
}

/// Checks the hyperparameters against the file's own tensor infos, before anything is
/// sized from them: every weight the architecture needs is there with the shape `hp`
/// implies, and no block lies past `block_count`. So every hyperparameter is bounded by
/// tensors the reader has already checked (`n_vocab`, `n_embd` by `token_embd`,
/// `n_ctx_train` by `position_embd`, `n_layer` by the number of blocks, `n_ff` by
/// `ffn_up`), and a file that lies about them is a format error (MissingTensor, BadShape,
/// Metadata), never a size that is computed, budgeted or allocated.
pub fn check_tensors(h: &GgufHeader, hp: &Hparams) -> Result<(), ModelError> {
    // Twelve tensors per block: a block_count the file cannot hold is refused before any
    // loop runs over it.
    if hp.n_layer > h.tensors.len() / 12 {
        return Err(ModelError::Metadata(format!(
            "block_count {} needs {} block tensors, the file has {} tensors in all",
            hp.n_layer,
            (hp.n_layer as u64).saturating_mul(12),
            h.tensors.len()
        )));
    }
    let check = |name: &str, want: [i64; 4]| -> Result<(), ModelError> {
        let t = h.tensor_info(name).ok_or_else(|| ModelError::MissingTensor(name.into()))?;
        if t.ne != want {
            return Err(ModelError::BadShape { name: name.into(), expected: want, got: t.ne });
        }
        Ok(())
    };
    let [token_embd, position_embd, norm_w, norm_b, output] = global_weight_shapes(hp);
    for (name, ne) in [token_embd, position_embd, norm_w, norm_b] {
        check(name, ne)?;
    }
    if h.tensor_info(output.0).is_some() {
        check(output.0, output.1)?;
    }
    let shapes = layer_weight_shapes(hp);
    for il in 0..hp.n_layer {
        for (suffix, ne) in &shapes {
            check(&format!("blk.{il}.{suffix}"), *ne)?;
        }
    }
    for t in &h.tensors {
        match block_index(&t.name) {
            Some(Ok(il)) if il < hp.n_layer => {}
            Some(_) => {
                return Err(ModelError::Metadata(format!(
                    "tensor '{}' is not a block of 0..{} (block_count)",
                    t.name, hp.n_layer
                )))
            }
            None => {}
        }
    }
    Ok(())
}

/// `tokenizer.ggml.model` must be GPT-2's byte-level BPE.
fn tokenizer_model(h: &GgufHeader) -> Result<(), ModelError> {
    let model = h.get_str("tokenizer.ggml.model").map_err(meta)?;
    if model != "gpt2" {
        return Err(ModelError::Metadata(format!(
            "tokenizer.ggml.model is '{model}', ggweb reads 'gpt2' (byte-level BPE)"
        )));
    }
    Ok(())
}

fn meta(e: GgufError) -> ModelError {
    ModelError::Metadata(format!("{e}"))
}

/// GPT-2's tokenizer from `tokenizer.ggml.*`.
pub fn tokenizer_from_gguf(h: &GgufHeader) -> Result<Tokenizer, ModelError> {
    tokenizer_model(h)?;
    let tokens = h.get_arr_str("tokenizer.ggml.tokens").map_err(meta)?.to_vec();
    let merges = h.get_arr_str("tokenizer.ggml.merges").map_err(meta)?.to_vec();
    let types = h.get_arr_i32("tokenizer.ggml.token_type").ok().map(|t| t.to_vec());
    tokenizer_of(h, tokens, merges, types)
}

/// [`tokenizer_from_gguf`], moving the arrays out of `h` (left empty) instead of copying
/// them: a load holds the vocabulary and merges once, not twice (GPT-2's are ~4 MB of wasm
/// heap, below the weights for good, since they arrive before them). Same errors.
pub fn take_tokenizer(h: &mut GgufHeader) -> Result<Tokenizer, ModelError> {
    tokenizer_model(h)?;
    let tokens = h.take_arr_str("tokenizer.ggml.tokens").map_err(meta)?;
    let merges = h.take_arr_str("tokenizer.ggml.merges").map_err(meta)?;
    let types = h.take_arr_i32("tokenizer.ggml.token_type").ok();
    tokenizer_of(h, tokens, merges, types)
}

fn tokenizer_of(
    h: &GgufHeader,
    tokens: Vec<String>,
    merges: Vec<String>,
    types: Option<Vec<i32>>,
) -> Result<Tokenizer, ModelError> {
    let bos = h.get_u32("tokenizer.ggml.bos_token_id").ok();
    let eos = h.get_u32("tokenizer.ggml.eos_token_id").ok();
    Tokenizer::new(tokens, merges, types, bos, eos).map_err(|e| ModelError::Tokenizer(format!("{e}")))
}

/// The tokenizer's arrays: the loader leaves them out of `Gpt2::file_meta` (the tokenizer
/// holds them) and `model.save` writes them from the tokenizer (export.rs).
pub const TOKENIZER_ARRAYS: [&str; 3] = ["tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"];

/// A model ready to generate: the network and its tokenizer.
pub struct LoadedModel {
    pub model: Gpt2,
    pub tokenizer: Tokenizer,
}

/// What a model takes before anything is allocated: its weight buffers (alignment padding
/// included), the KV cache for `n_ctx` and the compute buffers gallocr plans at the end of
/// loading (measured beforehand on buffers that hold no memory). All in u64 with saturation, from hyperparameters already checked
/// against the file's tensors ([`check_tensors`]), so no header overflows them, whatever
/// the target's `usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadEstimate {
    pub weights: u64,
    pub kv: u64,
    /// The compute buffers, as gallocr plans them for the worst-case graph ([`measure`]);
    /// 0 until measured (the first, cheap check is of the weights and KV cache alone).
    pub compute: u64,
    /// The largest single tensor among weights, KV and intermediates: on a 32-bit target it
    /// must fit in `isize` (2 GiB), the most one allocation or one tensor may span.
    pub largest: u64,
    /// The context length `opts` resolves to (0 means the model's own).
    pub n_ctx: usize,
    /// The tokens per graph run: `opts.n_batch`, at most `n_ctx`.
    pub n_batch: usize,
}

/// The largest intermediate of GPT-2's worst graph (`n_batch` tokens ending at `n_ctx`), in
/// u64: the logits `[n_vocab, n_batch]`, attention's `[n_ctx, n_batch, n_head]`, the MLP's
/// `[n_ff, n_batch]` or the fused QKV `[3 n_embd, n_batch]`. Checked before the graph is
/// built, so that no size computed in `usize` while planning can wrap on wasm32.
fn largest_node(hp: &Hparams, n_ctx: usize, n_batch: usize) -> u64 {
    let (e, h, f, v) = (hp.n_embd as u64, hp.n_head as u64, hp.n_ff as u64, hp.n_vocab as u64);
    let (l, n) = (n_ctx as u64, n_batch as u64);
    let f32s = |dims: &[u64]| dims.iter().fold(4u64, |b, &d| b.saturating_mul(d));
    [f32s(&[v, n]), f32s(&[l, n, h]), f32s(&[f, n]), f32s(&[3, e, n])].into_iter().max().unwrap_or(0)
}

impl LoadEstimate {
    /// Checks the options against the hyperparameters and sizes every part. `alignment`
    /// is the buffers' (each tensor's bytes are rounded up to it, as `alloc_tensors` does).
    pub fn new(
        header: &GgufHeader,
        hp: &Hparams,
        opts: &Gpt2Options,
        alignment: usize,
    ) -> Result<LoadEstimate, ModelError> {
        let (n_ctx, n_batch) = opts.resolve(hp)?;
        let a = alignment.max(1) as u64;
        let aligned = |n: u64| n.div_ceil(a).saturating_mul(a);
        // A checkpoint's optimizer state counts here too (its tensors and the gradient rows
        // beside them), so that Model.inspect plans what the load will hold.
        let weights = header
            .tensors
            .iter()
            .fold(0u64, |s, t| s.saturating_add(aligned(t.nbytes as u64)))
            .saturating_add(state_extra_bytes(header));
        let largest_weight = header.tensors.iter().map(|t| t.nbytes as u64).max().unwrap_or(0);
        // Two tensors of n_embd * n_ctx per layer, of opts.kv_type (KvCache::new).
        let per_tensor = contiguous_nbytes(opts.kv_type, &[hp.n_embd as i64, n_ctx as i64, 1, 1]).unwrap_or(u64::MAX);
        let kv = aligned(per_tensor).saturating_mul(2).saturating_mul(hp.n_layer as u64);
        let largest = largest_weight.max(per_tensor).max(largest_node(hp, n_ctx, n_batch));
        Ok(LoadEstimate { weights, kv, compute: 0, largest, n_ctx, n_batch })
    }

    pub fn total(&self) -> u64 {
        self.weights.saturating_add(self.kv).saturating_add(self.compute)
    }

    /// An [`ModelError::OverBudget`] when the total exceeds `limit`, or when a part does
    /// not fit a `usize_bits`-bit address space (32 on wasm32: no tensor over 2 GiB, all of
    /// it within 4 GiB), so that no size computed later in `usize` can wrap.
    pub fn check(&self, hp: &Hparams, limit: Option<u64>, usize_bits: u32) -> Result<(), ModelError> {
        let what = || {
            let kv = format!(
                "weights {} bytes + KV cache {} bytes for n_ctx {} x {} layers x n_embd {}",
                self.weights, self.kv, self.n_ctx, hp.n_layer, hp.n_embd
            );
            match self.compute {
                // The first, cheap check: refused before the compute buffer was planned.
                0 => format!("{kv}, before any compute buffer for n_batch {}", self.n_batch),
                c => format!("{kv} + compute buffer {c} bytes for n_batch {}", self.n_batch),
            }
        };
        if usize_bits < 64 {
            let max_tensor = (1u64 << (usize_bits - 1)) - 1;
            if self.largest > max_tensor {
                return Err(ModelError::OverBudget {
                    what: format!(
                        "its largest tensor, {} bytes, exceeds what one {usize_bits}-bit allocation can hold",
                        self.largest
                    ),
                    needed: self.largest,
                    limit: max_tensor,
                });
            }
            let space = 1u64 << usize_bits;
            if self.total() > space {
                return Err(ModelError::OverBudget { what: what(), needed: self.total(), limit: space });
            }
        }
        match limit {
            Some(limit) if self.total() > limit => {
                Err(ModelError::OverBudget { what: what(), needed: self.total(), limit })
            }
            _ => Ok(()),
        }
    }
}

/// Validates the header (architecture, hyperparameters, tokenizer, options, memory) before
/// handing it on to the buffer loader, so nothing is allocated for a file we would refuse.
struct CheckedSink {
    inner: BufferLoader,
    /// The backends the model runs on, for the measured plan.
    backends: Vec<Rc<dyn Backend>>,
    opts: Gpt2Options,
    alignment: usize,
    budget: Option<u64>,
    /// The `usize` width sizes must fit (the target's; 32 to check wasm32's natively).
    usize_bits: u32,
    checked: Option<(Hparams, Tokenizer)>,
    /// Backends the model runs on (each has a compute buffer).
    n_backends: usize,
    /// Those of them that compute in host memory.
    host_backends: usize,
    /// `gpu_layers` of a split load ([`ModelLoader::new_split`]).
    split_gpu_layers: Option<usize>,
    /// n_layer once the header is checked, for a placement that goes by layer.
    n_layer: Rc<Cell<usize>>,
    /// Whether the header has no `output.weight` (the head is `token_embd`), likewise.
    tied: Rc<Cell<bool>>,
    estimate: Option<LoadEstimate>,
    /// Why the header was refused, kept typed for the caller.
    rejected: Option<ModelError>,
    /// A checkpoint's optimizer state, read apart from the weights ([`StateSink`]).
    state: Option<StateSink>,
}

/// Where a checkpoint's optimizer state tensors go as the file streams in: straight into the
/// rows of the state's `[n, rows]` tensors (checkpoint.rs), never into the weight buffers.
struct StateSink {
    state: OptState,
    /// Per file tensor: `(state index, byte offset of its row)` for a state tensor.
    slots: Vec<Option<(usize, usize)>>,
    /// Per file tensor: its index among the weights (what the buffer loader sees).
    weight_index: Vec<usize>,
}

impl StateSink {
    /// The state a checkpoint's header declares (None: no `ggweb.optimizer.type`), zeroed,
    /// in buffers of `buft` (the host's).
    fn new(header: &GgufHeader, buft: &dyn BufferType) -> Result<Option<StateSink>, ModelError> {
        let Some(meta) = read_meta(header)? else { return Ok(None) };
        let (slots, params) =
            plan_state(header, &meta, |w| header.tensor_info(w).is_some() && split_state_name(w).is_none())?;
        let mut state = OptState::alloc(meta, None, &params, buft)?;
        state.resume = true;
        let mut n = 0;
        let weight_index = slots
            .iter()
            .map(|s| {
                n += s.is_none() as usize;
                n.saturating_sub(1)
            })
            .collect();
        Ok(Some(StateSink { state, slots, weight_index }))
    }

    /// The header without the state tensors.
    fn weights_header(&self, header: &GgufHeader) -> GgufHeader {
        weights_only(header)
    }
}

/// Host bytes a checkpoint's state takes besides its tensors in the file: each trained
/// tensor's gradient row (the first state tensor of each: `.adam_m`, `.momentum`).
fn state_extra_bytes(header: &GgufHeader) -> u64 {
    if header.get("ggweb.optimizer.type").is_none() {
        return 0;
    }
    header
        .tensors
        .iter()
        .filter(|t| t.name.ends_with(".adam_m") || t.name.ends_with(".momentum"))
        .map(|t| t.nbytes as u64)
        .sum()
}

/// Host bytes a checkpoint's optimizer state takes once loaded ([`OptState`]: its tensors in
/// the file and the gradient rows beside them); 0 for a plain file.
pub(crate) fn state_bytes(header: &GgufHeader) -> u64 {
    let extra = state_extra_bytes(header);
    if extra == 0 {
        return 0;
    }
    let in_file: u64 =
        header.tensors.iter().filter(|t| split_state_name(&t.name).is_some()).map(|t| t.nbytes as u64).sum();
    in_file.saturating_add(extra)
}

/// The header without a checkpoint's optimizer state tensors (which never go into the
/// weight buffers).
pub(crate) fn weights_only(header: &GgufHeader) -> GgufHeader {
    header.retain_tensors(|t| split_state_name(&t.name).is_none())
}

/// The header's model, checked in the order that makes a lying file a format error: the
/// hyperparameters, then their agreement with the tensors, then the tokenizer. Only then
/// are sizes computed and budgeted ([`CheckedSink::check`]).
pub(crate) fn check_header(header: &GgufHeader) -> Result<(Hparams, Tokenizer), ModelError> {
    let hp = Hparams::from_gguf(header)?;
    check_tensors(header, &hp)?;
    with_vocab(hp, tokenizer_from_gguf(header)?)
}

/// [`check_header`], the tokenizer's arrays moved out of `header` ([`take_tokenizer`]): a
/// load's ([`CheckedSink`]), which keeps them only in the tokenizer.
fn check_header_taking(header: &mut GgufHeader) -> Result<(Hparams, Tokenizer), ModelError> {
    let hp = Hparams::from_gguf(header)?;
    check_tensors(header, &hp)?;
    with_vocab(hp, take_tokenizer(header)?)
}

/// The tokenizer's size must be the embeddings' row count.
fn with_vocab(hp: Hparams, tok: Tokenizer) -> Result<(Hparams, Tokenizer), ModelError> {
    if tok.n_vocab() != hp.n_vocab {
        return Err(ModelError::Metadata(format!(
            "tokenizer has {} tokens but token_embd.weight has {} rows",
            tok.n_vocab(),
            hp.n_vocab
        )));
    }
    Ok((hp, tok))
}

impl CheckedSink {
    /// The header's checks and plan. Its model and tokenizer are `take_metadata`'s when that
    /// ran (the reader calls it first), else checked here.
    fn check(&mut self, header: &GgufHeader) -> Result<(Hparams, Tokenizer, LoadEstimate), ModelError> {
        let (hp, tok) = match self.checked.take() {
            Some(checked) => checked,
            None => check_header(header)?,
        };
        let mut est = LoadEstimate::new(header, &hp, &self.opts, self.alignment)?;
        // A split whose head is on the GPU and embeddings are not copies a tied output
        // projection there (duplicate_tied_output): token_embd once more.
        if let Some(gpu_layers) = self.split_gpu_layers {
            let tied = header.tensor_info("output.weight").is_none();
            if tied && gpu_layers >= 1 && gpu_layers <= hp.n_layer {
                let t = header.tensor_info("token_embd.weight").map_or(0, |t| t.nbytes as u64);
                let a = self.alignment.max(1) as u64;
                est.weights = est.weights.saturating_add(t.div_ceil(a).saturating_mul(a));
            }
        }
        // The placement goes by layer and role: it needs n_layer and the tie now.
        self.n_layer.set(hp.n_layer);
        self.tied.set(header.tensor_info("output.weight").is_none());
        let place = |info: &TensorInfo| self.inner.placement(info);
        let host = HostShare {
            place: &place,
            n_backends: self.n_backends,
            host_backends: self.host_backends,
            kv_type: self.opts.kv_type,
        };
        // First the cheap check, in u64: weights and KV cache (and the largest node) alone.
        host.check(header, &hp, &est, 0, self.alignment, self.budget, self.usize_bits)?;
        // Then the exact one: gallocr's plan of the worst-case graph on these backends.
        let planned = measure(header, &hp, &self.backends, self.split_gpu_layers, &self.opts)?;
        let n = planned.sched.n_backends();
        let compute = |host: bool| -> u64 {
            (0..n)
                // The plan's buffers are not host memory; the backends they stand for may be.
                .filter(|&i| self.backends[i].buffer_type().is_host() == host)
                .map(|i| planned.sched.compute_buffer_size(i) as u64)
                .sum()
        };
        let host_compute = compute(true);
        est.compute = host_compute + compute(false);
        host.check(header, &hp, &est, host_compute, self.alignment, self.budget, self.usize_bits)?;
        Ok((hp, tok, est))
    }
}

/// The model a load of `header` builds on `backends` (`gpu_layers`: a split's, with
/// `[gpu, cpu]`), over buffers that are only sizes ([`PlanBackend`]): the loader's own
/// placement, KV cache and the scheduler's reserve of the worst-case graph, so its
/// `memory_by_backend` is what the real load will take, byte for byte.
pub(crate) fn measure(
    header: &GgufHeader,
    hp: &Hparams,
    backends: &[Rc<dyn Backend>],
    gpu_layers: Option<usize>,
    opts: &Gpt2Options,
) -> Result<Gpt2, ModelError> {
    let planned: Vec<Rc<dyn Backend>> =
        backends.iter().map(|b| Rc::new(PlanBackend::new(b.clone())) as Rc<dyn Backend>).collect();
    let mut loader = match (gpu_layers, planned.as_slice()) {
        (Some(n), [gpu, cpu]) => {
            let (gpu_buft, cpu_buft) = (gpu.buffer_type(), cpu.buffer_type());
            let n_layer = hp.n_layer;
            BufferLoader::with_placement(move |info| {
                if weight_on_gpu(&info.name, n_layer, n.min(n_layer.saturating_add(1))) {
                    gpu_buft.clone()
                } else {
                    cpu_buft.clone()
                }
            })
        }
        _ => BufferLoader::new(planned[0].buffer_type()),
    };
    loader.on_header(header)?;
    let loaded = loader.into_loaded(header.clone())?;
    Gpt2::with_backends(hp.clone(), loaded.ctx, loaded.buffers, planned, opts)
}

/// The part of a load in host memory (the wasm heap in the browser), which alone is held to
/// the host's budget and address space; weights on a device go to its buffers piece by
/// piece as they stream in (`BufferLoader`), never through the host. One place for a load
/// ([`CheckedSink`]) and a plan (`HeaderPlan`).
pub(crate) struct HostShare<'a> {
    /// The loader's placement: each tensor's buffer type.
    pub place: &'a dyn Fn(&TensorInfo) -> Rc<dyn BufferType>,
    pub n_backends: usize,
    /// How many of the backends compute in host memory (the CPU).
    pub host_backends: usize,
    pub kv_type: crate::types::GgmlType,
}

impl HostShare<'_> {
    /// Every device tensor fits one of its device's buffers and, row by row, its bindings;
    /// then the host part of `est` (with `host_compute`, the host backends' compute
    /// buffers) fits `budget` and a `usize_bits` address space ([`LoadEstimate::check`]).
    /// Returns that part (with no device, `est` itself).
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        &self,
        header: &GgufHeader,
        hp: &Hparams,
        est: &LoadEstimate,
        host_compute: u64,
        alignment: usize,
        budget: Option<u64>,
        usize_bits: u32,
    ) -> Result<LoadEstimate, ModelError> {
        if self.host_backends == self.n_backends {
            let all = LoadEstimate { compute: host_compute, largest: est.largest.max(host_compute), ..*est };
            return all.check(hp, budget, usize_bits).map(|()| all);
        }
        let a = alignment.max(1) as u64;
        let aligned = |n: u64| n.div_ceil(a).saturating_mul(a);
        let (mut weights, mut largest) = (0u64, 0u64);
        for t in &header.tensors {
            let buft = (self.place)(t);
            if buft.is_host() {
                weights = weights.saturating_add(aligned(t.nbytes as u64));
                largest = largest.max(t.nbytes as u64);
            } else {
                check_device_tensor(t, &*buft)?;
            }
        }
        let host_layers = (0..hp.n_layer)
            .filter(|il| {
                header.tensor_info(&format!("blk.{il}.attn_qkv.weight")).is_some_and(|t| (self.place)(t).is_host())
            })
            .count() as u64;
        let per_tensor =
            contiguous_nbytes(self.kv_type, &[hp.n_embd as i64, est.n_ctx as i64, 1, 1]).unwrap_or(u64::MAX);
        let kv = aligned(per_tensor).saturating_mul(2).saturating_mul(host_layers);
        if host_layers > 0 {
            largest = largest.max(per_tensor);
        }
        // The host backends' compute buffers (one allocation each: within isize too).
        let host = LoadEstimate { weights, kv, compute: host_compute, largest: largest.max(host_compute), ..*est };
        host.check(hp, budget, usize_bits).map(|()| host)
    }
}

/// A tensor placed on a device must fit one buffer of it (maxBufferSize) and one binding
/// (maxStorageBufferBindingSize), or, for a 2-D weight, one row per binding: the kernels
/// that read weights (mul_mat, get_rows) bind a large one in row ranges. Otherwise the
/// load is refused here, naming the tensor, before anything is allocated.
pub(crate) fn check_device_tensor(t: &TensorInfo, buft: &dyn BufferType) -> Result<(), ModelError> {
    let n = t.nbytes as u64;
    let what = |limit: &str| format!("tensor '{}' ({} {:?}) on {}: {limit}", t.name, t.ty.name(), t.ne, buft.name());
    let max_buffer = buft.max_size() as u64;
    if n > max_buffer {
        return Err(ModelError::OverBudget {
            what: what(&format!("{n} bytes exceed the largest buffer (maxBufferSize)")),
            needed: n,
            limit: max_buffer,
        });
    }
    let binding = buft.max_binding();
    if n <= binding {
        return Ok(());
    }
    let rows = t.ne[1].max(1) as u64;
    if t.ne[2] * t.ne[3] != 1 {
        return Err(ModelError::OverBudget {
            what: what(&format!("a {n}-byte 3-D/4-D tensor exceeds one binding (maxStorageBufferBindingSize)")),
            needed: n,
            limit: binding,
        });
    }
    let row = n / rows;
    if row > binding {
        return Err(ModelError::OverBudget {
            what: what(&format!("one row of {row} bytes exceeds one binding (maxStorageBufferBindingSize)")),
            needed: row,
            limit: binding,
        });
    }
    Ok(())
}

impl CheckedSink {
    /// Keeps `e` (typed, for the caller) and gives the reader its error.
    fn reject(&mut self, e: ModelError) -> GgufError {
        let msg = e.to_string();
        self.rejected = Some(e);
        GgufError::new(crate::gguf::GgufErrorKind::Rejected(msg))
    }
}

impl TensorSink for CheckedSink {
    /// The model and tokenizer checked first, the tokenizer's arrays moved out of the header
    /// (not copied): everything made before the weights' buffers stays below them in the
    /// wasm heap, so a copy there, even one freed soon, would cost the load's memory for good.
    fn take_metadata(&mut self, header: &mut GgufHeader) -> Result<(), GgufError> {
        match check_header_taking(header) {
            Ok(checked) => {
                self.checked = Some(checked);
                Ok(())
            }
            Err(e) => Err(self.reject(e)),
        }
    }

    fn on_header(&mut self, header: &GgufHeader) -> Result<(), GgufError> {
        match self.check(header) {
            Ok((hp, tok, est)) => {
                self.n_layer.set(hp.n_layer);
                self.checked = Some((hp, tok));
                self.estimate = Some(est);
            }
            Err(e) => return Err(self.reject(e)),
        }
        let host = self.backends.last().expect("at least one backend").buffer_type();
        match StateSink::new(header, &*host) {
            Ok(Some(s)) => {
                let weights = s.weights_header(header);
                self.state = Some(s);
                self.inner.on_header(&weights)
            }
            Ok(None) => self.inner.on_header(header),
            Err(e) => Err(self.reject(e)),
        }
    }

    fn write(&mut self, tensor_index: usize, offset: usize, bytes: &[u8]) -> Result<(), GgufError> {
        match &self.state {
            Some(s) => match s.slots[tensor_index] {
                Some((k, row)) => {
                    s.state.write(k, row + offset, bytes);
                    Ok(())
                }
                None => self.inner.write(s.weight_index[tensor_index], offset, bytes),
            },
            None => self.inner.write(tensor_index, offset, bytes),
        }
    }
}

/// Feeds a GGUF stream into backend buffers and builds the model at the end.
pub struct ModelLoader {
    reader: GgufStreamReader,
    sink: CheckedSink,
    /// In priority order; the CPU last.
    backends: Vec<Rc<dyn Backend>>,
    opts: Gpt2Options,
}

impl ModelLoader {
    /// Weights in buffers of `backend`'s type; `file_size` (Content-Length) when known lets
    /// the reader refuse a file that claims more data than it has before allocating.
    /// On the CPU, the matrix weights go to its repacking buffer type
    /// ([`crate::cpu::repack_buffer`]) as `opts.repack` says.
    pub fn new(backend: Rc<dyn Backend>, opts: Gpt2Options, limits: Limits, file_size: Option<u64>) -> ModelLoader {
        let buft: Rc<dyn BufferType> = backend.buffer_type();
        let tied = Rc::new(Cell::new(false));
        let inner = match repack_buffer_type(&*backend, opts.repack) {
            Some(repack) => {
                let tie = tied.clone();
                BufferLoader::with_placement(move |info| {
                    if is_matrix_weight(&info.name, tie.get()) {
                        repack.clone()
                    } else {
                        buft.clone()
                    }
                })
            }
            None => BufferLoader::new(buft),
        };
        let mut loader = ModelLoader::with_sink(inner, Rc::new(Cell::new(0)), vec![backend], opts, limits, file_size);
        loader.sink.tied = tied;
        loader
    }

    /// The model split layer by layer: the last `gpu_layers` blocks' weights (and their KV
    /// cache) in `gpu`'s memory, the rest on `cpu` ([`weight_on_gpu`]: the embeddings move
    /// only when `gpu_layers > n_layer`, the head whenever a block does; `usize::MAX` is
    /// everything). Graphs run
    /// through the scheduler over both; ops the GPU lacks run on the CPU.
    pub fn new_split(
        gpu: Rc<dyn Backend>,
        cpu: Rc<dyn Backend>,
        gpu_layers: usize,
        opts: Gpt2Options,
        limits: Limits,
        file_size: Option<u64>,
    ) -> ModelLoader {
        let n_layer = Rc::new(Cell::new(0));
        let (gpu_buft, cpu_buft) = (gpu.buffer_type(), cpu.buffer_type());
        let seen = n_layer.clone();
        let place = BufferLoader::with_placement(move |info| {
            // Any count above n_layer means the same (everything); clamped so that no count
            // (usize::MAX for "all") overflows the layer arithmetic.
            let n_layer = seen.get();
            if weight_on_gpu(&info.name, n_layer, gpu_layers.min(n_layer.saturating_add(1))) {
                gpu_buft.clone()
            } else {
                cpu_buft.clone()
            }
        });
        let mut loader = ModelLoader::with_sink(place, n_layer, vec![gpu, cpu], opts, limits, file_size);
        loader.sink.split_gpu_layers = Some(gpu_layers);
        loader
    }

    fn with_sink(
        inner: BufferLoader,
        n_layer: Rc<Cell<usize>>,
        backends: Vec<Rc<dyn Backend>>,
        opts: Gpt2Options,
        limits: Limits,
        file_size: Option<u64>,
    ) -> ModelLoader {
        let mut reader = GgufStreamReader::new(limits);
        if let Some(n) = file_size {
            reader = reader.with_file_size(n);
        }
        // The budget and alignment of the host side (the CPU, last): what a wasm32 heap allows.
        let buft = backends.last().expect("at least one backend").buffer_type();
        let (alignment, budget) = (buft.alignment(), buft.budget());
        let sink = CheckedSink {
            inner,
            opts: opts.clone(),
            alignment,
            budget,
            usize_bits: usize::BITS,
            n_backends: backends.len(),
            host_backends: backends.iter().filter(|b| b.buffer_type().is_host()).count(),
            backends: backends.clone(),
            split_gpu_layers: None,
            checked: None,
            n_layer,
            tied: Rc::new(Cell::new(false)),
            estimate: None,
            rejected: None,
            state: None,
        };
        ModelLoader { reader, sink, backends, opts }
    }

    /// Refuses, when the header arrives, a model whose weights and KV cache need more than
    /// `bytes` ([`ModelError::OverBudget`], naming both numbers). It can only lower the
    /// backend's own budget, never raise it.
    pub fn with_budget(mut self, bytes: u64) -> ModelLoader {
        self.sink.budget = Some(self.sink.budget.map_or(bytes, |b| b.min(bytes)));
        self
    }

    /// Sizes checked as on a `bits`-bit target (32: wasm32), whatever this build's `usize`:
    /// a model refused there is refused here, so wasm32's overflows can be found natively
    /// (the `model_sizes32` fuzz target). Never wider than this build's `usize`.
    pub fn with_usize_bits(mut self, bits: u32) -> ModelLoader {
        self.sink.usize_bits = bits.clamp(16, usize::BITS);
        self
    }

    /// The budget in force (None: unknown and not set).
    pub fn budget(&self) -> Option<u64> {
        self.sink.budget
    }

    /// Weights and KV bytes, once the header has been accepted.
    pub fn estimate(&self) -> Option<LoadEstimate> {
        self.sink.estimate
    }

    /// Where the weight bytes fed so far went: host buffers, or device buffers piece by
    /// piece (a model wholly on WebGPU copies none into host memory).
    pub fn load_stats(&self) -> crate::gguf::LoadStats {
        self.sink.inner.stats()
    }

    /// The GGUF header once all of it has arrived (the wasm warm-up reads the weight types).
    pub fn header(&self) -> Option<&crate::gguf::GgufHeader> {
        self.reader.header()
    }

    /// The options this loader builds the model with.
    pub fn options(&self) -> &Gpt2Options {
        &self.opts
    }

    pub fn new_cpu(opts: Gpt2Options) -> ModelLoader {
        let n_threads = opts.n_threads;
        ModelLoader::new(Rc::new(CpuBackend::new(n_threads)), opts, Limits::default(), None)
    }

    /// Passes one chunk (any size) to the reader; weights are copied into place as they pass.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<(), ModelError> {
        self.reader.feed(chunk, &mut self.sink).map_err(|e| self.sink.rejected.clone().unwrap_or_else(|| e.into()))
    }

    pub fn bytes_consumed(&self) -> u64 {
        self.reader.bytes_consumed()
    }

    /// Total file size once the header says it (data offset + end of the last tensor).
    pub fn total_expected(&self) -> Option<u64> {
        self.reader.total_expected()
    }

    /// Checks the stream was complete, then builds the runtime (KV cache, compute reserve).
    pub fn finish(self) -> Result<LoadedModel, ModelError> {
        let header = self.reader.finish()?;
        let (hparams, tokenizer) = self.sink.checked.ok_or_else(|| ModelError::Format("no GGUF header".into()))?;
        let header = match &self.sink.state {
            Some(s) => s.weights_header(&header),
            None => header,
        };
        let mut loaded = self.sink.inner.into_loaded(header)?;
        let file_meta = core::mem::take(&mut loaded.header.metadata)
            .into_iter()
            .filter(|(k, _)| !TOKENIZER_ARRAYS.contains(&k.as_str()))
            .collect();
        let mut model = Gpt2::with_backends(hparams, loaded.ctx, loaded.buffers, self.backends, &self.opts)?;
        model.budget = self.sink.budget;
        model.file_meta = file_meta;
        model.opt_state = self.sink.state.map(|s| s.state);
        Ok(LoadedModel { model, tokenizer })
    }
}

/// The CPU's repacking buffer type for a model wholly on `backend`, when the backend reads it
/// (the CPU's `supports_buft`) and repacking is on: ggml's extra buffer type, chosen per
/// weight by [`is_matrix_weight`]. A split model keeps ggml's layout (the scheduler copies
/// raw bytes between backends; WebGPU reads ggml's layout).
fn repack_buffer_type(backend: &dyn Backend, choice: Repack) -> Option<Rc<dyn BufferType>> {
    let on = match choice {
        Repack::Auto => crate::cpu::repack_buffer::enabled(),
        Repack::Off => false,
        Repack::Force => true,
    };
    let buft = RepackBufferType { force: choice == Repack::Force };
    (on && backend.buffer_type().is_host() && backend.supports_buft(&buft)).then(|| Rc::new(buft) as Rc<dyn BufferType>)
}

/// Loads a whole file held in memory (tests, the CLI).
pub fn load_from_bytes(bytes: &[u8], opts: Gpt2Options) -> Result<LoadedModel, ModelError> {
    let n_threads = opts.n_threads;
    load_from_bytes_on(bytes, Rc::new(CpuBackend::new(n_threads)), opts)
}

pub fn load_from_bytes_on(
    bytes: &[u8],
    backend: Rc<dyn Backend>,
    opts: Gpt2Options,
) -> Result<LoadedModel, ModelError> {
    let mut loader = ModelLoader::new(backend, opts, Limits::default(), Some(bytes.len() as u64));
    for chunk in bytes.chunks(1 << 20) {
        loader.feed(chunk)?;
    }
    loader.finish()
}

/// Reads a file in 1 MiB chunks: only one chunk is ever held besides the weights.
#[cfg(feature = "std")]
pub fn load_from_path(path: &str, backend: Rc<dyn Backend>, opts: Gpt2Options) -> Result<LoadedModel, ModelError> {
    load_path_with(path, |size| ModelLoader::new(backend, opts, Limits::default(), size))
}

/// [`load_from_path`] split between `gpu` and `cpu` by layer (see [`ModelLoader::new_split`]).
#[cfg(feature = "std")]
pub fn load_from_path_split(
    path: &str,
    gpu: Rc<dyn Backend>,
    cpu: Rc<dyn Backend>,
    gpu_layers: usize,
    opts: Gpt2Options,
) -> Result<LoadedModel, ModelError> {
    load_path_with(path, |size| ModelLoader::new_split(gpu, cpu, gpu_layers, opts, Limits::default(), size))
}

#[cfg(feature = "std")]
fn load_path_with(path: &str, make: impl FnOnce(Option<u64>) -> ModelLoader) -> Result<LoadedModel, ModelError> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| ModelError::Format(format!("{path}: {e}")))?;
    let size = f.metadata().map(|m| m.len()).ok();
    let mut loader = make(size);
    let mut buf: Vec<u8> = alloc::vec![0; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| ModelError::Format(format!("{path}: {e}")))?;
        if n == 0 {
            break;
        }
        loader.feed(&buf[..n]).map_err(|e| match e {
            ModelError::Format(m) => ModelError::Format(format!("{path}: {m}")),
            other => other,
        })?;
    }
    loader.finish()
}
