//! GGUF: a streaming reader that writes tensors into backend buffers as the bytes arrive,
//! metadata accessors, and a writer.
//!
//! ```
//! use std::rc::Rc;
//! use ggweb::cpu::CpuBufferType;
//! use ggweb::gguf::{load_from_bytes, GgufValue, GgufWriter};
//! use ggweb::types::GgmlType;
//!
//! let mut w = GgufWriter::new();
//! w.add_kv("gpt2.block_count", GgufValue::U32(2)).unwrap();
//! let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! w.add_tensor("w", GgmlType::F32, &[3, 2], bytes).unwrap();
//! let file = w.to_bytes();
//!
//! // In the browser the chunks come from fetch; here 5 bytes at a time.
//! let model = load_from_bytes(&file, 5, Rc::new(CpuBufferType)).unwrap();
//! assert_eq!(model.header.get_u32("gpt2.block_count"), Ok(2));
//! assert_eq!(model.tensor("w").unwrap().get_f32_nd(2, 1, 0, 0), 6.0);
//! ```
//!
//! A GGUF file is a header (magic, version, counts, metadata key/values, tensor infos),
//! padding to the alignment, then the data section; tensor offsets are relative to its
//! start. [`GgufStreamReader`] parses the header as it arrives, checks every tensor info
//! before a single weight byte is allocated, hands the header to a [`TensorSink`] (which
//! allocates: [`BufferLoader`] declares the tensors in a `no_alloc` context and places them
//! in backend buffers, like llama.cpp's non-mmap path), then passes each range of weight
//! bytes to the sink as it streams past. Nothing but a few bytes of a split header field
//! (or the string being received) is kept between chunks.
//!
//! What is accepted, and where this is stricter than llama.cpp's `gguf.cpp`:
//! - versions 2 and 3, little-endian; `general.alignment` must be a u32 power of two;
//! - tensor names up to 63 bytes (ggml's `GGML_MAX_NAME` includes the NUL), unique;
//! - tensors in any order, aligned, non-overlapping (llama.cpp wants them packed in order);
//! - after the last tensor, only zero bytes up to the next multiple of the alignment
//!   (llama.cpp ignores whatever follows); gaps between tensors are skipped unread;
//! - strings must be UTF-8, bools 0 or 1, keys unique; arrays may nest ([`Limits`]).

mod error;
mod loader;
mod reader;
mod value;
mod writer;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

pub use error::{ErrorDetail, GgufError, GgufErrorKind};
pub use loader::{load_from_bytes, load_with, BufferLoader, LoadStats, LoadedGguf};
#[cfg(feature = "std")]
pub use loader::{load_from_reader, load_from_reader_with};
pub use reader::{read_header, GgufStreamReader, NullSink, TensorSink};
pub use value::{GgufArray, GgufValue, ValueType};
pub use writer::GgufWriter;

use crate::types::GgmlType;

/// "GGUF" as the first four bytes.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The version the writer produces.
pub const GGUF_VERSION: u32 = 3;
/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The key that overrides the alignment (a u32, power of two).
pub const KEY_ALIGNMENT: &str = "general.alignment";
/// ggml's GGML_MAX_NAME is 64 including the terminating NUL.
pub const MAX_TENSOR_NAME: u64 = 63;

/// Caps on what a file may declare. Every count and length read from a file is checked
/// against these before it sizes anything.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub max_tensors: u64,
    pub max_kv: u64,
    /// Bytes of one string (keys and values).
    pub max_string_len: u64,
    /// Elements of one array.
    pub max_array_len: u64,
    /// Levels of arrays inside arrays (1 = no nesting).
    pub max_array_depth: u32,
    /// Everything before the data section; bounds the memory the metadata takes (in
    /// memory a value may take a few times its bytes in the file: a 9-byte one-character
    /// string becomes a String plus a heap block).
    pub max_header_bytes: u64,
    /// Total bytes of tensor data, and the length of the data section.
    pub max_weight_bytes: u64,
    pub max_tensor_name_len: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_tensors: 64 * 1024,
            max_kv: 64 * 1024,
            max_string_len: 1 << 20,
            max_array_len: 64 << 20,
            max_array_depth: 8,
            // GPT-2's header is 1.7 MB; those of the largest vocabularies (Llama 3, Gemma 3) under 16 MB.
            max_header_bytes: 64 << 20,
            max_weight_bytes: 64 << 30,
            max_tensor_name_len: MAX_TENSOR_NAME,
        }
    }
}

/// One tensor as the header describes it. `ne` has 1s past `n_dims`.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub n_dims: u32,
    pub ne: [i64; 4],
    pub ty: GgmlType,
    /// Relative to the data section.
    pub offset: u64,
    /// ggml_nbytes of the contiguous tensor.
    pub nbytes: usize,
}

/// A parsed GGUF header: metadata in file order, tensor infos in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    kv_index: BTreeMap<String, usize>,
    tensor_index: BTreeMap<String, usize>,
}

macro_rules! scalar_getter {
    ($(#[$m:meta])* $fn:ident, $variant:ident, $t:ty) => {
        $(#[$m])*
        pub fn $fn(&self, key: &str) -> Result<$t, GgufError> {
            match self.require(key)? {
                GgufValue::$variant(v) => Ok(v.clone()),
                other => Err(wrong_type(key, ValueType::$variant.name(), other)),
            }
        }
    };
}

macro_rules! array_getter {
    ($(#[$m:meta])* $fn:ident, $variant:ident, $t:ty, $name:literal) => {
        $(#[$m])*
        pub fn $fn(&self, key: &str) -> Result<&[$t], GgufError> {
            match self.require(key)? {
                GgufValue::Array(GgufArray::$variant(v)) => Ok(v),
                other => Err(wrong_type(key, $name, other)),
            }
        }
    };
}

fn wrong_type(key: &str, expected: &'static str, found: &GgufValue) -> GgufError {
    GgufError::new(GgufErrorKind::WrongKeyType { key: String::from(key), expected, found: found.type_name() }).key(key)
}

impl GgufHeader {
    pub(crate) fn new(
        version: u32,
        metadata: Vec<(String, GgufValue)>,
        kv_index: BTreeMap<String, usize>,
        tensors: Vec<TensorInfo>,
        tensor_index: BTreeMap<String, usize>,
        alignment: u64,
        data_offset: u64,
    ) -> GgufHeader {
        GgufHeader { version, metadata, tensors, alignment, data_offset, kv_index, tensor_index }
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.kv_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The value, or a MissingKey error naming it.
    pub fn require(&self, key: &str) -> Result<&GgufValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::new(GgufErrorKind::MissingKey { key: String::from(key) }).key(key))
    }

    scalar_getter!(get_u8, U8, u8);
    scalar_getter!(get_i8, I8, i8);
    scalar_getter!(get_u16, U16, u16);
    scalar_getter!(get_i16, I16, i16);
    scalar_getter!(
        /// A u32 value (hyperparameters, token ids). Strict: a u64 is a WrongKeyType error.
        get_u32,
        U32,
        u32
    );
    scalar_getter!(get_i32, I32, i32);
    scalar_getter!(get_u64, U64, u64);
    scalar_getter!(get_i64, I64, i64);
    scalar_getter!(get_f32, F32, f32);
    scalar_getter!(get_f64, F64, f64);
    scalar_getter!(get_bool, Bool, bool);

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        match self.require(key)? {
            GgufValue::String(s) => Ok(s),
            other => Err(wrong_type(key, "str", other)),
        }
    }

    pub fn get_arr(&self, key: &str) -> Result<&GgufArray, GgufError> {
        match self.require(key)? {
            GgufValue::Array(a) => Ok(a),
            other => Err(wrong_type(key, "arr", other)),
        }
    }

    array_getter!(
        /// String arrays: `tokenizer.ggml.tokens`, `tokenizer.ggml.merges`.
        get_arr_str,
        String,
        String,
        "arr[str]"
    );
    array_getter!(
        /// `tokenizer.ggml.token_type`.
        get_arr_i32,
        I32,
        i32,
        "arr[i32]"
    );
    array_getter!(get_arr_u32, U32, u32, "arr[u32]");
    array_getter!(get_arr_f32, F32, f32, "arr[f32]");

    /// Moves a string array's elements out of the header, leaving the key with an empty array:
    /// for a reader that keeps them in another form (the tokenizer), so they are not held
    /// twice. Errors as [`GgufHeader::get_arr_str`].
    pub fn take_arr_str(&mut self, key: &str) -> Result<Vec<String>, GgufError> {
        match self.require_mut(key)? {
            GgufValue::Array(GgufArray::String(v)) => Ok(core::mem::take(v)),
            other => Err(wrong_type(key, "arr[str]", other)),
        }
    }

    /// [`GgufHeader::take_arr_str`] for an i32 array (`tokenizer.ggml.token_type`).
    pub fn take_arr_i32(&mut self, key: &str) -> Result<Vec<i32>, GgufError> {
        match self.require_mut(key)? {
            GgufValue::Array(GgufArray::I32(v)) => Ok(core::mem::take(v)),
            other => Err(wrong_type(key, "arr[i32]", other)),
        }
    }

    fn require_mut(&mut self, key: &str) -> Result<&mut GgufValue, GgufError> {
        match self.kv_index.get(key) {
            Some(&i) => Ok(&mut self.metadata[i].1),
            None => Err(GgufError::new(GgufErrorKind::MissingKey { key: String::from(key) }).key(key)),
        }
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The header less the tensors `keep` refuses (a checkpoint's optimizer state, which the
    /// model loader reads apart): their infos and index; data offsets unchanged.
    pub fn retain_tensors(&self, keep: impl Fn(&TensorInfo) -> bool) -> GgufHeader {
        let tensors: Vec<TensorInfo> = self.tensors.iter().filter(|t| keep(t)).cloned().collect();
        let tensor_index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        GgufHeader { tensors, tensor_index, ..self.clone() }
    }

    /// Index of the tensor info named `name` (the `tensor_index` sinks receive).
    pub fn tensor_index(&self, name: &str) -> Option<usize> {
        self.tensor_index.get(name).copied()
    }

    /// Sum of all tensors' bytes (what the weight buffers hold, before alignment padding).
    pub fn total_weight_bytes(&self) -> u64 {
        self.tensors.iter().fold(0u64, |s, t| s.saturating_add(t.nbytes as u64))
    }

    /// End of the last tensor's data, relative to the data section.
    pub fn data_end(&self) -> u64 {
        self.tensors.iter().map(|t| t.offset.saturating_add(t.nbytes as u64)).max().unwrap_or(0)
    }
}
