//! The GGUF stream reader and BufferLoader (CPU buffers; for half the inputs small tensors
//! are spread over a second buffer type with 4 KiB buffers), then the GPT-2 ModelLoader, on
//! arbitrary bytes cut into chunks (the plan comes from a hash of the input: see
//! `chunk_plan`). Besides "no panic, no unbounded allocation" (tight Limits and budgets):
//! - the outcome does not depend on the chunking: random chunks and one chunk give the
//!   same header and bytes, or the same error (kind, offset, key, tensor);
//! - without the file size up front a stream succeeds exactly when it does with it;
//! - every loaded tensor holds exactly the file's bytes at data_offset + its offset;
//! - `read_header` agrees with the streaming reader;
//! - a model that loads evaluates a token, and its tokenizer round-trips plain text.
#![no_main]

use std::rc::Rc;

use ggweb::backend::host::HostBuffer;
use ggweb::backend::{BackendError, Buffer, BufferType};
use ggweb::cpu::{CpuBackend, CpuBufferType};
use ggweb::gguf::{read_header, BufferLoader, GgufError, GgufHeader, GgufStreamReader, Limits, LoadedGguf};
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::ModelLoader;
use ggweb::model::ModelError;
use ggweb::tokenizer::char_to_byte;
use ggweb_fuzz::{chunk_plan, chunks, fnv1a};
use libfuzzer_sys::fuzz_target;

/// Weight bytes any one input may make us allocate (the reader's cap and the sink's budget).
const BUDGET: u64 = 4 << 20;

fn limits() -> Limits {
    Limits {
        max_tensors: 1024,
        max_kv: 1024,
        max_string_len: 1 << 16,
        max_array_len: 1 << 16,
        max_array_depth: 4,
        max_header_bytes: 1 << 20,
        max_weight_bytes: BUDGET,
        max_tensor_name_len: 63,
    }
}

/// A second host buffer type whose buffers hold at most 4 KiB, so that tensors placed on it
/// are spread over several buffers (alloc_tensors' splitting). Same alignment as the CPU's,
/// so the budget arithmetic is the same whatever the placement.
struct SmallBuft;

impl BufferType for SmallBuft {
    fn name(&self) -> &str {
        "SMALL"
    }
    fn alignment(&self) -> usize {
        CpuBufferType.alignment()
    }
    fn max_size(&self) -> usize {
        4096
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(HostBuffer::new(size, self.alignment(), "SMALL")?))
    }
}

/// `split`: small tensors alternate between the CPU and SMALL buffer types (by name), the
/// rest go to the CPU; otherwise everything is on the CPU.
fn load(data: &[u8], plan: &[usize], file_size: Option<u64>, split: bool) -> Result<LoadedGguf, GgufError> {
    let mut loader = if split {
        BufferLoader::with_placement(|info| {
            if info.nbytes <= 2048 && info.name.len() % 2 == 0 {
                Rc::new(SmallBuft) as Rc<dyn BufferType>
            } else {
                Rc::new(CpuBufferType)
            }
        })
    } else {
        BufferLoader::new(Rc::new(CpuBufferType))
    }
    .with_budget(BUDGET);
    let mut reader = GgufStreamReader::new(limits());
    if let Some(n) = file_size {
        reader = reader.with_file_size(n);
    }
    for c in chunks(data, plan) {
        reader.feed(c, &mut loader)?;
        // The promise made to the JS layer's progress bar.
        if let Some(total) = reader.total_expected() {
            assert!(total <= data.len() as u64 || file_size.is_none(), "total_expected {total} past the file");
        }
    }
    let header = reader.finish()?;
    loader.into_loaded(header)
}

/// Each tensor's bytes as the buffers hold them.
fn tensor_bytes(m: &LoadedGguf) -> Vec<Vec<u8>> {
    m.tensors
        .iter()
        .map(|t| {
            let d = t.data().expect("loaded tensors have data");
            let mut out = vec![0u8; t.nbytes()];
            d.buffer.get_bytes(d.offset, &mut out);
            out
        })
        .collect()
}

/// Header equality that treats NaN metadata values as equal (PartialEq does not).
fn same_header(a: &GgufHeader, b: &GgufHeader) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

fn same_error(a: &GgufError, b: &GgufError) -> bool {
    (&a.kind, a.offset, &a.key, &a.tensor) == (&b.kind, b.offset, &b.key, &b.tensor)
}

fn model(data: &[u8], plan: &[usize]) -> Result<(), ModelError> {
    let opts = Gpt2Options { n_ctx: 0, n_batch: 4, n_threads: 1, ..Default::default() };
    let backend = Rc::new(CpuBackend::new(1));
    let mut loader = ModelLoader::new(backend, opts, limits(), Some(data.len() as u64)).with_budget(BUDGET);
    for c in chunks(data, plan) {
        loader.feed(c)?;
    }
    let mut m = loader.finish()?;
    let n_vocab = m.model.hparams.n_vocab;
    let ids = m.tokenizer.encode("Hello, world <|endoftext|>", true);
    assert!(ids.iter().all(|&id| (id as usize) < n_vocab));
    // BPE output stands for the text's bytes, whatever the vocabulary; it decodes back to
    // the text unless BPE reached a control or user-defined token. Those decode to their
    // literal text, as in llama.cpp and HF tokenizers, so a vocabulary that types a byte
    // or merge token (say "Ġ") special does not round-trip there either: then each
    // special id must still be the byte-level token BPE meant.
    let text = "Hello, wörld 12";
    let ids = m.tokenizer.encode(text, false);
    if ids.iter().all(|&id| !m.tokenizer.is_special(id)) {
        assert_eq!(m.tokenizer.decode(&ids).as_deref(), Ok(text), "ids {ids:?}");
    } else {
        let bytes: Option<Vec<u8>> = ids
            .iter()
            .map(|&id| -> Option<Vec<u8>> {
                if m.tokenizer.is_special(id) {
                    m.tokenizer.token(id)?.chars().map(char_to_byte).collect()
                } else {
                    m.tokenizer.token_bytes(id).map(<[u8]>::to_vec)
                }
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        assert_eq!(bytes.as_deref(), Some(text.as_bytes()), "ids {ids:?}");
    }
    let logits = ggweb::model::context::block_on(m.model.decode(ggweb::model::context::Batch::last(&[(data.len() % n_vocab) as u32], 0))).map(|o| o.logits)?;
    assert_eq!(logits.len(), n_vocab);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let h = fnv1a(data);
    let len = data.len() as u64;
    let random = chunk_plan(data.len(), h);
    let whole = [data.len()];

    let a = load(data, &random, Some(len), h & 1 == 1);
    let b = load(data, &whole, Some(len), false);
    match (&a, &b) {
        (Ok(x), Ok(y)) => {
            assert!(same_header(&x.header, &y.header), "headers depend on the chunking");
            let bytes = tensor_bytes(x);
            assert!(bytes == tensor_bytes(y), "tensor bytes depend on the chunking");
            for (info, got) in x.header.tensors.iter().zip(&bytes) {
                let at = (x.header.data_offset + info.offset) as usize;
                assert!(got[..] == data[at..at + info.nbytes], "tensor '{}' differs from the file", info.name);
            }
            // Only what the budget allows was allocated.
            let held: usize = x.buffers.iter().map(|b| b.size()).sum();
            assert!(held as u64 <= BUDGET, "{held} bytes of buffers");
            let h2 = read_header(data, len, limits()).expect("read_header on a file that loads");
            assert!(same_header(&h2, &x.header), "read_header differs");
        }
        (Err(x), Err(y)) => assert!(same_error(x, y), "chunked: {x:?}\nwhole: {y:?}"),
        _ => panic!("chunked: {:?}\nwhole: {:?}", a.as_ref().err(), b.as_ref().err()),
    }

    // Streaming without a Content-Length: errors may come later, but the verdict is the same.
    let c = load(data, &chunk_plan(data.len(), h.rotate_left(17)), None, false);
    match (&a, &c) {
        (Ok(x), Ok(y)) => assert!(same_header(&x.header, &y.header), "headers depend on the file size"),
        (Err(_), Err(_)) => {}
        _ => panic!("with size: {:?}\nwithout: {:?}", a.as_ref().err(), c.as_ref().err()),
    }

    if a.is_ok() {
        let _ = model(data, &random);
    }
});
