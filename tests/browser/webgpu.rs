//! The WebGPU backend in a real browser (headless Chromium: SwiftShader, no `shader-f16`):
//! the async constructor, in-place chains against the CPU backend compiled to the same wasm
//! module, and GPT-2 through the bindings. Each op and weight type against f64 references
//! is tests/browser/backend_ops.rs.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver \
//!   cargo test --target wasm32-unknown-unknown --test browser -- webgpu::
//! ```
//! (`webdriver.json` passes `--enable-unsafe-webgpu`.)

use ggweb::backend::{Backend, BackendError};
use ggweb::cpu::CpuBackend;
use ggweb::webgpu::{MatMulKernels, WebGpuBackend, WebGpuOptions};
use ggweb::{Context, ContextParams, GgmlType, Graph, Tensor};
use wasm_bindgen_test::*;

use crate::support::rng::Rng;

use GgmlType::{F16, F32};

fn f32s(t: &Tensor, bytes: &[u8]) -> Vec<f32> {
    match t.ty {
        F32 => bytes.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        F16 => bytes.chunks(2).map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect(),
        ty => panic!("{ty}"),
    }
}

/// The browser's WebGPU: only the async constructor works, on the browser's own adapter.
/// (Each op on it against f64 references: tests/browser/backend_ops.rs.)
#[wasm_bindgen_test]
async fn webgpu_opens_asynchronously_on_the_browsers_adapter() {
    assert!(
        matches!(WebGpuBackend::new(WebGpuOptions::default()), Err(BackendError::Unavailable(_))),
        "the blocking constructor must refuse in the browser"
    );
    for kernels in [MatMulKernels::Workgroup, MatMulKernels::PerRow] {
        let opts = WebGpuOptions { mat_mul_kernels: kernels, ..Default::default() };
        let gpu = WebGpuBackend::new_async(opts)
            .await
            .expect("a WebGPU adapter in headless Chromium (webdriver.json: --enable-unsafe-webgpu)");
        let a = gpu.adapter();
        web_sys::console::log_1(&format!("{a:?}").into());
        assert_eq!(a.backend, "BrowserWebGpu");
    }
}

/// A browser whose GPU process never answers: `requestAdapter`'s promise never settles (a
/// stuck or blocklisted GPU process does this). Opening fails with `Unavailable` after
/// `open_timeout_ms` instead of waiting forever; with the real adapter back it opens again.
#[wasm_bindgen_test]
async fn webgpu_open_gives_up_on_an_adapter_that_never_answers() {
    let navigator = js_sys::Reflect::get(&js_sys::global(), &"navigator".into()).unwrap();
    let gpu_obj = js_sys::Reflect::get(&navigator, &"gpu".into()).unwrap();
    let never = js_sys::Function::new_no_args("return new Promise(() => {})");
    js_sys::Reflect::set(&gpu_obj, &"requestAdapter".into(), &never).unwrap();
    let t0 = js_sys::Date::now();
    let opened = WebGpuBackend::new_async(WebGpuOptions { open_timeout_ms: Some(300), ..Default::default() }).await;
    let waited = js_sys::Date::now() - t0;
    // The own property shadows the prototype's method; deleting it brings the real one back.
    js_sys::Reflect::delete_property(&gpu_obj.clone().into(), &"requestAdapter".into()).unwrap();
    match opened {
        Err(BackendError::Unavailable(m)) => {
            assert!(m.contains("requestAdapter") && m.contains("300 ms"), "{m}")
        }
        Err(e) => panic!("expected Unavailable, got {e}"),
        Ok(_) => panic!("opened a device through a requestAdapter that never answers"),
    }
    assert!((300.0..10_000.0).contains(&waited), "gave up after {waited} ms, asked for 300");
    WebGpuBackend::new_async(WebGpuOptions::default()).await.expect("the real adapter again");
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

    static F32_GGUF: &[u8] = include_bytes!("../fixtures/llamacpp/tiny-gpt2-f32.gguf");
    static HF_ROWS_JSON: &str = include_str!("../fixtures/tiny-gpt2.hf-rows.json");
    static HF_ROWS_BIN: &[u8] = include_bytes!("../fixtures/tiny-gpt2.hf-rows.bin");

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
