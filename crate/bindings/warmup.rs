//! Warm-up of the compute kernels while a model streams in.
//!
//! V8 compiles wasm functions lazily with its baseline compiler (Liftoff) and recompiles a
//! function with TurboFan only once it has run for a while, in a background thread. Without
//! a warm-up, the first prompt after a load runs the mul_mat tiles, norm, gelu and softmax
//! in Liftoff code (measured ~1.9× slower than the later prompts, BENCHMARKS.md). So while
//! the file downloads, [`Warmup::step`] runs a one-block GPT-2 of the same weight, output and
//! KV types on the CPU: the same graph builder, scheduler and kernels as the real model,
//! on a model of its own (its own weights, KV cache and compute buffer, dropped at
//! `finish`). The loading model's state is never touched, so results cannot change.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use crate::cpu::CpuBackend;
use crate::gguf::{GgufArray, GgufHeader, GgufValue, GgufWriter};
use crate::model::context::{block_on, Batch, Gpt2, Gpt2Options};
use crate::model::gpt2::{global_weight_shapes, layer_weight_shapes, Hparams};
use crate::model::loader::load_from_bytes_on;
use crate::model::ModelError;
use crate::quants;
use crate::GgmlType;

/// Head size as GPT-2's (the attention loops run over it); two heads, or four where a K-quant's
/// 256-element blocks need rows of 256; one block.
const HEAD_DIM: usize = 64;
const N_VOCAB: usize = 256;
const N_CTX: usize = 64;
/// A prompt-sized run (mul_mat's row tiles) and decode-sized runs (one row) per step.
const PROMPT: usize = 32;
const DECODE: usize = 2;
/// Steps to run: V8's tier-up budget of every function on the path is spent within them.
/// Measured (BENCHMARKS.md): 5 and 8 steps both bring the first prompt within 1.05× of the
/// later ones; most of the warm-up's 35-60 ms is its first step (Liftoff code, the model).
pub const STEPS: u32 = 5;

/// The types a warm-up model needs: those of the file's 2-D weights, its output matrix and
/// the KV cache.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarmTypes {
    pub weight: GgmlType,
    pub embd: GgmlType,
    pub output: GgmlType,
    pub kv: GgmlType,
}

impl WarmTypes {
    /// Read off a GPT-2 header (types of `blk.0.attn_qkv.weight`, `token_embd.weight` and
    /// `output.weight`, which defaults to the embeddings as in a tied model).
    pub fn from_header(h: &GgufHeader, kv: GgmlType) -> Option<WarmTypes> {
        let ty = |n: &str| h.tensor_info(n).map(|t| t.ty);
        let embd = ty("token_embd.weight")?;
        Some(WarmTypes { weight: ty("blk.0.attn_qkv.weight")?, embd, output: ty("output.weight").unwrap_or(embd), kv })
    }
}

/// A small GPT-2 on the CPU, run a few times to get its kernels compiled by the top tier.
pub struct Warmup {
    model: Gpt2,
    steps: u32,
}

/// Deterministic values in [-0.05, 0.05): what the weights are does not matter, only that
/// the kernels see ordinary finite numbers (no denormal or NaN slow paths).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as f32 / (1u32 << 24) as f32 * 0.1 - 0.05
        })
        .collect()
}

/// `n` weights of a type this crate cannot quantize (the K-quants, which no activation needs):
/// any bytes make valid blocks as long as the f16 scales are finite, and with every byte at
/// most 0x3B each f16 in them is positive and below 1 (sign 0, exponent at most 14).
fn blocks_without_quantizer(ty: GgmlType, n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_246_822_519) | 1;
    (0..ty.type_size() * n / ty.blck_size())
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8 & 0x3B
        })
        .collect()
}

/// The 256 byte tokens of GPT-2's byte-level BPE (a byte printable in Latin-1 is itself, the
/// others map to U+0100 on, in byte order), the least vocabulary its tokenizer accepts.
fn byte_tokens() -> Vec<String> {
    let mut next = 0x100;
    (0u32..N_VOCAB as u32)
        .map(|b| {
            let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
            let c = if printable {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(c).map_or_else(String::new, String::from)
        })
        .collect()
}

impl Warmup {
    pub fn new(t: WarmTypes) -> Result<Warmup, ModelError> {
        let fail = |e: String| ModelError::Format(format!("warm-up model: {e}"));
        let n_embd = [t.weight, t.embd, t.output].iter().map(|ty| ty.blck_size()).fold(2 * HEAD_DIM, usize::max);
        let mut w = GgufWriter::new();
        let u = |v: usize| GgufValue::U32(v as u32);
        let kvs = [
            ("general.architecture", GgufValue::String("gpt2".into())),
            ("gpt2.block_count", u(1)),
            ("gpt2.context_length", u(N_CTX)),
            ("gpt2.embedding_length", u(n_embd)),
            ("gpt2.feed_forward_length", u(4 * n_embd)),
            ("gpt2.attention.head_count", u(n_embd / HEAD_DIM)),
            ("gpt2.attention.layer_norm_epsilon", GgufValue::F32(1e-5)),
            ("tokenizer.ggml.model", GgufValue::String("gpt2".into())),
            ("tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(byte_tokens()))),
            ("tokenizer.ggml.merges", GgufValue::Array(GgufArray::String(Vec::new()))),
        ];
        for (k, v) in kvs {
            w.add_kv(k, v).map_err(|e| fail(format!("{e}")))?;
        }
        let mut seed = 0;
        let mut add = |name: &str, ne: &[usize], ty: GgmlType, mean: f32| -> Result<(), ModelError> {
            seed += 1;
            let n: usize = ne.iter().product();
            let vals: Vec<f32> = values(n, seed).into_iter().map(|v| v + mean).collect();
            let data = if quants::can_quantize(ty) {
                quants::quantize(ty, &vals).map_err(|e| fail(format!("{name}: {e}")))?
            } else {
                blocks_without_quantizer(ty, n, seed)
            };
            let ne: Vec<i64> = ne.iter().map(|&x| x as i64).collect();
            w.add_tensor(name, ty, &ne, data).map_err(|e| fail(format!("{name}: {e}")))
        };
        // GPT-2's own tensor schema: 2-D weights of the file's types, 1-D ones f32 (norm
        // weights around 1, as trained ones are).
        let hp = Hparams {
            n_vocab: N_VOCAB,
            n_ctx_train: N_CTX,
            n_embd,
            n_head: n_embd / HEAD_DIM,
            n_layer: 1,
            n_ff: 4 * n_embd,
            eps: 1e-5,
        };
        let shape = |ne: [i64; 4]| ne.iter().take_while(|&&d| d > 1).map(|&d| d as usize).collect::<Vec<_>>();
        for (name, ne) in global_weight_shapes(&hp) {
            let ty = match name {
                "token_embd.weight" => t.embd,
                "output.weight" if t.output == t.embd => continue, // tied
                "output.weight" => t.output,
                _ => GgmlType::F32,
            };
            add(name, &shape(ne), ty, if name == "output_norm.weight" { 1.0 } else { 0.0 })?;
        }
        for (name, ne) in layer_weight_shapes(&hp) {
            let ty = if ne[1] > 1 { t.weight } else { GgmlType::F32 };
            add(&format!("blk.0.{name}"), &shape(ne), ty, if name.ends_with("norm.weight") { 1.0 } else { 0.0 })?;
        }
        let bytes = w.to_bytes();
        // One thread: the warm-up must not start (or wait for) the real model's worker pool;
        // code compiled by the top tier serves every thread of the module alike.
        let opts = Gpt2Options { n_ctx: N_CTX, n_batch: PROMPT, n_threads: 1, kv_type: t.kv, ..Default::default() };
        let model = load_from_bytes_on(&bytes, Rc::new(CpuBackend::new(1)), opts)?.model;
        Ok(Warmup { model, steps: 0 })
    }

    /// One prompt-sized run and a few one-token runs (a few ms); true once [`STEPS`] are done.
    pub fn step(&mut self) -> Result<bool, ModelError> {
        if self.steps >= STEPS {
            return Ok(true);
        }
        let ids: Vec<u32> = (0..PROMPT as u32).map(|i| (i * 7 + self.steps) % N_VOCAB as u32).collect();
        block_on(self.model.decode(Batch::last(&ids, 0)))?;
        for k in 0..DECODE {
            block_on(self.model.decode(Batch::last(&ids[k..k + 1], PROMPT + k)))?;
        }
        self.steps += 1;
        Ok(self.steps >= STEPS)
    }
}
