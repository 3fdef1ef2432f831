//! What loading a model costs in wasm linear memory, measured in headless Chromium. Alone in
//! its own test binary so that the memory's high-water mark is this one load's.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 \
//!     cargo test --target wasm32-unknown-unknown --test wasm_memory
//! ```
//!
//! The bound (the issue's): after the load, `memory.buffer.byteLength` is at most the memory
//! plan (weights + KV cache + compute buffer) + 16 MiB + what lies below the heap (static
//! data, which here includes the embedded model file, and the stack). The 16 MiB cover the
//! tokenizer (GPT-2's 50257 tokens and 50000 merges), the GGUF metadata while it is parsed,
//! chunk buffers, and the allocator's overhead. tests/e2e/model.spec.mjs checks the same on
//! the release module with the file streamed over HTTP.
#![cfg(target_arch = "wasm32")]

use ggweb::bindings::{wasm_heap_base, wasm_memory_bytes, WasmLoader};
use serde_json::Value;
use wasm_bindgen::JsValue;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

static F16_GGUF: &[u8] = include_bytes!("fixtures/llamacpp/tiny-gpt2-f16.gguf");

/// JSON text as the JS value a caller passes (the bindings take JS data, not JSON text).
fn js(json: &str) -> JsValue {
    js_sys::JSON::parse(json).expect("test JSON")
}

/// A value the bindings return, as serde_json's.
fn json(v: JsValue) -> Value {
    serde_json::from_str(&String::from(js_sys::JSON::stringify(&v).unwrap())).unwrap()
}

const MIB: f64 = 1024.0 * 1024.0;

#[wasm_bindgen_test]
async fn loading_takes_at_most_the_memory_plan_plus_16_mib() {
    let base = wasm_heap_base();
    let before = wasm_memory_bytes();
    // The embedded file is static data, below the heap.
    assert!(base >= F16_GGUF.len() as f64, "heap base {base} below the {}-byte embedded file", F16_GGUF.len());
    let mut l = WasmLoader::new(js(r#"{"nBatch":32}"#)).unwrap();
    for c in F16_GGUF.chunks(64 * 1024) {
        l.feed_bytes(c).unwrap();
    }
    let mut m = l.finish().unwrap();
    let after = wasm_memory_bytes();
    let info: Value = json(m.info());
    let mem = &info["memory"];
    let plan: f64 = ["weights", "kv", "compute"].iter().map(|k| mem[k].as_f64().unwrap()).sum();
    // F16 2-D weights (token_embd and output 2 × 64 × 50257 × 2 bytes dominate), F32 KV cache.
    assert_eq!(mem["kv"], 2 * 2 * 64 * 128 * 4);
    assert!(mem["weights"].as_f64().unwrap() > 12.8e6 && mem["weights"].as_f64().unwrap() < 13.2e6, "{mem}");
    let report = format!(
        "heap base {:.2} MiB, memory before {:.2} MiB, after load {:.2} MiB; plan {:.2} MiB \
         (weights {}, kv {}, compute {}); heap used beyond the plan {:.2} MiB",
        base / MIB,
        before / MIB,
        after / MIB,
        plan / MIB,
        mem["weights"],
        mem["kv"],
        mem["compute"],
        (after - base - plan) / MIB
    );
    web_sys::console::log_1(&report.clone().into());
    assert!(after <= base + plan + 16.0 * MIB, "{report}");

    // Running the model allocates nothing more: the compute buffer was reserved at load.
    let ids = m.tokenize("The quick brown fox jumps over the lazy dog.", false);
    m.logits(ids.clone()).await.unwrap();
    m.start(&ids, js(r#"{"maxTokens":20,"temperature":0}"#)).unwrap();
    while !m.prompt_step().await.unwrap() {}
    while !m.next().await.unwrap().is_undefined() {}
    assert_eq!(wasm_memory_bytes(), after, "memory grew while running the model");
}
