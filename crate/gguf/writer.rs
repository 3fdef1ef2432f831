//! GGUF v3 writer: the layout llama.cpp's and the `gguf` Python package's writers produce
//! (key/values and tensor infos in insertion order, tensors packed in order, each padded
//! with zeros to the alignment).

use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec::Vec;

use super::error::{GgufError, GgufErrorKind as K};
use super::value::{write_str, GgufValue};
use super::{DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_VERSION, KEY_ALIGNMENT, MAX_TENSOR_NAME};
use crate::types::GgmlType;

struct WTensor {
    name: String,
    ty: GgmlType,
    ne: Vec<i64>,
    data: Vec<u8>,
}

/// Builds a GGUF file in memory.
///
/// ```
/// use ggweb::gguf::{GgufWriter, GgufValue};
/// use ggweb::types::GgmlType;
/// let mut w = GgufWriter::new();
/// w.add_kv("general.architecture", GgufValue::String("gpt2".into())).unwrap();
/// w.add_tensor("b", GgmlType::F32, &[2], vec![0; 8]).unwrap();
/// let file = w.to_bytes();
/// assert_eq!(&file[..4], b"GGUF");
/// assert_eq!(file.len() % 32, 0); // the data section and the last tensor are padded
/// ```
pub struct GgufWriter {
    kvs: Vec<(String, GgufValue)>,
    keys: BTreeSet<String>,
    tensors: Vec<WTensor>,
    names: BTreeSet<String>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> GgufWriter {
        GgufWriter::new()
    }
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter {
            kvs: Vec::new(),
            keys: BTreeSet::new(),
            tensors: Vec::new(),
            names: BTreeSet::new(),
            alignment: DEFAULT_ALIGNMENT,
        }
    }

    /// Adds a key/value pair (kept in insertion order). `general.alignment` must be a u32
    /// power of two and sets the alignment used for the data.
    pub fn add_kv(&mut self, key: &str, value: GgufValue) -> Result<(), GgufError> {
        if self.keys.contains(key) {
            return Err(GgufError::new(K::DuplicateKey { key: String::from(key) }).key(key));
        }
        if key == KEY_ALIGNMENT {
            let GgufValue::U32(a) = value else {
                return Err(GgufError::new(K::WrongKeyType {
                    key: String::from(key),
                    expected: "u32",
                    found: value.type_name(),
                })
                .key(key));
            };
            if a == 0 || !a.is_power_of_two() {
                return Err(GgufError::new(K::BadAlignment { value: a as u64 }).key(key));
            }
            self.alignment = a as u64;
        }
        self.keys.insert(String::from(key));
        self.kvs.push((String::from(key), value));
        Ok(())
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Adds a tensor with `ne.len()` dims (1..=4) and exactly ggml_nbytes of data.
    pub fn add_tensor(&mut self, name: &str, ty: GgmlType, ne: &[i64], data: Vec<u8>) -> Result<(), GgufError> {
        let e = |kind| Err(GgufError::new(kind).tensor(name));
        if name.len() as u64 > MAX_TENSOR_NAME {
            return e(K::NameTooLong { len: name.len() as u64, limit: MAX_TENSOR_NAME });
        }
        if self.names.contains(name) {
            return e(K::DuplicateTensorName { name: String::from(name) });
        }
        if ne.len() > 4 {
            return e(K::TooManyDims { n_dims: ne.len() as u32 });
        }
        if let Some((dim, &value)) = ne.iter().enumerate().find(|(_, &n)| n < 0) {
            return e(K::NegativeDim { dim, value });
        }
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        if full[0] % ty.blck_size() as i64 != 0 {
            return e(K::BadBlockSize { ne0: full[0], ty });
        }
        let nelements = full.iter().try_fold(1i64, |acc, &n| acc.checked_mul(n));
        let nbytes = nelements.and_then(|n| ((n as u64) / ty.blck_size() as u64).checked_mul(ty.type_size() as u64));
        let Some(nbytes) = nbytes else { return e(K::DimsOverflow { ne: full }) };
        if data.len() as u64 != nbytes {
            return e(K::DataSizeMismatch { expected: nbytes, got: data.len() as u64 });
        }
        self.names.insert(String::from(name));
        self.tensors.push(WTensor { name: String::from(name), ty, ne: ne.to_vec(), data });
        Ok(())
    }

    /// Header bytes: magic through the last tensor info, padded to the alignment.
    fn header_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            write_str(&mut out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            v.write_le(&mut out);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for &n in &t.ne {
                out.extend_from_slice(&(n as u64).to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset += self.padded(t.data.len() as u64);
        }
        out.resize(self.padded(out.len() as u64) as usize, 0);
        out
    }

    fn padded(&self, n: u64) -> u64 {
        n.div_ceil(self.alignment) * self.alignment
    }

    /// The size of the file `to_bytes` produces.
    pub fn file_size(&self) -> u64 {
        self.header_bytes().len() as u64 + self.tensors.iter().map(|t| self.padded(t.data.len() as u64)).sum::<u64>()
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header_bytes();
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(self.padded(out.len() as u64) as usize, 0);
        }
        out
    }

    /// Writes the file to `w` without building it in memory first.
    #[cfg(feature = "std")]
    pub fn write_to<W: std::io::Write>(&self, mut w: W) -> std::io::Result<()> {
        w.write_all(&self.header_bytes())?;
        let zeros = alloc::vec![0u8; self.alignment as usize];
        for t in &self.tensors {
            w.write_all(&t.data)?;
            let pad = (self.padded(t.data.len() as u64) - t.data.len() as u64) as usize;
            w.write_all(&zeros[..pad])?;
        }
        w.flush()
    }
}
