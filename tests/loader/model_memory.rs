//! What a streamed load holds besides its weights while the header is read: GPT-2's
//! vocabulary and merges once, moved from GGUF's arrays into the tokenizer. They arrive
//! before the weights, so in wasm memory whatever is made of them sits below the weights'
//! buffers for good (the heap never shrinks): a copy made there, even one freed soon after,
//! is memory the tab keeps (BENCHMARKS.md "Load memory in Chromium").

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::gguf::{GgufArray, GgufValue, Limits};
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::{tokenizer_from_gguf, ModelLoader};
use ggweb::model::plan::{HeaderPlan, HeaderReader};

use crate::gguf_hostile::peak_during;
use crate::support::fixtures;

const MB: f64 = 1e6;

#[test]
fn the_header_holds_the_tokenizer_once() {
    let bytes = fixtures::model_bytes("tiny-gpt2-f32.gguf");
    let size = Some(bytes.len() as u64);
    // The header alone, parsed: GPT-2's 50257 tokens and 50000 merges are most of it.
    let (header, header_bytes) = peak_during(|| {
        let mut r = HeaderReader::new(size);
        assert!(r.feed(&bytes).unwrap());
        r.into_header().unwrap()
    });
    let end = header.data_offset as usize;
    let opts = Gpt2Options::default();
    let plan = HeaderPlan::new(&header, vec![Rc::new(CpuBackend::new(1))], None, &opts).unwrap();
    let reference = tokenizer_from_gguf(&header).unwrap();
    let (_, tokenizer_bytes) = peak_during(|| tokenizer_from_gguf(&header).unwrap());

    // A load fed up to the end of the header: it has checked it, built the tokenizer and the
    // plan, and allocated the weights' buffers.
    let (loader, peak) = peak_during(|| {
        let mut l = ModelLoader::new(Rc::new(CpuBackend::new(1)), opts.clone(), Limits::default(), size);
        l.feed(&bytes[..end]).unwrap();
        l
    });
    eprintln!(
        "header {:.2} MB, tokenizer built from a copy {:.2} MB at its peak, a load fed its header {:.2} MB at its peak (its weights, {:.2} MB, not counted: natively the large buffers are mmap'd, not the allocator's)",
        header_bytes as f64 / MB,
        tokenizer_bytes as f64 / MB,
        peak as f64 / MB,
        plan.weights() as f64 / MB
    );
    // The loader's header keeps the tokenizer's keys with empty arrays: moved, not copied.
    let h = loader.header().expect("the header is in");
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"] {
        assert_eq!(h.get(key), Some(&GgufValue::Array(GgufArray::String(Vec::new()))), "{key}");
    }
    assert_eq!(h.get("tokenizer.ggml.token_type"), Some(&GgufValue::Array(GgufArray::I32(Vec::new()))));
    // The header once, the tokenizer's own tables, the plan's graphs: 7.0 MB, under the header
    // plus the tokenizer built from a copy (10.4 MB), which copying the arrays exceeds.
    assert!(peak < header_bytes + tokenizer_bytes, "{peak} >= {header_bytes} + {tokenizer_bytes}");

    // The same tokenizer as one built from a copy: GPT-2's ids for a text, its vocabulary and merges.
    let mut rest = loader;
    rest.feed(&bytes[end..]).unwrap();
    let loaded = rest.finish().unwrap();
    let text = "Hello, my name is ggweb: Ġ and ünïcödé, <|endoftext|> too.";
    assert_eq!(loaded.tokenizer.encode(text, true), reference.encode(text, true));
    assert_eq!(loaded.tokenizer.encode("Hello, my name is", false), vec![15496, 11, 616, 1438, 318]);
    assert_eq!(loaded.tokenizer.tokens(), reference.tokens());
    assert_eq!(loaded.tokenizer.merges(), reference.merges());
}
