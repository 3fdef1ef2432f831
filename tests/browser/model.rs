//! The model bindings (`WasmLoader`, `WasmModel`) in headless Chromium, on the GGUFs
//! llama.cpp made (`tests/fixtures/llamacpp/`), against Hugging Face's outputs.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 \
//!     cargo test --target wasm32-unknown-unknown --test browser -- model::
//! ```
//!
//! The model is embedded at compile time from tests/fixtures/llamacpp/. The HF rows come
//! from tests/fixtures/tiny-gpt2.hf-rows.{json,bin} (tests/fixtures/make_hf_rows.py).

use ggweb::bindings::{WasmLoader, WasmModel};
use ggweb::gguf::{GgufArray, GgufValue, GgufWriter};
use ggweb::tokenizer::byte_to_char;
use ggweb::types::GgmlType;
use serde_json::Value;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

use crate::support::rng::Rng;

static F32_GGUF: &[u8] = include_bytes!("../fixtures/llamacpp/tiny-gpt2-f32.gguf");
static HF_ROWS_JSON: &str = include_str!("../fixtures/tiny-gpt2.hf-rows.json");
static HF_ROWS_BIN: &[u8] = include_bytes!("../fixtures/tiny-gpt2.hf-rows.bin");

struct Prompt {
    key: String,
    text: String,
    ids: Vec<u32>,
    greedy_ids: Vec<u32>,
    greedy_text: String,
    top5: Vec<u32>,
    row: Vec<f32>,
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn prompts() -> Vec<Prompt> {
    let meta: Value = serde_json::from_str(HF_ROWS_JSON).unwrap();
    let n_vocab = meta["n_vocab"].as_u64().unwrap() as usize;
    assert_eq!(HF_ROWS_BIN.len() % (4 * n_vocab), 0);
    meta["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let i = p["row"]["index"].as_u64().unwrap() as usize;
            let bytes = &HF_ROWS_BIN[i * n_vocab * 4..(i + 1) * n_vocab * 4];
            Prompt {
                key: p["key"].as_str().unwrap().into(),
                text: p["text"].as_str().unwrap().into(),
                ids: ids(&p["ids"]),
                greedy_ids: ids(&p["greedy_ids"]),
                greedy_text: p["greedy_text"].as_str().unwrap().into(),
                top5: ids(&p["last_top5_ids"]),
                row: bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            }
        })
        .collect()
}

/// (code, message) of a binding error.
fn err_of<T>(r: Result<T, JsValue>) -> (String, String) {
    let e = match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    };
    let code = js_sys::Reflect::get(&e, &JsValue::from_str("code")).unwrap().as_string().unwrap_or_default();
    let msg = e.dyn_into::<js_sys::Error>().expect("a JS Error").message().as_string().unwrap();
    (code, msg)
}

/// JSON text as the JS value a caller passes (the bindings take JS data, not JSON text).
fn js(json: &str) -> JsValue {
    js_sys::JSON::parse(json).expect("test JSON")
}

/// A value the bindings return, as serde_json's.
fn json(v: JsValue) -> Value {
    serde_json::from_str(&String::from(js_sys::JSON::stringify(&v).unwrap())).unwrap()
}

/// The next generated item's (token, text), None once the run is over.
async fn next_item(m: &mut WasmModel) -> Option<(u32, String)> {
    let v = ok(m.next().await);
    if v.is_undefined() {
        return None;
    }
    let j = json(v);
    Some((j["token"].as_u64().unwrap() as u32, j["text"].as_str().unwrap().into()))
}

/// `stats().stop`.
fn stop_reason(m: &WasmModel) -> Option<String> {
    json(m.stats())["stop"].as_str().map(String::from)
}

fn ok<T>(r: Result<T, JsValue>) -> T {
    r.unwrap_or_else(|e| panic!("{:?}", e.dyn_into::<js_sys::Error>().map(|e| e.message())))
}

/// Loads `bytes` in chunks of `chunk` bytes, each passed as a JS Uint8Array (as engine.js does).
fn load(bytes: &[u8], chunk: usize, opts: &str) -> WasmModel {
    let mut l = ok(WasmLoader::new(js(opts)));
    for c in bytes.chunks(chunk) {
        ok(l.feed(&js_sys::Uint8Array::from(c)));
    }
    ok(l.finish())
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn top5(row: &[f32]) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    idx.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    idx.truncate(5);
    idx
}

#[wasm_bindgen_test]
async fn f32_model_streamed_in_64k_chunks_matches_hf_logits_and_ids() {
    let mut l = ok(WasmLoader::new(js(r#"{"nBatch":32}"#)));
    assert_eq!(l.total_expected(), -1.0, "no header yet");
    let mut seen_total = None;
    for c in F32_GGUF.chunks(64 * 1024) {
        // As engine.js does: a JS Uint8Array per chunk.
        ok(l.feed(&js_sys::Uint8Array::from(c)));
        if seen_total.is_none() && l.total_expected() >= 0.0 {
            seen_total = Some(l.bytes_consumed());
        }
    }
    assert_eq!(l.bytes_consumed(), F32_GGUF.len() as f64);
    assert_eq!(l.total_expected(), F32_GGUF.len() as f64);
    // The tokenizer's arrays put the header past the first chunk; it ends well before the weights.
    let at = seen_total.unwrap();
    assert!(at > 65536.0 && at < 4e6, "header known after {at} bytes");
    let mut m = ok(l.finish());

    let text = String::from(js_sys::JSON::stringify(&m.info()).unwrap());
    // Keys in a fixed order (the demo lists them so), eps in f32's shortest form; the
    // snake_case names after the camelCase ones are deprecated duplicates (one release).
    let head = concat!(
        r#"{"arch":"gpt2","hparams":{"nVocab":50257,"nCtx":128,"nCtxTrain":128,"nEmbd":64,"nHead":4,"#,
        r#""nLayer":2,"nFf":256,"nBatch":32,"eps":0.00001,"n_vocab":50257,"n_ctx":128,"n_ctx_train":128,"n_embd":64,"#,
        r#""n_head":4,"n_layer":2,"n_ff":256,"n_batch":32},"backend":"cpu","memory":{"weights":26164736,"kv":131072,"compute":"#
    );
    assert!(text.starts_with(head), "{text}");
    let info: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(info["arch"], "gpt2");
    assert_eq!(info["backend"], "cpu");
    let hp = &info["hparams"];
    let got: Vec<u64> = ["n_vocab", "n_ctx", "n_ctx_train", "n_embd", "n_head", "n_layer", "n_ff", "n_batch"]
        .iter()
        .map(|k| hp[k].as_u64().unwrap())
        .collect();
    assert_eq!(got, [50257, 128, 128, 64, 4, 2, 256, 32]);
    let camel: Vec<u64> = ["nVocab", "nCtx", "nCtxTrain", "nEmbd", "nHead", "nLayer", "nFf", "nBatch"]
        .iter()
        .map(|k| hp[k].as_u64().unwrap())
        .collect();
    assert_eq!(camel, got);
    assert_eq!(
        (&info["tokenizer"]["nVocab"], &info["tokenizer"]["n_vocab"]),
        (&Value::from(50257), &Value::from(50257))
    );
    assert_eq!(info["tokenizer"]["eos"], 50256);
    // Weights: every tensor's F32 data, each at a 64-byte-aligned offset (CPU buffers): token_embd
    // and output 2 × 64 × 50257 × 4, position_embd 64 × 128 × 4, output_norm 2 × 256, and per
    // layer qkv 49152 + attn_output 16384 + ffn_up 65536 + ffn_down 65536 + vectors 3328.
    assert_eq!(info["memory"]["weights"], 2 * 12_865_792 + 32_768 + 512 + 2 * (49_152 + 16_384 + 2 * 65_536 + 3_328));
    // KV: 2 layers × K and V × n_embd 64 × n_ctx 128 × 4 bytes.
    assert_eq!(info["memory"]["kv"], 2 * 2 * 64 * 128 * 4);
    assert_eq!(m.n_ctx(), 128);
    assert_eq!(m.eos(), 50256);

    for p in prompts() {
        assert_eq!(m.tokenize(&p.text, false), p.ids, "tokenize {:?}", p.key);
        assert_eq!(ok(m.detokenize(&p.ids)), p.text);
        let logits = ok(m.logits(p.ids.to_vec()).await);
        let d = max_abs_diff(&logits, &p.row);
        web_sys::console::log_1(&format!("{}: {} tokens, max |logit - HF| = {d:e}", p.key, p.ids.len()).into());
        assert!(d <= 1e-4, "{}: max abs diff {d} > 1e-4", p.key);
        assert_eq!(top5(&logits), p.top5, "{}", p.key);
    }
}

fn greedy_params(max_tokens: usize) -> String {
    format!(r#"{{"maxTokens":{max_tokens},"temperature":0,"topK":40,"topP":0.95,"seed":1,"repeatPenalty":1}}"#)
}

#[wasm_bindgen_test]
async fn greedy_generation_matches_hf_token_for_token() {
    let mut m = load(F32_GGUF, 1 << 20, r#"{"nBatch":32}"#);
    for p in prompts() {
        ok(m.start(&p.ids, js(&greedy_params(p.greedy_ids.len()))));
        assert_eq!(stop_reason(&m), None);
        let mut steps = 1;
        while !ok(m.prompt_step().await) {
            steps += 1;
        }
        // 32 tokens a step: 5 and 10 tokens take one, the paragraph's 101 take four.
        assert_eq!(steps, p.ids.len().div_ceil(32), "{}", p.key);
        assert!(ok(m.prompt_step().await), "a finished prompt stays finished");
        let (mut got, mut text) = (Vec::new(), String::new());
        while let Some((id, piece)) = next_item(&mut m).await {
            got.push(id);
            text += &piece;
        }
        assert_eq!(got, p.greedy_ids, "{}", p.key);
        assert_eq!(text, p.greedy_text, "{}", p.key);
        assert_eq!(stop_reason(&m).as_deref(), Some("maxTokens"));
        assert_eq!(next_item(&mut m).await, None, "an ended run stays ended");
    }
    // A run after logits() (which leaves other tokens in the prompt cache) gives the same tokens.
    let p = &prompts()[0];
    ok(m.logits(prompts()[2].ids.clone()).await);
    ok(m.start(&p.ids, js(&greedy_params(3))));
    while !ok(m.prompt_step().await) {}
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next_item(&mut m).await.map(|t| t.0));
    }
    assert_eq!(got, [Some(p.greedy_ids[0]), Some(p.greedy_ids[1]), Some(p.greedy_ids[2]), None]);
}

#[wasm_bindgen_test]
async fn a_full_context_ends_generation_cleanly() {
    // n_ctx 8 and a 5-token prompt: positions 5, 6, 7 take three generated tokens, then
    // the context is full (prompt and output always fit it).
    let mut m = load(F32_GGUF, 1 << 20, r#"{"nCtx":8,"nBatch":4}"#);
    let p = &prompts()[0];
    ok(m.start(&p.ids, js(&greedy_params(100))));
    let mut steps = 1;
    while !ok(m.prompt_step().await) {
        steps += 1;
    }
    assert_eq!(steps, 2, "5 tokens in batches of 4");
    let mut got = Vec::new();
    while let Some((id, _)) = next_item(&mut m).await {
        got.push(id);
    }
    assert_eq!(got, p.greedy_ids[..3]);
    assert_eq!(stop_reason(&m).as_deref(), Some("contextFull"));

    // A prompt longer than the context is refused up front, naming both sizes.
    let long: Vec<u32> = p.greedy_ids[..9].to_vec();
    let (code, msg) = err_of(m.start(&long, js(&greedy_params(1))));
    assert_eq!(code, "invalid");
    assert_eq!(msg, "the prompt: context full: 9 positions needed, n_ctx is 8");
    let (code, msg) = err_of(m.logits(long.to_vec()).await);
    assert_eq!((code.as_str(), msg.as_str()), ("invalid", "context full: 9 positions needed, n_ctx is 8"));
}

#[wasm_bindgen_test]
async fn bad_input_is_an_error_naming_what_and_where() {
    // Options.
    for (opts, code, msg) in [
        ("[1]", "invalid", "WasmLoader options: expected a JSON object, got [1]"),
        (r#"{"nCtx":0}"#, "invalid", "WasmLoader options: nCtx must be an integer from 1 to 4294967295, got 0"),
        (r#"{"nBatch":2.5}"#, "invalid", "WasmLoader options: nBatch must be an integer from 1 to 4294967295, got 2.5"),
        (r#"{"ctx":4}"#, "invalid", "WasmLoader options: unknown option \"ctx\""),
        (
            r#"{"backend":"tpu"}"#,
            "invalid",
            "WasmLoader options: backend must be \"cpu\", \"webgpu\" or \"auto\", got \"tpu\"",
        ),
        (r#"{"backend":"webgpu"}"#, "unsupported", "backend \"webgpu\" needs the asynchronous factory"),
        (r#"{"gpuLayers":-2}"#, "invalid", "WasmLoader options: gpuLayers must be an integer >= -1, got -2"),
    ] {
        let (c, m) = err_of(WasmLoader::new(js(opts)));
        assert_eq!(c, code, "{opts}: {m}");
        assert!(m.starts_with(msg), "{opts}: {m:?} should start with {msg:?}");
    }

    // Not a GGUF: the magic, at byte 0; the loader stays failed.
    let mut l = ok(WasmLoader::new(js("{}")));
    let (code, msg) = err_of(l.feed(&js_sys::Uint8Array::from(&b"<!doctype html>"[..])));
    assert_eq!(code, "format");
    assert_eq!(msg, "GGUF: not a GGUF file: magic [3c, 21, 64, 6f], expected \"GGUF\", at byte 0");
    assert_eq!(err_of(l.feed_bytes(b"GGUF")).1, msg);
    assert_eq!(err_of(l.finish()).1, msg);

    // Truncated in the weights: how much was needed, how much came, in which tensor.
    let mut l = ok(WasmLoader::new(js("{}")));
    ok(l.feed_bytes(&F32_GGUF[..4 << 20]));
    let (code, msg) = err_of(l.finish());
    assert_eq!(code, "format");
    assert!(
        msg.starts_with(&format!(
            "GGUF: truncated: needed at least {} bytes, the stream ended after 4194304",
            F32_GGUF.len()
        )) && msg.contains("in tensor '")
            && msg.ends_with("at byte 4194304"),
        "{msg}"
    );

    // A context longer than the model's: refused as soon as the header has been read,
    // before any weight buffer is allocated.
    let mut l = ok(WasmLoader::new(js(r#"{"nCtx":4096}"#)));
    let (code, msg) = err_of(l.feed_bytes(F32_GGUF));
    assert!(!code.is_empty(), "{msg}");
    assert!(msg.contains("n_ctx 4096 exceeds the model's context length 128"), "{msg}");

    // Token ids and generation calls out of order.
    let mut m = load(F32_GGUF, 1 << 20, "{}");
    let (code, msg) = err_of(m.detokenize(&[15496, 50257]));
    assert_eq!(code, "invalid");
    assert_eq!(msg, "tokenizer: token id 50257 at position 1 is out of range (vocabulary of 50257)");
    assert_eq!(err_of(m.logits([].to_vec()).await).1, "needs at least one token id");
    assert_eq!(
        err_of(m.logits([1, 60000].to_vec()).await).1,
        "token id 60000 at index 1 is outside the vocabulary (n_vocab 50257)"
    );
    assert_eq!(err_of(m.next().await).1, "next: no generation was started (call start first)");
    assert_eq!(err_of(m.prompt_step().await).1, "prompt_step: no generation was started (call start first)");
    assert_eq!(err_of(m.start(&[], js("{}"))).1, "the prompt: needs at least one token id");
    assert_eq!(
        err_of(m.start(&[1], js(r#"{"topP":2}"#))).1,
        "generation options: topP must be a number from 0 to 1, got 2"
    );
    assert_eq!(
        err_of(m.start(&[1], js(r#"{"repeatPenalty":0}"#))).1,
        "generation options: repeatPenalty must be greater than 0 (1 disables it), got 0"
    );
    assert_eq!(
        err_of(m.start(&[1], js(r#"{"temperature":-1}"#))).1,
        "generation options: temperature must be a finite number >= 0, got -1"
    );
    assert_eq!(err_of(m.start(&[1], js(r#"{"maxTokens":"5"}"#))).0, "invalid");
    assert_eq!(
        err_of(m.start(&[1], js(r#"{"temp":1}"#))).1.split(" (known").next().unwrap(),
        "generation options: unknown option \"temp\""
    );
    ok(m.start(&[15496, 11, 616, 1438, 318], js(&greedy_params(2))));
    let (code, msg) = err_of(m.next().await);
    assert_eq!(code, "invalid");
    assert_eq!(
        msg,
        "next_token: the prompt is not evaluated yet (0 of 5 tokens; call prompt_step until it returns true)"
    );
    // After all those errors the model still works.
    while !ok(m.prompt_step().await) {}
    assert_eq!(next_item(&mut m).await.map(|t| t.0), Some(31026));
}

/// Writes a small GPT-2 GGUF: byte-level vocabulary of 256 + <|endoftext|>, two merges,
/// one layer, n_embd 8, n_ctx 16, seeded weights; 2-D weights F16, no output.weight (tied).
fn small_gpt2_gguf() -> Vec<u8> {
    let (n_embd, n_ff, n_ctx) = (8i64, 32i64, 16i64);
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    tokens.push("he".into());
    tokens.push("hel".into());
    tokens.push("<|endoftext|>".into());
    let n_vocab = tokens.len() as i64;
    let mut types = vec![1i32; tokens.len()];
    *types.last_mut().unwrap() = 3;
    let mut w = GgufWriter::new();
    let s = |v: &str| GgufValue::String(v.into());
    w.add_kv("general.architecture", s("gpt2")).unwrap();
    for (k, v) in [
        ("block_count", 1),
        ("context_length", n_ctx),
        ("embedding_length", n_embd),
        ("feed_forward_length", n_ff),
        ("attention.head_count", 2),
    ] {
        w.add_kv(&format!("gpt2.{k}"), GgufValue::U32(v as u32)).unwrap();
    }
    w.add_kv("gpt2.attention.layer_norm_epsilon", GgufValue::F32(1e-5)).unwrap();
    w.add_kv("tokenizer.ggml.model", s("gpt2")).unwrap();
    w.add_kv("tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(tokens))).unwrap();
    w.add_kv("tokenizer.ggml.token_type", GgufValue::Array(GgufArray::I32(types))).unwrap();
    w.add_kv("tokenizer.ggml.merges", GgufValue::Array(GgufArray::String(vec!["h e".into(), "he l".into()]))).unwrap();
    w.add_kv("tokenizer.ggml.eos_token_id", GgufValue::U32(n_vocab as u32 - 1)).unwrap();
    let mut rng = Rng::lcg(7);
    let mut next = move || (rng.unit() - 0.5) * 1.6;
    let mut add = |name: &str, ne: &[i64], ty: GgmlType, w: &mut GgufWriter| {
        let n: i64 = ne.iter().product();
        let vals: Vec<f32> = (0..n).map(|_| next()).collect();
        let data: Vec<u8> = match ty {
            GgmlType::F16 => vals.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
            _ => vals.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        };
        w.add_tensor(name, ty, ne, data).unwrap();
    };
    use GgmlType::{F16, F32};
    add("token_embd.weight", &[n_embd, n_vocab], F16, &mut w);
    add("position_embd.weight", &[n_embd, n_ctx], F32, &mut w);
    for (name, ne, ty) in [
        ("attn_norm.weight", vec![n_embd], F32),
        ("attn_norm.bias", vec![n_embd], F32),
        ("attn_qkv.weight", vec![n_embd, 3 * n_embd], F16),
        ("attn_qkv.bias", vec![3 * n_embd], F32),
        ("attn_output.weight", vec![n_embd, n_embd], F16),
        ("attn_output.bias", vec![n_embd], F32),
        ("ffn_norm.weight", vec![n_embd], F32),
        ("ffn_norm.bias", vec![n_embd], F32),
        ("ffn_up.weight", vec![n_embd, n_ff], F16),
        ("ffn_up.bias", vec![n_ff], F32),
        ("ffn_down.weight", vec![n_ff, n_embd], F16),
        ("ffn_down.bias", vec![n_embd], F32),
    ] {
        add(&format!("blk.0.{name}"), &ne, ty, &mut w);
    }
    add("output_norm.weight", &[n_embd], F32, &mut w);
    add("output_norm.bias", &[n_embd], F32, &mut w);
    w.to_bytes()
}

#[wasm_bindgen_test]
async fn one_byte_chunks_build_the_same_model_as_one_chunk() {
    let file = small_gpt2_gguf();
    // One chunk, 64 KiB chunks, 7-byte chunks, 1-byte chunks: bit-identical logits.
    let mut whole = load(&file, file.len(), "{}");
    let prompt = whole.tokenize("hello hel", false);
    // "hello" → hel l o (two merges), " hel" → Ġ hel; bytes are their own ids.
    assert_eq!(prompt, [257, 108, 111, 32, 257]);
    assert_eq!(whole.eos(), 258);
    let want = ok(whole.logits(prompt.to_vec()).await);
    assert_eq!(want.len(), 259);

    let mut l = ok(WasmLoader::new(js("{}")));
    let mut header_at = None;
    for (i, b) in file.iter().enumerate() {
        ok(l.feed_bytes(core::slice::from_ref(b)));
        if header_at.is_none() && l.total_expected() >= 0.0 {
            header_at = Some(i + 1);
        }
    }
    assert_eq!(l.bytes_consumed(), file.len() as f64);
    assert_eq!(l.total_expected(), file.len() as f64);
    // The header ends where the (32-aligned) data begins: total minus the padded weights.
    let header_at = header_at.unwrap();
    assert!(header_at < file.len() && header_at > 2000, "header complete after {header_at} bytes");
    let mut bytewise = ok(l.finish());
    assert_eq!(ok(bytewise.logits(prompt.to_vec()).await), want);
    for chunk in [7, 65536] {
        let mut m = load(&file, chunk, "{}");
        assert_eq!(ok(m.logits(prompt.to_vec()).await), want, "chunks of {chunk}");
        assert_eq!(info_without_memory(&m), info_without_memory(&whole));
    }
    let info = info_without_memory(&whole);
    assert_eq!(info["hparams"]["n_vocab"], 259);
    assert_eq!(info["hparams"]["n_ctx"], 16);
    // Weights: F16 token_embd 8×259 and 2-D layer weights, F32 vectors, each at a 64-byte
    // aligned offset in the CPU buffer.
    let pad = |n: u64| n.div_ceil(64) * 64;
    let weights = pad(8 * 259 * 2)
        + pad(8 * 16 * 4)
        + 4 * pad(8 * 4)
        + pad(8 * 24 * 2)
        + pad(24 * 4)
        + pad(8 * 8 * 2)
        + pad(8 * 4)
        + pad(8 * 32 * 2)
        + pad(32 * 4)
        + pad(32 * 8 * 2)
        + pad(8 * 4)
        + 2 * pad(8 * 4);
    assert_eq!(info["memory"]["weights"].as_u64().unwrap(), weights);
    assert_eq!(info["memory"]["kv"], 2 * 8 * 16 * 4);
    // And one byte short of the end is a truncated file.
    let mut l = ok(WasmLoader::new(js("{}")));
    for b in &file[..file.len() - 1] {
        ok(l.feed_bytes(core::slice::from_ref(b)));
    }
    let (code, msg) = err_of(l.finish());
    assert_eq!(code, "format");
    let n = file.len();
    assert_eq!(
        msg,
        format!("GGUF: truncated: needed at least {n} bytes, the stream ended after {}, in tensor 'output_norm.bias', at byte {}", n - 1, n - 1)
    );
}

/// info() without `wasmMemory`, which differs between loads.
fn info_without_memory(m: &WasmModel) -> Value {
    let mut info: Value = json(m.info());
    info.as_object_mut().unwrap().remove("wasmMemory").expect("info has wasmMemory");
    info
}

/// `WasmSae` in the browser (issue 35 items 4 and 5): `decoderRow`'s index is a JS number
/// checked whole and in range in Rust too (as a `u32` parameter 2^32 + 7 wrapped to row 7,
/// 2^53 and 1e300 to row 0), and a safetensors file whose tensors overlap is `format`.
#[wasm_bindgen_test]
fn sae_decoder_row_is_range_checked_in_rust_and_overlapping_tensors_are_format() {
    use ggweb::bindings::WasmSae;
    let cfg = include_str!("../fixtures/tiny-sae/cfg.json");
    let w: &[u8] = include_bytes!("../fixtures/tiny-sae/sae_weights.safetensors");
    let code = |e: JsValue| js_sys::Reflect::get(&e, &"code".into()).unwrap().as_string().unwrap();
    let sae = WasmSae::new(cfg, w).unwrap();
    let row7 = sae.decoder_row(7.0).unwrap();
    assert_eq!(row7.len(), 32);
    assert_ne!(sae.decoder_row(0.0).unwrap(), row7);
    for bad in [4294967296.0 + 7.0, 4294967296.0, 2f64.powi(53), 1e300, 64.0, -1.0, 0.5, f64::NAN, f64::INFINITY] {
        let e = sae.decoder_row(bad).unwrap_err();
        assert_eq!(code(e), "invalid", "decoderRow({bad})");
    }
    // W_enc's span moved onto W_dec's bytes (the header keeps its length: JSON allows spaces).
    let n = u64::from_le_bytes(w[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&w[8..8 + n]).unwrap();
    let overlapping = header.replacen("\"data_offsets\":[8192,16384]", "\"data_offsets\":[0,8192]    ", 1);
    assert_ne!(overlapping, header);
    let bytes = [&w[..8], overlapping.as_bytes(), &w[8 + n..]].concat();
    let e = WasmSae::new(cfg, &bytes).err().expect("refused");
    assert_eq!(code(e), "format");
}
