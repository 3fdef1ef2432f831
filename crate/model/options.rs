//! The one parser of the JS API's options (JSON objects, through serde_json): strict, so a
//! misspelt or unsupported key fails (`ModelError::Invalid`, code `invalid` in JS) naming
//! the key instead of being ignored. `Model.load`'s runtime options are read by the
//! bindings with the same helpers ([`parse_object`], [`opt_uint`], [`opt_num`]).
//!
//! ```
//! use ggweb::model::options::parse_generate;
//! let o = parse_generate(r#"{"maxTokens":4,"temperature":0,"stop":["\n"],"logitBias":{"50256":"-Infinity"}}"#).unwrap();
//! assert_eq!((o.max_tokens, o.stop.len(), o.logit_bias[0]), (4, 1, (50256, f32::NEG_INFINITY)));
//! assert!(parse_generate(r#"{"ctx":512}"#).unwrap_err().to_string().contains("\"ctx\""));
//! ```

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value};

use super::sampling::SamplingParams;
use super::session::GenerateOptions;
use super::ModelError;
use crate::types::GgmlType;

fn invalid(msg: String) -> ModelError {
    ModelError::Invalid(msg)
}

/// Keys `generate` reads (besides `special` and `signal`, which the JS side takes).
pub const GENERATE_KEYS: [&str; 16] = [
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
pub const SCORE_KEYS: [&str; 1] = ["topK"];
pub const TRACE_KEYS: [&str; 1] = ["taps"];

/// A JSON object whose keys are all in `known`.
pub fn parse_object(what: &str, json: &str, known: &[&str]) -> Result<Map<String, Value>, ModelError> {
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
pub fn opt_uint(
    map: &Map<String, Value>,
    what: &str,
    key: &str,
    min: u64,
    max: u64,
) -> Result<Option<u64>, ModelError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(invalid(format!("{what}: {key} must be an integer from {min} to {max}, got {v}"))),
        },
    }
}

/// A finite number option in `min..=max` (`max` may be infinite: no upper bound), or None.
pub fn opt_num(map: &Map<String, Value>, what: &str, key: &str, min: f64, max: f64) -> Result<Option<f64>, ModelError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x >= min && x <= max => Ok(Some(x)),
            _ if max.is_infinite() => Err(invalid(format!("{what}: {key} must be a finite number >= {min}, got {v}"))),
            _ => Err(invalid(format!("{what}: {key} must be a number from {min} to {max}, got {v}"))),
        },
    }
}

fn opt_bool(map: &Map<String, Value>, what: &str, key: &str) -> Result<Option<bool>, ModelError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(invalid(format!("{what}: {key} must be true or false, got {v}"))),
    }
}

fn opt_strings(map: &Map<String, Value>, what: &str, key: &str) -> Result<Vec<String>, ModelError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(alloc::vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(invalid(format!("{what}: {key}[{i}] must be a string, got {v}"))),
            })
            .collect(),
        Some(v) => Err(invalid(format!("{what}: {key} must be an array of strings, got {v}"))),
    }
}

/// A KV cache type by name: `"f32"` or `"f16"` (`kvType` in JS, `--kv-type` in the CLI).
pub fn parse_kv_type(what: &str, s: &str) -> Result<GgmlType, ModelError> {
    match s {
        "f32" => Ok(GgmlType::F32),
        "f16" => Ok(GgmlType::F16),
        _ => Err(invalid(format!("{what} must be \"f16\" or \"f32\", got {s:?}"))),
    }
}

/// The `kvType` option (see [`parse_kv_type`]), or None when absent or null.
pub fn opt_kv_type(map: &Map<String, Value>, what: &str, key: &str) -> Result<Option<GgmlType>, ModelError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse_kv_type(&format!("{what}: {key}"), s).map(Some),
        Some(v) => Err(invalid(format!("{what}: {key} must be \"f16\" or \"f32\", got {v}"))),
    }
}

/// `generate`'s options. `logitBias` is `{ "id": bias }` where a bias is a number or
/// `"-Infinity"` (JSON has no infinity; the JS side writes −Infinity so).
pub fn parse_generate(json: &str) -> Result<GenerateOptions, ModelError> {
    const WHAT: &str = "generation options";
    let map = parse_object(WHAT, json, &GENERATE_KEYS)?;
    // Absent keys take GenerateOptions::default()'s values: the one place defaults live.
    let dg = GenerateOptions::default();
    let d = &dg.sampling;
    let max = u32::MAX as u64;
    let repeat_penalty = opt_num(&map, WHAT, "repeatPenalty", 0.0, f64::INFINITY)?;
    if repeat_penalty == Some(0.0) {
        // It divides positive logits.
        return Err(invalid(format!("{WHAT}: repeatPenalty must be greater than 0 (1 disables it), got 0")));
    }
    let sampling = SamplingParams {
        temperature: opt_num(&map, WHAT, "temperature", 0.0, f64::INFINITY)?.map_or(d.temperature, |x| x as f32),
        top_k: opt_uint(&map, WHAT, "topK", 0, max)?.map_or(d.top_k, |n| n as usize),
        top_p: opt_num(&map, WHAT, "topP", 0.0, 1.0)?.map_or(d.top_p, |x| x as f32),
        min_p: opt_num(&map, WHAT, "minP", 0.0, 1.0)?.map_or(d.min_p, |x| x as f32),
        repeat_penalty: repeat_penalty.map_or(d.repeat_penalty, |x| x as f32),
        repeat_last_n: opt_uint(&map, WHAT, "repeatLastN", 0, max)?.map_or(d.repeat_last_n, |n| n as usize),
        seed: opt_uint(&map, WHAT, "seed", 0, u64::MAX)?.unwrap_or(d.seed),
    };
    // Sequences (sampled) and beams (searched): one or the other, at most 64 (the KV cache's
    // sequence ids are a u64 bitset).
    let n = opt_uint(&map, WHAT, "n", 1, 64)?.map_or(dg.n, |x| x as usize);
    let num_beams = opt_uint(&map, WHAT, "numBeams", 1, 64)?.map_or(dg.num_beams, |x| x as usize);
    if n > 1 && num_beams > 1 {
        return Err(invalid(format!("{WHAT}: n ({n}) and numBeams ({num_beams}) cannot both be above 1")));
    }
    let mut logit_bias = Vec::new();
    match map.get("logitBias") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let id: u32 =
                    k.parse().map_err(|_| invalid(format!("{WHAT}: logitBias key {k:?} is not a token id")))?;
                let bias = match v {
                    Value::String(s) if s == "-Infinity" => f32::NEG_INFINITY,
                    v => match v.as_f64() {
                        Some(x) if x.is_finite() => x as f32,
                        _ => {
                            return Err(invalid(format!(
                                "{WHAT}: logitBias[{k}] must be a finite number or -Infinity, got {v}"
                            )))
                        }
                    },
                };
                logit_bias.push((id, bias));
            }
        }
        Some(v) => return Err(invalid(format!("{WHAT}: logitBias must be an object {{ id: bias }}, got {v}"))),
    }
    Ok(GenerateOptions {
        max_tokens: opt_uint(&map, WHAT, "maxTokens", 0, max)?.map_or(dg.max_tokens, |n| n as usize),
        sampling,
        logit_bias,
        ignore_eos: opt_bool(&map, WHAT, "ignoreEos")?.unwrap_or(dg.ignore_eos),
        stop: opt_strings(&map, WHAT, "stop")?,
        top_logprobs: opt_uint(&map, WHAT, "topLogprobs", 0, max)?.map_or(dg.top_logprobs, |n| n as usize),
        reuse_prompt: opt_bool(&map, WHAT, "reusePrompt")?.unwrap_or(dg.reuse_prompt),
        n,
        num_beams,
        length_penalty: opt_num(&map, WHAT, "lengthPenalty", -100.0, 100.0)?.map_or(dg.length_penalty, |x| x as f32),
    })
}

/// `score`'s options: the `topK` entries per row.
pub fn parse_score(json: &str) -> Result<usize, ModelError> {
    let map = parse_object("score options", json, &SCORE_KEYS)?;
    Ok(opt_uint(&map, "score options", "topK", 0, u32::MAX as u64)?.unwrap_or(0) as usize)
}

/// `trace`'s options: the taps (`attn`, `hidden`, or ggml node names); at least one.
pub fn parse_trace(json: &str) -> Result<Vec<String>, ModelError> {
    let map = parse_object("trace options", json, &TRACE_KEYS)?;
    let taps = opt_strings(&map, "trace options", "taps")?;
    if taps.is_empty() {
        return Err(invalid(
            "trace options: taps must name at least one tap ('attn', 'hidden' or a graph node)".into(),
        ));
    }
    Ok(taps)
}
