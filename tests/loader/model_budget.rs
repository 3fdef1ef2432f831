//! The memory budget of ModelLoader: weights, the KV cache and a bound on the compute
//! buffer are compared with the budget when the header arrives, and a model that does not
//! fit is refused before any buffer is allocated, with the numbers in the error. Before
//! that, the hyperparameters are checked against the file's own tensors: a file that lies
//! about them is a format error, not a size.
//!
//! The tiny model (tests/support/tiny_gpt2.rs): n_embd 4, 2 heads, 1 layer, n_ff 8, n_ctx 8, 261
//! tokens, all F32, CPU alignment 64. Weight buffer bytes, each tensor rounded up to 64:
//!   token_embd 4·261·4 = 4176 → 4224; position_embd 4·8·4 = 128;
//!   layer: norms 4 × 16 → 4 × 64, qkv 4·12·4 = 192, qkv bias 48 → 64, out 64, out bias 64,
//!          up 128, up bias 32 → 64, down 128, down bias 64 → 1024;
//!   output_norm 2 × 64 = 128.                         total 4224 + 128 + 1024 + 128 = 5504
//! KV cache: 2 tensors of n_embd · n_ctx · 4 = 128 bytes per layer → 256 (n_ctx 8), 128 (n_ctx 4).
//! Compute: gallocr's plan of the worst-case graph (N = n_batch = min(32, n_ctx) tokens at
//! the end of the context), measured by the loader before any allocation and allocated as
//! planned: 8640 bytes for n_ctx 8, 4352 for n_ctx 4 (the logits alone are 261 · N · 4; the
//! KQ mask, an input, N · N · 4).

use std::cell::Cell;
use std::rc::Rc;

use ggweb::backend::{Backend, BackendError, Buffer, BufferType};
use ggweb::cpu::{CpuBackend, CpuBufferType};
use ggweb::gguf::{read_header, Limits};
use ggweb::graph::Graph;
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::{LoadEstimate, ModelLoader};
use ggweb::model::ModelError;

use crate::support::tiny_gpt2::{tiny_gpt2, TinySpec};

const WEIGHTS: u64 = 5504;
const KV_8: u64 = 256;
const COMPUTE_8: u64 = 8640;
const TOTAL_8: u64 = WEIGHTS + KV_8 + COMPUTE_8; // 14400
const TOTAL_4: u64 = WEIGHTS + 128 + 4352; // 9984

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
    let loader = ModelLoader::new(be, opts(0), Limits::default(), Some(file.len() as u64)).with_budget(TOTAL_8);
    let m = feed_until_error(loader, &file).map_err(|(e, _)| e).unwrap();
    let plan = m.model.memory_plan();
    assert_eq!((plan.weights as u64, plan.kv as u64), (WEIGHTS, KV_8));
    // The compute buffer is the plan the loader measured and budgeted, byte for byte.
    assert_eq!(plan.compute as u64, COMPUTE_8);
    // Weights, KV cache, compute buffer.
    assert_eq!(buft.allocs.get(), 3);

    let header = read_header(&file, file.len() as u64, Limits::default()).unwrap();
    let hp = &m.model.hparams;
    // Before the plan: weights and KV cache; largest: the logits, 261 · 4 · 4 = 4176 (and
    // token_embd, as many bytes).
    let est = LoadEstimate::new(&header, hp, &opts(4), 64).unwrap();
    assert_eq!(est, LoadEstimate { weights: WEIGHTS, kv: 128, compute: 0, largest: 4176, n_ctx: 4, n_batch: 4 });
    // After the header, with the measured compute.
    let mut loader = ModelLoader::new(backend(None).0, opts(4), Limits::default(), None);
    loader.feed(&file).unwrap();
    assert_eq!(loader.estimate().map(|e| e.total()), Some(TOTAL_4));
}

#[test]
fn over_budget_model_is_refused_before_any_allocation() {
    let file = tiny_gpt2(TinySpec::default());
    let data_offset = read_header(&file, file.len() as u64, Limits::default()).unwrap().data_offset as usize;
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(0), Limits::default(), Some(file.len() as u64)).with_budget(TOTAL_8 - 1);
    let (e, fed) = feed_until_error(loader, &file).err().expect("over budget");
    let what = "weights 5504 bytes + KV cache 256 bytes for n_ctx 8 x 1 layers x n_embd 4 \
                + compute buffer 8640 bytes for n_batch 8";
    assert_eq!(e, ModelError::OverBudget { what: what.into(), needed: TOTAL_8, limit: TOTAL_8 - 1 });
    assert_eq!(e.to_string(), format!("model too large: needs 14400 bytes ({what}), the memory budget is 14399 bytes"));
    assert_eq!(buft.allocs.get(), 0, "a buffer was allocated for a refused model");
    // Refused with the chunk that completed the header, not after the weights streamed in.
    assert!(fed < data_offset + 512 && fed < file.len(), "refused after {fed} of {} bytes", file.len());
}

#[test]
fn the_kv_cache_and_compute_count_with_the_chosen_context() {
    let file = tiny_gpt2(TinySpec::default());
    // 12000 bytes: enough for n_ctx 4 (9984), not for n_ctx 8 (14400).
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(0), Limits::default(), None).with_budget(12000);
    let (e, _) = feed_until_error(loader, &file).err().expect("n_ctx 8 is over budget");
    assert!(matches!(e, ModelError::OverBudget { needed: TOTAL_8, limit: 12000, .. }), "{e:?}");
    assert_eq!(buft.allocs.get(), 0);

    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, opts(4), Limits::default(), None).with_budget(12000);
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
        // Weights and KV cache alone are over it: the cheap first check refuses it.
        assert!(matches!(e, ModelError::OverBudget { needed: 5760, limit: 5000, .. }), "{e:?}");
        assert!(e.to_string().contains("before any compute buffer for n_batch 8"), "{e}");
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

/// `file` with the u32 value of metadata key `key` replaced.
fn set_u32(mut file: Vec<u8>, key: &str, v: u32) -> Vec<u8> {
    let k = key.as_bytes();
    let at = file.windows(k.len()).position(|w| w == k).unwrap() + k.len() + 4; // past the type id
    file[at..at + 4].copy_from_slice(&v.to_le_bytes());
    file
}

/// `file` with tensor name `from` respelled `to` (the same length).
fn rename(mut file: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = file.windows(from.len()).position(|w| w == from.as_bytes()).unwrap();
    file[at..at + from.len()].copy_from_slice(to.as_bytes());
    file
}

fn refused(file: &[u8]) -> ModelError {
    let (be, buft) = backend(None);
    // A budget large enough for anything a lie could imply: consistency, not memory, refuses.
    let loader = ModelLoader::new(be, opts(0), Limits::default(), None).with_budget(u64::MAX);
    let (e, _) = feed_until_error(loader, file).err().expect("refused");
    assert_eq!(buft.allocs.get(), 0, "allocated for a refused file: {e}");
    e
}

#[test]
fn hyperparameters_that_contradict_the_tensors_are_format_errors() {
    let file = tiny_gpt2(TinySpec::default());
    let shape =
        |name: &str, expected: [i64; 4], got: [i64; 4]| ModelError::BadShape { name: name.into(), expected, got };
    // context_length 2^30: the KV cache would be 32 GiB; position_embd has 8 rows.
    assert_eq!(
        refused(&set_u32(file.clone(), "gpt2.context_length", 1 << 30)),
        shape("position_embd.weight", [4, 1 << 30, 1, 1], [4, 8, 1, 1])
    );
    // block_count u32::MAX: once `Vec::with_capacity(n_layer)`, an abort natively.
    let e = refused(&set_u32(file.clone(), "gpt2.block_count", u32::MAX));
    assert_eq!(
        e.to_string(),
        "metadata: block_count 4294967295 needs 51539607540 block tensors, the file has 16 tensors in all"
    );
    // A third block a two-block file does not have.
    let e = refused(&set_u32(tiny_gpt2(TinySpec { n_layer: 2, ..TinySpec::default() }), "gpt2.block_count", 3));
    assert!(matches!(e, ModelError::Metadata(_)), "{e:?}");
    let e = refused(&set_u32(tiny_gpt2(TinySpec { n_layer: 4, ..TinySpec::default() }), "gpt2.block_count", 3));
    assert_eq!(e.to_string(), "metadata: tensor 'blk.3.attn_norm.weight' is not a block of 0..3 (block_count)");
    assert_eq!(
        refused(&set_u32(file.clone(), "gpt2.embedding_length", 2)),
        shape("token_embd.weight", [2, 261, 1, 1], [4, 261, 1, 1])
    );
    assert_eq!(
        refused(&set_u32(file.clone(), "gpt2.feed_forward_length", u32::MAX)),
        shape("blk.0.ffn_up.weight", [4, u32::MAX as i64, 1, 1], [4, 8, 1, 1])
    );
    // head_count must divide embedding_length.
    let e = refused(&set_u32(file.clone(), "gpt2.attention.head_count", 3));
    assert_eq!(e.to_string(), "metadata: embedding_length 4 is not a positive multiple of head_count 3");
    // A block index no count reaches, where `il + gpu_layers` once overflowed.
    let e = refused(&rename(file.clone(), "blk.0.attn_output.weight", "blk.18446744073709551615"));
    assert_eq!(e, ModelError::MissingTensor("blk.0.attn_output.weight".into()));
}

#[test]
fn a_block_index_past_block_count_is_refused() {
    // Same tensor count as the real one, one of them renamed into a block that is not there.
    let file = tiny_gpt2(TinySpec { n_layer: 2, ..TinySpec::default() });
    let file = rename(set_u32(file, "gpt2.block_count", 1), "blk.1.attn_norm.weight", "blk.9.attn_norm.weight");
    assert_eq!(
        refused(&file).to_string(),
        "metadata: tensor 'blk.9.attn_norm.weight' is not a block of 0..1 (block_count)"
    );
}

#[test]
fn sizes_past_a_32_bit_address_space_are_refused_under_32_bit_rules() {
    // A consistent file with a long context: n_ctx 65536 (position_embd 4 × 65536 F32, 1
    // MiB). With n_batch 65536 the worst graph's KQ is 65536 · 65536 · 2 heads · 4 bytes =
    // 32 GiB: past what a 32-bit usize can even express, so wasm32 would wrap it.
    let file = tiny_gpt2(TinySpec { n_ctx: 1 << 16, ..TinySpec::default() });
    let o = Gpt2Options { n_batch: 1 << 16, ..Gpt2Options::default() };
    let (be, buft) = backend(None);
    let loader = ModelLoader::new(be, o.clone(), Limits::default(), None).with_usize_bits(32);
    let (e, _) = feed_until_error(loader, &file).err().expect("refused under 32-bit rules");
    let kq = 1u64 << 35;
    assert_eq!(
        e,
        ModelError::OverBudget {
            what: format!("its largest tensor, {kq} bytes, exceeds what one 32-bit allocation can hold"),
            needed: kq,
            limit: (1 << 31) - 1
        }
    );
    assert_eq!(buft.allocs.get(), 0);
    // Natively (64-bit) the same request meets the budget instead, named in full.
    let (be, buft) = backend(Some(1 << 30));
    let (e, _) = feed_until_error(ModelLoader::new(be, o, Limits::default(), None), &file).err().expect("over budget");
    assert!(matches!(e, ModelError::OverBudget { limit: 1073741824, .. }), "{e:?}");
    assert!(e.to_string().contains("for n_batch 65536"), "{e}");
    assert_eq!(buft.allocs.get(), 0);
}

#[test]
fn the_cli_refuses_a_lying_file_and_an_over_budget_model_with_a_typed_error() {
    let dir = std::env::temp_dir().join(format!("ggweb-model-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |file: &[u8], name: &str, max_memory: Option<&str>| {
        let path = dir.join(name);
        std::fs::write(&path, file).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ggweb"));
        cmd.args(["generate", "--model", path.to_str().unwrap(), "--prompt", "Hi", "-n", "1", "--temp", "0"]);
        match max_memory {
            Some(m) => cmd.env("GGWEB_MAX_MEMORY", m),
            None => cmd.env_remove("GGWEB_MAX_MEMORY"),
        };
        let out = cmd.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // The case: one metadata value changed made `ggweb generate` abort (exit 134).
    let lying = set_u32(tiny_gpt2(TinySpec::default()), "gpt2.block_count", u32::MAX);
    let (code, err) = run(&lying, "lying.gguf", None);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("block_count 4294967295"), "{err}");
    // The default budget natively is the machine's memory; GGWEB_MAX_MEMORY lowers it.
    let (code, err) = run(&tiny_gpt2(TinySpec::default()), "tiny.gguf", Some("12K"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("model too large: needs 14400 bytes") && err.contains("the memory budget is 12288 bytes"),
        "{err}"
    );
    let (code, err) = run(&tiny_gpt2(TinySpec::default()), "tiny.gguf", Some("1M"));
    assert_eq!(code, Some(0), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_native_budget_is_the_machines_memory() {
    // Linux: MemTotal. The CPU buffer type reports it, so every native load is budgeted.
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    if std::env::var_os("GGWEB_MAX_MEMORY").is_none() {
        assert_eq!(CpuBufferType.budget(), Some(kb * 1024));
    }
    for (s, n) in [
        ("4096", 4096u64),
        ("20K", 20 << 10),
        ("512M", 512 << 20),
        ("8G", 8 << 30),
        ("1.5GiB", 3 << 29),
        ("2TB", 2 << 40),
    ] {
        assert_eq!(ggweb::backend::host::parse_bytes(s), Some(n), "{s}");
    }
    for s in ["", "G", "-1", "1X", "99999999999T", "nan"] {
        assert_eq!(ggweb::backend::host::parse_bytes(s), None, "{s}");
    }
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

#[test]
fn a_weight_of_a_type_no_kernel_reads_is_a_format_error_at_load() {
    // The reader cannot tell an i32 bias from an f32 one (same size); the loader refuses it
    // when it builds the graph, naming the node and the weight, before the first token.
    use ggweb::gguf::GgufWriter;
    use ggweb::types::GgmlType;
    let file = tiny_gpt2(TinySpec::default());
    let h = read_header(&file, file.len() as u64, Limits::default()).unwrap();
    let retyped = |name: &str, ty: GgmlType| {
        let mut w = GgufWriter::new();
        for (k, v) in &h.metadata {
            w.add_kv(k, v.clone()).unwrap();
        }
        for t in &h.tensors {
            let at = (h.data_offset + t.offset) as usize;
            let ty = if t.name == name { ty } else { t.ty };
            w.add_tensor(&t.name, ty, &t.ne[..t.n_dims as usize], file[at..at + t.nbytes].to_vec()).unwrap();
        }
        w.to_bytes()
    };
    let refused = |f: &[u8]| {
        let loader = ModelLoader::new(Rc::new(CpuBackend::new(1)), opts(0), Limits::default(), None);
        feed_until_error(loader, f).err().expect("refused").0
    };
    let e = refused(&retyped("blk.0.attn_norm.bias", GgmlType::I32));
    assert_eq!(
        e.to_string(),
        "no backend runs node 'l0.attn_norm' (ADD) with weight 'blk.0.attn_norm.bias' (i32): a weight type this model cannot use"
    );
    let e = refused(&retyped("blk.0.ffn_up.weight", GgmlType::I32));
    assert!(matches!(&e, ModelError::Format(m) if m.contains("'blk.0.ffn_up.weight' (i32)")), "{e}");
}

#[test]
fn the_measured_compute_is_what_loading_allocates_for_llama_cpps_tiny_gpt2() {
    // The shared tiny GPT-2 (n_embd 64, 4 heads, 2 layers, n_ff 256, n_vocab 50257, n_ctx
    // 128): the loader's estimate, made when the header arrives, against the plan of the
    // model it builds, for several batch and context sizes: equal, byte for byte.
    // tests/fixtures/llamacpp (GGWEB_MODELS_DIR points elsewhere), as tests/support/fixtures.rs finds it.
    let dir = std::env::var("GGWEB_MODELS_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/llamacpp").to_string());
    let file = std::fs::read(format!("{dir}/tiny-gpt2-f16.gguf")).unwrap();
    for (n_ctx, n_batch) in [(0, 32), (0, 1), (0, 7), (64, 64), (128, 128), (16, 32)] {
        let o = Gpt2Options { n_ctx, n_batch, n_threads: 1, ..Default::default() };
        let mut loader = ModelLoader::new(Rc::new(CpuBackend::new(1)), o, Limits::default(), Some(file.len() as u64));
        loader.feed(&file).unwrap();
        let est = loader.estimate().unwrap();
        let m = loader.finish().unwrap();
        let plan = m.model.memory_plan();
        assert!(plan.compute > 0);
        assert_eq!(
            (plan.weights as u64, plan.kv as u64, plan.compute as u64),
            (est.weights, est.kv, est.compute),
            "n_ctx {n_ctx} n_batch {n_batch}"
        );
    }
}
