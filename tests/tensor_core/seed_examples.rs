//! The examples of the design docs in shared/seeds/, exactly as written there: the 2×2
//! permute and the attention stride table (000, section 2), and ggml_cont by experiment (004).

use std::panic::{catch_unwind, AssertUnwindSafe};

use ggweb::cpu::compute_graph;
use ggweb::tensor::{Context, ContextParams, TENSOR_OVERHEAD};
use ggweb::types::GgmlType::{F32, I32};
use ggweb::Graph;

use crate::support::rng::Rng;

fn panic_message(r: Result<impl Sized, Box<dyn std::any::Any + Send>>) -> String {
    match r {
        Ok(_) => panic!("expected a panic"),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}

/// 000 §2.3: for a 2×2 F32 matrix A, permute(A, 1, 0, 2, 3) swaps the strides and is A's transpose.
#[test]
fn permute_2x2_swaps_strides() {
    let ctx = Context::new(ContextParams { mem_size: 1 << 12, no_alloc: false });
    let a = ctx.new_tensor_2d(F32, 2, 2);
    // data[0], data[4], data[8], data[12] (byte offsets) = a, b, c, d
    let (va, vb, vc, vd) = (1.0, 2.0, 3.0, 4.0);
    a.set_f32_slice(&[va, vb, vc, vd]);
    assert_eq!((&a.ne[..2], &a.nb[..2]), (&[2i64, 2][..], &[4usize, 8][..]));
    // A[i1][i0] is at i1*nb1 + i0*nb0; get_f32_nd takes (i0, i1).
    assert_eq!(a.get_f32_nd(1, 0, 0, 0), vb); // A[0][1] = data[4] -> b
    assert_eq!(a.get_f32_nd(0, 1, 0, 0), vc); // A[1][0] = data[8] -> c

    let p = ctx.permute(&a, 1, 0, 2, 3);
    assert_eq!(p.ne, [2, 2, 1, 1]);
    assert_eq!(p.nb, [8, 4, 16, 16]);
    assert_eq!(p.get_f32_nd(1, 0, 0, 0), vc); // P[0][1] = data[8] -> c
    assert_eq!(p.get_f32_nd(0, 1, 0, 0), vb); // P[1][0] = data[4] -> b
    assert_eq!(p.to_f32_vec(), [va, vc, vb, vd]);
    // ggml_transpose is this call.
    let t = ctx.transpose(&a);
    assert_eq!((t.ne, t.nb), (p.ne, p.nb));
}

/// 004: 0..15 as I32, reshaped to {2,2,4,1}, permuted (1,2,0,3), cont, reshaped to {2,8}.
/// Before the graph runs, cont's result holds nothing (zeros in an allocating context).
#[test]
fn cont_of_permuted_i32_is_empty_until_computed() {
    let ctx = Context::new(ContextParams { mem_size: 1024 * TENSOR_OVERHEAD, no_alloc: false });
    let tensor = ctx.new_tensor_1d(I32, 16);
    for i in 0..16 {
        tensor.set_i32_1d(i, i as i32);
    }
    let t = ctx.reshape_4d(&tensor, 2, 2, 4, 1);
    assert_eq!(t.to_i32_vec(), (0..16).collect::<Vec<i32>>()); // "Original tensor": 0 1 / 2 3 // 4 5 ...

    let permuted_t = ctx.permute(&t, 1, 2, 0, 3);
    assert_eq!(permuted_t.ne, [4, 2, 2, 1]);
    assert_eq!(permuted_t.nb, [16, 4, 8, 64]);
    assert!(!permuted_t.is_contiguous());
    // "Permuted tensor": 0 4 8 12 / 1 5 9 13 // 2 6 10 14 / 3 7 11 15
    assert_eq!(permuted_t.to_i32_vec(), [0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15]);

    let cont_permuted_t = ctx.cont(&permuted_t);
    let a = ctx.reshape_2d(&cont_permuted_t, 2, 8);
    assert_eq!(a.ne, [2, 8, 1, 1]);
    assert_eq!(a.to_i32_vec(), [0; 16], "the lazy graph: nothing copied yet");

    let mut gf = Graph::new();
    gf.build_forward_expand(&a);
    compute_graph(&gf, 1).unwrap();
    // "Now-contiguous tensor after we perform the computation"
    assert_eq!(a.to_i32_vec(), [0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15]);
}

/// 000 §2.5: GPT-2 small attention (n_embd 768, 12 heads of 64), built as the seed's code
/// builds it, in a no_alloc context. N = 5 new tokens, n_past = 3, so L = 8.
#[test]
fn gpt2_attention_strides_table() {
    let (n_embd, n_head, n_ctx, n_layer) = (768i64, 12i64, 16i64, 2i64);
    let (n, n_past) = (5i64, 3i64);
    let l = n_past + n;
    let il = 1;
    let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
    let cur = ctx.new_tensor_2d(F32, 3 * n_embd, n);
    let memory_k = ctx.new_tensor_1d(F32, n_layer * n_ctx * n_embd);
    let memory_v = ctx.new_tensor_1d(F32, n_layer * n_ctx * n_embd);
    let off = (il * n_ctx * n_embd * 4) as usize;

    let qcur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 0);
    assert_eq!((qcur.ne, &qcur.nb[..2]), ([768, n, 1, 1], &[4usize, 9216][..]));

    let q = ctx.permute(&ctx.cont_3d(&qcur, n_embd / n_head, n_head, n), 0, 2, 1, 3);
    assert_eq!((q.ne, &q.nb[..3]), ([64, n, 12, 1], &[4usize, 3072, 256][..]));

    let k =
        ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&memory_k, l * n_embd, off), n_embd / n_head, n_head, l), 0, 2, 1, 3);
    assert_eq!((k.ne, &k.nb[..3]), ([64, l, 12, 1], &[4usize, 3072, 256][..]));
    assert!(!q.is_contiguous() && !k.is_contiguous());

    let kq = ctx.mul_mat(&k, &q);
    assert_eq!(kq.ne, [l, n, 12, 1]);
    let kq_soft_max = ctx.soft_max(&ctx.diag_mask_inf(&ctx.scale(&kq, 0.125), n_past as i32));

    let v_permuted =
        ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&memory_v, l * n_embd, off), n_embd / n_head, n_head, l), 1, 2, 0, 3);
    assert_eq!((v_permuted.ne, &v_permuted.nb[..3]), ([l, 64, 12, 1], &[3072usize, 4, 256][..]));
    let v_trans = ctx.cont_3d(&v_permuted, l, n_embd / n_head, n_head);
    let lu = l as usize;
    assert_eq!((v_trans.ne, &v_trans.nb[..3]), ([l, 64, 12, 1], &[4usize, 4 * lu, 256 * lu][..]));

    // mul_mat on the permuted V stops while the graph is built, naming both shapes.
    let msg = panic_message(catch_unwind(AssertUnwindSafe(|| ctx.mul_mat(&v_permuted, &kq_soft_max))));
    assert!(msg.contains("mul_mat") && msg.contains("transposed"), "{msg}");
    assert!(msg.contains("ne=[8, 64, 12, 1] nb=[3072, 4, 256, 24576]"), "names a: {msg}");
    assert!(msg.contains("ne=[8, 5, 12, 1]"), "names b: {msg}");

    let kqv = ctx.mul_mat(&v_trans, &kq_soft_max);
    assert_eq!(kqv.ne, [64, n, 12, 1]);
    let out = ctx.cont_2d(&ctx.permute(&kqv, 0, 2, 1, 3), n_embd, n);
    assert_eq!((out.ne, &out.nb[..2]), ([768, n, 1, 1], &[4usize, 3072][..]));

    // reshape only reinterprets bytes: a strided view cannot be reshaped.
    let msg = panic_message(catch_unwind(AssertUnwindSafe(|| ctx.reshape_3d(&qcur, 64, 12, n))));
    assert!(msg.contains("reshape") && msg.contains("not contiguous"), "{msg}");
}

/// The same attention block, computed on the CPU in an allocating context, against a
/// direct per-head f64 computation: the views and permutes really read the right bytes.
#[test]
fn gpt2_attention_block_computes() {
    let (n_embd, n_head, n_ctx, n_layer) = (768i64, 12i64, 16i64, 2i64);
    let (n, n_past) = (5i64, 3i64);
    let (l, hd) = (n_past + n, n_embd / n_head);
    let il = 1;
    let ctx = Context::new(ContextParams { mem_size: 8 << 20, no_alloc: false });
    let cur = ctx.new_tensor_2d(F32, 3 * n_embd, n);
    let memory_k = ctx.new_tensor_1d(F32, n_layer * n_ctx * n_embd);
    let memory_v = ctx.new_tensor_1d(F32, n_layer * n_ctx * n_embd);
    let mut rng = Rng::lcg(7);
    let mut rnd = || rng.unit() * 2.0 - 1.0;
    let cur_v: Vec<f32> = (0..3 * n_embd * n).map(|_| rnd()).collect();
    let mk: Vec<f32> = (0..n_layer * n_ctx * n_embd).map(|_| rnd()).collect();
    let mv: Vec<f32> = (0..n_layer * n_ctx * n_embd).map(|_| rnd()).collect();
    cur.set_f32_slice(&cur_v);
    memory_k.set_f32_slice(&mk);
    memory_v.set_f32_slice(&mv);
    let off = (il * n_ctx * n_embd * 4) as usize;

    let qcur = ctx.view_2d(&cur, n_embd, n, cur.nb[1], 0);
    let q = ctx.permute(&ctx.cont_3d(&qcur, hd, n_head, n), 0, 2, 1, 3);
    let k = ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&memory_k, l * n_embd, off), hd, n_head, l), 0, 2, 1, 3);
    let kq = ctx.mul_mat(&k, &q);
    let kq_soft_max = ctx.soft_max(&ctx.diag_mask_inf(&ctx.scale(&kq, 0.125), n_past as i32));
    let v_trans = ctx.cont_3d(
        &ctx.permute(&ctx.reshape_3d(&ctx.view_1d(&memory_v, l * n_embd, off), hd, n_head, l), 1, 2, 0, 3),
        l,
        hd,
        n_head,
    );
    let kqv = ctx.mul_mat(&v_trans, &kq_soft_max);
    let out = ctx.cont_2d(&ctx.permute(&kqv, 0, 2, 1, 3), n_embd, n);
    let mut gf = Graph::new();
    gf.build_forward_expand(&out);
    compute_graph(&gf, 1).unwrap();

    let got = out.to_f32_vec();
    let (n, l, hd, nh, ne) = (n as usize, l as usize, hd as usize, n_head as usize, n_embd as usize);
    let base = off / 4;
    for h in 0..nh {
        for t in 0..n {
            let qv = |d: usize| cur_v[t * 3 * ne + h * hd + d] as f64;
            let mut w: Vec<f64> = (0..l)
                .map(|j| {
                    if j > n_past as usize + t {
                        f64::NEG_INFINITY
                    } else {
                        (0..hd).map(|d| qv(d) * mk[base + j * ne + h * hd + d] as f64).sum::<f64>() * 0.125
                    }
                })
                .collect();
            let max = w.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = w.iter().map(|x| (x - max).exp()).sum();
            w.iter_mut().for_each(|x| *x = (*x - max).exp() / sum);
            for d in 0..hd {
                let want: f64 = (0..l).map(|j| w[j] * mv[base + j * ne + h * hd + d] as f64).sum();
                let g = got[t * ne + h * hd + d] as f64;
                // f32 dots of 64 terms of size ~1, then a softmax-weighted sum: ~1e-6 abs.
                assert!((g - want).abs() < 2e-5, "head {h} token {t} dim {d}: {g} vs {want}");
            }
        }
    }
}
