//! GPT-2 split between WebGPU and the CPU in a real browser (headless Chromium: WebGPU on
//! SwiftShader, the CPU kernels in wasm SIMD128), through the scheduler: for 0, 1, all and
//! all-plus-embeddings GPU layers, logits within 1e-3 of the CPU alone and the same greedy
//! tokens. Splits that start on the CPU only copy towards the GPU (`set_bytes`, which
//! needs no waiting), so the one read back is the logits, through `read_tensor_async`.
//!
//! ```text
//! WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver \
//!   cargo test --target wasm32-unknown-unknown --test browser -- webgpu_sched::
//! ```
//! (`webdriver.json` passes `--enable-unsafe-webgpu`.)

use std::rc::Rc;

use ggweb::allocator::alloc_tensors;
use ggweb::backend::{Backend, BackendError};
use ggweb::cpu::CpuBackend;
use ggweb::gguf::Limits;
use ggweb::model::context::{Batch, Gpt2, Gpt2Options};
use ggweb::model::loader::{load_from_bytes, ModelLoader};
use ggweb::model::sampling::argmax;
use ggweb::sched::Sched;
use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};
use ggweb::{Context, ContextParams, GgmlType, Graph};
use wasm_bindgen_test::*;

const MODEL: &[u8] = include_bytes!("../fixtures/tiny-f32.gguf");
/// "The quick brown fox jumps over the lazy dog."
const PROMPT: [u32; 10] = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13];
const N_GEN: usize = 8;

fn opts() -> Gpt2Options {
    Gpt2Options { n_batch: 4, ..Gpt2Options::default() }
}

/// One run's logits, read where they are (`Backend::tensor_get_async`: host memory
/// directly, WebGPU asynchronously).
async fn eval(m: &mut Gpt2, _gpu: &WebGpuBackend, tokens: &[u32], n_past: usize, all: bool) -> Vec<f32> {
    let batch = if all { Batch::all(tokens, n_past) } else { Batch::last(tokens, n_past) };
    m.decode(batch).await.unwrap().logits
}

/// The prompt's logits at every position (in batches of 4), then greedy tokens.
async fn run(m: &mut Gpt2, gpu: &WebGpuBackend) -> (Vec<f32>, Vec<u32>) {
    let mut logits = Vec::new();
    for (i, chunk) in PROMPT.chunks(4).enumerate() {
        logits.extend(eval(m, gpu, chunk, 4 * i, true).await);
    }
    let n_vocab = m.hparams.n_vocab;
    let mut next = argmax(&logits[(PROMPT.len() - 1) * n_vocab..]);
    let mut greedy = Vec::new();
    for n_past in PROMPT.len()..PROMPT.len() + N_GEN {
        greedy.push(next);
        next = argmax(&eval(m, gpu, &[next], n_past, false).await);
    }
    (logits, greedy)
}

#[wasm_bindgen_test]
async fn split_gpt2_matches_the_cpu_in_chromium() {
    let gpu = Rc::new(WebGpuBackend::new_async(WebGpuOptions::default()).await.expect("WebGPU in headless Chromium"));
    let mut cpu = load_from_bytes(MODEL, opts()).unwrap().model;
    let (want, want_greedy) = run(&mut cpu, &gpu).await;
    let n_layer = cpu.hparams.n_layer;
    for n in [0, 1, n_layer, n_layer + 1] {
        let backend: Rc<dyn Backend> = gpu.clone();
        let mut loader =
            ModelLoader::new_split(backend, Rc::new(CpuBackend::new(1)), n, opts(), Limits::default(), None);
        for chunk in MODEL.chunks(65_537) {
            loader.feed(chunk).unwrap();
        }
        let mut m = loader.finish().unwrap().model;
        let (got, greedy) = run(&mut m, &gpu).await;
        let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        web_sys::console::log_1(&format!("gpu_layers {n}: max |split - cpu| = {d:e}").into());
        assert!(d < 1e-3, "gpu_layers {n}: logits differ from the CPU by {d}");
        assert_eq!(greedy, want_greedy, "gpu_layers {n}");
        let r = m.sched.last_run();
        // With a GPU layer the KQ mask (an input, on the CPU) is copied up too.
        let want_split = match n {
            0 => (1, 0),
            n if n <= n_layer => (2, 3),
            _ => (1, 3),
        };
        assert_eq!((r.splits, r.copies), want_split, "gpu_layers {n}");
        let g = m.galloc();
        assert_eq!((g.n_reserves(), g.n_buffer_allocs()), (1, 2), "gpu_layers {n}: one reserve at load");
    }
}

/// A split that hands GPU results to the CPU mid-graph cannot run in the browser: WebGPU
/// memory reads back only asynchronously and a graph run cannot wait. The scheduler's copy
/// says so as a typed error naming the tensor, instead of panicking in `get_bytes`.
#[wasm_bindgen_test]
async fn a_copy_from_webgpu_to_the_cpu_is_a_typed_error() {
    let gpu: Rc<dyn Backend> = Rc::new(WebGpuBackend::new_async(WebGpuOptions::default()).await.unwrap());
    let cpu: Rc<dyn Backend> = Rc::new(CpuBackend::new(1));
    let ctx = Context::new(ContextParams { mem_size: 1 << 16, no_alloc: true });
    let w = ctx.new_tensor_2d(GgmlType::F32, 2, 2); // a weight on the GPU
    let _wbuf = alloc_tensors(&[w.clone()], &*gpu.buffer_type()).unwrap();
    w.set_bytes(bytemuck::cast_slice(&[1f32, 0., 0., 2.]), 0);
    let b = ctx.new_tensor_1d(GgmlType::F32, 2); // a weight on the CPU
    let _bbuf = alloc_tensors(&[b.clone()], &*cpu.buffer_type()).unwrap();
    b.set_bytes(bytemuck::cast_slice(&[1f32, 1.]), 0);
    let x = ctx.new_tensor_1d(GgmlType::F32, 2);
    x.set_input();
    let y = ctx.mul_mat(&w, &x); // runs where w is
    y.set_name("wx");
    let z = ctx.add(&y, &b); // runs where b is, so wx must come back from the GPU
    let mut gf = Graph::new();
    gf.build_forward_expand(&z);
    let mut sched = Sched::new(vec![gpu, cpu]).unwrap();
    sched.alloc_graph(&gf).unwrap();
    let names: Vec<&str> = sched.splits().iter().map(|s| sched.backend(s.backend).name()).collect();
    assert_eq!(names, ["WebGPU", "CPU"]);
    x.set_bytes(bytemuck::cast_slice(&[1f32, 1.]), 0);
    match sched.graph_compute(&gf) {
        Err(BackendError::Unsupported { node, reason }) => {
            assert_eq!(node, "wx");
            assert_eq!(
                reason,
                "copying it from WebGPU memory into 'CPU#wx' needs a synchronous read of device memory, \
                 which the browser cannot do; only copies towards a device work there"
            );
        }
        other => panic!("expected an Unsupported error for the copy of 'wx', got {other:?}"),
    }
}
