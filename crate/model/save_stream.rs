//! A GGUF file made a piece at a time (issue 39's checkpoints): `model.save` / `saveLora`
//! declare every tensor first (so every size and offset is known), and a [`SaveStream`]
//! hands out the header, then each tensor's bytes in chunks of whole rows (about 1 MiB of
//! f32 read at a time), converted on the way out (dequantized, an adapter merged, written
//! as the file's type). `{ to: 'opfs' }` writes each chunk before the next is made, so
//! neither wasm nor JS ever holds more than the header and one chunk of the file; a whole
//! file (`save()` returning bytes, the native CLI) is the same chunks appended.
//!
//! Reads go through the backend whose memory holds each tensor: synchronously on the host
//! (and natively on WebGPU), awaited on WebGPU in the browser ([`SaveStream::next_chunk`]).

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::ModelError;
use crate::backend::{Backend, BackendError};
use crate::gguf::GgufWriter;
use crate::tensor::Tensor;
use crate::types::GgmlType;

/// Elements converted at a time (a weight of another type is read, dequantized and converted
/// in chunks of whole rows of about this many: 1 MiB of f32); a tensor written as it is held
/// is copied out in chunks of this many bytes × 4.
pub(crate) const CHUNK_ELEMENTS: usize = 1 << 18;

/// Where a declared tensor's bytes come from.
pub(crate) enum Source {
    /// `len` bytes of `t` from byte `offset`, as they are held (a weight already of the
    /// file's type, one row of an optimizer state tensor).
    Bytes { t: Tensor, offset: usize, len: usize },
    /// `(t, offset, len)` pieces one after the other, as they are held: a row of an optimizer
    /// state held in chunks (checkpoint.rs `state_chunks`).
    Pieces(Vec<(Tensor, usize, usize)>),
    /// All of `t`, converted to `to` a few rows at a time, with the adapter `(A, B,
    /// alpha/rank)` beside it merged in (PEFT's merge_and_unload: row r of W gains
    /// scale·Σ_k B[r, k]·A[k, :]). `what` names it in errors ("weight 'blk.0.attn_qkv.weight'").
    Convert { t: Tensor, to: GgmlType, lora: Option<(Tensor, Tensor, f32)>, what: String },
}

struct Part {
    nbytes: usize,
    pad: usize,
    src: Source,
    /// A [`Source::Convert`]'s adapter as f32 (A, B, rank), read with its first chunk.
    adapter: Option<(Vec<f32>, Vec<f32>, usize)>,
}

/// One read a chunk needs: `len` bytes of `t` from `offset`.
struct Read {
    t: Tensor,
    offset: usize,
    len: usize,
}

/// A GGUF file handed out a chunk at a time (see the module docs).
pub struct SaveStream {
    header: Option<Vec<u8>>,
    header_len: usize,
    parts: Vec<Part>,
    /// The part being written, and the bytes of its data handed out so far.
    at: usize,
    done: usize,
    size: u64,
    /// The call in errors ("save", "saveLora").
    call: &'static str,
    /// What takes less, for a whole file's refusal ("type 'f16' takes less").
    smaller: &'static str,
    backends: Vec<Rc<dyn Backend>>,
}

impl SaveStream {
    /// The stream of `w`'s file, whose tensors were declared ([`GgufWriter::declare_tensor`])
    /// in the order of `sources`; `backends` the model's, which read them.
    pub(crate) fn new(
        w: &GgufWriter,
        sources: Vec<Source>,
        backends: Vec<Rc<dyn Backend>>,
        call: &'static str,
        smaller: &'static str,
    ) -> Result<SaveStream, ModelError> {
        let sizes = w.tensor_sizes();
        if sizes.len() != sources.len() {
            return Err(ModelError::Invalid(format!(
                "{call}: {} tensors declared and {} sources",
                sizes.len(),
                sources.len()
            )));
        }
        let align = w.alignment() as usize;
        let parts = sizes
            .into_iter()
            .zip(sources)
            .map(|(n, src)| {
                let nbytes = n as usize;
                Part { nbytes, pad: nbytes.next_multiple_of(align) - nbytes, src, adapter: None }
            })
            .collect();
        let header = w.header_bytes();
        Ok(SaveStream {
            header_len: header.len(),
            header: Some(header),
            parts,
            at: 0,
            done: 0,
            size: w.file_size(),
            call,
            smaller,
            backends,
        })
    }

    /// The whole file's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The most bytes one chunk (or the header) holds: what writing the file in chunks takes
    /// beyond the model.
    pub fn chunk_bytes(&self) -> usize {
        let most = |p: &Part| match &p.src {
            Source::Bytes { .. } | Source::Pieces(_) => p.nbytes.min(CHUNK_ELEMENTS * 4),
            Source::Convert { t, to, .. } => {
                let (_, row_out, _, per_chunk) = convert_rows(t, *to);
                p.nbytes.min(per_chunk * row_out)
            }
        };
        let data = self.parts.iter().map(|p| most(p) + p.pad).max().unwrap_or(0);
        self.header_len.max(data)
    }

    /// Refuses, `unsupported` with the sizes, when `left` bytes (what the model's budget
    /// leaves) cannot hold the header and one chunk beside each other's copy.
    pub fn check_chunks(&self, left: Option<u64>) -> Result<(), ModelError> {
        let need = 2 * self.chunk_bytes() as u64 + 2 * CHUNK_ELEMENTS as u64 * 4;
        match left {
            Some(l) if need > l => Err(ModelError::Unsupported(format!(
                "{}: writing the {}-byte file in pieces needs {need} bytes of memory and {l} are left",
                self.call, self.size
            ))),
            _ => Ok(()),
        }
    }

    /// The reads the next chunk needs (empty for the header), or None at the end.
    fn reads(&mut self) -> Option<Vec<Read>> {
        if self.header.is_some() {
            return Some(Vec::new());
        }
        while self.parts.get(self.at).is_some_and(|p| p.nbytes == 0) {
            self.at += 1; // nothing but (zero) padding
        }
        let p = self.parts.get(self.at)?;
        Some(match &p.src {
            Source::Bytes { t, offset, len } => {
                let n = (CHUNK_ELEMENTS * 4).min(len - self.done);
                vec![Read { t: t.clone(), offset: offset + self.done, len: n }]
            }
            Source::Pieces(pieces) => {
                // The piece holding byte `done`, up to its end or a chunk's worth.
                let mut at = self.done;
                let mut read = Vec::new();
                for (t, offset, len) in pieces {
                    if at < *len {
                        read.push(Read { t: t.clone(), offset: offset + at, len: (CHUNK_ELEMENTS * 4).min(len - at) });
                        break;
                    }
                    at -= len;
                }
                read
            }
            Source::Convert { t, to, lora, .. } => {
                let (row_in, row_out, rows, per_chunk) = convert_rows(t, *to);
                let (r0, n) = (self.done / row_out, per_chunk.min(rows - self.done / row_out));
                let mut v = vec![Read { t: t.clone(), offset: r0 * row_in, len: n * row_in }];
                if let (Some((a, b, _)), true) = (lora, p.adapter.is_none()) {
                    v.push(Read { t: a.clone(), offset: 0, len: a.nbytes() });
                    v.push(Read { t: b.clone(), offset: 0, len: b.nbytes() });
                }
                v
            }
        })
    }

    /// The next chunk from the bytes of `reads()`.
    fn produce(&mut self, data: Vec<Vec<u8>>) -> Result<Vec<u8>, ModelError> {
        if let Some(h) = self.header.take() {
            return Ok(h);
        }
        let call = self.call;
        let p = &mut self.parts[self.at];
        let mut data = data.into_iter();
        let raw = data.next().unwrap_or_default();
        let mut out = match &p.src {
            Source::Bytes { .. } | Source::Pieces(_) => raw,
            Source::Convert { t, to, lora, what } => {
                let (from, to) = (t.ty, *to);
                if !crate::quants::can_dequantize(from) {
                    return Err(ModelError::Unsupported(format!(
                        "{call}: {what} is {from}, which has no conversion to f32"
                    )));
                }
                if let (Some((a, _, _)), true) = (lora, p.adapter.is_none()) {
                    let f32s = |b: Option<Vec<u8>>| -> Vec<f32> {
                        b.unwrap_or_default()
                            .chunks_exact(4)
                            .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
                            .collect()
                    };
                    let rank = a.ne[1] as usize;
                    p.adapter = Some((f32s(data.next()), f32s(data.next()), rank));
                }
                let ne0 = t.ne[0] as usize;
                let (_, row_out, _, _) = convert_rows(t, to);
                let (r0, n) = (self.done / row_out, raw.len() / (ne0 / from.blck_size() * from.type_size()));
                let mut vals = vec![0f32; n * ne0];
                crate::quants::dequantize_row(from, &raw, &mut vals);
                if let (Some((_, _, scale)), Some((a, b, rank))) = (lora, &p.adapter) {
                    for (r, row) in vals.chunks_exact_mut(ne0).enumerate() {
                        for (k, &bk) in b[(r0 + r) * rank..(r0 + r + 1) * rank].iter().enumerate() {
                            let s = scale * bk;
                            row.iter_mut().zip(&a[k * ne0..(k + 1) * ne0]).for_each(|(x, &ak)| *x += s * ak);
                        }
                    }
                }
                if to == GgmlType::F32 {
                    bytemuck::cast_slice(&vals).to_vec()
                } else {
                    let mut dst = vec![0u8; n * row_out];
                    crate::quants::quantize_row(to, &vals, &mut dst);
                    dst
                }
            }
        };
        self.done += out.len();
        if self.done >= p.nbytes {
            out.resize(out.len() + p.pad, 0);
            p.adapter = None;
            self.at += 1;
            self.done = 0;
        }
        Ok(out)
    }

    /// The next chunk, its reads done synchronously (host memory; natively any backend's);
    /// None when the whole file has been handed out.
    pub fn next_chunk_sync(&mut self) -> Result<Option<Vec<u8>>, ModelError> {
        let Some(reads) = self.reads() else { return Ok(None) };
        let mut data = Vec::with_capacity(reads.len());
        for r in reads {
            let mut buf = self.buffer(&r)?;
            r.t.try_get_bytes(&mut buf, r.offset).map_err(|e| self.read_error(&r, e))?;
            data.push(buf);
        }
        self.produce(data).map(Some)
    }

    /// The next chunk, its reads awaited where the memory is a device's (WebGPU in the
    /// browser: `map_async`); None when the whole file has been handed out.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, ModelError> {
        let Some(reads) = self.reads() else { return Ok(None) };
        let mut data = Vec::with_capacity(reads.len());
        for r in reads {
            let mut buf = self.buffer(&r)?;
            let held_by: Option<String> = r.t.data().map(|d| String::from(d.buffer.buffer_type_name()));
            // The backend whose buffer type holds it; else the last (the CPU: a repacked or
            // other host buffer reads there).
            let b = self
                .backends
                .iter()
                .find(|b| held_by.as_deref() == Some(b.buffer_type().name()))
                .or(self.backends.last())
                .ok_or_else(|| ModelError::Invalid(format!("{}: the model has no backend", self.call)))?;
            b.tensor_get_async(&r.t, r.offset, &mut buf).await.map_err(|e| self.read_error(&r, e))?;
            data.push(buf);
        }
        self.produce(data).map(Some)
    }

    fn buffer(&self, r: &Read) -> Result<Vec<u8>, ModelError> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(r.len).map_err(|_| {
            ModelError::Unsupported(format!(
                "{}: a {}-byte piece of '{}' does not fit in memory",
                self.call,
                r.len,
                r.t.name()
            ))
        })?;
        buf.resize(r.len, 0);
        Ok(buf)
    }

    fn read_error(&self, r: &Read, e: BackendError) -> ModelError {
        ModelError::Unsupported(format!("{}: reading '{}': {e}", self.call, r.t.name()))
    }

    /// A whole file in memory needs its size: refused (`unsupported`, the sizes) when `left`
    /// (what the model's budget leaves) cannot hold it or the allocation fails.
    fn whole_buffer(&self, left: Option<u64>) -> Result<Vec<u8>, ModelError> {
        let (size, call, smaller) = (self.size, self.call, self.smaller);
        let too_large = |why: String| {
            ModelError::Unsupported(format!(
                "{call}: the {size}-byte file does not fit in memory ({why}){smaller}; {{ to: 'opfs', name }} \
                 writes it in pieces"
            ))
        };
        if let Some(l) = left.filter(|&l| size > l) {
            return Err(too_large(format!("{l} bytes of the budget are left")));
        }
        let mut file = Vec::new();
        usize::try_from(size)
            .ok()
            .and_then(|n| file.try_reserve_exact(n).ok())
            .ok_or_else(|| too_large(String::from("the allocation failed")))?;
        Ok(file)
    }

    /// The whole file in memory (see [`SaveStream::whole_buffer`]), read synchronously.
    pub fn into_vec(mut self, left: Option<u64>) -> Result<Vec<u8>, ModelError> {
        let mut file = self.whole_buffer(left)?;
        while let Some(c) = self.next_chunk_sync()? {
            file.extend_from_slice(&c);
        }
        Ok(file)
    }

    /// [`SaveStream::into_vec`] with the reads awaited (WebGPU in the browser).
    pub async fn into_vec_async(mut self, left: Option<u64>) -> Result<Vec<u8>, ModelError> {
        let mut file = self.whole_buffer(left)?;
        while let Some(c) = self.next_chunk().await? {
            file.extend_from_slice(&c);
        }
        Ok(file)
    }

    /// Writes the file to `w` a chunk at a time (the CLI's `--out` / `--checkpoint`).
    #[cfg(feature = "std")]
    pub fn write_to<W: std::io::Write>(mut self, mut w: W) -> Result<u64, String> {
        let mut n = 0u64;
        while let Some(c) = self.next_chunk_sync().map_err(|e| alloc::string::ToString::to_string(&e))? {
            w.write_all(&c).map_err(|e| alloc::string::ToString::to_string(&e))?;
            n += c.len() as u64;
        }
        w.flush().map_err(|e| alloc::string::ToString::to_string(&e))?;
        Ok(n)
    }
}

/// A converted tensor's row bytes in (`t.ty`) and out (`to`), its rows, and the rows of one
/// chunk.
fn convert_rows(t: &Tensor, to: GgmlType) -> (usize, usize, usize, usize) {
    let ne0 = t.ne[0] as usize;
    let from = t.ty;
    let rows = t.nelements() as usize / ne0.max(1);
    (
        ne0 / from.blck_size() * from.type_size(),
        ne0 / to.blck_size() * to.type_size(),
        rows,
        (CHUNK_ELEMENTS / ne0.max(1)).max(1),
    )
}
