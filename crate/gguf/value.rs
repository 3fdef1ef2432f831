//! Metadata values: every GGUF value type, stored losslessly.

use alloc::string::String;
use alloc::vec::Vec;

/// gguf_type: the type tags of metadata values (the numbers files store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// Bytes of one value in the file; None for strings and arrays (variable length).
    pub fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "str",
            Array => "arr",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value. Floats keep their exact bits (NaN payloads included).
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(GgufArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value: one typed vector per element type (50257 token types are one
/// `Vec<i32>`, not 50257 boxed values). Arrays may nest; each inner array has its own type.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<GgufArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl GgufValue {
    pub fn value_type(&self) -> ValueType {
        match self {
            GgufValue::U8(_) => ValueType::U8,
            GgufValue::I8(_) => ValueType::I8,
            GgufValue::U16(_) => ValueType::U16,
            GgufValue::I16(_) => ValueType::I16,
            GgufValue::U32(_) => ValueType::U32,
            GgufValue::I32(_) => ValueType::I32,
            GgufValue::F32(_) => ValueType::F32,
            GgufValue::Bool(_) => ValueType::Bool,
            GgufValue::String(_) => ValueType::String,
            GgufValue::Array(_) => ValueType::Array,
            GgufValue::U64(_) => ValueType::U64,
            GgufValue::I64(_) => ValueType::I64,
            GgufValue::F64(_) => ValueType::F64,
        }
    }

    /// The type as `gguf-dump` would show it: "u32", "str", "arr[str]", "arr[arr[i32]]".
    pub fn type_name(&self) -> String {
        match self {
            GgufValue::Array(a) => a.type_name(),
            v => String::from(v.value_type().name()),
        }
    }

    /// Decodes a fixed-size scalar from its little-endian bytes (`bytes.len()` must be its size).
    pub(crate) fn from_le(ty: ValueType, b: &[u8]) -> Option<Result<GgufValue, u8>> {
        let v = match ty {
            ValueType::U8 => GgufValue::U8(b[0]),
            ValueType::I8 => GgufValue::I8(b[0] as i8),
            ValueType::Bool => match b[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                other => return Some(Err(other)),
            },
            ValueType::U16 => GgufValue::U16(u16::from_le_bytes([b[0], b[1]])),
            ValueType::I16 => GgufValue::I16(i16::from_le_bytes([b[0], b[1]])),
            ValueType::U32 => GgufValue::U32(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ValueType::I32 => GgufValue::I32(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            ValueType::F32 => GgufValue::F32(f32::from_bits(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            ValueType::U64 => GgufValue::U64(u64::from_le_bytes(b[..8].try_into().unwrap())),
            ValueType::I64 => GgufValue::I64(i64::from_le_bytes(b[..8].try_into().unwrap())),
            ValueType::F64 => GgufValue::F64(f64::from_bits(u64::from_le_bytes(b[..8].try_into().unwrap()))),
            ValueType::String | ValueType::Array => return None,
        };
        Some(Ok(v))
    }

    /// Appends the value's encoding (type tag not included) to `out`.
    pub(crate) fn write_le(&self, out: &mut Vec<u8>) {
        match self {
            GgufValue::U8(v) => out.push(*v),
            GgufValue::I8(v) => out.push(*v as u8),
            GgufValue::Bool(v) => out.push(*v as u8),
            GgufValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            GgufValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            GgufValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            GgufValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            GgufValue::F32(v) => out.extend_from_slice(&v.to_bits().to_le_bytes()),
            GgufValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            GgufValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            GgufValue::F64(v) => out.extend_from_slice(&v.to_bits().to_le_bytes()),
            GgufValue::String(s) => write_str(out, s),
            GgufValue::Array(a) => a.write_le(out),
        }
    }

    pub fn as_u32(&self) -> Option<u32> {
        match self {
            GgufValue::U32(v) => Some(*v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

macro_rules! each_array_variant {
    ($self:expr, $v:ident => $body:expr) => {
        match $self {
            GgufArray::U8($v) => $body,
            GgufArray::I8($v) => $body,
            GgufArray::U16($v) => $body,
            GgufArray::I16($v) => $body,
            GgufArray::U32($v) => $body,
            GgufArray::I32($v) => $body,
            GgufArray::F32($v) => $body,
            GgufArray::Bool($v) => $body,
            GgufArray::String($v) => $body,
            GgufArray::Array($v) => $body,
            GgufArray::U64($v) => $body,
            GgufArray::I64($v) => $body,
            GgufArray::F64($v) => $body,
        }
    };
}

impl GgufArray {
    /// An empty array of `elem` values with room for `cap` of them.
    pub fn with_capacity(elem: ValueType, cap: usize) -> GgufArray {
        match elem {
            ValueType::U8 => GgufArray::U8(Vec::with_capacity(cap)),
            ValueType::I8 => GgufArray::I8(Vec::with_capacity(cap)),
            ValueType::U16 => GgufArray::U16(Vec::with_capacity(cap)),
            ValueType::I16 => GgufArray::I16(Vec::with_capacity(cap)),
            ValueType::U32 => GgufArray::U32(Vec::with_capacity(cap)),
            ValueType::I32 => GgufArray::I32(Vec::with_capacity(cap)),
            ValueType::F32 => GgufArray::F32(Vec::with_capacity(cap)),
            ValueType::Bool => GgufArray::Bool(Vec::with_capacity(cap)),
            ValueType::String => GgufArray::String(Vec::with_capacity(cap)),
            ValueType::Array => GgufArray::Array(Vec::with_capacity(cap)),
            ValueType::U64 => GgufArray::U64(Vec::with_capacity(cap)),
            ValueType::I64 => GgufArray::I64(Vec::with_capacity(cap)),
            ValueType::F64 => GgufArray::F64(Vec::with_capacity(cap)),
        }
    }

    pub fn len(&self) -> usize {
        each_array_variant!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn elem_type(&self) -> ValueType {
        match self {
            GgufArray::U8(_) => ValueType::U8,
            GgufArray::I8(_) => ValueType::I8,
            GgufArray::U16(_) => ValueType::U16,
            GgufArray::I16(_) => ValueType::I16,
            GgufArray::U32(_) => ValueType::U32,
            GgufArray::I32(_) => ValueType::I32,
            GgufArray::F32(_) => ValueType::F32,
            GgufArray::Bool(_) => ValueType::Bool,
            GgufArray::String(_) => ValueType::String,
            GgufArray::Array(_) => ValueType::Array,
            GgufArray::U64(_) => ValueType::U64,
            GgufArray::I64(_) => ValueType::I64,
            GgufArray::F64(_) => ValueType::F64,
        }
    }

    /// "arr[i32]"; nested arrays show their first element's type ("arr[arr[u8]]"), or
    /// "arr[arr]" when empty.
    pub fn type_name(&self) -> String {
        let inner = match self {
            GgufArray::Array(v) => match v.first() {
                Some(a) => a.type_name(),
                None => String::from("arr"),
            },
            a => String::from(a.elem_type().name()),
        };
        alloc::format!("arr[{inner}]")
    }

    /// The `i`th element as a value (for printing); None past the end.
    pub fn get(&self, i: usize) -> Option<GgufValue> {
        Some(match self {
            GgufArray::U8(v) => GgufValue::U8(*v.get(i)?),
            GgufArray::I8(v) => GgufValue::I8(*v.get(i)?),
            GgufArray::U16(v) => GgufValue::U16(*v.get(i)?),
            GgufArray::I16(v) => GgufValue::I16(*v.get(i)?),
            GgufArray::U32(v) => GgufValue::U32(*v.get(i)?),
            GgufArray::I32(v) => GgufValue::I32(*v.get(i)?),
            GgufArray::F32(v) => GgufValue::F32(*v.get(i)?),
            GgufArray::Bool(v) => GgufValue::Bool(*v.get(i)?),
            GgufArray::String(v) => GgufValue::String(v.get(i)?.clone()),
            GgufArray::Array(v) => GgufValue::Array(v.get(i)?.clone()),
            GgufArray::U64(v) => GgufValue::U64(*v.get(i)?),
            GgufArray::I64(v) => GgufValue::I64(*v.get(i)?),
            GgufArray::F64(v) => GgufValue::F64(*v.get(i)?),
        })
    }

    /// Appends a value of the element type. Returns false (and drops it) on a type mismatch.
    pub fn push(&mut self, value: GgufValue) -> bool {
        match (self, value) {
            (GgufArray::U8(v), GgufValue::U8(x)) => v.push(x),
            (GgufArray::I8(v), GgufValue::I8(x)) => v.push(x),
            (GgufArray::U16(v), GgufValue::U16(x)) => v.push(x),
            (GgufArray::I16(v), GgufValue::I16(x)) => v.push(x),
            (GgufArray::U32(v), GgufValue::U32(x)) => v.push(x),
            (GgufArray::I32(v), GgufValue::I32(x)) => v.push(x),
            (GgufArray::F32(v), GgufValue::F32(x)) => v.push(x),
            (GgufArray::Bool(v), GgufValue::Bool(x)) => v.push(x),
            (GgufArray::String(v), GgufValue::String(x)) => v.push(x),
            (GgufArray::Array(v), GgufValue::Array(x)) => v.push(x),
            (GgufArray::U64(v), GgufValue::U64(x)) => v.push(x),
            (GgufArray::I64(v), GgufValue::I64(x)) => v.push(x),
            (GgufArray::F64(v), GgufValue::F64(x)) => v.push(x),
            _ => return false,
        }
        true
    }

    /// Element type tag, count, then the elements (GGUF's array encoding).
    pub(crate) fn write_le(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.elem_type().id().to_le_bytes());
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        match self {
            GgufArray::U8(v) => out.extend_from_slice(v),
            GgufArray::I8(v) => out.extend(v.iter().map(|x| *x as u8)),
            GgufArray::Bool(v) => out.extend(v.iter().map(|x| *x as u8)),
            GgufArray::U16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            GgufArray::I16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            GgufArray::U32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            GgufArray::I32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            GgufArray::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
            GgufArray::U64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            GgufArray::I64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            GgufArray::F64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
            GgufArray::String(v) => v.iter().for_each(|s| write_str(out, s)),
            GgufArray::Array(v) => v.iter().for_each(|a| a.write_le(out)),
        }
    }
}
