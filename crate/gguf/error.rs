//! Typed GGUF errors: what went wrong, at which byte, in which key or tensor.

use alloc::boxed::Box;
use alloc::string::String;
use core::fmt;

use crate::backend::BackendError;
use crate::types::GgmlType;

/// What went wrong. The byte offset and the key/tensor name live in [`GgufError`].
#[derive(Clone, Debug, PartialEq)]
pub enum GgufErrorKind {
    /// The file does not start with "GGUF".
    BadMagic {
        found: [u8; 4],
    },
    /// Versions 2 and 3 are read; version 1 (32-bit counts) and anything newer are not.
    UnsupportedVersion {
        version: u32,
    },
    /// A count in the file exceeds a [`Limits`](super::Limits) field (`what` names it).
    TooMany {
        what: &'static str,
        count: u64,
        limit: u64,
    },
    StringTooLong {
        len: u64,
        limit: u64,
    },
    /// A tensor name longer than ggml's `GGML_MAX_NAME - 1` (or the configured limit).
    NameTooLong {
        len: u64,
        limit: u64,
    },
    BadUtf8,
    UnknownValueType {
        type_id: u32,
    },
    NestedArrayTooDeep {
        limit: u32,
    },
    /// A bool byte other than 0 or 1.
    InvalidBool {
        value: u8,
    },
    DuplicateKey {
        key: String,
    },
    UnknownTensorType {
        name: String,
        type_id: u32,
    },
    TooManyDims {
        n_dims: u32,
    },
    /// A negative dimension (the file stores ne as u64; ggml reads it as int64_t).
    NegativeDim {
        dim: usize,
        value: i64,
    },
    /// ne[0] is not a multiple of the type's block size.
    BadBlockSize {
        ne0: i64,
        ty: GgmlType,
    },
    /// The element count or byte size of a tensor overflows 64 bits.
    DimsOverflow {
        ne: [i64; 4],
    },
    DuplicateTensorName {
        name: String,
    },
    MisalignedOffset {
        offset: u64,
        alignment: u64,
    },
    OverlappingTensors {
        first: String,
        second: String,
    },
    /// A tensor ends past the end of the file (known from the file size given up front).
    TensorPastEnd {
        end: u64,
        file_size: u64,
    },
    /// The stream ended early: at least `expected` bytes were needed, `got` arrived.
    Truncated {
        expected: u64,
        got: u64,
    },
    /// Bytes after the last tensor other than zero padding up to the alignment.
    TrailingData {
        allowed_end: u64,
    },
    /// `general.alignment` is zero or not a power of two.
    BadAlignment {
        value: u64,
    },
    MissingKey {
        key: String,
    },
    WrongKeyType {
        key: String,
        expected: &'static str,
        found: String,
    },
    /// Weights need more memory than allowed (reader limit or the sink's budget).
    Budget {
        needed: u64,
        limit: u64,
    },
    /// Tensor data of the wrong size handed to the writer.
    DataSizeMismatch {
        expected: u64,
        got: u64,
    },
    /// The sink's backend refused an allocation or write.
    Backend(BackendError),
    /// Reading the source failed (std readers).
    Io(String),
    /// The sink refused the file after reading the header (a model loader that cannot run it).
    Rejected(String),
}

/// A GGUF read/write error: the kind, plus where (byte offset in the file) and in what.
/// Boxed so that `Result<(), GgufError>` on the per-chunk path stays one word; the fields
/// are reached through `Deref` (`e.kind`, `e.offset`).
#[derive(Clone, PartialEq)]
pub struct GgufError(Box<ErrorDetail>);

/// The fields of a [`GgufError`].
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorDetail {
    pub kind: GgufErrorKind,
    /// Absolute byte offset in the file of the item that failed, when known.
    pub offset: Option<u64>,
    /// The metadata key being parsed or looked up.
    pub key: Option<String>,
    /// The tensor being parsed or loaded.
    pub tensor: Option<String>,
}

impl core::ops::Deref for GgufError {
    type Target = ErrorDetail;
    fn deref(&self) -> &ErrorDetail {
        &self.0
    }
}

impl core::ops::DerefMut for GgufError {
    fn deref_mut(&mut self) -> &mut ErrorDetail {
        &mut self.0
    }
}

impl fmt::Debug for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl GgufError {
    pub fn new(kind: GgufErrorKind) -> GgufError {
        GgufError(Box::new(ErrorDetail { kind, offset: None, key: None, tensor: None }))
    }
    pub fn at(mut self, offset: u64) -> GgufError {
        self.offset = Some(offset);
        self
    }
    pub fn key(mut self, key: &str) -> GgufError {
        self.key = Some(String::from(key));
        self
    }
    pub fn tensor(mut self, name: &str) -> GgufError {
        self.tensor = Some(String::from(name));
        self
    }
    pub fn kind(&self) -> &GgufErrorKind {
        &self.kind
    }
    pub fn into_kind(self) -> GgufErrorKind {
        self.0.kind
    }
}

impl From<GgufErrorKind> for GgufError {
    fn from(kind: GgufErrorKind) -> GgufError {
        GgufError::new(kind)
    }
}

impl From<BackendError> for GgufError {
    fn from(e: BackendError) -> GgufError {
        GgufError::new(GgufErrorKind::Backend(e))
    }
}

impl fmt::Display for GgufErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufErrorKind::*;
        match self {
            BadMagic { found } => write!(f, "not a GGUF file: magic {found:02x?}, expected \"GGUF\""),
            UnsupportedVersion { version } => {
                write!(f, "unsupported GGUF version {version} (2 and 3 are supported)")
            }
            TooMany { what, count, limit } => write!(f, "too many {what}: {count} (limit {limit})"),
            StringTooLong { len, limit } => write!(f, "string of {len} bytes (limit {limit})"),
            NameTooLong { len, limit } => write!(f, "tensor name of {len} bytes (limit {limit})"),
            BadUtf8 => f.write_str("string is not valid UTF-8"),
            UnknownValueType { type_id } => write!(f, "unknown metadata value type {type_id}"),
            NestedArrayTooDeep { limit } => write!(f, "arrays nested deeper than {limit} levels"),
            InvalidBool { value } => write!(f, "bool byte {value} (must be 0 or 1)"),
            DuplicateKey { key } => write!(f, "duplicate metadata key '{key}'"),
            UnknownTensorType { name, type_id } => write!(f, "tensor '{name}' has unknown ggml type {type_id}"),
            TooManyDims { n_dims } => write!(f, "{n_dims} dimensions (at most 4)"),
            NegativeDim { dim, value } => write!(f, "ne[{dim}] = {value} is negative"),
            BadBlockSize { ne0, ty } => {
                write!(f, "ne[0] = {ne0} is not a multiple of {ty}'s block size {}", ty.blck_size())
            }
            DimsOverflow { ne } => write!(f, "tensor size overflows: ne = {ne:?}"),
            DuplicateTensorName { name } => write!(f, "duplicate tensor name '{name}'"),
            MisalignedOffset { offset, alignment } => {
                write!(f, "data offset {offset} is not a multiple of the alignment {alignment}")
            }
            OverlappingTensors { first, second } => write!(f, "tensors '{first}' and '{second}' overlap"),
            TensorPastEnd { end, file_size } => {
                write!(f, "tensor data ends at byte {end}, past the end of the file ({file_size} bytes)")
            }
            Truncated { expected, got } => {
                write!(f, "truncated: needed at least {expected} bytes, the stream ended after {got}")
            }
            TrailingData { allowed_end } => {
                write!(f, "unexpected data after the last tensor (only zero padding up to byte {allowed_end} allowed)")
            }
            BadAlignment { value } => write!(f, "alignment {value} is not a non-zero power of two"),
            MissingKey { key } => write!(f, "missing metadata key '{key}'"),
            WrongKeyType { key, expected, found } => {
                write!(f, "metadata key '{key}' has type {found}, expected {expected}")
            }
            Budget { needed, limit } => write!(f, "weights need {needed} bytes, budget is {limit} bytes"),
            DataSizeMismatch { expected, got } => write!(f, "tensor data is {got} bytes, expected {expected}"),
            Backend(e) => write!(f, "backend: {e}"),
            Io(e) => write!(f, "I/O error: {e}"),
            Rejected(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GGUF: {}", self.kind)?;
        if let Some(t) = &self.tensor {
            write!(f, ", in tensor '{t}'")?;
        }
        if let Some(k) = &self.key {
            write!(f, ", in key '{k}'")?;
        }
        if let Some(o) = self.offset {
            write!(f, ", at byte {o}")?;
        }
        Ok(())
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GgufError {}
