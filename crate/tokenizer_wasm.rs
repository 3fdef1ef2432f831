//! The `ggweb/tokenizer` entry's wasm-bindgen surface (web/tokenizer.js), built alone with
//! `--no-default-features --features tokenizer-wasm` into web/pkg-tokenizer/: GPT-2's BPE
//! ([`Tokenizer`]) and the GGUF header reader ([`HeaderReader`], `Model.inspect`'s), nothing
//! of the model's kernels, threads or WebGPU, so the module stays small.
//!
//! ```ignore
//! const r = new WasmTokenizerReader(file.size);
//! while (!r.feed(nextChunk())) {}       // true once the header is in
//! const tok = r.finish();               // consumes the reader; 'format' without a GPT-2 tokenizer
//! tok.encode('Hello world', false);     // Uint32Array [15496, 995]
//! ```
//!
//! Errors are JS `Error`s with a `code` (`format`, `invalid`), as the model bindings' are
//! (errors.js turns them into `GgwebError`s).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Display;

use wasm_bindgen::prelude::*;

use crate::model::loader::tokenizer_from_gguf;
use crate::model::plan::HeaderReader;
use crate::tokenizer::Tokenizer;

fn js_error(code: &str, message: impl Display) -> JsValue {
    let e = js_sys::Error::new(&format!("{message}"));
    // Setting a property on a fresh Error object cannot fail.
    let _ = js_sys::Reflect::set(&e, &JsValue::from_str("code"), &JsValue::from_str(code));
    e.into()
}

/// Reads a GGUF stream as far as its header.
#[wasm_bindgen]
pub struct WasmTokenizerReader {
    reader: HeaderReader,
}

#[wasm_bindgen]
impl WasmTokenizerReader {
    /// `file_size`: the file's length, or -1 if unknown.
    #[wasm_bindgen(constructor)]
    pub fn new(file_size: f64) -> WasmTokenizerReader {
        WasmTokenizerReader { reader: HeaderReader::new((file_size >= 0.0).then_some(file_size as u64)) }
    }

    /// Takes the next chunk; true once the header is complete (stop reading then).
    /// Malformed bytes fail with code `format`, naming the offset.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<bool, JsValue> {
        self.reader.feed(chunk).map_err(|e| js_error("format", e))
    }

    /// The tokenizer of the header's `tokenizer.ggml.*`; consumes the reader. An incomplete
    /// header, or one without a GPT-2 (byte-level BPE) tokenizer, is a `format` error.
    pub fn finish(self) -> Result<WasmTokenizer, JsValue> {
        let header = self.reader.into_header().map_err(|e| js_error("format", e))?;
        let tok = tokenizer_from_gguf(&header).map_err(|e| js_error("format", e))?;
        Ok(WasmTokenizer { tok })
    }
}

/// GPT-2's tokenizer, the model's own.
#[wasm_bindgen]
pub struct WasmTokenizer {
    tok: Tokenizer,
}

#[wasm_bindgen]
impl WasmTokenizer {
    /// Token ids; `special`: control tokens' text (`<|endoftext|>`) becomes their id.
    pub fn encode(&self, text: &str, special: bool) -> Vec<u32> {
        self.tok.encode(text, special)
    }

    /// `[n, ids (n), offsets (2n)]` in one array (one copy out); see [`Tokenizer::encode_offsets`].
    pub fn encode_offsets(&self, text: &str, special: bool) -> Vec<u32> {
        let (ids, spans) = self.tok.encode_offsets(text, special);
        let mut out = Vec::with_capacity(1 + ids.len() * 3);
        out.push(ids.len() as u32);
        out.extend_from_slice(&ids);
        out.extend_from_slice(&spans);
        out
    }

    /// The text of `ids` (U+FFFD where bytes do not form UTF-8); an id outside the
    /// vocabulary is `invalid`, naming it and its position.
    pub fn decode(&self, ids: &[u32]) -> Result<String, JsValue> {
        self.tok.decode(ids).map_err(|e| js_error("invalid", e))
    }

    #[wasm_bindgen(getter)]
    pub fn n_vocab(&self) -> u32 {
        self.tok.n_vocab() as u32
    }

    /// The end-of-text token (`tokenizer.ggml.eos_token_id`), or undefined.
    #[wasm_bindgen(getter)]
    pub fn eos(&self) -> Option<u32> {
        self.tok.eos()
    }

    #[wasm_bindgen(getter)]
    pub fn bos(&self) -> Option<u32> {
        self.tok.bos()
    }
}
