//! ggml_gallocr: plans where every intermediate of a graph lives in a compute buffer, and
//! hands memory back as soon as nothing reads it any more.
//!
//! ```
//! use std::rc::Rc;
//! use ggweb::allocator::Gallocr;
//! use ggweb::cpu::CpuBufferType;
//! use ggweb::graph::Graph;
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType::F32;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
//! let x = ctx.new_tensor_1d(F32, 16); // 64 bytes
//! x.set_input();
//! let s = ctx.scale(&x, 2.0);
//! let y = ctx.gelu(&s);
//! let mut gf = Graph::new();
//! gf.build_forward_expand(&y);
//!
//! let mut galloc = Gallocr::new_single(Rc::new(CpuBufferType));
//! galloc.reserve(&gf).unwrap(); // worst case, once
//! assert!(galloc.alloc_graph(&gf).unwrap()); // every run: no allocation
//! // The input comes first; scale cannot overwrite it (inputs are never reused in place),
//! // but gelu takes over scale's memory since scale has no other reader.
//! assert_eq!(x.data().unwrap().offset, 0);
//! assert_eq!((s.data().unwrap().offset, y.data().unwrap().offset), (64, 64));
//! assert_eq!((galloc.buffer_size(0), galloc.n_buffer_allocs()), (128, 1));
//! ```
//!
//! [`Gallocr::reserve`] walks the graph in execution order over a virtual buffer per buffer
//! type ([`DynTallocr`], best fit with merging), records every tensor's (buffer, offset,
//! size) and each buffer's peak, and allocates the backend buffers. [`Gallocr::alloc_graph`]
//! checks that a graph fits that plan and points each tensor's data at its slot, so a
//! graph of the same structure with fewer tokens runs without allocating.
//!
//! What it leaves alone: views (their data follows `view_src`) and tensors whose data
//! lives elsewhere (weights, the KV cache). Data this allocator itself assigned earlier
//! counts as unplaced, so the same graph can be allocated again after a new plan.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::{Rc, Weak};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::mem::Discriminant;

use super::align_up;
use crate::backend::{BackendError, Buffer, BufferType};
use crate::graph::Graph;
use crate::tensor::{flags, Op, Tensor, MAX_SRC};

/// ggml_op_can_inplace, restricted to our ops: element-wise kernels whose result may
/// overwrite `src[0]` (kernels must not assume dst and src[0] are distinct).
pub fn op_can_inplace(op: &Op) -> bool {
    matches!(
        op,
        Op::Add
            | Op::Mul
            | Op::Scale(_)
            | Op::Gelu
            | Op::SoftMax { .. }
            | Op::DiagMaskInf { .. }
            // Backward ops: rows read whole before they are written; acc adds into its copy.
            | Op::SoftMaxBack { .. }
            | Op::GeluBack
            | Op::NormBack { .. }
            | Op::DiagMaskZero { .. }
            | Op::Acc { .. }
    )
}

/// ggml_are_same_layout: same type, shape and strides.
fn same_layout(a: &Tensor, b: &Tensor) -> bool {
    a.ty == b.ty && a.ne == b.ne && a.nb == b.nb
}

// ---------------------------------------------------------------------------------------
// ggml_dyn_tallocr

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FreeBlock {
    offset: usize,
    size: usize,
}

/// ggml_dyn_tallocr: offsets in a buffer that does not exist yet. Free space is a list of
/// blocks sorted by offset whose last entry is the unbounded tail; allocation takes the
/// best-fitting block before the tail (the tail only when none fits), and freeing merges
/// a block with its neighbours. `max_size` is the high-water mark: the buffer to allocate.
///
/// With a chunk size ([`DynTallocr::with_max`]: a buffer type's `max_size` below half the
/// address space, WebGPU's maxBufferSize) the plan is ggml's chunked one: the virtual space is
/// chunks of that size, each a buffer of its own; no block crosses a chunk's end (the tail
/// starts at a chunk and hands out one chunk at a time, the rest of it a block), so a plan
/// larger than one buffer becomes several, none over the limit, and a single tensor larger
/// than a chunk is refused.
#[derive(Clone, Debug)]
pub struct DynTallocr {
    alignment: usize,
    free: Vec<FreeBlock>,
    max_size: usize,
    /// Bytes of a chunk ([`TAIL`]: one unbounded chunk, ggml's plain dyn tallocr).
    chunk: usize,
    /// Per chunk, its high-water mark.
    peaks: Vec<usize>,
}

/// The tail's size: half the address space, so that offset + size never overflows.
const TAIL: usize = usize::MAX / 2;

impl DynTallocr {
    pub fn new(alignment: usize) -> DynTallocr {
        DynTallocr::with_max(alignment, usize::MAX)
    }

    /// A plan in chunks of at most `max` bytes each (see the type's docs); `max` from half
    /// the address space up: one unbounded chunk, as [`DynTallocr::new`].
    pub fn with_max(alignment: usize, max: usize) -> DynTallocr {
        assert!(alignment > 0, "DynTallocr: alignment must be positive");
        let chunk = if max >= TAIL { TAIL } else { (max / alignment * alignment).max(alignment) };
        let mut t = DynTallocr { alignment, free: Vec::new(), max_size: 0, chunk, peaks: Vec::new() };
        t.reset();
        t
    }

    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Bytes of a chunk (one buffer): `usize::MAX / 2` when unchunked.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    fn chunked(&self) -> bool {
        self.chunk < TAIL
    }

    /// Forgets every allocation and the peak.
    pub fn reset(&mut self) {
        self.free.clear();
        if self.chunked() {
            self.free.push(FreeBlock { offset: 0, size: self.chunk });
            self.free.push(FreeBlock { offset: self.chunk, size: TAIL - self.chunk });
        } else {
            self.free.push(FreeBlock { offset: 0, size: TAIL });
        }
        self.max_size = 0;
        self.peaks.clear();
    }

    /// The highest end offset handed out since the last reset (chunked: in the virtual space
    /// of chunk after chunk; [`DynTallocr::chunk_peaks`] gives each chunk's).
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// Each chunk's high-water mark since the last reset: the buffers to allocate (unchunked:
    /// one, `max_size`).
    pub fn chunk_peaks(&self) -> Vec<usize> {
        if self.chunked() {
            if self.peaks.is_empty() {
                vec![0]
            } else {
                self.peaks.clone()
            }
        } else {
            vec![self.max_size]
        }
    }

    /// The bytes of every chunk's buffer together.
    pub fn total_peak(&self) -> usize {
        self.chunk_peaks().iter().fold(0, |a, &b| a.saturating_add(b))
    }

    /// `(chunk, offset in it)` of a virtual offset.
    pub fn split(&self, offset: usize) -> (usize, usize) {
        (offset / self.chunk, offset % self.chunk)
    }

    /// Free blocks as (offset, size), the tail last (for tests and debugging).
    pub fn free_blocks(&self) -> Vec<(usize, usize)> {
        self.free.iter().map(|b| (b.offset, b.size)).collect()
    }

    /// Reserves `size` bytes (rounded up to the alignment) and returns their offset.
    pub fn alloc(&mut self, size: usize) -> Result<usize, BackendError> {
        // Past the tail (half the address space) is refused below; saturating keeps a size
        // near usize::MAX from rounding up to a small one.
        let size = size.checked_next_multiple_of(self.alignment).unwrap_or(usize::MAX);
        if self.chunked() && size > self.chunk {
            return Err(BackendError::OutOfMemory {
                what: String::from("a tensor in one buffer of a compute buffer plan (dyn tallocr)"),
                requested: size,
                limit: self.chunk,
            });
        }
        let last = self.free.len() - 1;
        // Best fit before the tail; on equal sizes the later block wins, as in ggml.
        let mut best: Option<usize> = None;
        for (i, b) in self.free[..last].iter().enumerate() {
            if b.size >= size && best.is_none_or(|j| b.size <= self.free[j].size) {
                best = Some(i);
            }
        }
        let need = if self.chunked() { self.chunk } else { size };
        let i = match best {
            Some(i) => i,
            None if self.free[last].size >= need => last,
            None => {
                return Err(BackendError::OutOfMemory {
                    what: String::from("a tensor in a compute buffer plan (dyn tallocr)"),
                    requested: size,
                    limit: self.free[last].size,
                })
            }
        };
        let offset = self.free[i].offset;
        if self.chunked() && i == last {
            // A new chunk: its rest a block of its own, the tail from the next chunk.
            let rest = FreeBlock { offset: offset + size, size: self.chunk - size };
            self.free[last].offset += self.chunk;
            self.free[last].size -= self.chunk;
            if rest.size > 0 {
                self.free.insert(last, rest);
            }
        } else {
            self.free[i].offset += size;
            self.free[i].size -= size;
            if self.free[i].size == 0 {
                self.free.remove(i);
            }
        }
        self.max_size = self.max_size.max(offset + size);
        if self.chunked() {
            let (k, off) = self.split(offset);
            if self.peaks.len() <= k {
                self.peaks.resize(k + 1, 0);
            }
            self.peaks[k] = self.peaks[k].max(off + size);
        }
        Ok(offset)
    }

    /// Returns `size` bytes at `offset` (as passed to / returned by `alloc`).
    pub fn free(&mut self, offset: usize, size: usize) {
        let size = align_up(size, self.alignment);
        // First block after the freed range; the tail guarantees there is one.
        let next = self.free.partition_point(|b| b.offset < offset);
        debug_assert!(next < self.free.len() && offset + size <= self.free[next].offset, "double free at {offset}");
        // Blocks of two chunks never merge (each chunk is a buffer of its own).
        let k = offset / self.chunk;
        let joins_prev = next > 0
            && self.free[next - 1].offset + self.free[next - 1].size == offset
            && self.free[next - 1].offset / self.chunk == k;
        let joins_next = next < self.free.len()
            && offset + size == self.free[next].offset
            && self.free[next].offset / self.chunk == k;
        match (joins_prev, joins_next) {
            (true, true) => {
                self.free[next - 1].size += size + self.free[next].size;
                self.free.remove(next);
            }
            (true, false) => self.free[next - 1].size += size,
            (false, true) => {
                self.free[next].offset = offset;
                self.free[next].size += size;
            }
            (false, false) => self.free.insert(next, FreeBlock { offset, size }),
        }
    }
}

// ---------------------------------------------------------------------------------------
// the plan

/// Where one tensor goes: a buffer id, an offset in it, and the bytes it needed when the
/// plan was made (a later tensor in the same slot may be smaller, never larger).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorAlloc {
    pub buffer_id: usize,
    pub offset: usize,
    pub size: usize,
}

/// A tensor's position in a graph, for comparing the wiring of two graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Node(usize),
    Leaf(usize),
    /// A source that is not in the graph (cannot happen with build_forward_expand).
    Outside,
}

/// What the plan assumed about one slot of the reserved graph.
#[derive(Clone, Debug, PartialEq)]
struct SlotPlan {
    alloc: Option<TensorAlloc>,
    op: Discriminant<Op>,
    srcs: [Option<Slot>; MAX_SRC],
    flags: u32,
    is_view: bool,
}

struct Plan {
    nodes: Vec<SlotPlan>,
    leafs: Vec<SlotPlan>,
    node_buffer_ids: Vec<usize>,
    leaf_buffer_ids: Vec<usize>,
}

/// Per-tensor state of a dry run (ggml's hash_node).
#[derive(Clone, Copy, Debug, Default)]
struct HashNode {
    n_children: u32,
    n_views: u32,
    buffer_id: usize,
    offset: usize,
    allocated: bool,
    /// An output itself, or the source of a view that is an output: never freed.
    keep: bool,
}

/// The graph allocator. One buffer type per buffer id; ids whose buffer types share a
/// name share one virtual buffer and one backend buffer, as in ggml.
pub struct Gallocr {
    bufts: Vec<Rc<dyn BufferType>>,
    /// Buffer id → index into `tallocs` / `buffers`.
    talloc_of: Vec<usize>,
    tallocs: Vec<DynTallocr>,
    /// Per virtual buffer, its backend buffers: one per chunk (one unless the buffer type's
    /// `max_size` splits the plan, [`DynTallocr::with_max`]).
    buffers: Vec<Vec<Rc<dyn Buffer>>>,
    /// Every buffer this allocator created that a tensor may still point into: tensors
    /// placed in one of these are ours to re-place, not external data.
    created: Vec<Weak<dyn Buffer>>,
    hash: BTreeMap<usize, HashNode>,
    plan: Option<Plan>,
    inplace: bool,
    n_reserves: usize,
    n_buffer_allocs: usize,
    /// Bytes the host buffers' peaks may take together ([`Gallocr::set_host_limit`]).
    host_limit: Option<usize>,
}

fn same_buffer(a: &Rc<dyn Buffer>, b: *const dyn Buffer) -> bool {
    core::ptr::addr_eq(Rc::as_ptr(a), b)
}

fn buffer_ids_error(what: &str, got: usize, want: usize) -> BackendError {
    BackendError::Other(format!("gallocr reserve_n: {got} {what} buffer ids for a graph with {want} {what}s"))
}

impl Gallocr {
    /// ggml_gallocr_new_n. Panics on an empty list (a programmer error).
    pub fn new(bufts: Vec<Rc<dyn BufferType>>) -> Gallocr {
        assert!(!bufts.is_empty(), "Gallocr::new: at least one buffer type");
        let mut talloc_of = Vec::with_capacity(bufts.len());
        let mut tallocs: Vec<DynTallocr> = Vec::new();
        let mut owner: Vec<usize> = Vec::new(); // talloc index → first buffer id using it
        for (i, b) in bufts.iter().enumerate() {
            match owner.iter().position(|&j| bufts[j].name() == b.name()) {
                Some(k) => talloc_of.push(k),
                None => {
                    talloc_of.push(tallocs.len());
                    tallocs.push(DynTallocr::with_max(b.alignment(), b.max_size()));
                    owner.push(i);
                }
            }
        }
        let n = tallocs.len();
        Gallocr {
            bufts,
            talloc_of,
            tallocs,
            buffers: vec![Vec::new(); n],
            created: Vec::new(),
            hash: BTreeMap::new(),
            plan: None,
            inplace: true,
            n_reserves: 0,
            n_buffer_allocs: 0,
            host_limit: None,
        }
    }

    /// ggml_gallocr_new: one buffer type, buffer id 0.
    pub fn new_single(buft: Rc<dyn BufferType>) -> Gallocr {
        Gallocr::new(vec![buft])
    }

    /// Caps the bytes the host buffer types' compute buffers may take together: a plan whose
    /// peaks pass it is refused (`OutOfMemory`, the planned bytes as `requested`) before any
    /// buffer is allocated. A call's own plan inside a model's memory budget.
    pub fn set_host_limit(&mut self, bytes: Option<usize>) {
        self.host_limit = bytes;
    }

    /// Number of buffer ids.
    pub fn n_buffers(&self) -> usize {
        self.bufts.len()
    }

    pub fn buffer_type(&self, id: usize) -> &Rc<dyn BufferType> {
        &self.bufts[id]
    }

    /// Whether element-wise ops may take over their input's memory (default true).
    /// Changing it drops the plan: the next `alloc_graph` plans again.
    pub fn set_inplace(&mut self, on: bool) {
        if on != self.inplace {
            self.inplace = on;
            self.plan = None;
        }
    }

    pub fn inplace(&self) -> bool {
        self.inplace
    }

    /// How many times `reserve`/`reserve_n` ran, explicitly or from `alloc_graph`.
    pub fn n_reserves(&self) -> usize {
        self.n_reserves
    }

    /// How many backend buffers this allocator allocated in total.
    pub fn n_buffer_allocs(&self) -> usize {
        self.n_buffer_allocs
    }

    /// The (first) backend buffer behind buffer id `id` (shared by ids of the same buffer
    /// type); [`Gallocr::get_buffers`] gives every chunk's.
    pub fn get_buffer(&self, id: usize) -> Option<Rc<dyn Buffer>> {
        self.buffers[self.talloc_of[id]].first().cloned()
    }

    /// The backend buffers behind buffer id `id`: one per chunk of its plan.
    pub fn get_buffers(&self, id: usize) -> &[Rc<dyn Buffer>] {
        &self.buffers[self.talloc_of[id]]
    }

    /// ggml_gallocr_get_buffer_size: the size of id's backend buffer, 0 if none, and 0 for
    /// an id that shares its buffer with a lower id (so summing over ids counts it once).
    pub fn buffer_size(&self, id: usize) -> usize {
        let k = self.talloc_of[id];
        if self.talloc_of[..id].contains(&k) {
            return 0;
        }
        self.buffers[k].iter().map(|b| b.size()).sum()
    }

    /// The peak of the last plan for id's buffer (what it needed; the buffer kept from an
    /// earlier, larger plan may be bigger).
    pub fn peak_size(&self, id: usize) -> usize {
        self.tallocs[self.talloc_of[id]].total_peak()
    }

    /// The planned place of node `i` of the reserved graph; None for views, tensors with
    /// external data, or when there is no plan.
    pub fn node_alloc(&self, i: usize) -> Option<TensorAlloc> {
        self.plan.as_ref().and_then(|p| p.nodes.get(i)).and_then(|s| s.alloc)
    }

    /// The planned place of leaf `i` of the reserved graph (see [`Gallocr::node_alloc`]).
    pub fn leaf_alloc(&self, i: usize) -> Option<TensorAlloc> {
        self.plan.as_ref().and_then(|p| p.leafs.get(i)).and_then(|s| s.alloc)
    }

    pub fn has_plan(&self) -> bool {
        self.plan.is_some()
    }

    // --- ownership ---

    /// True if `t` (not a view) has data that this allocator did not place.
    fn is_external(&self, t: &Tensor) -> bool {
        match t.data() {
            None => false,
            Some(d) => !self.created.iter().any(|w| same_buffer(&d.buffer, w.as_ptr())),
        }
    }

    fn is_view(t: &Tensor) -> bool {
        t.view_src.is_some()
    }

    // --- the dry run (ggml_gallocr_alloc_graph_impl) ---

    fn hn(&mut self, t: &Tensor) -> &mut HashNode {
        self.hash.entry(t.id()).or_default()
    }

    fn allocate_node(&mut self, t: &Tensor, buffer_id: usize) -> Result<(), BackendError> {
        if Self::is_view(t) || self.is_external(t) || self.hn(t).allocated {
            return Ok(());
        }
        if let Some(parent) = self.inplace_parent(t, buffer_id) {
            let p = self.hn(&parent);
            p.allocated = false; // ownership moves to `t`: freeing the parent must not free it
            let (buffer_id, offset) = (p.buffer_id, p.offset);
            let h = self.hn(t);
            (h.buffer_id, h.offset, h.allocated) = (buffer_id, offset, true);
            return Ok(());
        }
        let size = self.bufts[buffer_id].alloc_size(t);
        let offset = self.tallocs[self.talloc_of[buffer_id]].alloc(size).map_err(|e| match e {
            BackendError::OutOfMemory { requested, limit, .. } => BackendError::OutOfMemory {
                what: format!(
                    "tensor '{}' ({} {:?}) in a {} compute buffer",
                    t.name(),
                    t.op.name(),
                    t.ne,
                    self.bufts[buffer_id].name()
                ),
                requested,
                limit,
            },
            e => e,
        })?;
        let h = self.hn(t);
        (h.buffer_id, h.offset, h.allocated) = (buffer_id, offset, true);
        Ok(())
    }

    /// The parent whose memory `t` may take over: `src[0]`, computed by the graph (not a
    /// leaf, input, output or view), placed by us in the same buffer, with the same layout,
    /// `t` its last reader and no view of it still to be read.
    fn inplace_parent(&mut self, t: &Tensor, buffer_id: usize) -> Option<Tensor> {
        if !self.inplace || !op_can_inplace(&t.op) {
            return None;
        }
        let parent = t.src[0].clone()?;
        if parent.op == Op::None || Self::is_view(&parent) || parent.is_input() {
            return None;
        }
        if !same_layout(t, &parent) {
            return None;
        }
        let p = *self.hn(&parent);
        let ok = p.allocated
            && !p.keep
            && p.buffer_id == buffer_id
            && p.n_children == 1
            && p.n_views == 0
            && self.bufts[buffer_id].alloc_size(t) == self.bufts[buffer_id].alloc_size(&parent);
        ok.then_some(parent)
    }

    fn free_node(&mut self, t: &Tensor) {
        // Outputs must survive the run.
        let h = *self.hn(t);
        if h.keep {
            return;
        }
        let size = self.bufts[h.buffer_id].alloc_size(t);
        self.tallocs[self.talloc_of[h.buffer_id]].free(h.offset, size);
        self.hn(t).allocated = false;
    }

    fn dry_run(&mut self, graph: &Graph, node_ids: &[usize], leaf_ids: &[usize]) -> Result<(), BackendError> {
        self.hash.clear();
        for t in &mut self.tallocs {
            t.reset();
        }
        // Outputs stay; so does the memory under an output view (ggml checks only the
        // tensor itself, which lets a later node overwrite, say, a cpy result marked output).
        for t in graph.leafs.iter().chain(&graph.nodes) {
            if t.is_output() {
                let root = t.view_src.as_ref().unwrap_or(t);
                self.hn(root).keep = true;
            }
        }
        // Leafs first: weights are external, so this places the inputs (and any other leaf
        // without data) before any intermediate can take their place.
        for (i, leaf) in graph.leafs.iter().enumerate() {
            self.allocate_node(leaf, leaf_ids[i])?;
        }
        // Count readers and views; place inputs among the nodes' sources early too.
        for (i, node) in graph.nodes.iter().enumerate() {
            if let Some(vs) = &node.view_src {
                self.hn(vs).n_views += 1;
            }
            if node.is_input() {
                self.allocate_node(node, node_ids[i])?;
            }
            for src in node.src.iter().flatten() {
                self.hn(src).n_children += 1;
                if src.is_input() {
                    self.allocate_node(src, node_ids[i])?;
                }
            }
        }
        for (i, node) in graph.nodes.iter().enumerate() {
            let buffer_id = node_ids[i];
            for src in node.src.iter().flatten() {
                self.allocate_node(src, buffer_id)?;
            }
            self.allocate_node(node, buffer_id)?;
            // Free what this node was the last to read.
            for parent in node.src.iter().flatten() {
                let p = self.hn(parent);
                p.n_children -= 1;
                if p.n_children != 0 || p.n_views != 0 {
                    continue;
                }
                match &parent.view_src {
                    // A view holds no memory: its end of use is one less view on its source.
                    Some(vs) => {
                        let v = self.hn(vs);
                        v.n_views -= 1;
                        if v.n_views == 0 && v.n_children == 0 && v.allocated {
                            self.free_node(vs);
                        }
                    }
                    None => {
                        if p.allocated {
                            self.free_node(parent);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    // --- reserve ---

    /// ggml_gallocr_reserve: plans `graph` with every tensor in buffer id 0.
    pub fn reserve(&mut self, graph: &Graph) -> Result<bool, BackendError> {
        let node_ids = vec![0; graph.nodes.len()];
        let leaf_ids = vec![0; graph.leafs.len()];
        self.reserve_n(graph, &node_ids, &leaf_ids)
    }

    /// ggml_gallocr_reserve_n: plans `graph` with node `i` in buffer `node_buffer_ids[i]`
    /// and leaf `i` in `leaf_buffer_ids[i]`, then allocates each backend buffer that is
    /// missing or smaller than its new peak (a large enough buffer is kept). Returns
    /// Ok(true) (ggml's success flag); errors are a bad id list, a peak above the buffer
    /// type's `max_size`, or a refused allocation — the plan is then dropped.
    pub fn reserve_n(
        &mut self,
        graph: &Graph,
        node_buffer_ids: &[usize],
        leaf_buffer_ids: &[usize],
    ) -> Result<bool, BackendError> {
        self.n_reserves += 1;
        self.plan = None;
        if node_buffer_ids.len() != graph.nodes.len() {
            return Err(buffer_ids_error("node", node_buffer_ids.len(), graph.nodes.len()));
        }
        if leaf_buffer_ids.len() != graph.leafs.len() {
            return Err(buffer_ids_error("leaf", leaf_buffer_ids.len(), graph.leafs.len()));
        }
        let n = self.bufts.len();
        for (what, ids) in [("node", node_buffer_ids), ("leaf", leaf_buffer_ids)] {
            if let Some((i, &id)) = ids.iter().enumerate().find(|(_, &id)| id >= n) {
                return Err(BackendError::Other(format!(
                    "gallocr reserve_n: {what} {i} has buffer id {id}, but there are only {n} buffer types"
                )));
            }
        }

        self.dry_run(graph, node_buffer_ids, leaf_buffer_ids)?;

        let slots = slot_map(graph);
        let nodes = graph.nodes.iter().map(|t| self.slot_plan(t, &slots)).collect();
        let leafs = graph.leafs.iter().map(|t| self.slot_plan(t, &slots)).collect();
        self.hash.clear();

        for id in 0..n {
            let peak = self.tallocs[self.talloc_of[id]].chunk_peaks().into_iter().max().unwrap_or(0);
            let max = self.bufts[id].max_size();
            if peak > max {
                return Err(BackendError::OutOfMemory {
                    what: format!("compute buffer {id} ({})", self.bufts[id].name()),
                    requested: peak,
                    limit: max,
                });
            }
        }
        if let Some(limit) = self.host_limit {
            let host: usize = (0..n)
                .filter(|&id| self.bufts[id].is_host() && !self.talloc_of[..id].contains(&self.talloc_of[id]))
                .map(|id| self.tallocs[self.talloc_of[id]].total_peak())
                .fold(0, usize::saturating_add);
            if host > limit {
                return Err(BackendError::OutOfMemory { what: "host compute buffers".into(), requested: host, limit });
            }
        }
        for id in 0..n {
            let k = self.talloc_of[id];
            if self.talloc_of[..id].contains(&k) {
                continue;
            }
            // Even an empty plan gets a buffer, so that every id has one (chunk 0's).
            for (c, peak) in self.tallocs[k].chunk_peaks().into_iter().enumerate() {
                if self.buffers[k].get(c).is_none_or(|b| b.size() < peak) {
                    if c < self.buffers[k].len() {
                        self.buffers[k].remove(c); // freed before its larger replacement
                    }
                    let buffer = self.bufts[id].alloc_buffer(peak)?;
                    self.n_buffer_allocs += 1;
                    self.created.retain(|w| w.strong_count() > 0);
                    self.created.push(Rc::downgrade(&buffer));
                    self.buffers[k].insert(c, buffer);
                }
            }
        }
        self.plan = Some(Plan {
            nodes,
            leafs,
            node_buffer_ids: node_buffer_ids.to_vec(),
            leaf_buffer_ids: leaf_buffer_ids.to_vec(),
        });
        Ok(true)
    }

    /// What the plan records for `t` after a dry run.
    fn slot_plan(&self, t: &Tensor, slots: &BTreeMap<usize, Slot>) -> SlotPlan {
        let is_view = Self::is_view(t);
        let alloc = if is_view || self.is_external(t) {
            None
        } else {
            let h = self.hash.get(&t.id()).copied().unwrap_or_default();
            Some(TensorAlloc { buffer_id: h.buffer_id, offset: h.offset, size: self.bufts[h.buffer_id].alloc_size(t) })
        };
        SlotPlan { alloc, op: core::mem::discriminant(&t.op), srcs: src_slots(t, slots), flags: plan_flags(t), is_view }
    }

    // --- alloc_graph ---

    /// Whether `graph` (with these buffer ids, if given) fits the plan: same node and leaf
    /// counts, the same ops wired the same way with the same input/output flags, and no
    /// tensor larger than the one planned in its slot, nor needing memory where the plan
    /// has none.
    pub fn fits_plan(&self, graph: &Graph, buffer_ids: Option<(&[usize], &[usize])>) -> bool {
        let Some(plan) = &self.plan else { return false };
        if plan.nodes.len() != graph.nodes.len() || plan.leafs.len() != graph.leafs.len() {
            return false;
        }
        if let Some((node_ids, leaf_ids)) = buffer_ids {
            if node_ids != plan.node_buffer_ids.as_slice() || leaf_ids != plan.leaf_buffer_ids.as_slice() {
                return false;
            }
        }
        let slots = slot_map(graph);
        let fits = |t: &Tensor, p: &SlotPlan| {
            if Self::is_view(t) != p.is_view
                || core::mem::discriminant(&t.op) != p.op
                || plan_flags(t) != p.flags
                || src_slots(t, &slots) != p.srcs
            {
                return false;
            }
            if p.is_view || self.is_external(t) {
                return true;
            }
            p.alloc.is_some_and(|a| self.bufts[a.buffer_id].alloc_size(t) <= a.size)
        };
        graph.nodes.iter().zip(&plan.nodes).all(|(t, p)| fits(t, p))
            && graph.leafs.iter().zip(&plan.leafs).all(|(t, p)| fits(t, p))
    }

    /// ggml_gallocr_alloc_graph: sets the data of every tensor the plan places. A graph
    /// that does not fit is planned again when there is one buffer id; with several, ggml
    /// cannot know the ids and returns Ok(false) (call `reserve_n` or `alloc_graph_n`).
    pub fn alloc_graph(&mut self, graph: &Graph) -> Result<bool, BackendError> {
        if !self.fits_plan(graph, None) {
            if self.bufts.len() != 1 {
                return Ok(false);
            }
            self.reserve(graph)?;
        }
        self.apply(graph);
        Ok(true)
    }

    /// alloc_graph with explicit buffer ids (what the scheduler knows): plans again when
    /// the graph does not fit or the ids changed.
    pub fn alloc_graph_n(
        &mut self,
        graph: &Graph,
        node_buffer_ids: &[usize],
        leaf_buffer_ids: &[usize],
    ) -> Result<bool, BackendError> {
        if !self.fits_plan(graph, Some((node_buffer_ids, leaf_buffer_ids))) {
            self.reserve_n(graph, node_buffer_ids, leaf_buffer_ids)?;
        }
        self.apply(graph);
        Ok(true)
    }

    fn apply(&self, graph: &Graph) {
        let plan = self.plan.as_ref().expect("apply after a successful reserve");
        for (t, p) in graph.leafs.iter().zip(&plan.leafs).chain(graph.nodes.iter().zip(&plan.nodes)) {
            if let Some(a) = p.alloc {
                if !Self::is_view(t) && !self.is_external(t) {
                    let k = self.talloc_of[a.buffer_id];
                    let (c, offset) = self.tallocs[k].split(a.offset);
                    let buffer = self.buffers[k][c].clone();
                    t.set_data(buffer, offset);
                }
            }
        }
    }

    /// Checks the placement of `graph` after `alloc_graph`: [`check_placement`], plus
    /// every tensor in one of this allocator's buffers aligned for its buffer type and
    /// within the buffer with its `alloc_size`.
    pub fn check_graph(&self, graph: &Graph) -> Result<(), PlacementError> {
        for t in graph.leafs.iter().chain(&graph.nodes) {
            if Self::is_view(t) {
                continue;
            }
            let Some(d) = t.data() else { continue };
            for (id, buft) in self.bufts.iter().enumerate() {
                let Some(b) = self.buffers[self.talloc_of[id]].iter().find(|b| Rc::ptr_eq(b, &d.buffer)) else {
                    continue;
                };
                if d.offset % buft.alignment() != 0 {
                    return Err(PlacementError::Misaligned {
                        tensor: describe(graph, t),
                        offset: d.offset,
                        alignment: buft.alignment(),
                    });
                }
                let size = buft.alloc_size(t);
                if d.offset.checked_add(size).is_none_or(|end| end > b.size()) {
                    return Err(PlacementError::OutOfBounds {
                        tensor: describe(graph, t),
                        offset: d.offset,
                        size,
                        buffer_size: b.size(),
                    });
                }
            }
        }
        check_placement(graph)
    }
}

fn plan_flags(t: &Tensor) -> u32 {
    t.flags() & (flags::INPUT | flags::OUTPUT)
}

fn slot_map(graph: &Graph) -> BTreeMap<usize, Slot> {
    let mut m = BTreeMap::new();
    for (i, t) in graph.nodes.iter().enumerate() {
        m.insert(t.id(), Slot::Node(i));
    }
    for (i, t) in graph.leafs.iter().enumerate() {
        m.insert(t.id(), Slot::Leaf(i));
    }
    m
}

fn src_slots(t: &Tensor, slots: &BTreeMap<usize, Slot>) -> [Option<Slot>; MAX_SRC] {
    core::array::from_fn(|j| t.src[j].as_ref().map(|s| slots.get(&s.id()).copied().unwrap_or(Slot::Outside)))
}

// ---------------------------------------------------------------------------------------
// placement checker

/// A placement that would let one tensor's bytes clobber another's while still needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlacementError {
    /// A tensor of the graph (not a view) has no data.
    Unallocated {
        tensor: String,
    },
    OutOfBounds {
        tensor: String,
        offset: usize,
        size: usize,
        buffer_size: usize,
    },
    Misaligned {
        tensor: String,
        offset: usize,
        alignment: usize,
    },
    /// Two tensors share bytes while both are live. Lifetimes are in steps: 0 is before
    /// the first node, node i runs at step i + 1, and `usize::MAX` means "after the run".
    Overlap {
        a: String,
        a_live: (usize, usize),
        b: String,
        b_live: (usize, usize),
    },
}

impl core::fmt::Display for PlacementError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PlacementError::Unallocated { tensor } => write!(f, "{tensor} has no data"),
            PlacementError::OutOfBounds { tensor, offset, size, buffer_size } => {
                write!(f, "{tensor}: {size} bytes at offset {offset} past the end of a {buffer_size}-byte buffer")
            }
            PlacementError::Misaligned { tensor, offset, alignment } => {
                write!(f, "{tensor}: offset {offset} is not a multiple of {alignment}")
            }
            PlacementError::Overlap { a, a_live, b, b_live } => write!(
                f,
                "{a} (live {}..={}) and {b} (live {}..={}) overlap in memory",
                a_live.0, a_live.1, b_live.0, b_live.1
            ),
        }
    }
}

/// "node 3 ADD 'name'" / "leaf 0 NONE 'x'".
fn describe(graph: &Graph, t: &Tensor) -> String {
    let pos = match graph.nodes.iter().position(|n| n == t) {
        Some(i) => format!("node {i}"),
        None => match graph.leafs.iter().position(|n| n == t) {
            Some(i) => format!("leaf {i}"),
            None => String::from("tensor outside the graph"),
        },
    };
    format!("{pos} {} '{}'", t.op.name(), t.name())
}

/// Checks, independently of how the allocator decided, that running `graph` with its
/// current data cannot corrupt anything: every tensor that is not a view has data inside
/// its buffer, and two tensors that share bytes of one buffer are never live at the same
/// step. A tensor is live from its birth (step 0 for leafs and inputs, its own step for
/// a node) to its last read, where reading a view reads its source; outputs, tensors
/// nothing reads and sources of views nothing reads stay live after the run. The one
/// permitted overlap is an in-place op that writes exactly over the source it is the
/// last to read (same offset, same layout, an op of [`op_can_inplace`]).
pub fn check_placement(graph: &Graph) -> Result<(), PlacementError> {
    const END: usize = usize::MAX;
    // Every tensor that owns bytes, with its birth step; and the last step it is read.
    let mut birth: BTreeMap<usize, usize> = BTreeMap::new();
    let mut death: BTreeMap<usize, usize> = BTreeMap::new();
    let mut read: BTreeMap<usize, bool> = BTreeMap::new(); // tensor id → read by some node
    for t in &graph.leafs {
        if t.view_src.is_none() {
            birth.insert(t.id(), 0);
        }
    }
    for (i, t) in graph.nodes.iter().enumerate() {
        if t.view_src.is_none() {
            birth.insert(t.id(), if t.is_input() { 0 } else { i + 1 });
        }
        for s in t.src.iter().flatten() {
            read.insert(s.id(), true);
        }
    }
    let root = |t: &Tensor| t.view_src.clone().unwrap_or_else(|| t.clone());
    for (i, t) in graph.nodes.iter().enumerate() {
        let step = i + 1;
        let mut touch = |r: Tensor| {
            let d = death.entry(r.id()).or_insert(0);
            *d = (*d).max(step);
        };
        for s in t.src.iter().flatten() {
            touch(root(s));
        }
        if let Some(vs) = &t.view_src {
            touch(vs.clone());
        }
    }
    for t in graph.leafs.iter().chain(&graph.nodes) {
        let unread = !read.contains_key(&t.id());
        if t.is_output() || unread {
            death.insert(root(t).id(), END);
        }
    }
    let live = |t: &Tensor| {
        let b = birth[&t.id()];
        (b, death.get(&t.id()).copied().unwrap_or(b).max(b))
    };

    let mut placed: Vec<(Tensor, Rc<dyn Buffer>, usize, usize)> = Vec::new();
    for t in graph.leafs.iter().chain(&graph.nodes) {
        if t.view_src.is_some() {
            continue;
        }
        let d = t.data().ok_or_else(|| PlacementError::Unallocated { tensor: describe(graph, t) })?;
        let size = t.nbytes();
        if d.offset.checked_add(size).is_none_or(|end| end > d.buffer.size()) {
            return Err(PlacementError::OutOfBounds {
                tensor: describe(graph, t),
                offset: d.offset,
                size,
                buffer_size: d.buffer.size(),
            });
        }
        placed.push((t.clone(), d.buffer, d.offset, size));
    }

    // B writes over A exactly as an in-place op that is A's last reader.
    let inplace_over = |a: &Tensor, b: &Tensor, oa: usize, ob: usize| {
        oa == ob
            && op_can_inplace(&b.op)
            && b.src.iter().flatten().any(|s| s == a)
            && same_layout(a, b)
            && live(a).1 == live(b).0
    };
    for (i, (a, ba, oa, sa)) in placed.iter().enumerate() {
        for (b, bb, ob, sb) in &placed[i + 1..] {
            if !Rc::ptr_eq(ba, bb) || *sa == 0 || *sb == 0 || oa + sa <= *ob || ob + sb <= *oa {
                continue;
            }
            let (la, lb) = (live(a), live(b));
            if la.1 < lb.0 || lb.1 < la.0 || inplace_over(a, b, *oa, *ob) || inplace_over(b, a, *ob, *oa) {
                continue;
            }
            return Err(PlacementError::Overlap {
                a: describe(graph, a),
                a_live: la,
                b: describe(graph, b),
                b_live: lb,
            });
        }
    }
    Ok(())
}
