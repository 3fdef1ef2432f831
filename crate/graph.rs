//! The compute graph (ggml_cgraph): leafs and nodes in execution order.
//!
//! ```
//! use ggweb::graph::Graph;
//! use ggweb::tensor::{Context, ContextParams};
//! use ggweb::types::GgmlType::F32;
//!
//! let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
//! let x = ctx.new_tensor_1d(F32, 8);
//! let y = ctx.gelu(&ctx.scale(&x, 2.0));
//! let mut gf = Graph::new();
//! gf.build_forward_expand(&y);
//! assert_eq!((gf.leafs.len(), gf.nodes.len()), (1, 2));   // x | scale, gelu
//! ```
//!
//! Building visits sources depth-first, left to right, so every node comes after the
//! tensors it reads. A tensor with no op is a leaf (weights, inputs); anything an op
//! produces, views included, is a node.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::tensor::{Op, Tensor};

/// ggml's GGML_DEFAULT_GRAPH_SIZE.
pub const DEFAULT_GRAPH_SIZE: usize = 2048;

pub struct Graph {
    /// Tensors produced by ops, in execution order.
    pub nodes: Vec<Tensor>,
    /// Tensors with constant data (weights, inputs).
    pub leafs: Vec<Tensor>,
    pub(crate) size: usize,
    /// Tensor id → number of nodes in the graph that read it.
    use_counts: BTreeMap<usize, u32>,
    /// Tensor id → its gradient, once a backward pass is built (`crate::backward`).
    pub(crate) grads: BTreeMap<usize, Tensor>,
}

impl Default for Graph {
    fn default() -> Graph {
        Graph::new()
    }
}

impl Graph {
    pub fn new() -> Graph {
        Graph::with_size(DEFAULT_GRAPH_SIZE)
    }

    /// ggml_new_graph_custom: at most `size` nodes and `size` leafs.
    pub fn with_size(size: usize) -> Graph {
        Graph { nodes: Vec::new(), leafs: Vec::new(), size, use_counts: BTreeMap::new(), grads: BTreeMap::new() }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn contains(&self, t: &Tensor) -> bool {
        self.use_counts.contains_key(&t.id())
    }

    /// ggml_graph_view: nodes `range` of this graph, keeping the whole graph's use counts,
    /// so a backend running only these nodes still sees readers outside them (what its
    /// fusions need to know).
    pub fn view(&self, range: core::ops::Range<usize>) -> Graph {
        Graph {
            nodes: self.nodes[range.clone()].to_vec(),
            leafs: Vec::new(),
            size: range.len().max(1),
            use_counts: self.use_counts.clone(),
            grads: BTreeMap::new(),
        }
    }

    /// How many graph nodes read `t` as a source.
    pub fn use_count(&self, t: &Tensor) -> u32 {
        self.use_counts.get(&t.id()).copied().unwrap_or(0)
    }

    /// ggml_build_forward_expand: adds `t` and everything it depends on.
    pub fn build_forward_expand(&mut self, t: &Tensor) {
        self.visit(t);
    }

    fn visit(&mut self, t: &Tensor) {
        if self.use_counts.contains_key(&t.id()) {
            return;
        }
        self.use_counts.insert(t.id(), 0);
        for s in t.src.iter().flatten() {
            self.visit(s);
            *self.use_counts.get_mut(&s.id()).expect("visited") += 1;
        }
        if t.op == Op::None && t.flags() & crate::tensor::flags::PARAM == 0 {
            assert!(self.leafs.len() < self.size, "graph: more than {} leafs", self.size);
            self.leafs.push(t.clone());
        } else {
            assert!(self.nodes.len() < self.size, "graph: more than {} nodes", self.size);
            self.nodes.push(t.clone());
        }
    }

    /// ggml_graph_get_grad: the gradient of `t` after
    /// [`build_backward_expand`](Graph::build_backward_expand), for `t` between a param and
    /// the loss (None elsewhere). Mark it an output before allocating to read it afterwards:
    /// only the params' gradients are outputs already.
    pub fn grad(&self, t: &Tensor) -> Option<Tensor> {
        self.grads.get(&t.id()).cloned()
    }

    /// ggml_graph_get_tensor: a node or leaf by name.
    pub fn get_tensor(&self, name: &str) -> Option<Tensor> {
        self.nodes.iter().chain(self.leafs.iter()).find(|t| t.name() == name).cloned()
    }
}
