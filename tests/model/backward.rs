//! The backward pass through GPT-2's own graph (`model/gpt2.rs`'s `build_graph_with`) on the
//! tiny random F32 model: the gradient of a logit difference at the last position with
//! respect to the token embeddings (the node `inp_embd`), the residual stream after block 0
//! (`l0.l_out`) and the embedding table itself, against central finite differences of the
//! whole forward pass; the forward part's logits bit-identical to a plain decode's; and
//! every node, gradients included, planned by gallocr in one compute buffer.

use std::rc::Rc;

use ggweb::allocator::Gallocr;
use ggweb::backend::Backend;
use ggweb::cpu::repack_buffer::{is_packed, Repack};
use ggweb::cpu::{CpuBackend, CpuBufferType};
use ggweb::model::context::{block_on, Batch, Gpt2, Gpt2Options};
use ggweb::model::gpt2::{build_graph_with, GraphIo, Ubatch};
use ggweb::model::loader::load_from_path;
use ggweb::{Context, ContextParams, GgmlType, Graph, Tensor};

use crate::support::fixtures;

/// Distinct tokens (so a row of the table feeds one position).
const PROMPT: [u32; 6] = [464, 2068, 7586, 21831, 18045, 625];
const ANSWER: usize = 262;
const AGAINST: usize = 13;

fn model() -> Gpt2 {
    let path = fixtures::models_dir().join("tiny-gpt2-f32.gguf");
    load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), Gpt2Options::default()).unwrap().model
}

/// A graph of the last position's logits (from block `start` on a residual input when
/// given), its metric logits[ANSWER] − logits[AGAINST] as mul(logits, w) with w = ±1 there
/// (a backward pass seeds it with ones: the sum), in a context of its own.
struct Run {
    /// The graph: the run's copies into the KV cache, then the metric.
    gf: Graph,
    io: GraphIo,
    ctx: Context,
    w: Tensor,
    metric: Tensor,
}

fn build(m: &Gpt2, start: Option<usize>) -> Run {
    let n = PROMPT.len();
    let mut io = build_graph_with(&m.hparams, &m.weights, &m.kv, Ubatch { start, ..Ubatch::at(0, n, 1) }, &[]);
    let ctx = Context::new(ContextParams { mem_size: 8 << 20, no_alloc: true });
    let w = ctx.new_tensor_2d(GgmlType::F32, m.hparams.n_vocab as i64, 1);
    w.set_name("metric_w");
    w.set_input();
    let metric = ctx.mul(&io.logits, &w);
    metric.set_name("metric");
    metric.set_output();
    let mut gf = std::mem::take(&mut io.graph);
    gf.build_forward_expand(&metric);
    Run { gf, io, ctx, w, metric }
}

/// Plans `gf` in one CPU compute buffer, fills the inputs, runs it; the buffer's planner.
fn run(r: &Run, resid: Option<&[f32]>, m: &Gpt2) -> Gallocr {
    let gf = &r.gf;
    let mut galloc = Gallocr::new_single(Rc::new(CpuBufferType));
    galloc.reserve(gf).unwrap();
    galloc.alloc_graph(gf).unwrap();
    let mut w = vec![0f32; m.hparams.n_vocab];
    (w[ANSWER], w[AGAINST]) = (1.0, -1.0);
    r.w.set_f32_slice(&w);
    if gf.contains(&r.io.tokens) {
        r.io.tokens.set_i32_slice(&PROMPT.map(|t| t as i32));
        r.io.positions.set_i32_slice(&(0..PROMPT.len() as i32).collect::<Vec<_>>());
    }
    if let (Some(t), Some(v)) = (&r.io.resid, resid) {
        t.set_f32_slice(v);
    }
    if gf.contains(&r.io.kq_mask) {
        // One sequence at positions 0..n: query q sees keys 0..=q.
        let n = PROMPT.len();
        let mask: Vec<f32> =
            (0..n).flat_map(|q| (0..n).map(move |k| if k <= q { 0.0 } else { f32::NEG_INFINITY })).collect();
        r.io.kq_mask.set_f32_slice(&mask);
    }
    CpuBackend::new(1).graph_compute(gf).unwrap();
    galloc
}

fn metric(r: &Run) -> f64 {
    r.metric.to_f32_vec().iter().map(|&v| v as f64).sum()
}

/// The central difference of the metric over each of `n_checks` elements of `values`
/// (spread evenly), by `eval(perturbed values)`, against `grad`. Tolerance: the forward is
/// f32 through two blocks of layer norm, softmax and GELU with logits of O(1); a step of
/// 1e-2 gives a truncation error eps²/6·|f'''| of ~1e-5 and a rounding error of
/// ~1e-7·|logit|/(2·eps) ~ 1e-5: 2e-3 of the largest gradient plus 1e-2 relative
/// (a wrong gradient term is off by O(its size)).
fn check_fd(what: &str, values: &[f32], grad: &[f32], n_checks: usize, mut eval: impl FnMut(&[f32]) -> f64) {
    assert_eq!(values.len(), grad.len(), "{what}");
    let gmax = grad.iter().fold(0f32, |a, &g| a.max(g.abs())) as f64;
    assert!(gmax > 1e-3, "{what}: the gradient is ~0 ({gmax}): nothing would be checked");
    let eps = 1e-2f32;
    let step = values.len().div_ceil(n_checks);
    let mut v = values.to_vec();
    for k in (0..values.len()).step_by(step) {
        let (xp, xm) = (values[k] + eps, values[k] - eps);
        v[k] = xp;
        let fp = eval(&v);
        v[k] = xm;
        let fm = eval(&v);
        v[k] = values[k];
        let fd = (fp - fm) / (xp as f64 - xm as f64);
        let g = grad[k] as f64;
        assert!(
            (g - fd).abs() <= 2e-3 * gmax + 1e-2 * fd.abs(),
            "{what}[{k}]: gradient {g} vs central difference {fd} (largest gradient {gmax})"
        );
    }
}

#[test]
fn gradients_of_a_logit_difference_match_finite_differences_of_the_whole_forward() {
    let mut m = model();
    let mut r = build(&m, None);
    let gf = &mut r.gf;
    // The forward nodes whose values the differences start from, and the params.
    let embd = gf.get_tensor("inp_embd").expect("inp_embd");
    let inp_l = gf.get_tensor("inpL").expect("inpL");
    let resid = gf.get_tensor("l0.l_out").expect("l0.l_out");
    let table = m.weights.token_embd.clone();
    for t in [&embd, &resid] {
        t.set_param();
        t.set_output();
    }
    inp_l.set_output();
    table.set_param();
    let n_fwd = gf.nodes.len();
    gf.build_backward_expand(&r.ctx, &r.metric);
    let gf = &r.gf;
    assert!(gf.nodes.len() > 2 * n_fwd, "{} nodes after {n_fwd} forward ones", gf.nodes.len());
    for (t, name) in [(&embd, "inp_embd.grad"), (&resid, "l0.l_out.grad")] {
        assert_eq!(gf.grad(t).unwrap().name(), name);
        assert!(gf.get_tensor(name).is_some(), "{name} by name");
    }
    let galloc = run(&r, None, &m);
    let (g_embd, g_resid, g_table) =
        (gf.grad(&embd).unwrap().to_f32_vec(), gf.grad(&resid).unwrap().to_f32_vec(), gf.grad(&table).unwrap());
    let m0 = metric(&r);
    let (inp_l_v, resid_v) = (inp_l.to_f32_vec(), resid.to_f32_vec());

    // The forward part is the forward pass: the same logits, bit for bit, as a plain decode.
    let logits = r.io.logits.to_f32_vec();
    let plain = block_on(m.decode(Batch::last(&PROMPT, 0))).unwrap().logits;
    assert!(plain == logits, "the backward graph's logits differ from a decode's");
    assert_eq!(m0, logits[ANSWER] as f64 - logits[AGAINST] as f64);
    // Gradients and activations share one planned buffer, smaller than every tensor apart.
    let own: usize = gf.nodes.iter().filter(|t| t.view_src.is_none()).map(|t| t.nbytes()).sum();
    assert!(galloc.buffer_size(0) < own, "planned {} of {own} bytes", galloc.buffer_size(0));
    drop(galloc);

    // d/d inp_embd: the same as d/d inpL (inpL = inp_embd + inp_pos_embd), by differences of
    // the graph that starts at block 0 from inpL.
    let r0 = build(&m, Some(0));
    check_fd("d/d inp_embd", &inp_l_v, &g_embd, 48, |v| {
        run(&r0, Some(v), &m);
        metric(&r0)
    });
    // d/d l0.l_out: from block 1.
    let r1 = build(&m, Some(1));
    check_fd("d/d l0.l_out", &resid_v, &g_resid, 48, |v| {
        run(&r1, Some(v), &m);
        metric(&r1)
    });
    // d/d token_embd: the rows of the prompt's tokens (get_rows_back; through the output
    // head too where the model ties it), by differences of the whole forward.
    let n_embd = m.hparams.n_embd;
    let fwd = build(&m, None);
    let g_rows: Vec<f32> = PROMPT
        .iter()
        .flat_map(|&t| (0..n_embd).map(move |d| (t as i64, d as i64)))
        .map(|(t, d)| g_table.get_f32_nd(d, t, 0, 0))
        .collect();
    let rows: Vec<f32> = PROMPT
        .iter()
        .flat_map(|&t| (0..n_embd).map(move |d| (t as i64, d as i64)))
        .map(|(t, d)| table.get_f32_nd(d, t, 0, 0))
        .collect();
    check_fd("d/d token_embd rows", &rows, &g_rows, 24, |v| {
        for (k, &x) in v.iter().enumerate() {
            table.set_f32_nd((k % n_embd) as i64, PROMPT[k / n_embd] as i64, 0, 0, x);
        }
        run(&fwd, None, &m);
        metric(&fwd)
    });
    for (k, &x) in rows.iter().enumerate() {
        table.set_f32_nd((k % n_embd) as i64, PROMPT[k / n_embd] as i64, 0, 0, x);
    }
    // Rows of other tokens get nothing from the embedding lookup.
    if m.weights.output != m.weights.token_embd {
        assert!((0..n_embd as i64).all(|d| g_table.get_f32_nd(d, 0, 0, 0) == 0.0), "row of token 0");
    }
}

/// The Q8_0 model's weights as the CPU repacks them (`out_prod` reads the repacked rows of
/// the output head and every block's matrices for the activations' gradients): the same
/// gradients, bit for bit, as from the weights in ggml's layout.
#[test]
fn gradients_through_repacked_weights_equal_those_through_plain_ones() {
    let path = fixtures::models_dir().join("tiny-gpt2-q8_0.gguf");
    let load = |repack| {
        let opts = Gpt2Options { repack, ..Default::default() };
        load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), opts).unwrap().model
    };
    // Repacked on any machine (where its ISA has no packed kernel, the products unpack).
    let m = load(Repack::Force);
    let grads = |m: &Gpt2| -> Vec<Vec<f32>> {
        let mut r = build(m, None);
        let params = ["inp_embd", "l0.l_out", "l1.ffn_up_b"].map(|n| r.gf.get_tensor(n).expect(n));
        params.iter().for_each(|p| p.set_param());
        r.gf.build_backward_expand(&r.ctx, &r.metric);
        run(&r, None, m);
        params.iter().map(|p| r.gf.grad(p).unwrap().to_f32_vec()).collect()
    };
    let packed = grads(&m);
    let mats: Vec<Tensor> = m
        .weights
        .layers
        .iter()
        .flat_map(|l| [&l.attn_qkv_w, &l.attn_out_w, &l.ffn_up_w, &l.ffn_down_w])
        .chain([&m.weights.output])
        .filter(|t| is_packed(t))
        .cloned()
        .collect();
    assert_eq!(mats.len(), 4 * m.hparams.n_layer + 1, "{} repacked weights", mats.len());
    let plain = grads(&load(Repack::Off));
    assert!(packed.iter().all(|g| g.iter().any(|&v| v != 0.0)), "a gradient is all zeros");
    assert!(packed == plain, "gradients differ between the repacked and the plain weights");
}

/// `build_backward_expand_seeded` (training's loss: log_softmax seeded with the loss weights
/// w) gives the bits of the product form it replaced, Σ w ⊙ log_softmax(x) seeded with ones,
/// and the closed form w − softmax(x) · Σ w (f64) within 1e-6.
#[test]
fn a_seeded_backward_equals_the_weighted_sum_it_replaces() {
    let (n, rows) = (7usize, 3usize);
    let xs: Vec<f32> = (0..n * rows).map(|i| ((i * 37 % 19) as f32 - 9.0) / 4.0).collect();
    let ws: Vec<f32> = (0..n * rows).map(|i| if i % n == (i / n * 3) % n { -1.0 / 3.0 } else { 0.0 }).collect();
    let grad = |seeded: bool| {
        let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: false });
        let x = ctx.new_tensor_2d(GgmlType::F32, n as i64, rows as i64);
        x.set_f32_slice(&xs);
        x.set_param();
        let w = ctx.new_tensor_2d(GgmlType::F32, n as i64, rows as i64);
        w.set_f32_slice(&ws);
        let lsm = ctx.log_soft_max(&x); // [n, rows]
        let mut gf = Graph::new();
        if seeded {
            gf.build_forward_expand(&lsm);
            gf.build_backward_expand_seeded(&ctx, &lsm, Some(&w));
        } else {
            let loss = ctx.mul(&lsm, &w); // [n, rows]
            gf.build_forward_expand(&loss);
            gf.build_backward_expand(&ctx, &loss);
        }
        ggweb::cpu::compute_graph(&gf, 1).unwrap();
        gf.grad(&x).unwrap().to_f32_vec()
    };
    let (seeded, product) = (grad(true), grad(false));
    assert_eq!(seeded, product, "seeded against the product's backward");
    for r in 0..rows {
        let row = &xs[r * n..(r + 1) * n];
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        let sw: f64 = ws[r * n..(r + 1) * n].iter().map(|&v| v as f64).sum();
        for i in 0..n {
            let want = ws[r * n + i] as f64 - (row[i] as f64 - max).exp() / z * sw;
            assert!((seeded[r * n + i] as f64 - want).abs() <= 1e-6, "row {r} [{i}]: {} vs {want}", seeded[r * n + i]);
        }
    }
}
