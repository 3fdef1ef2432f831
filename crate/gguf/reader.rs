//! The incremental GGUF reader: parses the header and routes weight bytes to a sink as
//! chunks of any size arrive.

use alloc::borrow::ToOwned;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::error::{GgufError, GgufErrorKind as K};
use super::value::{GgufArray, GgufValue, ValueType};
use super::{GgufHeader, Limits, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC, KEY_ALIGNMENT};
use crate::types::GgmlType;

/// Where the reader delivers the parsed header and the weight bytes.
pub trait TensorSink {
    /// Called once, after every tensor info has been checked and before any weight byte:
    /// the place to declare and allocate tensors.
    fn on_header(&mut self, header: &GgufHeader) -> Result<(), GgufError>;
    /// Called just before `on_header`, with the header still open to change: a sink may
    /// move out metadata it keeps in another form (the model loader takes the tokenizer's
    /// arrays), so that it is not held twice while the weights load. The header the reader
    /// keeps (and `finish` returns) is the changed one. By default it changes nothing.
    fn take_metadata(&mut self, header: &mut GgufHeader) -> Result<(), GgufError> {
        let _ = header;
        Ok(())
    }
    /// `bytes` of tensor `tensor_index` (into `header.tensors`) starting at byte `offset`
    /// of its data. Each tensor's bytes arrive once, in order; tensors arrive in file order.
    fn write(&mut self, tensor_index: usize, offset: usize, bytes: &[u8]) -> Result<(), GgufError>;
}

/// A sink that keeps nothing: for reading or validating the header alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullSink;

impl TensorSink for NullSink {
    fn on_header(&mut self, _: &GgufHeader) -> Result<(), GgufError> {
        Ok(())
    }
    fn write(&mut self, _: usize, _: usize, _: &[u8]) -> Result<(), GgufError> {
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Magic,
    Version,
    NTensors,
    NKv,
    KvKey,
    KvType,
    KvValue,
    TiName,
    TiNDims,
    TiDim,
    TiType,
    TiOffset,
    /// Between the last tensor info and the aligned start of the data section.
    Pad,
    Data,
}

/// An array being received: its element type and length once read, then the elements.
struct ArrFrame {
    elem: Option<ValueType>,
    len: u64,
    items: Option<GgufArray>,
}

/// Where the data section's bytes go, fixed once the header is complete.
struct DataPlan {
    /// (start, end, tensor index), relative to the data section, sorted by start.
    order: Vec<(u64, u64, usize)>,
    cursor: usize,
    /// Absolute: the stream may end anywhere in [min_end, max_end], and bytes past
    /// min_end must be zero (alignment padding after the last tensor).
    min_end: u64,
    max_end: u64,
}

/// Parses a GGUF stream fed in order, in chunks of any size.
///
/// ```
/// use ggweb::gguf::{GgufStreamReader, GgufWriter, GgufValue, Limits, NullSink};
/// let mut w = GgufWriter::new();
/// w.add_kv("general.name", GgufValue::String("tiny".into())).unwrap();
/// let file = w.to_bytes();
///
/// let mut r = GgufStreamReader::new(Limits::default());
/// for chunk in file.chunks(3) {
///     r.feed(chunk, &mut NullSink).unwrap();
/// }
/// let header = r.finish().unwrap();
/// assert_eq!(header.get_str("general.name"), Ok("tiny"));
/// ```
pub struct GgufStreamReader {
    limits: Limits,
    file_size: Option<u64>,
    phase: Phase,
    /// Absolute offset of the next byte to arrive.
    pos: u64,
    failed: Option<GgufError>,
    // A fixed-size field split across chunks (at most 8 bytes).
    carry: [u8; 8],
    carry_len: usize,
    // A string being received: its length once read, its bytes so far.
    str_len: Option<u64>,
    str_start: u64,
    str_buf: Vec<u8>,
    // The header under construction.
    version: u32,
    n_tensors: u64,
    n_kv: u64,
    metadata: Vec<(String, GgufValue)>,
    kv_index: BTreeMap<String, usize>,
    kv_key: String,
    kv_type: ValueType,
    kv_start: u64,
    vstack: Vec<ArrFrame>,
    alignment: u64,
    tensors: Vec<TensorInfo>,
    tensor_index: BTreeMap<String, usize>,
    ti_name: String,
    ti_start: u64,
    ti_n_dims: u32,
    ti_ne: [i64; 4],
    ti_dim: usize,
    ti_ty: GgmlType,
    ti_nbytes: usize,
    header: Option<GgufHeader>,
    plan: Option<DataPlan>,
}

fn err(kind: K, offset: u64) -> GgufError {
    GgufError::new(kind).at(offset)
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl GgufStreamReader {
    pub fn new(limits: Limits) -> GgufStreamReader {
        GgufStreamReader {
            limits,
            file_size: None,
            phase: Phase::Magic,
            pos: 0,
            failed: None,
            carry: [0; 8],
            carry_len: 0,
            str_len: None,
            str_start: 0,
            str_buf: Vec::new(),
            version: 0,
            n_tensors: 0,
            n_kv: 0,
            metadata: Vec::new(),
            kv_index: BTreeMap::new(),
            kv_key: String::new(),
            kv_type: ValueType::U8,
            kv_start: 0,
            vstack: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
            tensors: Vec::new(),
            tensor_index: BTreeMap::new(),
            ti_name: String::new(),
            ti_start: 0,
            ti_n_dims: 0,
            ti_ne: [1; 4],
            ti_dim: 0,
            ti_ty: GgmlType::F32,
            ti_nbytes: 0,
            header: None,
            plan: None,
        }
    }

    /// The total length, when known up front (Content-Length, file metadata): tensors
    /// reaching past it are rejected with the header, before the sink allocates anything.
    pub fn with_file_size(mut self, size: u64) -> GgufStreamReader {
        self.file_size = Some(size);
        self
    }

    /// Bytes fed so far.
    pub fn bytes_consumed(&self) -> u64 {
        self.pos
    }

    /// Bytes the stream must have in all (through the end of the last tensor's data),
    /// once the header has been parsed. A file may carry up to `alignment - 1` zero bytes more.
    pub fn total_expected(&self) -> Option<u64> {
        self.plan.as_ref().map(|p| p.min_end)
    }

    /// The header, once all of it has arrived and been checked.
    pub fn header(&self) -> Option<&GgufHeader> {
        self.header.as_ref()
    }

    /// The header, giving up the reader (for callers that stop before the data).
    pub fn into_header(self) -> Option<GgufHeader> {
        self.header
    }

    /// Consumes the next chunk. After an error the reader stays failed and returns it again.
    pub fn feed<S: TensorSink + ?Sized>(&mut self, chunk: &[u8], sink: &mut S) -> Result<(), GgufError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.feed_inner(chunk, sink);
        match r {
            Ok(()) => self.pos += chunk.len() as u64,
            Err(ref e) => self.failed = Some(e.clone()),
        }
        r
    }

    /// Ends the stream: checks that every tensor's bytes arrived, and returns the header.
    pub fn finish(self) -> Result<GgufHeader, GgufError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let got = self.pos;
        let need_more = if self.carry_len > 0 {
            self.next_field_size() - self.carry_len as u64
        } else if let Some(len) = self.str_len {
            len - self.str_buf.len() as u64
        } else {
            self.next_field_size()
        };
        match (self.header, self.plan) {
            (Some(h), Some(plan)) => {
                if got < plan.min_end {
                    let mut e = err(K::Truncated { expected: plan.min_end, got }, got);
                    if let Some(&(_, _, idx)) = plan.order.get(plan.cursor) {
                        e = e.tensor(&h.tensors[idx].name);
                    }
                    return Err(e);
                }
                Ok(h)
            }
            _ => Err(err(K::Truncated { expected: got + need_more, got }, got)),
        }
    }

    /// Bytes of the next header field the parser waits for (for Truncated's `expected`).
    fn next_field_size(&self) -> u64 {
        let value_size = |t: ValueType| t.fixed_size().unwrap_or(8) as u64;
        match self.phase {
            Phase::Magic | Phase::Version | Phase::KvType | Phase::TiNDims | Phase::TiType => 4,
            Phase::NTensors | Phase::NKv | Phase::KvKey | Phase::TiName | Phase::TiDim | Phase::TiOffset => 8,
            Phase::KvValue => match self.vstack.last() {
                None => value_size(self.kv_type),
                Some(f) => match (f.elem, &f.items) {
                    (None, _) => 4,
                    (Some(_), None) => 8,
                    (Some(ValueType::Array), Some(_)) => 4,
                    (Some(t), Some(_)) => value_size(t),
                },
            },
            Phase::Pad | Phase::Data => 1,
        }
    }

    fn feed_inner<S: TensorSink + ?Sized>(&mut self, chunk: &[u8], sink: &mut S) -> Result<(), GgufError> {
        if let Some(fs) = self.file_size {
            if self.pos + chunk.len() as u64 > fs {
                return Err(err(K::TrailingData { allowed_end: fs }, fs));
            }
        }
        let mut i = 0usize;
        while i < chunk.len() {
            match self.phase {
                Phase::Data => self.feed_data(chunk, &mut i, sink)?,
                Phase::Pad => {
                    let data_offset = self.header.as_ref().map_or(0, |h| h.data_offset);
                    let at = self.pos + i as u64;
                    if at < data_offset {
                        i += (data_offset - at).min((chunk.len() - i) as u64) as usize;
                    } else {
                        self.phase = Phase::Data;
                    }
                }
                _ => {
                    let at = self.pos + i as u64;
                    if at >= self.limits.max_header_bytes {
                        return Err(err(
                            K::TooMany { what: "header bytes", count: at + 1, limit: self.limits.max_header_bytes },
                            at,
                        ));
                    }
                    // Parse only up to the limit, so the error does not depend on chunk sizes.
                    let cap = (self.limits.max_header_bytes - self.pos).min(chunk.len() as u64) as usize;
                    if let Err(e) = self.step_header(&chunk[..cap], &mut i, sink) {
                        return Err(self.add_context(e, self.pos + i as u64));
                    }
                }
            }
        }
        Ok(())
    }

    /// Names the key or tensor being parsed, if the error does not already.
    fn add_context(&self, mut e: GgufError, at: u64) -> GgufError {
        if e.offset.is_none() {
            e.offset = Some(at);
        }
        if e.key.is_none() && e.tensor.is_none() {
            // Names are moved out once their item is complete (errors from `finalize` carry their own).
            match self.phase {
                Phase::KvType | Phase::KvValue if !self.kv_key.is_empty() => e.key = Some(self.kv_key.clone()),
                Phase::TiNDims | Phase::TiDim | Phase::TiType | Phase::TiOffset if !self.ti_name.is_empty() => {
                    e.tensor = Some(self.ti_name.clone())
                }
                _ => {}
            }
        }
        e
    }

    /// A fixed-size field: straight from the chunk when it is all there, else via `carry`.
    #[inline]
    fn take<const N: usize>(&mut self, chunk: &[u8], i: &mut usize) -> Option<[u8; N]> {
        let avail = &chunk[*i..];
        if self.carry_len == 0 && avail.len() >= N {
            *i += N;
            let mut out = [0u8; N];
            out.copy_from_slice(&avail[..N]);
            return Some(out);
        }
        let n = (N - self.carry_len).min(avail.len());
        self.carry[self.carry_len..self.carry_len + n].copy_from_slice(&avail[..n]);
        self.carry_len += n;
        *i += n;
        if self.carry_len == N {
            self.carry_len = 0;
            let mut out = [0u8; N];
            out.copy_from_slice(&self.carry[..N]);
            Some(out)
        } else {
            None
        }
    }

    fn take_u32(&mut self, chunk: &[u8], i: &mut usize) -> Option<u32> {
        self.take::<4>(chunk, i).map(u32::from_le_bytes)
    }

    fn take_u64(&mut self, chunk: &[u8], i: &mut usize) -> Option<u64> {
        self.take::<8>(chunk, i).map(u64::from_le_bytes)
    }

    /// A GGUF string (u64 length, bytes). `name_limit` switches to tensor-name rules.
    fn take_string(
        &mut self,
        chunk: &[u8],
        i: &mut usize,
        name_limit: Option<u64>,
    ) -> Result<Option<String>, GgufError> {
        let len = match self.str_len {
            Some(len) => len,
            None => {
                let Some(len) = self.take_u64(chunk, i) else { return Ok(None) };
                let start = self.pos + *i as u64 - 8;
                match name_limit {
                    Some(limit) if len > limit => return Err(err(K::NameTooLong { len, limit }, start)),
                    None if len > self.limits.max_string_len => {
                        return Err(err(K::StringTooLong { len, limit: self.limits.max_string_len }, start))
                    }
                    _ => {}
                }
                self.str_len = Some(len);
                self.str_start = start;
                self.str_buf.clear();
                len
            }
        } as usize;
        let avail = chunk.len() - *i;
        let bad_utf8 = |start: u64, e: core::str::Utf8Error| err(K::BadUtf8, start + 8 + e.valid_up_to() as u64);
        if self.str_buf.is_empty() && avail >= len {
            let s = core::str::from_utf8(&chunk[*i..*i + len]).map_err(|e| bad_utf8(self.str_start, e))?;
            *i += len;
            self.str_len = None;
            return Ok(Some(s.to_owned()));
        }
        let n = (len - self.str_buf.len()).min(avail);
        self.str_buf.extend_from_slice(&chunk[*i..*i + n]);
        *i += n;
        if self.str_buf.len() < len {
            return Ok(None);
        }
        let s = core::str::from_utf8(&self.str_buf).map_err(|e| bad_utf8(self.str_start, e))?.to_owned();
        self.str_buf.clear();
        self.str_len = None;
        Ok(Some(s))
    }

    /// One non-array value of type `t`.
    fn take_scalar(&mut self, t: ValueType, chunk: &[u8], i: &mut usize) -> Result<Option<GgufValue>, GgufError> {
        let decoded = match t {
            ValueType::String => return Ok(self.take_string(chunk, i, None)?.map(GgufValue::String)),
            ValueType::Array => unreachable!("arrays are parsed by step_value"),
            ValueType::U8 | ValueType::I8 | ValueType::Bool => {
                self.take::<1>(chunk, i).map(|b| GgufValue::from_le(t, &b))
            }
            ValueType::U16 | ValueType::I16 => self.take::<2>(chunk, i).map(|b| GgufValue::from_le(t, &b)),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => {
                self.take::<4>(chunk, i).map(|b| GgufValue::from_le(t, &b))
            }
            ValueType::U64 | ValueType::I64 | ValueType::F64 => {
                self.take::<8>(chunk, i).map(|b| GgufValue::from_le(t, &b))
            }
        };
        match decoded {
            None => Ok(None),
            Some(Some(Ok(v))) => Ok(Some(v)),
            Some(Some(Err(value))) => Err(err(K::InvalidBool { value }, self.pos + *i as u64 - 1)),
            Some(None) => unreachable!("fixed-size types decode"),
        }
    }

    /// Advances the value of the current key; Some when it is complete.
    fn step_value(&mut self, chunk: &[u8], i: &mut usize) -> Result<Option<GgufValue>, GgufError> {
        if self.vstack.is_empty() {
            return self.take_scalar(self.kv_type, chunk, i);
        }
        loop {
            let depth = self.vstack.len();
            let top = self.vstack.last().expect("non-empty");
            let Some(elem) = top.elem else {
                let Some(id) = self.take_u32(chunk, i) else { return Ok(None) };
                let at = self.pos + *i as u64 - 4;
                let t = ValueType::from_id(id).ok_or_else(|| err(K::UnknownValueType { type_id: id }, at))?;
                if t == ValueType::Array && depth >= self.limits.max_array_depth as usize {
                    return Err(err(K::NestedArrayTooDeep { limit: self.limits.max_array_depth }, at));
                }
                self.vstack.last_mut().expect("non-empty").elem = Some(t);
                continue;
            };
            if top.items.is_none() {
                let Some(len) = self.take_u64(chunk, i) else { return Ok(None) };
                if len > self.limits.max_array_len {
                    let at = self.pos + *i as u64 - 8;
                    return Err(err(
                        K::TooMany { what: "array elements", count: len, limit: self.limits.max_array_len },
                        at,
                    ));
                }
                let top = self.vstack.last_mut().expect("non-empty");
                top.len = len;
                // Grow with the data that actually arrives, never by the declared count.
                top.items = Some(GgufArray::with_capacity(elem, len.min(256) as usize));
                continue;
            }
            if top.items.as_ref().map_or(0, |a| a.len()) as u64 == top.len {
                let done = self.vstack.pop().and_then(|f| f.items).expect("complete array");
                match self.vstack.last_mut() {
                    None => return Ok(Some(GgufValue::Array(done))),
                    Some(parent) => {
                        parent.items.as_mut().expect("parent has items").push(GgufValue::Array(done));
                        continue;
                    }
                }
            }
            if elem == ValueType::Array {
                self.vstack.push(ArrFrame { elem: None, len: 0, items: None });
                continue;
            }
            let Some(v) = self.take_scalar(elem, chunk, i)? else { return Ok(None) };
            self.vstack.last_mut().and_then(|f| f.items.as_mut()).expect("array frame").push(v);
        }
    }

    /// After a key/value pair: the next pair, or the tensor infos.
    fn after_kv<S: TensorSink + ?Sized>(&mut self, at: u64, sink: &mut S) -> Result<(), GgufError> {
        if (self.metadata.len() as u64) < self.n_kv {
            self.phase = Phase::KvKey;
            self.kv_start = at;
            Ok(())
        } else {
            self.after_tensor_info(at, sink)
        }
    }

    fn after_tensor_info<S: TensorSink + ?Sized>(&mut self, at: u64, sink: &mut S) -> Result<(), GgufError> {
        if (self.tensors.len() as u64) < self.n_tensors {
            self.phase = Phase::TiName;
            self.ti_start = at;
            self.ti_name.clear();
            Ok(())
        } else {
            self.finalize(at, sink)
        }
    }

    fn step_header<S: TensorSink + ?Sized>(
        &mut self,
        chunk: &[u8],
        i: &mut usize,
        sink: &mut S,
    ) -> Result<(), GgufError> {
        let base = self.pos;
        let here = |i: &usize, back: u64| base + *i as u64 - back;
        match self.phase {
            Phase::Magic => {
                let Some(m) = self.take::<4>(chunk, i) else { return Ok(()) };
                if m != GGUF_MAGIC {
                    return Err(err(K::BadMagic { found: m }, 0));
                }
                self.phase = Phase::Version;
            }
            Phase::Version => {
                let Some(v) = self.take_u32(chunk, i) else { return Ok(()) };
                if v != 2 && v != 3 {
                    return Err(err(K::UnsupportedVersion { version: v }, 4));
                }
                self.version = v;
                self.phase = Phase::NTensors;
            }
            Phase::NTensors => {
                let Some(n) = self.take_u64(chunk, i) else { return Ok(()) };
                if n > self.limits.max_tensors {
                    return Err(err(K::TooMany { what: "tensors", count: n, limit: self.limits.max_tensors }, 8));
                }
                self.n_tensors = n;
                self.tensors.reserve(n.min(64) as usize);
                self.phase = Phase::NKv;
            }
            Phase::NKv => {
                let Some(n) = self.take_u64(chunk, i) else { return Ok(()) };
                if n > self.limits.max_kv {
                    return Err(err(K::TooMany { what: "key-value pairs", count: n, limit: self.limits.max_kv }, 16));
                }
                self.n_kv = n;
                self.metadata.reserve(n.min(64) as usize);
                let at = here(i, 0);
                self.after_kv(at, sink)?;
            }
            Phase::KvKey => {
                let Some(key) = self.take_string(chunk, i, None)? else { return Ok(()) };
                if self.kv_index.contains_key(&key) {
                    return Err(err(K::DuplicateKey { key: key.clone() }, self.kv_start).key(&key));
                }
                self.kv_key = key;
                self.phase = Phase::KvType;
            }
            Phase::KvType => {
                let Some(id) = self.take_u32(chunk, i) else { return Ok(()) };
                let t = ValueType::from_id(id).ok_or_else(|| err(K::UnknownValueType { type_id: id }, here(i, 4)))?;
                self.kv_type = t;
                self.vstack.clear();
                if t == ValueType::Array {
                    self.vstack.push(ArrFrame { elem: None, len: 0, items: None });
                }
                self.phase = Phase::KvValue;
            }
            Phase::KvValue => {
                let Some(v) = self.step_value(chunk, i)? else { return Ok(()) };
                if self.kv_key == KEY_ALIGNMENT {
                    let GgufValue::U32(a) = v else {
                        let found = v.type_name();
                        return Err(err(
                            K::WrongKeyType { key: self.kv_key.clone(), expected: "u32", found },
                            self.kv_start,
                        ));
                    };
                    if a == 0 || !a.is_power_of_two() {
                        return Err(err(K::BadAlignment { value: a as u64 }, self.kv_start));
                    }
                    self.alignment = a as u64;
                }
                let key = core::mem::take(&mut self.kv_key);
                self.kv_index.insert(key.clone(), self.metadata.len());
                self.metadata.push((key, v));
                let at = here(i, 0);
                self.after_kv(at, sink)?;
            }
            Phase::TiName => {
                let limit = self.limits.max_tensor_name_len;
                let Some(name) = self.take_string(chunk, i, Some(limit))? else { return Ok(()) };
                if self.tensor_index.contains_key(&name) {
                    return Err(err(K::DuplicateTensorName { name: name.clone() }, self.ti_start).tensor(&name));
                }
                self.ti_name = name;
                self.phase = Phase::TiNDims;
            }
            Phase::TiNDims => {
                let Some(n) = self.take_u32(chunk, i) else { return Ok(()) };
                if n as usize > crate::tensor::MAX_DIMS {
                    return Err(err(K::TooManyDims { n_dims: n }, here(i, 4)));
                }
                self.ti_n_dims = n;
                self.ti_ne = [1; 4];
                self.ti_dim = 0;
                self.phase = if n == 0 { Phase::TiType } else { Phase::TiDim };
            }
            Phase::TiDim => {
                let Some(v) = self.take_u64(chunk, i) else { return Ok(()) };
                let v = v as i64;
                if v < 0 {
                    return Err(err(K::NegativeDim { dim: self.ti_dim, value: v }, here(i, 8)));
                }
                self.ti_ne[self.ti_dim] = v;
                self.ti_dim += 1;
                if self.ti_dim == self.ti_n_dims as usize {
                    self.phase = Phase::TiType;
                }
            }
            Phase::TiType => {
                let Some(id) = self.take_u32(chunk, i) else { return Ok(()) };
                let at = here(i, 4);
                let ty = GgmlType::from_id(id)
                    .ok_or_else(|| err(K::UnknownTensorType { name: self.ti_name.clone(), type_id: id }, at))?;
                let ne = self.ti_ne;
                let blck = ty.blck_size() as i64;
                if ne[0] % blck != 0 {
                    return Err(err(K::BadBlockSize { ne0: ne[0], ty }, at));
                }
                // Strides are products of the dims, so they must fit even when another dim is 0.
                let bytes_of = |ne: [i64; 4]| {
                    let n = ne.iter().try_fold(1i64, |acc, &n| acc.checked_mul(n))?;
                    ((n / blck) as u64).checked_mul(ty.type_size() as u64).filter(|&b| b <= i64::MAX as u64)
                };
                let Some(span) = bytes_of(ne.map(|n| n.max(1))) else {
                    return Err(err(K::DimsOverflow { ne }, at));
                };
                let nbytes = bytes_of(ne).expect("bounded by the check above");
                // On wasm32 the address space, not the format, is the limit.
                let addressable = isize::MAX as u64;
                if span > addressable {
                    return Err(err(K::Budget { needed: span, limit: addressable }, at));
                }
                if nbytes > self.limits.max_weight_bytes {
                    return Err(err(K::Budget { needed: nbytes, limit: self.limits.max_weight_bytes }, at));
                }
                self.ti_ty = ty;
                self.ti_nbytes = nbytes as usize;
                self.phase = Phase::TiOffset;
            }
            Phase::TiOffset => {
                let Some(offset) = self.take_u64(chunk, i) else { return Ok(()) };
                let at = here(i, 8);
                if offset % self.alignment != 0 {
                    return Err(err(K::MisalignedOffset { offset, alignment: self.alignment }, at));
                }
                let end = offset.saturating_add(self.ti_nbytes as u64);
                if end > self.limits.max_weight_bytes {
                    return Err(err(K::Budget { needed: end, limit: self.limits.max_weight_bytes }, at));
                }
                let name = core::mem::take(&mut self.ti_name);
                self.tensor_index.insert(name.clone(), self.tensors.len());
                self.tensors.push(TensorInfo {
                    name,
                    n_dims: self.ti_n_dims,
                    ne: self.ti_ne,
                    ty: self.ti_ty,
                    offset,
                    nbytes: self.ti_nbytes,
                });
                let at = here(i, 0);
                self.after_tensor_info(at, sink)?;
            }
            Phase::Pad | Phase::Data => unreachable!("data phases are handled by feed_inner"),
        }
        Ok(())
    }

    /// All tensor infos are in: check them as a whole, then let the sink allocate.
    fn finalize<S: TensorSink + ?Sized>(&mut self, header_end: u64, sink: &mut S) -> Result<(), GgufError> {
        let limits = self.limits;
        let total = self.tensors.iter().fold(0u64, |acc, t| acc.saturating_add(t.nbytes as u64));
        if total > limits.max_weight_bytes {
            return Err(err(K::Budget { needed: total, limit: limits.max_weight_bytes }, header_end));
        }
        let mut order: Vec<(u64, u64, usize)> = self
            .tensors
            .iter()
            .enumerate()
            .map(|(k, t)| (t.offset, t.offset.saturating_add(t.nbytes as u64), k))
            .collect();
        order.sort_unstable();
        // Each non-empty tensor must start at or after the furthest end so far.
        let mut reach: Option<(u64, usize)> = None;
        for &(start, end, k) in &order {
            if end == start {
                continue;
            }
            if let Some((reach_end, owner)) = reach {
                if start < reach_end {
                    let (first, second) = (self.tensors[owner].name.clone(), self.tensors[k].name.clone());
                    return Err(
                        err(K::OverlappingTensors { first, second: second.clone() }, header_end).tensor(&second)
                    );
                }
            }
            if reach.is_none_or(|(e, _)| end > e) {
                reach = Some((end, k));
            }
        }
        let (span_end, last) = order.iter().map(|&(_, e, k)| (e, k)).max().unwrap_or((0, usize::MAX));
        let data_offset = align_up(header_end, self.alignment);
        // Saturating: every end is at most max_weight_bytes, unless a caller set that to u64::MAX.
        let min_end = if self.tensors.is_empty() { header_end } else { data_offset.saturating_add(span_end) };
        let max_end = data_offset.saturating_add(align_up(span_end, self.alignment));
        if let Some(fs) = self.file_size {
            if min_end > fs {
                let e = if self.tensors.is_empty() {
                    err(K::Truncated { expected: min_end, got: fs }, fs)
                } else {
                    err(K::TensorPastEnd { end: min_end, file_size: fs }, header_end).tensor(&self.tensors[last].name)
                };
                return Err(e);
            }
            if fs > max_end {
                return Err(err(K::TrailingData { allowed_end: max_end }, max_end));
            }
        }
        let mut header = GgufHeader::new(
            self.version,
            core::mem::take(&mut self.metadata),
            core::mem::take(&mut self.kv_index),
            core::mem::take(&mut self.tensors),
            core::mem::take(&mut self.tensor_index),
            self.alignment,
            data_offset,
        );
        // The parse buffers are done with; released before the sink allocates the weights,
        // so that they are not left as holes below them.
        self.str_buf = Vec::new();
        self.vstack = Vec::new();
        sink.take_metadata(&mut header)?;
        sink.on_header(&header)?;
        self.header = Some(header);
        self.plan = Some(DataPlan { order, cursor: 0, min_end, max_end });
        self.phase = Phase::Pad;
        Ok(())
    }

    /// The data section: each byte goes to the tensor covering it; gaps are skipped;
    /// after the last tensor only zero padding up to the alignment is allowed.
    fn feed_data<S: TensorSink + ?Sized>(
        &mut self,
        chunk: &[u8],
        i: &mut usize,
        sink: &mut S,
    ) -> Result<(), GgufError> {
        let header = self.header.as_ref().expect("data phase has a header");
        let plan = self.plan.as_mut().expect("data phase has a plan");
        let data_offset = header.data_offset;
        while *i < chunk.len() {
            let at = self.pos + *i as u64;
            let dpos = at - data_offset;
            let left = chunk.len() - *i;
            if let Some(&(start, end, k)) = plan.order.get(plan.cursor) {
                if dpos >= end {
                    plan.cursor += 1;
                } else if dpos < start {
                    *i += (start - dpos).min(left as u64) as usize;
                } else {
                    let n = (end - dpos).min(left as u64) as usize;
                    sink.write(k, (dpos - start) as usize, &chunk[*i..*i + n]).map_err(|mut e| {
                        e.offset.get_or_insert(at);
                        if e.tensor.is_none() {
                            e.tensor = Some(header.tensors[k].name.clone());
                        }
                        e
                    })?;
                    *i += n;
                }
            } else {
                let rest = &chunk[*i..];
                if let Some(nz) = rest.iter().position(|&b| b != 0) {
                    return Err(err(K::TrailingData { allowed_end: plan.max_end }, at + nz as u64));
                }
                if at + rest.len() as u64 > plan.max_end {
                    return Err(err(K::TrailingData { allowed_end: plan.max_end }, plan.max_end));
                }
                *i = chunk.len();
            }
        }
        Ok(())
    }
}

/// Parses just the header of a GGUF file held (at least up to its data section) in
/// `bytes`; `file_size` is the whole file's size, so tensors past its end are still caught.
/// For the tokenizer or an inspector that need the metadata and not the weights.
pub fn read_header(bytes: &[u8], file_size: u64, limits: Limits) -> Result<GgufHeader, GgufError> {
    let mut reader = GgufStreamReader::new(limits).with_file_size(file_size);
    for chunk in bytes.chunks(1 << 16) {
        reader.feed(chunk, &mut NullSink)?;
        if reader.header().is_some() {
            return Ok(reader.into_header().expect("checked above"));
        }
    }
    // Short of a header: finish reports where it was cut.
    reader.finish()
}
