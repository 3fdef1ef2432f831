//! TransformerLens's hook points traced with the whole model on WebGPU (lavapipe in CI)
//! against TransformerLens itself: the same check as tests/model/tl_hooks.rs on the CPU.

use std::rc::Rc;

use ggweb::backend::Backend;
use ggweb::model::session::Session;
use ggweb::webgpu::WebGpuOptions;

use crate::support::gpu;
use crate::support::sched::{load_split, tiny_f32};
use crate::support::tl_ref::{check_hook_points, fixture, Ref};

#[test]
fn every_hook_point_on_webgpu_matches_transformer_lens() {
    let _shared = gpu::shared();
    let Some(b) = gpu::webgpu(WebGpuOptions::default()) else { return };
    let (path, bytes) = tiny_f32();
    assert_eq!(path, fixture("tiny-f32.gguf"), "the reference is of tests/fixtures/tiny-f32.gguf");
    let gpu: Rc<dyn Backend> = Rc::new(b);
    let n_layer = 3;
    let mut s = Session::new(load_split(&bytes, gpu, n_layer + 1));
    let (worst, at) = check_hook_points(&mut s, &Ref::load(), 2e-5);
    eprintln!("WebGPU: worst hook-point difference {worst} at {at}");
}
