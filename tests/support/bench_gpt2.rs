//! GPT-2-shaped GGUFs of the whole family (124M, medium, large, XL) with seeded random
//! weights and the real tokenizer: the metadata (vocabulary, merges, special ids) is copied
//! from a reference GGUF, so the files load and tokenize like the released models. Their
//! outputs mean nothing; they are for memory, speed and native-vs-wasm agreement.
//! Shared by examples/make_bench_models.rs and tests/model/scale_medium.rs (`#[path]`-included,
//! with `crate::support::rng` beside it), so it uses only ggweb's public API.
//!
//! Layout as llama.cpp writes GPT-2: 2-D weights in the file's type, biases, norms and
//! `position_embd` in F32, a separate `output.weight`. The Q4_0 file keeps `output.weight`
//! in Q8_0. Weights are N(0, 0.02) as GPT-2's init (the residual projections scaled by
//! 1/sqrt(2 · n_layer), as there): with LayerNorm before every block and before the head, the
//! logits' spread stays ~0.02·sqrt(n_embd) (0.6-0.8) at every size.
#![allow(dead_code)]

use ggweb::gguf::{GgufHeader, GgufValue, GgufWriter};
use ggweb::model::gpt2::{global_weight_shapes, layer_weight_shapes, Hparams};
use ggweb::quants;
use ggweb::GgmlType;

use crate::support::rng::Rng;

pub const N_CTX: usize = 1024;
pub const N_VOCAB: usize = 50257;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub name: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
}

/// GPT-2's released sizes (n_ff = 4 · n_embd, head size 64 throughout).
pub const SHAPES: [Shape; 4] = [
    Shape { name: "124m", n_layer: 12, n_embd: 768, n_head: 12 },
    Shape { name: "medium", n_layer: 24, n_embd: 1024, n_head: 16 },
    Shape { name: "large", n_layer: 36, n_embd: 1280, n_head: 20 },
    Shape { name: "xl", n_layer: 48, n_embd: 1600, n_head: 25 },
];

pub fn shape(name: &str) -> Option<Shape> {
    SHAPES.iter().copied().find(|s| s.name == name)
}

/// A file type this generator writes: its name in file names, the 2-D weights' type,
/// `output.weight`'s type, and `general.file_type` (llama_ftype).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileType {
    pub name: &'static str,
    pub weights: GgmlType,
    pub output: GgmlType,
    pub ftype: u32,
}

pub const TYPES: [FileType; 4] = [
    FileType { name: "f32", weights: GgmlType::F32, output: GgmlType::F32, ftype: 0 },
    FileType { name: "f16", weights: GgmlType::F16, output: GgmlType::F16, ftype: 1 },
    FileType { name: "q8_0", weights: GgmlType::Q8_0, output: GgmlType::Q8_0, ftype: 7 },
    FileType { name: "q4_0", weights: GgmlType::Q4_0, output: GgmlType::Q8_0, ftype: 2 },
];

pub fn file_type(name: &str) -> Option<FileType> {
    TYPES.iter().copied().find(|t| t.name == name)
}

/// `bench-<shape>-<type>.gguf`.
pub fn file_name(shape: &Shape, ty: &FileType) -> String {
    format!("bench-{}-{}.gguf", shape.name, ty.name)
}

/// Roughly normal (sum of four uniforms), scaled to `std`.
fn normal(rng: &mut Rng, std: f32) -> f32 {
    let mut s = 0.0f32;
    for _ in 0..4 {
        s += rng.unit() - 0.5;
    }
    s * std * 1.732
}

/// The model of `shape` in `ty`, tokenizer metadata from `reference` (a GPT-2 GGUF). Every
/// type draws the same values in the same order (one seeded stream), so the files of one
/// shape are the same model quantized differently.
pub fn bench_gpt2(reference: &GgufHeader, shape: &Shape, ty: &FileType) -> GgufWriter {
    let (n_layer, e) = (shape.n_layer, shape.n_embd);
    let mut w = GgufWriter::new();
    for (k, v) in &reference.metadata {
        let v = match k.as_str() {
            "gpt2.block_count" => GgufValue::U32(n_layer as u32),
            "gpt2.context_length" => GgufValue::U32(N_CTX as u32),
            "gpt2.embedding_length" => GgufValue::U32(e as u32),
            "gpt2.feed_forward_length" => GgufValue::U32(4 * e as u32),
            "gpt2.attention.head_count" => GgufValue::U32(shape.n_head as u32),
            "general.file_type" => GgufValue::U32(ty.ftype),
            "general.name" => GgufValue::String(format!("bench-{} (random weights)", shape.name)),
            // The reference's label is its own size's: leave it out rather than lie.
            "general.size_label" => continue,
            _ => v.clone(),
        };
        w.add_kv(k, v).expect("copy a key");
    }
    let mut rng = Rng::xorshift64(0x9e37_79b9_7f4a_7c15);
    let std = 0.02f32;
    // GPT-2's init scales the projections into the residual stream by 1/sqrt(2 · n_layer):
    // the stream then grows slowly with depth, and a last-bit difference (fused vs unfused
    // multiply-add) stays small at the logits instead of growing layer by layer.
    let res_std = std / ((2 * n_layer) as f32).sqrt();
    let mut add = |name: &str, ne: &[usize], tty: GgmlType, std: f32, mean: f32| {
        let n: usize = ne.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| mean + normal(&mut rng, std)).collect();
        let data = quants::quantize(tty, &vals).expect("quantize");
        let ne: Vec<i64> = ne.iter().map(|&x| x as i64).collect();
        w.add_tensor(name, tty, &ne, data).expect("add a tensor");
    };
    // GPT-2's tensor schema (ggweb::model::gpt2), in its order: every file of a shape
    // holds the same tensors, each with its own init.
    let hp = Hparams { n_vocab: N_VOCAB, n_ctx_train: N_CTX, n_embd: e, n_head: 1, n_layer, n_ff: 4 * e, eps: 1e-5 };
    let dims = |ne: [i64; 4]| -> Vec<usize> { ne.iter().take_while(|&&d| d > 1).map(|&d| d as usize).collect() };
    let init = |name: &str, two_d: bool| -> (f32, f32) {
        match name {
            _ if name.ends_with("norm.weight") => (0.1, 1.0),
            "attn_output.weight" | "ffn_down.weight" => (res_std, 0.0),
            _ if two_d => (std, 0.0),
            _ => (0.02, 0.0),
        }
    };
    for (name, ne) in global_weight_shapes(&hp) {
        let tty = match name {
            "token_embd.weight" => ty.weights,
            "output.weight" => ty.output,
            _ => GgmlType::F32,
        };
        let (sd, mean) = if name == "position_embd.weight" { (std, 0.0) } else { init(name, ne[1] > 1) };
        add(name, &dims(ne), tty, sd, mean);
    }
    for il in 0..n_layer {
        for (name, ne) in layer_weight_shapes(&hp) {
            let tty = if ne[1] > 1 { ty.weights } else { GgmlType::F32 };
            let (sd, mean) = init(name, ne[1] > 1);
            add(&format!("blk.{il}.{name}"), &dims(ne), tty, sd, mean);
        }
    }
    w
}

/// Writes `bench_gpt2` to `path` (through a temporary name, so a killed run leaves no
/// truncated model behind); returns the file's size.
pub fn write_bench_gpt2(
    reference: &GgufHeader,
    shape: &Shape,
    ty: &FileType,
    path: &std::path::Path,
) -> std::io::Result<u64> {
    let w = bench_gpt2(reference, shape, ty);
    let tmp = path.with_extension("gguf.part");
    w.write_to(std::io::BufWriter::new(std::fs::File::create(&tmp)?))?;
    std::fs::rename(&tmp, path)?;
    Ok(w.file_size())
}
