//! The memory budget of ModelLoader: weights plus the KV cache are compared with the budget
//! when the header arrives, and a model that does not fit is refused before any buffer is
//! allocated, with both numbers in the error.
//!
//! The tiny model (tests/model_support): n_embd 4, 1 layer, n_ff 8, n_ctx 8, 261 tokens, all
//! F32, CPU alignment 64. Weight buffer bytes, each tensor rounded up to 64:
//!   token_embd 4·261·4 = 4176 → 4224; position_embd 4·8·4 = 128;
//!   layer: norms 4 × 16 → 4 × 64, qkv 4·12·4 = 192, qkv bias 48 → 64, out 64, out bias 64,
//!          up 128, up bias 32 → 64, down 128, down bias 64 → 1024;
//!   output_norm 2 × 64 = 128.                         total 4224 + 128 + 1024 + 128 = 5504
//! KV cache: 2 tensors of n_embd · n_ctx · 4 = 128 bytes per layer → 256 (n_ctx 8), 128 (n_ctx 4).
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test file for wasm32

mod model_support;

use std::cell::Cell;
use std::rc::Rc;

use ggweb::backend::{Backend, BackendError, Buffer, BufferType};
use ggweb::cpu::{CpuBackend, CpuBufferType};
use ggweb::gguf::{read_header, Limits};
use ggweb::graph::Graph;
use ggweb::model::gpt2::Gpt2Options;
use ggweb::model::loader::{LoadEstimate, ModelLoader};
use ggweb::model::ModelError;
use model_support::{tiny_gpt2, TinySpec};

const WEIGHTS: u64 = 5504;
const KV_8: u64 = 256;

/// The CPU buffer type under its own name, counting allocations, with an optional budget
/// (what wasm32's address space or a WebGPU device would report).
struct CountingBuft {
    allocs: Cell<usize>,
    budget: Option<u64>,
}

impl BufferType for CountingBuft {
    fn name(&self) -> &str {
        "CPU"
    }
    fn alignment(&self) -> usize {
        CpuBufferType.alignment()
    }
    fn is_host(&self) -> bool {
        true
    }
    fn budget(&self) -> Option<u64> {
        self.budget
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        self.allocs.set(self.allocs.get() + 1);
        CpuBufferType.alloc_buffer(size)
    }
}

struct CountingBackend {
    buft: Rc<CountingBuft>,
    cpu: CpuBackend,
}

impl Backend for CountingBackend {
    fn name(&self) -> &str {
        "CPU"
    }
    fn buffer_type(&self) -> Rc<dyn BufferType> {
        self.buft.clone()
    }
    fn graph_compute(&self, graph: &Graph) -> Result<(), BackendError> {
        self.cpu.graph_compute(graph)
    }
}

fn backend(budget: Option<u64>) -> (Rc<CountingBackend>, Rc<CountingBuft>) {
    let buft = Rc::new(CountingBuft { allocs: Cell::new(0), budget });
    (Rc::new(CountingBackend { buft: buft.clone(), cpu: CpuBackend::new(1) }), buft)
}

fn opts(n_ctx: usize) -> Gpt2Options {
    Gpt2Options { n_ctx, ..Gpt2Options::default() }
}

/// Feeds `file` in 512-byte chunks; returns the error and how many bytes had been fed,
/// through the chunk that failed.
fn feed_until_error(
    mut loader: ModelLoader,
    file: &[u8],
) -> Result<ggweb::model::loader::LoadedModel, (ModelError, usize)> {
    let mut fed = 0;
    for chunk in file.chunks(512) {
        fed += chunk.len();
        loader.feed(chunk).map_err(|e| (e, fed))?;
    }
    loader.finish().map_err(|e| (e, fed))
}

#[test]
fn the_estimate_is_what_loading_allocates() {
    let file = tiny_gpt2(TinySpec::default());
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(0), Limits::default(), Some(file.len() as u64)).with_budget(WEIGHTS + KV_8);
    let m = feed_until_error(loader, &file).map_err(|(e, _)| e).unwrap();
    let plan = m.model.memory_plan();
    assert_eq!((plan.weights as u64, plan.kv as u64), (WEIGHTS, KV_8));
    // Weights, KV cache, compute buffer.
    assert_eq!(buft.allocs.get(), 3);

    let header = read_header(&file, file.len() as u64, Limits::default()).unwrap();
    let hp = &m.model.hparams;
    let est = LoadEstimate::new(&header, hp, &opts(4), 64).unwrap();
    assert_eq!(est, LoadEstimate { weights: WEIGHTS, kv: 128, n_ctx: 4 });
    assert_eq!(est.total(), 5632);
}

#[test]
fn over_budget_model_is_refused_before_any_allocation() {
    let file = tiny_gpt2(TinySpec::default());
    let data_offset = read_header(&file, file.len() as u64, Limits::default()).unwrap().data_offset as usize;
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(0), Limits::default(), Some(file.len() as u64)).with_budget(5759);
    let (e, fed) = feed_until_error(loader, &file).err().expect("over budget");
    let what = "weights 5504 bytes + KV cache 256 bytes for n_ctx 8 x 1 layers x n_embd 4";
    assert_eq!(e, ModelError::OverBudget { what: what.into(), needed: 5760, limit: 5759 });
    assert_eq!(e.to_string(), format!("model too large: needs 5760 bytes ({what}), the memory budget is 5759 bytes"));
    assert_eq!(buft.allocs.get(), 0, "a buffer was allocated for a refused model");
    // Refused with the chunk that completed the header, not after the weights streamed in.
    assert!(fed < data_offset + 512 && fed < file.len(), "refused after {fed} of {} bytes", file.len());
}

#[test]
fn the_kv_cache_counts_with_the_chosen_context() {
    let file = tiny_gpt2(TinySpec::default());
    // 5700 bytes: enough for the weights and n_ctx 4 (5632), not for n_ctx 8 (5760).
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(0), Limits::default(), None).with_budget(5700);
    let (e, _) = feed_until_error(loader, &file).err().expect("n_ctx 8 is over budget");
    assert!(matches!(e, ModelError::OverBudget { needed: 5760, limit: 5700, .. }), "{e:?}");
    assert_eq!(buft.allocs.get(), 0);

    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(4), Limits::default(), None).with_budget(5700);
    let m = feed_until_error(loader, &file).map_err(|(e, _)| e).unwrap();
    assert_eq!((m.model.n_ctx(), m.model.memory_plan().kv), (4, 128));
    assert_eq!(buft.allocs.get(), 3);
}

#[test]
fn the_backend_budget_applies_and_cannot_be_raised() {
    let file = tiny_gpt2(TinySpec::default());
    for raise in [None, Some(1 << 30)] {
        let (be, buft) = backend(Some(5000));
        let mut loader = ModelLoader::new(be, opts(0), Limits::default(), None);
        if let Some(b) = raise {
            loader = loader.with_budget(b);
        }
        assert_eq!(loader.budget(), Some(5000));
        let (e, _) = feed_until_error(loader, &file).err().expect("over the backend's budget");
        assert!(matches!(e, ModelError::OverBudget { needed: 5760, limit: 5000, .. }), "{e:?}");
        assert_eq!(buft.allocs.get(), 0);
    }
}

#[test]
fn options_that_cannot_work_are_refused_before_allocation() {
    let file = tiny_gpt2(TinySpec::default());
    for (o, msg) in [
        (opts(9), "invalid options: n_ctx 9 exceeds the model's context length 8"),
        (Gpt2Options { n_batch: 0, ..Gpt2Options::default() }, "invalid options: n_batch must be at least 1"),
    ] {
        let (be, buft) = backend(None);
        let loader = ModelLoader::new(be, o, Limits::default(), None);
        let (e, _) = feed_until_error(loader, &file).err().expect("bad options");
        assert_eq!(e.to_string(), msg);
        assert_eq!(buft.allocs.get(), 0);
    }
}

#[test]
fn a_huge_declared_context_is_refused_by_the_budget_not_allocated() {
    // context_length 2^30 (with a position_embd that does not even match it): the KV cache
    // alone would be 2 · 4 · 2^30 · 4 = 32 GiB. Refused from the header's numbers.
    let mut file = tiny_gpt2(TinySpec::default());
    let key = b"gpt2.context_length";
    let at = file.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4; // past the type id
    file[at..at + 4].copy_from_slice(&(1u32 << 30).to_le_bytes());
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(0), Limits::default(), None).with_budget(1 << 30);
    let (e, _) = feed_until_error(loader, &file).err().expect("huge context");
    assert_eq!(
        e,
        ModelError::OverBudget {
            what: "weights 5504 bytes + KV cache 34359738368 bytes for n_ctx 1073741824 x 1 layers x n_embd 4".into(),
            needed: 5504 + (32 << 30),
            limit: 1 << 30
        }
    );
    assert_eq!(buft.allocs.get(), 0);
}

#[test]
fn a_vocabulary_without_a_byte_token_is_refused_once_named() {
    // Found by fuzzing gguf_chunks: the message read "tokenizer: tokenizer: no token ...".
    // Here the token "A" (byte 0x41) is respelled "~", so no token spells byte 0x41.
    let mut file = tiny_gpt2(TinySpec::default());
    let entry = |c: u8| [&1u64.to_le_bytes()[..], &[c]].concat();
    let pattern = [entry(b'@'), entry(b'A')].concat();
    let at = file.windows(pattern.len()).position(|w| w == pattern).expect("the byte tokens '@', 'A'");
    file[at + pattern.len() - 1] = b'~';
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(0), Limits::default(), None);
    let (e, _) = feed_until_error(loader, &file).err().expect("no token for 'A'");
    let msg = "tokenizer: no token for byte 0x41 (expected the token \"A\")";
    assert_eq!(e, ModelError::Tokenizer(msg.into()));
    assert_eq!(e.to_string(), msg);
    assert_eq!(buft.allocs.get(), 0);
}
