//! WebGPU kernels against references, in the manner of ggml's test-backend-ops: every op
//! and type on random inputs (contiguous, permuted, viewed), each case with its own
//! tolerance.
//!
//! References: a naive f64 evaluator in this file (always), and the CPU backend
//! (`ggweb::cpu`) whenever it has kernels. Every case runs on two WebGPU configurations
//! (the `backend_tests!` macro): the adapter's limits, and storage bindings lowered to
//! 64 KiB so weights above it go through the row-range split path.
//!
//! Run: `cargo test --features webgpu --test webgpu webgpu_ops::`. Without a Vulkan adapter
//! the tests fail with a message; `GGWEB_ALLOW_NO_GPU=1` turns that into a printed skip.

use crate::support::eval::Eval;
use std::rc::Rc;

use ggweb::allocator::alloc_ctx_tensors;
use ggweb::backend::{Backend, BackendError, Buffer};
use ggweb::cpu::{CpuBackend, CpuBufferType};
use ggweb::types::QK_K;
use ggweb::webgpu::{MatMulKernels, WebGpuBackend, WebGpuOptions};
use ggweb::{Context, ContextParams, GgmlType, Graph, Op, Tensor};
use half::f16;

use GgmlType::{BF16, F16, F32, I32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};

use crate::support::gpu;
use crate::support::rng::Rng;

/// Weight types whose reference dequantizer is `ggweb::quants` (bit-exact against PyPI gguf:
/// tests/kernels/quants.rs) rather than a second reading written out here.
const QUANTS_REFERENCE: [GgmlType; 7] = [BF16, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K];

// ---------------------------------------------------------------- device

fn gpu(opts: WebGpuOptions) -> Option<WebGpuBackend> {
    gpu::webgpu(opts)
}

/// Storage bindings lowered to this many bytes in the `*_small_bindings` variants.
const SMALL_BINDING: u64 = 64 << 10;

// ---------------------------------------------------------------- inputs

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_bits().to_le_bytes()
}

/// Random valid bytes for `n` elements of `ty`: values in [lo, hi] for float types,
/// random blocks (scales chosen so weights stay within about ±10) for quantized types.
fn random_bytes(rng: &mut Rng, ty: GgmlType, n: usize, lo: f32, hi: f32) -> Vec<u8> {
    let mut out = Vec::with_capacity(ty.row_size(n as i64));
    match ty {
        F32 => (0..n).for_each(|_| out.extend_from_slice(&rng.uniform(lo, hi).to_le_bytes())),
        F16 => (0..n).for_each(|_| out.extend_from_slice(&f16_bytes(rng.uniform(lo, hi)))),
        BF16 => (0..n).for_each(|_| out.extend_from_slice(&(rng.uniform(lo, hi).to_bits() >> 16).to_le_bytes()[..2])),
        Q8_0 => {
            for _ in 0..n / 32 {
                out.extend_from_slice(&f16_bytes(rng.uniform(0.005, 0.02)));
                (0..32).for_each(|_| out.push(rng.next_u64() as u8));
            }
        }
        Q4_0 => {
            for _ in 0..n / 32 {
                out.extend_from_slice(&f16_bytes(rng.uniform(0.05, 0.15)));
                (0..16).for_each(|_| out.push(rng.next_u64() as u8));
            }
        }
        Q4_K => {
            for _ in 0..n / QK_K {
                out.extend_from_slice(&f16_bytes(rng.uniform(0.002, 0.01)));
                out.extend_from_slice(&f16_bytes(rng.uniform(0.001, 0.01)));
                (0..12 + 128).for_each(|_| out.push(rng.next_u64() as u8));
            }
        }
        Q6_K => {
            for _ in 0..n / QK_K {
                (0..128 + 64 + 16).for_each(|_| out.push(rng.next_u64() as u8));
                out.extend_from_slice(&f16_bytes(rng.uniform(0.0005, 0.002)));
            }
        }
        // Random quant bytes; the f16 scales (d, then m or dmin) where ggml puts them.
        Q4_1 | Q5_0 | Q5_1 | Q2_K | Q3_K | Q5_K => {
            let (d_at, m_at, d) = match ty {
                Q4_1 => (0, Some(2), (0.05, 0.15)),
                Q5_0 => (0, None, (0.03, 0.08)),
                Q5_1 => (0, Some(2), (0.03, 0.08)),
                Q2_K => (80, Some(82), (0.02, 0.1)),
                Q3_K => (108, None, (0.005, 0.02)),
                _ => (0, Some(2), (0.002, 0.01)),
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
        other => panic!("no random data for {other}"),
    }
    out
}

/// A case's graph: the output, and the leaf inputs with their bytes.
struct Built {
    out: Tensor,
    inputs: Vec<(Tensor, Vec<u8>)>,
    /// Nodes to put in the graph before `out` (copies into a cache that `out` reads).
    roots: Vec<Tensor>,
}

/// Helper for builders: new leaf tensors with random contents.
struct In<'a> {
    ctx: &'a Context,
    rng: &'a mut Rng,
    inputs: Vec<(Tensor, Vec<u8>)>,
    roots: Vec<Tensor>,
}

impl In<'_> {
    fn t(&mut self, ty: GgmlType, ne: &[i64]) -> Tensor {
        self.range(ty, ne, -1.0, 1.0)
    }
    fn range(&mut self, ty: GgmlType, ne: &[i64], lo: f32, hi: f32) -> Tensor {
        let t = self.ctx.new_tensor(ty, ne);
        t.set_name(&format!("in{}", self.inputs.len()));
        let bytes = random_bytes(self.rng, ty, t.nelements() as usize, lo, hi);
        self.inputs.push((t.clone(), bytes));
        t
    }
    /// I32 indices in [0, max).
    fn idx(&mut self, ne: &[i64], max: i32) -> Tensor {
        let t = self.ctx.new_tensor(I32, ne);
        t.set_name(&format!("in{}", self.inputs.len()));
        let bytes: Vec<u8> =
            (0..t.nelements()).flat_map(|_| ((self.rng.next_u64() % max as u64) as i32).to_le_bytes()).collect();
        self.inputs.push((t.clone(), bytes));
        t
    }
    /// I32 leaf with given values.
    fn ints(&mut self, ne: &[i64], v: &[i32]) -> Tensor {
        let t = self.ctx.new_tensor(I32, ne);
        t.set_name(&format!("in{}", self.inputs.len()));
        self.inputs.push((t.clone(), v.iter().flat_map(|x| x.to_le_bytes()).collect()));
        t
    }
    /// Puts `t` in the graph ahead of the output.
    fn expand(&mut self, t: &Tensor) {
        self.roots.push(t.clone());
    }
    /// A leaf with given values (masks).
    fn values(&mut self, ty: GgmlType, ne: &[i64], v: &[f32]) -> Tensor {
        let t = self.ctx.new_tensor(ty, ne);
        t.set_name(&format!("in{}", self.inputs.len()));
        let bytes: Vec<u8> = match ty {
            F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            F16 => v.iter().flat_map(|&x| f16_bytes(x)).collect(),
            _ => panic!("values: {ty}"),
        };
        self.inputs.push((t.clone(), bytes));
        t
    }
}

/// Tolerance for |got - want| <= abs + rel * |want|. Infinities must match exactly.
#[derive(Clone, Copy, Debug)]
struct Tol {
    abs: f64,
    rel: f64,
}
const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

struct Case {
    name: String,
    build: Box<dyn Fn(&mut In) -> Tensor>,
    tol: Tol,
    /// Against the CPU backend, whose quantized mul_mat rounds activations to Q8_0/Q8_K
    /// first: normalized mean squared error bound (test-backend-ops uses 5e-4).
    cpu_nmse: f64,
}

fn case(name: &str, tol: Tol, build: impl Fn(&mut In) -> Tensor + 'static) -> Case {
    Case { name: name.into(), build: Box::new(build), tol, cpu_nmse: 1e-9 }
}

fn build(case: &Case, ctx: &Context) -> Built {
    let mut rng = Rng::new(0x5EED ^ case.name.len() as u64);
    let mut inp = In { ctx, rng: &mut rng, inputs: Vec::new(), roots: Vec::new() };
    let out = (case.build)(&mut inp);
    Built { out, inputs: inp.inputs, roots: inp.roots }
}

fn new_ctx() -> Context {
    Context::new(ContextParams { mem_size: 4 << 20, no_alloc: true })
}

/// Values of `t` in logical order (i0 fastest), read from `bytes` (its span).
fn decode(t: &Tensor, bytes: &[u8]) -> Vec<f64> {
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

/// Builds `case` on `backend`, fills inputs, computes, reads the output.
fn run_on(backend: &dyn Backend, case: &Case) -> Result<Vec<f64>, BackendError> {
    let ctx = new_ctx();
    let b = build(case, &ctx);
    let mut gf = Graph::new();
    for r in &b.roots {
        gf.build_forward_expand(r);
    }
    gf.build_forward_expand(&b.out);
    let _bufs = alloc_ctx_tensors(&ctx, &*backend.buffer_type())?;
    for (t, bytes) in &b.inputs {
        t.set_bytes(bytes, 0);
    }
    if let Some(n) = gf.nodes.iter().find(|n| !backend.supports_op(n)) {
        return Err(BackendError::Unsupported { node: format!("{n:?}"), reason: "supports_op is false".into() });
    }
    backend.graph_compute(&gf)?;
    let mut bytes = vec![0u8; b.out.nbytes()];
    b.out.get_bytes(&mut bytes, 0);
    Ok(decode(&b.out, &bytes))
}

// ---------------------------------------------------------------- naive reference

/// Dequantizes one row (ggml's reference loops, written out independently of the WGSL).
fn dequant_row(ty: GgmlType, b: &[u8], n: usize) -> Vec<f64> {
    let h = |o: usize| f16::from_bits(u16::from_le_bytes([b[o], b[o + 1]])).to_f32();
    let mut y = vec![0f32; n];
    match ty {
        F32 => (0..n).for_each(|i| y[i] = f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())),
        F16 => (0..n).for_each(|i| y[i] = h(2 * i)),
        Q8_0 => {
            for (blk, ys) in y.chunks_mut(32).enumerate() {
                let o = blk * 34;
                let d = h(o);
                for j in 0..32 {
                    ys[j] = d * (b[o + 2 + j] as i8) as f32;
                }
            }
        }
        Q4_0 => {
            for (blk, ys) in y.chunks_mut(32).enumerate() {
                let o = blk * 18;
                let d = h(o);
                for j in 0..16 {
                    ys[j] = d * ((b[o + 2 + j] & 15) as i32 - 8) as f32;
                    ys[j + 16] = d * ((b[o + 2 + j] >> 4) as i32 - 8) as f32;
                }
            }
        }
        Q4_K => {
            for (blk, ys) in y.chunks_mut(QK_K).enumerate() {
                let o = blk * 144;
                let (d, dmin) = (h(o), h(o + 2));
                let sc = &b[o + 4..o + 16];
                let scale_min = |j: usize| -> (f32, f32) {
                    if j < 4 {
                        ((sc[j] & 63) as f32, (sc[j + 4] & 63) as f32)
                    } else {
                        (
                            ((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4)) as f32,
                            ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)) as f32,
                        )
                    }
                };
                let q = &b[o + 16..o + 144];
                for c in 0..4 {
                    let (s1, m1) = scale_min(2 * c);
                    let (s2, m2) = scale_min(2 * c + 1);
                    for l in 0..32 {
                        ys[64 * c + l] = d * s1 * (q[32 * c + l] & 0xF) as f32 - dmin * m1;
                        ys[64 * c + 32 + l] = d * s2 * (q[32 * c + l] >> 4) as f32 - dmin * m2;
                    }
                }
            }
        }
        Q6_K => {
            for (blk, ys) in y.chunks_mut(QK_K).enumerate() {
                let o = blk * 210;
                let d = h(o + 208);
                for half in 0..2 {
                    let ql = &b[o + 64 * half..];
                    let qh = &b[o + 128 + 32 * half..];
                    let sc = |i: usize| (b[o + 192 + 8 * half + i] as i8) as f32;
                    let yy = &mut ys[128 * half..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        yy[l] = d * sc(is) * q1 as f32;
                        yy[l + 32] = d * sc(is + 2) * q2 as f32;
                        yy[l + 64] = d * sc(is + 4) * q3 as f32;
                        yy[l + 96] = d * sc(is + 6) * q4 as f32;
                    }
                }
            }
        }
        t if QUANTS_REFERENCE.contains(&t) => ggweb::quants::dequantize_row(t, &b[..t.row_size(n as i64)], &mut y),
        other => panic!("dequant {other}"),
    }
    y.into_iter().map(f64::from).collect()
}

/// Row (i1, i2, i3) of a host tensor, dequantized.
fn host_row(t: &Tensor, i1: usize, i2: usize, i3: usize) -> Vec<f64> {
    let o = i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
    let len = t.row_size();
    let p = t.host_ptr().expect("host tensor");
    let bytes = unsafe { std::slice::from_raw_parts(p.add(o), len) };
    dequant_row(t.ty, bytes, t.ne[0] as usize)
}

fn idx4(i: usize, ne: [i64; 4]) -> [i64; 4] {
    let n0 = ne[0] as usize;
    let n1 = ne[1] as usize;
    let n2 = ne[2] as usize;
    [(i % n0) as i64, (i / n0 % n1) as i64, (i / n0 / n1 % n2) as i64, (i / n0 / n1 / n2) as i64]
}

fn get(t: &Tensor, i: [i64; 4]) -> f64 {
    t.get_f32_nd(i[0], i[1], i[2], i[3]) as f64
}
fn set(t: &Tensor, i: [i64; 4], v: f64) {
    t.set_f32_nd(i[0], i[1], i[2], i[3], v as f32)
}

/// Evaluates one node on host tensors in f64 (results stored as the node's type).
fn naive_node(node: &Tensor) {
    let s0 = || node.src[0].as_ref().unwrap();
    let s1 = || node.src[1].as_ref().unwrap();
    let n = node.nelements() as usize;
    match node.op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => {}
        Op::Add | Op::Mul => {
            for k in 0..n {
                let i = idx4(k, node.ne);
                let b = s1();
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
                set(node, idx4(k, node.ne), 0.5 * x * (1.0 + u.tanh()));
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
                let slope = if max_bias > 0.0 {
                    if h < n_head_log2 {
                        m0.powi(h as i32 + 1)
                    } else {
                        m1.powi(2 * (h - n_head_log2) as i32 + 1)
                    }
                } else {
                    1.0
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
                    set(node, [i0 as i64, ri[0], ri[1], ri[2]], (x - mx).exp() / sum);
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
        Op::MulMat => {
            let (a, b) = (s0(), s1());
            for i13 in 0..b.ne[3] {
                for i12 in 0..b.ne[2] {
                    let (i02, i03) = (i12 / (b.ne[2] / a.ne[2]), i13 / (b.ne[3] / a.ne[3]));
                    for m in 0..a.ne[1] {
                        let w = host_row(a, m as usize, i02 as usize, i03 as usize);
                        for nn in 0..b.ne[1] {
                            let s: f64 = (0..a.ne[0]).map(|k| w[k as usize] * get(b, [k, nn, i12, i13])).sum();
                            set(node, [m, nn, i12, i13], s);
                        }
                    }
                }
            }
        }
    }
}

fn naive(case: &Case) -> Vec<f64> {
    let ctx = new_ctx();
    let b = build(case, &ctx);
    let mut gf = Graph::new();
    for r in &b.roots {
        gf.build_forward_expand(r);
    }
    gf.build_forward_expand(&b.out);
    let _bufs = alloc_ctx_tensors(&ctx, &CpuBufferType).unwrap();
    for (t, bytes) in &b.inputs {
        t.set_bytes(bytes, 0);
    }
    for n in &gf.nodes {
        naive_node(n);
    }
    let mut bytes = vec![0u8; b.out.nbytes()];
    b.out.get_bytes(&mut bytes, 0);
    decode(&b.out, &bytes)
}

// ---------------------------------------------------------------- comparison

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: Tol) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_infinite() || g.is_infinite() {
            assert_eq!(g, w, "{what}: element {i}");
            continue;
        }
        assert!(g.is_finite(), "{what}: element {i} is {g} (want {w})");
        let err = (g - w).abs();
        let allowed = tol.abs + tol.rel * w.abs();
        if err - allowed > worst.0 {
            worst = (err - allowed, i);
        }
    }
    let i = worst.1;
    assert!(worst.0 <= 0.0, "{what}: element {i} = {} vs reference {} (tolerance {tol:?})", got[i], want[i]);
}

fn nmse(got: &[f64], want: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        if w.is_finite() {
            num += (g - w) * (g - w);
            den += w * w;
        } else {
            assert_eq!(g, w);
        }
    }
    num / den.max(f64::MIN_POSITIVE)
}

/// Runs every case on `backend` against the naive reference and, when the CPU backend
/// has kernels, against it too.
fn check_cases(backend: &dyn Backend, label: &str, cases: Vec<Case>) {
    assert!(!cases.is_empty());
    let cpu = CpuBackend::new(1);
    for c in &cases {
        let what = format!("{label} {}", c.name);
        let got = run_on(backend, c).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_close(&format!("{what} vs naive"), &got, &naive(c), c.tol);
        match run_on(&cpu, c) {
            Ok(want) => {
                let e = nmse(&got, &want);
                eprintln!("{what}: NMSE vs CPU backend {e:.2e}");
                assert!(e <= c.cpu_nmse, "{what} vs CPU backend: NMSE {e:e} > {:e}", c.cpu_nmse);
            }
            // Configurations the CPU has no kernel for (ALiBi): the naive check above stands.
            Err(BackendError::Unsupported { node, .. }) => {
                eprintln!(
                    "NOTE {what}: the CPU backend does not support {node}; checked against the naive reference only"
                )
            }
            Err(BackendError::Other(m)) if m.contains("not yet built") => {
                eprintln!(
                    "NOTE {what}: CPU backend has no kernels in this build; checked against the naive reference only"
                )
            }
            Err(e) => panic!("{what}: CPU backend failed: {e}"),
        }
    }
}

/// One test function per backend configuration for a list of cases: each mul_mat kernel
/// family, whatever the adapter, and bindings lowered to 64 KiB with the other family.
macro_rules! backend_tests {
    ($name:ident, $cases:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn webgpu_per_row() {
                let _shared = gpu::shared();
                if let Some(b) = gpu(WebGpuOptions { mat_mul_kernels: MatMulKernels::PerRow, ..Default::default() }) {
                    check_cases(&b, "webgpu(per-row)", $cases);
                }
            }
            #[test]
            fn webgpu_workgroup_small_bindings() {
                let _shared = gpu::shared();
                let opts = WebGpuOptions {
                    max_binding_size_override: Some(SMALL_BINDING),
                    mat_mul_kernels: MatMulKernels::Workgroup,
                    ..Default::default()
                };
                if let Some(b) = gpu(opts) {
                    check_cases(&b, "webgpu(workgroup, 64 KiB bindings)", $cases);
                }
            }
        }
    };
}

// ---------------------------------------------------------------- cases

fn binary_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for op in ["add", "mul"] {
        let f = move |ctx: &Context, a: &Tensor, b: &Tensor| if op == "add" { ctx.add(a, b) } else { ctx.mul(a, b) };
        // One f32 rounding of the same operands on both sides: exact.
        v.push(case(&format!("{op} same shape"), EXACT, move |i| {
            let a = i.t(F32, &[32, 7, 3]);
            let b = i.t(F32, &[32, 7, 3]);
            f(i.ctx, &a, &b)
        }));
        v.push(case(&format!("{op} broadcast row"), EXACT, move |i| {
            let a = i.t(F32, &[33, 5, 2, 2]);
            let b = i.t(F32, &[33, 1, 1, 1]);
            f(i.ctx, &a, &b)
        }));
        v.push(case(&format!("{op} broadcast dims 1,3"), EXACT, move |i| {
            let a = i.t(F32, &[8, 6, 3, 2]);
            let b = i.t(F32, &[8, 1, 3, 1]);
            f(i.ctx, &a, &b)
        }));
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
    vec![
        // One f32 multiply each side.
        case("scale", EXACT, |i| {
            let a = i.t(F32, &[33, 5, 2]);
            i.ctx.scale(&a, 0.125)
        }),
        case("scale transposed", EXACT, |i| {
            let a = i.t(F32, &[9, 17]);
            i.ctx.scale(&i.ctx.transpose(&a), -3.5)
        }),
        // f32 exp in the shader (a few ulp) vs f64 tanh: 1e-6 absolute around 0, 2e-6
        // relative for large |x|; ±12 covers the saturated tails (tanh = ±1, gelu(-12) ~ 0).
        case("gelu", Tol { abs: 1e-6, rel: 2e-6 }, |i| {
            let a = i.range(F32, &[128, 9], -12.0, 12.0);
            i.ctx.gelu(&a)
        }),
        case("gelu permuted", Tol { abs: 1e-6, rel: 2e-6 }, |i| {
            let a = i.range(F32, &[6, 40, 3], -4.0, 4.0);
            i.ctx.gelu(&i.ctx.permute(&a, 2, 0, 1, 3))
        }),
        // The fused add -> gelu (one dispatch): the f32 sum rounded once as add does, then
        // gelu's own error: gelu's tolerance.
        case("gelu of add with a broadcast row (fused)", Tol { abs: 1e-6, rel: 2e-6 }, |i| {
            let a = i.range(F32, &[96, 7], -6.0, 6.0);
            let b = i.range(F32, &[96], -1.0, 1.0);
            i.ctx.gelu(&i.ctx.add(&a, &b))
        }),
    ]
}

fn norm_cases() -> Vec<Case> {
    // f32 sums over <= 768 values in another order than f64: ~1e-6 relative on outputs
    // of magnitude <= 4.
    let tol = Tol { abs: 1e-5, rel: 1e-5 };
    vec![
        case("norm 768", tol, |i| {
            let a = i.range(F32, &[768, 4], -2.0, 3.0);
            i.ctx.norm(&a, 1e-5)
        }),
        case("norm odd rows 3-D", tol, |i| {
            let a = i.t(F32, &[100, 3, 2]);
            i.ctx.norm(&a, 1e-5)
        }),
        case("norm of a row view", tol, |i| {
            let a = i.t(F32, &[50, 6]);
            let v = i.ctx.view_2d(&a, 40, 3, a.nb[1] * 2, 4 * 5); // every other row, from col 5
            i.ctx.norm(&v, 1e-3)
        }),
        // The fused norm -> mul -> add (one dispatch): two more f32 roundings (or one fma)
        // on outputs of magnitude <= ~6: within the norm tolerance.
        case("norm * w + b (fused layer norm)", tol, |i| {
            let a = i.range(F32, &[768, 3], -2.0, 3.0);
            let w = i.range(F32, &[768], 0.5, 1.5);
            let b = i.range(F32, &[768], -0.2, 0.2);
            i.ctx.add(&i.ctx.mul(&i.ctx.norm(&a, 1e-5), &w), &b)
        }),
    ]
}

fn softmax_cases() -> Vec<Case> {
    // exp in f32 with a few ulp; sums in another order: 1e-6 absolute on values in [0,1].
    let tol = Tol { abs: 1e-6, rel: 1e-5 };
    let causal = |ne0: usize, ne1: usize, n_past: usize| -> Vec<f32> {
        (0..ne1).flat_map(|r| (0..ne0).map(move |c| if c > n_past + r { f32::NEG_INFINITY } else { 0.0 })).collect()
    };
    vec![
        case("soft_max", tol, |i| {
            let a = i.range(F32, &[37, 5, 3], -4.0, 4.0);
            i.ctx.soft_max(&a)
        }),
        case("soft_max 300 wide (several per invocation)", tol, |i| {
            let a = i.range(F32, &[300, 2], -8.0, 8.0);
            i.ctx.soft_max(&a)
        }),
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
        case("soft_max_ext ALiBi 5 heads", Tol { abs: 1e-6, rel: 2e-5 }, |i| {
            let a = i.range(F32, &[10, 3, 5], -2.0, 2.0);
            let m = i.range(F32, &[10, 3, 1], -3.0, 3.0);
            i.ctx.soft_max_ext(&a, Some(&m), 0.7, 8.0)
        }),
        case("soft_max of diag_mask_inf (attention)", tol, |i| {
            let a = i.range(F32, &[9, 4, 3], -4.0, 4.0);
            let s = i.ctx.scale(&a, 0.125);
            i.ctx.soft_max(&i.ctx.diag_mask_inf(&s, 5))
        }),
        // Compares -inf exactly, the rest is a copy.
        case("diag_mask_inf", EXACT, |i| {
            let a = i.t(F32, &[10, 6, 2]);
            i.ctx.diag_mask_inf(&a, 3)
        }),
    ]
}

fn cpy_cases() -> Vec<Case> {
    // f32 -> f16 rounds once on each side (to nearest even in both); f16 -> f32 is exact.
    let to_f16 = Tol { abs: 0.0, rel: 1.0 / 2048.0 };
    vec![
        case("cont transposed f32", EXACT, |i| {
            let a = i.t(F32, &[17, 9]);
            i.ctx.cont(&i.ctx.transpose(&a))
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
    for ty in [F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
        let ne0 = if ty.blck_size() == QK_K { 512 } else { 96 };
        // Dequantization is one or two f32 operations per weight, done the same way on
        // both sides; 1e-6 relative allows a fused multiply-add in Q4_K's d*sc*q - dmin*m.
        let tol = Tol { abs: 1e-6, rel: 1e-6 };
        v.push(case(&format!("get_rows {ty}"), tol, move |i| {
            let a = i.t(ty, &[ne0, 40]);
            let idx = i.idx(&[11], 40);
            i.ctx.get_rows(&a, &idx)
        }));
    }
    v.push(case("get_rows 3-D indices, batched src0", EXACT, |i| {
        let a = i.t(F32, &[32, 10, 2]);
        let idx = i.idx(&[4, 2], 10);
        i.ctx.get_rows(&a, &idx)
    }));
    v
}

/// f32 accumulation over K products of magnitude <= ~1 in another order than f64.
fn mm_tol(k: i64) -> Tol {
    Tol { abs: 2e-7 * k as f64, rel: 1e-5 }
}

fn mul_mat_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for ty in [F32, F16, BF16] {
        for (k, m, n) in [(64, 48, 1), (64, 48, 5), (64, 48, 37), (70, 33, 1), (70, 33, 19), (256, 96, 64)] {
            let mut c = case(&format!("mul_mat {ty} K={k} M={m} N={n}"), mm_tol(k), move |i| {
                let a = i.t(ty, &[k, m]);
                let b = i.t(F32, &[k, n]);
                i.ctx.mul_mat(&a, &b)
            });
            if ty == BF16 {
                // The CPU rounds activations to BF16 (its vec_dot_type), 8-bit mantissas:
                // measured NMSE ~2e-6.
                c.cpu_nmse = 1e-5;
            }
            v.push(c);
        }
    }
    for ty in [Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
        let k = if ty.blck_size() == QK_K { 512 } else { 128 };
        for n in [1, 3, 11] {
            let mut c = case(&format!("mul_mat {ty} K={k} M=40 N={n}"), mm_tol(k * 4), move |i| {
                let a = i.t(ty, &[k, 40]);
                let b = i.t(F32, &[k, n]);
                i.ctx.mul_mat(&a, &b)
            });
            // The CPU rounds activations to 8 bits first (vec_dot_type).
            c.cpu_nmse = 5e-4;
            v.push(c);
        }
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
    v.push(case("mul_mat broadcast src0 over dims 2,3", mm_tol(32), |i| {
        let a = i.t(F32, &[32, 8, 2, 1]);
        let b = i.t(F32, &[32, 5, 4, 3]);
        i.ctx.mul_mat(&a, &b)
    }));
    v.push(case("mul_mat transposed src1 (strided k)", mm_tol(24), |i| {
        let a = i.t(F16, &[24, 10]);
        let b = i.t(F32, &[14, 24]);
        i.ctx.mul_mat(&a, &i.ctx.transpose(&b))
    }));
    v
}

/// One GPT-2 layer and the head, as crate/model/gpt2.rs builds them (fused QKV, K/V
/// written into a cache that already holds `n_past` positions, permuted K, transposed V,
/// causal mask, GELU MLP), then logits through the tied embedding.
fn gpt2_layer(wty: GgmlType) -> Case {
    // ~40 ops in f32; logits of magnitude ~10: 2e-4 absolute is ~1e-5 relative.
    let mut c = case(&format!("gpt2 layer, {wty} weights"), Tol { abs: 2e-4, rel: 1e-4 }, move |i| {
        let (n_embd, n_head, n_vocab, n_ctx, n_past, n) = (64i64, 4i64, 50i64, 16i64, 3i64, 5i64);
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
        let kq = ctx.soft_max(&ctx.diag_mask_inf(&ctx.scale(&kq, 0.25), n_past as i32));
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
    // The CPU rounds every quantized mul_mat's activations to Q8_0 (1.5e-5 NMSE per op
    // here); through attention and the MLP that grows to ~1.5e-3 on these logits. Checked
    // when this was written: the CPU matched a naive reference that rounds activations the
    // same way to 2e-15, so the gap is that rounding, not an error on either side.
    c.cpu_nmse = if wty.is_quantized() { 5e-3 } else { 1e-8 };
    c
}

backend_tests!(gpt2, vec![gpt2_layer(F32), gpt2_layer(F16), gpt2_layer(Q8_0), gpt2_layer(Q4_0)]);
backend_tests!(binary, binary_cases());
backend_tests!(unary, unary_cases());
backend_tests!(norm, norm_cases());
backend_tests!(softmax, softmax_cases());
backend_tests!(cpy, cpy_cases());
backend_tests!(get_rows, get_rows_cases());
backend_tests!(mul_mat, mul_mat_cases());

// ---------------------------------------------------------------- limits, buffers, errors

/// Weights above the binding limit: get_rows and mul_mat (vector and tiled) read them in
/// row ranges. 16 KiB bindings: the f32 weight (51 KB) takes 4 parts, the Q8_0 one 2.
#[test]
fn weights_above_the_binding_limit() {
    let _shared = gpu::shared();
    for kernels in [MatMulKernels::PerRow, MatMulKernels::Workgroup] {
        let opts =
            WebGpuOptions { max_binding_size_override: Some(16 << 10), mat_mul_kernels: kernels, ..Default::default() };
        let Some(b) = gpu(opts) else { return };
        check_cases(&b, &format!("webgpu({kernels:?}, 16 KiB bindings)"), split_cases());
    }
}

fn split_cases() -> Vec<Case> {
    let cases = vec![
        case("get_rows of a split f32 weight", EXACT, |i| {
            let a = i.t(F32, &[64, 200]);
            let idx = i.idx(&[50], 200);
            i.ctx.get_rows(&a, &idx)
        }),
        case("mul_mat vec on a split f32 weight", mm_tol(64), |i| {
            let a = i.t(F32, &[64, 200]);
            let x = i.t(F32, &[64, 1]);
            i.ctx.mul_mat(&a, &x)
        }),
        case("mul_mat tiled on a split f16 weight", mm_tol(64), |i| {
            let a = i.t(F16, &[128, 200]);
            let x = i.t(F32, &[128, 20]);
            i.ctx.mul_mat(&a, &x)
        }),
        {
            let mut c = case("mul_mat on a split q8_0 weight", mm_tol(512), |i| {
                let a = i.t(Q8_0, &[256, 100]);
                let x = i.t(F32, &[256, 2]);
                i.ctx.mul_mat(&a, &x)
            });
            c.cpu_nmse = 5e-4; // the CPU rounds activations to Q8_0
            c
        },
    ];
    cases
}

/// In-place nodes (what the graph allocator makes of add, norm, soft_max... whose source
/// dies there): dst is src0's memory, so src0 is read through dst's binding.
#[test]
fn in_place_nodes() {
    let _shared = gpu::shared();
    for kernels in [MatMulKernels::PerRow, MatMulKernels::Workgroup] {
        let Some(b) = gpu(WebGpuOptions { mat_mul_kernels: kernels, ..Default::default() }) else { return };
        let ctx = new_ctx();
        let a = ctx.new_tensor_2d(F32, 37, 3);
        let c = ctx.new_tensor_2d(F32, 37, 1);
        let x = ctx.new_tensor_2d(F32, 37, 3);
        let s = ctx.add(&a, &c);
        let n = ctx.norm(&x, 1e-5);
        let m = ctx.soft_max(&ctx.scale(&a, 1.0)); // scale out of place, soft_max in place
        let leafs = [a.clone(), c.clone(), x.clone()];
        let bufs = ggweb::allocator::alloc_tensors(&leafs, &*b.buffer_type()).unwrap();
        let sc = m.src[0].clone().unwrap();
        let extra = ggweb::allocator::alloc_tensors(std::slice::from_ref(&sc), &*b.buffer_type()).unwrap();
        let (ad, xd, scd) = (a.data().unwrap(), x.data().unwrap(), sc.data().unwrap());
        s.set_data(ad.buffer.clone(), ad.offset);
        n.set_data(xd.buffer.clone(), xd.offset);
        m.set_data(scd.buffer.clone(), scd.offset);
        let mut rng = Rng::new(5);
        let av: Vec<f32> = (0..111).map(|_| rng.uniform(-2.0, 2.0)).collect();
        let cv: Vec<f32> = (0..37).map(|_| rng.uniform(-2.0, 2.0)).collect();
        let xv: Vec<f32> = (0..111).map(|_| rng.uniform(-2.0, 2.0)).collect();
        a.set_bytes(bytemuck::cast_slice(&av), 0);
        c.set_bytes(bytemuck::cast_slice(&cv), 0);
        x.set_bytes(bytemuck::cast_slice(&xv), 0);
        // soft_max reads `a` through scale before add overwrites it.
        let mut gf = Graph::new();
        gf.build_forward_expand(&m);
        gf.build_forward_expand(&s);
        gf.build_forward_expand(&n);
        b.graph_compute(&gf).unwrap();
        let read = |t: &Tensor| {
            let mut v = vec![0f32; 111];
            t.get_bytes(bytemuck::cast_slice_mut(&mut v), 0);
            v
        };
        let (sv, nv, mv) = (read(&s), read(&n), read(&m));
        for r in 0..3 {
            let row = &xv[37 * r..37 * (r + 1)];
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / 37.0;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 37.0;
            let ar = &av[37 * r..37 * (r + 1)];
            let mx = ar.iter().cloned().fold(f32::MIN, f32::max) as f64;
            let sum: f64 = ar.iter().map(|&v| (v as f64 - mx).exp()).sum();
            for (k, ck) in cv.iter().enumerate() {
                let i = 37 * r + k;
                assert_eq!(sv[i], av[i] + ck, "{kernels:?} add in place, element {i}");
                let want_n = (xv[i] as f64 - mean) / (var + 1e-5).sqrt();
                assert!((nv[i] as f64 - want_n).abs() < 1e-5, "{kernels:?} norm in place {i}: {} vs {want_n}", nv[i]);
                let want_m = (av[i] as f64 - mx).exp() / sum;
                assert!(
                    (mv[i] as f64 - want_m).abs() < 1e-6,
                    "{kernels:?} soft_max in place {i}: {} vs {want_m}",
                    mv[i]
                );
            }
        }
        drop((bufs, extra));
    }
}

/// All of a contiguous f32 tensor (any buffer).
fn read_f32(t: &Tensor) -> Vec<f32> {
    let mut v = vec![0f32; t.nelements() as usize];
    t.get_bytes(bytemuck::cast_slice_mut(&mut v), 0);
    v
}

/// The fused chains (crate/webgpu/fuse.rs) run as one dispatch each and give what the
/// unfused nodes give: bit for bit where the fused kernel does the same f32 operations in
/// the same order (scale+mask+softmax: x*s then -inf; add+gelu: the rounded sum), and
/// within 1 ulp-level 1e-6 for the layer norm, whose `y * w + b` a driver may contract into
/// an fma in one pipeline and not in the other. A chain does not fuse when an intermediate
/// is an output or has a second reader.
#[test]
fn fused_chains_are_one_dispatch_and_match_the_unfused_nodes() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    type Chain = fn(&Context, &[Tensor]) -> (Tensor, Vec<Tensor>);
    let chains: [(&str, Chain, u64, f32); 3] = [
        (
            "norm mul add",
            |ctx, x| {
                let n = ctx.norm(&x[0], 1e-5);
                let m = ctx.mul(&n, &x[1]);
                (ctx.add(&m, &x[2]), vec![n, m])
            },
            3,
            1e-6,
        ),
        (
            "scale diag_mask_inf soft_max",
            |ctx, x| {
                let s = ctx.scale(&x[0], 0.125);
                let d = ctx.diag_mask_inf(&s, 2);
                (ctx.soft_max(&d), vec![s, d])
            },
            3,
            0.0,
        ),
        (
            "add gelu",
            |ctx, x| {
                let a = ctx.add(&x[0], &x[1]);
                (ctx.gelu(&a), vec![a])
            },
            2,
            0.0,
        ),
    ];
    for (name, chain, n_nodes, tol) in chains {
        // unfused: 0 = fused; 1 = intermediates are outputs; 2 = the first one has a second reader.
        let run = |unfused: u8| -> (Vec<f32>, u64) {
            let ctx = new_ctx();
            let x = [ctx.new_tensor_2d(F32, 40, 6), ctx.new_tensor_1d(F32, 40), ctx.new_tensor_1d(F32, 40)];
            let (out, mids) = chain(&ctx, &x);
            let mut gf = Graph::new();
            gf.build_forward_expand(&out);
            match unfused {
                1 => mids.iter().for_each(|t| t.set_output()),
                // After the chain in node order: only the use count tells.
                2 => gf.build_forward_expand(&ctx.scale(&mids[0], 2.0)),
                _ => {}
            }
            let _bufs = alloc_ctx_tensors(&ctx, &*b.buffer_type()).unwrap();
            let mut rng = Rng::new(11);
            for t in &x {
                let v: Vec<f32> = (0..t.nelements()).map(|_| rng.uniform(-3.0, 3.0)).collect();
                t.set_bytes(bytemuck::cast_slice(&v), 0);
            }
            let before = b.stats().unwrap();
            b.graph_compute(&gf).unwrap();
            let d = b.stats().unwrap().since(&before);
            assert_eq!((d.submits, d.readbacks), (1, 0), "{name}: one submit, nothing read yet");
            (read_f32(&out), d.dispatches)
        };
        let (fused, n_fused) = run(0);
        let (plain, n_plain) = run(1);
        let (_, n_shared) = run(2);
        assert_eq!((n_fused, n_plain, n_shared), (1, n_nodes, n_nodes + 1), "{name}: dispatches");
        for (i, (f, p)) in fused.iter().zip(&plain).enumerate() {
            if tol == 0.0 {
                assert_eq!(f.to_bits(), p.to_bits(), "{name}: element {i}: fused {f} vs unfused {p}");
            } else {
                assert!((f - p).abs() <= tol * p.abs().max(1.0), "{name}: element {i}: fused {f} vs unfused {p}");
            }
        }
    }
}

/// Reads of a graph's outputs come from the copy recorded in the graph's own submit: one
/// read-back and no second submit; a write to the device in between makes the read take a
/// fresh copy (one more submit) and see the new bytes.
#[test]
fn outputs_are_read_back_from_the_graphs_own_submit() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let ctx = new_ctx();
    let x = ctx.new_tensor_1d(F32, 10);
    let y = ctx.scale(&x, 2.0);
    y.set_output();
    let mut gf = Graph::new();
    gf.build_forward_expand(&y);
    let _bufs = alloc_ctx_tensors(&ctx, &*b.buffer_type()).unwrap();
    let xv: Vec<f32> = (0..10).map(|i| i as f32).collect();
    x.set_bytes(bytemuck::cast_slice(&xv), 0);
    let s0 = b.stats().unwrap();
    b.graph_compute(&gf).unwrap();
    let mut out = vec![0u8; 12];
    pollster::block_on(b.read_tensor_async(&y, 8, &mut out)).unwrap();
    assert_eq!(out, bytemuck::cast_slice::<f32, u8>(&[4.0f32, 6.0, 8.0]));
    let d = b.stats().unwrap().since(&s0);
    assert_eq!((d.dispatches, d.submits, d.readbacks, d.readback_bytes), (1, 1, 1, 12));
    assert!(d.encode_ms > 0.0 && d.encode_ms < 1e4, "{}", d.encode_ms);
    // The prefetched copy is used once: a second read makes its own copy.
    let s1 = b.stats().unwrap();
    assert_eq!(read_f32(&y)[1], 2.0);
    let d = b.stats().unwrap().since(&s1);
    assert_eq!((d.submits, d.readbacks, d.readback_bytes), (1, 1, 40));
    // A write after the graph: the read sees it, through a copy of its own.
    b.graph_compute(&gf).unwrap();
    y.set_bytes(bytemuck::cast_slice(&[-1.0f32]), 0);
    let s2 = b.stats().unwrap();
    assert_eq!(read_f32(&y)[..2], [-1.0, 2.0]);
    assert_eq!(b.stats().unwrap().since(&s2).submits, 1);
}

/// An operand that cannot be split and exceeds the binding limit is a typed error naming
/// the node, not a device error or a panic.
#[test]
fn unsplittable_operand_above_the_limit_is_an_error() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions { max_binding_size_override: Some(4096), ..Default::default() }) else {
        return;
    };
    let ctx = new_ctx();
    let a = ctx.new_tensor_2d(F32, 64, 64); // 16 KiB
    let y = ctx.scale(&a, 2.0);
    y.set_name("big_scale");
    let mut gf = Graph::new();
    gf.build_forward_expand(&y);
    let _bufs = alloc_ctx_tensors(&ctx, &*b.buffer_type()).unwrap();
    match b.graph_compute(&gf) {
        Err(BackendError::Unsupported { node, reason }) => {
            assert_eq!(node, "big_scale");
            assert!(reason.contains("above the limit 4096"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

/// A buffer type capped at 64 KiB places two 40 KB tensors in two buffers; an op reads
/// both.
#[test]
fn tensors_in_several_buffers() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions { max_buffer_size_override: Some(64 << 10), ..Default::default() }) else {
        return;
    };
    let ctx = new_ctx();
    let x = ctx.new_tensor_1d(F32, 10_000);
    let y = ctx.new_tensor_1d(F32, 10_000);
    let bufs = alloc_ctx_tensors(&ctx, &*b.buffer_type()).unwrap();
    assert_eq!(bufs.len(), 2);
    let ctx2 = new_ctx();
    let s = ctx2.add(&x, &y);
    let mut gf = Graph::new();
    gf.build_forward_expand(&s);
    let _b2 = alloc_ctx_tensors(&ctx2, &*b.buffer_type()).unwrap();
    let xs: Vec<f32> = (0..10_000).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..10_000).map(|i| 0.5 * i as f32).collect();
    x.set_bytes(bytemuck::cast_slice(&xs), 0);
    y.set_bytes(bytemuck::cast_slice(&ys), 0);
    b.graph_compute(&gf).unwrap();
    let mut out = vec![0f32; 10_000];
    s.get_bytes(bytemuck::cast_slice_mut(&mut out), 0);
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, 1.5 * i as f32, "element {i}");
    }
}

/// set_bytes at unaligned offsets and lengths changes exactly those bytes.
#[test]
fn unaligned_writes_keep_neighbours() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let buf: Rc<dyn Buffer> = b.buffer_type().alloc_buffer(40).unwrap();
    buf.clear(0xAB);
    let mut want = vec![0xABu8; 40];
    for (off, len) in [(3usize, 7usize), (13, 1), (17, 2), (21, 16), (38, 2)] {
        let data: Vec<u8> = (0..len).map(|k| (off * 10 + k) as u8).collect();
        buf.set_bytes(off, &data);
        want[off..off + len].copy_from_slice(&data);
        let mut got = vec![0u8; 40];
        buf.get_bytes(0, &mut got);
        assert_eq!(got, want, "after writing {len} bytes at {off}");
    }
    // Reads at unaligned offsets too.
    let mut part = vec![0u8; 5];
    buf.get_bytes(6, &mut part);
    assert_eq!(part, want[6..11]);
}

/// The async read (the browser's path) returns the same bytes natively.
#[test]
fn read_tensor_async_matches_get_bytes() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let ctx = new_ctx();
    let t = ctx.new_tensor_1d(F32, 9);
    let _bufs = alloc_ctx_tensors(&ctx, &*b.buffer_type()).unwrap();
    let vals: Vec<f32> = (0..9).map(|i| i as f32 * 0.25 - 1.0).collect();
    t.set_bytes(bytemuck::cast_slice(&vals), 0);
    let mut out = vec![0u8; 20];
    pollster::block_on(b.read_tensor_async(&t, 8, &mut out)).unwrap();
    assert_eq!(out, bytemuck::cast_slice::<f32, u8>(&vals[2..7]));
    let err = pollster::block_on(b.read_tensor_async(&t, 30, &mut out)).unwrap_err();
    assert!(matches!(err, BackendError::Unsupported { .. }), "{err:?}");
}

/// Ops and types without kernels: supports_op says no, and graph_compute refuses them
/// with the node's name rather than computing garbage.
#[test]
fn unsupported_ops_are_reported() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let ctx = new_ctx();
    // Every weight type has kernels; Q8_1 and Q8_K (activation types only) do not.
    let q8_1 = ctx.new_tensor_2d(GgmlType::Q8_1, 64, 4);
    let x = ctx.new_tensor_2d(F32, 64, 2);
    let mm = ctx.mul_mat(&q8_1, &x);
    mm.set_name("mm_q8_1");
    let rows = ctx.get_rows(&ctx.new_tensor_2d(GgmlType::Q8_K, 256, 4), &ctx.new_tensor_1d(I32, 2));
    let h = ctx.new_tensor_2d(F16, 8, 8);
    let add_f16 = ctx.add(&h, &h);
    // A strided f16 destination has a kernel (the F16 KV cache's V store: cpy_cases).
    let strided_f16 = ctx.cpy(&ctx.new_tensor_2d(F32, 4, 8), &ctx.view_2d(&h, 4, 8, h.nb[1], 0));
    assert!(b.supports_op(&x) && b.supports_op(&ctx.transpose(&x)) && b.supports_op(&strided_f16));
    for n in [&mm, &rows, &add_f16] {
        assert!(!b.supports_op(n), "{n:?}");
    }
    let mut gf = Graph::new();
    gf.build_forward_expand(&mm);
    let _bufs = alloc_ctx_tensors(&ctx, &*b.buffer_type()).unwrap();
    match b.graph_compute(&gf) {
        Err(BackendError::Unsupported { node, reason }) => {
            assert_eq!(node, "mm_q8_1");
            assert!(reason.contains("q8_1"), "{reason}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

/// The adapter's limits are requested, not WebGPU's defaults, and the override lowers
/// them. (lavapipe offers 128 MiB bindings and 2 GiB buffers: GPT-2's 154 MB token_embd
/// needs the split path even natively.)
#[test]
fn limits_come_from_the_adapter() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let a = b.adapter().clone();
    eprintln!("adapter: {a:?}");
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default())).unwrap();
    let limits = adapter.limits();
    let align = b.buffer_type().alignment() as u64;
    assert_eq!(align, u64::from(limits.min_storage_buffer_offset_alignment).max(4));
    assert_eq!(a.max_binding_size, limits.max_storage_buffer_binding_size / align * align);
    assert_eq!(a.max_buffer_size, limits.max_buffer_size);
    assert!(a.max_buffer_size > 256 << 20, "above WebGPU's default maxBufferSize: {a:?}");
    assert_eq!(b.buffer_type().max_size() as u64, a.max_buffer_size);
    let Some(small) = gpu(WebGpuOptions { max_binding_size_override: Some(100_000), ..Default::default() }) else {
        return;
    };
    assert_eq!(small.adapter().max_binding_size, 100_000 / align * align);
}

/// GPT-2 124M's tied embedding at its real size: 768 x 50257 f32 = 154 MB, above
/// lavapipe's (and browsers' default) 128 MiB binding. get_rows and the logits mat-vec
/// must read it in parts with the adapter's own limits.
#[test]
fn gpt2_124m_embedding_above_128_mib() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let (n_embd, n_vocab) = (768usize, 50257usize);
    let ctx = new_ctx();
    let wte = ctx.new_tensor_2d(F32, n_embd as i64, n_vocab as i64);
    let tokens = ctx.new_tensor_1d(I32, 3);
    let x = ctx.new_tensor_2d(F32, n_embd as i64, 1);
    let rows = ctx.get_rows(&wte, &tokens);
    let logits = ctx.mul_mat(&wte, &x);
    let mut gf = Graph::new();
    gf.build_forward_expand(&rows);
    gf.build_forward_expand(&logits);
    assert!(wte.nbytes() as u64 > b.adapter().max_binding_size.min(128 << 20), "not above the binding limit");
    let _bufs = alloc_ctx_tensors(&ctx, &*b.buffer_type()).unwrap();
    let mut rng = Rng::new(124);
    let w: Vec<f32> = (0..n_embd * n_vocab).map(|_| rng.uniform(-0.1, 0.1)).collect();
    let xs: Vec<f32> = (0..n_embd).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let ids = [0i32, 50256, 31337];
    wte.set_bytes(bytemuck::cast_slice(&w), 0);
    x.set_bytes(bytemuck::cast_slice(&xs), 0);
    tokens.set_bytes(bytemuck::cast_slice(&ids), 0);
    b.graph_compute(&gf).unwrap();

    let mut got_rows = vec![0f32; 3 * n_embd];
    rows.get_bytes(bytemuck::cast_slice_mut(&mut got_rows), 0);
    for (r, &id) in ids.iter().enumerate() {
        let want = &w[id as usize * n_embd..(id as usize + 1) * n_embd];
        assert_eq!(&got_rows[r * n_embd..(r + 1) * n_embd], want, "row of token {id}");
    }
    let mut got = vec![0f32; n_vocab];
    logits.get_bytes(bytemuck::cast_slice_mut(&mut got), 0);
    for v in 0..n_vocab {
        let want: f64 = (0..n_embd).map(|k| w[v * n_embd + k] as f64 * xs[k] as f64).sum();
        // 768 products of magnitude <= 0.1 summed in f32.
        assert!((got[v] as f64 - want).abs() <= 2e-5, "logit {v}: {} vs {want}", got[v]);
    }
}

// ---------------------------------------------------------------- the real model

use crate::support::fixtures::{self, models_dir};

struct Reference {
    ids: Vec<u32>,
    /// One row of n_vocab per position.
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn hf_reference() -> Reference {
    let v = fixtures::hf_reference();
    let p = &v["prompts"][0];
    let nums =
        |x: &serde_json::Value| -> Vec<f64> { x.as_array().unwrap().iter().map(|n| n.as_f64().unwrap()).collect() };
    Reference {
        ids: nums(&p["ids"]).into_iter().map(|x| x as u32).collect(),
        logits: p["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| nums(r).into_iter().map(|x| x as f32).collect())
            .collect(),
        greedy: nums(&p["greedy_ids"]).into_iter().map(|x| x as u32).collect(),
    }
}

/// Loads a tiny GPT-2 GGUF with the project's streaming ModelLoader into `backend`'s
/// buffers, in odd-sized chunks (so tensor writes start and end mid-word), tokenizes the
/// reference prompt with the file's tokenizer and evaluates it: logits of every position.
fn run_tiny_gpt2(file: &str, backend: Rc<dyn Backend>) -> (ggweb::model::context::Gpt2, Vec<f32>) {
    run_tiny_gpt2_kv(file, backend, F32)
}

/// [`run_tiny_gpt2`] with a KV cache of `kv_type`.
fn run_tiny_gpt2_kv(
    file: &str,
    backend: Rc<dyn Backend>,
    kv_type: GgmlType,
) -> (ggweb::model::context::Gpt2, Vec<f32>) {
    use ggweb::model::context::Gpt2Options;
    use ggweb::model::loader::ModelLoader;
    let bytes = std::fs::read(models_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let opts = Gpt2Options { n_ctx: 0, n_batch: 32, n_threads: 1, kv_type };
    let mut loader = ModelLoader::new(backend, opts, ggweb::gguf::Limits::default(), Some(bytes.len() as u64));
    for chunk in bytes.chunks(65_537) {
        loader.feed(chunk).unwrap();
    }
    let loaded = loader.finish().unwrap();
    let ids = loaded.tokenizer.encode("Hello, my name is", false);
    assert_eq!(ids, hf_reference().ids, "the reference prompt's tokens");
    let mut model = loaded.model;
    let logits = model.eval(&ids, 0, true).unwrap();
    (model, logits)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The F32 model on WebGPU reproduces Hugging Face's logits at every position, and its
/// greedy continuation (one token at a time through the KV cache: the N = 1 kernels).
#[test]
fn tiny_gpt2_f32_matches_hugging_face() {
    let _shared = gpu::shared();
    for kernels in [MatMulKernels::PerRow, MatMulKernels::Workgroup] {
        let Some(b) = gpu(WebGpuOptions { mat_mul_kernels: kernels, ..Default::default() }) else { return };
        let r = hf_reference();
        let (mut model, logits) = run_tiny_gpt2("tiny-gpt2-f32.gguf", Rc::new(b));
        let n_vocab = 50257;
        for (pos, want) in r.logits.iter().enumerate() {
            let d = max_abs_diff(&logits[pos * n_vocab..(pos + 1) * n_vocab], want);
            eprintln!("{kernels:?} position {pos}: max |webgpu - hf| = {d:.2e}");
            // Exact-f32 everywhere (GELU included); only summation order differs from
            // PyTorch (measured: <= 4.4e-6).
            assert!(d < 5e-5, "{kernels:?} position {pos}: logits differ from HF by {d}");
        }
        let argmax =
            |l: &[f32]| l.iter().enumerate().fold((0, f32::MIN), |m, (i, &v)| if v > m.1 { (i, v) } else { m }).0;
        let mut next = argmax(&logits[(r.ids.len() - 1) * n_vocab..]) as u32;
        let mut generated = Vec::new();
        for n_past in r.ids.len()..r.ids.len() + r.greedy.len() {
            generated.push(next);
            next = argmax(&model.eval(&[next], n_past, false).unwrap()) as u32;
        }
        assert_eq!(generated, r.greedy, "{kernels:?}: greedy continuation");
    }
}

/// F16, Q8_0 and Q4_0 files: WebGPU against the CPU backend on the same file, and against
/// HF's (unquantized) logits within the file's own rounding.
#[test]
fn tiny_gpt2_f16_q8_0_q4_0_match_the_cpu_backend() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let r = hf_reference();
    let b: Rc<dyn Backend> = Rc::new(b);
    for file in ["tiny-gpt2-f16.gguf", "tiny-gpt2-q8_0.gguf", "tiny-gpt2-q4_0.gguf"] {
        let (_, gpu_logits) = run_tiny_gpt2(file, b.clone());
        let (_, cpu_logits) = run_tiny_gpt2(file, Rc::new(CpuBackend::new(1)));
        let want: Vec<f64> = cpu_logits.iter().map(|&x| x as f64).collect();
        let got: Vec<f64> = gpu_logits.iter().map(|&x| x as f64).collect();
        let e_cpu = nmse(&got, &want);
        let hf: Vec<f64> = r.logits.iter().flatten().map(|&x| x as f64).collect();
        let (e_hf_gpu, e_hf_cpu) = (nmse(&got, &hf), nmse(&want, &hf));
        eprintln!("{file}: NMSE webgpu vs cpu {e_cpu:.2e}, webgpu vs hf {e_hf_gpu:.2e}, cpu vs hf {e_hf_cpu:.2e}");
        // Bounds about 5x what was measured when written (in parentheses). The CPU rounds
        // activations to 8 bits for quantized weights (the WebGPU kernels keep f32), so
        // the two differ by that rounding; against HF the file's weight rounding dominates.
        let (max_cpu, max_hf) = match file {
            "tiny-gpt2-f16.gguf" => (1e-10, 2e-6), // (1.4e-13: summation order; 3.4e-7)
            "tiny-gpt2-q8_0.gguf" => (1e-3, 1e-3), // (1.9e-4; 1.9e-4)
            _ => (2e-3, 0.2),                      // q4_0 (3.1e-4; 4.2e-2)
        };
        assert!(e_cpu <= max_cpu, "{file}: NMSE webgpu vs CPU {e_cpu:e} > {max_cpu:e}");
        assert!(e_hf_gpu <= max_hf, "{file}: NMSE webgpu vs HF {e_hf_gpu:e} > {max_hf:e}");
    }
}

/// An F16 KV cache on WebGPU (the strided f32 -> f16 V store, mul_mat over F16 cache
/// views) against the CPU's F16 cache: the prompt at every position, then a greedy
/// continuation one token at a time (odd positions: half-word stores).
#[test]
fn tiny_gpt2_f16_kv_matches_the_cpu_f16_kv() {
    let _shared = gpu::shared();
    for kernels in [MatMulKernels::PerRow, MatMulKernels::Workgroup] {
        let Some(b) = gpu(WebGpuOptions { mat_mul_kernels: kernels, ..Default::default() }) else { return };
        let r = hf_reference();
        let (mut gm, gpu_logits) = run_tiny_gpt2_kv("tiny-gpt2-f32.gguf", Rc::new(b), F16);
        let (mut cm, cpu_logits) = run_tiny_gpt2_kv("tiny-gpt2-f32.gguf", Rc::new(CpuBackend::new(1)), F16);
        assert_eq!((gm.kv.ty, gm.memory_plan().kv), (F16, 2 * 2 * 64 * 128 * 2));
        let d = max_abs_diff(&gpu_logits, &cpu_logits);
        eprintln!("{kernels:?}: prompt, max |webgpu f16 KV - cpu f16 KV| = {d:.2e}");
        // Both round the same K/V to f16; the f32 inputs differ by summation order (~1e-6),
        // which can move a stored value across an f16 rounding boundary (one ulp, 2^-11
        // relative). Measured: 8.6e-6 at most; 1e-4 is the F32 path's own bound vs HF.
        assert!(d < 1e-4, "{kernels:?}: prompt logits differ by {d}");
        let argmax =
            |l: &[f32]| l.iter().enumerate().fold((0, f32::MIN), |m, (i, &v)| if v > m.1 { (i, v) } else { m }).0;
        let n_vocab = 50257;
        let mut next = argmax(&gpu_logits[(r.ids.len() - 1) * n_vocab..]) as u32;
        let mut generated = Vec::new();
        for n_past in r.ids.len()..r.ids.len() + r.greedy.len() {
            generated.push(next);
            let (g, c) = (gm.eval(&[next], n_past, false).unwrap(), cm.eval(&[next], n_past, false).unwrap());
            let d = max_abs_diff(&g, &c);
            assert!(d < 1e-4, "{kernels:?}: token at {n_past}: logits differ by {d}");
            next = argmax(&g) as u32;
        }
        assert_eq!(generated, r.greedy, "{kernels:?}: greedy continuation with an F16 KV cache");
    }
}

/// This file's reference dequantizer agrees with `ggweb::quants` on the random blocks the
/// cases use (two independent readings of ggml's layouts).
#[test]
fn reference_dequantizer_matches_quants() {
    let _shared = gpu::shared();
    let mut rng = Rng::new(99);
    for ty in [F16, Q8_0, Q4_0, Q4_K, Q6_K] {
        let n = 2 * QK_K;
        let bytes = random_bytes(&mut rng, ty, n, -1.0, 1.0);
        let mine = dequant_row(ty, &bytes, n);
        let mut theirs = vec![0f32; n];
        ggweb::quants::dequantize_row(ty, &bytes, &mut theirs);
        for (i, (a, b)) in mine.iter().zip(&theirs).enumerate() {
            assert_eq!(*a as f32, *b, "{ty} element {i}");
        }
    }
}

/// Every kernel module parses and validates with naga (wgpu's own shader compiler), no
/// device needed: this runs where there is no adapter too.
#[test]
fn every_kernel_module_validates() {
    let _shared = gpu::shared();
    use wgpu::naga;
    let modules = ggweb::webgpu::kernel_sources();
    assert_eq!(modules.len(), 5 + 3 * 13);
    for (name, src) in modules {
        let module =
            naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
        // unpack2x16float is core WebGPU (naga files it under a capability); nothing else,
        // in particular not SHADER_FLOAT16 (shader-f16), is needed.
        let caps = naga::valid::Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
        assert!(module.entry_points.iter().all(|e| e.stage == naga::ShaderStage::Compute), "{name}");
    }
}

/// Operands the device cannot read (host memory, nothing allocated) are typed errors
/// naming the node, before anything is submitted.
#[test]
fn operands_outside_webgpu_buffers_are_errors() {
    let _shared = gpu::shared();
    let Some(b) = gpu(WebGpuOptions::default()) else { return };
    let ctx = new_ctx();
    let host = ctx.new_tensor_1d(F32, 8);
    let dev = ctx.new_tensor_1d(F32, 8);
    let unplaced = ctx.new_tensor_1d(F32, 8);
    let _h = ggweb::allocator::alloc_tensors(std::slice::from_ref(&host), &CpuBufferType).unwrap();
    let _d = ggweb::allocator::alloc_tensors(std::slice::from_ref(&dev), &*b.buffer_type()).unwrap();
    for (src, want) in [(&host, "in a CPU buffer, not WebGPU"), (&unplaced, "is not allocated")] {
        let y = ctx.add(&dev, src);
        y.set_name("mixed_add");
        let _y = ggweb::allocator::alloc_tensors(std::slice::from_ref(&y), &*b.buffer_type()).unwrap();
        let mut gf = Graph::new();
        gf.build_forward_expand(&y);
        match b.graph_compute(&gf) {
            Err(BackendError::Unsupported { node, reason }) => {
                assert_eq!(node, "mixed_add");
                assert!(reason.contains(want), "{reason}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}
