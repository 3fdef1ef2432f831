//! Chains of nodes that run as one dispatch (ggml-vulkan's, ggml-cuda's and ggml-metal's
//! fusions, written for ours): the cheap elementwise steps around a kernel that reads its
//! rows anyway, and a GPT-2 layer's big chains (a layer norm read by the next mul_mat,
//! mul_mat with its bias, GELU or residual, the QKV projection with its K/V cache writes,
//! attention for the queries over the cache).
//!
//! A chain fuses only when each intermediate is read by the chain alone in the whole graph
//! ([`Graph::use_count`]: a scheduler's split graphs carry the counts of the graph they came
//! from, so a reader in another split counts) and is not an output: nobody sees that it was
//! never written. That includes what the scheduler's eval callback asks for (taps and hook
//! reads): it flags those tensors OUTPUT, so a chain that would hide one is not fused.
//!
//! A chain's nodes need not be neighbours in the graph: the dispatch runs where the first
//! one was, so every node between its first and last is either the chain's or a view (no
//! kernel, nothing read or written in between). The graph allocator planned memory for the
//! unfused nodes, so the chain's result may sit where one of its inputs was (freed after
//! the first node): it fuses only when the two share no byte, or, for inputs read element
//! by element, are the same elements at the same place (each invocation reads an element
//! before it writes it).

use std::collections::HashMap;
use std::rc::Rc;

use crate::graph::Graph;
use crate::tensor::{Op, Tensor};
use crate::types::GgmlType;

/// A fused chain: what its one dispatch computes, and the graph nodes it stands for.
pub(crate) struct Fused<'g> {
    pub kind: Kind<'g>,
    /// Indices of the chain's nodes in the graph.
    pub nodes: Vec<usize>,
}

/// Where one of the QKV projection's three row blocks goes: element (row r, column j) at
/// unit `r * rs + j * cs` of `dst` (f32).
pub(crate) struct Part<'g> {
    pub dst: &'g Tensor,
    pub rs: usize,
    pub cs: usize,
}

pub(crate) enum Kind<'g> {
    /// `norm` → `mul` by a row → `add` of a row (layer norm's affine part): the last
    /// node's result, computed in the norm kernel.
    NormAffine { norm: &'g Tensor, w: &'g Tensor, b: &'g Tensor, out: &'g Tensor },
    /// `scale` → `diag_mask_inf` → `soft_max` (no mask, no ALiBi): attention's
    /// probabilities, computed in the softmax kernel.
    SoftMaxCausal { x: &'g Tensor, scale: f32, n_past: i32, out: &'g Tensor },
    /// `add` → `gelu` (the MLP's bias and activation).
    AddGelu { add: &'g Tensor, out: &'g Tensor },
    /// [`norm` → `mul` → `add` (a layer norm of `x`, eps and rows `ln`) →] `mul_mat(w, x)`
    /// [→ `add` of a bias row [→ `gelu` | → `add` of a residual of the result's shape]]: the
    /// mat-vec kernels with the norm in their prologue and the rest in their epilogue.
    MatMul {
        w: &'g Tensor,
        x: &'g Tensor,
        ln: Option<(f32, &'g Tensor, &'g Tensor)>,
        bias: Option<&'g Tensor>,
        gelu: bool,
        res: Option<&'g Tensor>,
        out: &'g Tensor,
    },
    /// [a layer norm of `x` →] `mul_mat(w, x)` → `add` of a bias row → three views of its row blocks (Q, K, V),
    /// each `cont` (and for K and V, where nothing else reads them, the `cpy` into the cache,
    /// through a reshape and transpose for the transposed V cache): the epilogue stores each
    /// block where its last node would have.
    Qkv {
        w: &'g Tensor,
        x: &'g Tensor,
        ln: Option<(f32, &'g Tensor, &'g Tensor)>,
        bias: &'g Tensor,
        n: usize,
        parts: [Part<'g>; 3],
    },
    /// `mul_mat(k, q)` → `soft_max_ext(·, mask, scale)` → `mul_mat(v, ·)` → `permute(0, 2, 1, 3)`
    /// → `cont`: attention for each (head, query) over the cache in one workgroup, with an
    /// online softmax.
    Attention { q: &'g Tensor, k: &'g Tensor, v: &'g Tensor, mask: Option<&'g Tensor>, scale: f32, out: &'g Tensor },
}

/// Where each node of a graph is, and which nodes read each tensor.
pub(crate) struct Index {
    users: HashMap<usize, Vec<usize>>,
}

impl Index {
    pub fn new(graph: &Graph) -> Index {
        let mut users: HashMap<usize, Vec<usize>> = HashMap::new();
        for (j, n) in graph.nodes.iter().enumerate() {
            for s in n.src.iter().flatten() {
                users.entry(s.id()).or_default().push(j);
            }
        }
        Index { users }
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

/// The one node that reads `t`, when `t` is a hidden-able intermediate: read once in the
/// whole graph, by a node of this one, and not an output.
fn sole_user<'g>(graph: &'g Graph, ix: &Index, t: &Tensor) -> Option<(usize, &'g Tensor)> {
    if t.is_output() || graph.use_count(t) != 1 {
        return None;
    }
    let &[j] = ix.users.get(&t.id())?.as_slice() else { return None };
    Some((j, &graph.nodes[j]))
}

/// A 1-row f32 operand broadcast over every row of a `ne0`-wide tensor.
fn is_row(t: Option<&Tensor>, ne0: i64) -> bool {
    t.is_some_and(|t| t.ty == GgmlType::F32 && t.ne[0] == ne0 && t.ne[1] * t.ne[2] * t.ne[3] == 1)
}

/// The byte range of `t` in its buffer.
fn span(t: &Tensor) -> Option<(*const (), usize, usize)> {
    let d = t.data()?;
    Some((Rc::as_ptr(&d.buffer) as *const (), d.offset, d.offset + t.nbytes()))
}

/// Whether `a` and `b` share no byte (unallocated: no).
fn disjoint(a: &Tensor, b: &Tensor) -> bool {
    let (Some(x), Some(y)) = (span(a), span(b)) else { return false };
    !core::ptr::eq(x.0, y.0) || x.2 <= y.1 || y.2 <= x.1
}

/// Whether a dispatch may write `out` while it reads `input` element by element (see the
/// module docs).
fn may_overwrite(out: &Tensor, input: &Tensor) -> bool {
    let (Some(o), Some(i)) = (out.data(), input.data()) else { return false };
    disjoint(out, input) || (o.offset == i.offset && out.ne == input.ne && out.nb == input.nb)
}

/// Whether every node between the chain's first and last is the chain's or a view.
fn only_views_between(graph: &Graph, nodes: &[usize]) -> bool {
    let (lo, hi) = (*nodes.iter().min().expect("a chain"), *nodes.iter().max().expect("a chain"));
    (lo..=hi).all(|j| nodes.contains(&j) || graph.nodes[j].op == Op::None || graph.nodes[j].op.is_view())
}

/// The mul_mat kernels' limits a chain must meet: `mm_ok(mm)` says the mat-vec kernels run
/// `mm` in one dispatch.
pub(crate) struct Caps<'a> {
    pub mm_ok: &'a dyn Fn(&Tensor) -> bool,
}

/// Elements of src1 the layer-norm prologue stages in workgroup memory (shaders/ln_input.wgsl).
pub(crate) const LN_MAX: i64 = 3328;

/// The chain that starts at node `i`, if any.
pub(crate) fn at<'g>(caps: &Caps, graph: &'g Graph, ix: &Index, i: usize) -> Option<Fused<'g>> {
    let a = graph.nodes.get(i)?;
    let f = match a.op {
        Op::Norm { .. } => match layer_norm(graph, ix, i) {
            Some(ln) => qkv(caps, graph, ix, ln.mm, Some(&ln))
                .or_else(|| mat_mul(caps, graph, ix, ln.mm, Some(&ln)))
                .or_else(|| norm_affine(graph, i)),
            None => norm_affine(graph, i),
        },
        Op::MulMat => qkv(caps, graph, ix, i, None)
            .or_else(|| mat_mul(caps, graph, ix, i, None))
            .or_else(|| attention(graph, ix, i)),
        Op::Scale(_) => soft_max_causal(graph, i),
        Op::Add => add_gelu(graph, i),
        _ => None,
    }?;
    only_views_between(graph, &f.nodes).then_some(f)
}

fn norm_affine(graph: &Graph, i: usize) -> Option<Fused<'_>> {
    let n = &graph.nodes;
    let (a, b, c) = (n.get(i)?, n.get(i + 1)?, n.get(i + 2)?);
    let Op::Norm { .. } = a.op else { return None };
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
    (fits && may_overwrite(c, x)).then(|| Fused {
        kind: Kind::NormAffine {
            norm: a,
            w: b.src[1].as_ref().expect("checked"),
            b: c.src[1].as_ref().expect("checked"),
            out: c,
        },
        nodes: vec![i, i + 1, i + 2],
    })
}

fn soft_max_causal(graph: &Graph, i: usize) -> Option<Fused<'_>> {
    let n = &graph.nodes;
    let (a, b, c) = (n.get(i)?, n.get(i + 1)?, n.get(i + 2)?);
    let (Op::Scale(scale), Op::DiagMaskInf { n_past }, Op::SoftMax { scale: s2, max_bias }) = (a.op, b.op, c.op) else {
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
    (fits && may_overwrite(c, x))
        .then(|| Fused { kind: Kind::SoftMaxCausal { x, scale, n_past, out: c }, nodes: vec![i, i + 1, i + 2] })
}

fn add_gelu(graph: &Graph, i: usize) -> Option<Fused<'_>> {
    let n = &graph.nodes;
    let (a, b) = (n.get(i)?, n.get(i + 1)?);
    let fits = a.op == Op::Add && b.op == Op::Gelu && feeds_only(graph, a, b) && a.ne == b.ne;
    let inputs_ok = a.src.iter().flatten().all(|s| may_overwrite(b, s));
    (fits && inputs_ok).then(|| Fused { kind: Kind::AddGelu { add: a, out: b }, nodes: vec![i, i + 1] })
}

/// The other operand of a binary node `add` one of whose operands is `t`.
fn other<'g>(add: &'g Tensor, t: &Tensor) -> Option<&'g Tensor> {
    match (add.src[0].as_ref(), add.src[1].as_ref()) {
        (Some(a), Some(b)) if a == t && b != t => Some(b),
        (Some(a), Some(b)) if b == t && a != t => Some(a),
        _ => None,
    }
}

/// A layer norm read by a mul_mat alone: `norm(x)` → `mul` by a row → `add` of a row →
/// `mul_mat(w, ·)` (as its src1), which a mul_mat chain may read through its prologue.
pub(crate) struct LayerNorm<'g> {
    eps: f32,
    x: &'g Tensor,
    g: &'g Tensor,
    b: &'g Tensor,
    /// The norm, mul and add nodes.
    nodes: [usize; 3],
    /// The mul_mat node.
    mm: usize,
}

fn layer_norm<'g>(graph: &'g Graph, ix: &Index, i: usize) -> Option<LayerNorm<'g>> {
    let norm = &graph.nodes[i];
    let Op::Norm { eps } = norm.op else { return None };
    let (jm, mul) = sole_user(graph, ix, norm)?;
    let (ja, add) = sole_user(graph, ix, mul)?;
    let (jmm, mm) = sole_user(graph, ix, add)?;
    let ne0 = norm.ne[0];
    let fits = mul.op == Op::Mul
        && add.op == Op::Add
        && mm.op == Op::MulMat
        && norm.ty == GgmlType::F32
        && mul.src[0].as_ref() == Some(norm)
        && add.src[0].as_ref() == Some(mul)
        && mm.src[1].as_ref() == Some(add)
        && mm.src[0].as_ref() != Some(add)
        && is_row(mul.src[1].as_ref(), ne0)
        && is_row(add.src[1].as_ref(), ne0)
        && mul.ne == norm.ne
        && add.ne == norm.ne;
    let x = norm.src[0].as_ref()?;
    // The prologue reads src1 as contiguous columns of ne0, at most LN_MAX at a time.
    let staged = x.ne[0] * x.ne[1].min(4);
    let ok = fits && x.is_contiguous() && x.ty == GgmlType::F32 && x.ne[2] * x.ne[3] == 1 && staged <= LN_MAX;
    ok.then(|| LayerNorm {
        eps,
        x,
        g: mul.src[1].as_ref().expect("checked"),
        b: add.src[1].as_ref().expect("checked"),
        nodes: [i, jm, ja],
        mm: jmm,
    })
}

/// The mul_mat chain at mul_mat node `j`, reading `ln`'s layer norm when given.
fn mat_mul<'g>(caps: &Caps, graph: &'g Graph, ix: &Index, j: usize, ln: Option<&LayerNorm<'g>>) -> Option<Fused<'g>> {
    let mut nodes = ln.map_or(Vec::new(), |l| l.nodes.to_vec());
    let mm = &graph.nodes[j];
    if mm.op != Op::MulMat || !(caps.mm_ok)(mm) {
        return None;
    }
    let (w, x_mm) = (mm.src[0].as_ref()?, mm.src[1].as_ref()?);
    nodes.push(j);
    let mut out = mm;
    let (mut bias, mut gelu, mut res) = (None, false, None);
    if let Some((ja, add)) = sole_user(graph, ix, mm) {
        let b = other(add, mm);
        if add.op == Op::Add && add.ne == mm.ne && is_row(b, mm.ne[0]) {
            bias = b;
            nodes.push(ja);
            out = add;
            match sole_user(graph, ix, add) {
                Some((jg, g)) if g.op == Op::Gelu && g.ne == add.ne && g.src[0].as_ref() == Some(add) => {
                    gelu = true;
                    nodes.push(jg);
                    out = g;
                }
                Some((jr, r)) if r.op == Op::Add => {
                    if let Some(rv) =
                        other(r, add).filter(|t| t.ty == GgmlType::F32 && t.ne == add.ne && r.ne == add.ne)
                    {
                        res = Some(rv);
                        nodes.push(jr);
                        out = r;
                    }
                }
                _ => {}
            }
        }
    }
    if ln.is_none() && bias.is_none() {
        return None; // a plain mul_mat
    }
    let x = ln.map_or(x_mm, |l| l.x);
    let reads_ok =
        [Some(w), Some(x), bias, ln.map(|l| l.g), ln.map(|l| l.b)].into_iter().flatten().all(|t| disjoint(out, t))
            && res.is_none_or(|r| may_overwrite(out, r))
            && out.ty == GgmlType::F32;
    reads_ok
        .then(|| Fused { kind: Kind::MatMul { w, x, ln: ln.map(|l| (l.eps, l.g, l.b)), bias, gelu, res, out }, nodes })
}

/// The QKV chain at mul_mat node `i` (see [`Kind::Qkv`]), reading `ln`'s layer norm when
/// given.
fn qkv<'g>(caps: &Caps, graph: &'g Graph, ix: &Index, i: usize, ln: Option<&LayerNorm<'g>>) -> Option<Fused<'g>> {
    let mm = &graph.nodes[i];
    if !(caps.mm_ok)(mm) {
        return None;
    }
    let w = mm.src[0].as_ref()?;
    let x = ln.map_or(mm.src[1].as_ref(), |l| Some(l.x))?;
    let (ja, add) = sole_user(graph, ix, mm)?;
    let bias = other(add, mm)?;
    let rows = mm.ne[0];
    if add.op != Op::Add || add.ne != mm.ne || !is_row(Some(bias), rows) || rows % 3 != 0 || add.is_output() {
        return None;
    }
    let (n, cols) = (rows / 3, mm.ne[1]);
    let users = ix.users.get(&add.id())?;
    if graph.use_count(add) != 3 || users.len() != 3 {
        return None;
    }
    let mut nodes = ln.map_or(Vec::new(), |l| l.nodes.to_vec());
    nodes.extend([i, ja]);
    let mut parts: [Option<Part>; 3] = [None, None, None];
    for &jv in users {
        let v = &graph.nodes[jv];
        let part = v.view_offs / (n as usize * 4);
        let fits = v.op == Op::View
            && v.view_src.as_ref() == Some(add)
            && v.ne == [n, cols, 1, 1]
            && v.nb[0] == 4
            && v.nb[1] == add.nb[1]
            && v.view_offs.is_multiple_of(n as usize * 4)
            && part < 3
            && parts[part].is_none();
        if !fits {
            return None;
        }
        let (jc, c) = sole_user(graph, ix, v)?;
        if c.op != Op::Cont || c.ty != GgmlType::F32 || !c.is_contiguous() || c.nelements() != n * cols {
            return None;
        }
        nodes.extend([jv, jc]);
        // Stored where the cache copy would put it, when nothing else reads the cont.
        let direct = sole_user(graph, ix, c).filter(|(_, y)| {
            let d = y.src[1].as_ref();
            y.op == Op::Cpy
                && y.ty == GgmlType::F32
                && y.src[0].as_ref() == Some(c)
                && d.is_some_and(|d| d.ty == GgmlType::F32)
                && y.is_contiguous()
                && y.nelements() == n * cols
        });
        // V^T: cpy(transpose(reshape_2d(c, n, cols)), dst of [cols, n]).
        let transposed = || {
            let (jr, r) = sole_user(graph, ix, c)?;
            let (jt, t) = sole_user(graph, ix, r)?;
            let (jy, y) = sole_user(graph, ix, t)?;
            let fits = r.op == Op::Reshape
                && r.ne == [n, cols, 1, 1]
                && t.op == Op::Transpose
                && t.src[0].as_ref() == Some(r)
                && y.op == Op::Cpy
                && y.ty == GgmlType::F32
                && y.src[0].as_ref() == Some(t)
                && y.src[1].as_ref().is_some_and(|d| d.ty == GgmlType::F32)
                && y.ne == [cols, n, 1, 1]
                && y.nb[0] % 4 == 0
                && y.nb[1] % 4 == 0;
            fits.then(|| (vec![jr, jt, jy], Part { dst: y, rs: y.nb[1] / 4, cs: y.nb[0] / 4 }))
        };
        let p = if let Some((jy, y)) = direct {
            nodes.push(jy);
            Part { dst: y, rs: 1, cs: n as usize }
        } else if let Some((js, p)) = transposed() {
            nodes.extend(js);
            p
        } else {
            Part { dst: c, rs: 1, cs: n as usize }
        };
        parts[part] = Some(p);
    }
    let [Some(q), Some(k), Some(v)] = parts else { return None };
    let dsts = [q.dst, k.dst, v.dst];
    let reads = [Some(w), Some(x), Some(bias), ln.map(|l| l.g), ln.map(|l| l.b)];
    let ok = dsts.iter().all(|d| reads.iter().flatten().all(|t| disjoint(d, t)))
        && disjoint(dsts[0], dsts[1])
        && disjoint(dsts[0], dsts[2])
        && disjoint(dsts[1], dsts[2]);
    let ln = ln.map(|l| (l.eps, l.g, l.b));
    ok.then_some(Fused { kind: Kind::Qkv { w, x, ln, bias, n: n as usize, parts: [q, k, v] }, nodes })
}

/// The attention chain at mul_mat node `i` (see [`Kind::Attention`]).
fn attention<'g>(graph: &'g Graph, ix: &Index, i: usize) -> Option<Fused<'g>> {
    let kq = &graph.nodes[i];
    let (k, q) = (kq.src[0].as_ref()?, kq.src[1].as_ref()?);
    let (js, sm) = sole_user(graph, ix, kq)?;
    let Op::SoftMax { scale, max_bias } = sm.op else { return None };
    let (jv, kqv) = sole_user(graph, ix, sm)?;
    let (jp, perm) = sole_user(graph, ix, kqv)?;
    let (jc, out) = sole_user(graph, ix, perm)?;
    let v = kqv.src[0].as_ref()?;
    let mask = sm.src[1].as_ref();
    let [hd, nq, nh, one] = q.ne;
    let l = k.ne[1];
    let kv_ty = |t: &Tensor| matches!(t.ty, GgmlType::F32 | GgmlType::F16);
    let fits = max_bias == 0.0
        && sm.src[0].as_ref() == Some(kq)
        && kqv.op == Op::MulMat
        && kqv.src[1].as_ref() == Some(sm)
        && perm.op == Op::Permute([0, 2, 1, 3])
        && out.op == Op::Cont
        && out.ty == GgmlType::F32
        && out.is_contiguous()
        && out.nelements() == kqv.nelements()
        && q.ty == GgmlType::F32
        && kv_ty(k)
        && kv_ty(v)
        && one == 1
        && k.ne == [hd, l, nh, 1]
        && v.ne == [l, hd, nh, 1]
        && kq.ne == [l, nq, nh, 1]
        && kqv.ne == [hd, nq, nh, 1]
        && (1..=256).contains(&hd)
        && mask.is_none_or(|m| {
            matches!(m.ty, GgmlType::F32 | GgmlType::F16) && m.ne[0] == l && m.ne[1] >= nq && m.ne[2] * m.ne[3] == 1
        });
    // The queries may sit where the result goes, element for element (the allocator frees
    // them after kq): each workgroup reads only its own (head, query)'s and writes after
    // its last barrier, when every read is done.
    let in_place = || {
        let (Some(o), Some(d)) = (out.data(), q.data()) else { return false };
        let unit = out.nb[0];
        o.offset == d.offset && q.nb[0] == unit && q.nb[1] == unit * (hd * nh) as usize && q.nb[2] == unit * hd as usize
    };
    let reads_ok =
        [Some(k), Some(v), mask].into_iter().flatten().all(|t| disjoint(out, t)) && (disjoint(out, q) || in_place());
    (fits && reads_ok)
        .then(|| Fused { kind: Kind::Attention { q, k, v, mask, scale, out }, nodes: vec![i, js, jv, jp, jc] })
}
