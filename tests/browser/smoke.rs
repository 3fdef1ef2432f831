//! Runs in headless Chromium (scripts/test.sh): the tensor core and the bindings compiled
//! to wasm32, checked in a real browser page rather than Node.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 cargo test --target wasm32-unknown-unknown --test browser -- smoke::
//! ```

use ggweb::graph::Graph;
use ggweb::tensor::{Context, ContextParams};
use ggweb::types::GgmlType::{F16, F32};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::*;

fn global_has(name: &str) -> bool {
    js_sys::Reflect::has(&js_sys::global(), &JsValue::from_str(name)).unwrap_or(false)
}

#[wasm_bindgen_test]
fn runs_in_a_browser_page() {
    // A Node run or a worker has no `document`: this proves the test ran where the demo runs.
    assert!(global_has("document"), "expected a browser page (window.document)");
    let nav = js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("navigator")).unwrap();
    let ua = js_sys::Reflect::get(&nav, &JsValue::from_str("userAgent")).unwrap().as_string().unwrap();
    assert!(ua.contains("Chrome") || ua.contains("Firefox"), "user agent: {ua}");
}

#[wasm_bindgen_test]
fn bindings_version_crosses_the_boundary() {
    ggweb::bindings::init_panic_hook();
    assert_eq!(ggweb::bindings::version(), env!("CARGO_PKG_VERSION"));
}

/// GPT-2's attention reshapes: a Q view out of the fused qkv rows, split into heads, permuted.
#[wasm_bindgen_test]
fn attention_views_have_ggml_strides() {
    let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
    let (n_embd, n_head, n_tokens) = (64i64, 4i64, 5i64);
    let qkv = ctx.new_tensor_2d(F32, 3 * n_embd, n_tokens);
    assert_eq!(qkv.nb, [4, 768, 3840, 3840]);

    // Q: the first n_embd floats of every 3*n_embd-float row.
    let q = ctx.view_2d(&qkv, n_embd, n_tokens, qkv.nb[1], 0);
    assert_eq!((q.ne, q.nb), ([64, 5, 1, 1], [4, 768, 3840, 3840]));
    assert!(!q.is_contiguous() && q.is_contiguous_1());
    let k = ctx.view_2d(&qkv, n_embd, n_tokens, qkv.nb[1], 4 * n_embd as usize);
    assert_eq!(k.view_offs, 256);

    let qc = ctx.cont(&q);
    assert_eq!(qc.nb, [4, 256, 1280, 1280]);
    let heads = ctx.reshape_3d(&qc, n_embd / n_head, n_head, n_tokens);
    assert_eq!((heads.ne, heads.nb), ([16, 4, 5, 1], [4, 64, 256, 1280]));
    let qp = ctx.permute(&heads, 0, 2, 1, 3);
    assert_eq!((qp.ne, qp.nb), ([16, 5, 4, 1], [4, 256, 64, 1280]));
    assert!(qp.is_permuted());

    let kc = ctx.cont(&k);
    let kp = ctx.permute(&ctx.reshape_3d(&kc, 16, 4, 5), 0, 2, 1, 3);
    let kq = ctx.mul_mat(&kp, &qp);
    assert_eq!(kq.ne, [5, 5, 4, 1]);
    assert_eq!(kq.nb, [4, 20, 100, 400]);

    let mut gf = Graph::new();
    gf.build_forward_expand(&kq);
    // leaf: qkv; nodes: view q, cont, reshape, permute, view k, cont, reshape, permute, mul_mat
    assert_eq!((gf.leafs.len(), gf.nodes.len()), (1, 9));
    assert_eq!(gf.use_count(&qkv), 2);
}

/// Data in wasm linear memory, read back through transposed and offset views.
#[wasm_bindgen_test]
fn views_read_through_strides_in_linear_memory() {
    let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: false });
    let a = ctx.new_tensor_2d(F32, 3, 2);
    a.set_f32_slice(&[0., 1., 2., 3., 4., 5.]);
    let t = ctx.transpose(&a);
    assert_eq!((t.ne, t.nb), ([2, 3, 1, 1], [12, 4, 24, 24]));
    assert_eq!(t.to_f32_vec(), vec![0., 3., 1., 4., 2., 5.]);
    let row1 = ctx.view_1d(&a, 3, a.nb[1]);
    assert_eq!(row1.to_f32_vec(), vec![3., 4., 5.]);

    let h = ctx.new_tensor_2d(F16, 4, 2);
    assert_eq!(h.nb, [2, 8, 16, 16]);
    h.set_f32_slice(&[0.5, -1.0, 65504.0, 1e-3, 2.0, 3.0, 4.0, 5.0]);
    // f16 rounds 1e-3 to the nearest representable value, 0.0010004044.
    assert_eq!(h.get_f32_nd(3, 0, 0, 0), 0.0010004044);
    assert_eq!(h.get_f32_nd(2, 0, 0, 0), 65504.0);
}
