//! A tiny GPT-2 GGUF written in memory: the 256 byte tokens (plus a few merges and
//! `<|endoftext|>`), every weight GPT-2 needs at the requested sizes, deterministic values.
//! Shared by tests/loader/model_budget.rs and the fuzz crate's seed generator (`#[path]`-included
//! there), so it uses only ggweb's public API.
#![allow(dead_code)]

use ggweb::gguf::{GgufArray, GgufValue, GgufWriter};
use ggweb::model::gpt2::{global_weight_shapes, layer_weight_shapes, Hparams};
use ggweb::tokenizer::byte_to_char;
use ggweb::types::GgmlType;

#[derive(Clone, Copy, Debug)]
pub struct TinySpec {
    pub n_embd: i64,
    pub n_head: u32,
    pub n_layer: u32,
    pub n_ff: i64,
    pub n_ctx: i64,
    /// Type of the 2-D weights (`token_embd`, projections); norms, biases and
    /// `position_embd` stay F32 as llama.cpp's converter writes them.
    pub ty: GgmlType,
}

impl Default for TinySpec {
    fn default() -> TinySpec {
        TinySpec { n_embd: 4, n_head: 2, n_layer: 1, n_ff: 8, n_ctx: 8, ty: GgmlType::F32 }
    }
}

/// The vocabulary: 256 byte tokens, then what [`MERGES`] make, then `<|endoftext|>`.
pub const MERGES: [&str; 4] = ["Ġ t", "h e", "Ġt he", "l l"];

pub fn tokens() -> Vec<String> {
    let mut t: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    t.extend(["Ġt", "he", "Ġthe", "ll"].map(String::from));
    t.push("<|endoftext|>".into());
    t
}

/// Bytes of `n` values of `ty` (F32/F16 from a smooth deterministic sequence; block types
/// as valid blocks of small values).
pub fn values(ty: GgmlType, n: usize, seed: u32) -> Vec<u8> {
    let v = |i: usize| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0;
    match ty {
        GgmlType::F32 => (0..n).flat_map(|i| (v(i) * 0.2).to_le_bytes()).collect(),
        GgmlType::F16 => (0..n).flat_map(|i| half::f16::from_f32(v(i) * 0.2).to_le_bytes()).collect(),
        GgmlType::Q8_0 => {
            // Block: f16 scale, 32 i8.
            let mut out = Vec::new();
            for b in 0..n / 32 {
                out.extend_from_slice(&half::f16::from_f32(0.01).to_le_bytes());
                out.extend((0..32).map(|j| (v(b * 32 + j) * 100.0) as i8 as u8));
            }
            out
        }
        GgmlType::Q4_0 => {
            // Block: f16 scale, 16 bytes of nibbles.
            let mut out = Vec::new();
            for b in 0..n / 32 {
                out.extend_from_slice(&half::f16::from_f32(0.02).to_le_bytes());
                out.extend((0..16).map(|j| ((b + j) % 256) as u8));
            }
            out
        }
        other => panic!("values: no generator for {other}"),
    }
}

/// The whole file.
pub fn tiny_gpt2(s: TinySpec) -> Vec<u8> {
    let toks = tokens();
    let n_vocab = toks.len() as i64;
    let mut w = GgufWriter::new();
    let kv = |w: &mut GgufWriter, k: &str, v: GgufValue| w.add_kv(k, v).unwrap();
    kv(&mut w, "general.architecture", GgufValue::String("gpt2".into()));
    kv(&mut w, "gpt2.block_count", GgufValue::U32(s.n_layer));
    kv(&mut w, "gpt2.context_length", GgufValue::U32(s.n_ctx as u32));
    kv(&mut w, "gpt2.embedding_length", GgufValue::U32(s.n_embd as u32));
    kv(&mut w, "gpt2.feed_forward_length", GgufValue::U32(s.n_ff as u32));
    kv(&mut w, "gpt2.attention.head_count", GgufValue::U32(s.n_head));
    kv(&mut w, "gpt2.attention.layer_norm_epsilon", GgufValue::F32(1e-5));
    kv(&mut w, "tokenizer.ggml.model", GgufValue::String("gpt2".into()));
    let mut types = vec![1i32; toks.len()];
    *types.last_mut().unwrap() = 3; // control
    kv(&mut w, "tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(toks)));
    kv(&mut w, "tokenizer.ggml.token_type", GgufValue::Array(GgufArray::I32(types)));
    kv(&mut w, "tokenizer.ggml.merges", GgufValue::Array(GgufArray::String(MERGES.map(String::from).to_vec())));
    kv(&mut w, "tokenizer.ggml.bos_token_id", GgufValue::U32(n_vocab as u32 - 1));
    kv(&mut w, "tokenizer.ggml.eos_token_id", GgufValue::U32(n_vocab as u32 - 1));

    let (e, f) = (s.n_embd, s.n_ff);
    let mut seed = 0u32;
    let mut add = |w: &mut GgufWriter, name: &str, ty: GgmlType, ne: &[i64]| {
        seed += 1;
        let n = ne.iter().product::<i64>() as usize;
        w.add_tensor(name, ty, ne, values(ty, n, seed)).unwrap();
    };
    // GPT-2's tensor schema (ggweb::model::gpt2), without `output.weight` (tied), the
    // output norm last.
    let hp = Hparams {
        n_vocab: n_vocab as usize,
        n_ctx_train: s.n_ctx as usize,
        n_embd: e as usize,
        n_head: s.n_head as usize,
        n_layer: s.n_layer as usize,
        n_ff: f as usize,
        eps: 1e-5,
    };
    let dims = |ne: [i64; 4]| -> Vec<i64> { ne.into_iter().take_while(|&d| d > 1).collect() };
    let globals = global_weight_shapes(&hp);
    for (name, ne) in &globals[..2] {
        add(&mut w, name, if *name == "token_embd.weight" { s.ty } else { GgmlType::F32 }, &dims(*ne));
    }
    for il in 0..s.n_layer {
        for (name, ne) in layer_weight_shapes(&hp) {
            let ty = if ne[1] > 1 { s.ty } else { GgmlType::F32 };
            add(&mut w, &format!("blk.{il}.{name}"), ty, &dims(ne));
        }
    }
    for (name, ne) in &globals[2..4] {
        add(&mut w, name, GgmlType::F32, &dims(*ne));
    }
    w.to_bytes()
}
