//! What a loaded model (`info()`) and a GGUF header (`Model.inspect`) report, as the structs
//! serialized to JS (crate/bindings/model.rs, crate/bindings/inspect.rs) and typed from them
//! (scripts/gen-types.mjs → web/ggweb.types.d.ts). Field order is the JSON's key order (the
//! demo shows it in that order). The CLI's `ggweb inspect --json` has its own, older shape
//! (snake_case, offsets and metadata; crate/bin/inspect.rs).

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use serde::{Serialize, Serializer};

use super::context::{BackendMemory, Gpt2};
use super::hparams::Hparams;
use super::plan::HeaderPlan;
use crate::gguf::GgufHeader;
use crate::tokenizer::Tokenizer;

// ts: export Hparams
/// Hyperparameters: `info().hparams` and `Model.inspect(...).hparams`. The snake_case names
/// of earlier releases are still there, with the same values, for one more release.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HparamsInfo {
    pub n_vocab: usize,
    /// The context length this model was loaded with (LoadOptions.nCtx, or the model's).
    pub n_ctx: usize,
    /// The context length the model was trained with (gpt2.context_length).
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_layer: usize,
    /// The feed-forward width.
    pub n_ff: usize,
    /// Prompt tokens per step (LoadOptions.nBatch, capped at nCtx).
    pub n_batch: usize,
    /// Layer-norm epsilon.
    #[serde(serialize_with = "shortest_f32")]
    pub eps: f32,
    #[serde(flatten)]
    pub deprecated: HparamsSnakeCase,
}

// ts: export HparamsSnakeCase
/// The snake_case duplicates of `Hparams`' names (earlier releases), after the camelCase ones.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HparamsSnakeCase {
    /// @deprecated Use `nVocab`; removed in the next release.
    pub n_vocab: usize,
    /// @deprecated Use `nCtx`; removed in the next release.
    pub n_ctx: usize,
    /// @deprecated Use `nCtxTrain`; removed in the next release.
    pub n_ctx_train: usize,
    /// @deprecated Use `nEmbd`; removed in the next release.
    pub n_embd: usize,
    /// @deprecated Use `nHead`; removed in the next release.
    pub n_head: usize,
    /// @deprecated Use `nLayer`; removed in the next release.
    pub n_layer: usize,
    /// @deprecated Use `nFf`; removed in the next release.
    pub n_ff: usize,
    /// @deprecated Use `nBatch`; removed in the next release.
    pub n_batch: usize,
}

impl HparamsInfo {
    /// The file's hyperparameters with the context and batch a load (or its plan) resolved.
    pub fn new(hp: &Hparams, n_ctx: usize, n_batch: usize) -> HparamsInfo {
        let (n_vocab, n_ctx_train, n_embd, n_head, n_layer, n_ff) =
            (hp.n_vocab, hp.n_ctx_train, hp.n_embd, hp.n_head, hp.n_layer, hp.n_ff);
        HparamsInfo {
            n_vocab,
            n_ctx,
            n_ctx_train,
            n_embd,
            n_head,
            n_layer,
            n_ff,
            n_batch,
            eps: hp.eps,
            deprecated: HparamsSnakeCase { n_vocab, n_ctx, n_ctx_train, n_embd, n_head, n_layer, n_ff, n_batch },
        }
    }
}

/// An f32 as its shortest decimal form read as f64 (1e-5, not 0.000009999999747 as `as f64`
/// gives).
fn shortest_f32<S: Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(v.to_string().parse::<f64>().unwrap_or(*v as f64))
}

/// `[(name, value)]` as `{ [name]: value }` in the list's order (a map type would sort it).
fn ordered_map<S: Serializer, V: Serialize>(v: &[(String, V)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(v.iter().map(|(k, v)| (k, v)))
}

// ts: export BackendBytes
/// Bytes one backend holds, per use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct BackendBytes {
    pub weights: usize,
    pub kv: usize,
    pub compute: usize,
}

impl From<&BackendMemory> for BackendBytes {
    fn from(m: &BackendMemory) -> BackendBytes {
        BackendBytes { weights: m.weights, kv: m.kv, compute: m.compute }
    }
}

// ts: export ModelMemory
/// `info().memory`: bytes planned per use.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelMemory {
    pub weights: usize,
    pub kv: usize,
    pub compute: usize,
    /// The KV cache's element type (LoadOptions.kvType).
    // ts: 'f16' | 'f32'
    pub kv_type: &'static str,
    /// Bytes of `weights` the CPU reads repacked into 4-row groups (Q8_0/Q4_0 matrices on
    /// the wasm SIMD128 builds; in place, not extra memory); 0 where nothing is.
    pub repacked: usize,
}

// ts: export ModelSplit
/// `info().split`: where the model runs and what crosses between backends, measured on the
/// graph of one token.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSplit {
    /// Transformer blocks on the GPU (0 .. n_layer): the last ones.
    pub gpu_layers: usize,
    /// Token and position embeddings on the GPU (gpuLayers > n_layer, or -1).
    pub embeddings_on_gpu: bool,
    /// Backend names in priority order, e.g. ['WebGPU', 'CPU'].
    pub backends: Vec<String>,
    /// Runs of consecutive nodes on one backend in the graph of one token.
    pub splits: usize,
    /// Tensors copied between backends per token, and their bytes.
    pub copies_per_token: usize,
    pub copy_bytes_per_token: usize,
    /// Bytes per backend name, in the scheduler's order.
    #[serde(serialize_with = "ordered_map")]
    pub bytes_per_backend: Vec<(String, BackendBytes)>,
}

// ts: export TokenizerInfo
/// `info().tokenizer`: vocabulary size and special token ids (null when the model has none).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenizerInfo {
    pub n_vocab: usize,
    /// @deprecated Use `nVocab`; removed in the next release.
    #[serde(rename = "n_vocab")]
    pub n_vocab_deprecated: usize,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

// ts: export WasmMemory
/// The wasm instance's linear memory in bytes: below the heap (static data and stack),
/// when the loader was made, right after the load, and when info was read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmMemory {
    pub heap_base: f64,
    pub at_loader_start: f64,
    pub after_load: f64,
    pub now: f64,
}

// ts: export WasmModelInfo
/// What the wasm side's `info()` reports of a loaded model (JS `model.info()` adds `threads`
/// and `load`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    // ts: 'gpt2'
    pub arch: &'static str,
    pub hparams: HparamsInfo,
    /// The backend the model runs on ('auto' resolved).
    // ts: 'cpu' | 'webgpu'
    pub backend: &'static str,
    pub memory: ModelMemory,
    /// Where the model runs and what crosses between backends.
    pub split: ModelSplit,
    pub tokenizer: TokenizerInfo,
    pub wasm_memory: WasmMemory,
    /// Why `backend` is not the one asked for ('auto' without WebGPU), or null.
    pub backend_note: Option<String>,
}

impl ModelInfo {
    /// `model`'s report; what only the front end knows (backend name, split, memory, note)
    /// comes in.
    pub fn new(
        model: &Gpt2,
        tokenizer: &Tokenizer,
        backend: &'static str,
        split: ModelSplit,
        wasm_memory: WasmMemory,
        backend_note: Option<String>,
    ) -> ModelInfo {
        let plan = model.memory_plan();
        ModelInfo {
            arch: "gpt2",
            hparams: HparamsInfo::new(&model.hparams, model.n_ctx(), model.n_batch),
            backend,
            memory: ModelMemory {
                weights: plan.weights,
                kv: plan.kv,
                compute: plan.compute,
                kv_type: model.kv.ty.name(),
                repacked: model.repacked_bytes,
            },
            split,
            tokenizer: TokenizerInfo {
                n_vocab: tokenizer.n_vocab(),
                n_vocab_deprecated: tokenizer.n_vocab(),
                bos: tokenizer.bos(),
                eos: tokenizer.eos(),
            },
            wasm_memory,
            backend_note,
        }
    }
}

// ts: export InspectFile
/// Where the weights start (`dataOffset`: the header and its padding end), the file's size
/// when known, and its alignment.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InspectFile {
    pub data_offset: u64,
    pub size: Option<u64>,
    pub alignment: u64,
}

// ts: export InspectTensor
/// One tensor of the header: its ggml type name and shape (ne, innermost first).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InspectTensor {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub ne: Vec<i64>,
    pub bytes: usize,
}

// ts: export TypeCount
/// How many tensors of one type, and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TypeCount {
    pub count: usize,
    pub bytes: u64,
}

// ts: export PlanMemory
/// The memory plan, equal to a later load's `info().memory` (and `split.bytesPerBackend`).
/// `compute` is null when weights + KV alone exceed the budget (then not measured).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanMemory {
    pub weights: u64,
    pub kv: u64,
    pub compute: Option<u64>,
    /// The memory one gradient call (`run`'s `grad`, `saliency`, `patch`'s `method:
    /// 'attribution'`) over nCtx tokens plans on top of `total`: its compute buffers
    /// (activations kept for the backward pass, gradients) and what it holds besides (the
    /// logits and the gradient read back, the metric's weights), for the loss over every
    /// position (`of: { loss: 'mean' }`, the largest metric) and a backward pass to
    /// `hook_embed`; each further `wrt` point adds its own gradient. A call that does not fit
    /// what the budget leaves is refused with `unsupported` and the sizes. Null when not measured.
    pub gradient: Option<u64>,
    pub total: u64,
    // ts: 'f32' | 'f16'
    pub kv_type: &'static str,
    pub by_backend: BTreeMap<String, BackendBytes>,
}

// ts: export BufferLimit
/// One backend's budget (null when unknown) and largest buffer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferLimit {
    pub budget: Option<u64>,
    pub max_buffer_size: u64,
}

// ts: export PlanFits
/// Whether it fits here: each backend's part within its budget (on the CPU, the free part
/// of wasm32's 4 GiB address space) and each buffer within its largest size (WebGPU:
/// the adapter's maxBufferSize). `reason` says what does not fit.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanFits {
    pub ok: bool,
    pub reason: Option<String>,
    pub wasm_space_left: Option<u64>,
    pub limits: BTreeMap<String, BufferLimit>,
}

// ts: export WasmInspectResult
/// What the wasm side's inspector reports of a GGUF header (JS `Model.inspect` adds `source`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InspectReport {
    // ts: 'gpt2'
    pub arch: &'static str,
    /// The same fields and values as a later load's `info().hparams` with the same options.
    pub hparams: HparamsInfo,
    /// The backend planned for ("auto" resolves to "webgpu" or, without an adapter, "cpu").
    // ts: 'cpu' | 'webgpu'
    pub backend: &'static str,
    pub backend_note: Option<String>,
    pub file: InspectFile,
    pub tensors: Vec<InspectTensor>,
    /// Per ggml type name ("q8_0", "f32", …): how many tensors, how many bytes.
    pub types: BTreeMap<&'static str, TypeCount>,
    pub memory: PlanMemory,
    pub fits: PlanFits,
}

impl InspectReport {
    /// The report of `header` and its `plan` (with these options' `kv_type`) for `backend`.
    pub fn new(
        header: &GgufHeader,
        plan: &HeaderPlan,
        kv_type: &'static str,
        backend: &'static str,
        backend_note: Option<String>,
        file_size: Option<u64>,
    ) -> InspectReport {
        let mut types: BTreeMap<&'static str, TypeCount> = BTreeMap::new();
        for t in &header.tensors {
            let e = types.entry(t.ty.name()).or_default();
            e.count += 1;
            e.bytes += t.nbytes as u64;
        }
        InspectReport {
            arch: "gpt2",
            hparams: HparamsInfo::new(&plan.hparams, plan.n_ctx, plan.n_batch),
            backend,
            backend_note,
            file: InspectFile { data_offset: header.data_offset, size: file_size, alignment: header.alignment },
            tensors: header
                .tensors
                .iter()
                .map(|t| InspectTensor {
                    name: t.name.clone(),
                    ty: t.ty.name(),
                    ne: t.ne[..(t.n_dims as usize).clamp(1, 4)].to_vec(),
                    bytes: t.nbytes,
                })
                .collect(),
            types,
            memory: PlanMemory {
                weights: plan.weights(),
                kv: plan.kv(),
                compute: plan.compute_measured.then(|| plan.compute()),
                gradient: plan.gradient,
                total: plan.total(),
                kv_type,
                by_backend: plan.by_backend.iter().map(|m| (m.backend.clone(), m.into())).collect(),
            },
            fits: PlanFits {
                ok: plan.misfit.is_none(),
                reason: plan.misfit.clone(),
                wasm_space_left: crate::backend::host::address_space_left(),
                limits: plan
                    .by_backend
                    .iter()
                    .zip(&plan.limits)
                    .map(|(m, &(budget, max))| (m.backend.clone(), BufferLimit { budget, max_buffer_size: max }))
                    .collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON key order the demo shows and tests/e2e assert: camelCase hyperparameters (eps
    /// as f32's shortest form, not 0.000009999999747), then the deprecated snake_case ones;
    /// a split's backends in the scheduler's order.
    #[test]
    fn key_order() {
        let hp =
            Hparams { n_vocab: 50257, n_ctx_train: 1024, n_embd: 768, n_head: 12, n_layer: 12, n_ff: 3072, eps: 1e-5 };
        assert_eq!(
            serde_json::to_string(&HparamsInfo::new(&hp, 256, 32)).unwrap(),
            r#"{"nVocab":50257,"nCtx":256,"nCtxTrain":1024,"nEmbd":768,"nHead":12,"nLayer":12,"nFf":3072,"nBatch":32,"eps":0.00001,"n_vocab":50257,"n_ctx":256,"n_ctx_train":1024,"n_embd":768,"n_head":12,"n_layer":12,"n_ff":3072,"n_batch":32}"#
        );
        let split = ModelSplit {
            gpu_layers: 2,
            embeddings_on_gpu: false,
            backends: vec!["WebGPU".into(), "CPU".into()],
            splits: 2,
            copies_per_token: 1,
            copy_bytes_per_token: 3072,
            bytes_per_backend: vec![
                ("WebGPU".into(), BackendBytes { weights: 10, kv: 20, compute: 30 }),
                ("CPU".into(), BackendBytes { weights: 1, kv: 2, compute: 3 }),
            ],
        };
        assert_eq!(
            serde_json::to_string(&split).unwrap(),
            r#"{"gpuLayers":2,"embeddingsOnGpu":false,"backends":["WebGPU","CPU"],"splits":2,"copiesPerToken":1,"copyBytesPerToken":3072,"bytesPerBackend":{"WebGPU":{"weights":10,"kv":20,"compute":30},"CPU":{"weights":1,"kv":2,"compute":3}}}"#
        );
        let tok = TokenizerInfo { n_vocab: 50257, n_vocab_deprecated: 50257, bos: None, eos: Some(50256) };
        assert_eq!(serde_json::to_string(&tok).unwrap(), r#"{"nVocab":50257,"n_vocab":50257,"bos":null,"eos":50256}"#);
    }
}
