//! Shared by tests/model/sched.rs and tests/webgpu/ (sched_webgpu.rs, webgpu_load.rs): the
//! tiny model, loading it whole or split, and one reference run.
#![allow(dead_code)]

use crate::support::eval::Eval;
use std::path::PathBuf;
use std::rc::Rc;

use ggweb::backend::Backend;
use ggweb::cpu::CpuBackend;
use ggweb::gguf::Limits;
use ggweb::model::context::{Gpt2, Gpt2Options};
use ggweb::model::loader::{load_from_bytes, LoadedModel, ModelLoader};
use ggweb::model::sampling::argmax;

use crate::support::fixtures;

/// The project's tiny F32 fixture (3 layers) when this checkout has it, else the shared
/// llama.cpp-converted one (2 layers). Either is a real GPT-2 GGUF with a tokenizer.
pub fn tiny_f32() -> (PathBuf, Vec<u8>) {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-f32.gguf");
    let path = if fixture.is_file() { fixture } else { fixtures::models_dir().join("tiny-gpt2-f32.gguf") };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, bytes)
}

/// "The quick brown fox jumps over the lazy dog." in GPT-2 tokens.
pub const PROMPT: [u32; 10] = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13];

/// n_batch 4: the 10-token prompt goes in three runs, two full and one partial.
pub fn opts() -> Gpt2Options {
    Gpt2Options { n_batch: 4, ..Gpt2Options::default() }
}

pub fn load_cpu(bytes: &[u8]) -> LoadedModel {
    load_from_bytes(bytes, opts()).unwrap()
}

/// Split by layer: the last `gpu_layers` blocks on `gpu`, the rest on a CPU backend.
pub fn load_split(bytes: &[u8], gpu: Rc<dyn Backend>, gpu_layers: usize) -> LoadedModel {
    let mut loader =
        ModelLoader::new_split(gpu, Rc::new(CpuBackend::new(1)), gpu_layers, opts(), Limits::default(), None);
    // Odd-sized chunks: tensor writes start and end mid-word, on both backends.
    for chunk in bytes.chunks(100_003) {
        loader.feed(chunk).unwrap();
    }
    loader.finish().unwrap()
}

pub struct Run {
    /// The prompt's logits, every position, row-major [n_prompt][n_vocab].
    pub logits: Vec<f32>,
    /// Greedy continuation, one token per run through the KV cache.
    pub greedy: Vec<u32>,
}

pub fn run(model: &mut Gpt2, n_gen: usize) -> Run {
    let logits = model.eval(&PROMPT, 0, true).unwrap();
    let n_vocab = model.hparams.n_vocab;
    let mut next = argmax(&logits[(PROMPT.len() - 1) * n_vocab..]);
    let mut greedy = Vec::new();
    for n_past in PROMPT.len()..PROMPT.len() + n_gen {
        greedy.push(next);
        next = argmax(&model.eval(&[next], n_past, false).unwrap());
    }
    Run { logits, greedy }
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The buffer type each weight of `model` lives in.
pub fn weight_home(model: &Gpt2, name: &str) -> String {
    let t = model.weight_ctx.get_tensor(name).unwrap_or_else(|| panic!("no weight '{name}'"));
    t.data().unwrap().buffer.buffer_type_name().to_string()
}

/// (splits, copies, bytes copied) of one generated token with `gpu_layers` on a GPU that
/// runs every op, attending to `n_kv` cells: the CPU alone; CPU then GPU, the boundary
/// crossing as two [n_embd] rows (the last CPU layer's ffn_out and ffn_inp: the spread up
/// from the GPU takes the residual add); or the GPU alone, with the token id and position
/// copied up. Either way with a GPU layer the KQ mask ([n_kv] for one token, an input and
/// so on the CPU) is copied up too.
pub fn expected_token_split(gpu_layers: usize, n_layer: usize, n_embd: usize, n_kv: usize) -> (usize, usize, usize) {
    if gpu_layers == 0 {
        (1, 0, 0)
    } else if gpu_layers <= n_layer {
        (2, 3, 2 * 4 * n_embd + 4 * n_kv)
    } else {
        (1, 3, 2 * 4 + 4 * n_kv)
    }
}
