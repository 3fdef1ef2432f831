//! ggml's test-backend-ops for ggweb: ONE list of cases (every op and fused chain GPT-2's
//! graph uses, every weight type, odd shapes, views and permuted inputs), each checked
//! against an f64 reference computed here from the dequantized inputs, with a tolerance
//! and why. The same module runs natively (tests/backend_ops/main.rs: the CPU on each ISA,
//! WebGPU on Vulkan) and in the browser (tests/browser/backend_ops.rs: the CPU on wasm
//! SIMD128, scalar and relaxed SIMD, WebGPU in Chromium and Firefox): [`check_all`] is the
//! one test body.
//!
//! The reference: every node evaluated in f64 on host copies of the inputs, its result
//! stored as the node's type (f32 or f16, as a backend stores it). Weights are dequantized
//! by the scalar kernel table (`Isa::Scalar`, bit-exact against PyPI gguf in
//! tests/kernels/quants.rs), whatever ISA is under test. A backend that rounds mul_mat's
//! activations to the weight's `vec_dot_type` first (the CPU: Q8_0, Q8_1, Q8_K, BF16) is
//! compared with a reference that rounds them the same way ([`Target::rounds_activations`]),
//! so its tolerances stay those of f32 arithmetic instead of ggml's loose 5e-4 NMSE.
#![allow(dead_code)]

use ggweb::allocator::alloc_ctx_tensors;
use ggweb::backend::{Backend, BackendError};
use ggweb::cpu::arch::Isa;
use ggweb::cpu::CpuBufferType;
use ggweb::types::QK_K;
use ggweb::{Context, ContextParams, GgmlType, Graph, Op, Tensor};
use half::f16;

use GgmlType::{BF16, F16, F32, I32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};

use crate::support::rng::Rng;

#[path = "grad.rs"]
pub mod grad;

/// Every weight type the loader accepts and the kernels run (get_rows and mul_mat).
pub const WEIGHT_TYPES: [GgmlType; 13] = [F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K];

// ---------------------------------------------------------------- inputs

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_bits().to_le_bytes()
}

/// Random valid bytes for `n` elements of `ty`: values in [lo, hi] for float types,
/// random blocks for quantized ones with their f16 scales set where ggml puts them (so
/// weights stay within about ±10).
pub fn random_bytes(rng: &mut Rng, ty: GgmlType, n: usize, lo: f32, hi: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(ty.row_size(n as i64));
    match ty {
        F32 => (0..n).for_each(|_| out.extend_from_slice(&rng.uniform(lo, hi).to_le_bytes())),
        F16 => (0..n).for_each(|_| out.extend_from_slice(&f16_bytes(rng.uniform(lo, hi)))),
        BF16 => (0..n).for_each(|_| out.extend_from_slice(&(rng.uniform(lo, hi).to_bits() >> 16).to_le_bytes()[..2])),
        _ => {
            // (offset of d, offset of m/dmin, range of d)
            let (d_at, m_at, d) = match ty {
                Q8_0 => (0, None, (0.005, 0.02)),
                Q4_0 => (0, None, (0.05, 0.15)),
                Q4_1 => (0, Some(2), (0.05, 0.15)),
                Q5_0 => (0, None, (0.03, 0.08)),
                Q5_1 => (0, Some(2), (0.03, 0.08)),
                Q2_K => (80, Some(82), (0.02, 0.1)),
                Q3_K => (108, None, (0.005, 0.02)),
                Q4_K | Q5_K => (0, Some(2), (0.002, 0.01)),
                Q6_K => (208, None, (0.0005, 0.002)),
                other => panic!("no random data for {other}"),
            };
            let ts = ty.type_size();
            for _ in 0..n / ty.blck_size() {
                let mut blk: Vec<u8> = (0..ts).map(|_| rng.next_u64() as u8).collect();
                blk[d_at..d_at + 2].copy_from_slice(&f16_bytes(rng.uniform(d.0, d.1)));
                if let Some(m) = m_at {
                    // Q4_1/Q5_1's m is an offset (negative, as real blocks); the K-quants' a dmin.
                    let v = if ty.blck_size() == 32 { rng.uniform(-1.0, -0.2) } else { rng.uniform(0.001, 0.01) };
                    blk[m..m + 2].copy_from_slice(&f16_bytes(v));
                }
                out.extend_from_slice(&blk);
            }
        }
    }
    out
}

/// A case's graph: the output, and the leaf inputs with their bytes.
pub struct Built {
    pub out: Tensor,
    pub inputs: Vec<(Tensor, Vec<u8>)>,
    /// Nodes to put in the graph before `out` (copies into a cache that `out` reads).
    pub roots: Vec<Tensor>,
    /// Inputs the CPU repacks once their bytes are set (`cpu::arch::repack`).
    pub repack: Vec<Tensor>,
}

/// Helper for builders: new leaf tensors with random contents.
pub struct In<'a> {
    pub ctx: &'a Context,
    rng: &'a mut Rng,
    inputs: Vec<(Tensor, Vec<u8>)>,
    roots: Vec<Tensor>,
    repack: Vec<Tensor>,
}

impl In<'_> {
    /// A random weight of a type with a packed layout that the CPU repacks into groups after
    /// its bytes are set (Q8_0 quants of -128, which keep a weight plain, made -127).
    pub fn repacked(&mut self, ty: GgmlType, ne: &[i64]) -> Tensor {
        let t = self.ctx.new_tensor(ty, ne);
        let mut bytes = random_bytes(self.rng, ty, t.nelements() as usize, -1.0, 1.0);
        if ty == Q8_0 {
            bytes.iter_mut().enumerate().filter(|(i, b)| i % 34 >= 2 && **b == 0x80).for_each(|(_, b)| *b = 0x81);
        }
        self.repack.push(t.clone());
        self.leaf(t, bytes)
    }
    pub fn t(&mut self, ty: GgmlType, ne: &[i64]) -> Tensor {
        self.range(ty, ne, -1.0, 1.0)
    }
    pub fn range(&mut self, ty: GgmlType, ne: &[i64], lo: f32, hi: f32) -> Tensor {
        let t = self.ctx.new_tensor(ty, ne);
        let bytes = random_bytes(self.rng, ty, t.nelements() as usize, lo, hi);
        self.leaf(t, bytes)
    }
    fn leaf(&mut self, t: Tensor, bytes: Vec<u8>) -> Tensor {
        t.set_name(&format!("in{}", self.inputs.len()));
        self.inputs.push((t.clone(), bytes));
        t
    }
    /// I32 indices in [0, max).
    pub fn idx(&mut self, ne: &[i64], max: i32) -> Tensor {
        let t = self.ctx.new_tensor(I32, ne);
        let bytes =
            (0..t.nelements()).flat_map(|_| ((self.rng.next_u64() % max as u64) as i32).to_le_bytes()).collect();
        self.leaf(t, bytes)
    }
    /// I32 leaf with given values.
    pub fn ints(&mut self, ne: &[i64], v: &[i32]) -> Tensor {
        let t = self.ctx.new_tensor(I32, ne);
        self.leaf(t, v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }
    /// A leaf with given values (masks, edge values).
    pub fn values(&mut self, ty: GgmlType, ne: &[i64], v: &[f32]) -> Tensor {
        let t = self.ctx.new_tensor(ty, ne);
        assert_eq!(v.len() as i64, t.nelements());
        let bytes = match ty {
            F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            F16 => v.iter().flat_map(|&x| f16_bytes(x)).collect(),
            _ => panic!("values: {ty}"),
        };
        self.leaf(t, bytes)
    }
    /// Puts `t` in the graph ahead of the output.
    pub fn expand(&mut self, t: &Tensor) {
        self.roots.push(t.clone());
    }
}

/// Tolerance for |got - want| <= abs + rel * |want|. Infinities must match exactly.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub abs: f64,
    pub rel: f64,
}
pub const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

pub struct Case {
    pub name: String,
    build: Box<dyn Fn(&mut In) -> Tensor>,
    pub tol: Tol,
    /// Also required: NMSE against the reference at most this (ggml's measure; 0 = only
    /// the element-wise tolerance).
    pub max_nmse: f64,
    /// Backends this case is left out on, and why (no kernel for it, or a documented
    /// difference): counted and printed. Any other unsupported node fails.
    pub not_on: Vec<(Kind, &'static str)>,
    /// A tighter tolerance on the CPU, where it guarantees more (f64 sums, one rounding).
    pub cpu_tol: Option<Tol>,
    /// (tolerance, max NMSE) instead, on a backend that rounds activations, for chains
    /// where one rounding step taken differently propagates (see [`gpt2_layer`]).
    pub rounded: Option<(Tol, f64)>,
}

fn with_cpu_tol(mut c: Case, tol: Tol) -> Case {
    c.cpu_tol = Some(tol);
    c
}

pub fn case(name: &str, tol: Tol, build: impl Fn(&mut In) -> Tensor + 'static) -> Case {
    Case {
        name: name.into(),
        build: Box::new(build),
        tol,
        max_nmse: 0.0,
        not_on: Vec::new(),
        cpu_tol: None,
        rounded: None,
    }
}

pub fn new_ctx() -> Context {
    Context::new(ContextParams { mem_size: 4 << 20, no_alloc: true })
}

/// Builds `case` in `ctx`: the same inputs every time (the RNG is seeded by the name).
pub fn build(case: &Case, ctx: &Context) -> Built {
    let seed = case.name.bytes().fold(0x5EEDu64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
    let mut rng = Rng::new(seed);
    let mut inp = In { ctx, rng: &mut rng, inputs: Vec::new(), roots: Vec::new(), repack: Vec::new() };
    let out = (case.build)(&mut inp);
    Built { out, inputs: inp.inputs, roots: inp.roots, repack: inp.repack }
}

pub fn graph(b: &Built) -> Graph {
    let mut gf = Graph::new();
    for r in &b.roots {
        gf.build_forward_expand(r);
    }
    gf.build_forward_expand(&b.out);
    gf
}

/// Values of `t` in logical order (i0 fastest), read from `bytes` (its span).
pub fn decode(t: &Tensor, bytes: &[u8]) -> Vec<f64> {
    let mut out = Vec::with_capacity(t.nelements() as usize);
    for i3 in 0..t.ne[3] as usize {
        for i2 in 0..t.ne[2] as usize {
            for i1 in 0..t.ne[1] as usize {
                for i0 in 0..t.ne[0] as usize {
                    let o = i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
                    out.push(match t.ty {
                        F32 => f32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as f64,
                        F16 => f16::from_bits(u16::from_le_bytes([bytes[o], bytes[o + 1]])).to_f64(),
                        ty => panic!("decode {ty}"),
                    });
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------- the f64 reference

/// One row of `ty` to f32 by the scalar table's to_float.
fn to_float(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    let f = Isa::Scalar.traits(ty).and_then(|t| t.to_float).unwrap_or_else(|| panic!("no to_float for {ty}"));
    f(&bytes[..ty.row_size(out.len() as i64)], out);
}

/// `x` rounded to `ty` and back (the scalar from_float / to_float): what a backend that
/// quantizes activations multiplies with. For Q8_1 also, per block, the error of its
/// stored sum `s` (f16 of Σq·d with d in f32, not the f16 d the values use), which the
/// Q4_1/Q5_1 products multiply by the weights' offset m.
fn round_trip(ty: GgmlType, x: &[f32]) -> (Vec<f32>, Vec<f64>) {
    let from = Isa::Scalar.traits(ty).and_then(|t| t.from_float).unwrap_or_else(|| panic!("no from_float for {ty}"));
    let mut q = vec![0u8; ty.row_size(x.len() as i64)];
    from(x, &mut q);
    let mut y = vec![0f32; x.len()];
    to_float(ty, &q, &mut y);
    let s_err = if ty == GgmlType::Q8_1 {
        q.chunks(ty.type_size())
            .zip(y.chunks(32))
            .map(|(blk, ys)| {
                let s = f16::from_bits(u16::from_le_bytes([blk[2], blk[3]])).to_f64();
                s - ys.iter().map(|&v| v as f64).sum::<f64>()
            })
            .collect()
    } else {
        Vec::new()
    };
    (y, s_err)
}

/// The offsets m (f16 at byte 2 of each block) of a Q4_1/Q5_1 row.
fn block_offsets(t: &Tensor, i1: usize, i2: usize, i3: usize) -> Vec<f64> {
    assert!(matches!(t.ty, Q4_1 | Q5_1), "{}", t.ty);
    let o = i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
    let p = t.host_ptr().expect("host tensor");
    // SAFETY: a row of an allocated host tensor.
    let bytes = unsafe { std::slice::from_raw_parts(p.add(o), t.row_size()) };
    bytes.chunks(t.ty.type_size()).map(|b| f16::from_bits(u16::from_le_bytes([b[2], b[3]])).to_f64()).collect()
}

/// Row (i1, i2, i3) of a host tensor, dequantized.
fn host_row(t: &Tensor, i1: usize, i2: usize, i3: usize) -> Vec<f64> {
    if t.nb[0] != t.ty.type_size() {
        // Strided rows (a float type's permuted view): element by element.
        return (0..t.ne[0]).map(|i0| get(t, [i0, i1 as i64, i2 as i64, i3 as i64])).collect();
    }
    let o = i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
    let p = t.host_ptr().expect("host tensor");
    // SAFETY: a row of an allocated host tensor.
    let bytes = unsafe { std::slice::from_raw_parts(p.add(o), t.row_size()) };
    let mut y = vec![0f32; t.ne[0] as usize];
    to_float(t.ty, bytes, &mut y);
    y.into_iter().map(f64::from).collect()
}

fn idx4(i: usize, ne: [i64; 4]) -> [i64; 4] {
    let (n0, n1, n2) = (ne[0] as usize, ne[1] as usize, ne[2] as usize);
    [(i % n0) as i64, (i / n0 % n1) as i64, (i / n0 / n1 % n2) as i64, (i / n0 / n1 / n2) as i64]
}

fn get(t: &Tensor, i: [i64; 4]) -> f64 {
    t.get_f32_nd(i[0], i[1], i[2], i[3]) as f64
}
fn set(t: &Tensor, i: [i64; 4], v: f64) {
    t.set_f32_nd(i[0], i[1], i[2], i[3], v as f32)
}

/// Evaluates one node on host tensors in f64 (results stored as the node's type).
/// `round_act`: mul_mat rounds its activations to the weight's vec_dot_type first.
fn reference_node(node: &Tensor, round_act: bool) {
    let s0 = || node.src[0].as_ref().unwrap();
    let s1 = || node.src[1].as_ref().unwrap();
    let n = node.nelements() as usize;
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => {}
        Op::Add | Op::Mul => {
            let b = s1();
            for k in 0..n {
                let i = idx4(k, node.ne);
                let j = [i[0] % b.ne[0], i[1] % b.ne[1], i[2] % b.ne[2], i[3] % b.ne[3]];
                let (x, y) = (get(s0(), i), get(b, j));
                set(node, i, if node.op == Op::Add { x + y } else { x * y });
            }
        }
        Op::Scale(s) => (0..n).for_each(|k| set(node, idx4(k, node.ne), get(s0(), idx4(k, node.ne)) * s as f64)),
        Op::Gelu => {
            for k in 0..n {
                let x = get(s0(), idx4(k, node.ne));
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                // 0.5·x·(1 + tanh u) as x·sigmoid(2u): 1 + tanh u cancels to 0 in f64 for
                // u < -19, where gelu is still ~1e-17 (x = -10 gives -8e-23).
                set(node, idx4(k, node.ne), x / (1.0 + (-2.0 * u).exp()));
            }
        }
        Op::DiagMaskInf { n_past } => {
            for k in 0..n {
                let i = idx4(k, node.ne);
                let v = if i[0] > n_past as i64 + i[1] { f64::NEG_INFINITY } else { get(s0(), i) };
                set(node, i, v);
            }
        }
        Op::Norm { eps } => {
            let a = s0();
            for r in 0..a.nrows() as usize {
                let ri = idx4(r, [a.ne[1], a.ne[2], a.ne[3], 1]);
                let xs: Vec<f64> = (0..a.ne[0]).map(|i0| get(a, [i0, ri[0], ri[1], ri[2]])).collect();
                let mean = xs.iter().sum::<f64>() / xs.len() as f64;
                let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / xs.len() as f64;
                for (i0, x) in xs.iter().enumerate() {
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], (x - mean) / (var + eps as f64).sqrt());
                }
            }
        }
        Op::SoftMax { scale, max_bias } => {
            let a = s0();
            let mask = node.src[1].as_ref();
            let n_head = a.ne[2] as u32;
            let n_head_log2 = 1u32 << (31 - n_head.leading_zeros());
            let m0 = 2f64.powf(-(max_bias as f64) / n_head_log2 as f64);
            let m1 = 2f64.powf(-(max_bias as f64) / 2.0 / n_head_log2 as f64);
            for r in 0..a.nrows() as usize {
                let ri = idx4(r, [a.ne[1], a.ne[2], a.ne[3], 1]);
                let h = ri[1] as u32;
                let slope = match () {
                    _ if max_bias <= 0.0 => 1.0,
                    _ if h < n_head_log2 => m0.powi(h as i32 + 1),
                    _ => m1.powi(2 * (h - n_head_log2) as i32 + 1),
                };
                let v: Vec<f64> = (0..a.ne[0])
                    .map(|i0| {
                        let m = mask.map_or(0.0, |m| get(m, [i0, ri[0], ri[1] % m.ne[2], ri[2] % m.ne[3]]));
                        get(a, [i0, ri[0], ri[1], ri[2]]) * scale as f64 + slope * m
                    })
                    .collect();
                let mx = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = v.iter().map(|x| (x - mx).exp()).sum();
                for (i0, x) in v.iter().enumerate() {
                    // A row masked out entirely gives zeros (ggml's CPU and ours).
                    let p = if mx == f64::NEG_INFINITY { 0.0 } else { (x - mx).exp() / sum };
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], p);
                }
            }
        }
        Op::Cont | Op::Cpy => {
            let vals = s0().to_f32_vec();
            for (k, v) in vals.iter().enumerate() {
                set(node, idx4(k, node.ne), *v as f64);
            }
        }
        Op::GetRows => {
            let (a, b) = (s0(), s1());
            for r in 0..(b.ne[0] * b.ne[1] * b.ne[2]) as usize {
                let ri = idx4(r, [b.ne[0], b.ne[1], b.ne[2], 1]);
                let row = b.get_i32_nd(ri[0], ri[1], ri[2], 0) as usize;
                let vals = host_row(a, row, (ri[1] % a.ne[2]) as usize, (ri[2] % a.ne[3]) as usize);
                for (i0, v) in vals.iter().enumerate() {
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], *v);
                }
            }
        }
        Op::OutProd
        | Op::LogSoftMax
        | Op::LogSoftMaxBack
        | Op::SoftMaxBack { .. }
        | Op::GeluBack
        | Op::NormBack { .. }
        | Op::RepeatBack
        | Op::GetRowsBack
        | Op::Acc { .. }
        | Op::DiagMaskZero { .. }
        | Op::Fill(_) => grad::reference_node(node),
        Op::OptStepAdamw | Op::OptStepSgd => panic!("reference: optimizer steps are tested by tests/model/train.rs"),
        Op::MulMat => {
            let (a, b) = (s0(), s1());
            let vdt = a.ty.vec_dot_type();
            let rounds = round_act && !matches!(a.ty, F32 | F16);
            for i13 in 0..b.ne[3] {
                for i12 in 0..b.ne[2] {
                    let (i02, i03) = (i12 / (b.ne[2] / a.ne[2]), i13 / (b.ne[3] / a.ne[3]));
                    // Each column of b as the backend multiplies it, and for Q8_1 the error of
                    // each block's stored sum.
                    let (cols, s_err): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (0..b.ne[1])
                        .map(|nn| {
                            let x: Vec<f32> = (0..a.ne[0]).map(|k| get(b, [k, nn, i12, i13]) as f32).collect();
                            if !rounds {
                                return (x.into_iter().map(f64::from).collect(), Vec::new());
                            }
                            let (x, e) = round_trip(vdt, &x);
                            (x.into_iter().map(f64::from).collect(), e)
                        })
                        .unzip();
                    let s_err: Vec<Vec<f64>> = if rounds && vdt == GgmlType::Q8_1 { s_err } else { Vec::new() };
                    for m in 0..a.ne[1] {
                        let w = host_row(a, m as usize, i02 as usize, i03 as usize);
                        let offsets = if s_err.is_empty() {
                            Vec::new()
                        } else {
                            block_offsets(a, m as usize, i02 as usize, i03 as usize)
                        };
                        for (nn, x) in cols.iter().enumerate() {
                            let mut s: f64 = w.iter().zip(x).map(|(w, x)| w * x).sum();
                            if !s_err.is_empty() {
                                s += offsets.iter().zip(&s_err[nn]).map(|(m, e)| m * e).sum::<f64>();
                            }
                            set(node, [m, nn as i64, i12, i13], s);
                        }
                    }
                }
            }
        }
    }
}

/// The case's output by the f64 reference.
pub fn reference(case: &Case, round_act: bool) -> Vec<f64> {
    let ctx = new_ctx();
    let b = build(case, &ctx);
    let gf = graph(&b);
    let _bufs = alloc_ctx_tensors(&ctx, &CpuBufferType).unwrap();
    for (t, bytes) in &b.inputs {
        t.set_bytes(bytes, 0);
    }
    for n in &gf.nodes {
        reference_node(n, round_act);
    }
    let mut bytes = vec![0u8; b.out.nbytes()];
    b.out.get_bytes(&mut bytes, 0);
    decode(&b.out, &bytes)
}

// ---------------------------------------------------------------- comparison

/// Checks `got` against `want`; Err names the worst element.
pub fn compare(got: &[f64], want: &[f64], tol: Tol, max_nmse: f64) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!("{} values, reference has {}", got.len(), want.len()));
    }
    let (mut worst, mut at) = (0.0f64, None);
    let (mut num, mut den) = (0.0, 0.0);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_infinite() || g.is_infinite() {
            if g != w {
                return Err(format!("element {i} = {g}, reference {w}"));
            }
            continue;
        }
        if !g.is_finite() {
            return Err(format!("element {i} = {g}, reference {w}"));
        }
        num += (g - w) * (g - w);
        den += w * w;
        let over = (g - w).abs() - (tol.abs + tol.rel * w.abs());
        if over > worst {
            (worst, at) = (over, Some(i));
        }
    }
    let nmse = num / den.max(f64::MIN_POSITIVE);
    if let Some(i) = at {
        return Err(format!("element {i} = {} vs reference {} (tolerance {tol:?}; NMSE {nmse:.2e})", got[i], want[i]));
    }
    if max_nmse > 0.0 && nmse > max_nmse {
        return Err(format!("NMSE {nmse:e} > {max_nmse:e}"));
    }
    Ok(nmse)
}

// ---------------------------------------------------------------- the one test body

/// How results come back to the host.
pub enum Read<'a> {
    /// `Tensor::get_bytes` (host memory; native WebGPU blocks on its read).
    Blocking,
    /// The browser cannot block: WebGPU's async read.
    #[cfg(all(target_arch = "wasm32", feature = "webgpu"))]
    WebGpu(&'a ggweb::webgpu::WebGpuBackend),
    /// Keeps `'a` used in builds without the WebGpu variant; never constructed.
    #[doc(hidden)]
    _Lifetime(std::marker::PhantomData<&'a ()>),
}

/// Which backend a [`Target`] is (for [`Case::not_on`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Cpu,
    WebGpu,
}

/// A backend under test.
pub struct Target<'a> {
    pub label: String,
    pub backend: &'a dyn Backend,
    pub read: Read<'a>,
    /// mul_mat rounds activations to the weights' vec_dot_type (the CPU for quantized
    /// and BF16 weights): the reference does too.
    pub rounds_activations: bool,
    pub kind: Kind,
}

/// What [`check_all`] did.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases in the list.
    pub total: usize,
    pub passed: usize,
    /// (case, reason) left out on purpose.
    pub not_supported: Vec<(String, &'static str)>,
    pub failed: Vec<String>,
}

async fn run_case(t: &Target<'_>, case: &Case) -> Result<Vec<f64>, BackendError> {
    let ctx = new_ctx();
    let b = build(case, &ctx);
    let gf = graph(&b);
    if let Some(n) = gf.nodes.iter().find(|n| !t.backend.supports_op(n)) {
        return Err(BackendError::Unsupported { node: n.name(), reason: format!("supports_op is false for {n:?}") });
    }
    let _bufs = alloc_ctx_tensors(&ctx, &*t.backend.buffer_type())?;
    for (tensor, bytes) in &b.inputs {
        tensor.set_bytes(bytes, 0);
    }
    // Forced: where the ISA has no packed kernel (scalar, x86 today) the products unpack.
    for w in &b.repack {
        assert!(ggweb::cpu::repack_buffer::place_repacked(w, true)?, "{}: {} was not repacked", case.name, w.name());
    }
    t.backend.graph_compute(&gf)?;
    let mut bytes = vec![0u8; b.out.nbytes()];
    match &t.read {
        #[cfg(all(target_arch = "wasm32", feature = "webgpu"))]
        Read::WebGpu(g) => g.read_tensor_async(&b.out, 0, &mut bytes).await?,
        _ => b.out.try_get_bytes(&mut bytes, 0)?,
    }
    Ok(decode(&b.out, &bytes))
}

/// Runs every case of [`cases`] whose name contains `filter` on `t` against the
/// reference, and the gradient cases' finite differences; returns the report (the caller
/// asserts on it). Logs one line per case.
pub async fn check_all(t: &Target<'_>, filter: &str, log: &dyn Fn(&str)) -> Report {
    let mut r = check_forward(t, filter, log).await;
    let f = check_fused(t, filter, log).await;
    r.total += f.total;
    r.passed += f.passed;
    r.not_supported.extend(f.not_supported);
    r.failed.extend(f.failed);
    let g = check_gradients(t, filter, log).await;
    r.total += g.total;
    r.passed += g.passed;
    r.not_supported.extend(g.not_supported);
    r.failed.extend(g.failed);
    r
}

/// [`check_all`]'s first part: the cases of [`forward_cases`].
pub async fn check_forward(t: &Target<'_>, filter: &str, log: &dyn Fn(&str)) -> Report {
    let all: Vec<Case> = forward_cases().into_iter().filter(|c| c.name.contains(filter)).collect();
    check_cases(t, &all, log).await
}

/// The cases of [`fused_cases`] whose name contains `filter`.
pub async fn check_fused(t: &Target<'_>, filter: &str, log: &dyn Fn(&str)) -> Report {
    let all: Vec<Case> = fused_cases().into_iter().filter(|c| c.name.contains(filter)).collect();
    check_cases(t, &all, log).await
}

/// [`check_all`]'s second part: the cases of [`grad_cases`] ([`check_grad_cases`]), then the
/// gradient cases once more, against central finite differences of their loss
/// ([`grad::check_finite_differences`]).
pub async fn check_gradients(t: &Target<'_>, filter: &str, log: &dyn Fn(&str)) -> Report {
    let mut r = check_grad_cases(t, filter, log).await;
    let fd = grad::check_finite_differences(t, filter, log).await;
    r.total += fd.total;
    r.passed += fd.passed;
    r.not_supported.extend(fd.not_supported);
    r.failed.extend(fd.failed);
    r
}

/// The cases of [`grad_cases`] whose name contains `filter`.
pub async fn check_grad_cases(t: &Target<'_>, filter: &str, log: &dyn Fn(&str)) -> Report {
    let all: Vec<Case> = grad_cases().into_iter().filter(|c| c.name.contains(filter)).collect();
    check_cases(t, &all, log).await
}

/// [`check_all`] on a list of one's own (backend-specific configurations).
pub async fn check_cases(t: &Target<'_>, cases: &[Case], log: &dyn Fn(&str)) -> Report {
    let mut r = Report { total: cases.len(), ..Report::default() };
    for c in cases {
        if let Some((_, why)) = c.not_on.iter().find(|(k, _)| *k == t.kind) {
            r.not_supported.push((c.name.clone(), why));
            continue;
        }
        let what = format!("{} {}", t.label, c.name);
        let got = match run_case(t, c).await {
            Ok(v) => v,
            Err(e) => {
                log(&format!("FAIL {what}: {e}"));
                r.failed.push(format!("{what}: {e}"));
                continue;
            }
        };
        let want = reference(c, t.rounds_activations);
        let (tol, max_nmse) = match (c.rounded, c.cpu_tol) {
            (Some(r), _) if t.rounds_activations => r,
            (_, Some(tol)) if t.kind == Kind::Cpu => (tol, c.max_nmse),
            _ => (c.tol, c.max_nmse),
        };
        match compare(&got, &want, tol, max_nmse) {
            Ok(nmse) => {
                log(&format!("ok {what} (NMSE {nmse:.1e})"));
                r.passed += 1;
            }
            Err(e) => {
                log(&format!("FAIL {what}: {e}"));
                r.failed.push(format!("{what}: {e}"));
            }
        }
    }
    r
}

impl Report {
    /// Panics unless every case ran and passed (the ones left out are the declared ones).
    pub fn assert_ok(&self, label: &str) {
        assert!(self.failed.is_empty(), "{label}: {} cases failed:\n  {}", self.failed.len(), self.failed.join("\n  "));
        assert!(self.passed > 0, "{label}: no case ran");
        assert_eq!(self.passed + self.not_supported.len(), self.total, "{label}: cases neither passed nor left out");
    }
}

// ---------------------------------------------------------------- the cases

/// Every case, in a fixed order: [`forward_cases`], then the backward pass's
/// ([`grad_cases`]).
pub fn cases() -> Vec<Case> {
    let mut v = forward_cases();
    v.extend(fused_cases());
    v.extend(grad_cases());
    v
}

/// The backward ops alone and the gradient cases against their f64 references.
pub fn grad_cases() -> Vec<Case> {
    let mut v = grad::backward_op_cases();
    v.extend(grad::grad_reference_cases());
    v
}

/// Every case of the forward ops, in a fixed order.
pub fn forward_cases() -> Vec<Case> {
    let mut v = Vec::new();
    v.extend(binary_cases());
    v.extend(unary_cases());
    v.extend(norm_cases());
    v.extend(softmax_cases());
    v.extend(cpy_cases());
    v.extend(get_rows_cases());
    v.extend(mul_mat_cases());
    v.extend([F32, F16, Q8_0, Q4_0, Q4_K].map(gpt2_layer));
    v
}

fn binary_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for op in ["add", "mul"] {
        let f = move |ctx: &Context, a: &Tensor, b: &Tensor| if op == "add" { ctx.add(a, b) } else { ctx.mul(a, b) };
        // One f32 rounding of the same operands on both sides (the f64 sum or product of
        // two f32 rounds to the f32 result): exact.
        for (an, bn) in [
            ([33i64, 7, 3, 1], [33i64, 7, 3, 1]),
            ([33, 5, 2, 2], [33, 1, 1, 1]),
            ([8, 6, 3, 2], [8, 1, 3, 1]),
            ([8, 6, 3, 2], [1, 6, 3, 1]),
            ([8, 6, 3, 2], [1, 1, 1, 1]),
            ([8, 6, 3, 2], [4, 1, 3, 1]),
        ] {
            v.push(case(&format!("{op} {an:?} + broadcast {bn:?}"), EXACT, move |i| {
                let a = i.t(F32, &an);
                let b = i.t(F32, &bn);
                f(i.ctx, &a, &b)
            }));
        }
        v.push(case(&format!("{op} permuted src0, viewed src1"), EXACT, move |i| {
            let a = i.t(F32, &[7, 16, 3]);
            let ap = i.ctx.permute(&a, 1, 0, 2, 3); // [16, 7, 3], nb0 = 28
            let b = i.t(F32, &[20, 7, 3]);
            let bv = i.ctx.view_3d(&b, 16, 7, 3, b.nb[1], b.nb[2], 8); // rows with gaps
            f(i.ctx, &ap, &bv)
        }));
        v.push(case(&format!("{op} of two overlapping views of one tensor"), EXACT, move |i| {
            let a = i.t(F32, &[40, 6]);
            let v1 = i.ctx.view_2d(&a, 32, 6, a.nb[1], 0);
            let v2 = i.ctx.view_2d(&a, 32, 6, a.nb[1], 4 * 8);
            f(i.ctx, &v1, &v2)
        }));
    }
    v
}

fn unary_cases() -> Vec<Case> {
    // f32 exp/tanh (the WGSL's and the CPU's, a few ulp) vs f64 tanh: 1e-6 absolute
    // around 0, 2e-6 relative for large |x|.
    let gelu_tol = Tol { abs: 1e-6, rel: 2e-6 };
    // The CPU evaluates GELU in f64 and rounds once: 1e-6 relative everywhere, down to
    // f32's smallest subnormal (1.4e-45) where results underflow.
    let gelu_cpu = Tol { abs: 1e-45, rel: 1e-6 };
    vec![
        // One f32 multiply each side.
        case("scale", EXACT, |i| {
            let a = i.t(F32, &[33, 5, 2]);
            i.ctx.scale(&a, 0.125 + 1e-3)
        }),
        case("scale transposed", EXACT, |i| {
            let a = i.t(F32, &[9, 17]);
            i.ctx.scale(&i.ctx.transpose(&a), -3.5)
        }),
        // ±12 covers the saturated tails (tanh = ±1, gelu(-12) ~ 0).
        with_cpu_tol(
            case("gelu", gelu_tol, |i| {
                let a = i.range(F32, &[128, 9], -12.0, 12.0);
                i.ctx.gelu(&a)
            }),
            gelu_cpu,
        ),
        // Zeros, tiny values (gelu(x) ~ x/2) and far tails (gelu(-10) ~ -8e-23, gelu(-20)
        // underflows to 0).
        with_cpu_tol(
            case("gelu edge values", gelu_tol, |i| {
                let xs = [
                    0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 3.0, -3.0, 5.0, -5.0, -7.5, -10.0, 20.0, -20.0, 88.0, -88.0,
                ];
                let a = i.values(F32, &[16], &xs);
                i.ctx.gelu(&a)
            }),
            gelu_cpu,
        ),
        case("gelu permuted", gelu_tol, |i| {
            let a = i.range(F32, &[6, 40, 3], -4.0, 4.0);
            i.ctx.gelu(&i.ctx.permute(&a, 2, 0, 1, 3))
        }),
        // add -> gelu (WebGPU fuses it into one dispatch): the f32 sum rounded once as add
        // does, then gelu's own error.
        case("gelu of add with a broadcast row (fused add+gelu)", gelu_tol, |i| {
            let a = i.range(F32, &[96, 7], -6.0, 6.0);
            let b = i.range(F32, &[96], -1.0, 1.0);
            i.ctx.gelu(&i.ctx.add(&a, &b))
        }),
    ]
}

fn norm_cases() -> Vec<Case> {
    // f32 sums over <= 768 values in another order than f64 (WebGPU sums in f32, the
    // CPU in f64): ~1e-6 relative on outputs of magnitude <= 4.
    let tol = Tol { abs: 1e-5, rel: 1e-5 };
    // The CPU sums mean and variance in f64: what is left is f32 rounding of x - mean, of
    // the variance and of 1/sqrt, a few ulp of outputs of size <= ~4.
    let cpu = Tol { abs: 2e-6, rel: 0.0 };
    let v = vec![
        case("norm 768", tol, |i| {
            let a = i.range(F32, &[768, 4], -2.0, 3.0);
            i.ctx.norm(&a, 1e-5)
        }),
        // Values near 100 with a spread of 5: a one-pass variance (E[x²] - E[x]²) loses
        // ~1e-4 relative here; the two-pass one stays within the tolerance.
        case("norm offset rows (catches a one-pass variance)", tol, |i| {
            let a = i.range(F32, &[768, 2], 98.0, 103.0);
            i.ctx.norm(&a, 1e-5)
        }),
        case("norm odd rows 3-D", tol, |i| {
            let a = i.t(F32, &[100, 3, 2]);
            i.ctx.norm(&a, 1e-5)
        }),
        case("norm of one-element rows", tol, |i| {
            let a = i.t(F32, &[1, 3]);
            i.ctx.norm(&a, 1e-5)
        }),
        case("norm of a row view", tol, |i| {
            let a = i.t(F32, &[50, 6]);
            let v = i.ctx.view_2d(&a, 40, 3, a.nb[1] * 2, 4 * 5); // every other row, from col 5
            i.ctx.norm(&v, 1e-3)
        }),
        case("norm permuted", tol, |i| {
            let a = i.t(F32, &[4, 64, 3]);
            i.ctx.norm(&i.ctx.permute(&a, 1, 0, 2, 3), 1e-5)
        }),
        // norm -> mul -> add (layer norm; WebGPU fuses it into one dispatch): two more f32
        // roundings (or one fma) on outputs of magnitude <= ~6: within the norm tolerance.
        case("norm * w + b (fused layer norm)", tol, |i| {
            let a = i.range(F32, &[768, 3], -2.0, 3.0);
            let w = i.range(F32, &[768], 0.5, 1.5);
            let b = i.range(F32, &[768], -0.2, 0.2);
            i.ctx.add(&i.ctx.mul(&i.ctx.norm(&a, 1e-5), &w), &b)
        }),
    ];
    v.into_iter().map(|c| if c.name.contains("fused") { c } else { with_cpu_tol(c, cpu) }).collect()
}

fn softmax_cases() -> Vec<Case> {
    // exp in f32 within a few ulp; sums in another order: 1e-6 absolute on values in [0,1].
    let tol = Tol { abs: 1e-6, rel: 1e-5 };
    let causal = |ne0: usize, ne1: usize, n_past: usize| -> Vec<f32> {
        (0..ne1).flat_map(|r| (0..ne0).map(move |c| if c > n_past + r { f32::NEG_INFINITY } else { 0.0 })).collect()
    };
    let mut alibi = case("soft_max_ext ALiBi 5 heads", Tol { abs: 1e-6, rel: 2e-5 }, |i| {
        let a = i.range(F32, &[10, 3, 5], -2.0, 2.0);
        let m = i.range(F32, &[10, 3, 1], -3.0, 3.0);
        i.ctx.soft_max_ext(&a, Some(&m), 0.7, 8.0)
    });
    alibi.not_on.push((Kind::Cpu, "ALiBi (max_bias > 0): GPT-2 has none, the CPU no kernel"));
    let mut all_inf = case("soft_max with a row all -inf (zeros)", tol, |i| {
        let inf = f32::NEG_INFINITY;
        let a = i.values(F32, &[3, 2], &[1.0, 2.0, 3.0, inf, inf, inf]);
        i.ctx.soft_max(&a)
    });
    // GPT-2's causal mask always keeps the diagonal, so no row is all -inf there.
    all_inf.not_on.push((Kind::WebGpu, "a row all -inf gives NaN on WebGPU (exp(-inf - -inf)), zeros on the CPU"));
    let v = vec![
        case("soft_max", tol, |i| {
            let a = i.range(F32, &[37, 5, 3], -4.0, 4.0);
            i.ctx.soft_max(&a)
        }),
        case("soft_max 300 wide (several per invocation)", tol, |i| {
            let a = i.range(F32, &[300, 2], -8.0, 8.0);
            i.ctx.soft_max(&a)
        }),
        case("soft_max permuted", tol, |i| {
            let a = i.range(F32, &[5, 11, 3], -4.0, 4.0);
            i.ctx.soft_max(&i.ctx.permute(&a, 1, 0, 2, 3))
        }),
        all_inf,
        case("soft_max_ext f32 causal mask + scale", tol, move |i| {
            let a = i.range(F32, &[12, 5, 3], -4.0, 4.0);
            let m = i.values(F32, &[12, 5], &causal(12, 5, 7));
            i.ctx.soft_max_ext(&a, Some(&m), 0.125, 0.0)
        }),
        case("soft_max_ext f16 random mask, mask rows > ne1", tol, |i| {
            let a = i.range(F32, &[16, 4, 2], -4.0, 4.0);
            let m = i.range(F16, &[16, 6], -2.0, 0.0);
            i.ctx.soft_max_ext(&a, Some(&m), 0.5, 0.0)
        }),
        case("soft_max_ext mask per head, broadcast over dim 3", tol, |i| {
            let a = i.range(F32, &[11, 4, 3, 2], -4.0, 4.0);
            let m = i.range(F32, &[11, 6, 3, 1], -1.0, 1.0);
            i.ctx.soft_max_ext(&a, Some(&m), 0.3, 0.0)
        }),
        alibi,
        // scale -> diag_mask_inf -> soft_max (attention; WebGPU fuses it).
        case("soft_max of diag_mask_inf of scale (fused attention)", tol, |i| {
            let a = i.range(F32, &[9, 4, 3], -4.0, 4.0);
            let s = i.ctx.scale(&a, 0.125);
            i.ctx.soft_max(&i.ctx.diag_mask_inf(&s, 5))
        }),
        // Compares -inf exactly, the rest is a copy.
        case("diag_mask_inf", EXACT, |i| {
            let a = i.t(F32, &[10, 6, 2]);
            i.ctx.diag_mask_inf(&a, 3)
        }),
        case("diag_mask_inf n_past 0, permuted", EXACT, |i| {
            let a = i.t(F32, &[4, 6, 3]);
            i.ctx.diag_mask_inf(&i.ctx.permute(&a, 1, 0, 2, 3), 0)
        }),
    ];
    // The CPU rounds x·scale + mask to f32 before the exp (<= 1 ulp of values <= ~5: 5e-7
    // relative on the exp), its expf is within 1 ulp and it sums in f64: 2e-6 relative,
    // 1e-9 absolute for outputs near zero.
    let cpu = Tol { abs: 1e-9, rel: 2e-6 };
    v.into_iter().map(|c| if c.name.starts_with("soft_max") { with_cpu_tol(c, cpu) } else { c }).collect()
}

fn cpy_cases() -> Vec<Case> {
    // f32 -> f16 rounds once on each side (to nearest even in both); f16 -> f32 is exact.
    let to_f16 = Tol { abs: 0.0, rel: 1.0 / 2048.0 };
    vec![
        case("cont transposed f32", EXACT, |i| {
            let a = i.t(F32, &[17, 9]);
            i.ctx.cont(&i.ctx.transpose(&a))
        }),
        case("cont permuted 4-D f32 (every axis moved)", EXACT, |i| {
            let a = i.t(F32, &[5, 3, 4, 2]);
            i.ctx.cont(&i.ctx.permute(&a, 3, 1, 0, 2))
        }),
        case("cont permuted 3-D f32 to new shape", EXACT, |i| {
            let a = i.t(F32, &[4, 5, 6]);
            let p = i.ctx.permute(&a, 1, 2, 0, 3);
            i.ctx.cont_2d(&p, 30, 4)
        }),
        case("cont permuted f16 (odd count)", EXACT, |i| {
            let a = i.t(F16, &[3, 5, 7]);
            i.ctx.cont(&i.ctx.permute(&a, 0, 2, 1, 3))
        }),
        case("cpy f32 -> f16 at an odd element offset", to_f16, |i| {
            let a = i.t(F32, &[13, 3]);
            let d = i.t(F16, &[64]);
            let dv = i.ctx.view_1d(&d, 39, 2 * 7);
            i.ctx.cpy(&a, &dv)
        }),
        case("cpy f16 -> f32 into a strided view", EXACT, |i| {
            let a = i.t(F16, &[6, 4]);
            let d = i.t(F32, &[10, 4]);
            let dv = i.ctx.view_2d(&d, 6, 4, d.nb[1], 4 * 3);
            i.ctx.cpy(&a, &dv)
        }),
        case("cpy between shapes into a transposed view", EXACT, |i| {
            let a = i.t(F32, &[8, 3]);
            let c = i.t(F32, &[4, 6]);
            let c2 = i.ctx.cpy(&a, &i.ctx.transpose(&c)); // [6, 4], nb [16, 4]
            i.expand(&c2);
            c
        }),
        case("cpy permuted f32 -> f32 (KV cache write)", EXACT, |i| {
            let a = i.t(F32, &[24, 5]);
            let cur = i.ctx.view_2d(&a, 8, 5, a.nb[1], 4 * 8); // the K part of a fused QKV row
            let cache = i.t(F32, &[8 * 12]);
            let dst = i.ctx.view_1d(&cache, 8 * 5, 4 * 8 * 3);
            i.ctx.cpy(&cur, &dst)
        }),
        // The F16 KV cache's V store (crate/model/gpt2.rs): V^T of a fused-QKV slice into
        // rows n_ctx halves apart at position n_past. Odd n_ctx and n_past put row ends and
        // starts mid-word, and with N = n_ctx - n_past rows meet inside one word.
        case("cpy transposed f32 -> f16 (F16 V cache write, odd n_ctx, odd n_past)", to_f16, |i| {
            let (n_embd, n_ctx, n_past, n) = (8i64, 13i64, 3i64, 5i64);
            let a = i.t(F32, &[3 * n_embd, n]);
            let v_cur = i.ctx.view_2d(&a, n_embd, n, a.nb[1], 2 * 4 * n_embd as usize);
            let cache = i.t(F16, &[n_embd * n_ctx]);
            let dst = i.ctx.view_2d(&cache, n, n_embd, 2 * n_ctx as usize, 2 * n_past as usize);
            i.ctx.cpy(&i.ctx.transpose(&v_cur), &dst)
        }),
        case("cpy transposed f32 -> f16 keeps the cache's other halves (rows meeting mid-word)", to_f16, |i| {
            let (n_embd, n_ctx, n_past) = (6i64, 9i64, 2i64);
            let n = n_ctx - n_past;
            let v_cur = i.t(F32, &[n_embd, n]);
            let cache = i.t(F16, &[n_embd * n_ctx]);
            let dst = i.ctx.view_2d(&cache, n, n_embd, 2 * n_ctx as usize, 2 * n_past as usize);
            let c = i.ctx.cpy(&i.ctx.transpose(&v_cur), &dst);
            i.expand(&c);
            // The whole cache: written positions and the untouched first n_past of each row.
            cache
        }),
    ]
}

fn get_rows_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for ty in WEIGHT_TYPES {
        // Two blocks and a half of a row of 32-blocks; K-quants need whole 256-blocks.
        let ne0 = if ty.blck_size() == QK_K {
            512
        } else if ty.is_quantized() {
            96
        } else {
            70
        };
        // Dequantization is one or two f32 operations per weight, done the same way on
        // both sides; 1e-6 relative allows a fused multiply-add in Q4_K's d*sc*q - dmin*m.
        let tol = Tol { abs: 1e-6, rel: 1e-6 };
        v.push(case(&format!("get_rows {ty}"), tol, move |i| {
            let a = i.t(ty, &[ne0, 41]);
            let idx = i.idx(&[11], 41);
            i.ctx.get_rows(&a, &idx)
        }));
    }
    // The CPU's repacked layout (tied embeddings: get_rows reads the output matrix).
    for ty in [Q8_0, Q4_0, Q4_K, Q6_K].into_iter().filter(|&ty| ggweb::cpu::arch::repack::layout(ty).is_some()) {
        let mut c = case(&format!("get_rows {ty} repacked"), Tol { abs: 1e-6, rel: 1e-6 }, move |i| {
            let a = i.repacked(ty, &[if ty.blck_size() == 256 { 256 } else { 96 }, 41]);
            let idx = i.idx(&[11], 41);
            i.ctx.get_rows(&a, &idx)
        });
        c.not_on.push((Kind::WebGpu, "the CPU's repacked layout"));
        v.push(c);
    }
    v.push(case("get_rows 3-D indices, batched src0", EXACT, |i| {
        let a = i.t(F32, &[32, 10, 2]);
        let idx = i.idx(&[4, 2], 10);
        i.ctx.get_rows(&a, &idx)
    }));
    let mut strided = case("get_rows from a permuted src0 (strided rows)", EXACT, |i| {
        let a = i.t(F32, &[5, 6, 3]);
        let p = i.ctx.permute(&a, 1, 0, 2, 3); // [6, 5, 3], elements 24 bytes apart
        let idx = i.idx(&[4, 3], 5);
        i.ctx.get_rows(&p, &idx)
    });
    strided.not_on.push((Kind::WebGpu, "rows of src0 must be packed (ggml's rule); the CPU also reads strided ones"));
    v.push(strided);
    // A view of part of each row, batched.
    v.push(case("get_rows from a row view, batched", EXACT, |i| {
        let a = i.t(F32, &[8, 6, 3]);
        let av = i.ctx.view_3d(&a, 6, 6, 3, a.nb[1], a.nb[2], 4 * 2);
        let idx = i.idx(&[4, 3], 6);
        i.ctx.get_rows(&av, &idx)
    }));
    v
}

/// f32 accumulation over K products of magnitude <= ~1 in another order than f64.
pub fn mm_tol(k: i64) -> Tol {
    Tol { abs: 2e-7 * k as f64, rel: 1e-5 }
}

fn mul_mat_cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Float weights: K through every SIMD tail (1, 3, 17, 70, 255), N = 1 (the per-token
    // mat-vec), odd N, and enough rows for the tiled kernels (K=42 M=70 N=130: three
    // column tiles and two row tiles of 64, all ragged, and K % 4 = 2).
    for ty in [F32, F16, BF16] {
        let shapes = [
            (1, 3, 2),
            (17, 9, 3),
            (64, 48, 1),
            (70, 33, 19),
            (255, 33, 5),
            (256, 96, 64),
            (42, 70, 130),
            (1000, 4, 1),
        ];
        for (k, m, n) in shapes {
            v.push(case(&format!("mul_mat {ty} K={k} M={m} N={n}"), mm_tol(k), move |i| {
                let a = i.t(ty, &[k, m]);
                let b = i.t(F32, &[k, n]);
                i.ctx.mul_mat(&a, &b)
            }));
        }
    }
    // Quantized weights: K a few blocks, M odd, N = 1, odd, and past several tiles of 4
    // (31: b stays under the 64 KiB bindings of the WebGPU run); the CPU's activations
    // are rounded like the reference's (Target::rounds_activations), the rest is f32
    // summation over weights up to ~10: 4x the f32 bound.
    for ty in [Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
        let k = if ty.blck_size() == QK_K { 512 } else { 96 };
        for n in [1, 3, 11, 31] {
            v.push(case(&format!("mul_mat {ty} K={k} M=37 N={n}"), mm_tol(k * 4), move |i| {
                let a = i.t(ty, &[k, 37]);
                let b = i.t(F32, &[k, n]);
                i.ctx.mul_mat(&a, &b)
            }));
        }
        // Repacked into 4-row groups (the packed decode kernel: up to 4 rows of b a call on
        // wasm, one a call below 4 on x86; the groups as panels or unpacked above): a row
        // past the last group, 8+ blocks, 4 streams. Q4_K, Q6_K: x86's 8-row groups, wasm's
        // 4-row ones.
        let shapes: &[(i64, i64, i64)] = match ty {
            Q8_0 | Q4_0 => &[
                (96, 37, 1),
                (96, 37, 2),
                (96, 37, 3),
                (96, 37, 4),
                (288, 64, 4),
                (96, 37, 31),
                (288, 64, 1),
                (288, 66, 17),
            ],
            Q4_K | Q6_K if ggweb::cpu::arch::repack::layout(ty).is_some() => &[
                (256, 37, 1),
                (512, 40, 2),
                (768, 37, 3),
                (512, 40, 4),
                (2304, 40, 4),
                (256, 37, 31),
                (768, 64, 1),
                (768, 66, 17),
            ],
            _ => &[],
        };
        {
            for &(k, m, n) in shapes {
                let mut c = case(&format!("mul_mat {ty} repacked K={k} M={m} N={n}"), mm_tol(k * 4), move |i| {
                    let a = i.repacked(ty, &[k, m]);
                    let b = i.t(F32, &[k, n]);
                    i.ctx.mul_mat(&a, &b)
                });
                c.not_on.push((Kind::WebGpu, "the CPU's repacked layout"));
                v.push(c);
            }
        }
        // A batch of 2 x 3 matrices of b against one matrix of a (broadcast).
        v.push(case(&format!("mul_mat {ty} batched b, broadcast a"), mm_tol(k * 4), move |i| {
            let a = i.t(ty, &[k, 9]);
            let b = i.t(F32, &[k, 5, 2, 3]);
            i.ctx.mul_mat(&a, &b)
        }));
    }
    // Attention: kq = k · q with both permuted views of [hd, n_head, L] data.
    for n in [1, 12] {
        v.push(case(&format!("mul_mat attention kq N={n}"), mm_tol(16), move |i| {
            let (hd, nh, l) = (16, 4, 9);
            let k = i.t(F32, &[hd, nh, l]);
            let q = i.t(F32, &[hd, nh, n]);
            let kp = i.ctx.permute(&k, 0, 2, 1, 3); // [hd, L, nh]
            let qp = i.ctx.permute(&q, 0, 2, 1, 3); // [hd, N, nh]
            i.ctx.mul_mat(&kp, &qp)
        }));
    }
    // Attention over an F16 KV cache: K as a permuted view ([hd, L, n_head]), V^T as a
    // strided view of the transposed cache ([L, hd, n_head], rows n_ctx apart).
    for n in [1, 7] {
        v.push(case(&format!("mul_mat f16 K cache view x q N={n}"), mm_tol(16), move |i| {
            let (hd, nh, l, n_ctx) = (16, 4, 9, 11);
            let kc = i.t(F16, &[hd * nh * n_ctx]);
            let k = i.ctx.permute(&i.ctx.reshape_3d(&i.ctx.view_1d(&kc, hd * nh * l, 0), hd, nh, l), 0, 2, 1, 3);
            let q = i.t(F32, &[hd, n, nh]);
            i.ctx.mul_mat(&k, &q)
        }));
        v.push(case(&format!("mul_mat f16 V^T cache view x kq N={n}"), mm_tol(9), move |i| {
            let (hd, nh, l, n_ctx) = (16i64, 4i64, 9i64, 11usize);
            let vc = i.t(F16, &[hd * nh * n_ctx as i64]);
            let v_trans = i.ctx.view_3d(&vc, l, hd, nh, 2 * n_ctx, hd as usize * 2 * n_ctx, 0);
            let kq = i.t(F32, &[l, n, nh]);
            i.ctx.mul_mat(&v_trans, &kq)
        }));
    }
    for ty in [F32, F16] {
        v.push(case(&format!("mul_mat {ty} broadcast src0 over dims 2,3"), mm_tol(33), move |i| {
            let a = i.t(ty, &[33, 8, 2, 1]);
            let b = i.t(F32, &[33, 5, 4, 3]);
            i.ctx.mul_mat(&a, &b)
        }));
    }
    v.push(case("mul_mat transposed src1 (strided k)", mm_tol(24), |i| {
        let a = i.t(F16, &[24, 10]);
        let b = i.t(F32, &[14, 24]);
        i.ctx.mul_mat(&a, &i.ctx.transpose(&b))
    }));
    v.push(case("mul_mat strided rows of a and b (row views)", mm_tol(16), |i| {
        let a = i.t(F32, &[20, 6, 3]);
        let b = i.t(F32, &[24, 4, 3]);
        let av = i.ctx.view_3d(&a, 16, 6, 3, a.nb[1], a.nb[2], 4 * 2);
        let bv = i.ctx.view_3d(&b, 16, 4, 3, b.nb[1], b.nb[2], 4 * 5);
        i.ctx.mul_mat(&av, &bv)
    }));
    let mut f16_b = case("mul_mat f16 src1", mm_tol(40), |i| {
        let a = i.t(F16, &[40, 7]);
        let b = i.t(F16, &[40, 3]);
        i.ctx.mul_mat(&a, &b)
    });
    f16_b.not_on.push((Kind::WebGpu, "src1 in F16: GPT-2's activations are f32, WebGPU's kernels read f32"));
    v.push(f16_b);
    v
}

/// mul_mat over rows as long as GPT-2's vocabulary (a training product: the loss summed over
/// the vocabulary, the head's gradients), past one part of WebGPU's per-row and tiled
/// kernels (crate/webgpu/compute.rs PART_CHUNKS: Mesa's llvmpipe stops a shader's loops after
/// 65535 iterations in all, and the per-row kernel once summed 20768 of 50257 terms with 3
/// columns). N = 1 (one column's pipeline), 3 (4 columns' pipeline, one lane idle) and 11
/// (three column groups; the tiled kernel on GPUs); F32 rows (a ragged last chunk: 50257 =
/// 1570·32 + 17) and Q8_0 ones (whole blocks), whose chunk loops differ. M = 70: two
/// workgroups of 64 rows. Not in [`cases`]: their 201 KB rows of b cannot run under the
/// 64 KiB bindings of tests/backend_ops's split-path run. Tolerance: mm_tol, as every
/// mul_mat case (f32 sums in another order than f64's, 2e-7 per term: 0.01 here, where a
/// lost part of the row is off by tens). And out_prod over as long a sum (the head's input
/// gradient), at a tolerance that WebGPU's blocked sums meet and one sum in order does not.
pub fn long_row_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (ty, k, ns) in [(F32, 50257, &[1, 3, 11][..]), (Q8_0, 50272, &[1, 3][..])] {
        for &n in ns {
            let tol = if ty == F32 { mm_tol(k) } else { mm_tol(k * 4) };
            v.push(case(&format!("mul_mat {ty} K={k} M=70 N={n}"), tol, move |i| {
                let a = i.t(ty, &[k, 70]);
                let b = i.t(F32, &[k, n]);
                i.ctx.mul_mat(&a, &b) // [70, n]
            }));
        }
    }
    // out_prod over a vocabulary-long j (the head's backward: the hidden states' gradient,
    // summed over n_vocab logits), its 201 KB rows of a bound whole. Sums of ~100 (±1 terms)
    // in order in f32 land 7.3e-4 from f64's (shaders/out_prod.wgsl before its blocked sums,
    // which made lora_sgd's step-1 LoRA gradients 7x further from f64's than the CPU's,
    // tests/webgpu/train_webgpu.rs); in its blocks of 64 terms, 1.1e-4.
    v.push(case("out_prod f32 K=8 J=50257, 4 rows (the head's backward)", Tol { abs: 3e-4, rel: 0.0 }, |i| {
        let a = i.t(F32, &[8, 50257]);
        let g = i.t(F32, &[4, 50257]);
        i.ctx.out_prod(&a, &g) // [8, 4]
    }));
    v
}

/// One GPT-2 layer and the head, as crate/model/gpt2.rs builds them (fused QKV, K/V
/// written into a cache that already holds `n_past` positions, permuted K, transposed V,
/// causal mask, GELU MLP), then logits through the tied embedding.
fn gpt2_layer(wty: GgmlType) -> Case {
    // ~40 ops in f32; logits of magnitude ~10: 2e-4 absolute is ~1e-5 relative.
    let mut c = case(&format!("gpt2 layer, {wty} weights"), Tol { abs: 2e-4, rel: 1e-4 }, move |i| {
        let (n_embd, n_head, n_vocab, n_ctx, n_past, n) = (256i64, 4i64, 50i64, 16i64, 3i64, 5i64);
        let hd = n_embd / n_head;
        let ctx = i.ctx;
        let wte = i.range(wty, &[n_embd, n_vocab], -0.5, 0.5);
        let wpe = i.range(F32, &[n_embd, n_ctx], -0.5, 0.5);
        let tokens = i.ints(&[n], &[7, 49, 0, 23, 7]);
        let pos = i.ints(&[n], &[3, 4, 5, 6, 7]);
        let mut inp = ctx.add(&ctx.get_rows(&wte, &tokens), &ctx.get_rows(&wpe, &pos));
        let ln = |i: &mut In, x: &Tensor| {
            let w = i.range(F32, &[n_embd], 0.5, 1.5);
            let b = i.range(F32, &[n_embd], -0.2, 0.2);
            i.ctx.add(&i.ctx.mul(&i.ctx.norm(x, 1e-5), &w), &b)
        };
        let lin = |i: &mut In, x: &Tensor, n_in: i64, n_out: i64| {
            let w = i.range(wty, &[n_in, n_out], -0.3, 0.3);
            let b = i.range(F32, &[n_out], -0.1, 0.1);
            i.ctx.add(&i.ctx.mul_mat(&w, x), &b)
        };
        let cur = ln(i, &inp);
        let cur = lin(i, &cur, n_embd, 3 * n_embd);
        let q_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 0);
        let k_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], n_embd as usize * 4);
        let v_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 2 * n_embd as usize * 4);
        let kc = i.t(F32, &[n_embd * n_ctx]);
        let vc = i.t(F32, &[n_embd * n_ctx]);
        let row = n_embd as usize * 4;
        let k_cpy = ctx.cpy(&k_cur, &ctx.view_1d(&kc, n * n_embd, n_past as usize * row));
        let v_cpy = ctx.cpy(&v_cur, &ctx.view_1d(&vc, n * n_embd, n_past as usize * row));
        i.expand(&k_cpy);
        i.expand(&v_cpy);
        let q = ctx.permute(&ctx.cont_3d(&q_cur, hd, n_head, n), 0, 2, 1, 3);
        let l = n_past + n;
        let k = ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&kc, l * n_embd, 0), hd, n_head, l), 0, 2, 1, 3);
        let kq = ctx.mul_mat(&k, &q);
        let kq = ctx.soft_max(&ctx.diag_mask_inf(&ctx.scale(&kq, 0.125), n_past as i32));
        let v = ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&vc, l * n_embd, 0), hd, n_head, l), 1, 2, 0, 3);
        let v_trans = ctx.cont_3d(&v, l, hd, n_head);
        let kqv = ctx.mul_mat(&v_trans, &kq);
        let cur = ctx.cont_2d(&ctx.permute(&kqv, 0, 2, 1, 3), n_embd, n);
        let cur = lin(i, &cur, n_embd, n_embd);
        let ffn_inp = ctx.add(&cur, &inp);
        let cur = ln(i, &ffn_inp);
        let cur = lin(i, &cur, n_embd, 4 * n_embd);
        let cur = ctx.gelu(&cur);
        let cur = lin(i, &cur, 4 * n_embd, n_embd);
        inp = ctx.add(&cur, &ffn_inp);
        let cur = ln(i, &inp);
        ctx.mul_mat(&wte, &cur)
    });
    if wty.is_quantized() {
        // The CPU rounds activations to 8 bits at every mul_mat; the reference rounds them
        // too, but its f32 activations may differ from the backend's in the last bits and
        // so move a value across a rounding step (~1e-3 on one product of the next layer,
        // NMSE ~1e-8 on the logits): a looser element bound and an NMSE bound
        // (test-backend-ops allows 5e-4). Measured natively: NMSE ~1e-14, no step moved.
        c.rounded = Some((Tol { abs: 1e-2, rel: 1e-3 }, 1e-6));
    }
    c
}

/// The chains WebGPU runs as one dispatch each (crate/webgpu/fuse.rs), as GPT-2's graph
/// builds them, on small shapes: each against the f64 reference of its unfused nodes (the
/// CPU runs them unfused). Both N = 1 (decode) and N = 5 (a prompt chunk: two groups of
/// four columns, one ragged).
pub fn fused_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for ty in [F32, Q8_0, Q4_K] {
        let k = 256i64;
        // The epilogue adds in f32 exactly as the unfused add does: mul_mat's bound (4x
        // for quantized weights, as in mul_mat_cases), plus one rounding of the sum.
        let kk = if ty == F32 { k } else { 4 * k };
        let tol = Tol { abs: mm_tol(kk).abs, rel: 2e-5 };
        for n in [1i64, 5] {
            v.push(case(&format!("fused mul_mat + bias {ty} N={n}"), tol, move |i| {
                let (w, x, b) = (i.t(ty, &[k, 40]), i.t(F32, &[k, n]), i.t(F32, &[40]));
                i.ctx.add(&i.ctx.mul_mat(&w, &x), &b)
            }));
            // GELU's slope is at most 1.13: the product's error passes through, plus GELU's own.
            v.push(case(&format!("fused mul_mat + bias + gelu {ty} N={n}"), tol, move |i| {
                let (w, x, b) = (i.t(ty, &[k, 72]), i.t(F32, &[k, n]), i.t(F32, &[72]));
                i.ctx.gelu(&i.ctx.add(&i.ctx.mul_mat(&w, &x), &b))
            }));
            v.push(case(&format!("fused mul_mat + bias + residual {ty} N={n}"), tol, move |i| {
                let (w, x, b) = (i.t(ty, &[k, 40]), i.t(F32, &[k, n]), i.t(F32, &[40]));
                let r = i.range(F32, &[40, n], -4.0, 4.0);
                i.ctx.add(&r, &i.ctx.add(&i.ctx.mul_mat(&w, &x), &b))
            }));
            // The layer norm's outputs (magnitude <= ~4) within norm's 1e-5, then K products
            // of weights <= 1 in magnitude: 1e-5 * sqrt(K) for errors of either sign, plus
            // the product's own bound.
            let ln_tol = Tol { abs: mm_tol(kk).abs + 1e-5 * (k as f64).sqrt(), rel: 2e-5 };
            v.push(case(&format!("fused layer norm -> mul_mat + bias + gelu {ty} N={n}"), ln_tol, move |i| {
                let x = i.range(F32, &[k, n], -2.0, 3.0);
                let (g, b) = (i.range(F32, &[k], 0.5, 1.5), i.range(F32, &[k], -0.2, 0.2));
                let (w, bias) = (i.t(ty, &[k, 72]), i.t(F32, &[72]));
                let ln = i.ctx.add(&i.ctx.mul(&i.ctx.norm(&x, 1e-5), &g), &b);
                i.ctx.gelu(&i.ctx.add(&i.ctx.mul_mat(&w, &ln), &bias))
            }));
            v.push(case(&format!("fused layer norm -> mul_mat (the head) {ty} N={n}"), ln_tol, move |i| {
                let x = i.range(F32, &[k, n], -2.0, 3.0);
                let (g, b) = (i.range(F32, &[k], 0.5, 1.5), i.range(F32, &[k], -0.2, 0.2));
                let w = i.t(ty, &[k, 50]);
                let ln = i.ctx.add(&i.ctx.mul(&i.ctx.norm(&x, 1e-5), &g), &b);
                i.ctx.mul_mat(&w, &ln)
            }));
        }
    }
    // Attention for the queries over a cache that already holds n_past positions, keys
    // across two tiles of 64: the scores' sums over hd = 64 products, the softmax's exp and
    // sums (as soft_max's tolerance), then a weighted mean of values <= 1.
    for kv in [F32, F16] {
        for (n_past, n) in [(69i64, 1i64), (60, 5)] {
            let tol = Tol { abs: 2e-6, rel: 2e-5 };
            v.push(case(&format!("fused attention over a {kv} cache n_past={n_past} N={n}"), tol, move |i| {
                let (hd, nh) = (64i64, 3i64);
                let l = n_past + n;
                let ctx = i.ctx;
                let q = ctx.permute(&i.t(F32, &[hd, nh, n]), 0, 2, 1, 3); // [hd, N, nh]
                let k = ctx.permute(&i.t(kv, &[hd, nh, l]), 0, 2, 1, 3); // [hd, L, nh]
                let vt = i.t(kv, &[l, hd, nh]);
                let mask: Vec<f32> = (0..n)
                    .flat_map(|r| (0..l).map(move |c| if c > n_past + r { f32::NEG_INFINITY } else { 0.0 }))
                    .collect();
                let m = i.values(F32, &[l, n], &mask);
                let kq = ctx.soft_max_ext(&ctx.mul_mat(&k, &q), Some(&m), 0.125, 0.0);
                let kqv = ctx.mul_mat(&vt, &kq); // [hd, N, nh]
                ctx.cont_2d(&ctx.permute(&kqv, 0, 2, 1, 3), hd * nh, n)
            }));
        }
    }
    for wty in [F32, Q8_0] {
        for kv in [F32, F16] {
            for n in [1i64, 5] {
                v.push(gpt2_decode_layer(wty, kv, n));
            }
        }
    }
    v
}

/// One GPT-2 layer exactly as crate/model/gpt2.rs builds it for a run of `n` tokens after
/// `n_past` cached ones (per-head `cont_3d` of Q, K and V, K and V^T copied into caches of
/// type `kv`, attention as one `soft_max_ext` with the KQ mask), then the head: what
/// WebGPU runs as six dispatches (crate/webgpu/fuse.rs) and one for the head.
fn gpt2_decode_layer(wty: GgmlType, kv: GgmlType, n: i64) -> Case {
    // As gpt2_layer, but the random residual stream and caches give logits up to ~60 in
    // magnitude: f32 sums of that scale leave ~1e-5 of it on every element (WebGPU, fused or
    // not: measured 4e-4 with every fusion off, on q8_0 weights): 1e-3 absolute and an NMSE
    // bound. The CPU sums in f64 and keeps gpt2_layer's bound.
    let tol = Tol { abs: 1e-3, rel: 1e-4 };
    let mut c = case(&format!("fused gpt2 layer {wty} weights, {kv} cache, N={n}"), tol, move |i| {
        let (n_embd, n_head, n_vocab, n_ctx, n_past) = (256i64, 4i64, 50i64, 16i64, 3i64);
        let hd = n_embd / n_head;
        let ctx = i.ctx;
        let kvs = kv.type_size();
        let inp = i.range(F32, &[n_embd, n], -1.0, 1.0);
        let ln = |i: &mut In, x: &Tensor| {
            let w = i.range(F32, &[n_embd], 0.5, 1.5);
            let b = i.range(F32, &[n_embd], -0.2, 0.2);
            i.ctx.add(&i.ctx.mul(&i.ctx.norm(x, 1e-5), &w), &b)
        };
        let lin = |i: &mut In, x: &Tensor, n_in: i64, n_out: i64| {
            let w = i.range(wty, &[n_in, n_out], -0.3, 0.3);
            let b = i.range(F32, &[n_out], -0.1, 0.1);
            i.ctx.add(&i.ctx.mul_mat(&w, x), &b)
        };
        let cur = ln(i, &inp);
        let cur = lin(i, &cur, n_embd, 3 * n_embd);
        let q_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 0);
        let k_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], n_embd as usize * 4);
        let v_cur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 2 * n_embd as usize * 4);
        let kc = i.range(kv, &[n_embd * n_ctx], -1.0, 1.0);
        let vc = i.range(kv, &[n_ctx, n_embd], -1.0, 1.0);
        let row = n_embd as usize * kvs;
        let n_ctx_bytes = n_ctx as usize * kvs;
        let k_dst = ctx.view_1d(&kc, n * n_embd, n_past as usize * row);
        let v_dst = ctx.view_2d(&vc, n, n_embd, n_ctx_bytes, n_past as usize * kvs);
        let k_heads = ctx.cont_3d(&k_cur, hd, n_head, n);
        let v_heads = ctx.cont_3d(&v_cur, hd, n_head, n);
        i.expand(&ctx.cpy(&k_heads, &k_dst));
        i.expand(&ctx.cpy(&ctx.transpose(&ctx.reshape_2d(&v_heads, n_embd, n)), &v_dst));
        let q = ctx.permute(&ctx.cont_3d(&q_cur, hd, n_head, n), 0, 2, 1, 3);
        let l = n_past + n;
        let k = ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&kc, l * n_embd, 0), hd, n_head, l), 0, 2, 1, 3);
        let mask: Vec<f32> =
            (0..n).flat_map(|r| (0..l).map(move |c| if c > n_past + r { f32::NEG_INFINITY } else { 0.0 })).collect();
        let m = i.values(F32, &[l, n], &mask);
        let kq = ctx.soft_max_ext(&ctx.mul_mat(&k, &q), Some(&m), 1.0 / (hd as f32).sqrt(), 0.0);
        let v_trans = ctx.view_3d(&vc, l, hd, n_head, n_ctx_bytes, hd as usize * n_ctx_bytes, 0);
        let kqv = ctx.mul_mat(&v_trans, &kq);
        let cur = ctx.cont_2d(&ctx.permute(&kqv, 0, 2, 1, 3), n_embd, n);
        let cur = lin(i, &cur, n_embd, n_embd);
        let ffn_inp = ctx.add(&cur, &inp);
        let cur = ln(i, &ffn_inp);
        let cur = lin(i, &cur, n_embd, 4 * n_embd);
        let cur = ctx.gelu(&cur);
        let cur = lin(i, &cur, 4 * n_embd, n_embd);
        let out = ctx.add(&cur, &ffn_inp);
        let cur = ln(i, &out);
        let wte = i.range(wty, &[n_embd, n_vocab], -0.5, 0.5);
        ctx.mul_mat(&wte, &cur)
    });
    c.max_nmse = 1e-9;
    c.cpu_tol = Some(Tol { abs: 2e-4, rel: 1e-4 });
    if kv == F16 {
        // K and V rounded to f16 from f32 values a few ulp off the reference's may round to
        // the neighbouring half (2^-11 relative) and move logits by up to ~1e-3 (WebGPU,
        // fused or not; measured 8e-4, NMSE 2e-10).
        c.tol = Tol { abs: 2e-3, rel: 1e-3 };
        c.max_nmse = 1e-8;
    }
    if wty.is_quantized() {
        // As gpt2_layer: the CPU's rounded activations may cross a rounding step.
        c.rounded = Some((Tol { abs: 1e-2, rel: 1e-3 }, 1e-6));
    }
    c
}

/// Runs a future that never waits (natively every read blocks, so [`check_all`] completes
/// on its first poll).
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("a native backend's read waited"),
    }
}
