//! `WasmLoader` (a GGUF stream in, a model out) and `WasmModel` (tokenizer, logits, and a
//! generation driven one step per call, so the JS side can yield and cancel between steps).
//!
//! ```ignore
//! let mut loader = WasmLoader::new(r#"{"nCtx":128,"nBatch":32}"#)?;
//! for chunk in file.chunks(64 * 1024) { loader.feed_bytes(chunk)?; }   // JS: loader.feed(uint8array)
//! let mut model = loader.finish()?;
//! let ids = model.tokenize("Hello, my name is", false);
//! model.start(&ids, r#"{"maxTokens":20,"temperature":0}"#)?;
//! while !model.prompt_step()? {}
//! while let id @ 0.. = model.next_token()? { print!("{}", model.token_piece(id as u32)?); }
//! ```
//!
//! Generation, as a state machine:
//! - `start(ids, params)` checks the ids and that the prompt fits the context (else an
//!   `invalid` error naming both sizes), and resets the model's state: `n_past = 0`.
//! - `prompt_step()` evaluates the next `n_batch` prompt tokens; `true` once all are in.
//! - `next_token()` first evaluates the token it returned last time (lazily: the final token
//!   of a run is never evaluated for nothing), then samples from the last logits, with the
//!   prompt and the output so far as the repetition history. It returns -1, and the run is
//!   over, at the tokenizer's end-of-text token (not returned), after `maxTokens` tokens, or
//!   when the context is full: that ends the run cleanly rather than failing it, since the
//!   text so far is good; `stop_reason()` says which (`eos`, `maxTokens`, `contextFull`).
//!   A prompt of P tokens in a context of n_ctx thus yields at most n_ctx - P + 1 tokens.

use alloc::rc::Rc;

use serde_json::{Map, Value};
use wasm_bindgen::prelude::*;

use super::{js_error, wasm_memory_bytes};
use crate::backend::{Backend, BackendError};
use crate::cpu::CpuBackend;
use crate::gguf::Limits;
use crate::model::gpt2::{BackendMemory, Gpt2, Gpt2Options};
use crate::model::loader::ModelLoader;
use crate::model::sampling::{Sampler, SamplingParams};
use crate::model::ModelError;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::webgpu::{WebGpuBackend, WebGpuOptions};

/// The GgwebError code for a model error: the file's fault, the caller's, or ours.
fn model_error(context: &str, e: ModelError) -> JsValue {
    let code = match &e {
        ModelError::Backend(BackendError::DeviceLost(_)) => "device_lost",
        ModelError::Config(_) | ModelError::ContextFull { .. } | ModelError::BadToken { .. } => "invalid",
        ModelError::Backend(_) | ModelError::Cancelled => "internal",
        // Too big for this device's memory: the page can pick a smaller model or context.
        ModelError::OverBudget { .. } => "unsupported",
        ModelError::MissingTensor(_)
        | ModelError::BadShape { .. }
        | ModelError::Metadata(_)
        | ModelError::UnsupportedArch(_)
        | ModelError::Format(_)
        | ModelError::Tokenizer(_) => "format",
    };
    if context.is_empty() {
        js_error(code, e)
    } else {
        js_error(code, format!("{context}: {e}"))
    }
}

/// "what: ", or nothing for an empty `what`. Messages of calls that engine.js already
/// prefixes with the method's name (detokenize, logits) carry no prefix of their own.
fn prefix(what: &str) -> String {
    if what.is_empty() {
        String::new()
    } else {
        format!("{what}: ")
    }
}

/// A JSON object with its keys in the order given (serde_json's `Map` sorts them, and the
/// demo shows hparams and memory in this order). Values are JSON text already.
fn obj(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{v}", Value::from(*k))).collect();
    format!("{{{}}}", body.join(","))
}

/// A backend failure while opening a device: no adapter or device is `unsupported`.
fn backend_error(what: &str, e: BackendError) -> JsValue {
    let code = match e {
        BackendError::Unavailable(_) | BackendError::Unsupported { .. } => "unsupported",
        _ => "internal",
    };
    js_error(code, format!("{what}: {e}"))
}

/// What every call that needs the device answers once it is lost.
fn device_lost(what: &str, reason: &str) -> JsValue {
    js_error(
        "device_lost",
        format!(
            "{}the WebGPU device was lost ({reason}); this model cannot run any more: load it again \
             (backend \"auto\" picks a working device or the CPU)",
            prefix(what)
        ),
    )
}

fn invalid(message: String) -> JsValue {
    js_error("invalid", message)
}

/// Parses a JSON object of options, refusing unknown keys (a misspelt option would
/// otherwise be ignored without a word).
fn parse_object(what: &str, json: &str, known: &[&str]) -> Result<Map<String, Value>, JsValue> {
    let v: Value = serde_json::from_str(json).map_err(|e| invalid(format!("{what}: not valid JSON ({e})")))?;
    let Value::Object(map) = v else {
        return Err(invalid(format!("{what}: expected a JSON object, got {v}")));
    };
    if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(invalid(format!("{what}: unknown option {k:?} (known: {})", known.join(", "))));
    }
    Ok(map)
}

/// An integer option in `min..=max`, or None when absent or null.
fn opt_uint(map: &Map<String, Value>, what: &str, key: &str, min: u64, max: u64) -> Result<Option<u64>, JsValue> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(invalid(format!("{what}: {key} must be an integer from {min} to {max}, got {v}"))),
        },
    }
}

/// A finite number option in `min..=max` (`max` may be infinite: no upper bound), or None
/// when absent or null.
fn opt_num(map: &Map<String, Value>, what: &str, key: &str, min: f64, max: f64) -> Result<Option<f64>, JsValue> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x >= min && x <= max => Ok(Some(x)),
            _ if max.is_infinite() => Err(invalid(format!("{what}: {key} must be a finite number >= {min}, got {v}"))),
            _ => Err(invalid(format!("{what}: {key} must be a number from {min} to {max}, got {v}"))),
        },
    }
}

/// The most CPU threads a loader accepts (`nThreads`): more Web Workers than this only
/// add start-up time and memory.
const MAX_THREADS: u64 = 64;

/// Streams a GGUF file into a model: `feed` each chunk as it arrives (any size, even one
/// byte), then `finish`. Weights are copied into their buffers as they pass; the file is
/// never held whole.
#[wasm_bindgen]
pub struct WasmLoader {
    loader: ModelLoader,
    backend: &'static str,
    /// The WebGPU backend, when the model runs on one (device-loss checks, `_debugLoseDevice`).
    gpu: Option<WebGpuBackend>,
    /// Why `backend` is not the one asked for ("auto" without a WebGPU adapter), for `info()`.
    backend_note: Option<String>,
    placement: Placement,
    /// `wasm_memory_bytes()` when this loader was made, for the memory report in `info()`.
    memory_at_start: f64,
    /// Where `feed` copies each piece of a JS chunk.
    scratch: Vec<u8>,
}

/// Where the weights go.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Placement {
    /// All on the CPU.
    Cpu,
    /// All on WebGPU, the only backend (no `gpuLayers` given).
    Gpu,
    /// `gpuLayers`: the last N blocks on WebGPU, the rest on the CPU, run by the scheduler.
    Split(usize),
}

/// How the model is split, for `info().split`: measured on the graph of one token.
struct SplitInfo {
    /// Blocks on the GPU (0..=n_layer).
    gpu_layers: usize,
    embeddings_on_gpu: bool,
    backends: Vec<String>,
    splits: usize,
    copies: usize,
    copy_bytes: usize,
    by_backend: Vec<BackendMemory>,
}

impl WasmLoader {
    /// `feed` for bytes already in wasm memory (Rust callers, tests).
    pub fn feed_bytes(&mut self, bytes: &[u8]) -> Result<(), JsValue> {
        self.loader.feed(bytes).map_err(|e| model_error("", e))
    }

    /// Checks `opts_json`; returns the backend asked for ("cpu", "webgpu" or "auto"), the
    /// GPU layers asked for (None: not given; -1 is `usize::MAX`, everything) and the model
    /// options.
    fn parse_options(opts_json: &str) -> Result<(&'static str, Option<usize>, Gpt2Options), JsValue> {
        const WHAT: &str = "WasmLoader options";
        let map = parse_object(WHAT, opts_json, &["nCtx", "nBatch", "backend", "gpuLayers", "nThreads"])?;
        let backend = match map.get("backend") {
            None | Some(Value::Null) => "cpu",
            Some(Value::String(s)) if s == "cpu" => "cpu",
            Some(Value::String(s)) if s == "webgpu" => "webgpu",
            Some(Value::String(s)) if s == "auto" => "auto",
            Some(v) => {
                return Err(invalid(format!("{WHAT}: backend must be \"cpu\", \"webgpu\" or \"auto\", got {v}")))
            }
        };
        let limit = u32::MAX as u64;
        let n_ctx = opt_uint(&map, WHAT, "nCtx", 1, limit)?.unwrap_or(0) as usize;
        let n_batch = opt_uint(&map, WHAT, "nBatch", 1, limit)?.unwrap_or(Gpt2Options::default().n_batch as u64);
        // -1 means everything, as any count above n_layer does (the embeddings too).
        let gpu_layers = match map.get("gpuLayers") {
            None | Some(Value::Null) => None,
            Some(v) => match (v.as_i64(), v.as_u64()) {
                (Some(-1), _) => Some(usize::MAX),
                (_, Some(n)) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => return Err(invalid(format!("{WHAT}: gpuLayers must be an integer >= -1, got {v}"))),
            },
        };
        // Threads of the CPU backend; more than 1 only does anything in the threaded build.
        let n_threads = opt_uint(&map, WHAT, "nThreads", 1, MAX_THREADS)?.unwrap_or(1) as usize;
        Ok((backend, gpu_layers, Gpt2Options { n_ctx, n_batch: n_batch as usize, n_threads }))
    }

    fn with_backend(
        backend: Rc<dyn Backend>,
        name: &'static str,
        note: Option<String>,
        opts: Gpt2Options,
    ) -> WasmLoader {
        let placement = if name == "cpu" { Placement::Cpu } else { Placement::Gpu };
        Self::with_loader(ModelLoader::new(backend, opts, Limits::default(), None), name, note, placement)
    }

    fn with_loader(loader: ModelLoader, name: &'static str, note: Option<String>, placement: Placement) -> WasmLoader {
        WasmLoader {
            loader,
            backend: name,
            gpu: None,
            backend_note: note,
            placement,
            memory_at_start: wasm_memory_bytes(),
            scratch: Vec::new(),
        }
    }

    /// The last `gpu_layers` blocks on `gpu`, the rest on the CPU ([`ModelLoader::new_split`]).
    fn split(gpu: Rc<dyn Backend>, gpu_layers: usize, opts: Gpt2Options) -> WasmLoader {
        let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new(opts.n_threads));
        let loader = ModelLoader::new_split(gpu, cpu, gpu_layers, opts, Limits::default(), None);
        Self::with_loader(loader, "webgpu", None, Placement::Split(gpu_layers))
    }
}

#[wasm_bindgen]
impl WasmLoader {
    /// `opts_json`: `{ nCtx?, nBatch?, backend?: "cpu" | "webgpu" | "auto", gpuLayers?, nThreads? }`
    /// (engine.js's loaderOptions). nCtx defaults to the model's context length, nBatch to
    /// 32. This constructor is synchronous, so it cannot open a WebGPU device: "auto" means
    /// the CPU here, and "webgpu" is refused (`unsupported`) in favour of `WasmLoader.create`.
    #[wasm_bindgen(constructor)]
    pub fn new(opts_json: &str) -> Result<WasmLoader, JsValue> {
        let (asked, _, opts) = Self::parse_options(opts_json)?;
        if asked == "webgpu" {
            return Err(js_error(
                "unsupported",
                "backend \"webgpu\" needs the asynchronous factory: await WasmLoader.create(options)",
            ));
        }
        Ok(Self::with_backend(Rc::new(CpuBackend::new(opts.n_threads)), "cpu", None, opts))
    }

    /// The asynchronous factory (a Promise of a loader): the same options as the
    /// constructor, and it opens a WebGPU device for "webgpu" and "auto". Without an adapter
    /// "webgpu" fails (`unsupported`, with the reason) and "auto" falls back to the CPU,
    /// saying why on the console and in `info().backendNote`.
    ///
    /// `gpuLayers: N` (with "webgpu" or "auto") splits the model: blocks n_layer-N ..
    /// n_layer-1 and the head on WebGPU, the rest (and the embeddings unless N > n_layer;
    /// -1 means everything) on the CPU, each layer's KV cache with its weights. Without it
    /// the whole model is on WebGPU alone. The CPU backend ignores it.
    pub async fn create(opts_json: String) -> Result<WasmLoader, JsValue> {
        let (asked, gpu_layers, opts) = Self::parse_options(&opts_json)?;
        if asked == "cpu" {
            return Ok(Self::with_backend(Rc::new(CpuBackend::new(opts.n_threads)), "cpu", None, opts));
        }
        match WebGpuBackend::new_async(WebGpuOptions::default()).await {
            Ok(gpu) => {
                let mut l = match gpu_layers {
                    Some(n) => Self::split(Rc::new(gpu.clone()), n, opts),
                    None => Self::with_backend(Rc::new(gpu.clone()), "webgpu", None, opts),
                };
                l.gpu = Some(gpu);
                Ok(l)
            }
            Err(e) if asked == "auto" => {
                let note = format!("backend \"auto\": WebGPU is not usable ({e}); running on the CPU");
                web_sys::console::warn_1(&JsValue::from_str(&format!("ggweb: {note}")));
                Ok(Self::with_backend(Rc::new(CpuBackend::new(opts.n_threads)), "cpu", Some(note), opts))
            }
            Err(e) => Err(backend_error("backend \"webgpu\"", e)),
        }
    }

    /// Takes the next chunk, read out of the JS array in pieces of at most 64 KiB: a
    /// `&[u8]` parameter would make the glue copy the whole chunk (fetch hands out up to
    /// 2 MiB at once) into a temporary wasm allocation first. Errors (code `format`) name
    /// the byte offset and the key or tensor involved; after one, every later call repeats it.
    pub fn feed(&mut self, chunk: &js_sys::Uint8Array) -> Result<(), JsValue> {
        const PIECE: u32 = 64 * 1024;
        let len = chunk.length();
        if len == 0 {
            return Ok(());
        }
        let mut scratch = core::mem::take(&mut self.scratch);
        scratch.resize(PIECE.min(len) as usize, 0);
        let mut off = 0;
        let mut result = Ok(());
        while off < len && result.is_ok() {
            let n = PIECE.min(len - off);
            chunk.subarray(off, off + n).copy_to(&mut scratch[..n as usize]);
            result = self.feed_bytes(&scratch[..n as usize]);
            off += n;
        }
        self.scratch = scratch;
        result
    }

    /// Bytes fed so far.
    pub fn bytes_consumed(&self) -> f64 {
        self.loader.bytes_consumed() as f64
    }

    /// The file's size as its header describes it (end of the last tensor), or -1 until the
    /// header has arrived.
    pub fn total_expected(&self) -> f64 {
        self.loader.total_expected().map_or(-1.0, |n| n as f64)
    }

    /// Checks that the stream was complete and builds the model (KV cache, compute buffer).
    /// Consumes the loader whatever the outcome.
    pub fn finish(self) -> Result<WasmModel, JsValue> {
        let mut loaded = self.loader.finish().map_err(|e| model_error("", e))?;
        let split = split_info(&mut loaded.model, self.placement)?;
        Ok(WasmModel {
            model: loaded.model,
            tokenizer: loaded.tokenizer,
            backend: self.backend,
            gpu: self.gpu,
            backend_note: self.backend_note,
            split,
            memory_at_start: self.memory_at_start,
            memory_after_load: wasm_memory_bytes(),
            gen: None,
        })
    }
}

/// Splits the graphs of one token and of a full batch (without running them) to report
/// the split, and refuses one that copies from device memory to the host: in the browser
/// a WebGPU buffer reads back only asynchronously, and the scheduler's copies are
/// synchronous. (GPT-2's splits only copy towards the GPU: its CPU part comes first.)
fn split_info(model: &mut Gpt2, placement: Placement) -> Result<SplitInfo, JsValue> {
    let n_layer = model.hparams.n_layer;
    let what = |n: usize| format!("planning the split of a {n}-token graph");
    let mut plans = Vec::new();
    for n in [1, model.n_batch] {
        model.plan_split(0, n).map_err(|e| model_error(&what(n), e))?;
        let sched = &model.sched;
        for c in sched.copies() {
            let from = sched.assignment(&c.src).map_or(sched.n_backends() - 1, |a| a.backend);
            let (src_buft, dst_buft) = (sched.backend(from).buffer_type(), sched.backend(c.backend).buffer_type());
            if !src_buft.is_host() && dst_buft.is_host() {
                return Err(js_error(
                    "unsupported",
                    format!(
                        "{}: '{}' would be copied from {} to {} memory, a synchronous read of device \
                         memory the browser cannot do; choose another gpuLayers",
                        what(n),
                        c.src.name(),
                        sched.backend(from).name(),
                        sched.backend(c.backend).name()
                    ),
                ));
            }
        }
        let (copies, copy_bytes) = sched.copies_per_run();
        plans.push((sched.splits().len(), copies, copy_bytes));
    }
    let (gpu_layers, embeddings_on_gpu) = match placement {
        Placement::Cpu => (0, false),
        Placement::Gpu => (n_layer, true),
        Placement::Split(n) => (n.min(n_layer), n > n_layer),
    };
    let (splits, copies, copy_bytes) = plans[0];
    Ok(SplitInfo {
        gpu_layers,
        embeddings_on_gpu,
        backends: model.sched.backends().iter().map(|b| b.name().to_string()).collect(),
        splits,
        copies,
        copy_bytes,
        by_backend: model.memory_by_backend(),
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stop {
    Eos,
    MaxTokens,
    ContextFull,
}

impl Stop {
    fn as_str(self) -> &'static str {
        match self {
            Stop::Eos => "eos",
            Stop::MaxTokens => "maxTokens",
            Stop::ContextFull => "contextFull",
        }
    }
}

/// One run of `start` / `prompt_step` / `next_token`.
struct Generation {
    prompt: Vec<u32>,
    /// Prompt tokens evaluated so far.
    n_prompt_done: usize,
    /// Positions in the KV cache.
    n_past: usize,
    /// Next-token logits after the last evaluated position.
    logits: Vec<f32>,
    /// Prompt and output, for the repetition penalty.
    history: Vec<u32>,
    /// The token returned last, not yet evaluated.
    pending: Option<u32>,
    sampler: Sampler,
    max_tokens: usize,
    n_generated: usize,
    stop: Option<Stop>,
    decoder: StreamDecoder,
    /// Whether `pending` already went through `decoder` (token_piece called for it).
    pending_decoded: bool,
}

/// A loaded model: tokenizer, next-token logits, and step-wise generation.
#[wasm_bindgen]
pub struct WasmModel {
    model: Gpt2,
    tokenizer: Tokenizer,
    backend: &'static str,
    gpu: Option<WebGpuBackend>,
    backend_note: Option<String>,
    split: SplitInfo,
    memory_at_start: f64,
    memory_after_load: f64,
    gen: Option<Generation>,
}

impl WasmModel {
    fn split_json(&self) -> String {
        let s = &self.split;
        let n = |x: usize| x.to_string();
        let by: Vec<(&str, String)> = s
            .by_backend
            .iter()
            .map(|m| {
                (m.backend.as_str(), obj(&[("weights", n(m.weights)), ("kv", n(m.kv)), ("compute", n(m.compute))]))
            })
            .collect();
        obj(&[
            ("gpuLayers", n(s.gpu_layers)),
            ("embeddingsOnGpu", s.embeddings_on_gpu.to_string()),
            ("backends", Value::from(s.backends.clone()).to_string()),
            ("splits", n(s.splits)),
            ("copiesPerToken", n(s.copies)),
            ("copyBytesPerToken", n(s.copy_bytes)),
            ("bytesPerBackend", obj(&by)),
        ])
    }

    /// `device_lost` once the model's WebGPU device is gone: every call that computes fails
    /// alike from then on (the weights and the KV cache went with the device).
    fn check_device(&mut self, what: &str) -> Result<(), JsValue> {
        match self.gpu.as_ref().and_then(|g| g.lost_reason()) {
            Some(reason) => {
                self.gen = None;
                Err(device_lost(what, &reason))
            }
            None => Ok(()),
        }
    }

    /// The first id outside the vocabulary, as an error naming it and its index.
    fn check_ids(&self, what: &str, ids: &[u32]) -> Result<(), JsValue> {
        let n_vocab = self.model.hparams.n_vocab;
        match ids.iter().position(|&t| t as usize >= n_vocab) {
            Some(i) => Err(invalid(format!(
                "{}token id {} at index {i} is outside the vocabulary (n_vocab {n_vocab})",
                prefix(what),
                ids[i]
            ))),
            None => Ok(()),
        }
    }

    fn check_fits(&self, what: &str, n: usize) -> Result<(), JsValue> {
        if n == 0 {
            return Err(invalid(format!("{}needs at least one token id", prefix(what))));
        }
        let n_ctx = self.model.n_ctx();
        if n > n_ctx {
            return Err(model_error(what, ModelError::ContextFull { needed: n, n_ctx }));
        }
        Ok(())
    }

    async fn eval(&mut self, what: &str, tokens: &[u32], n_past: usize) -> Result<Vec<f32>, JsValue> {
        self.model.eval_async(tokens, n_past, false).await.map_err(|e| model_error(what, e))
    }
}

#[wasm_bindgen]
impl WasmModel {
    /// Text → token ids (no BOS). `special`: parse special tokens such as `<|endoftext|>`.
    pub fn tokenize(&self, text: &str, special: bool) -> Vec<u32> {
        self.tokenizer.encode(text, special)
    }

    /// Token ids → text; bytes that are not UTF-8 become U+FFFD. An id outside the
    /// vocabulary is an `invalid` error naming it and its position.
    pub fn detokenize(&self, ids: &[u32]) -> Result<String, JsValue> {
        self.tokenizer.decode(ids).map_err(|e| invalid(e.to_string()))
    }

    /// Next-token logits after `ids`, evaluated from position 0 (a fresh state; any
    /// generation in progress is ended). `[n_vocab]` floats.
    pub async fn logits(&mut self, ids: Vec<u32>) -> Result<Vec<f32>, JsValue> {
        self.gen = None;
        self.check_device("")?;
        self.check_fits("", ids.len())?;
        self.check_ids("", &ids)?;
        self.model.eval_prompt_async(&ids, 0, false).await.map_err(|e| model_error("", e))
    }

    /// Begins a generation from `prompt_ids` with sampling `params_json`:
    /// `{ maxTokens, temperature, topK, topP, seed, repeatPenalty, repeatLastN }` (all
    /// optional; engine.js's generateParams). Evaluates nothing yet.
    pub fn start(&mut self, prompt_ids: &[u32], params_json: &str) -> Result<(), JsValue> {
        const WHAT: &str = "generation options";
        self.gen = None;
        self.check_device("")?;
        let map = parse_object(
            WHAT,
            params_json,
            &["maxTokens", "temperature", "topK", "topP", "seed", "repeatPenalty", "repeatLastN"],
        )?;
        let d = SamplingParams::default();
        let max = u32::MAX as u64;
        let repeat_penalty = opt_num(&map, WHAT, "repeatPenalty", 0.0, f64::INFINITY)?;
        if repeat_penalty == Some(0.0) {
            // It divides positive logits.
            return Err(invalid(format!("{WHAT}: repeatPenalty must be greater than 0 (1 disables it), got 0")));
        }
        let params = SamplingParams {
            temperature: opt_num(&map, WHAT, "temperature", 0.0, f64::INFINITY)?.map_or(d.temperature, |x| x as f32),
            top_k: opt_uint(&map, WHAT, "topK", 0, max)?.map_or(d.top_k, |n| n as usize),
            top_p: opt_num(&map, WHAT, "topP", 0.0, 1.0)?.map_or(d.top_p, |x| x as f32),
            repeat_penalty: repeat_penalty.map_or(d.repeat_penalty, |x| x as f32),
            repeat_last_n: opt_uint(&map, WHAT, "repeatLastN", 0, max)?.map_or(d.repeat_last_n, |n| n as usize),
            seed: opt_uint(&map, WHAT, "seed", 0, u64::MAX)?.unwrap_or(d.seed),
        };
        let max_tokens = opt_uint(&map, WHAT, "maxTokens", 0, max)?.unwrap_or(128) as usize;
        self.check_fits("the prompt", prompt_ids.len())?;
        self.check_ids("the prompt", prompt_ids)?;
        self.gen = Some(Generation {
            prompt: prompt_ids.to_vec(),
            n_prompt_done: 0,
            n_past: 0,
            logits: Vec::new(),
            history: prompt_ids.to_vec(),
            pending: None,
            sampler: Sampler::new(params),
            max_tokens,
            n_generated: 0,
            stop: None,
            decoder: StreamDecoder::new(),
            pending_decoded: false,
        });
        Ok(())
    }

    /// Evaluates the next chunk (`n_batch` tokens) of the prompt. Returns true once the
    /// whole prompt is in (then `next_token` may be called).
    pub async fn prompt_step(&mut self) -> Result<bool, JsValue> {
        self.check_device("")?;
        let n_batch = self.model.n_batch;
        let Some(g) = self.gen.as_mut() else {
            return Err(invalid("prompt_step: no generation was started (call start first)".into()));
        };
        if g.n_prompt_done == g.prompt.len() {
            return Ok(true);
        }
        let from = g.n_prompt_done;
        let to = (from + n_batch).min(g.prompt.len());
        let chunk = g.prompt[from..to].to_vec();
        let what = format!("evaluating prompt tokens {from}..{to} of {}", g.prompt.len());
        let logits = match self.eval(&what, &chunk, from).await {
            Ok(l) => l,
            Err(e) => {
                self.gen = None;
                return Err(e);
            }
        };
        let g = self.gen.as_mut().expect("generation present");
        g.logits = logits;
        g.n_prompt_done = to;
        g.n_past = to;
        Ok(to == g.prompt.len())
    }

    /// The next token id, or -1 when the run is over (see `stop_reason`).
    pub async fn next_token(&mut self) -> Result<i32, JsValue> {
        self.check_device("")?;
        let n_ctx = self.model.n_ctx();
        let eos = self.tokenizer.eos();
        let Some(g) = self.gen.as_mut() else {
            return Err(invalid("next_token: no generation was started (call start first)".into()));
        };
        if g.n_prompt_done < g.prompt.len() {
            return Err(invalid(format!(
                "next_token: the prompt is not evaluated yet ({} of {} tokens; call prompt_step until it returns true)",
                g.n_prompt_done,
                g.prompt.len()
            )));
        }
        if g.stop.is_some() {
            return Ok(-1);
        }
        if g.n_generated >= g.max_tokens {
            g.stop = Some(Stop::MaxTokens);
            return Ok(-1);
        }
        if let Some(t) = g.pending {
            if g.n_past >= n_ctx {
                g.stop = Some(Stop::ContextFull);
                return Ok(-1);
            }
            let n_past = g.n_past;
            let what = format!("evaluating generated token {t} at position {n_past}");
            let logits = match self.eval(&what, &[t], n_past).await {
                Ok(l) => l,
                Err(e) => {
                    self.gen = None;
                    return Err(e);
                }
            };
            let g = self.gen.as_mut().expect("generation present");
            g.logits = logits;
            g.n_past += 1;
            g.pending = None;
        }
        let g = self.gen.as_mut().expect("generation present");
        let t = g.sampler.sample(&g.logits, &g.history);
        if Some(t) == eos {
            g.stop = Some(Stop::Eos);
            return Ok(-1);
        }
        g.history.push(t);
        g.pending = Some(t);
        g.pending_decoded = false;
        g.n_generated += 1;
        Ok(t as i32)
    }

    /// Why the current run ended (`eos`, `maxTokens`, `contextFull`), or `undefined`
    /// while it runs or when none was started.
    pub fn stop_reason(&self) -> Option<String> {
        self.gen.as_ref().and_then(|g| g.stop).map(|s| s.as_str().to_string())
    }

    /// Text of token `id`. For the token `next_token` just returned, it goes through the
    /// run's stream decoder: a character split across tokens comes out whole, with the token
    /// that completes it (an incomplete one at the very end of a run is dropped). Any other
    /// id is decoded on its own (lossy).
    pub fn token_piece(&mut self, id: u32) -> Result<String, JsValue> {
        if let Some(g) = self.gen.as_mut() {
            if g.pending == Some(id) && !g.pending_decoded {
                g.pending_decoded = true;
                return g.decoder.push(&self.tokenizer, id).map_err(|e| invalid(format!("token_piece: {e}")));
            }
        }
        let bytes = self.tokenizer.token_bytes(id).ok_or_else(|| {
            invalid(format!(
                "token_piece: token id {id} is outside the vocabulary (n_vocab {})",
                self.tokenizer.n_vocab()
            ))
        })?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// For tests of device loss: destroys this model's WebGPU device as a driver reset or
    /// the browser would. From then on `logits`, `start`, `prompt_step` and `next_token`
    /// fail with code `device_lost`. On the CPU backend it is an `unsupported` error.
    #[wasm_bindgen(js_name = _debugLoseDevice)]
    pub fn debug_lose_device(&self) -> Result<(), JsValue> {
        match &self.gpu {
            Some(g) => {
                g.destroy_device();
                Ok(())
            }
            None => Err(js_error(
                "unsupported",
                format!("the model runs on the {} backend, which has no device to lose", self.backend),
            )),
        }
    }

    /// Context length in tokens.
    pub fn n_ctx(&self) -> usize {
        self.model.n_ctx()
    }

    /// The end-of-text token id, or -1 if the model has none.
    pub fn eos(&self) -> i32 {
        self.tokenizer.eos().map_or(-1, |t| t as i32)
    }

    /// JSON: `{ arch, hparams, backend, memory: { weights, kv, compute }, split, tokenizer,
    /// wasmMemory: { heapBase, atLoaderStart, afterLoad, now }, backendNote }` (bytes; see
    /// `wasm_heap_base`, `wasm_memory_bytes`). `split`: `{ gpuLayers, embeddingsOnGpu,
    /// backends, splits, copiesPerToken, copyBytesPerToken, bytesPerBackend: { [name]:
    /// { weights, kv, compute } } }`, the splits and copies of the graph of one token.
    pub fn info(&self) -> String {
        let hp = &self.model.hparams;
        let plan = self.model.memory_plan();
        let n = |x: usize| x.to_string();
        let id = |t: Option<u32>| t.map_or("null".to_string(), |t| t.to_string());
        obj(&[
            ("arch", "\"gpt2\"".into()),
            (
                "hparams",
                obj(&[
                    ("n_vocab", n(hp.n_vocab)),
                    ("n_ctx", n(self.model.n_ctx())),
                    ("n_ctx_train", n(hp.n_ctx_train)),
                    ("n_embd", n(hp.n_embd)),
                    ("n_head", n(hp.n_head)),
                    ("n_layer", n(hp.n_layer)),
                    ("n_ff", n(hp.n_ff)),
                    ("n_batch", n(self.model.n_batch)),
                    // f32's shortest form (1e-5 prints as 0.00001, not 0.000009999999747).
                    ("eps", format!("{}", hp.eps)),
                ]),
            ),
            ("backend", Value::from(self.backend).to_string()),
            ("memory", obj(&[("weights", n(plan.weights)), ("kv", n(plan.kv)), ("compute", n(plan.compute))])),
            ("split", self.split_json()),
            (
                "tokenizer",
                obj(&[
                    ("n_vocab", n(self.tokenizer.n_vocab())),
                    ("bos", id(self.tokenizer.bos())),
                    ("eos", id(self.tokenizer.eos())),
                ]),
            ),
            (
                "wasmMemory",
                obj(&[
                    ("heapBase", super::wasm_heap_base().to_string()),
                    ("atLoaderStart", self.memory_at_start.to_string()),
                    ("afterLoad", self.memory_after_load.to_string()),
                    ("now", wasm_memory_bytes().to_string()),
                ]),
            ),
            ("backendNote", self.backend_note.as_deref().map_or("null".to_string(), |n| Value::from(n).to_string())),
        ])
    }
}
