//! The backend scheduler (ggml_backend_sched): one graph, several backends.
//!
//! ```ignore
//! // HostBackend is test support (tests/support/host_backend.rs): the unit tests in
//! // crate/sched/tests.rs run graphs like this one.
//! use std::rc::Rc;
//! use ggweb::backend::{Backend, BufferType};
//! use ggweb::allocator::alloc_tensors;
//! use ggweb::sched::Sched;
//! use ggweb::{Context, ContextParams, GgmlType::F32, Graph};
//!
//! // A second "device" (host memory of its own type, no GELU) and the CPU, in priority order.
//! let gpu: Rc<dyn Backend> = Rc::new(HostBackend::new("GPU", "GPU", |n| n.op != ggweb::Op::Gelu));
//! let cpu: Rc<dyn Backend> = Rc::new(HostBackend::new("CPU", "CPU", |_| true));
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
//! let w = ctx.new_tensor_2d(F32, 2, 2); // a weight, on the GPU
//! let _wbuf = alloc_tensors(&[w.clone()], &*gpu.buffer_type()).unwrap();
//! w.set_bytes(bytemuck::cast_slice(&[1f32, 0., 0., 2.]), 0);
//! let x = ctx.new_tensor_1d(F32, 2);
//! x.set_input(); // inputs live on the CPU
//! let y = ctx.gelu(&ctx.mul_mat(&w, &x)); // mul_mat follows w; GELU falls back to the CPU
//! let mut gf = Graph::new();
//! gf.build_forward_expand(&y);
//!
//! let mut sched = Sched::new(vec![gpu, cpu]).unwrap();
//! sched.reserve(&gf).unwrap(); // worst case, once
//! sched.alloc_graph(&gf).unwrap(); // every run: no allocation
//! x.set_bytes(bytemuck::cast_slice(&[1f32, 1.]), 0);
//! sched.graph_compute(&gf).unwrap();
//! let names: Vec<&str> = sched.splits().iter().map(|s| sched.backend(s.backend).name()).collect();
//! assert_eq!(names, ["GPU", "CPU"]);
//! assert_eq!(sched.last_run().copies, 2); // x to the GPU, the product back to the CPU
//! assert!((y.to_f32_vec()[1] - ggweb::cpu::gelu_f32(2.0)).abs() < 1e-6);
//! ```
//!
//! Backends come in priority order; the last one is the fallback that also holds the
//! graph's inputs (the CPU). [`Sched::split_graph`] assigns every tensor a backend in
//! ggml's five passes:
//!
//! 1. tensors whose data is already placed (weights, the KV cache, views of them) stay on
//!    their buffer's backend; inputs go to the last backend; a node that reads a weight
//!    runs where the weight is;
//! 2. non-CPU backends spread to unassigned neighbours, down the graph and then up (a CPU
//!    node stops the spread); then every backend spreads the same way;
//! 3. a node moves to a higher-priority backend with the same buffer type when that one
//!    runs its op and reads all its sources (no copy added); a node still unassigned
//!    (no neighbour could run it) goes to the backend that reads most of its sources;
//! 4. views follow their `view_src`, and sources nobody placed follow their reader;
//! 5. the nodes are cut into splits where the backend changes, and each source a split's
//!    backend cannot read gets a copy in that backend's memory.
//!
//! A node only goes to a backend whose `supports_op` accepts it, so ops a GPU lacks run
//! on the CPU. One [`Gallocr`] with a buffer per backend plans the intermediates and the
//! copies together: [`Sched::reserve`] once with the worst-case graph, then
//! [`Sched::alloc_graph`] per run allocates nothing while the graph fits that plan.
//!
//! Copies are of whole tensors that own memory (a view's `view_src`, not the view), kept
//! for the whole run (flags INPUT and OUTPUT, like ggml's) so the allocator never lends
//! their bytes to another tensor. Sources are not rewritten (tensor headers are
//! immutable here): while a split runs, each copied tensor's data points at its copy, and
//! it is restored when the split ends. Bytes move through host memory
//! (`Buffer::get_bytes` / `set_bytes`, straight from or into the host side when one
//! buffer is host memory).

use alloc::boxed::Box;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

mod assign;

use assign::Assignments;

use crate::allocator::Gallocr;
use crate::backend::{Backend, BackendError, Buffer, BufferType};
use crate::graph::Graph;
use crate::tensor::{Context, ContextParams, Op, Tensor, TensorData, TENSOR_OVERHEAD};

/// Why a tensor runs (or lives) on its backend: the pass that decided (ggml's SET_CAUSE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// 1: its data is already in a buffer this backend reads (weights, KV cache, views).
    Placed,
    /// 1: a graph input (flag INPUT): the last backend.
    Input,
    /// 1: it reads a weight that lives in this backend's memory.
    Weight,
    /// 2: a non-CPU backend spreading down the graph.
    GpuDown,
    /// 2: a non-CPU backend spreading up the graph.
    GpuUp,
    /// 2: any backend (the CPU included) spreading down.
    RestDown,
    /// 2: any backend spreading up.
    RestUp,
    /// 3: unassigned after spreading: the backend that reads most of its sources.
    BestInputs,
    /// 3: moved to a higher-priority backend of the same buffer type.
    Upgrade,
    /// 4: a view, or a node writing into another tensor's memory, follows its `view_src`.
    ViewSrc,
    /// 4: a source nobody placed goes with the node that reads it.
    Reader,
    /// 4: still unassigned: the first backend that runs it.
    First,
}

impl Cause {
    /// ggml's short labels ("1.wgt", "2.sup", ...), with the direction of spreading.
    pub fn label(self) -> &'static str {
        match self {
            Cause::Placed => "1.buf",
            Cause::Input => "1.inp",
            Cause::Weight => "1.wgt",
            Cause::GpuDown => "2.gpu_down",
            Cause::GpuUp => "2.gpu_up",
            Cause::RestDown => "2.rest_down",
            Cause::RestUp => "2.rest_up",
            Cause::BestInputs => "3.best",
            Cause::Upgrade => "3.upg",
            Cause::ViewSrc => "4.vsrc",
            Cause::Reader => "4.cur",
            Cause::First => "4.first",
        }
    }
}

/// A tensor's backend (index into the scheduler's list) and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub backend: usize,
    pub cause: Cause,
}

/// A run of consecutive nodes on one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    pub backend: usize,
    /// Node indices in the graph (view nodes inside belong to whichever split holds them).
    pub nodes: Range<usize>,
    /// Indices into [`Sched::copies`]: what is copied in before the split runs.
    pub inputs: Vec<usize>,
}

/// A tensor copied into another backend's memory for the splits there that read it.
#[derive(Clone, Debug)]
pub struct TensorCopy {
    /// The tensor that owns the bytes (a view's `view_src`, never a view).
    pub src: Tensor,
    /// The backend the copy is for.
    pub backend: usize,
    /// Same type and shape, in that backend's compute buffer; named `"{backend}#{src}"`.
    pub copy: Tensor,
}

/// What the last [`Sched::graph_compute`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    pub splits: usize,
    /// Tensors copied between backends (once per split that needs them).
    pub copies: usize,
    pub copy_bytes: usize,
}

/// ggml_backend_sched_eval_callback's question: asked about every tensor of a graph as the
/// scheduler splits it (ggml's `ask = true`), true for the ones the caller wants to see. See
/// [`Sched::set_eval_callback`].
pub type EvalCallback = Box<dyn FnMut(&Tensor) -> bool>;

/// The result of splitting one graph, kept from `alloc_graph` to `graph_compute`.
struct SplitState {
    /// Ids of the graph's nodes and leafs, to recognise the same graph later.
    node_ids: Vec<usize>,
    leaf_ids: Vec<usize>,
    assign: Assignments,
    splits: Vec<Split>,
    copies: Vec<TensorCopy>,
    /// The nodes of each split, as graphs for the backends.
    split_graphs: Vec<Graph>,
    /// The graph the allocator sees: the nodes, then the leafs followed by the copies.
    alloc_graph: Graph,
    node_buffer_ids: Vec<usize>,
    leaf_buffer_ids: Vec<usize>,
    allocated: bool,
    /// The tensors the eval callback asked for, in graph order (leafs, then nodes).
    observed: Vec<Tensor>,
    /// Owns the copies' headers.
    _ctx: Context,
}

/// ggml_backend_sched: assigns, splits, allocates and runs graphs over several backends.
pub struct Sched {
    backends: Vec<Rc<dyn Backend>>,
    bufts: Vec<Rc<dyn BufferType>>,
    galloc: Gallocr,
    state: Option<SplitState>,
    last_run: RunStats,
    n_computes: usize,
    /// Staging for copies between two device buffers.
    scratch: Vec<u8>,
    eval_cb: Option<EvalCallback>,
}

fn root(t: &Tensor) -> &Tensor {
    t.view_src.as_ref().unwrap_or(t)
}

fn same_buffer(a: &Rc<dyn Buffer>, b: &Rc<dyn Buffer>) -> bool {
    core::ptr::addr_eq(Rc::as_ptr(a), Rc::as_ptr(b))
}

fn label(t: &Tensor) -> String {
    let name = t.name();
    if name.is_empty() {
        format!("({} {} ne={:?})", t.op.name(), t.ty, t.ne)
    } else {
        format!("'{name}' ({})", t.op.name())
    }
}

impl Sched {
    /// `backends` in priority order (a GPU first); the last is the fallback that also
    /// takes the inputs: the CPU. Backends whose buffer types share a name share one
    /// compute buffer.
    pub fn new(backends: Vec<Rc<dyn Backend>>) -> Result<Sched, BackendError> {
        if backends.is_empty() {
            return Err(BackendError::Other("Sched::new: no backends".into()));
        }
        let bufts: Vec<Rc<dyn BufferType>> = backends.iter().map(|b| b.buffer_type()).collect();
        let galloc = Gallocr::new(bufts.clone());
        Ok(Sched {
            backends,
            bufts,
            galloc,
            state: None,
            last_run: RunStats::default(),
            n_computes: 0,
            scratch: Vec::new(),
            eval_cb: None,
        })
    }

    pub fn n_backends(&self) -> usize {
        self.backends.len()
    }

    pub fn backend(&self, i: usize) -> &Rc<dyn Backend> {
        &self.backends[i]
    }

    pub fn backends(&self) -> &[Rc<dyn Backend>] {
        &self.backends
    }

    /// The graph allocator (one buffer id per backend, in the same order).
    pub fn galloc(&self) -> &Gallocr {
        &self.galloc
    }

    /// Bytes of backend `i`'s compute buffer (0 when it shares a lower backend's buffer).
    pub fn compute_buffer_size(&self, i: usize) -> usize {
        self.galloc.buffer_size(i)
    }

    /// Caps this scheduler's host compute buffers ([`Gallocr::set_host_limit`]).
    pub fn set_host_limit(&mut self, bytes: Option<usize>) {
        self.galloc.set_host_limit(bytes);
    }

    /// The index of the backend whose buffer type is named `name`, if any.
    pub fn backend_for_buffer_type(&self, name: &str) -> Option<usize> {
        self.bufts.iter().position(|b| b.name() == name)
    }

    /// ggml_backend_sched_set_eval_callback: from the next split on, `cb` is asked about every
    /// tensor of each graph (its leafs, then its nodes); each one it wants is flagged OUTPUT before
    /// the graph is allocated, so the allocator lends its bytes to no later node and it keeps its
    /// values to the end of the run, and is listed in [`Sched::observed`] for the caller to read
    /// ([`Sched::tensor_get`]) once [`Sched::graph_compute`] returns. ggml calls back between
    /// nodes to read each one at once; a device's memory may read back only asynchronously
    /// (WebGPU in the browser), so here the values are read after the run, and an observed node
    /// costs its bytes in the compute buffer for the run (only the nodes asked for do).
    pub fn set_eval_callback(&mut self, cb: Option<EvalCallback>) {
        self.eval_cb = cb;
    }

    /// The tensors the eval callback asked for in the graph split last, in graph order.
    pub fn observed(&self) -> &[Tensor] {
        self.state.as_ref().map_or(&[], |s| &s.observed)
    }

    /// ggml_backend_tensor_get for any tensor of a graph this scheduler ran: `out.len()` bytes
    /// of `t` from its start, read by the backend whose buffer holds it
    /// ([`Backend::tensor_get_async`]: WebGPU memory reads back asynchronously).
    pub async fn tensor_get(&self, t: &Tensor, out: &mut [u8]) -> Result<(), BackendError> {
        let d = t.data().ok_or_else(|| BackendError::Other(format!("read of unallocated tensor {}", label(t))))?;
        let b = self.backend_for_buffer_type(d.buffer.buffer_type_name()).unwrap_or(self.backends.len() - 1);
        self.backends[b].tensor_get_async(t, 0, out).await
    }

    // --- results of the last split ---

    /// The splits of the graph split last (empty before any).
    pub fn splits(&self) -> &[Split] {
        self.state.as_ref().map_or(&[], |s| &s.splits)
    }

    /// The nodes of the graph split last, in order (what [`Split::nodes`] indexes).
    pub fn nodes(&self) -> &[Tensor] {
        self.state.as_ref().map_or(&[], |s| &s.alloc_graph.nodes)
    }

    /// The copies the last split graph needs.
    pub fn copies(&self) -> &[TensorCopy] {
        self.state.as_ref().map_or(&[], |s| &s.copies)
    }

    /// The copies one run of the graph split last makes, and their bytes (what
    /// [`Sched::last_run`] reports after running it).
    pub fn copies_per_run(&self) -> (usize, usize) {
        let Some(st) = &self.state else { return (0, 0) };
        let inputs = st.splits.iter().flat_map(|s| &s.inputs);
        inputs.fold((0, 0), |(n, b), &k| (n + 1, b + st.copies[k].src.nbytes()))
    }

    /// Where the graph split last put `t`, and why.
    pub fn assignment(&self, t: &Tensor) -> Option<Assignment> {
        self.state.as_ref().and_then(|s| s.assign.get(&t.id()).copied())
    }

    /// What the last `graph_compute` did.
    pub fn last_run(&self) -> RunStats {
        self.last_run
    }

    /// How many times `graph_compute` ran.
    pub fn n_computes(&self) -> usize {
        self.n_computes
    }

    /// Checks the allocator's placement of the graph allocated last, copies included
    /// (see [`Gallocr::check_graph`]).
    pub fn check_placement(&self) -> Result<(), crate::allocator::PlacementError> {
        match &self.state {
            Some(s) if s.allocated => self.galloc.check_graph(&s.alloc_graph),
            _ => Ok(()),
        }
    }

    /// One line per split: backend, node range, the first and last node, the copies in.
    pub fn describe_splits(&self) -> Vec<String> {
        let Some(st) = &self.state else { return Vec::new() };
        st.splits
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let nodes = &st.alloc_graph.nodes;
                let first = nodes.get(s.nodes.start).map(|t| t.name()).unwrap_or_default();
                let last = nodes.get(s.nodes.end.saturating_sub(1)).map(|t| t.name()).unwrap_or_default();
                let inputs: Vec<String> = s
                    .inputs
                    .iter()
                    .map(|&c| {
                        let c = &st.copies[c];
                        format!("{} ({} B)", c.src.name(), c.src.nbytes())
                    })
                    .collect();
                format!(
                    "split {i}: {} nodes {}..{} ('{first}' .. '{last}'), {} input copies{}{}",
                    self.backends[s.backend].name(),
                    s.nodes.start,
                    s.nodes.end,
                    s.inputs.len(),
                    if inputs.is_empty() { "" } else { ": " },
                    inputs.join(", ")
                )
            })
            .collect()
    }

    // --- placement helpers ---

    /// The buffer of `t`'s data when something other than this scheduler placed it
    /// (weights, the KV cache, and views of them); None for intermediates.
    fn fixed_buffer(&self, t: &Tensor) -> Option<Rc<dyn Buffer>> {
        let d = t.data()?;
        let ours =
            (0..self.galloc.n_buffers()).any(|i| self.galloc.get_buffers(i).iter().any(|b| same_buffer(b, &d.buffer)));
        (!ours).then_some(d.buffer)
    }

    /// The scheduler's buffer type for `buf`: the one of the same name, or for host memory
    /// of no backend's type (an allocating context's pool) the last backend's when it is host.
    fn buft_of(&self, buf: &Rc<dyn Buffer>) -> Option<usize> {
        let name = buf.buffer_type_name();
        self.bufts.iter().position(|b| b.name() == name).or_else(|| {
            let last = self.bufts.len() - 1;
            (buf.host_base().is_some() && self.bufts[last].is_host()).then_some(last)
        })
    }

    /// ggml_backend_sched_backend_from_buffer: the first backend that reads `buf` and runs `op_node`.
    fn backend_from_buffer(&self, buf: &Rc<dyn Buffer>, op_node: &Tensor) -> Option<usize> {
        let k = self.buft_of(buf)?;
        (0..self.backends.len())
            .find(|&b| self.backends[b].supports_buft(&*self.bufts[k]) && self.backends[b].supports_op(op_node))
    }

    /// A weight: a leaf (not a view, not an input) whose data was placed beforehand.
    fn is_weight(&self, t: &Tensor) -> bool {
        t.op == Op::None && t.view_src.is_none() && !t.is_input() && self.fixed_buffer(t).is_some()
    }

    /// ggml_backend_sched_buffer_supported: whether backend `b` reads `t`'s memory, wherever
    /// it is (placed) or will be (its backend's buffer type).
    fn buffer_supported(&self, assign: &Assignments, t: &Tensor, b: usize) -> bool {
        let k = match self.fixed_buffer(t) {
            Some(buf) => self.buft_of(&buf),
            None => {
                assign.get(&t.id()).or_else(|| t.view_src.as_ref().and_then(|v| assign.get(&v.id()))).map(|a| a.backend)
            }
        };
        k.is_some_and(|k| self.backends[b].supports_buft(&*self.bufts[k]))
    }

    /// Pass 1 for one tensor (ggml_backend_sched_backend_id_from_cur).
    fn backend_from_cur(&self, t: &Tensor) -> Result<Option<Assignment>, BackendError> {
        if let Some(buf) = self.fixed_buffer(t) {
            return match self.backend_from_buffer(&buf, t) {
                Some(b) => Ok(Some(Assignment { backend: b, cause: Cause::Placed })),
                None => Err(BackendError::Unsupported {
                    node: label(t),
                    reason: format!(
                        "its data is in a {} buffer, and no backend that reads it runs {}",
                        buf.buffer_type_name(),
                        t.op.name()
                    ),
                }),
            };
        }
        if t.is_input() {
            return Ok(Some(Assignment { backend: self.backends.len() - 1, cause: Cause::Input }));
        }
        // The first weight decides, even when its backend cannot run the op (then the
        // node is left for the later passes), as in ggml.
        for s in t.src.iter().flatten() {
            if self.is_weight(s) {
                let buf = self.fixed_buffer(s).expect("a weight has data");
                return Ok(self.backend_from_buffer(&buf, t).map(|b| Assignment { backend: b, cause: Cause::Weight }));
            }
        }
        Ok(None)
    }

    // --- the five passes ---

    /// Pass 2 in one direction: each unassigned node takes the backend of the last assigned
    /// node before it in `order` (with `gpu_only`, a node on the last backend stops the
    /// spread). Views are skipped: they run nowhere and follow their source (pass 4). An op
    /// the backend lacks stays unassigned, and the spread goes on past it.
    fn spread<'a>(
        &self,
        assign: &mut Assignments,
        order: impl Iterator<Item = &'a Tensor>,
        gpu_only: bool,
        cause: Cause,
    ) {
        let cpu = self.backends.len() - 1;
        let mut cur: Option<usize> = None;
        for node in order {
            if node.op.is_view() {
                continue;
            }
            match assign.get(&node.id()) {
                Some(a) => cur = if gpu_only && a.backend == cpu { None } else { Some(a.backend) },
                None => {
                    if let Some(b) = cur.filter(|&b| self.backends[b].supports_op(node)) {
                        assign.insert(node.id(), Assignment { backend: b, cause });
                    }
                }
            }
        }
    }

    /// Assigns every tensor of `graph` a backend and cuts the graph into splits (see the
    /// module docs). Errors: a node no backend runs, or placed data no backend reads.
    pub fn split_graph(&mut self, graph: &Graph) -> Result<(), BackendError> {
        self.state = None;
        let n_backends = self.backends.len();
        let cpu = n_backends - 1;
        let mut assign: Assignments = Assignments::with_capacity(graph.leafs.len() + graph.nodes.len());
        let set = |assign: &mut Assignments, t: &Tensor, backend: usize, cause: Cause| {
            assign.insert(t.id(), Assignment { backend, cause });
        };
        let nodes = &graph.nodes;

        // Pass 1: follow placed data, inputs and weights.
        // Each tensor is in the graph once, as a leaf or a node.
        for t in graph.leafs.iter().chain(nodes) {
            if let Some(a) = self.backend_from_cur(t)? {
                assign.insert(t.id(), a);
            }
        }

        // Pass 2: spread, non-CPU backends first, down then up; then every backend.
        self.spread(&mut assign, nodes.iter(), true, Cause::GpuDown);
        self.spread(&mut assign, nodes.iter().rev(), true, Cause::GpuUp);
        self.spread(&mut assign, nodes.iter(), false, Cause::RestDown);
        self.spread(&mut assign, nodes.iter().rev(), false, Cause::RestUp);

        // Pass 3: upgrades, and the backend reading most sources for what is left.
        for node in nodes {
            if node.op.is_view() {
                continue;
            }
            match assign.get(&node.id()).copied() {
                None => {
                    let mut best: Option<(usize, usize)> = None; // (backend, sources it reads)
                    for b in 0..n_backends {
                        if !self.backends[b].supports_op(node) {
                            continue;
                        }
                        let n = node
                            .src
                            .iter()
                            .flatten()
                            .filter(|s| {
                                let placed = assign.contains_key(&s.id())
                                    || s.view_src.as_ref().is_some_and(|v| assign.contains_key(&v.id()));
                                placed && self.buffer_supported(&assign, s, b)
                            })
                            .count();
                        if best.is_none_or(|(_, m)| n > m) {
                            best = Some((b, n));
                        }
                    }
                    if let Some((b, _)) = best {
                        set(&mut assign, node, b, Cause::BestInputs);
                    }
                }
                Some(a) => {
                    for b in 0..a.backend {
                        let same_buft = self.bufts[b].name() == self.bufts[a.backend].name();
                        if same_buft
                            && self.backends[b].supports_op(node)
                            && node.src.iter().flatten().all(|s| self.buffer_supported(&assign, s, b))
                        {
                            set(&mut assign, node, b, Cause::Upgrade);
                            break;
                        }
                    }
                }
            }
        }

        // Pass 4: views follow their source; unplaced sources follow their reader.
        for node in nodes {
            if let Some(vs) = &node.view_src {
                let vs_backend = assign.get(&vs.id()).map(|a| a.backend);
                match (assign.get(&node.id()).copied(), vs_backend) {
                    (None, Some(b)) => set(&mut assign, node, b, Cause::ViewSrc),
                    // A computed node writing into another tensor's memory (cpy into an
                    // intermediate) must run where that memory is.
                    (Some(a), Some(b))
                        if !node.op.is_view()
                            && !self.buffer_supported(&assign, vs, a.backend)
                            && self.backends[b].supports_op(node) =>
                    {
                        set(&mut assign, node, b, Cause::ViewSrc)
                    }
                    _ => {}
                }
            }
            let cur = assign.get(&node.id()).map(|a| a.backend);
            for s in node.src.iter().flatten() {
                if assign.contains_key(&s.id()) {
                    continue;
                }
                if let Some(vs) = &s.view_src {
                    if let Some(a) = assign.get(&vs.id()).copied() {
                        set(&mut assign, s, a.backend, Cause::ViewSrc);
                    }
                } else if let Some(b) = cur {
                    set(&mut assign, s, b, Cause::Reader);
                }
            }
            if !assign.contains_key(&node.id()) {
                match (0..n_backends).find(|&b| self.backends[b].supports_op(node)) {
                    Some(b) => set(&mut assign, node, b, Cause::First),
                    None => {
                        return Err(BackendError::Unsupported {
                            node: label(node),
                            reason: format!(
                                "no backend runs it ({})",
                                self.backends.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ")
                            ),
                        })
                    }
                }
            }
        }

        // Pass 5: splits, and the copies each one needs.
        let mut splits: Vec<Split> = Vec::new();
        let mut wanted: Vec<(Tensor, usize)> = Vec::new(); // (tensor owning the bytes, backend)
        if let Some(first) = nodes.iter().position(|n| !n.op.is_view()) {
            let mut cur = assign[&nodes[first].id()].backend;
            let mut split = Split { backend: cur, nodes: 0..0, inputs: Vec::new() };
            for (i, node) in nodes.iter().enumerate().skip(first) {
                if node.op.is_view() {
                    continue;
                }
                let b = assign[&node.id()].backend;
                if b != cur {
                    split.nodes.end = i;
                    splits.push(core::mem::replace(&mut split, Split { backend: b, nodes: i..i, inputs: Vec::new() }));
                    cur = b;
                }
                if let Some(vs) = &node.view_src {
                    if !self.buffer_supported(&assign, vs, cur) {
                        return Err(BackendError::Unsupported {
                            node: label(node),
                            reason: format!(
                                "it writes into '{}', which {} cannot reach, and no backend there runs it",
                                vs.name(),
                                self.backends[cur].name()
                            ),
                        });
                    }
                }
                for s in node.src.iter().flatten() {
                    let r = root(s);
                    if self.buffer_supported(&assign, r, cur) {
                        continue;
                    }
                    let k = match wanted.iter().position(|(t, b)| t == r && *b == cur) {
                        Some(k) => k,
                        None => {
                            wanted.push((r.clone(), cur));
                            wanted.len() - 1
                        }
                    };
                    if !split.inputs.contains(&k) {
                        split.inputs.push(k);
                    }
                }
            }
            split.nodes.end = nodes.len();
            splits.push(split);
        }

        let mut observed = Vec::new();
        if let Some(cb) = &mut self.eval_cb {
            for t in graph.leafs.iter().chain(nodes) {
                if cb(t) {
                    t.set_output();
                    observed.push(t.clone());
                }
            }
        }

        let ctx = Context::new(ContextParams { mem_size: (wanted.len() + 1) * TENSOR_OVERHEAD, no_alloc: true });
        let copies: Vec<TensorCopy> = wanted
            .into_iter()
            .map(|(src, backend)| {
                let copy = ctx.dup_tensor(&src);
                assert_eq!(copy.nb, src.nb, "copy of '{}': a tensor that owns memory is contiguous", src.name());
                copy.set_name(&format!("{}#{}", self.backends[backend].name(), src.name()));
                copy.set_input();
                copy.set_output();
                assign.insert(copy.id(), Assignment { backend, cause: Cause::Reader });
                TensorCopy { src, backend, copy }
            })
            .collect();

        let mut alloc_graph = Graph::with_size(graph.size().max(nodes.len() + graph.leafs.len() + copies.len()));
        alloc_graph.nodes = nodes.clone();
        alloc_graph.leafs = graph.leafs.clone();
        alloc_graph.leafs.extend(copies.iter().map(|c| c.copy.clone()));
        let backend_of = |t: &Tensor| assign.get(&t.id()).map_or(cpu, |a| a.backend);
        let node_buffer_ids = alloc_graph.nodes.iter().map(backend_of).collect();
        let leaf_buffer_ids = alloc_graph.leafs.iter().map(backend_of).collect();
        let split_graphs = splits.iter().map(|s| graph.view(s.nodes.clone())).collect();

        self.state = Some(SplitState {
            node_ids: nodes.iter().map(|t| t.id()).collect(),
            leaf_ids: graph.leafs.iter().map(|t| t.id()).collect(),
            assign,
            splits,
            copies,
            split_graphs,
            alloc_graph,
            node_buffer_ids,
            leaf_buffer_ids,
            allocated: false,
            observed,
            _ctx: ctx,
        });
        Ok(())
    }

    fn is_current(&self, graph: &Graph) -> bool {
        self.state.as_ref().is_some_and(|s| {
            s.node_ids.len() == graph.nodes.len()
                && s.leaf_ids.len() == graph.leafs.len()
                && s.node_ids.iter().zip(&graph.nodes).all(|(&id, t)| id == t.id())
                && s.leaf_ids.iter().zip(&graph.leafs).all(|(&id, t)| id == t.id())
        })
    }

    // --- allocation ---

    /// ggml_backend_sched_reserve: splits `graph` (the worst case: the largest batch at
    /// the end of the context) and sizes every backend's compute buffer for it. Later
    /// graphs of the same structure and no larger tensors allocate nothing.
    pub fn reserve(&mut self, graph: &Graph) -> Result<(), BackendError> {
        self.split_graph(graph)?;
        let st = self.state.as_ref().expect("just split");
        self.galloc.reserve_n(&st.alloc_graph, &st.node_buffer_ids, &st.leaf_buffer_ids)?;
        // The reserve graph is not run; the next alloc_graph splits its own graph.
        self.state = None;
        Ok(())
    }

    /// ggml_backend_sched_alloc_graph: splits `graph` and places its intermediates and
    /// copies in the compute buffers (planning again, and counting it in the allocator's
    /// `n_reserves`, only when it does not fit the reserved plan). Set the inputs after this.
    pub fn alloc_graph(&mut self, graph: &Graph) -> Result<(), BackendError> {
        self.split_graph(graph)?;
        let st = self.state.as_mut().expect("just split");
        self.galloc.alloc_graph_n(&st.alloc_graph, &st.node_buffer_ids, &st.leaf_buffer_ids)?;
        st.allocated = true;
        Ok(())
    }

    // --- compute ---

    /// ggml_backend_sched_graph_compute: runs the splits in order, each on its backend,
    /// after copying its inputs in. Allocates first when `graph` is not the graph
    /// allocated last.
    pub fn graph_compute(&mut self, graph: &Graph) -> Result<(), BackendError> {
        if !(self.is_current(graph) && self.state.as_ref().is_some_and(|s| s.allocated)) {
            self.alloc_graph(graph)?;
        }
        let st = self.state.as_ref().expect("allocated above");
        let mut stats = RunStats { splits: st.splits.len(), ..RunStats::default() };
        for (split, g) in st.splits.iter().zip(&st.split_graphs) {
            // Point each copied tensor at its copy for the split; put it back afterwards,
            // whatever the split returns.
            let mut moved: Vec<(Tensor, TensorData)> = Vec::with_capacity(split.inputs.len());
            let mut result = Ok(());
            for &k in &split.inputs {
                let c = &st.copies[k];
                match copy_bytes(&c.src, &c.copy, &mut self.scratch) {
                    Ok(n) => {
                        stats.copies += 1;
                        stats.copy_bytes += n;
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
                let (from, to) = (c.src.data().expect("copied above"), c.copy.data().expect("allocated"));
                c.src.set_data(to.buffer, to.offset);
                moved.push((c.src.clone(), from));
            }
            if result.is_ok() {
                result = self.backends[split.backend].graph_compute(g);
            }
            for (t, d) in moved.into_iter().rev() {
                t.set_data(d.buffer, d.offset);
            }
            result?;
        }
        self.last_run = stats;
        self.n_computes += 1;
        Ok(())
    }
}

/// Copies all of `src`'s bytes into `dst` (same size), reading or writing the host side
/// in place when there is one. Returns the bytes moved.
fn copy_bytes(src: &Tensor, dst: &Tensor, scratch: &mut Vec<u8>) -> Result<usize, BackendError> {
    let n = src.nbytes();
    let (s, d) = match (src.data(), dst.data()) {
        (Some(s), Some(d)) => (s, d),
        _ => {
            return Err(BackendError::Other(format!(
                "scheduler copy of '{}' into '{}': a side is not allocated",
                src.name(),
                dst.name()
            )))
        }
    };
    // In the browser device memory (WebGPU) reads back only asynchronously, and a graph run
    // cannot wait: `get_bytes` there would panic. A typed error instead.
    if cfg!(target_family = "wasm") && s.buffer.host_base().is_none() {
        return Err(BackendError::Unsupported {
            node: src.name(),
            reason: format!(
                "copying it from {} memory into '{}' needs a synchronous read of device memory, \
                 which the browser cannot do; only copies towards a device work there",
                s.buffer.buffer_type_name(),
                dst.name()
            ),
        });
    }
    if let Some(base) = s.buffer.host_base() {
        // SAFETY: the tensor lies inside its buffer (checked when placed); the two buffers
        // are distinct allocations, so the slice does not alias the destination.
        let bytes = unsafe { core::slice::from_raw_parts(base.add(s.offset), n) };
        d.buffer.set_bytes(d.offset, bytes);
    } else if let Some(base) = d.buffer.host_base() {
        // SAFETY: as above, for the destination.
        let bytes = unsafe { core::slice::from_raw_parts_mut(base.add(d.offset), n) };
        s.buffer.try_get_bytes(s.offset, bytes)?;
    } else {
        scratch.resize(n, 0);
        s.buffer.try_get_bytes(s.offset, &mut scratch[..n])?;
        d.buffer.set_bytes(d.offset, &scratch[..n]);
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
