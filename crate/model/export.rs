//! `model.save` (issue 39): the model's current weights (after training, the trained ones) as
//! a GGUF file in llama.cpp's GPT-2 layout, which llama.cpp and ggweb load.
//!
//! - Metadata as `convert_hf_to_gguf.py` writes GPT-2's: `general.architecture`, the file's
//!   other `general.*` keys, the `gpt2.*` hyper-parameters (from the model's own), the
//!   `general.file_type` of the export, the tokenizer (`tokenizer.ggml.model`/`pre`, tokens,
//!   token types and merges from the model's tokenizer, bos/eos), the file's remaining keys,
//!   then `general.quantization_version`.
//! - Tensors in the converter's order (each block's, then `output_norm`, `position_embd`,
//!   `token_embd`, `output`), named as llama.cpp names them. A tied head (no `output.weight`
//!   in the file; training trains it as one tensor) is written tied.
//! - Types: `f32` writes every weight F32; `f16` and `q8_0` write the matrices (the blocks'
//!   four, `token_embd`, `output`) in that type and keep norms, biases and `position_embd`
//!   F32, as llama.cpp's converter and `llama-quantize` do (a matrix whose rows are not a
//!   whole number of Q8_0 blocks falls back to F16, as the converter's does). Conversion uses
//!   the crate's quantizers (ggml's reference rounding, bit-exact with llama.cpp's).
//! - An adapter on the model (`train`'s `lora`, `Model.load`'s `lora`) is merged into the
//!   weights it sits beside, `W + (alpha/rank)·B·A`, as PEFT's `merge_and_unload`: the file is
//!   the adapted model, with no adapter of its own.
//! - Memory: the file is made a chunk at a time (save_stream.rs): a weight already of its type
//!   is copied out as it is held, another is read, dequantized and converted a few rows at a
//!   time (1 MiB of f32). `{ to: 'opfs' }` writes each chunk before the next is made; a whole
//!   file in memory is the one full copy, its size checked against the memory budget and
//!   reserved first: a refusal is `unsupported` with the sizes and leaves the model as it was.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::checkpoint::{split_state_name, OptState};
use super::context::Gpt2;
use super::gpt2::layer_weight_shapes;
use super::loader::TOKENIZER_ARRAYS;
use super::lora::TARGETS;
use super::save_stream::{SaveStream, Source};
use super::session::Session;
use super::ModelError;
use crate::gguf::{GgufArray, GgufValue, GgufWriter};
use crate::tensor::Tensor;
use crate::tokenizer::Tokenizer;
use crate::types::GgmlType;

/// ggml's GGML_QNT_VERSION, which llama.cpp writes as `general.quantization_version`.
const QNT_VERSION: u32 = 2;

/// The type `model.save` writes the matrices in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveType {
    F32,
    F16,
    Q8_0,
}

impl SaveType {
    /// `type`'s spelling in the API (`'f32' | 'f16' | 'q8_0'`).
    pub fn parse(s: &str) -> Result<SaveType, ModelError> {
        match s {
            "f32" => Ok(SaveType::F32),
            "f16" => Ok(SaveType::F16),
            "q8_0" => Ok(SaveType::Q8_0),
            _ => Err(ModelError::Invalid(format!("save: type must be 'f32', 'f16' or 'q8_0', got {s:?}"))),
        }
    }

    /// llama.cpp's `llama_ftype`: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0.
    fn file_type(self) -> u32 {
        match self {
            SaveType::F32 => 0,
            SaveType::F16 => 1,
            SaveType::Q8_0 => 7,
        }
    }

    /// The type a weight of `ne` is written as: matrices in this type, the rest F32.
    fn weight_type(self, matrix: bool, ne0: i64) -> GgmlType {
        match self {
            _ if !matrix => GgmlType::F32,
            SaveType::F32 => GgmlType::F32,
            SaveType::F16 => GgmlType::F16,
            SaveType::Q8_0 if ne0 % GgmlType::Q8_0.blck_size() as i64 == 0 => GgmlType::Q8_0,
            SaveType::Q8_0 => GgmlType::F16,
        }
    }
}

/// A weight of the file: its GGUF name, tensor, whether it is a matrix, and the adapter beside
/// it (`(A, B, alpha/rank)`), merged into it on the way out.
struct FileTensor {
    name: String,
    t: Tensor,
    matrix: bool,
    lora: Option<(Tensor, Tensor, f32)>,
}

/// The weights in the converter's order.
fn tensors_in_file_order(model: &Gpt2) -> Vec<FileTensor> {
    let w = &model.weights;
    let shapes = layer_weight_shapes(&model.hparams);
    // The converter's order within a block, as indices into `layer_weight_shapes` (and `Layer`).
    const BLOCK_ORDER: [usize; 12] = [3, 2, 5, 4, 1, 0, 7, 6, 9, 8, 11, 10];
    let mut v = Vec::new();
    for (il, ly) in w.layers.iter().enumerate() {
        let fields = ly.tensors();
        for i in BLOCK_ORDER {
            let (suffix, ne) = shapes[i];
            // The four adaptable matrices, as `fields` indices: attn_qkv, attn_output, ffn_up, ffn_down.
            let target = [2, 4, 8, 10].iter().position(|&f| f == i).map(|k| TARGETS[k]);
            let lora = target.and_then(|tg| {
                let l = w.lora.as_ref()?;
                let pair = l.layers[il][tg as usize].as_ref()?;
                Some((pair.a.clone(), pair.b.clone(), l.scale()))
            });
            let matrix = ne[1] > 1 && suffix.ends_with(".weight");
            v.push(FileTensor { name: format!("blk.{il}.{suffix}"), t: fields[i].clone(), matrix, lora });
        }
    }
    let plain = |name: &str, t: &Tensor, matrix: bool| FileTensor {
        name: String::from(name),
        t: t.clone(),
        matrix,
        lora: None,
    };
    v.push(plain("output_norm.bias", &w.output_norm_b, false));
    v.push(plain("output_norm.weight", &w.output_norm_w, false));
    v.push(plain("position_embd.weight", &w.position_embd, false));
    v.push(plain("token_embd.weight", &w.token_embd, true));
    if w.output != w.token_embd {
        v.push(plain("output.weight", &w.output, true));
    }
    v
}

/// The metadata of the export (see the module docs), in the order it is written.
fn metadata(model: &Gpt2, tok: &Tokenizer, ty: SaveType) -> Vec<(String, GgufValue)> {
    let hp = &model.hparams;
    let file = &model.file_meta;
    let from_file = |k: &str| file.iter().find(|(fk, _)| fk == k).map(|(_, v)| v.clone());
    let s = |v: &str| GgufValue::String(String::from(v));
    let u = |v: usize| GgufValue::U32(v as u32);
    let mut out: Vec<(String, GgufValue)> = vec![(String::from("general.architecture"), s("gpt2"))];
    // Keys this export writes itself, whatever the file had.
    const OWN: [&str; 4] =
        ["general.architecture", "general.file_type", "general.quantization_version", "general.alignment"];
    for (k, v) in file {
        if k.starts_with("general.") && !OWN.contains(&k.as_str()) {
            out.push((k.clone(), v.clone()));
        }
    }
    out.extend([
        (String::from("gpt2.block_count"), u(hp.n_layer)),
        (String::from("gpt2.context_length"), u(hp.n_ctx_train)),
        (String::from("gpt2.embedding_length"), u(hp.n_embd)),
        (String::from("gpt2.feed_forward_length"), u(hp.n_ff)),
        (String::from("gpt2.attention.head_count"), u(hp.n_head)),
        (String::from("gpt2.attention.layer_norm_epsilon"), GgufValue::F32(hp.eps)),
        (String::from("general.file_type"), GgufValue::U32(ty.file_type())),
        (String::from("tokenizer.ggml.model"), from_file("tokenizer.ggml.model").unwrap_or_else(|| s("gpt2"))),
        (String::from("tokenizer.ggml.pre"), from_file("tokenizer.ggml.pre").unwrap_or_else(|| s("gpt-2"))),
        (String::from(TOKENIZER_ARRAYS[0]), GgufValue::Array(GgufArray::String(tok.tokens().to_vec()))),
        (
            String::from(TOKENIZER_ARRAYS[1]),
            GgufValue::Array(GgufArray::I32(
                (0..tok.n_vocab() as u32).map(|id| tok.token_type(id).unwrap_or(1)).collect(),
            )),
        ),
        (String::from(TOKENIZER_ARRAYS[2]), GgufValue::Array(GgufArray::String(tok.merges()))),
    ]);
    if let Some(b) = tok.bos() {
        out.push((String::from("tokenizer.ggml.bos_token_id"), GgufValue::U32(b)));
    }
    if let Some(e) = tok.eos() {
        out.push((String::from("tokenizer.ggml.eos_token_id"), GgufValue::U32(e)));
    }
    // The file's other keys (unknown_token_id, ...), unless written above; a checkpoint's
    // optimizer keys only with its state (save_gguf).
    for (k, v) in file {
        let state_key = k.starts_with("ggweb.optimizer.") || k.starts_with("ggweb.train.");
        if !OWN.contains(&k.as_str()) && !state_key && !out.iter().any(|(o, _)| o == k) {
            out.push((k.clone(), v.clone()));
        }
    }
    out.push((String::from("general.quantization_version"), GgufValue::U32(QNT_VERSION)));
    out
}

/// The optimizer state `save({ optimizer: true })` writes: the model's, of its weights
/// (`invalid` when it has none, or an adapter's, or the type cannot be trained on).
fn weights_state(model: &Gpt2, ty: SaveType) -> Result<&OptState, ModelError> {
    let st = model.opt_state.as_ref().ok_or_else(|| {
        ModelError::Invalid("save: optimizer: the model has no optimizer state (train it first)".into())
    })?;
    if st.lora.is_some() {
        return Err(ModelError::Invalid(
            "save: optimizer: the model's optimizer state is its LoRA adapter's: saveLora({ optimizer: true }) \
             writes it"
                .into(),
        ));
    }
    if ty == SaveType::Q8_0 {
        return Err(ModelError::Invalid(
            "save: optimizer: a checkpoint's weights must be trainable: type 'f32' (resumes exactly) or 'f16', \
             not 'q8_0'"
                .into(),
        ));
    }
    Ok(st)
}

/// The GGUF file of `model`'s current weights and `tok` (see the module docs) as a
/// [`SaveStream`]: the header, then each tensor a few rows at a time; with `optimizer`, a
/// ggweb checkpoint: the model's optimizer state after the weights (checkpoint.rs; llama.cpp
/// refuses such a file).
pub fn save_stream(model: &Gpt2, tok: &Tokenizer, ty: SaveType, optimizer: bool) -> Result<SaveStream, ModelError> {
    let state = if optimizer { Some(weights_state(model, ty)?) } else { None };
    let mut w = GgufWriter::new();
    for (k, v) in metadata(model, tok, ty) {
        w.add_kv(&k, v)?;
    }
    if let Some(st) = state {
        for (k, v) in st.kvs() {
            w.add_kv(k, v)?;
        }
    }
    let tensors = tensors_in_file_order(model);
    let mut sources = Vec::with_capacity(tensors.len());
    for FileTensor { name, t, matrix, lora } in &tensors {
        let n_dims = if t.ne[1] > 1 || *matrix { 2 } else { 1 };
        let to = ty.weight_type(*matrix, t.ne[0]);
        w.declare_tensor(name, to, &t.ne[..n_dims])?;
        // A weight already of its type is copied as it is held; another is converted.
        sources.push(match lora {
            None if t.ty == to => Source::Bytes { t: t.clone(), offset: 0, len: t.nbytes() },
            _ => Source::Convert { t: t.clone(), to, lora: lora.clone(), what: format!("weight '{name}'") },
        });
    }
    // The state tensors, each of its weight's shape: one row of the state tensor.
    for (name, _, pieces) in state.map_or_else(Vec::new, OptState::file_tensors) {
        let weight = split_state_name(&name).map_or("", |(w, _)| w);
        let f = tensors.iter().find(|f| f.name == weight).ok_or_else(|| {
            ModelError::Invalid(format!("save: optimizer: the state of '{weight}', which is no weight of the file"))
        })?;
        let n_dims = if f.t.ne[1] > 1 || f.matrix { 2 } else { 1 };
        w.declare_tensor(&name, GgmlType::F32, &f.t.ne[..n_dims])?;
        sources.push(Source::Pieces(pieces));
    }
    let smaller =
        if state.is_some() { "; type 'f16' takes less" } else { "; a smaller type ('f16', 'q8_0') takes less" };
    SaveStream::new(&w, sources, model.sched.backends().to_vec(), "save", smaller)
}

/// [`save_stream`]'s file whole in memory: its size is checked against the memory budget and
/// reserved first (a refusal is `unsupported` with the sizes and leaves the model as it was).
pub fn save_gguf(model: &Gpt2, tok: &Tokenizer, ty: SaveType, optimizer: bool) -> Result<Vec<u8>, ModelError> {
    save_stream(model, tok, ty, optimizer)?.into_vec(model.host_left())
}

impl Session {
    /// `model.save({ type })`: the GGUF file of the current weights ([`save_gguf`]).
    pub fn save(&self, ty: SaveType) -> Result<Vec<u8>, ModelError> {
        save_gguf(&self.model, &self.tokenizer, ty, false)
    }

    /// `model.save({ type, optimizer: true })`: the weights with the model's optimizer state.
    pub fn save_checkpoint(&self, ty: SaveType) -> Result<Vec<u8>, ModelError> {
        save_gguf(&self.model, &self.tokenizer, ty, true)
    }

    /// `model.save({ type, optimizer })` a chunk at a time ([`save_stream`]): `{ to: 'opfs' }`,
    /// and the whole file where reads must be awaited (WebGPU in the browser).
    pub fn save_stream(&self, ty: SaveType, optimizer: bool) -> Result<SaveStream, ModelError> {
        save_stream(&self.model, &self.tokenizer, ty, optimizer)
    }
}
