//! GPT-2's tokenizer on arbitrary text: for any UTF-8 string,
//! - `decode(encode(s, false)) == s` (byte-level BPE loses nothing), and every id is in
//!   the vocabulary;
//! - with special tokens parsed, decoding still gives `s` back (a special token decodes
//!   to its own text), and `<|endoftext|>` in `s` is then one token;
//! - the stream decoder, fed the ids one by one (plus its flush), yields the same text,
//!   also for arbitrary id sequences (bytes that are not UTF-8, split characters).
//!
//! Bytes that are not UTF-8 are decoded lossily first, so every input is a test.
//! The vocabulary is llama.cpp's ggml-vocab-gpt-2.gguf, read once (see `vocab_path`).
#![no_main]

use std::sync::OnceLock;

use ggweb::gguf::{read_header, Limits};
use ggweb::model::loader::tokenizer_from_gguf;
use ggweb::tokenizer::{StreamDecoder, Tokenizer};
use libfuzzer_sys::fuzz_target;

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = ggweb_fuzz::vocab_path();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let header = read_header(&bytes, bytes.len() as u64, Limits::default()).expect("vocab GGUF header");
        tokenizer_from_gguf(&header).expect("GPT-2 tokenizer from the vocab GGUF")
    })
}

fn stream(tok: &Tokenizer, ids: &[u32]) -> String {
    let mut dec = StreamDecoder::new();
    let mut out = String::new();
    for &id in ids {
        out.push_str(&dec.push(tok, id).expect("id from encode is valid"));
    }
    out.push_str(&dec.flush());
    out
}

fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let text = String::from_utf8_lossy(data);
    let n_vocab = tok.n_vocab() as u32;

    let literal = tok.encode(&text, false);
    assert!(literal.iter().all(|&id| id < n_vocab), "id out of range in {literal:?}");
    // Every byte is at least one token's worth, never more than one token per byte.
    assert!(literal.len() <= text.len(), "{} tokens for {} bytes", literal.len(), text.len());
    let decoded = tok.decode(&literal).expect("decode of encode");
    assert_eq!(decoded, text, "literal round trip, ids {literal:?}");
    assert_eq!(stream(tok, &literal), decoded, "stream decoder vs decode, ids {literal:?}");
    if let Some(eot) = tok.token_id("<|endoftext|>") {
        assert!(!literal.contains(&eot), "<|endoftext|> from literal text {text:?}");
    }

    // Arbitrary ids (pairs of input bytes): decode replaces what is not UTF-8, and the
    // stream decoder, which holds back split characters, must agree with it.
    let ids: Vec<u32> =
        data.chunks(2).map(|p| u16::from_le_bytes([p[0], *p.get(1).unwrap_or(&0)]) as u32 % n_vocab).collect();
    assert_eq!(stream(tok, &ids), tok.decode(&ids).expect("ids below n_vocab"), "arbitrary ids {ids:?}");

    let special = tok.encode(&text, true);
    assert!(special.iter().all(|&id| id < n_vocab), "id out of range in {special:?}");
    let decoded = tok.decode(&special).expect("decode of encode with specials");
    assert_eq!(decoded, text, "round trip with specials, ids {special:?}");
    assert_eq!(stream(tok, &special), decoded, "stream decoder vs decode with specials");
    if let Some(eot) = tok.token_id("<|endoftext|>") {
        let n_marks = text.matches("<|endoftext|>").count();
        assert_eq!(special.iter().filter(|&&id| id == eot).count(), n_marks, "ids {special:?}");
    }
});
