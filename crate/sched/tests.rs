//! The five passes on small hand-built graphs, with every assignment and split spelled out.
//! "GPU" is a [`HostBackend`] (host memory of its own buffer type, no GELU); every
//! backend here refuses memory of another type, so a missing copy fails the run.

use alloc::rc::Rc;
use alloc::string::ToString;
use alloc::vec::Vec;
use alloc::{format, vec};

#[path = "../../tests/support/host_backend.rs"]
mod host_backend;

use super::Cause::*;
use super::*;
use crate::allocator::alloc_tensors;
use crate::types::GgmlType::F32;
use host_backend::HostBackend;

fn gpu() -> Rc<dyn Backend> {
    Rc::new(HostBackend::new("GPU", "GPU", |n| n.op != Op::Gelu))
}
fn cpu() -> Rc<dyn Backend> {
    Rc::new(HostBackend::new("CPU", "CPU", |_| true))
}
/// Shares the CPU's buffer type and runs only mul_mat (like ggml's BLAS backend).
fn blas() -> Rc<dyn Backend> {
    Rc::new(HostBackend::new("BLAS", "CPU", |n| n.op == Op::MulMat))
}

fn ctx() -> Context {
    Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true })
}

/// A weight named `name` in a buffer of `backend`'s type, filled with a fixed pattern.
fn weight(ctx: &Context, backend: &Rc<dyn Backend>, name: &str, ne: &[i64], seed: f32) -> (Tensor, Rc<dyn Buffer>) {
    let t = ctx.new_tensor(F32, ne);
    t.set_name(name);
    let buf = alloc_tensors(core::slice::from_ref(&t), &*backend.buffer_type()).unwrap().remove(0);
    let v: Vec<f32> = (0..t.nelements()).map(|i| libm::sinf(i as f32 * 0.37 + seed) * 0.8).collect();
    t.set_bytes(bytemuck::cast_slice(&v), 0);
    (t, buf)
}

fn named(t: Tensor, name: &str) -> Tensor {
    t.set_name(name);
    t
}

fn assignments(s: &Sched, ts: &[Tensor]) -> Vec<(String, &'static str, Cause)> {
    ts.iter()
        .map(|t| {
            let a = s.assignment(t).unwrap_or_else(|| panic!("'{}' unassigned", t.name()));
            (t.name(), if a.backend == 0 { "GPU" } else { "CPU" }, a.cause)
        })
        .collect()
}

fn to_vec(t: &Tensor) -> Vec<f32> {
    let mut v = vec![0f32; t.nelements() as usize];
    t.get_bytes(bytemuck::cast_slice_mut(&mut v), 0);
    v
}

struct Twelve {
    gf: Graph,
    x: Tensor,
    nodes: [Tensor; 12],
    _ctx: Context,
    _bufs: Vec<Rc<dyn Buffer>>,
}

/// Twelve nodes over two layers: layer 0's weights in `layer0`'s memory, layer 1's in
/// `layer1`'s, a GELU between them, and a view (n7) read across the boundary.
fn twelve(layer0: &Rc<dyn Backend>, layer1: &Rc<dyn Backend>) -> Twelve {
    let ctx = ctx();
    let x = named(ctx.new_tensor_2d(F32, 4, 3), "x");
    x.set_input();
    let (w0, b0buf) = weight(&ctx, layer0, "w0", &[4, 4], 0.1);
    let (b0, b1buf) = weight(&ctx, layer0, "b0", &[4], 0.2);
    let (w1, b2buf) = weight(&ctx, layer1, "w1", &[4, 4], 0.3);
    let (b1, b3buf) = weight(&ctx, layer1, "b1", &[4], 0.4);
    let (w2, b4buf) = weight(&ctx, layer0, "w2", &[4, 4], 0.5);

    let n0 = named(ctx.mul_mat(&w0, &x), "n0");
    let n1 = named(ctx.add(&n0, &b0), "n1");
    let n2 = named(ctx.scale(&n1, 0.5), "n2");
    let n3 = named(ctx.mul_mat(&w1, &n2), "n3");
    let n4 = named(ctx.gelu(&n3), "n4");
    let n5 = named(ctx.add(&n4, &b1), "n5");
    let n6 = named(ctx.norm(&n5, 1e-5), "n6");
    let n7 = named(ctx.view_2d(&n6, 4, 2, n6.nb[1], n6.nb[1]), "n7"); // rows 1 and 2
    let n8 = named(ctx.cont(&n7), "n8");
    let n9 = named(ctx.mul_mat(&w2, &n8), "n9");
    let n10 = named(ctx.scale(&n9, 2.0), "n10");
    let n11 = named(ctx.add(&n10, &n7), "n11");
    let mut gf = Graph::new();
    gf.build_forward_expand(&n11);
    let nodes = [n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11];
    assert_eq!(gf.nodes, nodes);
    // Depth first from n11, sources in order: n9's w2 comes first.
    assert_eq!(gf.leafs, vec![w2, w1, w0, x.clone(), b0, b1]);
    Twelve { gf, x, nodes, _ctx: ctx, _bufs: vec![b0buf, b1buf, b2buf, b3buf, b4buf] }
}

const X: [f32; 12] = [0.5, -1.0, 2.0, 0.25, 1.5, 0.0, -0.5, 1.0, -2.0, 0.75, 0.125, 3.0];

/// The seed's Figure 16 in spirit: layer 0 on the CPU, layer 1 on the GPU, pass by pass.
#[test]
fn five_passes_on_twelve_nodes() {
    let (g, c) = (gpu(), cpu());
    let t = twelve(&c, &g);
    let gf = &t.gf;
    let mut s = Sched::new(vec![g.clone(), c.clone()]).unwrap();
    s.split_graph(gf).unwrap();
    let want = [
        ("n0", "CPU", Weight),     // 1: reads w0
        ("n1", "CPU", Weight),     // 1: reads b0
        ("n2", "GPU", GpuUp),      // 2: after n1 (CPU) going down, so only the upward spread from n3 reaches it
        ("n3", "GPU", Weight),     // 1: reads w1
        ("n4", "CPU", BestInputs), // 2 passes it by (no GELU on the GPU); 3: the only backend that runs it
        ("n5", "GPU", Weight),     // 1: reads b1
        ("n6", "GPU", GpuDown),    // 2: after n5
        ("n7", "GPU", ViewSrc),    // 4: a view, where n6 is
        ("n8", "GPU", GpuDown),    // 2: the spread steps over the view n7
        ("n9", "CPU", Weight),     // 1: reads w2
        ("n10", "CPU", RestDown),  // 2: the CPU spreads once the GPU has
        ("n11", "CPU", RestDown),
    ];
    let want: Vec<(String, &str, Cause)> = want.iter().map(|&(n, b, c)| (n.into(), b, c)).collect();
    assert_eq!(assignments(&s, &t.nodes), want);
    let leafs = [("w2", "CPU", Placed), ("w1", "GPU", Placed), ("w0", "CPU", Placed)];
    let leafs2 = [("x", "CPU", Input), ("b0", "CPU", Placed), ("b1", "GPU", Placed)];
    let want: Vec<(String, &str, Cause)> = leafs.iter().chain(&leafs2).map(|&(n, b, c)| (n.into(), b, c)).collect();
    assert_eq!(assignments(&s, &gf.leafs), want);

    // Pass 5: a split wherever the backend changes (the view n7 starts none), and a copy
    // of every source the split's backend cannot read; n7 is copied as its view_src n6.
    let splits: Vec<(usize, Range<usize>, Vec<usize>)> =
        s.splits().iter().map(|sp| (sp.backend, sp.nodes.clone(), sp.inputs.clone())).collect();
    assert_eq!(
        splits,
        vec![(1, 0..2, vec![]), (0, 2..4, vec![0]), (1, 4..5, vec![1]), (0, 5..9, vec![2]), (1, 9..12, vec![3, 4])]
    );
    let copies: Vec<(String, String, usize)> =
        s.copies().iter().map(|c| (c.src.name(), c.copy.name(), c.backend)).collect();
    let want_copies =
        [("n1", "GPU#n1", 0), ("n3", "CPU#n3", 1), ("n4", "GPU#n4", 0), ("n8", "CPU#n8", 1), ("n6", "CPU#n6", 1)];
    let want_copies: Vec<(String, String, usize)> =
        want_copies.iter().map(|&(a, b, k)| (a.into(), b.into(), k)).collect();
    assert_eq!(copies, want_copies);
    for c in s.copies() {
        assert_eq!((c.copy.ne, c.copy.nb, c.copy.flags()), (c.src.ne, c.src.nb, flags_io()));
    }

    // Reserve once, allocate, run.
    s.reserve(gf).unwrap();
    assert_eq!((s.galloc().n_reserves(), s.galloc().n_buffer_allocs()), (1, 2));
    assert!(s.compute_buffer_size(0) > 0 && s.compute_buffer_size(1) > 0);
    s.alloc_graph(gf).unwrap();
    s.check_placement().unwrap();
    t.x.set_bytes(bytemuck::cast_slice(&X), 0);
    s.graph_compute(gf).unwrap();
    let bytes = 4 * (12 + 12 + 12 + 8 + 12); // n1, n3, n4 [4,3]; n8 [4,2]; n6 [4,3]
    assert_eq!(s.last_run(), RunStats { splits: 5, copies: 5, copy_bytes: bytes });
    assert_eq!((s.galloc().n_reserves(), s.galloc().n_buffer_allocs()), (1, 2));
    // The tensors pointed at their copies during a split are back in their own memory.
    for c in s.copies() {
        let name = c.src.data().unwrap().buffer.buffer_type_name().to_string();
        assert_eq!(name, if c.backend == 0 { "CPU" } else { "GPU" });
    }
    let split_out = to_vec(&t.nodes[11]);

    // The same graph with every weight on the CPU, on the CPU alone: the same bits.
    let r = twelve(&c, &c);
    let mut one = Sched::new(vec![c.clone()]).unwrap();
    one.alloc_graph(&r.gf).unwrap();
    r.x.set_bytes(bytemuck::cast_slice(&X), 0);
    one.graph_compute(&r.gf).unwrap();
    assert_eq!(one.last_run(), RunStats { splits: 1, copies: 0, copy_bytes: 0 });
    let cpu_out = to_vec(&r.nodes[11]);
    assert_eq!(split_out, cpu_out);
    assert!(cpu_out.iter().all(|v| v.is_finite()) && cpu_out.iter().any(|&v| v != 0.0));
}

fn flags_io() -> u32 {
    crate::tensor::flags::INPUT | crate::tensor::flags::OUTPUT
}

/// Pass 3: a node the CPU got by spreading moves to BLAS (same buffer type, runs
/// mul_mat, reads both sources where they are); nothing is copied, and BLAS and the CPU
/// share one compute buffer.
#[test]
fn upgrade_to_a_backend_of_the_same_buffer_type() {
    let (g, b, c) = (gpu(), blas(), cpu());
    let ctx = ctx();
    let x = named(ctx.new_tensor_2d(F32, 4, 3), "x");
    x.set_input();
    let (wc, _buf) = weight(&ctx, &c, "wc", &[4], 0.7);
    let n0 = named(ctx.mul(&x, &wc), "n0");
    let n1 = named(ctx.mul_mat(&n0, &n0), "n1"); // [3, 3]
    let n2 = named(ctx.gelu(&n1), "n2");
    let mut gf = Graph::new();
    gf.build_forward_expand(&n2);

    let mut s = Sched::new(vec![g, b, c]).unwrap();
    s.split_graph(&gf).unwrap();
    let got: Vec<(String, usize, Cause)> = [&x, &wc, &n0, &n1, &n2]
        .iter()
        .map(|t| {
            let a = s.assignment(t).unwrap();
            (t.name(), a.backend, a.cause)
        })
        .collect();
    let want = [
        ("x", 2, Input),
        ("wc", 1, Placed),  // the first backend that reads CPU memory (a leaf runs nowhere)
        ("n0", 2, Weight),  // BLAS reads wc but runs no MUL
        ("n1", 1, Upgrade), // the CPU's by spreading, then upgraded
        ("n2", 2, RestDown),
    ];
    let want: Vec<(String, usize, Cause)> = want.iter().map(|&(n, b, c)| (n.into(), b, c)).collect();
    assert_eq!(got, want);
    let splits: Vec<(usize, Range<usize>, usize)> =
        s.splits().iter().map(|sp| (sp.backend, sp.nodes.clone(), sp.inputs.len())).collect();
    assert_eq!(splits, vec![(2, 0..1, 0), (1, 1..2, 0), (2, 2..3, 0)]);
    assert!(s.copies().is_empty());

    s.alloc_graph(&gf).unwrap();
    let xv = X;
    x.set_bytes(bytemuck::cast_slice(&xv), 0);
    s.graph_compute(&gf).unwrap();
    assert_eq!(s.last_run(), RunStats { splits: 3, copies: 0, copy_bytes: 0 });
    // One buffer for BLAS and the CPU (id 2 shares id 1's), none needed on the GPU.
    assert_eq!(s.compute_buffer_size(0), 0);
    assert!(s.compute_buffer_size(1) > 0);
    assert_eq!(s.compute_buffer_size(2), 0);
    // n1[i, j] = sum_k n0[k, i] n0[k, j], n0 = x * wc: checked by hand through f64.
    let wv = to_vec(&wc);
    let n0v: Vec<f64> = (0..12).map(|i| xv[i] as f64 * wv[i % 4] as f64).collect();
    let got = to_vec(&n2);
    for i in 0..3 {
        for j in 0..3 {
            let dot: f64 = (0..4).map(|k| n0v[4 * i + k] * n0v[4 * j + k]).sum();
            let want = crate::cpu::gelu_f32(dot as f32);
            assert!((got[3 * j + i] - want).abs() < 1e-5, "n2[{i},{j}] = {} vs {want}", got[3 * j + i]);
        }
    }
}

/// Tensors placed beforehand (a cache on the GPU) pull the nodes that write into them and
/// the views of them to the GPU; the input is copied up.
#[test]
fn placed_tensors_pull_their_writers_and_views() {
    let (g, c) = (gpu(), cpu());
    let ctx = ctx();
    let x = named(ctx.new_tensor_1d(F32, 4), "x");
    x.set_input();
    let (cache, _buf) = weight(&ctx, &g, "cache", &[8], 0.0);
    cache.set_bytes(&[0u8; 32], 0);
    let s0 = named(ctx.scale(&x, 3.0), "s0");
    let dst = named(ctx.view_1d(&cache, 4, 16), "dst"); // the second half
    let cp = named(ctx.cpy(&s0, &dst), "cp");
    let mut gf = Graph::new();
    gf.build_forward_expand(&cp);

    let mut s = Sched::new(vec![g, c]).unwrap();
    s.alloc_graph(&gf).unwrap();
    let got: Vec<(String, usize, Cause)> = [&x, &cache, &s0, &dst, &cp]
        .iter()
        .map(|t| {
            let a = s.assignment(t).unwrap();
            (t.name(), a.backend, a.cause)
        })
        .collect();
    let want = [("x", 1, Input), ("cache", 0, Placed), ("s0", 0, GpuUp), ("dst", 0, Placed), ("cp", 0, Placed)];
    let want: Vec<(String, usize, Cause)> = want.iter().map(|&(n, b, c)| (n.into(), b, c)).collect();
    assert_eq!(got, want);
    assert_eq!(s.splits().len(), 1);
    x.set_bytes(bytemuck::cast_slice(&[1f32, 2.0, -3.0, 0.5]), 0);
    s.graph_compute(&gf).unwrap();
    assert_eq!(s.last_run(), RunStats { splits: 1, copies: 1, copy_bytes: 16 });
    assert_eq!(to_vec(&cache), [0.0, 0.0, 0.0, 0.0, 3.0, 6.0, -9.0, 1.5]);
}

/// A node no backend runs is a typed error naming it.
#[test]
fn a_node_no_backend_runs_is_an_error() {
    let ctx = ctx();
    let x = named(ctx.new_tensor_2d(F32, 4, 2), "x");
    x.set_input();
    let y = named(ctx.soft_max_ext(&x, None, 1.0, 8.0), "alibi"); // ALiBi: no CPU kernel
    let mut gf = Graph::new();
    gf.build_forward_expand(&y);
    let mut s = Sched::new(vec![gpu(), cpu()]).unwrap();
    match s.split_graph(&gf) {
        Err(BackendError::Unsupported { node, reason }) => {
            assert_eq!(node, "'alibi' (SOFT_MAX)");
            assert_eq!(reason, "no backend runs it (GPU, CPU)");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let msg = format!("{}", s.alloc_graph(&gf).unwrap_err());
    assert!(msg.contains("alibi"), "{msg}");
}

/// A missing copy is caught by the backends themselves (what the tests above rely on).
#[test]
fn host_backends_refuse_other_memory() {
    let (g, c) = (gpu(), cpu());
    let ctx = ctx();
    let (w, _buf) = weight(&ctx, &c, "w", &[4], 0.0);
    let y = named(ctx.scale(&w, 2.0), "y");
    let mut gf = Graph::new();
    gf.build_forward_expand(&y);
    let _ybuf = alloc_tensors(core::slice::from_ref(&y), &*g.buffer_type()).unwrap();
    let err = g.graph_compute(&gf).unwrap_err();
    assert_eq!(
        err,
        BackendError::Unsupported {
            node: "y".into(),
            reason: "operand 'w' is in a CPU buffer; GPU reads only GPU buffers".into()
        }
    );
}

/// The eval callback sees every tensor as the graph is split; the ones it asks for are kept
/// alive to the end of the run (flag OUTPUT) and listed in graph order, on whichever backend
/// computed them, with the values a graph that marked them outputs itself gives.
#[test]
fn the_eval_callback_keeps_and_lists_the_nodes_it_asks_for() {
    let (g, c) = (gpu(), cpu());
    let run = |observe: bool| {
        let t = twelve(&c, &g);
        let mut s = Sched::new(vec![g.clone(), c.clone()]).unwrap();
        let asked = Rc::new(core::cell::Cell::new(0));
        if observe {
            let seen = asked.clone();
            s.set_eval_callback(Some(Box::new(move |t| {
                seen.set(seen.get() + 1);
                ["n4", "n2", "x"].contains(&t.name().as_str())
            })));
        } else {
            for i in [2, 4] {
                t.nodes[i].set_output();
            }
            t.x.set_output();
        }
        s.alloc_graph(&t.gf).unwrap();
        t.x.set_bytes(bytemuck::cast_slice(&X), 0);
        s.graph_compute(&t.gf).unwrap();
        let names: Vec<String> = s.observed().iter().map(|t| t.name()).collect();
        let values: Vec<Vec<f32>> = [&t.x, &t.nodes[2], &t.nodes[4]]
            .iter()
            .map(|t| {
                let mut v = vec![0f32; t.nelements() as usize];
                crate::model::context::block_on(s.tensor_get(t, bytemuck::cast_slice_mut(&mut v))).unwrap();
                v
            })
            .collect();
        let flags = [t.x.is_output(), t.nodes[2].is_output(), t.nodes[4].is_output()];
        (names, values, flags, asked.get(), t.gf.leafs.len() + t.gf.nodes.len())
    };
    let (names, values, flags, asked, n) = run(true);
    assert_eq!(names, ["x", "n2", "n4"], "leafs first, then nodes in order");
    assert_eq!(flags, [true; 3]);
    assert_eq!(asked, n, "asked once about every leaf and node");
    let (none, want, _, _, _) = run(false);
    assert!(none.is_empty());
    assert_eq!(values, want);
    assert_eq!(values[0], X);
}
