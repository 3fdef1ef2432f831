//! GPT-2's `bytes_to_unicode`: each of the 256 byte values gets a visible, non-whitespace
//! char so that BPE tokens can be stored as text ("Ġthe" is " the").
//!
//! ```
//! use ggweb::tokenizer::{byte_to_char, char_to_byte};
//! assert_eq!(byte_to_char(b' '), 'Ġ');
//! assert_eq!(byte_to_char(b'a'), 'a');
//! assert_eq!(char_to_byte('Ċ'), Some(b'\n'));
//! assert_eq!(char_to_byte('€'), None);
//! ```

/// Bytes that already are printable Latin-1 stand for themselves.
const fn is_printable(b: u8) -> bool {
    matches!(b, 33..=126 | 161..=172 | 174..=255)
}

/// The 68 other bytes (controls, space, DEL, NBSP, soft hyphen) move to U+0100.. in byte order.
const N_MOVED: usize = 68;

const fn build_byte_to_char() -> [char; 256] {
    let mut t = ['\0'; 256];
    let mut moved = 0u32;
    let mut b = 0usize;
    while b < 256 {
        let cp = if is_printable(b as u8) {
            b as u32
        } else {
            moved += 1;
            255 + moved
        };
        t[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => panic!("bytes_to_unicode: not a char"),
        };
        b += 1;
    }
    t
}

const fn build_moved_to_byte() -> [u8; N_MOVED] {
    let mut t = [0u8; N_MOVED];
    let mut moved = 0usize;
    let mut b = 0usize;
    while b < 256 {
        if !is_printable(b as u8) {
            t[moved] = b as u8;
            moved += 1;
        }
        b += 1;
    }
    t
}

static BYTE_TO_CHAR: [char; 256] = build_byte_to_char();
static MOVED_TO_BYTE: [u8; N_MOVED] = build_moved_to_byte();

/// The char GPT-2's vocabulary uses for byte `b`.
#[inline]
pub fn byte_to_char(b: u8) -> char {
    BYTE_TO_CHAR[b as usize]
}

/// The byte a vocabulary char stands for; None for chars outside the 256-char alphabet.
#[inline]
pub fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 256 {
        is_printable(cp as u8).then_some(cp as u8)
    } else if cp < 256 + N_MOVED as u32 {
        Some(MOVED_TO_BYTE[(cp - 256) as usize])
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_known_chars() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b), "byte {b}");
        }
        // Moved bytes in order: 0x00..=0x20 → U+0100..=U+0120, 0x7F..=0xA0 → U+0121..=U+0142,
        // 0xAD → U+0143 (GPT-2's encoder.py).
        assert_eq!(byte_to_char(0), '\u{100}');
        assert_eq!(byte_to_char(b'\n'), '\u{10A}');
        assert_eq!(byte_to_char(b' '), '\u{120}');
        assert_eq!(byte_to_char(0x7F), '\u{121}');
        assert_eq!(byte_to_char(0xA0), '\u{142}');
        assert_eq!(byte_to_char(0xAD), '\u{143}');
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte(' '), None);
    }
}
