//! Chains of nodes that run as one dispatch: the cheap elementwise steps around a kernel
//! that reads its rows anyway (ggml-vulkan's and ggml-metal's fusions, written for ours).
//!
//! A chain fuses only when each intermediate is read by the next node alone in the whole
//! graph ([`Graph::use_count`]: a scheduler's split graphs carry the counts of the graph
//! they came from, so a reader in another split counts) and is not an output: nobody sees
//! that it was never written. The graph allocator planned memory for the unfused nodes,
//! so the chain's result may sit where one of its inputs was (freed after the first node):
//! it fuses only when the two share no byte, or are the same elements at the same place
//! (each invocation reads an element before it writes it).

use std::rc::Rc;

use crate::graph::Graph;
use crate::tensor::{Op, Tensor};
use crate::types::GgmlType;

/// A fused chain starting at some node.
pub(crate) enum Fused<'g> {
    /// `norm` → `mul` by a row → `add` of a row (layer norm's affine part): the last
    /// node's result, computed in the norm kernel.
    NormAffine { norm: &'g Tensor, w: &'g Tensor, b: &'g Tensor, out: &'g Tensor },
    /// `scale` → `diag_mask_inf` → `soft_max` (no mask, no ALiBi): attention's
    /// probabilities, computed in the softmax kernel.
    SoftMaxCausal { x: &'g Tensor, scale: f32, n_past: i32, out: &'g Tensor },
    /// `add` → `gelu` (the MLP's bias and activation).
    AddGelu { add: &'g Tensor, out: &'g Tensor },
}

impl Fused<'_> {
    /// How many graph nodes the chain stands for.
    pub fn n_nodes(&self) -> usize {
        match self {
            Fused::NormAffine { .. } | Fused::SoftMaxCausal { .. } => 3,
            Fused::AddGelu { .. } => 2,
        }
    }
}

/// Whether `t` is an f32 intermediate only `next` reads (as its src0).
fn feeds_only(graph: &Graph, t: &Tensor, next: &Tensor) -> bool {
    t.ty == GgmlType::F32
        && !t.is_output()
        && graph.use_count(t) == 1
        && next.src[0].as_ref() == Some(t)
        && next.src[1..].iter().all(|s| s.as_ref() != Some(t))
}

/// A 1-row f32 operand broadcast over every row of a `ne0`-wide tensor.
fn is_row(t: Option<&Tensor>, ne0: i64) -> bool {
    t.is_some_and(|t| t.ty == GgmlType::F32 && t.ne[0] == ne0 && t.ne[1] * t.ne[2] * t.ne[3] == 1)
}

/// Whether a dispatch may write `out` while it reads `input` (see the module docs).
fn may_overwrite(out: &Tensor, input: &Tensor) -> bool {
    let (Some(o), Some(i)) = (out.data(), input.data()) else { return false };
    if !core::ptr::addr_eq(Rc::as_ptr(&o.buffer), Rc::as_ptr(&i.buffer)) {
        return true;
    }
    let disjoint = o.offset + out.nbytes() <= i.offset || i.offset + input.nbytes() <= o.offset;
    disjoint || (o.offset == i.offset && out.ne == input.ne && out.nb == input.nb)
}

/// The chain that starts at node `i`, if any.
pub(crate) fn at(graph: &Graph, i: usize) -> Option<Fused<'_>> {
    let n = &graph.nodes;
    let (a, b) = (n.get(i)?, n.get(i + 1)?);
    match a.op {
        Op::Norm { .. } => {
            let c = n.get(i + 2)?;
            let ne0 = a.ne[0];
            let fits = b.op == Op::Mul
                && c.op == Op::Add
                && feeds_only(graph, a, b)
                && feeds_only(graph, b, c)
                && is_row(b.src[1].as_ref(), ne0)
                && is_row(c.src[1].as_ref(), ne0)
                && b.ne == a.ne
                && c.ne == a.ne;
            let x = a.src[0].as_ref()?;
            (fits && may_overwrite(c, x)).then(|| Fused::NormAffine {
                norm: a,
                w: b.src[1].as_ref().expect("checked"),
                b: c.src[1].as_ref().expect("checked"),
                out: c,
            })
        }
        Op::Scale(scale) => {
            let c = n.get(i + 2)?;
            let (Op::DiagMaskInf { n_past }, Op::SoftMax { scale: s2, max_bias }) = (b.op, c.op) else {
                return None;
            };
            let fits = s2 == 1.0
                && max_bias == 0.0
                && c.src[1].is_none()
                && feeds_only(graph, a, b)
                && feeds_only(graph, b, c)
                && a.ne == b.ne
                && b.ne == c.ne;
            let x = a.src[0].as_ref()?;
            (fits && may_overwrite(c, x)).then_some(Fused::SoftMaxCausal { x, scale, n_past, out: c })
        }
        Op::Add => {
            let fits = b.op == Op::Gelu && feeds_only(graph, a, b) && a.ne == b.ne;
            let inputs_ok = a.src.iter().flatten().all(|s| may_overwrite(b, s));
            (fits && inputs_ok).then_some(Fused::AddGelu { add: a, out: b })
        }
        _ => None,
    }
}
