//! The backward pass in test-backend-ops: the backward ops' f64 references, their cases, the
//! gradient cases (a forward graph, a loss sum(w ⊙ out) with fixed random w, the backward
//! graph of `Graph::build_backward_expand`, one param's gradient as the case's output: every
//! forward and backward node evaluated in f64 by the reference), and the central finite
//! differences of that loss ([`check_finite_differences`]) for every gradient case, on every
//! backend (WebGPU's kernels: shaders/backward.wgsl, out_prod.wgsl).

use super::*;

// ---------------------------------------------------------------- f64 references

/// The (i1, i2, i3) of every row of `t`.
fn rows(t: &Tensor) -> Vec<[i64; 4]> {
    (0..t.nrows() as usize).map(|r| idx4(r, [t.ne[1], t.ne[2], t.ne[3], 1])).collect()
}

fn row_vals(t: &Tensor, ri: [i64; 3]) -> Vec<f64> {
    (0..t.ne[0]).map(|i0| get(t, [i0, ri[0], ri[1], ri[2]])).collect()
}

/// The f64 reference of a backward op (results stored as f32).
pub fn reference_node(node: &Tensor) {
    let s0 = || node.src[0].as_ref().unwrap();
    let s1 = || node.src[1].as_ref().unwrap();
    let n = node.nelements() as usize;
    match node.op {
        Op::OutProd => {
            let (a, b) = (s0(), s1());
            let (r2, r3) = (b.ne[2] / a.ne[2], b.ne[3] / a.ne[3]);
            for i3 in 0..node.ne[3] {
                for i2 in 0..node.ne[2] {
                    let arows: Vec<Vec<f64>> =
                        (0..a.ne[1] as usize).map(|j| host_row(a, j, (i2 / r2) as usize, (i3 / r3) as usize)).collect();
                    for i1 in 0..node.ne[1] {
                        for i0 in 0..node.ne[0] {
                            let s: f64 =
                                (0..a.ne[1]).map(|j| arows[j as usize][i0 as usize] * get(b, [i1, j, i2, i3])).sum();
                            set(node, [i0, i1, i2, i3], s);
                        }
                    }
                }
            }
        }
        Op::SoftMaxBack { scale } => {
            for ri in rows(node) {
                let ri = [ri[0], ri[1], ri[2]];
                let (g, y) = (row_vals(s0(), ri), row_vals(s1(), ri));
                let dot: f64 = g.iter().zip(&y).map(|(a, b)| a * b).sum();
                for i0 in 0..g.len() {
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], scale as f64 * y[i0] * (g[i0] - dot));
                }
            }
        }
        Op::LogSoftMax => {
            for ri in rows(node) {
                let ri = [ri[0], ri[1], ri[2]];
                let x = row_vals(s0(), ri);
                let mx = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let lse = mx + x.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
                for (i0, v) in x.iter().enumerate() {
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], v - lse);
                }
            }
        }
        Op::LogSoftMaxBack => {
            for ri in rows(node) {
                let ri = [ri[0], ri[1], ri[2]];
                let (g, y) = (row_vals(s0(), ri), row_vals(s1(), ri));
                let sum: f64 = g.iter().sum();
                for i0 in 0..g.len() {
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], g[i0] - y[i0].exp() * sum);
                }
            }
        }
        Op::GeluBack => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            for k in 0..n {
                let i = idx4(k, node.ne);
                let (g, x) = (get(s0(), i), get(s1(), i));
                // d/dx of 0.5·x·(1 + tanh u), u = c(x + 0.044715x³).
                let t = (c * (x + 0.044715 * x * x * x)).tanh();
                let d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
                set(node, i, g * d);
            }
        }
        Op::NormBack { eps } => {
            for ri in rows(node) {
                let ri = [ri[0], ri[1], ri[2]];
                let (g, x) = (row_vals(s0(), ri), row_vals(s1(), ri));
                let m = x.len() as f64;
                let mean = x.iter().sum::<f64>() / m;
                let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / m;
                let sd = (var + eps as f64).sqrt();
                let y: Vec<f64> = x.iter().map(|v| (v - mean) / sd).collect();
                let mg = g.iter().sum::<f64>() / m;
                let mgy = g.iter().zip(&y).map(|(a, b)| a * b).sum::<f64>() / m;
                for i0 in 0..x.len() {
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], (g[i0] - mg - y[i0] * mgy) / sd);
                }
            }
        }
        Op::RepeatBack => {
            let a = s0();
            let mut acc = vec![0.0f64; n];
            for k in 0..a.nelements() as usize {
                let i = idx4(k, a.ne);
                let j = [i[0] % node.ne[0], i[1] % node.ne[1], i[2] % node.ne[2], i[3] % node.ne[3]];
                let flat = (((j[3] * node.ne[2] + j[2]) * node.ne[1] + j[1]) * node.ne[0] + j[0]) as usize;
                acc[flat] += get(a, i);
            }
            (0..n).for_each(|k| set(node, idx4(k, node.ne), acc[k]));
        }
        Op::GetRowsBack => {
            let (a, idx) = (s0(), s1());
            let mut acc = vec![0.0f64; n];
            for i in 0..idx.ne[0] {
                let r = idx.get_i32_nd(i, 0, 0, 0) as usize;
                for i0 in 0..a.ne[0] {
                    acc[r * node.ne[0] as usize + i0 as usize] += get(a, [i0, i, 0, 0]);
                }
            }
            (0..n).for_each(|k| set(node, idx4(k, node.ne), acc[k]));
        }
        Op::Acc { nb, offset } => {
            let (a, b) = (s0(), s1());
            let mut acc: Vec<f64> = (0..n).map(|k| get(a, idx4(k, node.ne))).collect();
            for k in 0..b.nelements() as usize {
                let i = idx4(k, b.ne);
                let byte =
                    offset + i[0] as usize * 4 + i[1] as usize * nb[0] + i[2] as usize * nb[1] + i[3] as usize * nb[2];
                acc[byte / 4] += get(b, i);
            }
            (0..n).for_each(|k| set(node, idx4(k, node.ne), acc[k]));
        }
        Op::DiagMaskZero { n_past } => {
            for k in 0..n {
                let i = idx4(k, node.ne);
                set(node, i, if i[0] > n_past as i64 + i[1] { 0.0 } else { get(s0(), i) });
            }
        }
        Op::Fill(v) => (0..n).for_each(|k| set(node, idx4(k, node.ne), v as f64)),
        op => panic!("grad::reference_node: {op:?} is not a backward op"),
    }
}

// ---------------------------------------------------------------- the backward ops' cases

/// Each backward op alone against its f64 reference.
pub fn backward_op_cases() -> Vec<Case> {
    // Row sums in f64 on both sides, one f32 rounding of each result on the CPU's side plus
    // the f32 products before the sum: a few ulps of the largest term.
    let row_tol = Tol { abs: 1e-6, rel: 1e-5 };
    let mut v = vec![
        case("soft_max_ext_back", row_tol, |i| {
            let ctx = i.ctx;
            let x = i.range(F32, &[11, 5, 3], -3.0, 3.0);
            let y = ctx.soft_max_ext(&x, None, 0.7, 0.0);
            let dy = i.t(F32, &[11, 5, 3]);
            ctx.soft_max_ext_back(&dy, &y, 0.7)
        }),
        case("soft_max_ext_back of a transposed dy", row_tol, |i| {
            let ctx = i.ctx;
            let y = ctx.soft_max(&i.t(F32, &[6, 6]));
            let dy = ctx.transpose(&i.t(F32, &[6, 6]));
            ctx.soft_max_ext_back(&dy, &y, 1.0)
        }),
        // The derivative in f64 on the CPU and the reference (exp vs tanh forms): one f32
        // rounding (cpu_tol). WebGPU evaluates it in f32 (WGSL has no f64): near its root at
        // x ≈ -0.75 terms of O(1) cancel, so its error is a few f32 ulps of 1 (plus exp's, which
        // WGSL allows 3 + 2|x| ulps) times |dy| ≤ 1, absolute: 2e-6.
        with_cpu_tol(
            case("gelu_back", Tol { abs: 2e-6, rel: 1e-5 }, |i| {
                let x = i.range(F32, &[37, 4], -6.0, 6.0);
                let dy = i.t(F32, &[37, 4]);
                i.ctx.gelu_back(&dy, &x)
            }),
            Tol { abs: 1e-7, rel: 1e-6 },
        ),
        case("norm_back 768", row_tol, |i| {
            let x = i.range(F32, &[768, 3], -2.0, 3.0);
            let dy = i.t(F32, &[768, 3]);
            i.ctx.norm_back(&dy, &x, 1e-5)
        }),
        case("norm_back of one-element rows (zero)", row_tol, |i| {
            let x = i.t(F32, &[1, 4]);
            let dy = i.t(F32, &[1, 4]);
            i.ctx.norm_back(&dy, &x, 1e-5)
        }),
        case("diag_mask_zero", EXACT, |i| {
            let a = i.t(F32, &[9, 5, 2]);
            i.ctx.diag_mask_zero(&a, 3)
        }),
        case("fill", EXACT, |i| i.ctx.fill([5, 3, 2, 1], -1.5)),
        // f64 sums over 12 and 18 terms rounded once: one rounding.
        case("repeat_back onto a row", Tol { abs: 1e-7, rel: 1e-6 }, |i| {
            let a = i.t(F32, &[8, 6, 3, 2]);
            let row = i.ctx.new_tensor(F32, &[8, 1, 3]);
            i.ctx.repeat_back(&a, &row)
        }),
        case("repeat_back onto a column", Tol { abs: 1e-7, rel: 1e-6 }, |i| {
            let a = i.t(F32, &[8, 6, 3, 2]);
            let col = i.ctx.new_tensor(F32, &[1, 6, 1, 1]);
            i.ctx.repeat_back(&a, &col)
        }),
        case("repeat_back of a permuted tensor", Tol { abs: 1e-7, rel: 1e-6 }, |i| {
            let a = i.ctx.permute(&i.t(F32, &[4, 6, 3]), 1, 0, 2, 3);
            let like = i.ctx.new_tensor(F32, &[6, 1, 3]);
            i.ctx.repeat_back(&a, &like)
        }),
        // f32 additions in index order on the CPU (at most 3 terms per element here).
        case("get_rows_back, repeated indices", Tol { abs: 1e-7, rel: 1e-6 }, |i| {
            let g = i.t(F32, &[10, 7]);
            let idx = i.ints(&[7], &[3, 0, 3, 9, 3, 5, 0]);
            let table = i.ctx.new_tensor(F32, &[10, 12]);
            i.ctx.get_rows_back(&g, &idx, &table)
        }),
        // One f32 addition per element.
        case("acc into a strided view", EXACT, |i| {
            let a = i.t(F32, &[12, 5]);
            let b = i.ctx.transpose(&i.t(F32, &[3, 4]));
            i.ctx.acc(&a, &b, [48, 192, 192], 8)
        }),
        // Rows 8 bytes apart, 16 long: an element gets up to two of b's, f32 additions in
        // order (two roundings of sums of O(1) terms; the reference's one): 3e-7. WebGPU adds
        // them in one invocation (its parallel path needs a view's elements distinct).
        case("acc into a view of overlapping rows", Tol { abs: 3e-7, rel: 1e-6 }, |i| {
            let a = i.t(F32, &[12, 5]);
            let b = i.t(F32, &[4, 3]);
            i.ctx.acc(&a, &b, [8, 192, 192], 8)
        }),
    ];
    // out_prod: the sum over j in f32 on the CPU (f64 in the reference): mul_mat's bound.
    for ty in [F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K] {
        let k = if ty.blck_size() == QK_K { 256 } else { 64 };
        v.push(case(&format!("out_prod {ty} src0, transposed src1"), mm_tol(7), move |i| {
            let a = i.range(ty, &[k, 7], -0.5, 0.5);
            let g = i.t(F32, &[7, 5]);
            i.ctx.out_prod(&a, &i.ctx.transpose(&g))
        }));
    }
    // Larger shapes: rows of several blocks (two K-quant super-blocks), 300 steps of j.
    for (ty, k) in [(F32, 300), (Q8_0, 544), (Q4_K, 512)] {
        v.push(case(&format!("out_prod {ty} K={k} J=300"), mm_tol(300), move |i| {
            let a = i.range(ty, &[k, 300], -0.5, 0.5);
            let g = i.t(F32, &[300, 5]);
            i.ctx.out_prod(&a, &i.ctx.transpose(&g))
        }));
    }
    // The panel kernels' register tiles and their edges: 21 result rows (AVX-512's 8 + 8 + 4
    // + 1, SIMD128's 4s + 1), 96 columns (whole 32- and 8-column tiles) and 100 (a masked or
    // one-at-a-time tail of 4), 40 and 70 steps of j (a partial panel of 32).
    for (ty, k, j, rows) in [(Q8_0, 96, 40, 21), (F32, 100, 70, 13), (F16, 100, 33, 9)] {
        v.push(case(&format!("out_prod {ty} K={k} J={j}, {rows} rows"), mm_tol(j), move |i| {
            let a = i.range(ty, &[k, j], -0.5, 0.5);
            let g = i.t(F32, &[j, rows]);
            i.ctx.out_prod(&a, &i.ctx.transpose(&g))
        }));
    }
    // More result rows than one run of the CPU's panel product holds (its sums: 64 rows of 3072
    // for a converted src0): rows 64..70 in a second run, src0 dequantized again.
    v.push(case("out_prod Q8_0 K=3072 J=40, 70 rows", mm_tol(40), |i| {
        let a = i.range(Q8_0, &[3072, 40], -0.5, 0.5);
        let g = i.t(F32, &[40, 70]);
        i.ctx.out_prod(&a, &i.ctx.transpose(&g))
    }));
    // WebGPU's 4 x 4 blocks of dst and their ragged edges: 37 = 9 blocks + 1 along i0 (the
    // one-weight-at-a-time loads), 6 = 4 + 2 along i1, src1 as it is (not a transposed view).
    for ty in [F32, F16] {
        v.push(case(&format!("out_prod {ty} K=37 J=20, 6 rows, plain src1"), mm_tol(20), move |i| {
            let a = i.range(ty, &[37, 20], -0.5, 0.5);
            let g = i.t(F32, &[6, 20]);
            i.ctx.out_prod(&a, &g)
        }));
    }
    let mut repacked = case("out_prod Q8_0 repacked src0", mm_tol(8), |i| {
        let a = i.repacked(Q8_0, &[64, 8]);
        let g = i.t(F32, &[8, 3]);
        i.ctx.out_prod(&a, &i.ctx.transpose(&g))
    });
    repacked.not_on.push((Kind::WebGpu, "repacking is the CPU's"));
    v.push(repacked);
    let mut repacked_wide = case("out_prod Q8_0 repacked src0 K=512 J=264", mm_tol(264), |i| {
        let a = i.repacked(Q8_0, &[512, 264]);
        let g = i.t(F32, &[264, 3]);
        i.ctx.out_prod(&a, &i.ctx.transpose(&g))
    });
    repacked_wide.not_on.push((Kind::WebGpu, "repacking is the CPU's"));
    v.push(repacked_wide);
    // Panels of whole groups read in place, then a partial panel: one group and 5 plain
    // rows (45 = 5 groups of 8 + 5, or 11 of 4 + 1), 21 result rows.
    let mut repacked_rest = case("out_prod Q8_0 repacked src0 K=96 J=45, 21 rows", mm_tol(45), |i| {
        let a = i.repacked(Q8_0, &[96, 45]);
        let g = i.t(F32, &[45, 21]);
        i.ctx.out_prod(&a, &i.ctx.transpose(&g))
    });
    repacked_rest.not_on.push((Kind::WebGpu, "repacking is the CPU's"));
    v.push(repacked_rest);
    // Rows wider than the 768 columns AVX-512's out_prod converts per call: whole slices and
    // a last one of 64 (repacked Q8_0, 1600), of one super-block (Q4_K, 1792), of 232 with a
    // partial panel (F16, 1000).
    let mut repacked_slices = case("out_prod Q8_0 repacked src0 K=1600 J=40, 13 rows", mm_tol(40), |i| {
        let a = i.repacked(Q8_0, &[1600, 40]);
        let g = i.t(F32, &[40, 13]);
        i.ctx.out_prod(&a, &i.ctx.transpose(&g))
    });
    repacked_slices.not_on.push((Kind::WebGpu, "repacking is the CPU's"));
    v.push(repacked_slices);
    for (ty, k) in [(Q4_K, 1792), (F16, 1000)] {
        v.push(case(&format!("out_prod {ty} K={k} J=24, 5 rows"), mm_tol(24), move |i| {
            let a = i.range(ty, &[k, 24], -0.5, 0.5);
            let g = i.t(F32, &[24, 5]);
            i.ctx.out_prod(&a, &i.ctx.transpose(&g))
        }));
    }
    v.push(case("out_prod f32 batched, src0 broadcast", mm_tol(9), |i| {
        let a = i.t(F32, &[16, 9, 2, 1]);
        let b = i.t(F32, &[5, 9, 4, 3]);
        i.ctx.out_prod(&a, &b)
    }));
    // A weight's gradient (activations × the output's gradient, summed over 37 tokens, b
    // not transposed): 70 result rows (a group of 64 and a ragged 6).
    v.push(case("out_prod f32 weight gradient K=48 T=37, 70 rows", mm_tol(37), |i| {
        let x = i.t(F32, &[48, 37]);
        let g = i.t(F32, &[70, 37]);
        i.ctx.out_prod(&x, &g)
    }));
    v
}

// ---------------------------------------------------------------- gradient cases

/// A forward graph and the params whose gradients it checks, with the finite differences'
/// step and tolerance.
/// A gradient case's builder: the forward output and the params.
type GradBuild = Box<dyn Fn(&mut In) -> (Tensor, Vec<Tensor>)>;

pub struct GradCase {
    pub name: String,
    build: GradBuild,
    /// The central difference's step (on the param's f32 values).
    pub eps: f32,
    /// Tolerance of the gradient against the central difference.
    pub fd_tol: Tol,
    /// Tolerance of the gradient against the f64 reference of the backward graph.
    pub tol: Tol,
    /// When non-zero, elements k with k % fixed_every == 0 are not perturbed (they hold
    /// each quantization block's largest value).
    pub fixed_every: usize,
    /// Backends the finite differences are left out on, and why (as [`Case::not_on`]).
    pub not_on: Vec<(Kind, &'static str)>,
}

fn grad_case(
    name: &str,
    eps: f32,
    fd_tol: Tol,
    tol: Tol,
    build: impl Fn(&mut In) -> (Tensor, Vec<Tensor>) + 'static,
) -> GradCase {
    GradCase { name: name.into(), build: Box::new(build), eps, fd_tol, tol, fixed_every: 0, not_on: Vec::new() }
}

/// The forward output, the loss sum(w ⊙ out) (w fixed random in [-1, 1]) and the params.
fn forward(gc: &GradCase, i: &mut In) -> (Tensor, Tensor, Vec<Tensor>) {
    let (out, params) = (gc.build)(i);
    let w = i.range(F32, &out.ne, -1.0, 1.0);
    let loss = i.ctx.mul(&out, &w);
    for p in &params {
        p.set_param();
    }
    (out, loss, params)
}

/// The forward graph with its backward pass.
fn backward_graph(ctx: &Context, roots: &[Tensor], loss: &Tensor) -> Graph {
    let mut gf = Graph::new();
    for r in roots {
        gf.build_forward_expand(r);
    }
    gf.build_forward_expand(loss);
    gf.build_backward_expand(ctx, loss);
    gf
}

// Tolerances of the gradient cases.
//
// Against the f64 reference: the backward graph is ~3 nodes per forward node in f32 on the
// backend, each evaluated in f64 (stored as f32) by the reference, so the two differ by a few
// f32 roundings per node along the chain: 1e-5 relative (plus an absolute floor for entries
// that cancel to ~0), mm_tol-like where a node sums many products.
const GRAD_TOL: Tol = Tol { abs: 2e-6, rel: 2e-5 };
// Against the central difference (f32 forward runs on the backend, the loss Σ w·out summed
// in f64 from the f32 outputs): the difference quotient's rounding error is about
// n_out · 6e-8 · |w·out| / (2·eps) (~1e-4 at eps = 1e-2 for these sizes) and its truncation
// error eps²/6 · |f'''| (~1e-5 for smooth ops of O(1) inputs): 1e-3 absolute on gradients of
// O(1), 1e-2 relative. Linear ops (add, scale, mul_mat, views, copies, get_rows) have no
// truncation error, so they take a large step (0.25), where rounding matters least.
const FD_SMOOTH: Tol = Tol { abs: 1e-3, rel: 1e-2 };
const FD_LINEAR: Tol = Tol { abs: 2e-4, rel: 1e-3 };

/// Every gradient case: each op GPT-2's graph uses, with respect to each of its inputs that
/// can carry a gradient, and one attention block as GPT-2 builds it.
pub fn grad_cases() -> Vec<GradCase> {
    let mut v = vec![
        grad_case("grad add with a broadcast row", 0.25, FD_LINEAR, GRAD_TOL, |i| {
            let (a, b) = (i.t(F32, &[8, 6, 3]), i.t(F32, &[8, 1, 3]));
            (i.ctx.add(&a, &b), vec![a, b])
        }),
        grad_case("grad mul with a broadcast row", 0.25, FD_LINEAR, GRAD_TOL, |i| {
            // Bilinear: the central difference in one variable is exact.
            let (a, b) = (i.t(F32, &[8, 6]), i.t(F32, &[8, 1]));
            (i.ctx.mul(&a, &b), vec![a, b])
        }),
        grad_case("grad scale", 0.25, FD_LINEAR, GRAD_TOL, |i| {
            let a = i.t(F32, &[9, 4]);
            (i.ctx.scale(&a, 0.37), vec![a])
        }),
        grad_case("grad layer norm (norm * w + b)", 1e-2, FD_SMOOTH, GRAD_TOL, |i| {
            let x = i.range(F32, &[33, 4], -2.0, 2.0);
            let w = i.range(F32, &[33], 0.5, 1.5);
            let b = i.t(F32, &[33]);
            (i.ctx.add(&i.ctx.mul(&i.ctx.norm(&x, 1e-5), &w), &b), vec![x, w, b])
        }),
        grad_case("grad gelu", 1e-2, FD_SMOOTH, GRAD_TOL, |i| {
            let x = i.range(F32, &[40, 2], -4.0, 4.0);
            (i.ctx.gelu(&x), vec![x])
        }),
        grad_case("grad soft_max_ext with mask and scale", 1e-2, FD_SMOOTH, GRAD_TOL, |i| {
            let x = i.range(F32, &[7, 5, 2], -2.0, 2.0);
            let mask: Vec<f32> = (0..35).map(|k| if k % 7 > k / 7 + 2 { f32::NEG_INFINITY } else { 0.0 }).collect();
            let m = i.values(F32, &[7, 5], &mask);
            (i.ctx.soft_max_ext(&x, Some(&m), 0.6, 0.0), vec![x])
        }),
        grad_case("grad log_soft_max (a gradient run's logprob and loss metrics)", 1e-2, FD_SMOOTH, GRAD_TOL, |i| {
            let x = i.range(F32, &[37, 3], -3.0, 3.0);
            // Weighted: with the seed of ones alone every row's gradient would sum to 0.
            let w = i.range(F32, &[37, 3], -1.0, 1.0);
            (i.ctx.mul(&i.ctx.log_soft_max(&x), &w), vec![x])
        }),
        grad_case("grad soft_max(diag_mask_inf(scale))", 1e-2, FD_SMOOTH, GRAD_TOL, |i| {
            let x = i.range(F32, &[6, 4, 3], -2.0, 2.0);
            let ctx = i.ctx;
            (ctx.soft_max(&ctx.diag_mask_inf(&ctx.scale(&x, 0.5), 2)), vec![x])
        }),
        grad_case("grad mul_mat f32, both sides", 0.25, FD_LINEAR, mm_grad_tol(16), |i| {
            let (a, b) = (i.t(F32, &[16, 9]), i.t(F32, &[16, 5]));
            (i.ctx.mul_mat(&a, &b), vec![a, b])
        }),
        grad_case("grad mul_mat f32 batched, a broadcast over dim 2", 0.25, FD_LINEAR, mm_grad_tol(16), |i| {
            let (a, b) = (i.t(F32, &[16, 9, 2]), i.t(F32, &[16, 5, 4]));
            (i.ctx.mul_mat(&a, &b), vec![a, b])
        }),
        // One dot product per batch (a gradient run's metric): b's gradient is a broadcast mul.
        grad_case("grad mul_mat f32 per-batch dot products", 0.25, FD_LINEAR, mm_grad_tol(40), |i| {
            let (a, b) = (i.t(F32, &[40, 1, 3]), i.t(F32, &[40, 1, 3]));
            (i.ctx.mul_mat(&a, &b), vec![a, b])
        }),
        grad_case("grad mul_mat of permuted views (attention kq)", 0.25, FD_LINEAR, mm_grad_tol(8), |i| {
            let ctx = i.ctx;
            let (k, q) = (i.t(F32, &[8, 3, 6]), i.t(F32, &[8, 3, 4]));
            (ctx.mul_mat(&ctx.permute(&k, 0, 2, 1, 3), &ctx.permute(&q, 0, 2, 1, 3)), vec![k, q])
        }),
        grad_case("grad get_rows, repeated indices", 0.25, FD_LINEAR, GRAD_TOL, |i| {
            let table = i.t(F32, &[8, 10]);
            let idx = i.ints(&[5], &[3, 7, 3, 0, 9]);
            (i.ctx.get_rows(&table, &idx), vec![table])
        }),
        grad_case("grad cont of permute, transpose, reshape", 0.25, FD_LINEAR, GRAD_TOL, |i| {
            let ctx = i.ctx;
            let a = i.t(F32, &[4, 3, 2]);
            let p = ctx.cont(&ctx.permute(&a, 2, 0, 1, 3)); // [2, 4, 3]
            let t = ctx.cont(&ctx.transpose(&ctx.reshape_2d(&p, 8, 3))); // [3, 8]
            (ctx.cont_2d(&t, 6, 4), vec![a])
        }),
        grad_case("grad views of one tensor (q, k, v of qkv)", 0.25, FD_LINEAR, GRAD_TOL, |i| {
            let ctx = i.ctx;
            let qkv = i.t(F32, &[12, 3]);
            let q = ctx.view_2d(&qkv, 4, 3, qkv.nb[1], 0);
            let k = ctx.view_2d(&qkv, 4, 3, qkv.nb[1], 16);
            let vv = ctx.view_2d(&qkv, 4, 3, qkv.nb[1], 32);
            (ctx.add(&ctx.mul(&q, &k), &ctx.scale(&vv, 2.0)), vec![qkv])
        }),
    ];
    for (ty, eps, fd) in [(F32, 0.25, FD_LINEAR), (F16, 0.25, FD_F16)] {
        let mut c =
            grad_case(&format!("grad through a {ty} cache: cpy, then views read"), eps, fd, GRAD_TOL, move |i| {
                let ctx = i.ctx;
                // K: [4, 3] rows into cells 2..5 of a 6-cell cache, the 5 cells read back.
                let x = i.t(F32, &[4, 3]);
                let c = i.t(ty, &[4 * 6]);
                let row = 4 * ty.type_size();
                i.expand(&ctx.cpy(&x, &ctx.view_1d(&c, 12, 2 * row)));
                let read = ctx.reshape_2d(&ctx.view_1d(&c, 20, 0), 4, 5);
                // V: stored transposed ([n_ctx = 6, 4]), as GPT-2's cache: cells 2..5 of each row.
                let y = i.t(F32, &[4, 3]);
                let vc = i.t(ty, &[6, 4]);
                let n_ctx = 6 * ty.type_size();
                i.expand(&ctx.cpy(&ctx.transpose(&y), &ctx.view_2d(&vc, 3, 4, n_ctx, 2 * ty.type_size())));
                let vt = ctx.view_2d(&vc, 5, 4, n_ctx, 0); // [5 cells, 4]
                let out = ctx.mul_mat(&ctx.cont(&ctx.transpose(&read)), &ctx.cont(&vt));
                (out, vec![x, y])
            });
        if ty == F16 {
            // The gradients need no product of two f16 tensors (their case passes on WebGPU);
            // the forward output does.
            c.not_on.push((Kind::WebGpu, "mul_mat of an f16 src1: WebGPU's kernels read f32 activations"));
        }
        v.push(c);
    }
    for ty in [F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K] {
        let k = if ty.blck_size() == QK_K { 256 } else { 64 };
        // The weight is a constant: the gradient of the activations only. The CPU's forward
        // rounds the activations to the weight's vec_dot_type (8 bits per block for the
        // quants), so the difference quotient sees the perturbed element's rounding: with the
        // block scale d = 2/127 held fixed, x ± eps each round by at most d/2, and the loss
        // is linear in the rounded value, so the quotient is the gradient times
        // 1 + δ/(2·eps) with |δ| ≤ d: 1.6% at eps = 0.5 (FD_ROUNDED); BF16 rounds less.
        let mut c =
            grad_case(&format!("grad mul_mat {ty} weights, activations"), 0.5, FD_ROUNDED, mm_grad_tol(k), move |i| {
                let w = i.range(ty, &[k, 6], -0.5, 0.5);
                // Values in [-1, 1] and 2 at the start of every 32 (never perturbed): each block's
                // largest value, so its scale stays put and only the perturbed element rounds anew.
                let mut vals = i.rng.vec(3 * k as usize, -1.0, 1.0);
                vals.iter_mut().step_by(32).for_each(|x| *x = 2.0);
                let x = i.values(F32, &[k, 3], &vals);
                (i.ctx.mul_mat(&w, &x), vec![x])
            });
        c.fixed_every = 32;
        v.push(c);
    }
    v.push(attention_block());
    v
}

/// The f64 reference's tolerance for a gradient whose nodes sum `k` products in f32.
fn mm_grad_tol(k: i64) -> Tol {
    Tol { abs: 4e-7 * k as f64, rel: 2e-5 }
}
/// An f16 cache rounds the copied values (11 bits): the quotient over a 0.5 step sees a
/// rounding of ≤ 2.4e-4·|x| on each side: 1e-3 relative.
const FD_F16: Tol = Tol { abs: 1e-3, rel: 3e-3 };
/// Activations rounded to 8 bits with a fixed block scale (see the mul_mat cases): 1.6%
/// relative at most, plus f32 noise.
const FD_ROUNDED: Tol = Tol { abs: 1e-4, rel: 2e-2 };

/// One attention block as `model/gpt2.rs` builds it (fused QKV, K and V copied into an f32
/// cache after 2 cached cells, K read back permuted, V stored transposed and read as a view,
/// scale, causal mask, softmax, heads merged, output projection, residual), d/d the residual
/// input and the QKV weight.
fn attention_block() -> GradCase {
    grad_case("grad attention block (gpt2.rs's, 2 cached cells)", 1e-2, FD_SMOOTH, GRAD_TOL, |i| {
        let ctx = i.ctx;
        let (n_embd, n_head, n, past, n_ctx) = (16i64, 2i64, 3i64, 2usize, 8usize);
        let hd = n_embd / n_head;
        let l = past as i64 + n;
        let x = i.t(F32, &[n_embd, n]);
        let wqkv = i.range(F32, &[n_embd, 3 * n_embd], -0.4, 0.4);
        let bqkv = i.range(F32, &[3 * n_embd], -0.1, 0.1);
        let cur = ctx.add(&ctx.mul_mat(&wqkv, &ctx.norm(&x, 1e-5)), &bqkv);
        let f = 4usize;
        let q_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 0);
        let k_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], n_embd as usize * f);
        let v_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 2 * n_embd as usize * f);
        let kc = i.t(F32, &[n_embd * n_ctx as i64]);
        let vc = i.t(F32, &[n_ctx as i64, n_embd]);
        let row = n_embd as usize * f;
        let k_dst = ctx.view_1d(&kc, n * n_embd, past * row);
        let v_dst = ctx.view_2d(&vc, n, n_embd, n_ctx * f, past * f);
        let k_heads = ctx.cont_3d(&k_cur, hd, n_head, n);
        let v_heads = ctx.cont_3d(&v_cur, hd, n_head, n);
        i.expand(&ctx.cpy(&k_heads, &k_dst));
        i.expand(&ctx.cpy(&ctx.transpose(&ctx.reshape_2d(&v_heads, n_embd, n)), &v_dst));
        let q = ctx.permute(&ctx.cont_3d(&q_cur, hd, n_head, n), 0, 2, 1, 3);
        let k = ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&kc, l * n_embd, 0), hd, n_head, l), 0, 2, 1, 3);
        let kq = ctx.mul_mat(&k, &q);
        let kq = ctx.soft_max(&ctx.diag_mask_inf(&ctx.scale(&kq, 1.0 / (hd as f32).sqrt()), past as i32));
        let v_trans = ctx.view_3d(&vc, l, hd, n_head, n_ctx * f, hd as usize * n_ctx * f, 0);
        let kqv = ctx.mul_mat(&v_trans, &kq);
        let merged = ctx.cont_2d(&ctx.permute(&kqv, 0, 2, 1, 3), n_embd, n);
        let wo = i.range(F32, &[n_embd, n_embd], -0.4, 0.4);
        let out = ctx.add(&ctx.mul_mat(&wo, &merged), &x);
        (ctx.gelu(&out), vec![x, wqkv])
    })
}

/// Each gradient case as a case of the list: one param's gradient against the f64
/// reference of the whole forward + backward graph.
pub fn grad_reference_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (gi, gc) in grad_cases().into_iter().enumerate() {
        let n_params = {
            let ctx = new_ctx();
            let mut rng = crate::support::rng::Rng::new(1);
            let mut i = In { ctx: &ctx, rng: &mut rng, inputs: Vec::new(), roots: Vec::new(), repack: Vec::new() };
            (gc.build)(&mut i).1.len()
        };
        for p in 0..n_params {
            let name = format!("{} d/dparam{p}", gc.name);
            v.push(case(&name, gc.tol, move |i| {
                let gc = &grad_cases()[gi];
                let (_, loss, params) = forward(gc, i);
                let gf = backward_graph(i.ctx, &i.roots.clone(), &loss);
                gf.grad(&params[p]).unwrap_or_else(|| panic!("{}: no gradient for param {p}", gc.name))
            }));
        }
    }
    v
}

// ---------------------------------------------------------------- finite differences

/// At most this many elements of each param are perturbed (spread evenly over it).
const FD_MAX_ELEMS: usize = 40;

/// The same on the browser's WebGPU: every evaluation there is a submit and a read-back
/// (~110 ms in Firefox), and Firefox's WebGPU (lavapipe) stopped settling promises after
/// some thousands of them in one page, late in the browser test crate; natively, on lavapipe
/// and on the CPU, the same cases perturb [`FD_MAX_ELEMS`].
const FD_MAX_ELEMS_BROWSER_GPU: usize = 10;

async fn read(t: &Tensor, read: &Read<'_>) -> Result<Vec<f64>, BackendError> {
    let mut bytes = vec![0u8; t.nbytes()];
    match read {
        #[cfg(all(target_arch = "wasm32", feature = "webgpu"))]
        Read::WebGpu(g) => g.read_tensor_async(t, 0, &mut bytes).await?,
        _ => t.try_get_bytes(&mut bytes, 0)?,
    }
    Ok(decode(t, &bytes))
}

/// One gradient case on `t`: the backward graph's gradients against central differences of
/// the loss, every param, Err naming the worst element.
async fn finite_differences(t: &Target<'_>, gc: &GradCase) -> Result<String, String> {
    let ctx = new_ctx();
    let seed = gc.name.bytes().fold(0x5EEDu64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
    let mut rng = crate::support::rng::Rng::new(seed);
    let mut i = In { ctx: &ctx, rng: &mut rng, inputs: Vec::new(), roots: Vec::new(), repack: Vec::new() };
    let (_, loss, params) = forward(gc, &mut i);
    let (inputs, roots) = (i.inputs, i.roots);
    let full = backward_graph(&ctx, &roots, &loss);
    let mut fwd = Graph::new();
    roots.iter().for_each(|r| fwd.build_forward_expand(r));
    fwd.build_forward_expand(&loss);
    let e = |e: BackendError| e.to_string();
    let _bufs = alloc_ctx_tensors(&ctx, &*t.backend.buffer_type()).map_err(e)?;
    for (tensor, bytes) in &inputs {
        tensor.set_bytes(bytes, 0);
    }
    t.backend.graph_compute(&full).map_err(e)?;
    let mut worst = (0.0f64, String::new());
    let mut checked = 0;
    for (pi, p) in params.iter().enumerate() {
        let g = read(&full.grad(p).ok_or("no gradient")?, &t.read).await.map_err(e)?;
        let bytes = &inputs.iter().find(|(x, _)| x == p).ok_or("a param is not an input")?.1;
        let n = p.nelements() as usize;
        let max = if cfg!(target_arch = "wasm32") && t.kind == Kind::WebGpu {
            FD_MAX_ELEMS_BROWSER_GPU
        } else {
            FD_MAX_ELEMS
        };
        let step = n.div_ceil(max);
        for k in (0..n).step_by(step).map(|k| if gc.fixed_every > 0 && k % gc.fixed_every == 0 { k + 1 } else { k }) {
            let x0 = f32::from_le_bytes(bytes[4 * k..4 * k + 4].try_into().unwrap());
            // Only element k's four bytes are written: on WebGPU each write is a staging copy,
            // and the whole tensor per evaluation was thousands of them per test.
            let value = |x: f32| {
                let (fwd, loss) = (&fwd, &loss);
                async move {
                    p.set_bytes(&x.to_le_bytes(), 4 * k);
                    t.backend.graph_compute(fwd).map_err(e)?;
                    Ok::<f64, String>(read(loss, &t.read).await.map_err(e)?.iter().sum())
                }
            };
            let (xp, xm) = (x0 + gc.eps, x0 - gc.eps);
            let fd = (value(xp).await? - value(xm).await?) / (xp as f64 - xm as f64);
            p.set_bytes(&x0.to_le_bytes(), 4 * k);
            let over = (g[k] - fd).abs() - (gc.fd_tol.abs + gc.fd_tol.rel * fd.abs());
            if over > worst.0 || worst.1.is_empty() {
                worst = (over.max(worst.0), format!("param {pi} element {k}: gradient {} vs difference {fd}", g[k]));
            }
            checked += 1;
        }
    }
    if worst.0 > 0.0 {
        return Err(format!("{} (tolerance {:?}, step {})", worst.1, gc.fd_tol, gc.eps));
    }
    Ok(format!("{checked} elements"))
}

/// Every gradient case whose name contains `filter`: its gradients against central finite
/// differences on `t`.
pub async fn check_finite_differences(t: &Target<'_>, filter: &str, log: &dyn Fn(&str)) -> Report {
    let cases: Vec<GradCase> = grad_cases().into_iter().filter(|c| c.name.contains(filter)).collect();
    finite_difference_cases(t, &cases, log).await
}

/// Part `part` of `parts` of the gradient cases (every `parts`-th from the `part`-th) against
/// central finite differences on `t`: a browser test's share where read-backs are slow.
pub async fn check_finite_differences_part(t: &Target<'_>, part: usize, parts: usize, log: &dyn Fn(&str)) -> Report {
    let cases: Vec<GradCase> = grad_cases().into_iter().skip(part).step_by(parts).collect();
    finite_difference_cases(t, &cases, log).await
}

async fn finite_difference_cases(t: &Target<'_>, cases: &[GradCase], log: &dyn Fn(&str)) -> Report {
    let mut r = Report { total: cases.len(), ..Report::default() };
    for gc in cases {
        if let Some((_, why)) = gc.not_on.iter().find(|(k, _)| *k == t.kind) {
            r.not_supported.push((format!("{} (finite differences)", gc.name), why));
            continue;
        }
        let what = format!("{} {} (finite differences)", t.label, gc.name);
        match finite_differences(t, gc).await {
            Ok(n) => {
                log(&format!("ok {what}: {n}"));
                r.passed += 1;
            }
            Err(err) => {
                log(&format!("FAIL {what}: {err}"));
                r.failed.push(format!("{what}: {err}"));
            }
        }
    }
    r
}
