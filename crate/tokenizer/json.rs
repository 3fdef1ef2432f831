//! Just enough JSON for GPT-2's `encoder.json` (HF `vocab.json`): one object mapping token
//! strings to integer ids.

use alloc::string::String;
use alloc::vec::Vec;

use super::TokenizerError;

fn err(offset: usize, reason: &str) -> TokenizerError {
    TokenizerError::BadEncoderJson { offset, reason: String::from(reason) }
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn expect(&mut self, b: u8, what: &str) -> Result<(), TokenizerError> {
        self.skip_ws();
        if self.s.get(self.pos) == Some(&b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(err(self.pos, what))
        }
    }

    fn hex4(&mut self) -> Result<u32, TokenizerError> {
        let digits = self.s.get(self.pos..self.pos + 4).ok_or_else(|| err(self.pos, "truncated \\u escape"))?;
        let mut v = 0u32;
        for &d in digits {
            let x = (d as char).to_digit(16).ok_or_else(|| err(self.pos, "bad hex digit in \\u escape"))?;
            v = v * 16 + x;
        }
        self.pos += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, TokenizerError> {
        self.expect(b'"', "expected '\"' starting a key")?;
        let mut out = String::new();
        loop {
            // Copy the plain run up to the next quote or backslash in one go.
            let run_end = self.s[self.pos..].iter().position(|&b| b == b'"' || b == b'\\').map(|n| self.pos + n);
            let Some(run_end) = run_end else { return Err(err(self.pos, "unterminated string")) };
            let run = core::str::from_utf8(&self.s[self.pos..run_end]).map_err(|_| err(self.pos, "invalid UTF-8"))?;
            out.push_str(run);
            self.pos = run_end + 1;
            if self.s[run_end] == b'"' {
                return Ok(out);
            }
            let esc = *self.s.get(self.pos).ok_or_else(|| err(self.pos, "truncated escape"))?;
            self.pos += 1;
            let c = match esc {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => {
                    let at = self.pos - 2;
                    let hi = self.hex4()?;
                    let cp = if (0xD800..0xDC00).contains(&hi) {
                        if self.s.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return Err(err(at, "unpaired high surrogate"));
                        }
                        self.pos += 2;
                        let lo = self.hex4()?;
                        if !(0xDC00..0xE000).contains(&lo) {
                            return Err(err(at, "high surrogate without a low one"));
                        }
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    } else {
                        hi
                    };
                    char::from_u32(cp).ok_or_else(|| err(at, "\\u escape is not a char (lone surrogate)"))?
                }
                _ => return Err(err(self.pos - 1, "unknown escape")),
            };
            out.push(c);
        }
    }

    fn uint(&mut self) -> Result<u32, TokenizerError> {
        self.skip_ws();
        let start = self.pos;
        let mut v: u64 = 0;
        while let Some(d) = self.s.get(self.pos).filter(|b| b.is_ascii_digit()) {
            v = v * 10 + u64::from(d - b'0');
            if v > u64::from(u32::MAX) {
                return Err(err(start, "id does not fit u32"));
            }
            self.pos += 1;
        }
        if self.pos == start {
            return Err(err(start, "expected a non-negative integer id"));
        }
        Ok(v as u32)
    }
}

/// The (token, id) pairs of an `encoder.json` object, in file order.
pub(super) fn parse_vocab(json: &str) -> Result<Vec<(String, u32)>, TokenizerError> {
    let mut p = Parser { s: json.as_bytes(), pos: 0 };
    let mut out = Vec::new();
    p.expect(b'{', "expected '{' opening the vocabulary object")?;
    p.skip_ws();
    if p.s.get(p.pos) == Some(&b'}') {
        p.pos += 1;
    } else {
        loop {
            let key = p.string()?;
            p.expect(b':', "expected ':' after a key")?;
            let id = p.uint()?;
            out.push((key, id));
            p.skip_ws();
            match p.s.get(p.pos) {
                Some(b',') => p.pos += 1,
                Some(b'}') => {
                    p.pos += 1;
                    break;
                }
                _ => return Err(err(p.pos, "expected ',' or '}' after an id")),
            }
        }
    }
    p.skip_ws();
    if p.pos != p.s.len() {
        return Err(err(p.pos, "trailing data after the object"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn escapes_and_errors() {
        let v = parse_vocab(r#" {"a": 0, "\u0120the":1 ,"\"\\\/\n":2, "\ud83d\ude00": 3} "#).unwrap();
        let want: Vec<(String, u32)> =
            vec![("a".into(), 0), ("Ġthe".into(), 1), ("\"\\/\n".into(), 2), ("😀".into(), 3)];
        assert_eq!(v, want);
        assert_eq!(parse_vocab("{}").unwrap(), vec![]);
        let e = parse_vocab(r#"{"a": -1}"#).unwrap_err();
        assert_eq!(
            e,
            TokenizerError::BadEncoderJson { offset: 6, reason: "expected a non-negative integer id".into() }
        );
        assert!(matches!(parse_vocab(r#"{"\ud800": 1}"#), Err(TokenizerError::BadEncoderJson { offset: 2, .. })));
        assert!(matches!(parse_vocab(r#"{"a": 1"#), Err(TokenizerError::BadEncoderJson { offset: 7, .. })));
        assert!(matches!(parse_vocab(r#"{"a": 1} x"#), Err(TokenizerError::BadEncoderJson { offset: 9, .. })));
    }
}
