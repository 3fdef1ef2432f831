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

use alloc::rc::Rc;

use wasm_bindgen::prelude::*;

use super::model::{backend_error, from_js, model_error, to_js};
use crate::backend::Backend;
use crate::common::open_backends;
use crate::common::options::{LoadOptions, LOAD_WHAT};
use crate::cpu::CpuBackend;
use crate::model::plan::{HeaderPlan, HeaderReader};
use crate::model::report::InspectReport;
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

    /// The report ([`InspectReport`], crate/model/report.rs); consumes the inspector. An
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
        let report = InspectReport::new(&header, &plan, opts.kv_type.name(), backend, note, self.file_size);
        Ok(to_js(&report))
    }
}
