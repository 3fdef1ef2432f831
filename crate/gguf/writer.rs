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
    nbytes: u64,
    /// None: declared only ([`GgufWriter::declare_tensor`]); its data comes when the file is
    /// built ([`GgufWriter::to_bytes_with`]).
    data: Option<Vec<u8>>,
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
        let nbytes = self.check_tensor(name, ty, ne)?;
        if data.len() as u64 != nbytes {
            return Err(GgufError::new(K::DataSizeMismatch { expected: nbytes, got: data.len() as u64 }).tensor(name));
        }
        self.names.insert(String::from(name));
        self.tensors.push(WTensor { name: String::from(name), ty, ne: ne.to_vec(), nbytes, data: Some(data) });
        Ok(())
    }

    /// Declares a tensor whose data [`GgufWriter::to_bytes_with`] asks for when it builds the
    /// file (so a caller converting weights one at a time holds only the file, not a second
    /// copy of every tensor). Returns its ggml_nbytes.
    pub fn declare_tensor(&mut self, name: &str, ty: GgmlType, ne: &[i64]) -> Result<u64, GgufError> {
        let nbytes = self.check_tensor(name, ty, ne)?;
        self.names.insert(String::from(name));
        self.tensors.push(WTensor { name: String::from(name), ty, ne: ne.to_vec(), nbytes, data: None });
        Ok(nbytes)
    }

    /// The checks of a new tensor info (name, dims, block size); its ggml_nbytes.
    fn check_tensor(&self, name: &str, ty: GgmlType, ne: &[i64]) -> Result<u64, GgufError> {
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
        match nbytes {
            Some(n) => Ok(n),
            None => e(K::DimsOverflow { ne: full }),
        }
    }

    /// Header bytes: magic through the last tensor info, padded to the alignment.
    pub fn header_bytes(&self) -> Vec<u8> {
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
            offset += self.padded(t.nbytes);
        }
        out.resize(self.padded(out.len() as u64) as usize, 0);
        out
    }

    /// Each tensor's ggml_nbytes, in declaration order (its data follows the header in this
    /// order, each padded to the alignment).
    pub fn tensor_sizes(&self) -> Vec<u64> {
        self.tensors.iter().map(|t| t.nbytes).collect()
    }

    fn padded(&self, n: u64) -> u64 {
        n.div_ceil(self.alignment) * self.alignment
    }

    /// The size of the file `to_bytes` produces.
    pub fn file_size(&self) -> u64 {
        self.header_bytes().len() as u64 + self.tensors.iter().map(|t| self.padded(t.nbytes)).sum::<u64>()
    }

    /// The whole file. Every tensor must have its data ([`GgufWriter::add_tensor`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.file_size() as usize);
        let r: Result<(), GgufError> = self.write_into(&mut out, |i, _| {
            panic!("GgufWriter::to_bytes: tensor '{}' was declared without data", self.tensors[i].name)
        });
        r.unwrap_or_else(|e| panic!("GgufWriter::to_bytes: {e}"));
        out
    }

    /// Appends the whole file to `out` (which the caller sizes: [`GgufWriter::file_size`]); a
    /// declared tensor's data is appended by `data(index, out)` when its turn comes, in
    /// declaration order (exactly its ggml_nbytes, else `DataSizeMismatch`).
    pub fn write_into<E: From<GgufError>>(
        &self,
        out: &mut Vec<u8>,
        mut data: impl FnMut(usize, &mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        out.extend_from_slice(&self.header_bytes());
        for (i, t) in self.tensors.iter().enumerate() {
            let start = out.len();
            match &t.data {
                Some(d) => out.extend_from_slice(d),
                None => data(i, out)?,
            }
            let got = (out.len() - start) as u64;
            if got != t.nbytes {
                return Err(GgufError::new(K::DataSizeMismatch { expected: t.nbytes, got }).tensor(&t.name).into());
            }
            out.resize(start + self.padded(t.nbytes) as usize, 0);
        }
        Ok(())
    }

    /// Writes the file to `w` without building it in memory first.
    #[cfg(feature = "std")]
    pub fn write_to<W: std::io::Write>(&self, mut w: W) -> std::io::Result<()> {
        w.write_all(&self.header_bytes())?;
        let zeros = alloc::vec![0u8; self.alignment as usize];
        for t in &self.tensors {
            let Some(data) = &t.data else {
                return Err(std::io::Error::other(alloc::format!("tensor '{}' was declared without data", t.name)));
            };
            w.write_all(data)?;
            let pad = (self.padded(t.nbytes) - t.nbytes) as usize;
            w.write_all(&zeros[..pad])?;
        }
        w.flush()
    }
}
