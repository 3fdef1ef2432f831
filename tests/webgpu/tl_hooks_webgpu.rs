//! TransformerLens's hook points traced with the whole model on WebGPU (lavapipe in CI)
//! against TransformerLens itself: the same check as tests/model/tl_hooks.rs on the CPU.

use std::rc::Rc;

use ggweb::backend::Backend;
use ggweb::model::session::Session;
use ggweb::webgpu::WebGpuOptions;

use crate::support::gpu;
use crate::support::sched::{load_split, tiny_f32};
use crate::support::tl_ref::{self, check_hook_points, fixture, Ref};

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

/// The model wholly on WebGPU, as above.
fn gpu_session() -> Option<Session> {
    let b = gpu::webgpu(WebGpuOptions::default())?;
    let (_, bytes) = tiny_f32();
    let gpu: Rc<dyn Backend> = Rc::new(b);
    Some(Session::new(load_split(&bytes, gpu, 3 + 1)))
}

/// Interventions (zero/scale/add/set at every kind of hook point), steering, the patching
/// sweeps, the logit lens, attribution and an SAE's features with the model on WebGPU:
/// the CPU's checks against TransformerLens and SAELens, the same bounds.
#[test]
fn interventions_patching_lens_attribution_and_sae_on_webgpu_match_transformer_lens() {
    let _shared = gpu::shared();
    let Some(mut s) = gpu_session() else { return };
    let r = Ref::load();
    tl_ref::check_hooks(&mut s, &r);
    tl_ref::check_steering(&mut s, &r);
    tl_ref::check_patching(&mut s, &r);
    tl_ref::check_lens(&mut s, &r);
    tl_ref::check_attribution(&mut s, &r);
    tl_ref::check_sae(&mut s, &r);
}

/// `score` with hooks and hooks on the LayerNorm scales with the model on WebGPU: the CPU's
/// checks against TransformerLens (tests/fixtures/tiny-f32.tl-score-ref.json), the same bounds.
#[test]
fn score_hooks_and_layer_norm_scale_hooks_on_webgpu_match_transformer_lens() {
    let _shared = gpu::shared();
    let Some(mut s) = gpu_session() else { return };
    tl_ref::check_score_hooks(&mut s);
    tl_ref::check_ln_scale_hooks(&mut s);
}

/// The gradient calls with the model's forward pass on WebGPU (the backward ops run on the
/// CPU, the scheduler copying the activations they read): `run`'s `grad`, saliency and
/// attribution patching against PyTorch autograd, the CPU's bounds (tests/model/grad.rs).
#[test]
fn gradients_with_the_forward_on_webgpu_match_pytorch_autograd() {
    let _shared = gpu::shared();
    let Some(mut s) = gpu_session() else { return };
    let r = crate::support::grad_ref::load();
    let (cases, points, worst, at) = crate::support::grad_ref::check_grads(&mut s, &r);
    eprintln!("WebGPU: {cases} cases, {points} gradients; worst relative error {worst:e} at {at}");
    let worst = crate::support::grad_ref::check_saliency(&mut s, &r);
    eprintln!("WebGPU: worst saliency score difference {worst:e}");
    let worst = crate::support::grad_ref::check_atp(&mut s, &r);
    eprintln!("WebGPU: worst attribution patching cell difference {worst:e}");
}
