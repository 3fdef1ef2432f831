//! GPT-2's byte-level BPE tokenizer, id-for-id equal to Hugging Face `tokenizers`.
//!
//! ```
//! use ggweb::tokenizer::{byte_to_char, Tokenizer};
//! // A toy vocabulary: the 256 byte tokens (id = byte), then what four merges make.
//! let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
//! tokens.extend(["he", "ll", "hell", "hello", "<|endoftext|>"].map(String::from));
//! let merges = ["h e", "l l", "he ll", "hell o"].map(String::from).to_vec();
//! let tok = Tokenizer::new(tokens, merges, None, None, Some(260)).unwrap();
//!
//! let ids = tok.encode("hello hello<|endoftext|>", true);
//! assert_eq!(ids, [259, b' ' as u32, 259, 260]);
//! assert_eq!(tok.decode(&ids).unwrap(), "hello hello<|endoftext|>");
//! // Not parsing specials (the default for user text), the marker is just characters.
//! assert_eq!(tok.encode("<|", false), [b'<' as u32, b'|' as u32]);
//! ```
//!
//! The inputs are what GGUF stores (`tokenizer.ggml.tokens`, `.merges`, `.token_type`,
//! `.bos_token_id`, `.eos_token_id`); [`Tokenizer::from_encoder_json_and_merges`] reads
//! OpenAI's `encoder.json` + `vocab.bpe` (HF `vocab.json` + `merges.txt`) instead.
//!
//! Encoding: optional special-token split, [`pretokenize`] (GPT-2's regex), bytes mapped to
//! token ids through [`byte_to_char`], then merges applied lowest rank first, leftmost first
//! among equal ranks (HF's order). Control tokens (type 3) are recognised only with
//! `parse_special`; user-defined ones (type 4) always, as HF and llama.cpp do. Both decode
//! to their literal text, even where BPE produced them (a vocabulary that types a byte or
//! merge token special, which llama.cpp and HF decode the same way): `decode(encode(t))`
//! is `t` whenever the encoding holds no special id.
//!
//! The module is `no_std` + `alloc`; with feature `std` encoding keeps a bounded word cache.

mod bytes;
mod json;
mod pretokenize;
mod stream;

pub use bytes::{byte_to_char, char_to_byte};
pub use pretokenize::{pretokenize, Pretokens};
pub use stream::StreamDecoder;

use alloc::collections::BinaryHeap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cmp::Reverse;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's llama_token_type).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// Why a tokenizer could not be built, or ids could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenizerError {
    EmptyVocab,
    TooManyTokens {
        n_tokens: usize,
    },
    /// `token_type` must have one entry per token.
    TokenTypesLength {
        n_tokens: usize,
        n_token_types: usize,
    },
    /// `which` is "bos" or "eos".
    SpecialIdOutOfRange {
        which: &'static str,
        id: u32,
        n_vocab: usize,
    },
    /// Byte-level BPE needs a token for every byte; this one has none.
    MissingByteToken {
        byte: u8,
        token: String,
    },
    /// Merge `index` is not two tokens separated by one space.
    BadMerge {
        index: usize,
        merge: String,
    },
    /// A side (or the result) of merge `index` is not in the vocabulary.
    MergeTokenMissing {
        index: usize,
        merge: String,
        token: String,
    },
    /// `ids[position]` is not below `n_vocab`.
    InvalidTokenId {
        id: u32,
        position: usize,
        n_vocab: usize,
    },
    BadEncoderJson {
        offset: usize,
        reason: String,
    },
    /// `encoder.json` ids must be exactly 0..n; `id` is the first one missing (or repeated).
    EncoderIdsNotDense {
        id: u32,
    },
}

impl core::fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use TokenizerError::*;
        match self {
            EmptyVocab => f.write_str("tokenizer: the vocabulary is empty"),
            TooManyTokens { n_tokens } => write!(f, "tokenizer: {n_tokens} tokens do not fit u32 ids"),
            TokenTypesLength { n_tokens, n_token_types } => {
                write!(f, "tokenizer: {n_token_types} token types for {n_tokens} tokens")
            }
            SpecialIdOutOfRange { which, id, n_vocab } => {
                write!(f, "tokenizer: {which} token id {id} is out of range (vocabulary of {n_vocab})")
            }
            MissingByteToken { byte, token } => {
                write!(f, "tokenizer: no token for byte 0x{byte:02x} (expected the token {token:?})")
            }
            BadMerge { index, merge } => write!(f, "tokenizer: merge {index} ({merge:?}) is not 'left right'"),
            MergeTokenMissing { index, merge, token } => {
                write!(f, "tokenizer: merge {index} ({merge:?}) uses {token:?}, which is not in the vocabulary")
            }
            InvalidTokenId { id, position, n_vocab } => {
                write!(f, "tokenizer: token id {id} at position {position} is out of range (vocabulary of {n_vocab})")
            }
            BadEncoderJson { offset, reason } => write!(f, "encoder.json: {reason} at byte {offset}"),
            EncoderIdsNotDense { id } => {
                write!(f, "encoder.json: ids are not exactly 0..n (id {id} missing or repeated)")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TokenizerError {}

/// Entries the word cache may hold (HF's default capacity); further words are not cached.
#[cfg(feature = "std")]
const CACHE_CAPACITY: usize = 10_000;
/// Longer pieces are rare and would bloat the cache.
#[cfg(feature = "std")]
const CACHE_MAX_PIECE: usize = 64;

/// GPT-2's tokenizer: vocabulary, merge ranks and special tokens. Build once, share freely.
pub struct Tokenizer {
    tokens: Vec<String>,
    /// The bytes each token decodes to: `token_bytes[token_offsets[id]..token_offsets[id + 1]]`.
    token_bytes: Vec<u8>,
    token_offsets: Vec<u32>,
    token_types: Option<Vec<i32>>,
    /// Text → id lookups (building the merge table, [`Tokenizer::token_id`]).
    by_text: TextIndex,
    byte_ids: [u32; 256],
    /// Sorted `(left << 32) | right` keys, and for each the merge's (rank, result id).
    merge_keys: Vec<u64>,
    merge_vals: Vec<(u32, u32)>,
    /// Control and user-defined tokens, longest text first (type 4 ones are always split out).
    specials: Vec<(u32, bool)>,
    bos: Option<u32>,
    eos: Option<u32>,
    #[cfg(feature = "std")]
    cache: std::sync::Mutex<std::collections::HashMap<String, Vec<u32>>>,
}

impl core::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_vocab", &self.tokens.len())
            .field("n_merges", &self.merge_keys.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer from GGUF's arrays: `tokens` as byte-level text ("Ġthe"),
    /// `merges` as "Ġ t" (rank = position), `token_types` (1 normal, 3 control, 4 user
    /// defined, ...). Without types, `bos` and `eos` are the control tokens.
    pub fn new(
        tokens: Vec<String>,
        merges: Vec<String>,
        token_types: Option<Vec<i32>>,
        bos: Option<u32>,
        eos: Option<u32>,
    ) -> Result<Tokenizer, TokenizerError> {
        let n_vocab = tokens.len();
        if n_vocab == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if u32::try_from(n_vocab).is_err() {
            return Err(TokenizerError::TooManyTokens { n_tokens: n_vocab });
        }
        if let Some(types) = &token_types {
            if types.len() != n_vocab {
                return Err(TokenizerError::TokenTypesLength { n_tokens: n_vocab, n_token_types: types.len() });
            }
        }
        for (which, id) in [("bos", bos), ("eos", eos)] {
            if let Some(id) = id.filter(|&id| id as usize >= n_vocab) {
                return Err(TokenizerError::SpecialIdOutOfRange { which, id, n_vocab });
            }
        }
        let type_of = |id: usize| -> i32 {
            match &token_types {
                Some(types) => types[id],
                None if bos == Some(id as u32) || eos == Some(id as u32) => token_type::CONTROL,
                None => token_type::NORMAL,
            }
        };

        // Special tokens decode to their own text; the others through the byte alphabet.
        let mut token_bytes = Vec::new();
        let mut token_offsets = Vec::with_capacity(n_vocab + 1);
        token_offsets.push(0u32);
        let mut specials = Vec::new();
        for (id, text) in tokens.iter().enumerate() {
            let ty = type_of(id);
            if ty == token_type::CONTROL || ty == token_type::USER_DEFINED {
                token_bytes.extend_from_slice(text.as_bytes());
                if !text.is_empty() {
                    specials.push((id as u32, ty == token_type::USER_DEFINED));
                }
            } else {
                for c in text.chars() {
                    match char_to_byte(c) {
                        Some(b) => token_bytes.push(b),
                        // Outside the byte alphabet (not in GPT-2): keep the char itself.
                        None => token_bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
            }
            let end =
                u32::try_from(token_bytes.len()).map_err(|_| TokenizerError::TooManyTokens { n_tokens: n_vocab })?;
            token_offsets.push(end);
        }
        specials.sort_by(|a, b| tokens[b.0 as usize].len().cmp(&tokens[a.0 as usize].len()).then(a.0.cmp(&b.0)));

        let by_text = TextIndex::new(&tokens);
        let lookup = |text: &str| -> Option<u32> { by_text.get(&tokens, text) };

        let mut byte_ids = [0u32; 256];
        for b in 0..=255u8 {
            let mut buf = [0u8; 4];
            let text = byte_to_char(b).encode_utf8(&mut buf);
            byte_ids[b as usize] =
                lookup(text).ok_or_else(|| TokenizerError::MissingByteToken { byte: b, token: text.to_string() })?;
        }

        let mut merge_list: Vec<(u64, u32, u32)> = Vec::with_capacity(merges.len());
        let mut joined = String::new();
        for (index, merge) in merges.iter().enumerate() {
            let mut parts = merge.split(' ');
            let (Some(left), Some(right), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(TokenizerError::BadMerge { index, merge: merge.clone() });
            };
            if left.is_empty() || right.is_empty() {
                return Err(TokenizerError::BadMerge { index, merge: merge.clone() });
            }
            let missing = |token: &str| TokenizerError::MergeTokenMissing {
                index,
                merge: merge.clone(),
                token: token.to_string(),
            };
            let l = lookup(left).ok_or_else(|| missing(left))?;
            let r = lookup(right).ok_or_else(|| missing(right))?;
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let new_id = lookup(&joined).ok_or_else(|| missing(&joined))?;
            merge_list.push((pair_key(l, r), index as u32, new_id));
        }
        // A repeated pair keeps its first (lowest) rank.
        merge_list.sort_by_key(|&(key, rank, _)| (key, rank));
        merge_list.dedup_by_key(|m| m.0);
        let merge_keys = merge_list.iter().map(|m| m.0).collect();
        let merge_vals = merge_list.iter().map(|m| (m.1, m.2)).collect();

        Ok(Tokenizer {
            tokens,
            token_bytes,
            token_offsets,
            token_types,
            by_text,
            byte_ids,
            merge_keys,
            merge_vals,
            specials,
            bos,
            eos,
            #[cfg(feature = "std")]
            cache: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Reads OpenAI's `encoder.json` (token → id) and `vocab.bpe` (a `#version` line, then
    /// one merge per line); HF's `vocab.json` and `merges.txt` are the same files.
    /// `<|endoftext|>`, when present, becomes the control token and both bos and eos.
    pub fn from_encoder_json_and_merges(encoder_json: &str, vocab_bpe: &str) -> Result<Tokenizer, TokenizerError> {
        let mut pairs = json::parse_vocab(encoder_json)?;
        pairs.sort_by_key(|p| p.1);
        let mut tokens = Vec::with_capacity(pairs.len());
        for (expect, (text, id)) in pairs.into_iter().enumerate() {
            if id as usize != expect {
                return Err(TokenizerError::EncoderIdsNotDense { id: expect as u32 });
            }
            tokens.push(text);
        }
        let eot = tokens.iter().position(|t| t == "<|endoftext|>").map(|i| i as u32);
        let types = tokens
            .iter()
            .map(|t| if t == "<|endoftext|>" { token_type::CONTROL } else { token_type::NORMAL })
            .collect();
        let mut lines = vocab_bpe.lines().peekable();
        if lines.peek().is_some_and(|l| l.starts_with("#version")) {
            lines.next();
        }
        let merges = lines.filter(|l| !l.is_empty()).map(String::from).collect();
        Tokenizer::new(tokens, merges, Some(types), eot, eot)
    }

    pub fn n_vocab(&self) -> usize {
        self.tokens.len()
    }

    pub fn n_merges(&self) -> usize {
        self.merge_keys.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The token's text as the vocabulary stores it ("Ġthe").
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of the token whose vocabulary text is `text` (lowest id if repeated).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.by_text.get(&self.tokens, text)
    }

    /// GGUF token type of `id` (NORMAL when built without types, CONTROL for bos/eos).
    pub fn token_type(&self, id: u32) -> Option<i32> {
        let i = id as usize;
        if i >= self.tokens.len() {
            return None;
        }
        Some(match &self.token_types {
            Some(types) => types[i],
            None if self.bos == Some(id) || self.eos == Some(id) => token_type::CONTROL,
            None => token_type::NORMAL,
        })
    }

    /// The vocabulary as GGUF's `tokenizer.ggml.tokens` stores it, by id.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// The merges as GGUF's `tokenizer.ggml.merges` stores them ("Ġ t"), by rank: the file's
    /// list, less a repeated pair's later copies (which never applied).
    pub fn merges(&self) -> Vec<String> {
        let mut by_rank: Vec<(u32, u64)> =
            self.merge_vals.iter().zip(&self.merge_keys).map(|(v, &k)| (v.0, k)).collect();
        by_rank.sort_unstable();
        by_rank
            .into_iter()
            .map(|(_, k)| {
                let (l, r) = (&self.tokens[(k >> 32) as usize], &self.tokens[(k & 0xffff_ffff) as usize]);
                let mut m = String::with_capacity(l.len() + 1 + r.len());
                m.push_str(l);
                m.push(' ');
                m.push_str(r);
                m
            })
            .collect()
    }

    /// Control and user-defined tokens: those that decode to their text, not to bytes.
    pub fn is_special(&self, id: u32) -> bool {
        self.specials.iter().any(|&(s, _)| s == id)
    }

    /// The bytes token `id` stands for (a piece of UTF-8, not always a whole character).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let (&start, &end) = (self.token_offsets.get(i)?, self.token_offsets.get(i + 1)?);
        Some(&self.token_bytes[start as usize..end as usize])
    }

    /// Token ids for `text`, no BOS added. With `parse_special`, control tokens' text
    /// (`<|endoftext|>`) becomes their id; without, it is ordinary characters.
    pub fn encode(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_into(text, parse_special, &mut out, None);
        out
    }

    /// [`Tokenizer::encode`] plus where each token came from: flat `[start, end)` pairs in
    /// UTF-16 code units of `text` (JS string indices). A token's span runs from the start
    /// of the character holding its first byte to the end of the one holding its last, so
    /// the spans tile the text (a token's leading space is its own) except where a
    /// character's bytes are split across tokens: those tokens all cover that character.
    pub fn encode_offsets(&self, text: &str, parse_special: bool) -> (Vec<u32>, Vec<u32>) {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        let mut lens = Vec::with_capacity(ids.capacity());
        self.encode_into(text, parse_special, &mut ids, Some(&mut lens));
        (ids, utf16_spans(text, &lens))
    }

    /// The one encoding path; `lens`, when asked for, gets each token's length in bytes of
    /// `text` (not of its vocabulary entry: a BPE token typed special decodes otherwise).
    fn encode_into(&self, text: &str, parse_special: bool, out: &mut Vec<u32>, mut lens: Option<&mut Vec<u32>>) {
        // Next occurrence of each special token at or after `done` (None: no more), so the
        // text is searched once per token rather than once per token and occurrence.
        let mut next: Vec<(Option<usize>, u32)> = self
            .specials
            .iter()
            .filter(|&&(_, user_defined)| parse_special || user_defined)
            .map(|&(id, _)| (text.find(self.tokens[id as usize].as_str()), id))
            .collect();
        let mut done = 0;
        loop {
            // Earliest start; `specials` is longest first, so ties keep the longest.
            let mut best: Option<(usize, u32)> = None;
            for (pos, id) in next.iter_mut() {
                if pos.is_some_and(|p| p < done) {
                    let from = done;
                    *pos = text[from..].find(self.tokens[*id as usize].as_str()).map(|p| from + p);
                }
                if let Some(p) = *pos {
                    if best.is_none_or(|(b, _)| p < b) {
                        best = Some((p, *id));
                    }
                }
            }
            let Some((start, id)) = best else { break };
            self.encode_plain(&text[done..start], out, lens.as_deref_mut());
            out.push(id);
            let len = self.tokens[id as usize].len();
            if let Some(l) = lens.as_deref_mut() {
                l.push(len as u32);
            }
            done = start + len;
        }
        self.encode_plain(&text[done..], out, lens);
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>, mut lens: Option<&mut Vec<u32>>) {
        for piece in pretokenize(text) {
            self.encode_piece(piece, out, lens.as_deref_mut());
        }
    }

    fn encode_piece(&self, piece: &str, out: &mut Vec<u32>, lens: Option<&mut Vec<u32>>) {
        if let [b] = piece.as_bytes() {
            out.push(self.byte_ids[*b as usize]);
            if let Some(l) = lens {
                l.push(1);
            }
            return;
        }
        // Offsets are asked for by the tokenizer entry, which has no cache (no `std`).
        if lens.is_some() {
            return self.bpe(piece.as_bytes(), out, lens);
        }
        #[cfg(feature = "std")]
        {
            let cacheable = piece.len() <= CACHE_MAX_PIECE;
            if cacheable {
                if let Ok(cache) = self.cache.lock() {
                    if let Some(ids) = cache.get(piece) {
                        out.extend_from_slice(ids);
                        return;
                    }
                }
            }
            let start = out.len();
            self.bpe(piece.as_bytes(), out, None);
            if cacheable {
                if let Ok(mut cache) = self.cache.lock() {
                    if cache.len() < CACHE_CAPACITY {
                        cache.insert(piece.to_string(), out[start..].to_vec());
                    }
                }
            }
        }
        #[cfg(not(feature = "std"))]
        self.bpe(piece.as_bytes(), out, None);
    }

    fn merge(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        self.merge_keys.binary_search(&pair_key(left, right)).ok().map(|i| self.merge_vals[i])
    }

    /// Merges `bytes`' byte tokens: always the pair with the lowest (rank, position) next,
    /// as HF's word.merge_all does, with a heap so long words stay O(n log n). `lens` gets
    /// each token's length in bytes.
    fn bpe(&self, bytes: &[u8], out: &mut Vec<u32>, mut lens: Option<&mut Vec<u32>>) {
        const NONE: u32 = u32::MAX;
        struct Sym {
            id: u32,
            len: u32,
            prev: u32,
            next: u32,
            alive: bool,
        }
        let n = bytes.len();
        let mut syms: Vec<Sym> = bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| Sym {
                id: self.byte_ids[b as usize],
                len: 1,
                prev: if i == 0 { NONE } else { i as u32 - 1 },
                next: if i + 1 == n { NONE } else { i as u32 + 1 },
                alive: true,
            })
            .collect();
        // (rank, left position, result id); entries go stale when a neighbour changes.
        let mut heap: BinaryHeap<Reverse<(u32, u32, u32)>> = BinaryHeap::with_capacity(n);
        for i in 0..n.saturating_sub(1) {
            if let Some((rank, new_id)) = self.merge(syms[i].id, syms[i + 1].id) {
                heap.push(Reverse((rank, i as u32, new_id)));
            }
        }
        while let Some(Reverse((_, pos, new_id))) = heap.pop() {
            let p = pos as usize;
            if !syms[p].alive || syms[p].next == NONE {
                continue;
            }
            let q = syms[p].next as usize;
            if self.merge(syms[p].id, syms[q].id).map(|m| m.1) != Some(new_id) {
                continue;
            }
            syms[p].id = new_id;
            syms[p].len += syms[q].len;
            syms[q].alive = false;
            let after = syms[q].next;
            syms[p].next = after;
            if after != NONE {
                syms[after as usize].prev = pos;
                if let Some((rank, id)) = self.merge(new_id, syms[after as usize].id) {
                    heap.push(Reverse((rank, pos, id)));
                }
            }
            let before = syms[p].prev;
            if before != NONE {
                if let Some((rank, id)) = self.merge(syms[before as usize].id, new_id) {
                    heap.push(Reverse((rank, before, id)));
                }
            }
        }
        let mut i = 0u32;
        while i != NONE {
            out.push(syms[i as usize].id);
            if let Some(l) = lens.as_deref_mut() {
                l.push(syms[i as usize].len);
            }
            i = syms[i as usize].next;
        }
    }

    /// The bytes `ids` stand for, concatenated (possibly not valid UTF-8).
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, TokenizerError> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for (position, &id) in ids.iter().enumerate() {
            let bytes = self.token_bytes(id).ok_or(TokenizerError::InvalidTokenId {
                id,
                position,
                n_vocab: self.tokens.len(),
            })?;
            out.extend_from_slice(bytes);
        }
        Ok(out)
    }

    /// The text of `ids`; bytes that do not form UTF-8 become U+FFFD as in HF's decode.
    /// Special tokens appear as their text.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let bytes = self.decode_bytes(ids)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// A decoder for ids arriving one at a time; see [`StreamDecoder`].
    pub fn stream_decoder(&self) -> StreamDecoder {
        StreamDecoder::new()
    }
}

/// Flat `[start, end)` UTF-16 spans of consecutive pieces of `text`, `lens` bytes each
/// (summing to `text.len()`), each widened to whole characters.
fn utf16_spans(text: &str, lens: &[u32]) -> Vec<u32> {
    // For every byte: the UTF-16 start and end of the character it belongs to.
    let mut start16 = alloc::vec![0u32; text.len()];
    let mut end16 = alloc::vec![0u32; text.len()];
    let mut u = 0u32;
    for (i, c) in text.char_indices() {
        let next = u + c.len_utf16() as u32;
        start16[i..i + c.len_utf8()].fill(u);
        end16[i..i + c.len_utf8()].fill(next);
        u = next;
    }
    let mut spans = Vec::with_capacity(lens.len() * 2);
    let mut at = 0usize;
    for &len in lens {
        let end = at + len as usize;
        // Empty pieces do not occur (an empty special token is never split out).
        let (s, e) = match len {
            0 => {
                let p = start16.get(at).copied().unwrap_or(u);
                (p, p)
            }
            _ => (start16[at], end16[end - 1]),
        };
        spans.extend_from_slice(&[s, e]);
        at = end;
    }
    spans
}

fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

/// An open-addressing hash set of token ids keyed by their text (no_std has no HashMap;
/// a sorted index made building GPT-2's 50000 merges several times slower).
struct TextIndex {
    slots: Vec<u32>,
}

impl TextIndex {
    const EMPTY: u32 = u32::MAX;

    fn hash(text: &str) -> u64 {
        // FNV-1a, then a multiply to spread the bits the mask keeps.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in text.as_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16
    }

    /// Indexes `tokens`; a repeated text keeps its lowest id.
    fn new(tokens: &[String]) -> TextIndex {
        let n_slots = (tokens.len() * 2).next_power_of_two().max(16);
        let mut index = TextIndex { slots: alloc::vec![Self::EMPTY; n_slots] };
        let mask = n_slots - 1;
        for (id, text) in tokens.iter().enumerate() {
            let mut i = Self::hash(text) as usize & mask;
            loop {
                let slot = index.slots[i];
                if slot == Self::EMPTY {
                    index.slots[i] = id as u32;
                    break;
                }
                if tokens[slot as usize] == *text {
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        index
    }

    fn get(&self, tokens: &[String], text: &str) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = Self::hash(text) as usize & mask;
        loop {
            let slot = self.slots[i];
            if slot == Self::EMPTY {
                return None;
            }
            if tokens[slot as usize] == text {
                return Some(slot);
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn toy(extra: &[&str], merges: &[&str], types: Option<Vec<i32>>) -> Result<Tokenizer, TokenizerError> {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        tokens.extend(extra.iter().map(|s| s.to_string()));
        Tokenizer::new(tokens, merges.iter().map(|s| s.to_string()).collect(), types, None, None)
    }

    #[test]
    fn merge_order_is_rank_then_position() {
        // "aaa": "a a" merges leftmost first → [aa, a]; then "aa a" is not a merge.
        let t = toy(&["aa", "aaa"], &["a a"], None).unwrap();
        assert_eq!(t.encode("aaa", false), [256, b'a' as u32]);
        assert_eq!(t.encode("aaaa", false), [256, 256]);
        // Lower rank wins regardless of position: "b c" (rank 0) before "a b" (rank 1).
        let t = toy(&["bc", "ab", "abc"], &["b c", "a b", "a bc"], None).unwrap();
        assert_eq!(t.encode("abc", false), [258]);
        let t = toy(&["bc", "ab"], &["a b", "b c"], None).unwrap();
        assert_eq!(t.encode("abc", false), [257, b'c' as u32]);
    }

    #[test]
    fn construction_errors() {
        assert_eq!(Tokenizer::new(vec![], vec![], None, None, None).unwrap_err(), TokenizerError::EmptyVocab);
        let e = Tokenizer::new(vec!["a".into()], vec![], None, None, None).unwrap_err();
        assert_eq!(e, TokenizerError::MissingByteToken { byte: 0, token: "\u{100}".into() });
        assert_eq!(
            toy(&["ab"], &["a b", "ab"], None).unwrap_err(),
            TokenizerError::BadMerge { index: 1, merge: "ab".into() }
        );
        assert_eq!(
            toy(&[], &["a b"], None).unwrap_err(),
            TokenizerError::MergeTokenMissing { index: 0, merge: "a b".into(), token: "ab".into() }
        );
        assert_eq!(
            toy(&[], &[], Some(vec![1; 3])).unwrap_err(),
            TokenizerError::TokenTypesLength { n_tokens: 256, n_token_types: 3 }
        );
        let tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        assert_eq!(
            Tokenizer::new(tokens, vec![], None, Some(3), Some(256)).unwrap_err(),
            TokenizerError::SpecialIdOutOfRange { which: "eos", id: 256, n_vocab: 256 }
        );
    }

    #[test]
    fn specials_and_decode_errors() {
        let mut types = vec![token_type::NORMAL; 259];
        types[256] = token_type::CONTROL;
        types[257] = token_type::USER_DEFINED;
        types[258] = token_type::CONTROL;
        let t = toy(&["<s>", "@@", "<s><s>"], &[], Some(types)).unwrap();
        // Longest control token wins at a position; user-defined ones are split out always.
        assert_eq!(t.encode("<s><s><s>@@", true), [258, 256, 257]);
        assert_eq!(t.encode("<s>@@", false), [b'<' as u32, b's' as u32, b'>' as u32, 257]);
        assert!(t.is_special(256) && !t.is_special(65));
        assert_eq!(
            t.decode(&[65, 259]).unwrap_err(),
            TokenizerError::InvalidTokenId { id: 259, position: 1, n_vocab: 259 }
        );
        // Half a character decodes to U+FFFD (lossy), its bytes are still exact.
        assert_eq!(t.decode(&[0xE2, 0x82]).unwrap(), "\u{FFFD}");
        assert_eq!(t.decode_bytes(&[0xE2, 0x82, 0xAC]).unwrap(), "€".as_bytes());
    }

    #[test]
    fn offsets_tile_the_text_in_utf16() {
        let mut types = vec![token_type::NORMAL; 260];
        types[259] = token_type::CONTROL;
        let t = toy(&["he", "ll", "hell", "<s>"], &["h e", "l l", "he ll"], Some(types)).unwrap();
        // "hell" + "o": the leading space is its own token in this vocabulary.
        let (ids, spans) = t.encode_offsets("hello he", false);
        assert_eq!(ids, [258, b'o' as u32, b' ' as u32, 256]);
        assert_eq!(spans, [0, 4, 4, 5, 5, 6, 6, 8]);
        // 😀 is 4 bytes, 4 byte tokens, 2 UTF-16 units: each of its tokens spans all of it.
        let (ids, spans) = t.encode_offsets("a😀é", false);
        assert_eq!(ids, [b'a' as u32, 0xF0, 0x9F, 0x98, 0x80, 0xC3, 0xA9]);
        assert_eq!(spans, [0, 1, 1, 3, 1, 3, 1, 3, 1, 3, 3, 4, 3, 4]);
        // A control token's span is its text, found only with `special`.
        let (ids, spans) = t.encode_offsets("x<s>", true);
        assert_eq!((ids, spans), (vec![b'x' as u32, 259], vec![0, 1, 1, 4]));
        assert_eq!(t.encode_offsets("x<s>", false).0, t.encode("x<s>", false));
        assert_eq!(t.encode_offsets("", false), (vec![], vec![]));
    }

    /// A vocabulary that types a token BPE produces (a byte token, a merge result) control
    /// or user-defined: BPE still uses it, and it decodes to its literal text, as in
    /// llama.cpp (token_to_piece) and HF tokenizers (added tokens skip the ByteLevel
    /// decoder), so such text does not round-trip. (A fuzzed GGUF typed "Ġ" control.)
    #[test]
    fn special_types_on_bpe_tokens_decode_literally() {
        let space = b' ' as u32; // "Ġ" in the toy vocabulary
        for ty in [token_type::CONTROL, token_type::USER_DEFINED] {
            let mut types = vec![token_type::NORMAL; 257];
            types[space as usize] = ty;
            types[256] = ty;
            let t = toy(&["Ġa"], &["Ġ a"], Some(types)).unwrap();
            assert!(t.is_special(space) && t.is_special(256));
            assert_eq!(t.encode("x y", false), [b'x' as u32, space, b'y' as u32]);
            assert_eq!(t.decode(&[b'x' as u32, space, b'y' as u32]).unwrap(), "xĠy");
            assert_eq!(t.token_bytes(space).unwrap(), [0xC4, 0xA0]);
            // The merge result too: " a" is one special token, decoded as "Ġa".
            assert_eq!(t.encode("x a", false), [b'x' as u32, 256]);
            assert_eq!(t.decode(&[b'x' as u32, 256]).unwrap(), "xĠa");
            // Its literal text is what parses to it (always for user-defined ones).
            assert_eq!(t.encode("Ġa", true), [256]);
            let plain = if ty == token_type::USER_DEFINED { vec![256] } else { vec![0xC4, 0xA0, b'a' as u32] };
            assert_eq!(t.encode("Ġa", false), plain);
        }
    }
}
