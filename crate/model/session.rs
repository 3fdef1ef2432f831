//! The session core: tokenize → prompt-cache reuse → prompt in batches → sample / stop →
//! stream, in one place. The CLI (crate/bin/run.rs) and the JS bindings
//! (crate/bindings/model.rs) both drive a [`Session`]; the only difference between them is
//! how a future is driven: the bindings await it on the JS event loop (WebGPU memory reads
//! back asynchronously in the browser, [`Backend::tensor_get_async`](crate::backend::Backend::tensor_get_async)),
//! the CLI runs it to completion with [`block_on`](super::context::block_on). Every run goes
//! through the model context's one forward pass, [`Gpt2::decode`].
//!
//! ```no_run
//! # fn main() -> Result<(), ggweb::model::ModelError> {
//! use ggweb::model::context::{block_on, Gpt2Options};
//! use ggweb::model::loader::load_from_path;
//! use ggweb::model::session::{GenerateOptions, Session};
//! let backend = std::rc::Rc::new(ggweb::cpu::CpuBackend::new(1));
//! let mut s = Session::new(load_from_path("tiny.gguf", backend, Gpt2Options::default())?);
//! let ids = s.tokenizer.encode("Hello", false);
//! s.start(ids, GenerateOptions::default())?;
//! while !block_on(s.prompt_step())? {}
//! while let Some(item) = block_on(s.next())? { print!("{}", item.text); }
//! # Ok(()) }
//! ```
//!
//! **Prompt cache.** The KV cache outlives each call. [`Session::cached`] lists the tokens
//! whose K and V it holds (positions `0..len`): a new `start`, `score` or `logits` reuses
//! the longest common prefix of its tokens with them, as llama.cpp's `cache_prompt` does, and
//! evaluates only the rest, when the cache was computed under the same hooks (`start`'s and
//! `score`'s interventions; none for `logits`). At least the last token of a prompt is always
//! evaluated (its logits are needed). `score` also keeps the rows it computed, so a rescore of a text that
//! shares a prefix evaluates only from where they differ. `trace` always starts at position 0
//! (its attention covers every key) and leaves its tokens in the cache.
//!
//! **Generation** yields at most `n_ctx - prompt` tokens (prompt and output always fit the
//! context, so the whole text can be scored afterwards); it ends at the end-of-text token
//! (not yielded; banned instead with `ignore_eos`), after `max_tokens`, when the context is
//! full, or at a stop string (the text before it is yielded, the stop string is not).

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::future::Future;
use core::pin::Pin;

use super::context::{Batch, Chunk, Gpt2, Logits, SeqPos, TapValue};
use super::hooks::Hook;
use super::logprobs::RowStats;
use super::sampling::{Sampler, SamplingParams};
use super::stop::StopHold;
use super::ModelError;
use crate::backend::BackendStats;
use crate::model::loader::LoadedModel;
use crate::tokenizer::{StreamDecoder, Tokenizer};

/// Options of one generation (the JS `generate` options, the CLI's flags).
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Added to a token's logit before sampling; `-inf` bans it.
    pub logit_bias: Vec<(u32, f32)>,
    /// Bans the end-of-text token, so only `max_tokens` or the context end the run.
    pub ignore_eos: bool,
    pub stop: Vec<String>,
    /// Each item also carries its logprob and the k most likely tokens (0 = off).
    pub top_logprobs: usize,
    /// Reuse the KV cache's longest common prefix with the prompt (the prompt cache; JS
    /// `reusePrompt`, default true). False evaluates the whole prompt from position 0.
    pub reuse_prompt: bool,
    /// Sequences sampled from the one prompt (1 = one; at most 64): sequence `i` samples
    /// with seed `seed + i` (wrapping) and equals a one-sequence run with that seed. All
    /// live sequences' tokens are evaluated as one batch per step.
    pub n: usize,
    /// Beam search with this many beams (0 or 1 = off): Hugging Face's `generate(num_beams=k,
    /// do_sample=False, early_stopping=False)`; sampling options are not used.
    pub num_beams: usize,
    /// Beam search: a finished beam's score is its summed logprob / generated_len^length_penalty.
    pub length_penalty: f32,
    /// Interventions at TransformerLens's hook points, applied at every evaluated position
    /// (prompt and each new token) before K and V enter the cache; no `pos` here. The prompt
    /// cache is reused only under the same hooks.
    /// With `n` or `numBeams` above 1: refused (hooks take one sequence).
    pub hooks: Vec<Hook>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 128,
            sampling: SamplingParams::default(),
            logit_bias: Vec::new(),
            ignore_eos: false,
            stop: Vec::new(),
            top_logprobs: 0,
            reuse_prompt: true,
            n: 1,
            num_beams: 0,
            length_penalty: 1.0,
            hooks: Vec::new(),
        }
    }
}

/// Why a generation ended (serialized as [`StopReason::as_str`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StopReason {
    Eos,
    MaxTokens,
    ContextFull,
    Stop,
}

impl StopReason {
    /// The JS `stats.stop` value.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::MaxTokens => "maxTokens",
            StopReason::ContextFull => "contextFull",
            StopReason::Stop => "stop",
        }
    }
}

#[cfg(feature = "std")]
impl serde::Serialize for StopReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

// ts: export TopToken
/// One of the most likely tokens at a step.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct TopToken {
    pub token: u32,
    /// The token's own bytes, lossy (a piece of a character shows as U+FFFD).
    pub text: String,
    pub logprob: f32,
}

// ts: export Item
/// One generated token; serializes as the API's item `{ seq, token, text, logprob?, top? }`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Item {
    /// The sequence (0..n-1) this token continues: always there, 0 with one sequence and
    /// in beam search, so `texts[t.seq] += t.text` needs no check.
    pub seq: usize,
    pub token: u32,
    /// Text released with this token: whole characters only; may be empty.
    pub text: String,
    /// With `top_logprobs > 0`: ln softmax of the raw logits (before temperature,
    /// penalties or bias) at this token.
    #[cfg_attr(feature = "std", serde(skip_serializing_if = "Option::is_none"))]
    pub logprob: Option<f32>,
    /// With `top_logprobs > 0` (and only then not empty).
    #[cfg_attr(feature = "std", serde(skip_serializing_if = "Vec::is_empty"))]
    pub top: Vec<TopToken>,
}

// ts: export GenerationStats
/// Counters of the current (or last) generation (the wasm side's `stats()`: camelCase, `stop`
/// null while it runs, `webgpu` null without a WebGPU backend); the API's `GenerateStats`
/// takes the counts and adds the front end's timings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize), serde(rename_all = "camelCase"))]
pub struct GenerationStats {
    /// Prompt tokens given.
    pub prompt_tokens: usize,
    /// Prompt tokens reused from the KV cache (the previous call's prompt and output)
    /// instead of evaluated; 0 with `reusePrompt: false`.
    pub cached_tokens: usize,
    /// Tokens generated (items yielded so far). The model runs at most 4 tokens ahead of the
    /// reader, so after a `break` this is at most 4 more than the tokens read.
    pub tokens: usize,
    /// Why it ended: the end-of-text token, maxTokens reached, the context (nCtx) full (prompt
    /// and output fill it), a stop string; null while it runs.
    // ts: 'eos' | 'maxTokens' | 'contextFull' | 'stop' | null
    pub stop: Option<StopReason>,
    /// The WebGPU work of this generation so far (null when the model has no WebGPU backend).
    pub webgpu: Option<BackendStats>,
}

// ts: export ScoreResult
/// What [`Session::score`] returns: row `i` is the prediction of `tokens[i + 1]`. Serializes
/// as the API's `score` result (typed arrays in the browser: `crate::typed`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize), serde(rename_all = "camelCase"))]
pub struct Score {
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub tokens: Vec<u32>,
    /// Position i: ln p(tokens[i+1] | tokens[0..=i]); length n-1.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub logprobs: Vec<f32>,
    /// Vocabulary entries with a strictly higher logprob (0 = the argmax); length n-1.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub ranks: Vec<u32>,
    /// Entropy of each prediction, in nats; length n-1.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub entropies: Vec<f32>,
    /// n-1 rows of `top_k` `(id, logprob)` (JS `{ token, logprob }`), descending.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::token_logprobs"))]
    pub top: Vec<Vec<(u32, f32)>>,
    /// Positions whose results came from the prompt cache.
    pub cached_tokens: usize,
    /// This call's WebGPU work; only when the model runs on WebGPU (None without a WebGPU backend).
    #[cfg_attr(feature = "std", serde(skip_serializing_if = "Option::is_none"))]
    pub webgpu: Option<BackendStats>,
}

// ts: export TraceResult
/// What [`Session::trace`] returns; serializes as the API's `trace` result (`nodes` as
/// `{ [name]: { shape, data } }`, `compute_bytes` as `memory: { compute }`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Trace {
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub tokens: Vec<u32>,
    /// With tap `attn`: per layer, n_head·n·n floats laid out `[head][query][key]`: the
    /// softmaxed attention probabilities (masked entries 0), as Hugging Face's `output_attentions`.
    #[cfg_attr(
        feature = "std",
        serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::typed::f32s_list_some")
    )]
    pub attn: Option<Vec<Vec<f32>>>,
    /// With tap `hidden`: `n_layer + 1` arrays of n·n_embd floats, `[token][feature]`: Hugging
    /// Face's `output_hidden_states` (embeddings, each block's output, the last after `ln_f`).
    #[cfg_attr(
        feature = "std",
        serde(skip_serializing_if = "Option::is_none", serialize_with = "crate::typed::f32s_list_some")
    )]
    pub hidden: Option<Vec<Vec<f32>>>,
    /// Other taps by name (graph nodes by their ggml names, TransformerLens hook points by
    /// theirs: [`super::hooks`]): `shape` outermost first (ggml's ne reversed, leading 1s dropped).
    #[cfg_attr(feature = "std", serde(serialize_with = "super::hooks::by_name"))]
    pub nodes: Vec<TapValue>,
    /// Compute bytes of the traced graph's plan, with the requested taps kept alive (JS `memory.compute`).
    #[cfg_attr(feature = "std", serde(rename = "memory", serialize_with = "crate::typed::compute"))]
    pub compute_bytes: usize,
}

/// Receives `(first position, [n][n_vocab] logits)` per evaluated chunk.
type RowSink<'a> = dyn FnMut(usize, &[f32]) + 'a;

/// A score row kept for the prompt cache.
#[derive(Clone, Debug)]
struct Row {
    logprob: f32,
    rank: u32,
    entropy: f32,
    top: Vec<(u32, f32)>,
}

// ts: export Beam
/// One beam-searched sequence: its generated tokens and score (summed logprob while
/// running; divided by length^length_penalty once finished).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Beam {
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub tokens: Vec<u32>,
    pub score: f32,
}

/// The state of a beam search (Hugging Face's `_beam_search`, batch size 1): running beam
/// `j` is KV sequence `j`.
struct BeamSearch {
    k: usize,
    max_new: usize,
    running: Vec<Beam>,
    /// At most k, best first.
    finished: Vec<Beam>,
    /// Next-token logits: one row per running beam (one row, beam 0's, at the first step).
    logits: Vec<f32>,
    done: bool,
}

/// One sampled sequence of a generation.
struct Seq {
    /// Next-token logits after the last evaluated position.
    logits: Vec<f32>,
    /// Prompt and output, for the repetition penalty.
    history: Vec<u32>,
    /// The token sampled last, not yet evaluated (only the next step needs its K/V).
    pending: Option<u32>,
    sampler: Sampler,
    n_generated: usize,
    n_yielded: usize,
    stop: Option<StopReason>,
    decoder: StreamDecoder,
    hold: StopHold<(u32, Option<f32>, Vec<TopToken>)>,
}

struct Generation {
    prompt: Vec<u32>,
    /// Prompt positions in the KV cache so far (evaluated or reused).
    done: usize,
    cached: usize,
    opts: GenerateOptions,
    seqs: Vec<Seq>,
    /// With several sequences: whether the prompt's cells were given to all of them.
    shared: bool,
    beam: Option<BeamSearch>,
    /// The reason the last sequence to stop stopped.
    last_stop: Option<StopReason>,
    /// The WebGPU counters when the generation started.
    webgpu_start: Option<BackendStats>,
}

impl Generation {
    fn over(&self) -> bool {
        self.seqs.iter().all(|q| q.stop.is_some())
    }
}

/// A model, its tokenizer, and the state that outlives calls: the KV cache's contents and
/// the generation in progress.
pub struct Session {
    pub model: Gpt2,
    pub tokenizer: Tokenizer,
    /// Tokens whose K/V are at positions `0..len` of the cache.
    pub(super) cache: Vec<u32>,
    /// `rows[i]` predicts `cache[i + 1]`, from the last `score`.
    rows: Vec<Row>,
    /// The hooks the cache's K/V were computed under (empty: none).
    pub(super) cache_hooks: Vec<Hook>,
    gen: Option<Generation>,
    last_stats: GenerationStats,
    last_beams: Vec<Beam>,
    /// Asked between the steps of a long call (patching cells, lens layers, score chunks,
    /// passes) whether its caller stopped it; None: nobody can (the CLI, tests).
    pub interrupt: Option<Interrupt>,
    /// The training run in progress ([`super::train`]), if any.
    pub(super) train: Option<super::train::Trainer>,
}

/// Whether the caller stopped the call: asked between two steps, it may first yield to the
/// caller's event loop (the JS `signal` of a long call, whose abort can only arrive then).
pub type Interrupt = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = bool>>>>;

impl Session {
    pub fn new(loaded: LoadedModel) -> Session {
        Session {
            model: loaded.model,
            tokenizer: loaded.tokenizer,
            cache: Vec::new(),
            rows: Vec::new(),
            cache_hooks: Vec::new(),
            gen: None,
            last_stats: GenerationStats::default(),
            last_beams: Vec::new(),
            interrupt: None,
            train: None,
        }
    }

    /// Runs `call` with `interrupt` asked between its steps ([`Session::checkpoint`]), and
    /// without one after it, whatever the outcome.
    pub async fn interruptible<T>(
        &mut self,
        interrupt: Option<Interrupt>,
        call: impl AsyncFnOnce(&mut Session) -> T,
    ) -> T {
        self.interrupt = interrupt;
        let r = call(self).await;
        self.interrupt = None;
        r
    }

    /// Between two steps of a long call: `Aborted` when the caller's [`Interrupt`] says it
    /// stopped the call, with the prompt cache cleared (the call may have left it half-written).
    pub(super) async fn checkpoint(&mut self) -> Result<(), ModelError> {
        let Some(stopped) = self.interrupt.as_mut().map(|f| f()) else { return Ok(()) };
        if stopped.await {
            self.clear_cache();
            return Err(ModelError::Aborted);
        }
        Ok(())
    }

    /// Tokens whose K/V the cache holds, from position 0.
    pub fn cached(&self) -> &[u32] {
        &self.cache
    }

    /// Forgets the cache's contents (the next call evaluates from position 0).
    pub fn clear_cache(&mut self) {
        self.cache.clear();
        self.rows.clear();
    }

    /// Ends the generation in progress, if any.
    pub fn end_generation(&mut self) {
        if let Some(g) = self.gen.take() {
            self.last_stats = stats_of(&g, &self.model);
            self.last_beams = g.beam.filter(|b| b.done).map(|b| b.finished).unwrap_or_default();
        }
    }

    /// Checks ids that a call evaluates from position 0 ([`Gpt2::check_batch`]).
    pub fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        self.model.check_batch(tokens, 0, None)
    }

    /// Positions of `tokens` the cache holds, computed under `hooks` (none under others).
    fn common_prefix(&self, tokens: &[u32], hooks: &[Hook]) -> usize {
        if self.cache_hooks != hooks {
            return 0;
        }
        self.cache.iter().zip(tokens).take_while(|(a, b)| a == b).count()
    }

    /// Keeps the cache's first `keep` positions and forgets the rest (and the score rows
    /// that depend on them).
    pub(super) fn truncate(&mut self, keep: usize) {
        self.cache.truncate(keep);
        self.rows.truncate(keep.saturating_sub(1));
    }

    /// Evaluates `tokens[keep..]` at positions `keep..` after reusing the cache's first
    /// `keep`. With `rows`, every position's logits go to it as `(first position,
    /// [n][n_vocab])` per chunk; otherwise only the last position's are read. Returns the
    /// last position's logits. The cache grows chunk by chunk ([`Gpt2::decode_with`]), so
    /// after an error it still says truly what the K/V hold.
    async fn prefill(
        &mut self,
        tokens: &[u32],
        keep: usize,
        hooks: &[Hook],
        mut rows: Option<&mut RowSink<'_>>,
    ) -> Result<Vec<f32>, ModelError> {
        self.cache.truncate(keep);
        self.rows.truncate(keep);
        self.cache_hooks = hooks.to_vec();
        let n_vocab = self.model.hparams.n_vocab;
        let logits = if rows.is_some() { Logits::All } else { Logits::Last };
        let batch = Batch { tokens: &tokens[keep..], n_past: keep, logits, hooks, ..Batch::default() };
        let Session { model, cache, .. } = self;
        let mut last = Vec::new();
        let mut sink = |c: Chunk<'_>| {
            cache.extend_from_slice(c.tokens);
            if let Some(f) = rows.as_mut() {
                f(c.first, c.logits);
                last = c.logits[c.logits.len() - n_vocab..].to_vec();
            }
        };
        let out = model.decode_with(batch, &mut sink).await?;
        Ok(if logits == Logits::Last { out.logits } else { last })
    }

    /// Next-token logits after `tokens` (`[n_vocab]`). Reuses the cache (the result equals
    /// a fresh evaluation's) and leaves `tokens` in it. Ends a generation in progress.
    pub async fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.end_generation();
        self.check_tokens(tokens)?;
        let keep = self.common_prefix(tokens, &[]).min(tokens.len() - 1);
        self.truncate(keep);
        self.prefill(tokens, keep, &[], None).await
    }

    /// Scores `tokens` in batched passes, no sampling: row `i` is how the model predicted
    /// `tokens[i + 1]` from `tokens[..=i]`. Rows of a shared prefix with the last scored
    /// text come from the cache, when it was computed under the same `hooks`
    /// (interventions at every position, as [`GenerateOptions::hooks`]: no `pos`).
    pub async fn score(&mut self, tokens: &[u32], top_k: usize, hooks: &[Hook]) -> Result<Score, ModelError> {
        self.end_generation();
        self.check_tokens(tokens)?;
        // Checked now (names, ranges, values; no `pos`) for the whole text, as the one graph
        // that evaluates it (any reused prefix included) has it: the key axis is every position.
        super::hooks::plan(hooks, &self.model.hparams, tokens.len(), 0, false)?;
        let webgpu_start = self.model.webgpu_stats();
        let n = tokens.len();
        let c = self.common_prefix(tokens, hooks);
        // Row i is reusable while tokens[..=i+1] are the cached ones and it kept enough top entries.
        let reusable = self.rows.iter().take_while(|r| r.top.len() >= top_k).count().min(c.saturating_sub(1));
        let (keep, cached) = if reusable >= n - 1 && c >= n { (n, n) } else { (reusable, reusable) };
        let mut new_rows: Vec<Row> = Vec::new();
        if keep < n {
            let n_vocab = self.model.hparams.n_vocab;
            let mut on_rows = |first: usize, logits: &[f32]| {
                for (j, row) in logits.chunks(n_vocab).enumerate() {
                    let pos = first + j;
                    if pos + 1 < n {
                        new_rows.push(score_row(row, tokens[pos + 1], top_k));
                    }
                }
            };
            // Rows below `keep` stay: row i predicts tokens[i + 1], and i + 1 < c.
            self.rows.truncate(keep);
            // Chunk by chunk as the one pass would (the same chunks, so the same bits), asking
            // between them whether the caller stopped; with hooks the pass is one graph.
            let step = if hooks.is_empty() { self.model.n_batch.max(1) } else { n };
            let mut at = keep;
            while at < n {
                let end = (at + step).min(n);
                self.checkpoint().await?;
                self.prefill(&tokens[..end], at, hooks, Some(&mut on_rows)).await?;
                at = end;
            }
        }
        self.rows.truncate(n - 1);
        self.rows.extend(new_rows);
        let rows = &self.rows[..n - 1];
        Ok(Score {
            tokens: tokens.to_vec(),
            logprobs: rows.iter().map(|r| r.logprob).collect(),
            ranks: rows.iter().map(|r| r.rank).collect(),
            entropies: rows.iter().map(|r| r.entropy).collect(),
            top: rows.iter().map(|r| r.top[..top_k.min(r.top.len())].to_vec()).collect(),
            cached_tokens: cached,
            webgpu: webgpu_since(&self.model, webgpu_start),
        })
    }

    /// The graph nodes a tap name stands for: `attn` (every layer's softmaxed attention),
    /// `hidden` (Hugging Face's hidden states), or one node by its ggml name.
    fn tap_nodes(&self, tap: &str) -> Vec<String> {
        let n_layer = self.model.hparams.n_layer;
        match tap {
            "attn" => (0..n_layer).map(|il| alloc::format!("l{il}.kq_soft_max")).collect(),
            // HF: the embeddings, blocks 0..n_layer-2's outputs, then ln_f of the last block's.
            "hidden" => core::iter::once(String::from("inpL"))
                .chain((0..n_layer.saturating_sub(1)).map(|il| alloc::format!("l{il}.l_out")))
                .chain(core::iter::once(String::from("result_norm")))
                .collect(),
            name => alloc::vec![String::from(name)],
        }
    }

    /// One pass over `tokens` from position 0 keeping the requested taps alive (see
    /// [`Gpt2::decode`] with taps). Leaves `tokens` in the cache.
    pub async fn trace(&mut self, tokens: &[u32], taps: &[String]) -> Result<Trace, ModelError> {
        self.end_generation();
        self.check_tokens(tokens)?;
        let (taps, tl) = &super::hooks::split_taps(taps, &self.model.hparams)?; // TransformerLens names
        let mut names: Vec<String> = Vec::new();
        for t in taps.iter().chain(&tl.nodes) {
            for n in self.tap_nodes(t) {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        self.truncate(0);
        self.cache_hooks.clear();
        self.checkpoint().await?;
        let out = self
            .model
            .decode(Batch { tokens, n_past: 0, logits: Logits::None, taps: &names, ..Batch::default() })
            .await?;
        self.cache.extend_from_slice(tokens);
        let take = |name: &str| -> Vec<f32> {
            out.taps.iter().find(|v| v.name == name).map(|v| v.data.clone()).unwrap_or_default()
        };
        let wants = |t: &str| taps.iter().any(|x| x == t);
        let attn = wants("attn").then(|| self.tap_nodes("attn").iter().map(|n| take(n)).collect());
        let hidden = wants("hidden").then(|| self.tap_nodes("hidden").iter().map(|n| take(n)).collect());
        let nodes = out.taps.iter().filter(|v| taps.contains(&v.name)).cloned();
        let nodes = nodes.chain(tl.values(&out.taps, self.model.hparams.eps)).collect();
        Ok(Trace { tokens: tokens.to_vec(), attn, hidden, nodes, compute_bytes: out.compute_bytes })
    }

    /// Begins a generation from `prompt`; evaluates nothing yet. Returns the prompt
    /// positions reused from the cache.
    pub fn start(&mut self, prompt: Vec<u32>, opts: GenerateOptions) -> Result<usize, ModelError> {
        self.end_generation();
        self.check_tokens(&prompt)?;
        let n_vocab = self.model.hparams.n_vocab;
        if let Some(&(bad, _)) = opts.logit_bias.iter().find(|(t, _)| *t as usize >= n_vocab) {
            return Err(ModelError::BadToken { id: bad, n_vocab });
        }
        let beams = opts.num_beams > 1;
        if opts.n == 0 || opts.n > 64 || opts.num_beams > 64 || (beams && opts.n > 1) {
            return Err(ModelError::Invalid(alloc::format!(
                "n must be 1..64 and numBeams 0..64, not both above 1 (n {}, numBeams {})",
                opts.n,
                opts.num_beams
            )));
        }
        if !opts.hooks.is_empty() && (opts.n > 1 || beams) {
            return Err(ModelError::Invalid(alloc::format!(
                "hooks take one sequence: not with n {} or numBeams {}",
                opts.n,
                opts.num_beams
            )));
        }
        let n_ctx = self.model.n_ctx();
        let max_new = opts.max_tokens.min(n_ctx.saturating_sub(prompt.len()));
        if beams {
            // Every beam's cells fit at once: the prompt plus k cells per step.
            let needed = prompt.len() + opts.num_beams * max_new;
            if needed > n_ctx {
                return Err(ModelError::ContextFull { needed, n_ctx });
            }
        }
        // Each sequence (or beam) keeps a row of logits per step and its own copy of the
        // history: sized against the memory left before any is made.
        let n_seq = opts.n.max(opts.num_beams) as u64;
        let needed = n_seq * (n_vocab as u64 * 4 + (prompt.len() + max_new) as u64 * 4);
        if let Some(left) = crate::backend::host::address_space_left().filter(|&l| needed > l) {
            return Err(ModelError::RunTooLarge {
                what: alloc::format!("{n_seq} sequences' logits and histories"),
                needed,
                left,
            });
        }
        // The hooks are checked now (names, ranges, values), as for a one-token step.
        super::hooks::plan(&opts.hooks, &self.model.hparams, 1, 0, false)?;
        let keep = if opts.reuse_prompt { self.common_prefix(&prompt, &opts.hooks).min(prompt.len() - 1) } else { 0 };
        self.truncate(keep);
        self.cache_hooks = opts.hooks.clone();
        let seqs = (0..opts.n)
            .map(|i| Seq {
                logits: Vec::new(),
                history: prompt.clone(),
                pending: None,
                sampler: Sampler::new(SamplingParams {
                    seed: opts.sampling.seed.wrapping_add(i as u64),
                    ..opts.sampling.clone()
                }),
                n_generated: 0,
                n_yielded: 0,
                stop: None,
                decoder: StreamDecoder::new(),
                hold: StopHold::new(opts.stop.clone()),
            })
            .collect();
        let beam = beams.then(|| BeamSearch {
            k: opts.num_beams,
            max_new,
            running: alloc::vec![Beam { tokens: Vec::new(), score: 0.0 }],
            finished: Vec::new(),
            logits: Vec::new(),
            done: max_new == 0,
        });
        self.gen = Some(Generation {
            prompt,
            done: keep,
            cached: keep,
            opts,
            seqs,
            shared: false,
            beam,
            last_stop: None,
            webgpu_start: self.model.webgpu_stats(),
        });
        Ok(keep)
    }

    fn gen_mut(&mut self, what: &str) -> Result<&mut Generation, ModelError> {
        self.gen
            .as_mut()
            .ok_or_else(|| ModelError::Invalid(alloc::format!("{what}: no generation was started (call start first)")))
    }

    /// Evaluates the next `n_batch` prompt tokens (only the last chunk's logits are read).
    /// True once the whole prompt is in.
    pub async fn prompt_step(&mut self) -> Result<bool, ModelError> {
        let n_batch = self.model.n_batch;
        let g = self.gen_mut("prompt_step")?;
        let (from, len) = (g.done, g.prompt.len());
        if from == len {
            return Ok(true);
        }
        let to = (from + n_batch).min(len);
        let chunk: Vec<u32> = g.prompt[from..to].to_vec();
        let logits = if to == len { Logits::Last } else { Logits::None };
        let hooks = &self.gen.as_ref().expect("generation present").opts.hooks;
        match self.model.decode(Batch { tokens: &chunk, n_past: from, logits, hooks, ..Batch::default() }).await {
            Ok(out) => {
                self.cache.extend_from_slice(&chunk);
                let g = self.gen.as_mut().expect("generation present");
                g.done = to;
                if to == len {
                    for q in &mut g.seqs {
                        q.logits.clone_from(&out.logits);
                    }
                    if let Some(b) = &mut g.beam {
                        b.logits = out.logits;
                    }
                }
                Ok(to == len)
            }
            Err(e) => {
                self.end_generation();
                Err(e)
            }
        }
    }

    /// The next item, or None once the run is over ([`Session::stats`] says why).
    pub async fn next(&mut self) -> Result<Option<Item>, ModelError> {
        match self.next_inner().await {
            // A call out of order leaves the run as it was; a failed evaluation ends it.
            Err(e) if !matches!(e, ModelError::Invalid(_)) => {
                self.end_generation();
                Err(e)
            }
            r => r,
        }
    }

    async fn next_inner(&mut self) -> Result<Option<Item>, ModelError> {
        let n_ctx = self.model.n_ctx();
        let eos = self.tokenizer.eos();
        loop {
            let g = self.gen_mut("next_token")?;
            if g.done < g.prompt.len() {
                return Err(ModelError::Invalid(alloc::format!(
                    "next_token: the prompt is not evaluated yet ({} of {} tokens; call prompt_step until it returns true)",
                    g.done,
                    g.prompt.len()
                )));
            }
            // Held items first, in sequence order.
            for (i, q) in g.seqs.iter_mut().enumerate() {
                if let Some(((token, logprob, top), text)) = q.hold.pop() {
                    q.n_yielded += 1;
                    return Ok(Some(Item { seq: i, token, text, logprob, top }));
                }
            }
            if g.over() {
                return Ok(None);
            }
            if g.beam.is_some() {
                self.beam_step(eos).await?;
                continue;
            }
            let Session { gen, model, cache, tokenizer, .. } = self;
            let g = gen.as_mut().expect("generation present");
            let (plen, multi) = (g.prompt.len(), g.seqs.len() > 1);
            let mut flushed = false;
            for (i, q) in g.seqs.iter_mut().enumerate().filter(|(_, q)| q.stop.is_none()) {
                if q.n_generated >= g.opts.max_tokens || plen + q.n_generated >= n_ctx {
                    q.stop = Some(if q.n_generated >= g.opts.max_tokens {
                        StopReason::MaxTokens
                    } else {
                        StopReason::ContextFull
                    });
                    g.last_stop = q.stop;
                    q.hold.flush();
                    if multi && g.shared {
                        model.kv.seq_rm(1 << i);
                    }
                    flushed = true;
                }
            }
            if flushed {
                continue;
            }
            // One evaluation of every live sequence's last token.
            let pending: Vec<(usize, u32)> =
                g.seqs.iter_mut().enumerate().filter_map(|(i, q)| q.pending.take().map(|t| (i, t))).collect();
            if !multi {
                if let Some(&(_, t)) = pending.first() {
                    let pos = cache.len();
                    let out = model.decode(Batch { hooks: &g.opts.hooks, ..Batch::last(&[t], pos) }).await?;
                    cache.push(t);
                    g.seqs[0].logits = out.logits;
                }
            } else if !pending.is_empty() {
                if !g.shared {
                    // The prompt's cells (sequence 0's) are every sequence's (llama.cpp's seq_cp).
                    model.kv.seq_cp(0, if g.seqs.len() == 64 { u64::MAX } else { (1u64 << g.seqs.len()) - 1 });
                    g.shared = true;
                }
                let tokens: Vec<u32> = pending.iter().map(|&(_, t)| t).collect();
                let seq: Vec<SeqPos> = pending
                    .iter()
                    .map(|&(i, _)| SeqPos { pos: (plen + g.seqs[i].n_generated - 1) as u32, seqs: 1 << i })
                    .collect();
                let batch = Batch { tokens: &tokens, logits: Logits::All, seq: &seq, ..Batch::default() };
                match model.decode(batch).await {
                    Ok(out) => {
                        let n_vocab = model.hparams.n_vocab;
                        for (&(i, _), row) in pending.iter().zip(out.logits.chunks(n_vocab)) {
                            g.seqs[i].logits.clear();
                            g.seqs[i].logits.extend_from_slice(row);
                        }
                    }
                    // No free cells for this step's tokens: every live sequence ends here.
                    Err(ModelError::ContextFull { .. }) => {
                        for q in g.seqs.iter_mut().filter(|q| q.stop.is_none()) {
                            q.stop = Some(StopReason::ContextFull);
                            q.hold.flush();
                        }
                        g.last_stop = Some(StopReason::ContextFull);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            for (i, q) in g.seqs.iter_mut().enumerate().filter(|(_, q)| q.stop.is_none()) {
                let biased = !g.opts.logit_bias.is_empty() || (g.opts.ignore_eos && eos.is_some());
                let t = if biased {
                    let mut row = q.logits.clone();
                    for &(id, b) in &g.opts.logit_bias {
                        row[id as usize] += b;
                    }
                    if let (true, Some(e)) = (g.opts.ignore_eos, eos) {
                        row[e as usize] = f32::NEG_INFINITY;
                    }
                    q.sampler.sample(&row, &q.history)
                } else {
                    q.sampler.sample(&q.logits, &q.history)
                };
                if Some(t) == eos && !g.opts.ignore_eos {
                    q.stop = Some(StopReason::Eos);
                    g.last_stop = q.stop;
                    q.hold.flush();
                    if multi && g.shared {
                        model.kv.seq_rm(1 << i);
                    }
                    continue;
                }
                let (logprob, top) = if g.opts.top_logprobs > 0 {
                    let s = RowStats::new(&q.logits);
                    let top = s
                        .top(&q.logits, g.opts.top_logprobs)
                        .into_iter()
                        .map(|(token, logprob)| TopToken { token, text: piece(tokenizer, token), logprob })
                        .collect();
                    (Some(s.logprob(q.logits[t as usize])), top)
                } else {
                    (None, Vec::new())
                };
                q.history.push(t);
                q.pending = Some(t);
                q.n_generated += 1;
                let text = q.decoder.push(tokenizer, t).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
                if q.hold.push((t, logprob, top), text) {
                    q.stop = Some(StopReason::Stop);
                    g.last_stop = q.stop;
                    if multi && g.shared {
                        model.kv.seq_rm(1 << i);
                    }
                }
            }
        }
    }

    /// One step of beam search (Hugging Face's `_beam_search` loop body, batch size 1,
    /// early_stopping=False): the top 2k of beam score + log_softmax over beams × vocabulary;
    /// those ending (eos, or the last step) among the first k join the finished list as
    /// score / len^length_penalty; the first k others run on. Running beam j is KV sequence
    /// j: the survivors' cells are re-assigned by permuting cells' sequence sets, not by
    /// copying K/V. Once decided, the best finished beam's tokens go out as items.
    async fn beam_step(&mut self, eos: Option<u32>) -> Result<(), ModelError> {
        let Session { gen, model, tokenizer, .. } = self;
        let g = gen.as_mut().expect("generation present");
        let b = g.beam.as_mut().expect("beam search");
        let (plen, v, lp) = (g.prompt.len(), model.hparams.n_vocab, g.opts.length_penalty as f64);
        if !b.done {
            let mut cand: Vec<(f32, usize, u32)> = Vec::with_capacity(b.running.len() * v);
            for (j, beam) in b.running.iter().enumerate() {
                let row = &b.logits[j * v..(j + 1) * v];
                let st = RowStats::new(row);
                let mut lps: Vec<f32> = row.iter().map(|&l| st.logprob(l)).collect();
                // HF's logits processors act on the log-probabilities.
                for &(id, bias) in &g.opts.logit_bias {
                    lps[id as usize] += bias;
                }
                if let (true, Some(e)) = (g.opts.ignore_eos, eos) {
                    lps[e as usize] = f32::NEG_INFINITY;
                }
                cand.extend(lps.iter().enumerate().map(|(t, &x)| (beam.score + x, j, t as u32)));
            }
            // torch.topk: descending; equal scores by flat index.
            let order = |a: &(f32, usize, u32), c: &(f32, usize, u32)| {
                c.0.total_cmp(&a.0).then((a.1 * v + a.2 as usize).cmp(&(c.1 * v + c.2 as usize)))
            };
            let k2 = (2 * b.k).min(cand.len());
            if k2 < cand.len() {
                cand.select_nth_unstable_by(k2 - 1, order);
                cand.truncate(k2);
            }
            cand.sort_unstable_by(order);
            let new_len = b.running[0].tokens.len() + 1;
            let at_max = new_len >= b.max_new;
            let denom = libm::pow(new_len as f64, lp);
            let (mut running, mut src) = (Vec::new(), Vec::new());
            for (idx, &(score, j, t)) in cand.iter().enumerate() {
                let ends = at_max || (Some(t) == eos && !g.opts.ignore_eos);
                if ends && idx >= b.k {
                    continue;
                }
                if !ends && running.len() == b.k {
                    continue;
                }
                let mut tokens = b.running[j].tokens.clone();
                tokens.push(t);
                if ends {
                    b.finished.push(Beam { tokens, score: (score as f64 / denom) as f32 });
                } else {
                    running.push(Beam { tokens, score });
                    src.push(j);
                }
            }
            b.finished.sort_by(|a, c| c.score.total_cmp(&a.score));
            b.finished.truncate(b.k);
            // Done when no beam runs on, or (every finished slot filled) the best running
            // beam at its current length cannot beat the worst finished one.
            b.done = running.is_empty()
                || (b.finished.len() == b.k && (running[0].score as f64 / denom) as f32 <= b.finished[b.k - 1].score);
            if !b.done {
                model.kv.seq_permute(&src);
                let tokens: Vec<u32> = running.iter().map(|r| *r.tokens.last().expect("one token")).collect();
                let seq: Vec<SeqPos> =
                    (0..running.len()).map(|j| SeqPos { pos: (plen + new_len - 1) as u32, seqs: 1 << j }).collect();
                let batch = Batch { tokens: &tokens, logits: Logits::All, seq: &seq, ..Batch::default() };
                b.logits = model.decode(batch).await?.logits;
                b.running = running;
                return Ok(());
            }
        }
        // Decided: the best beam's tokens as items (its closing eos is not yielded).
        let q = &mut g.seqs[0];
        let best = b.finished.first().map(|f| f.tokens.clone()).unwrap_or_default();
        let ended_eos = best.last().is_some_and(|&t| Some(t) == eos);
        let text_tokens = &best[..best.len() - ended_eos as usize];
        for &t in text_tokens {
            q.n_generated += 1;
            let text = q.decoder.push(tokenizer, t).map_err(|e| ModelError::Tokenizer(e.to_string()))?;
            if q.hold.push((t, None, Vec::new()), text) {
                q.stop = Some(StopReason::Stop);
                break;
            }
        }
        if q.stop.is_none() {
            q.stop = Some(if ended_eos {
                StopReason::Eos
            } else if b.max_new < g.opts.max_tokens {
                StopReason::ContextFull
            } else {
                StopReason::MaxTokens
            });
            q.hold.flush();
        }
        g.last_stop = q.stop;
        Ok(())
    }

    /// The finished beams of the current (or last) beam search, best first (empty without
    /// one): Hugging Face's `sequences` (the generated part, with a closing eos) and
    /// `sequences_scores`.
    pub fn beams(&self) -> &[Beam] {
        match &self.gen {
            Some(g) => g.beam.as_ref().filter(|b| b.done).map_or(&[], |b| &b.finished[..]),
            None => &self.last_beams,
        }
    }

    /// Whether a generation was started and not ended by another call (a finished run
    /// stays until then: `next` keeps answering None).
    pub fn generating(&self) -> bool {
        self.gen.is_some()
    }

    /// The sequences the generation in progress samples (option `n`; 1 in beam search and
    /// when none runs).
    pub fn n_seqs(&self) -> usize {
        self.gen.as_ref().map_or(1, |g| g.seqs.len())
    }

    /// Counters of the generation in progress, else of the last one.
    pub fn stats(&self) -> GenerationStats {
        self.gen.as_ref().map_or(self.last_stats, |g| stats_of(g, &self.model))
    }
}

fn stats_of(g: &Generation, model: &Gpt2) -> GenerationStats {
    GenerationStats {
        prompt_tokens: g.prompt.len(),
        cached_tokens: g.cached,
        tokens: g.seqs.iter().map(|q| q.n_yielded).sum(),
        stop: if g.over() { g.last_stop } else { None },
        webgpu: webgpu_since(model, g.webgpu_start),
    }
}

/// The model's WebGPU work since `start` (a snapshot of [`Gpt2::webgpu_stats`]).
fn webgpu_since(model: &Gpt2, start: Option<BackendStats>) -> Option<BackendStats> {
    Some(model.webgpu_stats()?.since(&start.unwrap_or_default()))
}

/// A token's own text, lossy.
fn piece(tok: &Tokenizer, id: u32) -> String {
    tok.token_bytes(id).map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
}

fn score_row(logits: &[f32], next: u32, top_k: usize) -> Row {
    let s = RowStats::new(logits);
    Row {
        logprob: s.logprob(logits[next as usize]),
        rank: s.rank(logits, next),
        entropy: s.entropy as f32,
        top: s.top(logits, top_k),
    }
}
