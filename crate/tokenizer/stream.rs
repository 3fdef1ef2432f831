//! Decoding ids as they are generated: a token may end in the middle of a UTF-8 character
//! (GPT-2 spells most emoji with two or three tokens), so text is released only up to the
//! last complete character.
//!
//! ```
//! use ggweb::tokenizer::{byte_to_char, StreamDecoder, Tokenizer};
//! let tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
//! let tok = Tokenizer::new(tokens, vec![], None, None, None).unwrap();
//! let mut dec = StreamDecoder::new();
//! let ids = tok.encode("é!", false); // one token per byte here: [0xC3, 0xA9, b'!']
//! assert_eq!(dec.push(&tok, ids[0]).unwrap(), "");
//! assert_eq!(dec.push(&tok, ids[1]).unwrap(), "é");
//! assert_eq!(dec.push(&tok, ids[2]).unwrap(), "!");
//! assert_eq!(dec.push(&tok, 0xF0).unwrap(), ""); // a dangling lead byte...
//! assert_eq!(dec.flush(), "\u{FFFD}"); // ...is one replacement char at the end
//! ```
//!
//! The concatenated output equals [`Tokenizer::decode`] of all the ids: bytes that can never
//! become a character are replaced (U+FFFD per maximal bad sequence) as soon as that is
//! known, and only a possibly-incomplete tail is held back.

use alloc::string::String;
use alloc::vec::Vec;

use super::{Tokenizer, TokenizerError};

/// Holds the bytes of a character not yet complete. Not tied to a tokenizer, so it can
/// live next to one in a struct (or behind a wasm binding).
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    n_pushed: usize,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds token `id`; returns the text that is now complete (often empty or one token's).
    /// An invalid id is an error naming its position in the stream and changes nothing.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String, TokenizerError> {
        let bytes = tok.token_bytes(id).ok_or(TokenizerError::InvalidTokenId {
            id,
            position: self.n_pushed,
            n_vocab: tok.n_vocab(),
        })?;
        self.n_pushed += 1;
        Ok(self.push_bytes(bytes))
    }

    /// Adds raw bytes; returns the text that is now complete.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut done = 0;
        loop {
            match core::str::from_utf8(&self.pending[done..]) {
                Ok(s) => {
                    out.push_str(s);
                    done = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(core::str::from_utf8(&self.pending[done..done + valid]).unwrap_or_default());
                    done += valid;
                    match e.error_len() {
                        // Never valid whatever follows: replace now.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            done += bad;
                        }
                        // A character still being spelled: wait for more bytes.
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..done);
        out
    }

    /// Bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: a dangling partial character becomes U+FFFD. The decoder is then empty.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.n_pushed = 0;
        out
    }
}
