//! Loading a GPT-2 GGUF from a stream of chunks into a runnable model.
//!
//! ```no_run
//! use ggweb::model::loader::ModelLoader;
//! use ggweb::model::gpt2::Gpt2Options;
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
//! any weight buffer is allocated: a file we cannot run is refused up front. So is one
//! that does not fit: weights plus the KV cache for the chosen `n_ctx` are compared with
//! the memory budget (the backend's [`BufferType::budget`], on wasm32 the free part of
//! the 4 GiB address space, or a lower one from [`ModelLoader::with_budget`]).

use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::cell::Cell;

use super::gpt2::{weight_on_gpu, Gpt2, Gpt2Options, Hparams};
use super::ModelError;
use crate::backend::{Backend, BufferType};
use crate::cpu::CpuBackend;
use crate::gguf::{BufferLoader, GgufError, GgufHeader, GgufStreamReader, Limits, TensorSink};
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
        if hp.n_embd == 0 || hp.n_head == 0 || hp.n_embd % hp.n_head != 0 {
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

fn meta(e: GgufError) -> ModelError {
    ModelError::Metadata(format!("{e}"))
}

/// GPT-2's tokenizer from `tokenizer.ggml.*`.
pub fn tokenizer_from_gguf(h: &GgufHeader) -> Result<Tokenizer, ModelError> {
    let model = h.get_str("tokenizer.ggml.model").map_err(meta)?;
    if model != "gpt2" {
        return Err(ModelError::Metadata(format!(
            "tokenizer.ggml.model is '{model}', ggweb reads 'gpt2' (byte-level BPE)"
        )));
    }
    let tokens = h.get_arr_str("tokenizer.ggml.tokens").map_err(meta)?.to_vec();
    let merges = h.get_arr_str("tokenizer.ggml.merges").map_err(meta)?.to_vec();
    let types = h.get_arr_i32("tokenizer.ggml.token_type").ok().map(|t| t.to_vec());
    let bos = h.get_u32("tokenizer.ggml.bos_token_id").ok();
    let eos = h.get_u32("tokenizer.ggml.eos_token_id").ok();
    Tokenizer::new(tokens, merges, types, bos, eos).map_err(|e| ModelError::Tokenizer(format!("{e}")))
}

/// A model ready to generate: the network and its tokenizer.
pub struct LoadedModel {
    pub model: Gpt2,
    pub tokenizer: Tokenizer,
}

/// What a model takes before anything is allocated: its weight buffers (alignment padding
/// included) and the KV cache for `n_ctx`. The compute buffer comes on top; gallocr plans
/// it at the end of loading (mostly the logits, n_vocab × n_batch × 4 bytes), and a
/// refused allocation there is a typed error too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadEstimate {
    pub weights: u64,
    pub kv: u64,
    /// The context length `opts` resolves to (0 means the model's own).
    pub n_ctx: usize,
}

impl LoadEstimate {
    /// Checks the options against the hyperparameters and sizes both parts, in u64 with
    /// saturation so that no header can overflow the sum. `alignment` is the weight and
    /// KV buffers' (each tensor's bytes are rounded up to it, as `alloc_tensors` does).
    pub fn new(
        header: &GgufHeader,
        hp: &Hparams,
        opts: &Gpt2Options,
        alignment: usize,
    ) -> Result<LoadEstimate, ModelError> {
        let n_ctx = if opts.n_ctx == 0 { hp.n_ctx_train } else { opts.n_ctx };
        if n_ctx > hp.n_ctx_train {
            return Err(ModelError::Config(format!(
                "n_ctx {n_ctx} exceeds the model's context length {}",
                hp.n_ctx_train
            )));
        }
        if opts.n_batch == 0 {
            return Err(ModelError::Config("n_batch must be at least 1".into()));
        }
        let a = alignment.max(1) as u64;
        let aligned = |n: u64| n.div_ceil(a).saturating_mul(a);
        let weights = header.tensors.iter().fold(0u64, |s, t| s.saturating_add(aligned(t.nbytes as u64)));
        // Two tensors of n_embd * n_ctx per layer, of opts.kv_type (KvCache::new).
        let per_tensor =
            (hp.n_embd as u64).saturating_mul(n_ctx as u64).saturating_mul(opts.kv_type.type_size() as u64);
        let kv = aligned(per_tensor).saturating_mul(2).saturating_mul(hp.n_layer as u64);
        Ok(LoadEstimate { weights, kv, n_ctx })
    }

    pub fn total(&self) -> u64 {
        self.weights.saturating_add(self.kv)
    }

    /// An [`ModelError::OverBudget`] when the total exceeds `limit`.
    pub fn check(&self, hp: &Hparams, limit: Option<u64>) -> Result<(), ModelError> {
        match limit {
            Some(limit) if self.total() > limit => Err(ModelError::OverBudget {
                what: format!(
                    "weights {} bytes + KV cache {} bytes for n_ctx {} x {} layers x n_embd {}",
                    self.weights, self.kv, self.n_ctx, hp.n_layer, hp.n_embd
                ),
                needed: self.total(),
                limit,
            }),
            _ => Ok(()),
        }
    }
}

/// Validates the header (architecture, hyperparameters, tokenizer, options, memory) before
/// handing it on to the buffer loader, so nothing is allocated for a file we would refuse.
struct CheckedSink {
    inner: BufferLoader,
    opts: Gpt2Options,
    alignment: usize,
    budget: Option<u64>,
    checked: Option<(Hparams, Tokenizer)>,
    /// n_layer once the header is checked, for a placement that goes by layer.
    n_layer: Rc<Cell<usize>>,
    estimate: Option<LoadEstimate>,
    /// Why the header was refused, kept typed for the caller.
    rejected: Option<ModelError>,
}

fn check_header(header: &GgufHeader) -> Result<(Hparams, Tokenizer), ModelError> {
    let hp = Hparams::from_gguf(header)?;
    let tok = tokenizer_from_gguf(header)?;
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
    fn check(&self, header: &GgufHeader) -> Result<(Hparams, Tokenizer, LoadEstimate), ModelError> {
        let (hp, tok) = check_header(header)?;
        let est = LoadEstimate::new(header, &hp, &self.opts, self.alignment)?;
        est.check(&hp, self.budget)?;
        Ok((hp, tok, est))
    }
}

impl TensorSink for CheckedSink {
    fn on_header(&mut self, header: &GgufHeader) -> Result<(), GgufError> {
        match self.check(header) {
            Ok((hp, tok, est)) => {
                self.n_layer.set(hp.n_layer);
                self.checked = Some((hp, tok));
                self.estimate = Some(est);
            }
            Err(e) => {
                let msg = e.to_string();
                self.rejected = Some(e);
                return Err(GgufError::new(crate::gguf::GgufErrorKind::Rejected(msg)));
            }
        }
        self.inner.on_header(header)
    }

    fn write(&mut self, tensor_index: usize, offset: usize, bytes: &[u8]) -> Result<(), GgufError> {
        self.inner.write(tensor_index, offset, bytes)
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
    pub fn new(backend: Rc<dyn Backend>, opts: Gpt2Options, limits: Limits, file_size: Option<u64>) -> ModelLoader {
        let buft: Rc<dyn BufferType> = backend.buffer_type();
        ModelLoader::with_sink(BufferLoader::new(buft), Rc::new(Cell::new(0)), vec![backend], opts, limits, file_size)
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
        ModelLoader::with_sink(place, n_layer, vec![gpu, cpu], opts, limits, file_size)
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
            checked: None,
            n_layer,
            estimate: None,
            rejected: None,
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

    /// The budget in force (None: unknown and not set).
    pub fn budget(&self) -> Option<u64> {
        self.sink.budget
    }

    /// Weights and KV bytes, once the header has been accepted.
    pub fn estimate(&self) -> Option<LoadEstimate> {
        self.sink.estimate
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
        let loaded = self.sink.inner.into_loaded(header)?;
        let model = Gpt2::with_backends(hparams, loaded.ctx, loaded.buffers, self.backends, &self.opts)?;
        Ok(LoadedModel { model, tokenizer })
    }
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
