//! The memory plan of a model from its GGUF header alone, before any weight is downloaded
//! (`Model.inspect`, `ggweb inspect`).
//!
//! ```no_run
//! use std::rc::Rc;
//! use ggweb::cpu::CpuBackend;
//! use ggweb::model::context::Gpt2Options;
//! use ggweb::model::plan::{HeaderPlan, HeaderReader};
//! let bytes = std::fs::read("tests/fixtures/llamacpp/tiny-gpt2-q8_0.gguf").unwrap();
//! let mut r = HeaderReader::new(Some(bytes.len() as u64));
//! for chunk in bytes.chunks(4096) {
//!     if r.feed(chunk).unwrap() { break; } // the header is in: stop reading
//! }
//! let header = r.into_header().unwrap();
//! let plan = HeaderPlan::new(&header, vec![Rc::new(CpuBackend::new(1))], None, &Gpt2Options::default()).unwrap();
//! println!("{} bytes", plan.total());
//! ```
//!
//! One place for the plan: the numbers come from the loader's own path run over buffers
//! that hold no memory ([`PlanBufferType`]). The weights are placed as the loader places
//! them, the KV cache is made by `KvCache::new_per_layer`, and the compute buffers are what
//! the scheduler reserves for the worst-case graph in `Gpt2::with_backends`. So the plan
//! equals `info().memory` of the model a later load builds with the same options and
//! backends, byte for byte. The backends are the real ones (their alignment, tensor sizes,
//! buffer limits and supported ops decide the plan); only their allocations are replaced.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::context::{BackendMemory, Gpt2, Gpt2Options};
use super::gpt2::{weight_on_gpu, Hparams};
use super::loader::{check_header, measure, state_bytes, weights_only, HostShare, LoadEstimate};
pub use super::plan_backend::PlanBufferType;
use super::ModelError;
use crate::backend::{Backend, Buffer, BufferType};
use crate::gguf::{GgufHeader, GgufStreamReader, Limits, NullSink, TensorInfo};

/// Feeds a GGUF stream until its header (metadata and tensor infos) is parsed.
pub struct HeaderReader {
    reader: GgufStreamReader,
}

impl HeaderReader {
    /// `file_size`, when known, lets the reader check every tensor lies inside the file.
    pub fn new(file_size: Option<u64>) -> HeaderReader {
        let mut reader = GgufStreamReader::new(Limits::default());
        if let Some(n) = file_size {
            reader = reader.with_file_size(n);
        }
        HeaderReader { reader }
    }

    /// Takes the next chunk; `true` once the header is complete (the rest need not come).
    pub fn feed(&mut self, chunk: &[u8]) -> Result<bool, ModelError> {
        if self.reader.header().is_none() {
            self.reader.feed(chunk, &mut NullSink)?;
        }
        Ok(self.reader.header().is_some())
    }

    pub fn bytes_consumed(&self) -> u64 {
        self.reader.bytes_consumed()
    }

    /// The header, or why the stream ended before it did (a [`ModelError::Format`], as a
    /// load of the same bytes reports).
    pub fn into_header(self) -> Result<GgufHeader, ModelError> {
        if self.reader.header().is_some() {
            return Ok(self.reader.into_header().expect("checked above"));
        }
        Err(match self.reader.finish() {
            Err(e) => e.into(),
            Ok(_) => ModelError::Format("the GGUF header is incomplete".into()),
        })
    }
}

/// What a model needs, per backend, before anything is allocated.
#[derive(Clone, Debug, PartialEq)]
pub struct HeaderPlan {
    pub hparams: Hparams,
    /// The context length the options resolve to.
    pub n_ctx: usize,
    pub n_batch: usize,
    /// In the scheduler's order (the CPU last); `compute` is None when the plan was not
    /// measured because weights and KV alone exceed a backend's budget (a model that large
    /// would overflow the sizes on wasm32 before any compute buffer matters).
    pub by_backend: Vec<BackendMemory>,
    pub compute_measured: bool,
    /// Weights and KV cache as the loader estimates them from the header (u64: exact even
    /// where they exceed wasm32's usize); what `weights()` and `kv()` report when unmeasured.
    pub estimate: LoadEstimate,
    /// Per backend: the budget its buffer type reports (the free part of wasm32's 4 GiB
    /// address space for the CPU there; None when unknown) and its largest buffer.
    pub limits: Vec<(Option<u64>, u64)>,
    /// Why the model does not fit, when it does not (first reason found).
    pub misfit: Option<String>,
    /// The memory a gradient run over `n_ctx` tokens plans on top of the model
    /// ([`Gpt2::gradient_bytes`]: its compute buffers, the gradient read back); None when
    /// not measured (the weights and KV alone are over the budget, or the gradient pass's
    /// own buffers cannot be planned within it).
    pub gradient: Option<u64>,
}

impl HeaderPlan {
    /// Checks the header as a load does (architecture, hyperparameters, tokenizer, options)
    /// and plans its memory on `backends` (priority order, the CPU last). `gpu_layers`: the
    /// split of [`ModelLoader::new_split`](super::loader::ModelLoader::new_split), with
    /// backends `[gpu, cpu]`; None puts everything on `backends[0]`.
    pub fn new(
        header: &GgufHeader,
        backends: Vec<Rc<dyn Backend>>,
        gpu_layers: Option<usize>,
        opts: &Gpt2Options,
    ) -> Result<HeaderPlan, ModelError> {
        // The loader's own checks, in its order: a file that lies is a format error here too.
        let (hp, _tok) = check_header(header)?;
        if backends.is_empty() {
            return Err(ModelError::Config("a memory plan needs at least one backend".into()));
        }
        let host = backends.last().expect("not empty").buffer_type();
        let est = LoadEstimate::new(header, &hp, opts, host.alignment())?;
        let n_batch = opts.n_batch.min(est.n_ctx);
        let limits: Vec<(Option<u64>, u64)> = backends
            .iter()
            .map(|b| {
                let t = b.buffer_type();
                (t.budget(), t.max_size() as u64)
            })
            .collect();
        // The loader's own refusal, by its own placement: device tensors against their
        // buffer and binding limits, the host part against the host side's budget.
        let bufts: Vec<Rc<dyn BufferType>> = backends.iter().map(|b| b.buffer_type()).collect();
        let place = |info: &TensorInfo| -> Rc<dyn BufferType> {
            match (gpu_layers, bufts.as_slice()) {
                (Some(n), [gpu, cpu]) => {
                    if weight_on_gpu(&info.name, hp.n_layer, n.min(hp.n_layer.saturating_add(1))) {
                        gpu.clone()
                    } else {
                        cpu.clone()
                    }
                }
                _ => bufts[0].clone(),
            }
        };
        let share = HostShare {
            place: &place,
            n_backends: backends.len(),
            host_backends: bufts.iter().filter(|b| b.is_host()).count(),
            kv_type: opts.kv_type,
        };
        let checked = share.check(header, &hp, &est, 0, host.alignment(), limits.last().and_then(|l| l.0), usize::BITS);
        // The measured plan sums sizes in usize: past it (a WebGPU model over 4 GiB on
        // wasm32) only the estimate is reported, and the loader's check above says whether
        // it fits. Between 2 and 4 GiB on wasm32 (GPT-2 XL at Q8_0) the plan is made as the
        // load is.
        let too_big = est.total() > usize::MAX as u64;
        let over = checked.err();
        if over.is_some() || too_big {
            let name = backends.last().expect("not empty").name().to_string();
            let by_backend = alloc::vec![BackendMemory {
                backend: name,
                weights: est.weights.min(usize::MAX as u64) as usize,
                kv: est.kv.min(usize::MAX as u64) as usize,
                compute: 0,
            }];
            let misfit = over.map(|e| e.to_string());
            return Ok(HeaderPlan {
                hparams: hp,
                n_ctx: est.n_ctx,
                n_batch,
                by_backend,
                compute_measured: false,
                estimate: est,
                limits,
                misfit,
                gradient: None,
            });
        }

        // A checkpoint: the weights as the load places them, and its optimizer state in host
        // memory beside them (Gpt2::opt_state, counted with the host's weights).
        let model = measure(&weights_only(header), &hp, &backends, gpu_layers, opts)?;
        let mut by_backend = model.memory_by_backend();
        if let Some(host_weights) = by_backend.last_mut() {
            host_weights.weights =
                host_weights.weights.saturating_add(usize::try_from(state_bytes(header)).unwrap_or(usize::MAX));
        }
        let misfit = misfit_of(&model, &by_backend, &limits);
        // As the loader's estimate once measured: the compute buffers as planned.
        let est = LoadEstimate { compute: by_backend.iter().map(|m| m.compute as u64).sum(), ..est };
        // A gradient pass the budget cannot plan (its buffers over what is left) is not
        // measured: the load itself still fits, and a gradient call would be refused.
        let gradient = model.gradient_bytes(model.n_ctx()).ok();
        Ok(HeaderPlan {
            hparams: hp,
            n_ctx: model.n_ctx(),
            n_batch: model.n_batch,
            by_backend,
            compute_measured: true,
            estimate: est,
            limits,
            misfit,
            gradient,
        })
    }

    pub fn weights(&self) -> u64 {
        if !self.compute_measured {
            return self.estimate.weights;
        }
        self.by_backend.iter().map(|m| m.weights as u64).sum()
    }
    pub fn kv(&self) -> u64 {
        if !self.compute_measured {
            return self.estimate.kv;
        }
        self.by_backend.iter().map(|m| m.kv as u64).sum()
    }
    pub fn compute(&self) -> u64 {
        self.by_backend.iter().map(|m| m.compute as u64).sum()
    }
    pub fn total(&self) -> u64 {
        self.weights().saturating_add(self.kv()).saturating_add(self.compute())
    }
}

/// The first part of the plan that a backend cannot hold: a buffer (weights, KV cache,
/// compute) over its largest, or a backend's total over its budget.
fn misfit_of(model: &Gpt2, by_backend: &[BackendMemory], limits: &[(Option<u64>, u64)]) -> Option<String> {
    let n = model.sched.n_backends();
    let of = |b: &Rc<dyn Buffer>| model.sched.backend_for_buffer_type(b.buffer_type_name()).unwrap_or(n - 1);
    for b in model.weight_buffers.iter().chain(model.kv.buffers.iter()) {
        let i = of(b);
        if b.size() as u64 > limits[i].1 {
            return Some(format!(
                "a {} buffer of {} bytes exceeds its largest buffer size {} bytes",
                by_backend[i].backend,
                b.size(),
                limits[i].1
            ));
        }
    }
    for (i, m) in by_backend.iter().enumerate() {
        if m.compute as u64 > limits[i].1 {
            return Some(format!(
                "the {} compute buffer of {} bytes exceeds its largest buffer size {} bytes",
                m.backend, m.compute, limits[i].1
            ));
        }
    }
    for (m, (budget, _)) in by_backend.iter().zip(limits) {
        // In u64: on wasm32 the three can together pass usize (compute comes on top of the
        // weights and KV cache the estimate kept under it).
        let need = m.weights as u64 + m.kv as u64 + m.compute as u64;
        if let Some(budget) = budget {
            if need > *budget {
                return Some(format!(
                    "{} needs {need} bytes (weights {} + KV cache {} + compute {}), {budget} bytes are free",
                    m.backend, m.weights, m.kv, m.compute
                ));
            }
        }
    }
    None
}
