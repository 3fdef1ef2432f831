//! GPT-2's pre-tokenizer: the split HF `tokenizers` (ByteLevel, use_regex) and tiktoken's
//! `gpt2` make with
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
//! matched by hand because the `regex` crate has no lookahead.
//!
//! ```
//! use ggweb::tokenizer::pretokenize;
//! let pieces: Vec<&str> = pretokenize("I'll pay 42€  now!\n").collect();
//! assert_eq!(pieces, ["I", "'ll", " pay", " 42", "€", " ", " now", "!", "\n"]);
//! ```
//!
//! Classes use full Unicode: letters are general category L (Lu Ll Lt Lm Lo), numbers N
//! (Nd Nl No), whitespace the White_Space property. Marks (Mn, Mc) are neither, so they
//! split from the letters they combine with, as in the regex. The contractions are
//! case-sensitive ("'S" is not one) and need no word boundary ("'sa" gives "'s", "a").

use unicode_general_category::{get_general_category, GeneralCategory as G};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_ascii() {
        return match c {
            'a'..='z' | 'A'..='Z' => Class::Letter,
            '0'..='9' => Class::Number,
            // ASCII White_Space: TAB, LF, VT, FF, CR and space (not the other controls).
            '\t' | '\n' | '\x0B' | '\x0C' | '\r' | ' ' => Class::Space,
            _ => Class::Other,
        };
    }
    if c.is_whitespace() {
        return Class::Space;
    }
    match get_general_category(c) {
        G::UppercaseLetter | G::LowercaseLetter | G::TitlecaseLetter | G::ModifierLetter | G::OtherLetter => {
            Class::Letter
        }
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => Class::Number,
        _ => Class::Other,
    }
}

const CONTRACTIONS: [&str; 7] = ["s", "t", "re", "ve", "m", "ll", "d"];

/// Iterator over the pieces of `text`; see [`pretokenize`].
#[derive(Clone, Debug)]
pub struct Pretokens<'a> {
    text: &'a str,
    pos: usize,
}

/// Splits `text` into GPT-2's pre-tokens; concatenated they give back `text`.
pub fn pretokenize(text: &str) -> Pretokens<'_> {
    Pretokens { text, pos: 0 }
}

impl<'a> Iterator for Pretokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let start = self.pos;
        let rest = self.text.get(start..).filter(|r| !r.is_empty())?;
        let end = start + piece_len(rest);
        self.pos = end;
        Some(&self.text[start..end])
    }
}

/// Byte length of the regex's leftmost match at the start of `rest` (non-empty).
fn piece_len(rest: &str) -> usize {
    let mut chars = rest.chars();
    let Some(c) = chars.next() else { return 0 };
    if c == '\'' {
        let after = &rest.as_bytes()[1..];
        if let Some(suffix) = CONTRACTIONS.iter().find(|s| after.starts_with(s.as_bytes())) {
            return 1 + suffix.len();
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: the classes are disjoint, so the first
    // non-space char picks the alternative; an optional U+0020 (only that space) joins it.
    let (run_class, run_start) = match class(c) {
        Class::Space if c == ' ' => match chars.next().map(class) {
            Some(next) if next != Class::Space => (next, 1),
            _ => (Class::Space, 0),
        },
        cls => (cls, 0),
    };
    if run_class != Class::Space {
        return run_start + run_len(&rest[run_start..], run_class);
    }
    // `\s+(?!\S)` then `\s+`: a whitespace run leaves its last char for the next piece when
    // a non-space follows (so " word" keeps its space), unless the run is that one char.
    let mut n = 0usize;
    let mut last_start = 0usize;
    let mut end = 0usize;
    for (off, ch) in rest.char_indices() {
        if class(ch) != Class::Space {
            break;
        }
        n += 1;
        last_start = off;
        end = off + ch.len_utf8();
    }
    if end == rest.len() || n == 1 {
        end
    } else {
        last_start
    }
}

fn run_len(s: &str, cls: Class) -> usize {
    s.char_indices().find(|&(_, ch)| class(ch) != cls).map_or(s.len(), |(off, _)| off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn split(s: &str) -> Vec<&str> {
        pretokenize(s).collect()
    }

    #[test]
    fn whitespace_runs() {
        assert_eq!(split("a   b"), ["a", "  ", " b"]);
        assert_eq!(split("a \t\n b"), ["a", " \t\n", " b"]);
        assert_eq!(split("a\t\tb"), ["a", "\t", "\t", "b"]);
        assert_eq!(split("a  "), ["a", "  "]);
        assert_eq!(split("  "), ["  "]);
        assert_eq!(split("\n"), ["\n"]);
        assert_eq!(split("a\u{a0}b"), ["a", "\u{a0}", "b"]);
        assert_eq!(split("a \u{3000}b"), ["a", " ", "\u{3000}", "b"]);
        assert_eq!(split(""), [] as [&str; 0]);
    }

    #[test]
    fn contractions_and_classes() {
        assert_eq!(split("don't 'S 's"), ["don", "'t", " '", "S", " '", "s"]);
        assert_eq!(split("we'VE 'sup"), ["we", "'", "VE", " '", "sup"]);
        assert_eq!(split("x'''s"), ["x", "'''", "s"]);
        assert_eq!(split("abc123 ½² ٣"), ["abc", "123", " ½²", " ٣"]);
        // U+0301 (Mn) is not a letter: decomposed "é" splits.
        assert_eq!(split("cafe\u{301}s"), ["cafe", "\u{301}", "s"]);
        assert_eq!(split(" ?!. x"), [" ?!.", " x"]);
    }
}
