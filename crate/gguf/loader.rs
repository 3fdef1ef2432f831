//! A ready sink: declares the tensors in a `no_alloc` context, places them in backend
//! buffers, and copies the streamed bytes in (llama.cpp's load path without mmap).

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::vec::Vec;

use super::error::{GgufError, GgufErrorKind as K};
use super::reader::{GgufStreamReader, TensorSink};
use super::{GgufHeader, Limits, TensorInfo};
use crate::allocator::{align_up, alloc_tensors};
use crate::backend::{Buffer, BufferType};
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};

type Placement = Box<dyn Fn(&TensorInfo) -> Rc<dyn BufferType>>;

/// A [`TensorSink`] that loads every tensor into backend buffers.
///
/// ```
/// use std::rc::Rc;
/// use ggweb::backend::BufferType;
/// use ggweb::cpu::CpuBufferType;
/// use ggweb::gguf::{BufferLoader, GgufStreamReader, GgufWriter, Limits};
/// use ggweb::types::GgmlType;
///
/// let mut w = GgufWriter::new();
/// w.add_tensor("a", GgmlType::F32, &[2], vec![0, 0, 128, 63, 0, 0, 0, 64]).unwrap(); // 1.0, 2.0
/// let file = w.to_bytes();
///
/// // A placement closure chooses each tensor's buffer type (CPU for all, here).
/// let mut loader = BufferLoader::with_placement(|_info| Rc::new(CpuBufferType) as Rc<dyn BufferType>);
/// let mut reader = GgufStreamReader::new(Limits::default());
/// reader.feed(&file, &mut loader).unwrap();
/// let model = loader.into_loaded(reader.finish().unwrap()).unwrap();
/// assert_eq!(model.tensor("a").unwrap().to_f32_vec(), [1.0, 2.0]);
/// ```
pub struct BufferLoader {
    place: Placement,
    budget: Option<u64>,
    ctx: Option<Context>,
    tensors: Vec<Tensor>,
    /// Per tensor index: its buffer and the offset of its first byte there.
    targets: Vec<(Rc<dyn Buffer>, usize)>,
    buffers: Vec<Rc<dyn Buffer>>,
    /// The last bytes (fewer than 4) of a device tensor's piece, held until the next piece
    /// completes their word: device writes are then whole words at word offsets, as
    /// WebGPU's `writeBuffer` takes them (COPY_BUFFER_ALIGNMENT), with no patch kernel.
    carry: Carry,
    stats: LoadStats,
}

/// Where the streamed weight bytes went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Copied into host buffers (the CPU's: the wasm heap in the browser).
    pub host_bytes: u64,
    /// Handed to device buffers (WebGPU's `queue.write_buffer`), piece by piece as they
    /// arrived: these never had a host buffer of their own.
    pub device_bytes: u64,
    /// The most bytes ever held back in the carry (at most 3).
    pub max_carry: usize,
}

#[derive(Default)]
struct Carry {
    tensor: usize,
    /// Offset in the tensor of `bytes[0]` (a multiple of 4).
    at: usize,
    len: usize,
    bytes: [u8; 4],
}

/// Weights loaded from a GGUF stream: the header, the context declaring the tensors (in
/// file order, named as in the file), and the buffers holding them.
pub struct LoadedGguf {
    pub header: GgufHeader,
    pub ctx: Context,
    /// Indexed like `header.tensors`.
    pub tensors: Vec<Tensor>,
    pub buffers: Vec<Rc<dyn Buffer>>,
}

impl LoadedGguf {
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.header.tensor_index(name).map(|i| &self.tensors[i])
    }
}

impl BufferLoader {
    /// Every tensor in buffers of `buft`.
    pub fn new(buft: Rc<dyn BufferType>) -> BufferLoader {
        BufferLoader::with_placement(move |_| buft.clone())
    }

    /// Each tensor in buffers of the type `place` returns for it (a scheduler puts some
    /// layers on WebGPU, the rest on the CPU). Tensors of one type share buffers, in file order.
    pub fn with_placement(place: impl Fn(&TensorInfo) -> Rc<dyn BufferType> + 'static) -> BufferLoader {
        BufferLoader {
            place: Box::new(place),
            budget: None,
            ctx: None,
            tensors: Vec::new(),
            targets: Vec::new(),
            buffers: Vec::new(),
            carry: Carry::default(),
            stats: LoadStats::default(),
        }
    }

    /// The buffer type `info` goes to (the placement closure's answer).
    pub fn placement(&self, info: &TensorInfo) -> Rc<dyn BufferType> {
        (self.place)(info)
    }

    /// Where the bytes written so far went.
    pub fn stats(&self) -> LoadStats {
        self.stats
    }

    /// Refuse (with [`GgufErrorKind::Budget`](super::GgufErrorKind::Budget)) files whose
    /// tensors need more than `bytes` of buffer memory, alignment padding included.
    pub fn with_budget(mut self, bytes: u64) -> BufferLoader {
        self.budget = Some(bytes);
        self
    }

    /// The declared tensors (empty until the header has arrived).
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    pub fn buffers(&self) -> &[Rc<dyn Buffer>] {
        &self.buffers
    }

    /// Bundles the loaded weights with the header `GgufStreamReader::finish` returned.
    pub fn into_loaded(self, header: GgufHeader) -> Result<LoadedGguf, GgufError> {
        let ctx = self.ctx.unwrap_or_else(|| Context::new(ContextParams { mem_size: 0, no_alloc: true }));
        if self.tensors.len() != header.tensors.len() {
            return Err(GgufError::new(K::Truncated { expected: header.tensors.len() as u64, got: 0 }));
        }
        Ok(LoadedGguf { header, ctx, tensors: self.tensors, buffers: self.buffers })
    }
}

impl TensorSink for BufferLoader {
    fn on_header(&mut self, header: &GgufHeader) -> Result<(), GgufError> {
        let n = header.tensors.len();
        let ctx = Context::new(ContextParams { mem_size: n.max(1) * TENSOR_OVERHEAD, no_alloc: true });
        // Group tensors by buffer type (compared by name), keeping file order in each.
        let mut groups: Vec<(Rc<dyn BufferType>, Vec<Tensor>)> = Vec::new();
        let mut tensors = Vec::with_capacity(n);
        for info in &header.tensors {
            let t = ctx.new_tensor(info.ty, &info.ne);
            t.set_name(&info.name);
            let buft = (self.place)(info);
            match groups.iter_mut().find(|(b, _)| b.name() == buft.name()) {
                Some((_, ts)) => ts.push(t.clone()),
                None => groups.push((buft, alloc::vec![t.clone()])),
            }
            tensors.push(t);
        }
        if let Some(limit) = self.budget {
            let needed: u64 = groups
                .iter()
                .flat_map(|(b, ts)| ts.iter().map(move |t| align_up(b.alloc_size(t), b.alignment()) as u64))
                .fold(0u64, u64::saturating_add);
            if needed > limit {
                return Err(GgufError::new(K::Budget { needed, limit }));
            }
        }
        for (buft, ts) in &groups {
            let bufs = alloc_tensors(ts, &**buft)?;
            self.buffers.extend(bufs);
        }
        self.targets = tensors
            .iter()
            .map(|t| {
                let d = t.data().expect("alloc_tensors placed every tensor");
                (d.buffer, d.offset)
            })
            .collect();
        self.tensors = tensors;
        self.ctx = Some(ctx);
        Ok(())
    }

    fn write(&mut self, tensor_index: usize, offset: usize, bytes: &[u8]) -> Result<(), GgufError> {
        let (buffer, base) = &self.targets[tensor_index];
        if buffer.host_base().is_some() {
            buffer.set_bytes(base + offset, bytes);
            self.stats.host_bytes += bytes.len() as u64;
            return Ok(());
        }
        // A device buffer. The reader hands a tensor's bytes over in order, so a carry is
        // always this tensor's and ends where `bytes` starts; tensors start word-aligned.
        self.stats.device_bytes += bytes.len() as u64;
        let (mut at, mut data) = (offset, bytes);
        let c = &mut self.carry;
        if c.len > 0 {
            debug_assert!(c.tensor == tensor_index && c.at + c.len == offset, "pieces out of order");
            let n = (4 - c.len).min(data.len());
            c.bytes[c.len..c.len + n].copy_from_slice(&data[..n]);
            c.len += n;
            data = &data[n..];
            let nbytes = self.tensors[tensor_index].nbytes();
            if c.len < 4 && c.at + c.len < nbytes {
                return Ok(());
            }
            // A whole word, or the tensor's last (partial) one.
            buffer.set_bytes(base + c.at, &c.bytes[..c.len]);
            (at, c.len) = (c.at + 4, 0);
        }
        let whole = data.len() / 4 * 4;
        if whole > 0 {
            buffer.set_bytes(base + at, &data[..whole]);
        }
        let rest = &data[whole..];
        let end = at + data.len();
        if rest.is_empty() {
            return Ok(());
        }
        if end == self.tensors[tensor_index].nbytes() {
            // The tensor's last partial word: written as it is (WebGPU patches it in place).
            buffer.set_bytes(base + at + whole, rest);
        } else {
            c.tensor = tensor_index;
            c.at = at + whole;
            c.len = rest.len();
            c.bytes[..rest.len()].copy_from_slice(rest);
            self.stats.max_carry = self.stats.max_carry.max(rest.len());
        }
        Ok(())
    }
}

/// Streams `bytes` through a reader in `chunk_size` pieces into `loader`.
pub fn load_with(
    bytes: &[u8],
    chunk_size: usize,
    limits: Limits,
    mut loader: BufferLoader,
) -> Result<LoadedGguf, GgufError> {
    let mut reader = GgufStreamReader::new(limits).with_file_size(bytes.len() as u64);
    for chunk in bytes.chunks(chunk_size.max(1)) {
        reader.feed(chunk, &mut loader)?;
    }
    let header = reader.finish()?;
    loader.into_loaded(header)
}

/// Loads a whole GGUF file held in memory, fed in `chunk_size` pieces, into buffers of `buft`.
pub fn load_from_bytes(bytes: &[u8], chunk_size: usize, buft: Rc<dyn BufferType>) -> Result<LoadedGguf, GgufError> {
    load_with(bytes, chunk_size, Limits::default(), BufferLoader::new(buft))
}

/// Loads from any reader, `chunk_size` bytes at a time (one chunk is the only copy).
#[cfg(feature = "std")]
pub fn load_from_reader<R: std::io::Read>(
    r: R,
    chunk_size: usize,
    buft: Rc<dyn BufferType>,
) -> Result<LoadedGguf, GgufError> {
    load_from_reader_with(r, chunk_size, Limits::default(), None, BufferLoader::new(buft))
}

/// [`load_from_reader`] with limits, the total size when known, and a configured loader.
#[cfg(feature = "std")]
pub fn load_from_reader_with<R: std::io::Read>(
    mut r: R,
    chunk_size: usize,
    limits: Limits,
    file_size: Option<u64>,
    mut loader: BufferLoader,
) -> Result<LoadedGguf, GgufError> {
    let mut reader = GgufStreamReader::new(limits);
    if let Some(size) = file_size {
        reader = reader.with_file_size(size);
    }
    let mut buf = alloc::vec![0u8; chunk_size.max(1)];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                use alloc::string::ToString;
                return Err(GgufError::new(K::Io(e.to_string())).at(reader.bytes_consumed()));
            }
        };
        reader.feed(&buf[..n], &mut loader)?;
    }
    let header = reader.finish()?;
    loader.into_loaded(header)
}
