//! `WasmLoader` (a GGUF stream in, a model out) and `WasmModel` (tokenizer, logits, and a
//! generation driven one step per call, so the JS side can yield and cancel between steps).
//!
//! ```ignore
//! const loader = await WasmLoader.create({ nCtx: 128 });
//! for await (const chunk of stream) loader.feed(chunk);
//! const model = loader.finish();
//! model.start(model.tokenize('Hello, my name is', false), { maxTokens: 20, temperature: 0 });
//! while (!(await model.prompt_step())) {}
//! for (let item; (item = await model.next());) out += item.text;
//! const { stop } = model.stats();
//! ```
//!
//! `WasmModel` is a thin shell over [`Session`] (crate/model/session.rs), which the CLI
//! drives too: options are `crate::common::options`' structs (strict: unknown keys fail),
//! everything crosses through serde-wasm-bindgen ([`from_js`], [`to_js`]), errors get their
//! codes here. Generation, step by step:
//! - `start(ids, params)` checks the ids and that the prompt fits the context (else an
//!   `invalid` error naming both sizes); the prompt cache reuses the longest prefix the
//!   KV cache already holds (the return value: how many tokens).
//! - `prompt_step()` evaluates the next `n_batch` prompt tokens; `true` once all are in.
//! - `next()` returns the next item `{ token, text, logprob?, top? }`, or `undefined` once
//!   the run is over: at the end-of-text token (not returned), after `maxTokens`, when the
//!   context is full (a prompt of P tokens in a context of n_ctx yields at most n_ctx - P),
//!   or at a stop string; `stats().stop` says which (`eos`, `maxTokens`, `contextFull`, `stop`).

use alloc::rc::Rc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use wasm_bindgen::prelude::*;

use super::{js_error, wasm_memory_bytes};
use crate::backend::{Backend, BackendError};
use crate::common::open_backends;
use crate::common::options::{self, GenerateParams, LoadOptions, GENERATE_WHAT, LOAD_WHAT};
use crate::gguf::Limits;
use crate::model::context::Gpt2;
use crate::model::loader::ModelLoader;
use crate::model::report::{ModelInfo, ModelSplit, WasmMemory};
use crate::model::session::{Interrupt, Session};
use crate::model::ModelError;
use crate::webgpu::{WebGpuBackend, WebGpuOptions};

use super::warmup::{WarmTypes, Warmup};

/// The GgwebError code for a model error: the file's fault, the caller's, or ours.
pub(super) fn model_error(context: &str, e: ModelError) -> JsValue {
    let code = match &e {
        ModelError::Backend(BackendError::DeviceLost(_)) => "device_lost",
        ModelError::Config(_)
        | ModelError::Invalid(_)
        | ModelError::ContextFull { .. }
        | ModelError::BadToken { .. } => "invalid",
        ModelError::Backend(_) => "internal",
        ModelError::Aborted => "aborted",
        // Too big for this device's memory: the page can pick a smaller model or context.
        ModelError::OverBudget { .. } | ModelError::RunTooLarge { .. } | ModelError::Unsupported(_) => "unsupported",
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

/// A JS `checkpoint()` (returning a boolean, or a Promise of one: true when the caller
/// stopped the call) as the session's [`Interrupt`]; one that throws or rejects stops it too.
pub(super) fn interrupt(checkpoint: Option<js_sys::Function>) -> Option<Interrupt> {
    let f = checkpoint?;
    Some(alloc::boxed::Box::new(move || {
        let r = f.call0(&JsValue::UNDEFINED);
        alloc::boxed::Box::pin(async move {
            match r.map(|v| v.dyn_into::<js_sys::Promise>()) {
                Ok(Ok(p)) => wasm_bindgen_futures::JsFuture::from(p).await.map_or(true, |v| v.is_truthy()),
                Ok(Err(v)) => v.is_truthy(),
                Err(_) => true,
            }
        })
    }))
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

/// A backend failure while opening a device: no adapter or device is `unsupported`.
pub(super) fn backend_error(what: &str, e: BackendError) -> JsValue {
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

/// An options struct of `crate::common::options` from a JS value (`undefined` and `null`:
/// no options). Through a JSON value first: serde-wasm-bindgen reads only a struct's own
/// fields, so an unknown key would pass unseen; this way it is refused by name.
pub(super) fn from_js<T: DeserializeOwned>(what: &str, v: JsValue) -> Result<T, JsValue> {
    let v: Value = serde_wasm_bindgen::from_value(v).map_err(|e| invalid(format!("{what}: {e}")))?;
    options::from_value(what, v).map_err(|e| model_error("", e))
}

/// A Rust value as JS data, the one way out: objects as plain objects (not `Map`s), None as
/// `null`, as JSON would have it.
pub(super) fn to_js<T: Serialize + ?Sized>(v: &T) -> JsValue {
    v.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).expect("plain data serializes")
}

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
    /// The kernel warm-up's state (`warm_up`).
    warm: Warm,
}

/// Where the kernel warm-up (crate/bindings/warmup.rs) stands.
enum Warm {
    /// Waiting for the header (the weight types).
    Waiting,
    Running(Box<Warmup>),
    /// Finished, failed, or nothing to warm (the model runs on WebGPU).
    Done,
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

impl WasmLoader {
    /// `feed` for bytes already in wasm memory (Rust callers, tests).
    pub fn feed_bytes(&mut self, bytes: &[u8]) -> Result<(), JsValue> {
        self.loader.feed(bytes).map_err(|e| model_error("", e))
    }

    /// A loader on `backends`: a CPU model is warmed up while it streams.
    fn on(b: crate::common::Backends, opts: &LoadOptions) -> WasmLoader {
        let placement = match (b.name, b.split) {
            ("cpu", _) => Placement::Cpu,
            (_, Some(n)) => Placement::Split(n),
            _ => Placement::Gpu,
        };
        WasmLoader {
            loader: b.loader(opts.model(), Limits::default(), None),
            backend: b.name,
            gpu: b.gpu,
            backend_note: b.note,
            placement,
            memory_at_start: wasm_memory_bytes(),
            scratch: Vec::new(),
            warm: if placement == Placement::Cpu { Warm::Waiting } else { Warm::Done },
        }
    }
}

/// The CPU backend of a load, with its `nThreads`.
fn cpu_of(opts: &LoadOptions) -> impl FnOnce() -> Rc<dyn Backend> {
    let n = opts.model().n_threads;
    move || super::bench::cpu_backend(n)
}

/// `LoadOptions` with every default filled in ([`LoadOptions::resolved`]): engine.js plans
/// with the values Rust will use. Unknown keys and bad values are `invalid`, as in
/// `WasmLoader.create`.
#[wasm_bindgen]
pub fn load_options(opts: JsValue) -> Result<JsValue, JsValue> {
    let o: LoadOptions = from_js(LOAD_WHAT, opts)?;
    Ok(to_js(&o.resolved()))
}

#[wasm_bindgen]
impl WasmLoader {
    /// `opts`: `{ nCtx?, nBatch?, backend?: "cpu" | "webgpu" | "auto", gpuLayers?, nThreads?,
    /// kvType?: "f32" | "f16" }` ([`LoadOptions`]; defaults: [`load_options`]). This
    /// constructor is synchronous, so it cannot open a WebGPU device: "auto" means the CPU
    /// here, and "webgpu" is refused (`unsupported`) in favour of `WasmLoader.create`.
    #[wasm_bindgen(constructor)]
    pub fn new(opts: JsValue) -> Result<WasmLoader, JsValue> {
        let mut o: LoadOptions = from_js(LOAD_WHAT, opts)?;
        if o.backend() == options::BackendChoice::WebGpu {
            return Err(js_error(
                "unsupported",
                "backend \"webgpu\" needs the asynchronous factory: await WasmLoader.create(options)",
            ));
        }
        o.backend = None;
        let b = crate::model::context::block_on(open_backends(&o, WebGpuOptions::default(), cpu_of(&o)))
            .map_err(|e| backend_error("backend \"cpu\"", e))?;
        Ok(Self::on(b, &o))
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
    pub async fn create(opts: JsValue) -> Result<WasmLoader, JsValue> {
        let o: LoadOptions = from_js(LOAD_WHAT, opts)?;
        let b = open_backends(&o, WebGpuOptions::default(), cpu_of(&o))
            .await
            .map_err(|e| backend_error("backend \"webgpu\"", e))?;
        if let Some(note) = &b.note {
            web_sys::console::warn_1(&JsValue::from_str(&format!("ggweb: {note}")));
        }
        Ok(Self::on(b, &o))
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

    /// One step (a few ms) of the kernel warm-up: a one-block model of this file's weight
    /// and KV types, run on the CPU so that V8 compiles the hot kernels with its top tier
    /// before the first prompt (crate/bindings/warmup.rs). Its own weights, KV cache and
    /// compute buffer: the model being loaded is never touched. engine.js calls it between
    /// chunks while it waits for the download. Returns 0 while the header has not arrived
    /// (nothing ran), 1 after a step with more to come, 2 once there is nothing more to do
    /// (done, or a WebGPU model). A failure only ends the warm-up (a console warning), never
    /// the load.
    pub fn warm_up(&mut self) -> u32 {
        if let Warm::Waiting = self.warm {
            let Some(h) = self.loader.header() else { return 0 };
            self.warm = match WarmTypes::from_header(h, self.loader.options().kv_type).map(Warmup::new) {
                Some(Ok(w)) => Warm::Running(Box::new(w)),
                Some(Err(e)) => {
                    web_sys::console::warn_1(&JsValue::from_str(&format!("ggweb: kernel warm-up skipped: {e}")));
                    Warm::Done
                }
                None => Warm::Done, // not GPT-2's tensor names: the load will say what is wrong
            };
        }
        let Warm::Running(w) = &mut self.warm else { return 2 };
        match w.step() {
            Ok(false) => 1,
            Ok(true) => {
                self.warm = Warm::Done;
                2
            }
            Err(e) => {
                web_sys::console::warn_1(&JsValue::from_str(&format!("ggweb: kernel warm-up stopped: {e}")));
                self.warm = Warm::Done;
                2
            }
        }
    }

    /// Checks that the stream was complete and builds the model (KV cache, compute buffer).
    /// Consumes the loader whatever the outcome.
    pub fn finish(mut self) -> Result<WasmModel, JsValue> {
        // The warm-up model's memory goes back before the real one's compute buffer is made.
        self.warm = Warm::Done;
        let mut loaded = self.loader.finish().map_err(|e| model_error("", e))?;
        let split = split_info(&mut loaded.model, self.placement)?;
        Ok(WasmModel {
            session: Session::new(loaded),
            backend: self.backend,
            gpu: self.gpu,
            backend_note: self.backend_note,
            split,
            memory_at_start: self.memory_at_start,
            memory_after_load: wasm_memory_bytes(),
        })
    }
}

/// Splits the graphs of one token and of a full batch (without running them) to report
/// the split, and refuses one that copies from device memory to the host: in the browser
/// a WebGPU buffer reads back only asynchronously, and the scheduler's copies are
/// synchronous. (GPT-2's splits only copy towards the GPU: its CPU part comes first.)
fn split_info(model: &mut Gpt2, placement: Placement) -> Result<ModelSplit, JsValue> {
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
    Ok(ModelSplit {
        gpu_layers,
        embeddings_on_gpu,
        backends: model.sched.backends().iter().map(|b| b.name().to_string()).collect(),
        splits,
        copies_per_token: copies,
        copy_bytes_per_token: copy_bytes,
        bytes_per_backend: model.memory_by_backend().iter().map(|m| (m.backend.clone(), m.into())).collect(),
    })
}

/// A loaded model: a [`Session`] (tokenizer, prompt cache, generation) and what `info()`
/// reports. Every call that evaluates goes through the session; this type only converts
/// arguments and results and maps errors to codes.
#[wasm_bindgen]
pub struct WasmModel {
    pub(super) session: Session,
    backend: &'static str,
    gpu: Option<WebGpuBackend>,
    backend_note: Option<String>,
    split: ModelSplit,
    memory_at_start: f64,
    memory_after_load: f64,
}

impl WasmModel {
    /// `device_lost` once the model's WebGPU device is gone: every call that computes fails
    /// alike from then on (the weights and the KV cache went with the device).
    fn check_device(&mut self, what: &str) -> Result<(), JsValue> {
        match self.gpu.as_ref().and_then(|g| g.lost_reason()) {
            Some(reason) => {
                self.session.end_generation();
                self.session.clear_cache();
                Err(device_lost(what, &reason))
            }
            None => Ok(()),
        }
    }

    /// The first id outside the vocabulary, as an error naming it and its index.
    fn check_ids(&self, what: &str, ids: &[u32]) -> Result<(), JsValue> {
        let n_vocab = self.session.model.hparams.n_vocab;
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
        let n_ctx = self.session.model.n_ctx();
        if n > n_ctx {
            return Err(model_error(what, ModelError::ContextFull { needed: n, n_ctx }));
        }
        Ok(())
    }

    /// The checks every evaluating call makes first, with its messages.
    pub(super) fn check_input(&mut self, what: &str, ids: &[u32]) -> Result<(), JsValue> {
        self.check_device("")?;
        self.check_fits(what, ids.len())?;
        self.check_ids(what, ids)
    }
}

#[wasm_bindgen]
impl WasmModel {
    /// Text → token ids (no BOS). `special`: parse special tokens such as `<|endoftext|>`.
    pub fn tokenize(&self, text: &str, special: bool) -> Vec<u32> {
        self.session.tokenizer.encode(text, special)
    }

    /// Token ids → text; bytes that are not UTF-8 become U+FFFD. An id outside the
    /// vocabulary is an `invalid` error naming it and its position.
    pub fn detokenize(&self, ids: &[u32]) -> Result<String, JsValue> {
        self.session.tokenizer.decode(ids).map_err(|e| invalid(e.to_string()))
    }

    /// Next-token logits after `ids` (`[n_vocab]` floats). Uses the prompt cache (the
    /// result equals a fresh evaluation's within float rounding) and leaves `ids` in it;
    /// ends any generation in progress.
    pub async fn logits(&mut self, ids: Vec<u32>) -> Result<Vec<f32>, JsValue> {
        self.check_input("", &ids)?;
        self.session.logits(&ids).await.map_err(|e| model_error("", e))
    }

    /// Begins a generation from `prompt_ids` with `params` ([`GenerateParams`]: `{ maxTokens,
    /// temperature, topK, topP, minP, seed, repeatPenalty, repeatLastN, topLogprobs, stop,
    /// logitBias, ignoreEos, reusePrompt, hooks, n, numBeams, lengthPenalty }`, all optional, unknown keys refused; no `seed`: a
    /// random one). Evaluates
    /// nothing yet; returns the prompt tokens the prompt cache will reuse (`stats.cachedTokens`).
    pub fn start(&mut self, prompt_ids: &[u32], params: JsValue) -> Result<u32, JsValue> {
        self.session.end_generation();
        self.check_device("")?;
        let mut p: GenerateParams = from_js(GENERATE_WHAT, params)?;
        // Without a seed, JS callers get a fresh one per call (the CLI's default, 0, repeats).
        p.seed.get_or_insert_with(|| (js_sys::Math::random() * 4294967296.0) as u64);
        let opts = p.resolve().map_err(|e| model_error("", e))?;
        self.check_fits("the prompt", prompt_ids.len())?;
        self.check_ids("the prompt", prompt_ids)?;
        let cached = self.session.start(prompt_ids.to_vec(), opts).map_err(|e| model_error("", e))?;
        Ok(cached as u32)
    }

    /// Evaluates the next chunk (`n_batch` tokens) of the prompt. Returns true once the
    /// whole prompt is in (then `next` may be called).
    pub async fn prompt_step(&mut self) -> Result<bool, JsValue> {
        self.check_device("")?;
        if !self.session.generating() {
            return Err(invalid("prompt_step: no generation was started (call start first)".into()));
        }
        self.session.prompt_step().await.map_err(|e| model_error("evaluating the prompt", e))
    }

    /// The next item, `{ token, text, logprob?, top?: [{ token, text, logprob }] }`, or
    /// `undefined` when the run is over (`stats().stop` says why). `text` is what the run
    /// releases with the token: whole characters (a character split across tokens comes out
    /// with the token that completes it), held back while it might begin a stop string, cut
    /// before one. `logprob` and `top` come with `topLogprobs` > 0; `seq` is the sequence the
    /// token continues (0..n-1; 0 with one sequence).
    pub async fn next(&mut self) -> Result<JsValue, JsValue> {
        self.check_device("")?;
        if !self.session.generating() {
            return Err(invalid("next: no generation was started (call start first)".into()));
        }
        let n = self.session.stats().tokens + 1;
        match self.session.next().await {
            Ok(Some(item)) => Ok(to_js(&item)),
            Ok(None) => Ok(JsValue::UNDEFINED),
            Err(e @ ModelError::Invalid(_)) => Err(model_error("", e)),
            Err(e) => Err(model_error(&format!("generating token {n}"), e)),
        }
    }

    /// `{ promptTokens, cachedTokens, tokens, stop, webgpu, beams? }` of the current or last
    /// run (`stop`: null while it runs; `webgpu`: its counters, null without a WebGPU backend;
    /// after a beam search (`numBeams`) `beams: [{ tokens: Uint32Array, score }]`, best first).
    pub fn stats(&self) -> JsValue {
        /// The session's stats, and the beams after a beam search.
        #[derive(Serialize)]
        struct Stats<'a> {
            #[serde(flatten)]
            stats: crate::model::session::GenerationStats,
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            beams: &'a [crate::model::session::Beam],
        }
        to_js(&Stats { stats: self.session.stats(), beams: self.session.beams() })
    }

    /// For tests of device loss: destroys this model's WebGPU device as a driver reset or
    /// the browser would. From then on `logits`, `start`, `prompt_step` and `next`
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
        self.session.model.n_ctx()
    }

    /// The end-of-text token id, or -1 if the model has none.
    pub fn eos(&self) -> i32 {
        self.session.tokenizer.eos().map_or(-1, |t| t as i32)
    }

    /// [`ModelInfo`] (crate/model/report.rs): hyperparameters, backend, memory plan, split,
    /// tokenizer, wasm memory (bytes; see `wasm_heap_base`, `wasm_memory_bytes`), backend note.
    pub fn info(&self) -> JsValue {
        let wasm_memory = WasmMemory {
            heap_base: super::wasm_heap_base(),
            at_loader_start: self.memory_at_start,
            after_load: self.memory_after_load,
            now: wasm_memory_bytes(),
        };
        let (model, tokenizer) = (&self.session.model, &self.session.tokenizer);
        let (split, note) = (self.split.clone(), self.backend_note.clone());
        to_js(&ModelInfo::new(model, tokenizer, self.backend, split, wasm_memory, note))
    }
}
