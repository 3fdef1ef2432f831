//! The options of a load ([`LoadOptions`]), of a generation ([`GenerateParams`]) and of the
//! other calls as serde structs (camelCase as in JS, unknown keys refused by name:
//! `ModelError::Invalid`, code `invalid` in JS), each value checked as it is read, with their
//! defaults (here and in `GenerateOptions::default()`). The JS bindings read them from JS
//! values (serde-wasm-bindgen), the CLI builds them from its flags; neither applies defaults
//! of its own.
//!
//! ```
//! use ggweb::common::options::{from_json, parse_generate, LoadOptions, BackendChoice};
//! let o = parse_generate(r#"{"maxTokens":4,"temperature":0,"stop":["\n"],"logitBias":{"50256":"-Infinity"}}"#).unwrap();
//! assert_eq!((o.max_tokens, o.stop.len(), o.logit_bias[0]), (4, 1, (50256, f32::NEG_INFINITY)));
//! assert!(parse_generate(r#"{"ctx":512}"#).unwrap_err().to_string().contains("unknown option \"ctx\""));
//! let l: LoadOptions = from_json("load options", r#"{"nCtx":64,"backend":"auto"}"#).unwrap();
//! assert_eq!((l.model().n_ctx, l.model().n_batch, l.backend()), (64, 32, BackendChoice::Auto));
//! let r: LoadOptions = from_json("load options", r#"{"gpuLayers":-1,"kvType":"f16"}"#).unwrap();
//! assert_eq!(
//!     serde_json::to_string(&r.resolved()).unwrap(),
//!     r#"{"nCtx":0,"nBatch":32,"backend":"cpu","gpuLayers":-1,"nThreads":1,"kvType":"f16"}"#
//! );
//! ```

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::context::Gpt2Options;
use crate::model::grad::{GradSpec, Metric};
use crate::model::hooks::Hook;
use crate::model::sampling::SamplingParams;
use crate::model::session::GenerateOptions;
use crate::model::ModelError;
use crate::types::GgmlType;

fn invalid(msg: String) -> ModelError {
    ModelError::Invalid(msg)
}

/// Keys `generate` reads (besides `special` and `signal`, which the JS side takes).
pub const GENERATE_KEYS: [&str; 17] = [
    "hooks",
    "maxTokens",
    "temperature",
    "topK",
    "topP",
    "minP",
    "seed",
    "repeatPenalty",
    "repeatLastN",
    "topLogprobs",
    "stop",
    "logitBias",
    "ignoreEos",
    "reusePrompt",
    "n",
    "numBeams",
    "lengthPenalty",
];

fn json_value(what: &str, json: &str) -> Result<Value, ModelError> {
    serde_json::from_str(json).map_err(|e| invalid(format!("{what}: not valid JSON ({e})")))
}

/// A KV cache type by name: `"f32"` or `"f16"` (`kvType` in JS, `--kv-type` in the CLI).
pub fn parse_kv_type(what: &str, s: &str) -> Result<GgmlType, ModelError> {
    match s {
        "f32" => Ok(GgmlType::F32),
        "f16" => Ok(GgmlType::F16),
        _ => Err(invalid(format!("{what} must be \"f16\" or \"f32\", got {s:?}"))),
    }
}

// ts: export GenerateParams
/// `generate`'s options as they cross from JS (`rename_all = "camelCase"`, unknown keys
/// refused). Each field is checked as it is read, with a message naming the key; absent and
/// null keys take [`GenerateOptions::default()`]'s values (the one place defaults live, the
/// CLI's too). `logitBias` is `{ "id": bias }`, a bias a number or `"-Infinity"` (JSON, and
/// serde's values, have no infinity; the JS side writes −Infinity so).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GenerateParams {
    /// Tokens to generate at most (default 128).
    #[serde(default, deserialize_with = "de::max_tokens")]
    pub max_tokens: Option<usize>,
    /// 0 is greedy (default 0.8).
    #[serde(default, deserialize_with = "de::temperature")]
    pub temperature: Option<f32>,
    /// 0 disables (default 40).
    #[serde(default, deserialize_with = "de::top_k")]
    pub top_k: Option<usize>,
    /// 1 disables (default 0.95).
    #[serde(default, deserialize_with = "de::top_p")]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than minP times the most likely one (0 disables; default 0).
    #[serde(default, deserialize_with = "de::min_p")]
    pub min_p: Option<f32>,
    /// Sampling seed, an integer 0..2^64-1 (from JS exact up to 2^53; default random in JS, 0 in the CLI).
    #[serde(default, deserialize_with = "de::seed")]
    pub seed: Option<u64>,
    /// 1 disables (default 1.0).
    #[serde(default, deserialize_with = "de::repeat_penalty")]
    pub repeat_penalty: Option<f32>,
    /// How many of the most recent tokens (prompt and output) the repetition penalty looks at (default 64).
    #[serde(default, deserialize_with = "de::repeat_last_n")]
    pub repeat_last_n: Option<usize>,
    /// Each yielded token also carries `logprob` and the `top` k tokens, from the model's own
    /// distribution (log-softmax of the logits before temperature, penalties or bias).
    #[serde(default, deserialize_with = "de::top_logprobs")]
    pub top_logprobs: Option<usize>,
    /// End when the text would contain one of these: the stop string is not yielded, and text
    /// that might begin one is held back until resolved; stats.stop is then 'stop'.
    #[serde(default, deserialize_with = "de::stop")]
    pub stop: Option<Vec<String>>,
    /// Added to a token's logit before sampling; -Infinity bans the token.
    // ts: { [tokenId: number]: number }
    #[serde(default, deserialize_with = "de::logit_bias")]
    pub logit_bias: Option<Vec<(u32, f32)>>,
    /// Ban the end-of-text token, so only maxTokens or the context end the run (default false).
    #[serde(default, deserialize_with = "de::ignore_eos")]
    pub ignore_eos: Option<bool>,
    /// Reuse the KV cache for the longest prefix the prompt shares with the tokens it holds
    /// (the prompt cache; default true). false evaluates the whole prompt again
    /// (stats.cachedTokens 0): for timing, or to rule the cache out.
    #[serde(default, deserialize_with = "de::reuse_prompt")]
    pub reuse_prompt: Option<bool>,
    /// Interventions at TransformerLens hook points ([`Hook`]), applied at every evaluated position
    /// (prompt and each new token) before K and V enter the cache; no `pos` here. The prompt
    /// cache is reused only under the same hooks.
    #[serde(default)]
    pub hooks: Option<Vec<Hook>>,
    /// Sample n sequences (1..64, default 1) from the one prompt (evaluated once), one batch
    /// of the live sequences' tokens per step; items carry `seq` (0..n-1), interleaved.
    /// Sequence i equals a one-sequence run with seed `seed + i` (mod 2^64); each stops on
    /// its own (end-of-text, stop strings, maxTokens). (1..64: the KV cache's sequence ids are a u64 bitset.)
    #[serde(default, deserialize_with = "de::n")]
    pub n: Option<usize>,
    /// Beam search with k beams (1..64; 1 = off), as Hugging Face's `generate(num_beams=k,
    /// num_return_sequences=k, do_sample=False, early_stopping=False)`: sampling options are
    /// not used; the best beam's tokens are yielded once the search is decided, and
    /// `stats.beams` holds the k beams. Not with n > 1.
    #[serde(default, deserialize_with = "de::num_beams")]
    pub num_beams: Option<usize>,
    /// Beam search: a finished beam's score is its summed logprob / length^lengthPenalty
    /// (-100..100, default 1).
    #[serde(default, deserialize_with = "de::length_penalty")]
    pub length_penalty: Option<f32>,
}

impl GenerateParams {
    /// The options of one generation: what was given, [`GenerateOptions::default()`] for the
    /// rest; `n` and `numBeams` cannot both be above 1.
    pub fn resolve(self) -> Result<GenerateOptions, ModelError> {
        let d = GenerateOptions::default();
        let s = d.sampling;
        let (n, num_beams) = (self.n.unwrap_or(d.n), self.num_beams.unwrap_or(d.num_beams));
        if n > 1 && num_beams > 1 {
            return Err(invalid(format!("{GENERATE_WHAT}: n ({n}) and numBeams ({num_beams}) cannot both be above 1")));
        }
        Ok(GenerateOptions {
            max_tokens: self.max_tokens.unwrap_or(d.max_tokens),
            sampling: SamplingParams {
                temperature: self.temperature.unwrap_or(s.temperature),
                top_k: self.top_k.unwrap_or(s.top_k),
                top_p: self.top_p.unwrap_or(s.top_p),
                min_p: self.min_p.unwrap_or(s.min_p),
                repeat_penalty: self.repeat_penalty.unwrap_or(s.repeat_penalty),
                repeat_last_n: self.repeat_last_n.unwrap_or(s.repeat_last_n),
                seed: self.seed.unwrap_or(s.seed),
            },
            logit_bias: self.logit_bias.unwrap_or(d.logit_bias),
            ignore_eos: self.ignore_eos.unwrap_or(d.ignore_eos),
            stop: self.stop.unwrap_or(d.stop),
            top_logprobs: self.top_logprobs.unwrap_or(d.top_logprobs),
            reuse_prompt: self.reuse_prompt.unwrap_or(d.reuse_prompt),
            hooks: self.hooks.unwrap_or(d.hooks),
            n,
            num_beams,
            length_penalty: self.length_penalty.unwrap_or(d.length_penalty),
        })
    }
}

/// `generate`'s options from JSON text (native callers, tests); the bindings pass a value.
pub fn parse_generate(json: &str) -> Result<GenerateOptions, ModelError> {
    from_json::<GenerateParams>(GENERATE_WHAT, json).and_then(GenerateParams::resolve)
}

pub const GENERATE_WHAT: &str = "generation options";
pub const LOAD_WHAT: &str = "WasmLoader options";

/// Which backend a load asks for (`backend` in JS, `--backend` in the CLI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    #[default]
    Cpu,
    WebGpu,
    /// WebGPU when it can be opened, else the CPU (saying why).
    Auto,
}

impl BackendChoice {
    pub fn parse(s: &str) -> Result<BackendChoice, String> {
        match s {
            "cpu" => Ok(BackendChoice::Cpu),
            "webgpu" => Ok(BackendChoice::WebGpu),
            "auto" => Ok(BackendChoice::Auto),
            _ => Err(format!("backend must be \"cpu\", \"webgpu\" or \"auto\", got {s:?}")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Cpu => "cpu",
            BackendChoice::WebGpu => "webgpu",
            BackendChoice::Auto => "auto",
        }
    }
}

/// The most CPU threads a load accepts (`nThreads`): more Web Workers than this only add
/// start-up time and memory.
pub const MAX_THREADS: u64 = 64;

// ts: export LoadParams
/// A load's options, the same for every front end: `Model.load`'s model options (through
/// `WasmLoader`), `Model.inspect`'s, and the CLI's `--ctx --batch --backend --gpu-layers
/// --threads --kv-type`. Absent means the default, which lives here ([`LoadOptions::model`]
/// and [`LoadOptions::backend`]), not in the front ends.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadOptions {
    /// Context length in tokens (default: the model's, capped by the runtime).
    #[serde(default, deserialize_with = "de::n_ctx")]
    pub n_ctx: Option<usize>,
    /// Prompt tokens evaluated per step (default 32; cancellation is checked between steps).
    #[serde(default, deserialize_with = "de::n_batch")]
    pub n_batch: Option<usize>,
    /// 'cpu' (default), 'webgpu' (fails with code 'unsupported' and the reason where there is
    /// no adapter), or 'auto' (WebGPU when an adapter exists, else the CPU: see
    /// ModelInfo.backendNote).
    // ts: 'cpu' | 'webgpu' | 'auto'
    #[serde(default, deserialize_with = "de::backend")]
    pub backend: Option<BackendChoice>,
    /// With 'webgpu' or 'auto': split the model by layer. Blocks n_layer-N .. n_layer-1 and the
    /// output head on WebGPU, the rest on the CPU; the embeddings only when N > n_layer; -1:
    /// everything (parsed as `usize::MAX`). Omitted: the whole model on WebGPU alone. Ignored
    /// on the CPU.
    #[serde(default, deserialize_with = "de::gpu_layers")]
    pub gpu_layers: Option<usize>,
    /// CPU threads, 1..64. More than 1 needs a cross-origin isolated page (served with
    /// `Cross-Origin-Opener-Policy: same-origin` and `Cross-Origin-Embedder-Policy: require-corp`)
    /// and the model in a Web Worker; it then loads the threaded build (pkg-threads/ beside
    /// pkg/). Default: min(navigator.hardwareConcurrency, 4) where threads can run, else 1
    /// (the CLI: 1). Where they cannot, the model runs on 1 thread and info().threads.reason
    /// says why.
    #[serde(default, deserialize_with = "de::n_threads")]
    pub n_threads: Option<usize>,
    /// The KV cache's element type (default 'f32'). 'f16' halves its memory (GPT-2 XL at
    /// nCtx 1024: 629 MB -> 315 MB; see info().memory) and moves logits by f16 rounding of the
    /// stored K and V (measured up to 3.7e-3 on the test model, greedy tokens unchanged).
    /// 'f32' is the default, unlike llama.cpp's F16, so that logits match an F32 reference.
    /// Any other value fails with code 'invalid'.
    // ts: 'f16' | 'f32'
    #[serde(default, deserialize_with = "de::kv_type")]
    pub kv_type: Option<GgmlType>,
}

impl LoadOptions {
    /// The backend asked for (default CPU).
    pub fn backend(&self) -> BackendChoice {
        self.backend.unwrap_or_default()
    }

    /// The model's runtime options, defaults filled in.
    pub fn model(&self) -> Gpt2Options {
        let d = Gpt2Options::default();
        Gpt2Options {
            n_ctx: self.n_ctx.unwrap_or(d.n_ctx),
            n_batch: self.n_batch.unwrap_or(d.n_batch),
            n_threads: self.n_threads.unwrap_or(d.n_threads),
            kv_type: self.kv_type.unwrap_or(d.kv_type),
            repack: Default::default(),
        }
    }

    /// Every option with its default filled in (the bindings' `load_options`): engine.js
    /// plans with the values Rust will use instead of knowing the defaults itself.
    pub fn resolved(&self) -> ResolvedLoadOptions {
        let m = self.model();
        ResolvedLoadOptions {
            n_ctx: m.n_ctx,
            n_batch: m.n_batch,
            backend: self.backend().name(),
            gpu_layers: self
                .gpu_layers
                .map(|n| if n == usize::MAX { -1 } else { i64::try_from(n).unwrap_or(i64::MAX) }),
            n_threads: m.n_threads,
            kv_type: m.kv_type.name(),
        }
    }
}

/// [`LoadOptions`] resolved: `{ nCtx (0: the model's), nBatch, backend, gpuLayers (null: no
/// split, -1: everything), nThreads, kvType }`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedLoadOptions {
    pub n_ctx: usize,
    pub n_batch: usize,
    pub backend: &'static str,
    pub gpu_layers: Option<i64>,
    pub n_threads: usize,
    pub kv_type: &'static str,
}

/// `T` (an options struct) from a value that crossed from JS or was parsed from JSON: an
/// object, with unknown keys refused by name (`ModelError::Invalid`, `what: ...`).
pub fn from_value<T: DeserializeOwned>(what: &str, v: Value) -> Result<T, ModelError> {
    let v = match v {
        Value::Null => Value::Object(Map::new()),
        Value::Object(m) => Value::Object(m),
        v => return Err(invalid(format!("{what}: expected a JSON object, got {v}"))),
    };
    T::deserialize(v).map_err(|e| invalid(format!("{what}: {}", unknown_option(&e.to_string()))))
}

/// [`from_value`] from JSON text.
pub fn from_json<T: DeserializeOwned>(what: &str, json: &str) -> Result<T, ModelError> {
    from_value(what, json_value(what, json)?)
}

/// serde's "unknown field `x`, expected one of `a`, `b`" in the words of the JS API's other
/// option checks: `unknown option "x" (known: a, b)`.
fn unknown_option(msg: &str) -> String {
    let Some(rest) = msg.strip_prefix("unknown field `") else { return msg.into() };
    let Some((key, known)) = rest.split_once('`') else { return msg.into() };
    // serde lists two names as "`a` or `b`", more as "one of `a`, `b`, `c`".
    let known = known
        .trim_start_matches(", expected one of ")
        .trim_start_matches(", expected ")
        .replace("` or `", ", ")
        .replace('`', "");
    format!("unknown option {key:?} (known: {known})")
}

/// The checked readers of each field: a JSON value (null: absent) to a typed option, or a
/// message naming the key.
mod de {
    use super::*;
    use serde::de::Error as _;
    use serde::Deserializer;

    const U32: u64 = u32::MAX as u64;

    macro_rules! field {
        ($name:ident -> $t:ty = |$v:ident| $body:expr) => {
            pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
                fn check($v: Value) -> Result<$t, String> {
                    $body
                }
                match Value::deserialize(d)? {
                    Value::Null => Ok(None),
                    v => check(v).map(Some).map_err(D::Error::custom),
                }
            }
        };
    }

    fn uint(v: &Value, key: &str, min: u64, max: u64) -> Result<u64, String> {
        match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(format!("{key} must be an integer from {min} to {max}, got {v}")),
        }
    }

    fn num(v: &Value, key: &str, min: f64, max: f64) -> Result<f32, String> {
        match v.as_f64() {
            Some(x) if x.is_finite() && x >= min && x <= max => Ok(x as f32),
            _ if max.is_infinite() => Err(format!("{key} must be a finite number >= {min}, got {v}")),
            _ => Err(format!("{key} must be a number from {min} to {max}, got {v}")),
        }
    }

    fn boolean(v: &Value, key: &str) -> Result<bool, String> {
        v.as_bool().ok_or_else(|| format!("{key} must be true or false, got {v}"))
    }

    field!(n_ctx -> usize = |v| uint(&v, "nCtx", 1, U32).map(|n| n as usize));
    field!(n_batch -> usize = |v| uint(&v, "nBatch", 1, U32).map(|n| n as usize));
    field!(n_threads -> usize = |v| uint(&v, "nThreads", 1, MAX_THREADS).map(|n| n as usize));
    field!(backend -> BackendChoice = |v| match &v {
        Value::String(s) => BackendChoice::parse(s).map_err(|_| ()),
        _ => Err(()),
    }
    .map_err(|()| format!("backend must be \"cpu\", \"webgpu\" or \"auto\", got {v}")));
    // -1 means everything, as any count above n_layer does (the embeddings too).
    field!(gpu_layers -> usize = |v| match (v.as_i64(), v.as_u64()) {
        (Some(-1), _) => Ok(usize::MAX),
        (_, Some(n)) => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        _ => Err(format!("gpuLayers must be an integer >= -1, got {v}")),
    });
    field!(kv_type -> GgmlType = |v| match &v {
        Value::String(s) => parse_kv_type("kvType", s).map_err(|e| e.to_string()),
        _ => Err(format!("kvType must be \"f16\" or \"f32\", got {v}")),
    });

    field!(max_tokens -> usize = |v| uint(&v, "maxTokens", 0, U32).map(|n| n as usize));
    field!(temperature -> f32 = |v| num(&v, "temperature", 0.0, f64::INFINITY));
    field!(top_k -> usize = |v| uint(&v, "topK", 0, U32).map(|n| n as usize));
    field!(top_p -> f32 = |v| num(&v, "topP", 0.0, 1.0));
    field!(min_p -> f32 = |v| num(&v, "minP", 0.0, 1.0));
    field!(seed -> u64 = |v| uint(&v, "seed", 0, u64::MAX));
    // It divides positive logits: 0 is refused (1 disables it).
    field!(repeat_penalty -> f32 = |v| match num(&v, "repeatPenalty", 0.0, f64::INFINITY)? {
        0.0 => Err("repeatPenalty must be greater than 0 (1 disables it), got 0".into()),
        x => Ok(x),
    });
    field!(repeat_last_n -> usize = |v| uint(&v, "repeatLastN", 0, U32).map(|n| n as usize));
    field!(top_logprobs -> usize = |v| uint(&v, "topLogprobs", 0, U32).map(|n| n as usize));
    field!(ignore_eos -> bool = |v| boolean(&v, "ignoreEos"));
    field!(reuse_prompt -> bool = |v| boolean(&v, "reusePrompt"));
    field!(n -> usize = |v| uint(&v, "n", 1, 64).map(|n| n as usize));
    field!(num_beams -> usize = |v| uint(&v, "numBeams", 1, 64).map(|n| n as usize));
    field!(length_penalty -> f32 = |v| num(&v, "lengthPenalty", -100.0, 100.0));
    field!(stop -> Vec<String> = |v| strings(&v, "stop"));
    field!(taps -> Vec<String> = |v| strings(&v, "taps"));
    field!(logit_bias -> Vec<(u32, f32)> = |v| {
        let Value::Object(m) = &v else {
            return Err(format!("logitBias must be an object {{ id: bias }}, got {v}"));
        };
        m.iter()
            .map(|(k, b)| {
                let id: u32 = k.parse().map_err(|_| format!("logitBias key {k:?} is not a token id"))?;
                let bias = match b {
                    Value::String(s) if s == "-Infinity" => f32::NEG_INFINITY,
                    b => match b.as_f64() {
                        Some(x) if x.is_finite() => x as f32,
                        _ => return Err(format!("logitBias[{k}] must be a finite number or -Infinity, got {b}")),
                    },
                };
                Ok((id, bias))
            })
            .collect()
    });

    pub fn strings(v: &Value, key: &str) -> Result<Vec<String>, String> {
        match v {
            Value::Null => Ok(Vec::new()),
            Value::String(s) => Ok(alloc::vec![s.clone()]),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    v => Err(format!("{key}[{i}] must be a string, got {v}")),
                })
                .collect(),
            v => Err(format!("{key} must be an array of strings, got {v}")),
        }
    }
}

pub const SCORE_WHAT: &str = "score options";
pub const TRACE_WHAT: &str = "trace options";

/// `score`'s options (see [`score_options`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScoreOptions {
    /// The top entries per row.
    pub top_k: usize,
    /// Interventions at TransformerLens's hook points, at every position (no `pos`).
    pub hooks: Vec<Hook>,
}

// ts: export ScoreParams
/// `score`'s options as they cross (unknown keys refused, as everywhere).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScoreParams {
    /// The most likely tokens to list per position (default 0).
    #[serde(default, deserialize_with = "de::top_k")]
    pub top_k: Option<usize>,
    /// Interventions at TransformerLens hook points ([`Hook`]), applied at every position (no
    /// `pos`), as generate's: the scores of the hooked model. The prompt cache is reused only
    /// under the same hooks.
    #[serde(default)]
    pub hooks: Option<Vec<Hook>>,
}

/// `score`'s options ([`ScoreParams`]), defaults filled in.
pub fn score_options(v: Value) -> Result<ScoreOptions, ModelError> {
    let p: ScoreParams = from_value(SCORE_WHAT, v)?;
    Ok(ScoreOptions { top_k: p.top_k.unwrap_or(0), hooks: p.hooks.unwrap_or_default() })
}

// ts: export TraceParams
/// `trace`'s options as they cross: the taps, at least one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TraceParams {
    /// 'attn', 'hidden', graph node names by their ggml names ('l3.ffn_gelu', 'l0.kq_soft_max',
    /// ...) and/or TransformerLens hook names ('blocks.0.attn.hook_pattern',
    /// 'ln_final.hook_scale', ...; nodes keep that name).
    // ts: string[]
    #[serde(default, deserialize_with = "de::taps")]
    pub taps: Option<Vec<String>>,
}

/// `trace`'s taps ([`TraceParams`]); none is an error.
pub fn trace_options(v: Value) -> Result<Vec<String>, ModelError> {
    let taps = from_value::<TraceParams>(TRACE_WHAT, v)?.taps.unwrap_or_default();
    if taps.is_empty() {
        return Err(invalid(
            "trace options: taps must name at least one tap ('attn', 'hidden' or a graph node)".into(),
        ));
    }
    Ok(taps)
}

/// [`score_options`] from JSON text.
pub fn parse_score(json: &str) -> Result<ScoreOptions, ModelError> {
    score_options(json_value(SCORE_WHAT, json)?)
}

/// [`trace_options`] from JSON text.
pub fn parse_trace(json: &str) -> Result<Vec<String>, ModelError> {
    trace_options(json_value(TRACE_WHAT, json)?)
}

// ts: export RunParams
/// `run`'s options: hook points to capture (TransformerLens names, `*` within a part) and
/// interventions ([`Hook`]).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunParams {
    #[serde(default)]
    pub capture: Option<Vec<String>>,
    #[serde(default)]
    pub hooks: Option<Vec<Hook>>,
    /// A backward pass: the metric `of` and the hook points (`wrt`) whose gradient is returned.
    #[serde(default)]
    pub grad: Option<GradSpec>,
}

// ts: export PatchParams
/// `patch`'s options: the activation swept and the metric's two tokens.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PatchParams {
    // ts: 'resid_pre' | 'attn_out' | 'mlp_out' | 'z'
    pub at: String,
    pub answer: u32,
    pub against: u32,
    /// 'exact' (the default: every cell a patched pass) or 'attribution' (first-order
    /// estimates from one forward pass of each prompt and one backward pass).
    // ts: 'exact' | 'attribution'
    #[serde(default)]
    pub method: Option<String>,
}

// ts: export SaliencyParams
/// `saliency`'s options: the metric, the method and integrated gradients' steps (default 32).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SaliencyParams {
    // ts: Metric
    pub of: Metric,
    // ts: 'gradient' | 'gradientXInput' | 'integratedGradients'
    pub method: String,
    #[serde(default)]
    pub steps: Option<u32>,
}

// ts: export TopKParams
/// `logitLens`'s and `sae.encode`'s options: the top entries per position (default 5).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TopKParams {
    #[serde(default)]
    pub top_k: Option<u32>,
}

// ts: export AttributeParams
/// `attribute`'s options: the logit difference `answer − against` at `pos` (default −1).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AttributeParams {
    pub answer: u32,
    pub against: u32,
    #[serde(default)]
    pub pos: Option<i64>,
}

// ts: export TrainOptimizer
/// `train`'s `optimizer`: PyTorch's `AdamW` (decoupled decay, bias correction; defaults beta1
/// 0.9, beta2 0.999, eps 1e-8, weightDecay 0.01) or `SGD` (coupled L2 decay; momentum and
/// weightDecay 0); weight decay applies to tensors of two or more dimensions (matrices and
/// embeddings), not to biases or LayerNorm gains.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum TrainOptimizer {
    Adamw {
        lr: f32,
        #[serde(default)]
        beta1: Option<f32>,
        #[serde(default)]
        beta2: Option<f32>,
        #[serde(default)]
        eps: Option<f32>,
        #[serde(default, rename = "weightDecay")]
        weight_decay: Option<f32>,
    },
    Sgd {
        lr: f32,
        #[serde(default)]
        momentum: Option<f32>,
        #[serde(default, rename = "weightDecay")]
        weight_decay: Option<f32>,
    },
}

// ts: export LrSchedule
/// `train`'s `lrSchedule`: a linear warmup over `warmup` updates (default 0), then the decay
/// (Hugging Face's `get_{cosine,linear,constant}_schedule_with_warmup` over `steps`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LrScheduleParams {
    #[serde(default)]
    pub warmup: Option<u32>,
    // ts: 'cosine' | 'linear' | 'none'
    pub decay: String,
}

// ts: export TrainParams
/// `train`'s options (`signal` is the JS side's): `steps` required; `seqLen` default
/// `min(nCtx, 128)`, `batchSize` 1, `optimizer` AdamW with lr 5e-5 (Hugging Face Trainer's).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TrainParams {
    /// Tokens per training sequence (2..=nCtx; default min(nCtx, 128)).
    #[serde(default)]
    pub seq_len: Option<u32>,
    /// Sequences per update (default 1); the loss is their mean.
    #[serde(default)]
    pub batch_size: Option<u32>,
    /// Optimizer updates to run.
    pub steps: u32,
    // ts: TrainOptimizer
    #[serde(default)]
    pub optimizer: Option<TrainOptimizer>,
    /// Clip the gradient to this global L2 norm (PyTorch's `clip_grad_norm_`).
    #[serde(default)]
    pub grad_clip: Option<f32>,
    // ts: LrSchedule
    #[serde(default)]
    pub lr_schedule: Option<LrScheduleParams>,
    /// For what draws random numbers: a new LoRA adapter's A (full training draws none).
    #[serde(default)]
    pub seed: Option<u64>,
    // ts: LoraParams
    /// Train a low-rank adapter instead of the weights.
    #[serde(default)]
    pub lora: Option<LoraParams>,
}

// ts: export LoraParams
/// `train`'s `lora`: an adapter `W·x + (alpha/rank)·B·A·x` beside each `targets` weight of
/// every block; `alpha` defaults to `rank`, `targets` to `['attn_qkv']`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraParams {
    pub rank: u32,
    #[serde(default)]
    pub alpha: Option<f32>,
    // ts: ('attn_qkv' | 'attn_output' | 'ffn_up' | 'ffn_down')[]
    #[serde(default)]
    pub targets: Option<Vec<String>>,
}

// ts: export SaveLoraParams
/// `saveLora`'s options: the tensors' type, `'f32'` (the default) or `'f16'`; `optimizer:
/// true` makes the file a ggweb checkpoint: the adapter's optimizer state (AdamW's m and v or
/// SGD's momentum per tensor, the update count, the hyper-parameters and the data position)
/// beside it, which `Model.load(base, { lora })` reads back and the next `train` of that
/// adapter resumes. llama.cpp refuses such a file (a tensor that is not `.lora_a`/`.lora_b`):
/// save without `optimizer` for llama.cpp.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveLoraParams {
    // ts: 'f32' | 'f16'
    #[serde(default, rename = "type")]
    pub ty: Option<String>,
    #[serde(default)]
    pub optimizer: Option<bool>,
}

impl SaveLoraParams {
    pub fn ty(&self) -> Result<crate::types::GgmlType, ModelError> {
        match self.ty.as_deref() {
            None | Some("f32") => Ok(crate::types::GgmlType::F32),
            Some("f16") => Ok(crate::types::GgmlType::F16),
            Some(t) => Err(invalid(format!("saveLora: type must be 'f32' or 'f16', got {t:?}"))),
        }
    }
}

/// The learning rate of `train` without an `optimizer`.
pub const DEFAULT_TRAIN_LR: f32 = 5e-5;

impl TrainParams {
    /// The run's settings with the defaults filled in and every value checked against a
    /// context of `n_ctx` (`invalid` naming the option).
    pub fn config(&self, n_ctx: usize) -> Result<crate::model::train::TrainConfig, ModelError> {
        use crate::model::train::{Decay, LrSchedule, Optimizer, TrainConfig};
        let optimizer = match self.optimizer.clone() {
            None => Optimizer::AdamW { lr: DEFAULT_TRAIN_LR, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 },
            Some(TrainOptimizer::Adamw { lr, beta1, beta2, eps, weight_decay }) => Optimizer::AdamW {
                lr,
                beta1: beta1.unwrap_or(0.9),
                beta2: beta2.unwrap_or(0.999),
                eps: eps.unwrap_or(1e-8),
                weight_decay: weight_decay.unwrap_or(0.01),
            },
            Some(TrainOptimizer::Sgd { lr, momentum, weight_decay }) => {
                Optimizer::Sgd { lr, momentum: momentum.unwrap_or(0.0), weight_decay: weight_decay.unwrap_or(0.0) }
            }
        };
        let schedule = match &self.lr_schedule {
            None => None,
            Some(s) => Some(LrSchedule {
                warmup: s.warmup.unwrap_or(0),
                decay: match s.decay.as_str() {
                    "cosine" => Decay::Cosine,
                    "linear" => Decay::Linear,
                    "none" => Decay::None,
                    d => {
                        return Err(invalid(format!(
                            "lrSchedule.decay must be 'cosine', 'linear' or 'none', got {d:?}"
                        )))
                    }
                },
            }),
        };
        let cfg = TrainConfig {
            seq_len: self.seq_len.map_or(n_ctx.min(128), |n| n as usize),
            batch_size: self.batch_size.map_or(1, |n| n as usize),
            steps: self.steps,
            optimizer,
            grad_clip: self.grad_clip,
            schedule,
            seed: self.seed.unwrap_or(0),
            lora: match &self.lora {
                None => None,
                Some(l) => Some(crate::model::lora::LoraConfig::new(l.rank, l.alpha, l.targets.as_deref())?),
            },
        };
        cfg.check(n_ctx)?;
        Ok(cfg)
    }
}

// ts: export SaveParams
/// `save`'s options: `type` the matrices' type in the file (default 'f32'; norms, biases and
/// `position_embd` stay F32, as llama.cpp writes them); `optimizer: true` makes the file a
/// ggweb checkpoint: the model's optimizer state from its last `train` (AdamW's m and v or
/// SGD's momentum per weight, the update count, the hyper-parameters and the data position;
/// type 'f32' or 'f16'), which `Model.load` reads back and the next `train` resumes: 10
/// updates, save, load, 10 more give the 20-update run's losses and weights. llama.cpp refuses
/// such a file (it checks the tensor count): save without `optimizer` for llama.cpp.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveParams {
    // ts: 'f32' | 'f16' | 'q8_0'
    #[serde(default, rename = "type")]
    pub ty: Option<String>,
    #[serde(default)]
    pub optimizer: Option<bool>,
}

impl SaveParams {
    /// The checked type (`invalid` naming the value).
    pub fn save_type(&self) -> Result<crate::model::export::SaveType, ModelError> {
        crate::model::export::SaveType::parse(self.ty.as_deref().unwrap_or("f32"))
    }
}
