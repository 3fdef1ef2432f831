//! test-backend-ops in the browser: the case list and test body of
//! tests/backend_ops/suite.rs (the same module the native tests/backend_ops/ runs) on the
//! CPU backend compiled to wasm32 — its SIMD128 kernels (relaxed SIMD when built with
//! `+relaxed-simd`: scripts/test.sh's relaxed step) and its scalar kernels — and on the
//! browser's WebGPU. scripts/test.sh runs it under `wasm-pack test` in headless Chromium
//! and Firefox:
//!
//! ```text
//! wasm-pack test --headless --chrome -- --test browser -- backend_ops::
//! WASM_BINDGEN_USE_BROWSER=1 RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" \
//!     GGWEB_EXPECT_RELAXED=1 cargo test --target wasm32-unknown-unknown --test browser -- backend_ops::
//! ```

#[path = "../backend_ops/suite.rs"]
mod suite;

use ggweb::cpu::arch::Isa;
use ggweb::cpu::{features, CpuBackend};
use suite::{check_all, Kind, Read, Target};
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
use suite::{check_forward, check_gradients};
use wasm_bindgen_test::wasm_bindgen_test;

fn log(l: &str) {
    if l.starts_with("FAIL") {
        web_sys::console::log_1(&l.into());
    }
}

async fn check_cpu(label: &str) {
    let cpu = CpuBackend::new(1);
    let t =
        Target { label: label.into(), backend: &cpu, read: Read::Blocking, rounds_activations: true, kind: Kind::Cpu };
    let r = check_all(&t, "", &log).await;
    web_sys::console::log_1(&format!("{label}: {} cases passed, {} left out", r.passed, r.not_supported.len()).into());
    r.assert_ok(label);
}

/// The build's SIMD kernels: simd128, with the relaxed forms on the relaxed build.
#[wasm_bindgen_test]
async fn cpu_simd128() {
    let f = features::detect();
    assert!(f.simd128 && Isa::best() == Isa::Simd128, "a simd128 build: {f:?}");
    // scripts/test.sh's relaxed step sets GGWEB_EXPECT_RELAXED at build time.
    assert_eq!(f.relaxed_simd, option_env!("GGWEB_EXPECT_RELAXED") == Some("1"), "{f:?}");
    check_cpu(if f.relaxed_simd { "cpu(wasm simd128+relaxed)" } else { "cpu(wasm simd128)" }).await;
}

/// The portable kernels as wasm runs them (one test at a time in the browser: the switch
/// cannot affect another test).
#[wasm_bindgen_test]
async fn cpu_scalar() {
    /// Back to the SIMD kernels however the test ends.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            features::set_scalar_only(false);
        }
    }
    let _reset = Reset;
    features::set_scalar_only(true);
    assert_eq!(ggweb::cpu::arch::kernels().name, "scalar");
    check_cpu("cpu(wasm scalar)").await;
}

/// The browser adapter's configurations: both mat-mul kernel families, the workgroup ones
/// also without shader-f16 where the adapter has it (wgpu offers subgroups natively only:
/// never here).
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
async fn webgpu_configs() -> Vec<ggweb::webgpu::WebGpuOptions> {
    use ggweb::webgpu::{MatMulKernels, WebGpuBackend, WebGpuOptions};
    let a = WebGpuBackend::new_async(WebGpuOptions::default()).await.expect(NO_ADAPTER).adapter().clone();
    let mut runs = vec![(MatMulKernels::Workgroup, None), (MatMulKernels::PerRow, None)];
    if a.shader_f16 {
        runs.push((MatMulKernels::Workgroup, Some(false)));
    }
    runs.into_iter()
        .map(|(kernels, f16)| WebGpuOptions { mat_mul_kernels: kernels, shader_f16: f16, ..Default::default() })
        .collect()
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
const NO_ADAPTER: &str = "a WebGPU adapter in the headless browser (webdriver.json enables WebGPU)";

/// One part of the case list (the forward cases or the gradients) on each of [`webgpu_configs`].
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
async fn check_webgpu(part: &str, gradients: bool) {
    use ggweb::webgpu::WebGpuBackend;
    for opts in webgpu_configs().await {
        let kernels = opts.mat_mul_kernels;
        let gpu = WebGpuBackend::new_async(opts).await.expect(NO_ADAPTER);
        let label = format!("browser webgpu({kernels:?}, f16 {}) {part}", gpu.adapter().f16_kernels);
        let t = Target {
            label: label.clone(),
            backend: &gpu,
            read: Read::WebGpu(&gpu),
            rounds_activations: false,
            kind: Kind::WebGpu,
        };
        let r = if gradients { check_gradients(&t, "", &log).await } else { check_forward(&t, "", &log).await };
        web_sys::console::log_1(
            &format!("{label}: {} cases passed, {} left out", r.passed, r.not_supported.len()).into(),
        );
        r.assert_ok(&label);
    }
}

/// The forward ops' cases on each configuration of the browser's adapter (~20 s each in
/// SwiftShader). Not in the relaxed-SIMD build, which changes only the CPU's kernels.
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu() {
    use ggweb::webgpu::{WebGpuBackend, WebGpuOptions};
    let a = WebGpuBackend::new_async(WebGpuOptions::default()).await.expect(NO_ADAPTER).adapter().clone();
    web_sys::console::log_1(
        &format!("adapter '{}' ({}): subgroups {}, shader-f16 {}", a.name, a.backend, a.subgroups, a.shader_f16).into(),
    );
    assert!(!a.subgroups, "wgpu offers subgroups natively only: {a:?}");
    // Asking for a missing extension is a typed error, not a silent fallback.
    match WebGpuBackend::new_async(WebGpuOptions { subgroups: Some(true), ..Default::default() }).await {
        Err(ggweb::backend::BackendError::Unavailable(why)) => {
            assert!(why.contains("lacks the subgroups feature"), "{why}")
        }
        Err(e) => panic!("expected Unavailable, got {e}"),
        Ok(_) => panic!("a device with subgroups forced on an adapter without them"),
    }
    check_webgpu("forward", false).await;
}

/// The backward pass's cases (the backward ops, the gradient cases' f64 references and
/// finite differences) on each configuration: a test of their own, so that neither half
/// nears wasm-bindgen-test's time limit.
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_gradients() {
    check_webgpu("gradients", true).await;
}
