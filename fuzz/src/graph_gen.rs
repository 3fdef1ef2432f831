//! Random graphs from fuzz bytes, valid by construction (no op-building assertion can
//! fire): f32 tensors of up to 4 dims; inputs; external weights; scale, gelu, norm,
//! soft_max, diag_mask_inf; add/mul with broadcasting; mul_mat; permute, transpose,
//! reshape and row/element views; cont; cpy into external or intermediate tensors; output
//! flags; several sinks. The same bytes build the same graph in any pair of contexts, so
//! a run placed by gallocr can be compared with one where every tensor has its own memory.

use ggweb::graph::Graph;
use ggweb::tensor::{Context, Tensor};
use ggweb::types::GgmlType::F32;
use ggweb::Op;

use crate::Bytes;

/// Dimension sizes; the last is the "token count" `n`, which a second build varies to
/// get a graph of the same structure with smaller tensors (what every eval after the
/// worst-case reserve is).
fn dims(n: i64) -> [i64; 7] {
    [1, 2, 3, 4, 5, 8, n]
}
pub const N_MAX: i64 = 16;
const MAX_STEPS: usize = 64;
/// Elements of any one tensor. Only mul_mat grows sizes (every other op keeps or shrinks
/// its source's), and the reference run allocates every tensor of a build, reachable or
/// not, in one context pool: at most one new non-view tensor per step, so MAX_STEPS of
/// 256 KiB stay under the fuzz allocator's 32 MiB single-allocation cap. The seeds' sizes
/// (at most 16 x 16 x 3 x 2) are far below it.
pub const MAX_ELEMS: i64 = 1 << 16;
/// Multiply-adds of one mul_mat (result elements x ne0), so that a slow input is a bug, not
/// a big product. (Weights, in their own pool, obey MAX_ELEMS too.)
pub const MAX_MACS: i64 = 1 << 20;

pub struct BuiltGraph {
    pub gf: Graph,
    /// Tensors the caller fills before computing (inputs, in creation order).
    pub inputs: Vec<Tensor>,
    /// External tensors (allocated in the weights context), in creation order.
    pub weights: Vec<Tensor>,
    /// Whose values are defined after the run and must survive it: outputs, and graph
    /// tensors nothing reads. (Weights are compared separately.)
    pub results: Vec<Tensor>,
}

/// Deterministic values for the `k`-th filled tensor (contiguous f32: inputs and weights).
pub fn fill(t: &Tensor, k: usize) {
    let v: Vec<u8> =
        (0..t.nelements()).flat_map(|i| (((i as f32) * 0.37 + k as f32 * 1.3).sin() * 0.75).to_le_bytes()).collect();
    // Whole-tensor bytes: per-element setters cost ~1 µs each in an instrumented build.
    t.set_bytes(&v, 0);
}

/// The bits of every element, in logical order.
pub fn bits(t: &Tensor) -> Vec<u32> {
    if t.is_contiguous() {
        let mut b = vec![0u8; t.nbytes()];
        t.get_bytes(&mut b, 0);
        b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    } else {
        t.to_f32_vec().iter().map(|v| v.to_bits()).collect()
    }
}

fn root(t: &Tensor) -> Tensor {
    t.view_src.clone().unwrap_or_else(|| t.clone())
}

/// Bytes an allocating context needs to hold what `ctx` (no_alloc) declared.
pub fn pool_size(ctx: &Context) -> usize {
    let per = ggweb::tensor::TENSOR_OVERHEAD + ggweb::tensor::CONTEXT_ALIGN;
    ctx.tensors().iter().map(|t| per + if t.view_src.is_none() { t.nbytes() } else { 0 }).sum::<usize>() + per
}

/// Builds a graph: op tensors in `ctx`, weights in `w_ctx` (which must allocate, except in
/// a dry run that only measures), with the variable dimension `n` (1..=N_MAX). The same
/// bytes and `n` give the same graph; another `n` gives the same structure unless a
/// choice depends on a size (then a different, equally valid graph).
pub fn build(b: &mut Bytes, ctx: &Context, w_ctx: &Context, n: i64) -> BuiltGraph {
    let dims = dims(n);
    let mut pool: Vec<Tensor> = Vec::new();
    let mut inputs = Vec::new();
    let mut weights: Vec<Tensor> = Vec::new();
    let shape = |b: &mut Bytes| -> [i64; 4] {
        [dims[b.below(7)], dims[b.below(7)], 1 + b.below(3) as i64, 1 + b.below(2) as i64]
    };
    let new_weight = |weights: &mut Vec<Tensor>, ne: [i64; 4]| -> Tensor {
        let w = w_ctx.new_tensor(F32, &ne);
        // (A dry run in a no_alloc context only measures: see `pool_size`.)
        if w.data().is_some() {
            fill(&w, 1000 + weights.len());
        }
        weights.push(w.clone());
        w
    };
    let first = ctx.new_tensor(F32, &shape(b));
    first.set_input();
    inputs.push(first.clone());
    pool.push(first);

    let steps = 1 + b.below(MAX_STEPS);
    for _ in 0..steps {
        if b.exhausted() {
            break;
        }
        // Mostly recent tensors, so chains (and in-place candidates) form.
        let k = if b.below(4) == 0 { b.below(pool.len()) } else { pool.len() - 1 - b.below(pool.len().min(4)) };
        let p = pool[k].clone();
        let t = match b.below(16) {
            0 => {
                let t = ctx.new_tensor(F32, &shape(b));
                t.set_input();
                inputs.push(t.clone());
                t
            }
            1 => ctx.scale(&p, [0.5, -2.0, 1.0, 0.0][b.below(4)]),
            2 => ctx.gelu(&p),
            3 => ctx.norm(&p, 1e-5),
            4 => ctx.soft_max(&p),
            5 => ctx.diag_mask_inf(&p, b.below(3) as i32),
            6 | 7 => {
                // b broadcasts onto p: an existing tensor that repeats onto it, p itself,
                // or a weight with some dims reduced to 1.
                let q = match b.below(3) {
                    0 => pool.iter().rev().find(|q| q.can_repeat(&p) && b.below(2) == 0).cloned(),
                    1 => Some(p.clone()),
                    _ => None,
                };
                let q = q.unwrap_or_else(|| {
                    let mask = b.u8();
                    let ne = core::array::from_fn(|i| if mask >> i & 1 == 1 { 1 } else { p.ne[i] });
                    new_weight(&mut weights, ne)
                });
                if b.bool() {
                    ctx.add(&p, &q)
                } else {
                    ctx.mul(&p, &q)
                }
            }
            8 => {
                let a = pool
                    .iter()
                    .rev()
                    .find(|a| {
                        a.ne[0] == p.ne[0]
                            && !a.is_transposed()
                            && p.ne[2] % a.ne[2] == 0
                            && p.ne[3] % a.ne[3] == 0
                            && b.below(3) == 0
                    })
                    .cloned();
                // Else a new weight, of ne [p.ne[0], rows].
                let a = a.ok_or_else(|| dims[b.below(7)]);
                let rows = a.as_ref().map_or_else(|&rows| rows, |a| a.ne[1]);
                // The one op whose result can outgrow its sources: with ne0 = 1 it is an
                // outer product, and a few in a row multiply sizes (a 512 MiB tensor in one
                // fuzzed input). Past the caps, the default op instead.
                let elems = rows * p.ne[1] * p.ne[2] * p.ne[3];
                if elems > MAX_ELEMS || p.ne[0] * rows > MAX_ELEMS || elems * p.ne[0] > MAX_MACS {
                    ctx.cont(&p)
                } else {
                    let a = a.unwrap_or_else(|rows| new_weight(&mut weights, [p.ne[0], rows, 1, 1]));
                    ctx.mul_mat(&a, &p)
                }
            }
            9 => {
                const PERMS: [[usize; 4]; 6] =
                    [[1, 0, 2, 3], [0, 2, 1, 3], [2, 1, 0, 3], [1, 2, 0, 3], [0, 1, 3, 2], [3, 2, 1, 0]];
                let [a0, a1, a2, a3] = PERMS[b.below(6)];
                let v = ctx.permute(&p, a0, a1, a2, a3);
                if b.bool() {
                    v
                } else {
                    pool.push(v.clone());
                    ctx.cont(&v)
                }
            }
            10 => ctx.transpose(&p),
            11 if p.is_contiguous() => match b.below(3) {
                0 => ctx.reshape_1d(&p, p.nelements()),
                1 => ctx.reshape_2d(&p, p.ne[0] * p.ne[1], p.ne[2] * p.ne[3]),
                _ => ctx.reshape_4d(&p, p.ne[1], p.ne[0], p.ne[3], p.ne[2]),
            },
            12 if p.is_contiguous() => {
                let n = p.nelements() as usize;
                if b.bool() {
                    // A run of elements.
                    let len = 1 + b.below(n);
                    let first = b.below(n - len + 1);
                    ctx.view_1d(&p, len as i64, first * 4)
                } else {
                    // Some rows of the first 2-D slice.
                    let rows = 1 + b.below(p.ne[1] as usize) as i64;
                    let first = b.below((p.ne[1] - rows + 1) as usize);
                    ctx.view_2d(&p, p.ne[0], rows, p.nb[1], first * p.nb[1])
                }
            }
            13 => {
                // Into an external tensor, or over another tensor's bytes (never p's own).
                let dst = match b.below(2) {
                    0 => pool
                        .iter()
                        .rev()
                        .find(|d| d.nelements() == p.nelements() && root(d) != root(&p) && b.below(2) == 0)
                        .cloned(),
                    _ => None,
                };
                let dst = dst.unwrap_or_else(|| new_weight(&mut weights, [p.nelements(), 1, 1, 1]));
                ctx.cpy(&p, &dst)
            }
            14 => {
                if p.op != Op::None {
                    p.set_output();
                }
                continue;
            }
            _ => ctx.cont(&p),
        };
        pool.push(t);
    }

    let mut gf = Graph::with_size(4 * MAX_STEPS + 16);
    for _ in 0..b.below(3) {
        let s = pool[pool.len() - 1 - b.below(pool.len().min(8))].clone();
        gf.build_forward_expand(&s);
    }
    gf.build_forward_expand(pool.last().expect("the first input"));

    let read = |t: &Tensor| gf.nodes.iter().any(|n| n.src.iter().flatten().any(|s| s == t));
    let results = gf.leafs.iter().chain(&gf.nodes).filter(|t| t.is_output() || !read(t)).cloned().collect();
    BuiltGraph { gf, inputs, weights, results }
}
