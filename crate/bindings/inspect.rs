//! `WasmInspector`: a GGUF header in, the model's hyperparameters, tensors and memory plan
//! out, before the weights are downloaded (web/engine.js's `inspectSource`, `Model.inspect`).
//!
//! ```ignore
//! const ins = new WasmInspector({ nCtx: 256 }, file.size);
//! while (!ins.feed(nextChunk())) {}            // true once the tensor infos are in
//! const report = await ins.plan();             // consumes the inspector
//! ```
//!
//! Options are `WasmLoader`'s ([`LoadOptions`]: an unknown key is `invalid`), and the plan
//! is [`HeaderPlan`]'s: the loader's own path over storage-less buffers on the backends a
//! load with these options would use ([`open_backends`], the loader's policy), so `memory` equals a later load's
//! `info().memory`. The CPU backend is made with one thread: the plan does not depend on
//! threads, and no worker pool starts.

use alloc::collections::BTreeMap;
use alloc::rc::Rc;

use serde::Serialize;
use wasm_bindgen::prelude::*;

use super::model::{backend_error, from_js, model_error, to_js, HparamsJson};
use crate::backend::Backend;
use crate::common::open_backends;
use crate::common::options::{LoadOptions, LOAD_WHAT};
use crate::cpu::CpuBackend;
use crate::model::plan::{HeaderPlan, HeaderReader};
use crate::webgpu::WebGpuOptions;

#[wasm_bindgen]
pub struct WasmInspector {
    reader: HeaderReader,
    opts: LoadOptions,
    file_size: Option<u64>,
}

#[wasm_bindgen]
impl WasmInspector {
    /// `opts`: WasmLoader's options; `file_size`: the file's length, or -1 if unknown
    /// (with it, a header whose tensors reach past the end is refused as a load refuses it).
    #[wasm_bindgen(constructor)]
    pub fn new(opts: JsValue, file_size: f64) -> Result<WasmInspector, JsValue> {
        let opts = from_js(LOAD_WHAT, opts)?;
        let file_size = (file_size >= 0.0).then_some(file_size as u64);
        Ok(WasmInspector { reader: HeaderReader::new(file_size), opts, file_size })
    }

    /// Takes the next chunk; true once the header is complete (stop reading then).
    /// Malformed bytes fail with code `format`, naming the offset.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<bool, JsValue> {
        self.reader.feed(chunk).map_err(|e| model_error("", e))
    }

    /// Bytes the header took so far.
    pub fn bytes_consumed(&self) -> f64 {
        self.reader.bytes_consumed() as f64
    }

    /// The report (see ggweb.d.ts `InspectResult`); consumes the inspector. An
    /// incomplete header is a `format` error, as in a load. "webgpu" and "auto" open a
    /// WebGPU device (its limits decide the plan); "auto" without one plans for the CPU.
    pub async fn plan(self) -> Result<JsValue, JsValue> {
        let header = self.reader.into_header().map_err(|e| model_error("", e))?;
        // One thread: the plan does not depend on threads, and no worker pool starts.
        let cpu = || Rc::new(CpuBackend::new(1)) as Rc<dyn Backend>;
        let b = open_backends(&self.opts, WebGpuOptions::default(), cpu)
            .await
            .map_err(|e| backend_error("backend \"webgpu\"", e))?;
        let (backend, note) =
            (b.name, b.note.as_ref().map(|n| n.replace("; running on the CPU", "; planned for the CPU")));
        let opts = self.opts.model();
        let plan = HeaderPlan::new(&header, b.list(), b.split, &opts).map_err(|e| model_error("", e))?;
        let hp = &plan.hparams;
        let mut types: BTreeMap<&'static str, TypeJson> = BTreeMap::new();
        for t in &header.tensors {
            let e = types.entry(t.ty.name()).or_default();
            e.count += 1;
            e.bytes += t.nbytes as f64;
        }
        let report = Report {
            arch: "gpt2",
            hparams: HparamsJson {
                n_vocab: hp.n_vocab,
                n_ctx: plan.n_ctx,
                n_ctx_train: hp.n_ctx_train,
                n_embd: hp.n_embd,
                n_head: hp.n_head,
                n_layer: hp.n_layer,
                n_ff: hp.n_ff,
                n_batch: plan.n_batch,
                eps: hp.eps,
            },
            backend,
            backend_note: note,
            file: FileJson {
                data_offset: header.data_offset as f64,
                size: self.file_size.map(|n| n as f64),
                alignment: header.alignment,
            },
            tensors: header
                .tensors
                .iter()
                .map(|t| TensorJson {
                    name: &t.name,
                    r#type: t.ty.name(),
                    ne: t.ne[..(t.n_dims as usize).clamp(1, 4)].to_vec(),
                    bytes: t.nbytes as f64,
                })
                .collect(),
            types,
            memory: MemoryJson {
                weights: plan.weights() as f64,
                kv: plan.kv() as f64,
                compute: plan.compute_measured.then(|| plan.compute() as f64),
                gradient: plan.gradient.map(|b| b as f64),
                total: plan.total() as f64,
                kv_type: opts.kv_type.name(),
                by_backend: plan
                    .by_backend
                    .iter()
                    .map(|m| {
                        (
                            m.backend.clone(),
                            BytesJson { weights: m.weights as f64, kv: m.kv as f64, compute: m.compute as f64 },
                        )
                    })
                    .collect(),
            },
            fits: FitsJson {
                ok: plan.misfit.is_none(),
                reason: plan.misfit.clone(),
                wasm_space_left: crate::backend::host::address_space_left().map(|n| n as f64),
                limits: plan
                    .by_backend
                    .iter()
                    .zip(&plan.limits)
                    .map(|(m, (budget, max))| {
                        (
                            m.backend.clone(),
                            LimitJson { budget: budget.map(|b| b as f64), max_buffer_size: *max as f64 },
                        )
                    })
                    .collect(),
            },
        };
        Ok(to_js(&report))
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    arch: &'static str,
    hparams: HparamsJson,
    backend: &'static str,
    backend_note: Option<String>,
    file: FileJson,
    tensors: Vec<TensorJson<'a>>,
    types: BTreeMap<&'static str, TypeJson>,
    memory: MemoryJson,
    fits: FitsJson,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileJson {
    data_offset: f64,
    size: Option<f64>,
    alignment: u64,
}

#[derive(Serialize)]
struct TensorJson<'a> {
    name: &'a str,
    r#type: &'static str,
    ne: Vec<i64>,
    bytes: f64,
}

#[derive(Serialize, Default)]
struct TypeJson {
    count: usize,
    bytes: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MemoryJson {
    weights: f64,
    kv: f64,
    /// None when weights and KV alone are over the budget (not measured).
    compute: Option<f64>,
    /// A gradient run over n_ctx tokens, on top of the model (None when not measured).
    gradient: Option<f64>,
    total: f64,
    kv_type: &'static str,
    by_backend: BTreeMap<String, BytesJson>,
}

#[derive(Serialize)]
struct BytesJson {
    weights: f64,
    kv: f64,
    compute: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FitsJson {
    ok: bool,
    reason: Option<String>,
    wasm_space_left: Option<f64>,
    limits: BTreeMap<String, LimitJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LimitJson {
    budget: Option<f64>,
    max_buffer_size: f64,
}
