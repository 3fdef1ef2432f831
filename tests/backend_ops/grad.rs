//! The backward ops in test-backend-ops: their f64 references and their cases, each op
//! alone against its reference. The backward ops have CPU kernels only: on WebGPU they are
//! declared left out.

use super::*;

const CPU_ONLY: &str = "backward ops have CPU kernels only (the scheduler keeps them there)";

fn cpu_only(mut c: Case) -> Case {
    c.not_on.push((Kind::WebGpu, CPU_ONLY));
    c
}

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
        // The derivative in f64 on both sides (exp vs tanh forms): one f32 rounding.
        case("gelu_back", Tol { abs: 1e-7, rel: 1e-6 }, |i| {
            let x = i.range(F32, &[37, 4], -6.0, 6.0);
            let dy = i.t(F32, &[37, 4]);
            i.ctx.gelu_back(&dy, &x)
        }),
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
    let mut repacked = case("out_prod Q8_0 repacked src0", mm_tol(8), |i| {
        let a = i.repacked(Q8_0, &[64, 8]);
        let g = i.t(F32, &[8, 3]);
        i.ctx.out_prod(&a, &i.ctx.transpose(&g))
    });
    repacked.not_on.push((Kind::WebGpu, "repacking is the CPU's"));
    v.push(repacked);
    v.push(case("out_prod f32 batched, src0 broadcast", mm_tol(9), |i| {
        let a = i.t(F32, &[16, 9, 2, 1]);
        let b = i.t(F32, &[5, 9, 4, 3]);
        i.ctx.out_prod(&a, &b)
    }));
    v.into_iter().map(cpu_only).collect()
}
