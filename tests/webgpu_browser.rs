//! The WebGPU backend in a real browser (headless Chromium: SwiftShader, no `shader-f16`):
//! the async constructor, the async read, and each kernel family against the CPU backend
//! compiled to the same wasm module.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver \
//!   cargo test --target wasm32-unknown-unknown --features webgpu --test webgpu_browser
//! ```
//! (`webdriver.json` passes `--enable-unsafe-webgpu`.)
#![cfg(target_arch = "wasm32")]

use ggweb::allocator::alloc_ctx_tensors;
use ggweb::backend::{Backend, BackendError};
use ggweb::cpu::CpuBackend;
use ggweb::webgpu::{MatMulKernels, WebGpuBackend, WebGpuOptions};
use ggweb::{Context, ContextParams, GgmlType, Graph, Tensor};
use wasm_bindgen_test::*;

mod support {
    pub mod rng;
}
use support::rng::Rng;

use GgmlType::{BF16, F16, F32, I32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};

wasm_bindgen_test_configure!(run_in_browser);

/// Bytes for `n` elements of `ty`: quantized from random values where ggweb can quantize,
/// random blocks with small scales for the K-quants (read-only types).
fn data(rng: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    let vals: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    match ty {
        F32 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        F16 => vals.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect(),
        BF16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 => ggweb::quants::quantize(ty, &vals).unwrap(),
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K => {
            let mut b: Vec<u8> = (0..ty.row_size(n as i64)).map(|_| rng.next_u64() as u8).collect();
            let ts = ty.type_size();
            for blk in b.chunks_mut(ts) {
                let d = half::f16::from_f32(0.002).to_bits().to_le_bytes();
                // d (and dmin) where ggml puts them
                let (at, dmin) = match ty {
                    Q2_K => (ts - 4, Some(ts - 2)),
                    Q3_K | Q6_K => (ts - 2, None),
                    _ => (0, Some(2)),
                };
                blk[at..at + 2].copy_from_slice(&d);
                if let Some(m) = dmin {
                    blk[m..m + 2].copy_from_slice(&d);
                }
            }
            b
        }
        other => panic!("{other}"),
    }
}

/// get_rows and mul_mat (N = 1 and N = 12) for every weight type, plus the f32 chain
/// norm → gelu → scale → diag_mask_inf → soft_max and an f32 → f16 copy.
fn build(ctx: &Context, rng: &mut Rng) -> (Vec<Tensor>, Vec<(Tensor, Vec<u8>)>) {
    let mut inputs = Vec::new();
    let mut outs = Vec::new();
    let leaf = |inputs: &mut Vec<(Tensor, Vec<u8>)>, ty: GgmlType, ne: &[i64], rng: &mut Rng| {
        let t = ctx.new_tensor(ty, ne);
        inputs.push((t.clone(), data(rng, ty, t.nelements() as usize)));
        t
    };
    for ty in [F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
        let w = leaf(&mut inputs, ty, &[256, 24], rng);
        for n in [1, 12] {
            let x = leaf(&mut inputs, F32, &[256, n], rng);
            outs.push(ctx.mul_mat(&w, &x));
        }
        let idx = ctx.new_tensor_1d(I32, 3);
        inputs.push((idx.clone(), [5i32, 0, 23].iter().flat_map(|v| v.to_le_bytes()).collect()));
        outs.push(ctx.get_rows(&w, &idx));
    }
    let a = leaf(&mut inputs, F32, &[40, 6, 2], rng);
    let chain = ctx.soft_max(&ctx.diag_mask_inf(&ctx.scale(&ctx.gelu(&ctx.norm(&a, 1e-5)), 3.0), 30));
    outs.push(chain);
    // Two overlapping views of one tensor in one dispatch share a binding (Dawn rejects
    // overlapping writable bindings).
    let wide = leaf(&mut inputs, F32, &[40, 6], rng);
    let v1 = ctx.view_2d(&wide, 32, 6, wide.nb[1], 0);
    let v2 = ctx.view_2d(&wide, 32, 6, wide.nb[1], 4 * 8);
    outs.push(ctx.add(&v1, &v2));
    let h = ctx.new_tensor_1d(F16, 81);
    inputs.push((h.clone(), vec![0u8; 162]));
    outs.push(ctx.cpy(&ctx.transpose(&leaf(&mut inputs, F32, &[9, 9], rng)), &h));
    (outs, inputs)
}

fn f32s(t: &Tensor, bytes: &[u8]) -> Vec<f32> {
    match t.ty {
        F32 => bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        F16 => bytes.chunks(2).map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect(),
        ty => panic!("{ty}"),
    }
}

async fn run(backend: &dyn Backend, gpu: Option<&WebGpuBackend>) -> Vec<Vec<f32>> {
    let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
    let (outs, inputs) = build(&ctx, &mut Rng::new(7));
    let mut gf = Graph::new();
    for o in &outs {
        gf.build_forward_expand(o);
    }
    let _bufs = alloc_ctx_tensors(&ctx, &*backend.buffer_type()).unwrap();
    for (t, bytes) in &inputs {
        t.set_bytes(bytes, 0);
    }
    backend.graph_compute(&gf).unwrap();
    let mut res = Vec::new();
    for o in &outs {
        let mut bytes = vec![0u8; o.nbytes()];
        match gpu {
            // The browser cannot block: results come back through the async read.
            Some(g) => g.read_tensor_async(o, 0, &mut bytes).await.unwrap(),
            None => o.get_bytes(&mut bytes, 0),
        }
        res.push(f32s(o, &bytes));
    }
    res
}

#[wasm_bindgen_test]
async fn webgpu_kernels_match_the_cpu_in_chromium() {
    assert!(
        matches!(WebGpuBackend::new(WebGpuOptions::default()), Err(BackendError::Unavailable(_))),
        "the blocking constructor must refuse in the browser"
    );
    let want = run(&CpuBackend::new(1), None).await;
    for kernels in [MatMulKernels::Workgroup, MatMulKernels::PerRow] {
        let opts = WebGpuOptions { mat_mul_kernels: kernels, ..Default::default() };
        let gpu = WebGpuBackend::new_async(opts)
            .await
            .expect("a WebGPU adapter in headless Chromium (webdriver.json: --enable-unsafe-webgpu)");
        let a = gpu.adapter();
        web_sys::console::log_1(&format!("{a:?}").into());
        assert_eq!(a.backend, "BrowserWebGpu");
        let got = run(&gpu, Some(&gpu)).await;
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let (mut num, mut den) = (0f64, 0f64);
            for (&x, &y) in g.iter().zip(w) {
                if y.is_finite() {
                    num += ((x - y) as f64).powi(2);
                    den += (y as f64).powi(2);
                } else {
                    assert_eq!(x, y, "{kernels:?} output {i}");
                }
            }
            // The CPU rounds activations to 8 bits for quantized mul_mat (NMSE ~1e-5,
            // test-backend-ops allows 5e-4); everything else agrees to f32 rounding.
            let e = num / den.max(f64::MIN_POSITIVE);
            assert!(e < 5e-4, "{kernels:?} output {i}: NMSE {e:e} vs the CPU backend");
        }
    }
}

/// A chain the graph allocator runs in place (scale → gelu → add → soft_max reuse one
/// block), as the model's compute buffer does: src0 and dst are the same memory.
#[wasm_bindgen_test]
async fn in_place_chain_from_gallocr_in_chromium() {
    use ggweb::allocator::Gallocr;
    async fn run(backend: &dyn Backend, gpu: Option<&WebGpuBackend>) -> (Vec<f32>, usize) {
        let ctx = Context::new(ContextParams { mem_size: 1 << 20, no_alloc: true });
        let x = ctx.new_tensor_2d(F32, 50, 4);
        x.set_input();
        let bias = ctx.new_tensor_1d(F32, 50);
        bias.set_input();
        let y = ctx.soft_max(&ctx.add(&ctx.gelu(&ctx.scale(&x, 1.5)), &bias));
        y.set_output();
        let mut gf = Graph::new();
        gf.build_forward_expand(&y);
        let mut galloc = Gallocr::new_single(backend.buffer_type());
        galloc.reserve(&gf).unwrap();
        galloc.alloc_graph(&gf).unwrap();
        let mut rng = Rng::new(3);
        let xs: Vec<f32> = (0..200).map(|_| rng.uniform(-1.0, 1.0) * 3.0).collect();
        let bs: Vec<f32> = (0..50).map(|_| rng.uniform(-1.0, 1.0)).collect();
        x.set_bytes(&xs.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), 0);
        bias.set_bytes(&bs.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(), 0);
        // How many nodes share their first source's memory.
        let in_place = gf
            .nodes
            .iter()
            .filter(|n| {
                let (d, s) = (n.data().unwrap(), n.src[0].as_ref().unwrap().data().unwrap());
                d.offset == s.offset && std::rc::Rc::ptr_eq(&d.buffer, &s.buffer)
            })
            .count();
        backend.graph_compute(&gf).unwrap();
        let mut bytes = vec![0u8; y.nbytes()];
        match gpu {
            Some(g) => g.read_tensor_async(&y, 0, &mut bytes).await.unwrap(),
            None => y.get_bytes(&mut bytes, 0),
        }
        (f32s(&y, &bytes), in_place)
    }
    let (want, _) = run(&CpuBackend::new(1), None).await;
    let gpu = WebGpuBackend::new_async(WebGpuOptions::default()).await.expect("a WebGPU adapter");
    let (got, in_place) = run(&gpu, Some(&gpu)).await;
    assert!(in_place >= 2, "only {in_place} nodes ran in place");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // f32 exp/tanh in the shader vs the CPU's: a few ulp on values in [0, 1].
        assert!((g - w).abs() < 1e-6, "element {i}: {g} vs CPU {w}");
    }
}

// The whole model on WebGPU through the JS bindings: `WasmLoader.create` opens the device,
// the weights stream into GPU buffers, logits come back through the async read.
mod model {
    use ggweb::bindings::{WasmLoader, WasmModel};
    use serde_json::Value;
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_test::*;

    static F32_GGUF: &[u8] = include_bytes!("fixtures/llamacpp/tiny-gpt2-f32.gguf");
    static HF_ROWS_JSON: &str = include_str!("fixtures/tiny-gpt2.hf-rows.json");
    static HF_ROWS_BIN: &[u8] = include_bytes!("fixtures/tiny-gpt2.hf-rows.bin");

    /// (key, ids, greedy ids, HF logits row of the last position) per prompt.
    fn prompts() -> Vec<(String, Vec<u32>, Vec<u32>, Vec<f32>)> {
        let meta: Value = serde_json::from_str(HF_ROWS_JSON).unwrap();
        let n_vocab = meta["n_vocab"].as_u64().unwrap() as usize;
        let ids =
            |v: &Value| -> Vec<u32> { v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect() };
        meta["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let i = p["row"]["index"].as_u64().unwrap() as usize;
                let row = HF_ROWS_BIN[i * n_vocab * 4..(i + 1) * n_vocab * 4]
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                (p["key"].as_str().unwrap().to_string(), ids(&p["ids"]), ids(&p["greedy_ids"]), row)
            })
            .collect()
    }

    /// JSON text as the JS value a caller passes (the bindings take JS data, not JSON text).
    fn js(json: &str) -> JsValue {
        js_sys::JSON::parse(json).expect("test JSON")
    }

    /// A value the bindings return, as serde_json's.
    fn json(v: JsValue) -> Value {
        serde_json::from_str(&String::from(js_sys::JSON::stringify(&v).unwrap())).unwrap()
    }

    fn ok<T>(r: Result<T, JsValue>) -> T {
        r.unwrap_or_else(|e| panic!("{:?}", e.dyn_into::<js_sys::Error>().map(|e| e.message())))
    }

    async fn load(opts: &str) -> WasmModel {
        let mut l = ok(WasmLoader::create(js(opts)).await);
        for c in F32_GGUF.chunks(1 << 20) {
            ok(l.feed(&js_sys::Uint8Array::from(c)));
        }
        ok(l.finish())
    }

    #[wasm_bindgen_test]
    async fn gpt2_on_webgpu_matches_hf_logits_and_greedy_tokens() {
        let mut m = load(r#"{"nBatch":32,"backend":"webgpu"}"#).await;
        let info: Value = json(m.info());
        assert_eq!(info["backend"], "webgpu");
        assert_eq!(info["backendNote"], Value::Null);
        // No gpuLayers: the whole model on WebGPU alone, embeddings included; one token is
        // one split, with nothing to copy.
        let split = &info["split"];
        assert_eq!(split["backends"], serde_json::json!(["WebGPU"]));
        assert_eq!((&split["gpuLayers"], &split["embeddingsOnGpu"]), (&info["hparams"]["n_layer"], &Value::from(true)));
        assert_eq!((&split["splits"], &split["copiesPerToken"]), (&Value::from(1), &Value::from(0)));
        assert_eq!(split["bytesPerBackend"]["WebGPU"]["weights"], info["memory"]["weights"]);
        for (key, ids, greedy, row) in prompts() {
            let logits = ok(m.logits(ids.clone()).await);
            assert_eq!(logits.len(), row.len());
            let d = logits.iter().zip(&row).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            web_sys::console::log_1(&format!("webgpu {key}: {} tokens, max |logit - HF| = {d:e}", ids.len()).into());
            assert!(d <= 1e-3, "{key}: max abs diff {d} > 1e-3");

            // Greedy is deterministic, so a prefix of the HF run is the HF run; SwiftShader
            // is slow enough per token that the whole of it would pass the runner's timeout.
            let greedy = &greedy[..greedy.len().min(6)];
            let params = format!(
                r#"{{"maxTokens":{},"temperature":0,"topK":40,"topP":0.95,"seed":1,"repeatPenalty":1}}"#,
                greedy.len()
            );
            ok(m.start(&ids, js(&params)));
            while !ok(m.prompt_step().await) {}
            let mut got = Vec::new();
            loop {
                let item = ok(m.next().await);
                if item.is_undefined() {
                    break;
                }
                got.push(json(item)["token"].as_u64().unwrap() as u32);
            }
            assert_eq!(got, greedy, "{key}: greedy tokens on WebGPU");
            web_sys::console::log_1(&format!("webgpu {key}: greedy {got:?}").into());
        }
    }

    #[wasm_bindgen_test]
    async fn auto_picks_webgpu_when_an_adapter_exists_and_cpu_is_plain() {
        let m = load(r#"{"backend":"auto","nCtx":16}"#).await;
        let info: Value = json(m.info());
        assert_eq!(info["backend"], "webgpu", "headless Chromium has a SwiftShader adapter");
        let m = load(r#"{"backend":"cpu","nCtx":16}"#).await;
        let info: Value = json(m.info());
        assert_eq!(info["backend"], "cpu");
    }
}
