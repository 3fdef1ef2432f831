//! The memory plan from the header alone (`Model.inspect`, crate/model/plan.rs): equal,
//! part by part, to what loading the whole file allocates; only the header is read; a
//! truncated header is a `Format` error as in a load.

use std::rc::Rc;

use ggweb::backend::{Backend, BufferType};
use ggweb::cpu::CpuBackend;
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::load_from_bytes;
use ggweb::model::plan::{HeaderPlan, HeaderReader};
use ggweb::model::ModelError;
use ggweb::GgmlType;

use crate::support::fixtures;

const FILES: [&str; 4] = ["tiny-gpt2-f32.gguf", "tiny-gpt2-f16.gguf", "tiny-gpt2-q8_0.gguf", "tiny-gpt2-q4_0.gguf"];

/// Feeds `bytes` in 256-byte chunks until the header is in; returns the reader and how many
/// bytes were handed over.
fn read_header(bytes: &[u8]) -> (HeaderReader, usize) {
    let mut r = HeaderReader::new(Some(bytes.len() as u64));
    let mut given = 0;
    for chunk in bytes.chunks(256) {
        given += chunk.len();
        if r.feed(chunk).unwrap() {
            break;
        }
    }
    (r, given)
}

fn cpu() -> Vec<Rc<dyn Backend>> {
    vec![Rc::new(CpuBackend::new(1))]
}

#[test]
fn header_plan_equals_the_loaded_model() {
    let options = [
        Gpt2Options::default(),
        Gpt2Options { n_ctx: 64, n_batch: 8, ..Default::default() },
        Gpt2Options { n_ctx: 100, n_batch: 32, kv_type: GgmlType::F16, ..Default::default() },
    ];
    for file in FILES {
        let bytes = fixtures::model_bytes(file);
        let (r, given) = read_header(&bytes);
        // The header of these files is the tokenizer plus tensor infos; the weights are most
        // of the file, and none of them was needed.
        assert!(given < bytes.len() / 2, "{file}: read {given} of {} bytes", bytes.len());
        let header = r.into_header().unwrap();
        for opts in &options {
            let plan = HeaderPlan::new(&header, cpu(), None, opts).unwrap();
            let loaded = load_from_bytes(&bytes, opts.clone()).unwrap();
            let m = &loaded.model;
            assert_eq!(plan.by_backend, m.memory_by_backend(), "{file} {opts:?}");
            let mp = m.memory_plan();
            assert_eq!(
                (plan.weights(), plan.kv(), plan.compute()),
                (mp.weights as u64, mp.kv as u64, mp.compute as u64),
                "{file} {opts:?}"
            );
            assert!(plan.compute_measured && plan.compute() > 0);
            assert_eq!((plan.n_ctx, plan.n_batch, &plan.hparams), (m.n_ctx(), m.n_batch, &m.hparams));
            // Natively the CPU's budget is unknown: nothing to exceed.
            assert_eq!(plan.misfit, None);
        }
    }
}

#[test]
fn truncated_header_is_a_format_error() {
    let bytes = fixtures::model_bytes(FILES[2]);
    for cut in [0usize, 3, 20, 1000] {
        let mut r = HeaderReader::new(None);
        assert!(!r.feed(&bytes[..cut]).unwrap());
        match r.into_header() {
            Err(ModelError::Format(m)) => assert!(!m.is_empty()),
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    // Not GGUF at all: refused at once.
    let mut r = HeaderReader::new(None);
    assert!(matches!(r.feed(b"NOTAGGUFFILE-----------------"), Err(ModelError::Format(_))));
}

#[test]
fn options_are_checked_as_a_load_checks_them() {
    let bytes = fixtures::model_bytes(FILES[0]);
    let header = read_header(&bytes).0.into_header().unwrap();
    let opts = Gpt2Options { n_ctx: 1 << 20, ..Default::default() };
    let plan = HeaderPlan::new(&header, cpu(), None, &opts);
    let load = load_from_bytes(&bytes, opts);
    assert!(matches!(plan, Err(ModelError::Config(_))), "{plan:?}");
    assert_eq!(plan.unwrap_err(), load.err().unwrap());
}

/// The CPU with a fixed memory budget, as wasm32's address space gives one.
struct Budgeted(Rc<dyn BufferType>, u64);

impl BufferType for Budgeted {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn alignment(&self) -> usize {
        self.0.alignment()
    }
    fn max_size(&self) -> usize {
        self.0.max_size()
    }
    fn alloc_size(&self, t: &ggweb::tensor::Tensor) -> usize {
        self.0.alloc_size(t)
    }
    fn is_host(&self) -> bool {
        self.0.is_host()
    }
    fn budget(&self) -> Option<u64> {
        Some(self.1)
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn ggweb::backend::Buffer>, ggweb::backend::BackendError> {
        self.0.alloc_buffer(size)
    }
}

struct BudgetCpu(CpuBackend, u64);

impl Backend for BudgetCpu {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn buffer_type(&self) -> Rc<dyn BufferType> {
        Rc::new(Budgeted(self.0.buffer_type(), self.1))
    }
    fn graph_compute(&self, g: &ggweb::graph::Graph) -> Result<(), ggweb::backend::BackendError> {
        self.0.graph_compute(g)
    }
}

#[test]
fn fits_against_the_budget() {
    let bytes = fixtures::model_bytes(FILES[2]);
    let header = read_header(&bytes).0.into_header().unwrap();
    let opts = Gpt2Options { n_ctx: 64, ..Default::default() };
    let full = HeaderPlan::new(&header, cpu(), None, &opts).unwrap();
    let budgeted = |b: u64| -> Vec<Rc<dyn Backend>> { vec![Rc::new(BudgetCpu(CpuBackend::new(1), b))] };

    // A load is held to weights + KV + the compute buffer as planned (the loader measures
    // the same plan), so inspect is too. Exactly that much fits.
    assert_eq!(full.estimate.total(), full.total());
    let p = HeaderPlan::new(&header, budgeted(full.total()), None, &opts).unwrap();
    assert_eq!((p.misfit.as_deref(), p.total()), (None, full.total()));

    // One byte short: measured, and the misfit names the backend's whole need.
    let p = HeaderPlan::new(&header, budgeted(full.total() - 1), None, &opts).unwrap();
    assert!(p.compute_measured);
    let why = p.misfit.unwrap();
    assert!(why.starts_with(&format!("CPU needs {} bytes", full.total())), "{why}");
    assert!(why.ends_with(&format!("{} bytes are free", full.total() - 1)), "{why}");

    // Weights + KV over: the loader's own refusal, word for word, before anything is planned.
    let limit = full.weights() + full.kv() - 1;
    let p = HeaderPlan::new(&header, budgeted(limit), None, &opts).unwrap();
    assert!(!p.compute_measured);
    assert_eq!((p.weights(), p.kv(), p.compute()), (full.weights(), full.kv(), 0));
    let mut load = ggweb::model::loader::ModelLoader::new(
        Rc::new(BudgetCpu(CpuBackend::new(1), limit)),
        opts.clone(),
        ggweb::gguf::Limits::default(),
        None,
    );
    let err = load.feed(&bytes).expect_err("over budget");
    assert!(matches!(err, ModelError::OverBudget { .. }));
    assert_eq!(p.misfit.unwrap(), err.to_string());
}

/// tiny-gpt2-q8_0.gguf's header made to describe a context of 2^22 consistently, as
/// tests/e2e/helpers.mjs writeHugeCtx does: gpt2.context_length raised and
/// position_embd.weight given 2^22 rows, moved past every other tensor (4 GiB into the data).
fn huge_ctx_header(bytes: &[u8]) -> Vec<u8> {
    const HUGE_CTX: u64 = 1 << 22;
    let mut b = bytes.to_vec();
    let after =
        |b: &[u8], text: &[u8]| b.windows(text.len()).position(|w| w == text).expect("in the header") + text.len();
    let ctx = after(&b, b"gpt2.context_length");
    assert_eq!(u32::from_le_bytes(b[ctx..ctx + 4].try_into().unwrap()), 4, "a u32 context length");
    b[ctx + 4..ctx + 8].copy_from_slice(&(HUGE_CTX as u32).to_le_bytes());
    // A tensor info: name, n_dims (u32), ne (u64 each), type (u32), offset (u64).
    let pos = after(&b, b"position_embd.weight");
    b[pos + 12..pos + 20].copy_from_slice(&HUGE_CTX.to_le_bytes());
    b[pos + 24..pos + 32].copy_from_slice(&(1u64 << 32).to_le_bytes());
    b
}

/// Issue #40: under a 16 GiB budget (the Memory64 build's) a context of 2^22 is planned,
/// not aborted: the gradient pass over all of it would hold 843 GB of metric weights, which
/// the plan refuses before allocating them (it aborted the process, and trapped in wasm64).
#[test]
fn a_context_of_millions_is_planned_and_its_gradient_refused() {
    let header = read_header_unsized(&huge_ctx_header(&fixtures::model_bytes(FILES[2])));
    let budget = 16u64 << 30;
    let p =
        HeaderPlan::new(&header, vec![Rc::new(BudgetCpu(CpuBackend::new(1), budget))], None, &Gpt2Options::default())
            .unwrap();
    assert_eq!(p.n_ctx, 1 << 22);
    assert!(p.compute_measured);
    assert_eq!(p.misfit, None);
    // Weights (position_embd alone is 2^22 x 64 f32: 1 GiB), the f32 KV cache (2 layers x
    // K and V x 2^22 x 64 x 4 bytes: 4 GiB) and the compute buffers for n_batch 32.
    assert_eq!((p.weights(), p.kv(), p.compute()), (1080688512, 4294967296, 2684371200));
    assert_eq!(p.gradient, None, "a gradient over 2^22 tokens cannot fit what is left of 16 GiB");
}

/// The header of `bytes` read without a file size (the bytes are the header's only).
fn read_header_unsized(bytes: &[u8]) -> ggweb::gguf::GgufHeader {
    let mut r = HeaderReader::new(None);
    for chunk in bytes.chunks(4096) {
        if r.feed(chunk).unwrap() {
            break;
        }
    }
    r.into_header().unwrap()
}
