//! Element types with ggml's ids and block layouts.
//!
//! ```
//! use ggweb::types::GgmlType;
//! assert_eq!(GgmlType::Q8_0.blck_size(), 32);
//! assert_eq!(GgmlType::Q8_0.type_size(), 34);          // f16 scale + 32 × i8
//! assert_eq!(GgmlType::Q8_0.row_size(64), 68);
//! assert_eq!(GgmlType::from_id(14), Some(GgmlType::Q6_K));
//! ```
//!
//! `type_size` is the bytes of one block, `blck_size` the elements in it; for plain
//! types the block is one element. A row of `ne0` elements takes
//! `type_size * ne0 / blck_size` bytes (ggml_row_size), so `ne0` must be a multiple of
//! the block size for quantized types.

/// ggml's `QK_K`: elements in one K-quant super-block.
pub const QK_K: usize = 256;
/// ggml's `QK8_0`, `QK4_0`, ...: elements in one legacy quant block.
pub const QK: usize = 32;

/// ggml_type, with the same discriminants as ggml (they are what GGUF files store).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I32 = 26,
    BF16 = 30,
}

impl GgmlType {
    pub const ALL: [GgmlType; 16] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::I32,
        GgmlType::BF16,
    ];

    /// The type with ggml id `id`, or None for ids this runtime does not implement.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.iter().copied().find(|t| *t as u32 == id)
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// ggml_blck_size: elements per block.
    pub fn blck_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | I32 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => QK,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => QK_K,
        }
    }

    /// ggml_type_size: bytes per block.
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 => 2,
            Q4_0 => 2 + QK / 2,                          // d: f16, qs: 16 bytes of nibbles
            Q4_1 => 2 + 2 + QK / 2,                      // d, m: f16
            Q5_0 => 2 + 4 + QK / 2,                      // d, qh: u32 high bits
            Q5_1 => 2 + 2 + 4 + QK / 2,                  // d, m, qh
            Q8_0 => 2 + QK,                              // d, qs: 32 × i8
            Q8_1 => 2 + 2 + QK,                          // d, s = d·Σq: f16, qs: 32 × i8
            Q2_K => QK_K / 16 + QK_K / 4 + 2 + 2,        // scales: 4+4 bits, qs: 2 bits, d, dmin
            Q3_K => QK_K / 8 + QK_K / 4 + 12 + 2,        // hmask, qs: low 2 bits, scales[12], d
            Q4_K => 2 + 2 + 12 + QK_K / 2,               // d, dmin, scales[12], qs
            Q5_K => 2 + 2 + 12 + QK_K / 8 + QK_K / 2,    // d, dmin, scales[12], qh, qs
            Q6_K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, // ql, qh, scales: i8, d
            Q8_K => 4 + QK_K + QK_K / 16 * 2,            // d: f32, qs: 256 × i8, bsums: 16 × i16
        }
    }

    /// ggml_row_size: bytes of `ne` elements. `ne` must be a multiple of the block size.
    pub fn row_size(self, ne: i64) -> usize {
        debug_assert!((ne as usize).is_multiple_of(self.blck_size()));
        self.try_row_size(ne).unwrap_or_else(|| panic!("row of {ne} {self} elements: its byte size overflows usize"))
    }

    /// [`row_size`](Self::row_size) in checked arithmetic: None for a negative `ne` or a
    /// row whose bytes do not fit in `usize` (on wasm32, 4 GiB).
    pub fn try_row_size(self, ne: i64) -> Option<usize> {
        (usize::try_from(ne).ok()? / self.blck_size()).checked_mul(self.type_size())
    }

    pub fn is_quantized(self) -> bool {
        self.blck_size() > 1
    }

    /// ggml_type_name.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "f32",
            F16 => "f16",
            Q4_0 => "q4_0",
            Q4_1 => "q4_1",
            Q5_0 => "q5_0",
            Q5_1 => "q5_1",
            Q8_0 => "q8_0",
            Q8_1 => "q8_1",
            Q2_K => "q2_K",
            Q3_K => "q3_K",
            Q4_K => "q4_K",
            Q5_K => "q5_K",
            Q6_K => "q6_K",
            Q8_K => "q8_K",
            I32 => "i32",
            BF16 => "bf16",
        }
    }

    /// The type `b` of `mul_mat(a, b)` is converted to before the dot product with a row of
    /// this type (ggml's `vec_dot_type`): activations are quantized once per row.
    pub const fn vec_dot_type(self) -> GgmlType {
        use GgmlType::*;
        match self {
            Q4_0 | Q5_0 | Q8_0 => Q8_0,
            Q4_1 | Q5_1 | Q8_1 => Q8_1,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K => Q8_K,
            F16 => F16,
            BF16 => BF16,
            other => other,
        }
    }
}

impl core::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_layouts_match_ggml() {
        // Values of ggml's type_traits table.
        let expect = [
            (GgmlType::F32, 1, 4),
            (GgmlType::F16, 1, 2),
            (GgmlType::BF16, 1, 2),
            (GgmlType::I32, 1, 4),
            (GgmlType::Q4_0, 32, 18),
            (GgmlType::Q4_1, 32, 20),
            (GgmlType::Q5_0, 32, 22),
            (GgmlType::Q5_1, 32, 24),
            (GgmlType::Q8_0, 32, 34),
            (GgmlType::Q8_1, 32, 36),
            (GgmlType::Q2_K, 256, 84),
            (GgmlType::Q3_K, 256, 110),
            (GgmlType::Q4_K, 256, 144),
            (GgmlType::Q5_K, 256, 176),
            (GgmlType::Q6_K, 256, 210),
            (GgmlType::Q8_K, 256, 292),
        ];
        for (t, blck, size) in expect {
            assert_eq!((t.blck_size(), t.type_size()), (blck, size), "{t}");
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
        }
    }
}
