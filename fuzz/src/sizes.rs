//! Shared by `model_split` and `model_sizes32`: the option prefix of their inputs, and the
//! real sizes of a model's worst-case graph, found from the header alone (no weights, no
//! KV cache, no compute buffer allocated), to compare with what the loader estimated.

use std::rc::Rc;

use ggweb::allocator::Gallocr;
use ggweb::backend::{BackendError, Buffer, BufferType};
use ggweb::cpu::CPU_ALIGNMENT;
use ggweb::gguf::{GgufError, GgufErrorKind, GgufHeader, GgufStreamReader, Limits, TensorSink};
use ggweb::model::context::{Gpt2Options, KvCache};
use ggweb::model::gpt2::{build_graph, Hparams, Weights};
use ggweb::model::ModelError;
use ggweb::tensor::{Context, ContextParams, TENSOR_OVERHEAD};
use ggweb::types::GgmlType;

use crate::Bytes;

/// The options an input starts with (8 bytes): n_ctx (u16, 0 = the model's), n_batch (u16,
/// 0 is refused as invalid), gpu_layers (one byte: 0..=199 as is, 200.. counting down
/// from usize::MAX, so "all" and overflowing counts come up often), an op mask for the
/// second backend, and three spare bytes. The GGUF follows.
pub struct Prefix {
    pub opts: Gpt2Options,
    pub gpu_layers: usize,
    pub op_mask: u8,
}

pub const PREFIX_LEN: usize = 8;

pub fn prefix(data: &[u8]) -> (Prefix, &[u8]) {
    let mut b = Bytes::new(&data[..data.len().min(PREFIX_LEN)]);
    let n_ctx = b.u16() as usize;
    let n_batch = b.u16() as usize;
    let g = b.u8() as usize;
    let gpu_layers = if g < 200 { g } else { usize::MAX - (g - 200) };
    let op_mask = b.u8();
    let opts = Gpt2Options { n_ctx, n_batch, n_threads: 1, ..Default::default() };
    (Prefix { opts, gpu_layers, op_mask }, &data[data.len().min(PREFIX_LEN)..])
}

/// A buffer type that hands out buffers without memory: gallocr plans a graph against it
/// and the planned size is read back, whatever it is (a real buffer of that size may not
/// be allocatable here, nor on wasm32).
pub struct Measure;

struct NoMemory(usize);

impl Buffer for NoMemory {
    fn buffer_type_name(&self) -> &str {
        "MEASURE"
    }
    fn size(&self) -> usize {
        self.0
    }
    fn set_bytes(&self, _: usize, _: &[u8]) {
        unreachable!("a measuring buffer is never written")
    }
    fn get_bytes(&self, _: usize, _: &mut [u8]) {
        unreachable!("a measuring buffer is never read")
    }
    fn clear(&self, _: u8) {}
    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

impl BufferType for Measure {
    fn name(&self) -> &str {
        "MEASURE"
    }
    fn alignment(&self) -> usize {
        CPU_ALIGNMENT
    }
    fn max_size(&self) -> usize {
        usize::MAX / 4
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        Ok(Rc::new(NoMemory(size)))
    }
}

/// What the worst-case graph really takes, planned by gallocr from headers only.
pub struct Measured {
    /// gallocr's compute buffer for the graph every load reserves.
    pub compute: u64,
    /// The largest byte span of any node, leaf, weight or KV tensor.
    pub largest: u64,
}

/// Builds the weights (headers of the file's tensors), a KV cache without memory and the
/// worst-case graph (`n_batch` tokens ending at `n_ctx`), and plans it on [`Measure`].
pub fn measure(header: &GgufHeader, hp: &Hparams, n_ctx: usize, n_batch: usize) -> Result<Measured, ModelError> {
    let wctx = Context::new(ContextParams { mem_size: (header.tensors.len() + 1) * TENSOR_OVERHEAD, no_alloc: true });
    for info in &header.tensors {
        wctx.new_tensor(info.ty, &info.ne).set_name(&info.name);
    }
    let weights = Weights::from_context(&wctx, hp)?;
    let kctx = Context::new(ContextParams { mem_size: (2 * hp.n_layer + 1) * TENSOR_OVERHEAD, no_alloc: true });
    let (mut k, mut v) = (Vec::new(), Vec::new());
    for il in 0..hp.n_layer {
        for (list, what) in [(&mut k, "k"), (&mut v, "v")] {
            let t = kctx.new_tensor_1d(GgmlType::F32, (hp.n_embd * n_ctx) as i64);
            t.set_name(&format!("cache_{what}_l{il}"));
            // Placed in a memoryless buffer: gallocr treats it as external, as it does the
            // real cache.
            t.set_data(Rc::new(NoMemory(t.nbytes())), 0);
            list.push(t);
        }
    }
    for t in wctx.tensors() {
        t.set_data(Rc::new(NoMemory(t.nbytes())), 0);
    }
    let cells = vec![ggweb::model::context::Cell::default(); n_ctx];
    let kv = KvCache { ctx: kctx, k, v, buffers: Vec::new(), n_ctx, ty: GgmlType::F32, cells };
    let io = build_graph(hp, &weights, &kv, n_ctx - n_batch, n_batch, n_batch);
    let mut galloc = Gallocr::new_single(Rc::new(Measure));
    galloc.reserve(&io.graph)?;
    let all = io.graph.nodes.iter().chain(&io.graph.leafs).chain(kv.k.iter()).chain(kv.v.iter());
    let largest = all.chain(wctx.tensors().iter()).map(|t| t.nbytes() as u64).max().unwrap_or(0);
    Ok(Measured { compute: galloc.buffer_size(0) as u64, largest })
}

/// The header of `file` as the stream reader hands it to a sink, whatever follows it (a
/// file refused for its data still has a header the loader checked).
pub fn header_of(file: &[u8], limits: Limits) -> Option<GgufHeader> {
    struct Grab(Option<GgufHeader>);
    impl TensorSink for Grab {
        fn on_header(&mut self, header: &GgufHeader) -> Result<(), GgufError> {
            self.0 = Some(header.clone());
            Err(GgufError::new(GgufErrorKind::Rejected("header taken".into())))
        }
        fn write(&mut self, _: usize, _: usize, _: &[u8]) -> Result<(), GgufError> {
            Ok(())
        }
    }
    let mut grab = Grab(None);
    let _ = GgufStreamReader::new(limits).with_file_size(file.len() as u64).feed(file, &mut grab);
    grab.0
}
