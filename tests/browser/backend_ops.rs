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
use suite::{check_cases, check_forward, check_grad_cases, grad::check_finite_differences_part};
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

/// Which part of the case list a WebGPU test runs.
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Forward,
    /// Share i of [`FUSED_PARTS`] of the fused chains' cases (suite::fused_cases).
    Fused(usize),
    Gradients,
    /// Share i of [`FD_PARTS`].
    FiniteDifferences(usize),
    /// suite::long_row_cases.
    LongRows,
}

/// The finite differences' tests: ~60 s in Firefox (lavapipe) in one, ~110 ms per read-back
/// (10 elements per param in the browser: suite/grad.rs FD_MAX_ELEMS_BROWSER_GPU).
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
const FD_PARTS: usize = 3;

/// One part of the case list on the first `n_configs` of [`webgpu_configs`], each run's time
/// in its log line.
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
async fn check_webgpu(part: Part, n_configs: usize) {
    use ggweb::webgpu::WebGpuBackend;
    for opts in webgpu_configs().await.into_iter().take(n_configs) {
        let kernels = opts.mat_mul_kernels;
        let gpu = WebGpuBackend::new_async(opts).await.expect(NO_ADAPTER);
        let name = match part {
            Part::Forward => "forward",
            Part::Fused(_) => "fused chains",
            Part::Gradients => "gradients",
            Part::FiniteDifferences(_) => "finite differences",
            Part::LongRows => "long rows",
        };
        let label = format!("browser webgpu({kernels:?}, f16 {}) {name}", gpu.adapter().f16_kernels);
        let t = Target {
            label: label.clone(),
            backend: &gpu,
            read: Read::WebGpu(&gpu),
            rounds_activations: false,
            kind: Kind::WebGpu,
        };
        let t0 = js_sys::Date::now();
        let r = match part {
            Part::Forward => check_forward(&t, "", &log).await,
            Part::Fused(i) => {
                let all = suite::fused_cases();
                let per = all.len().div_ceil(FUSED_PARTS);
                let part: Vec<_> = all.into_iter().skip(i * per).take(per).collect();
                check_cases(&t, &part, &log).await
            }
            Part::Gradients => check_grad_cases(&t, "", &log).await,
            Part::FiniteDifferences(i) => check_finite_differences_part(&t, i, FD_PARTS, &log).await,
            Part::LongRows => check_cases(&t, &suite::long_row_cases(), &log).await,
        };
        let secs = (js_sys::Date::now() - t0) / 1000.0;
        web_sys::console::log_1(
            &format!("{label}: {} cases passed, {} left out ({secs:.1} s)", r.passed, r.not_supported.len()).into(),
        );
        // Free the device now rather than at the page's garbage collection: one page runs
        // every test, and Firefox's WebGPU (lavapipe) stalled late in the list with many
        // devices alive.
        gpu.destroy_device();
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
    check_webgpu(Part::Forward, usize::MAX).await;
}

/// The fused chains' tests: ~70 s in SwiftShader on a loaded 2-vCPU machine in one.
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
const FUSED_PARTS: usize = 6;

/// The chains WebGPU fuses into one dispatch (crate/webgpu/fuse.rs), on each configuration,
/// in [`FUSED_PARTS`] tests beside `webgpu`, so that each stays well inside the time limit.
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_fused_0() {
    check_webgpu(Part::Fused(0), usize::MAX).await;
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_fused_1() {
    check_webgpu(Part::Fused(1), usize::MAX).await;
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_fused_2() {
    check_webgpu(Part::Fused(2), usize::MAX).await;
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_fused_3() {
    check_webgpu(Part::Fused(3), usize::MAX).await;
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_fused_4() {
    check_webgpu(Part::Fused(4), usize::MAX).await;
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_fused_5() {
    check_webgpu(Part::Fused(5), usize::MAX).await;
}

/// The backward pass's cases (the backward ops alone, the gradient cases against the f64
/// reference of their backward graph) on each configuration: a test of its own, so that
/// neither half nears wasm-bindgen-test's time limit (Firefox's WebGPU reads back slowly).
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_gradients() {
    check_webgpu(Part::Gradients, usize::MAX).await;
}

/// The gradient cases against central finite differences of their forward, in [`FD_PARTS`]
/// tests, on the first configuration only: two forward runs and read-backs per perturbed
/// element (~1800), and the backward kernels they check are the same in every configuration
/// (only mul_mat's differ, which `webgpu` and `webgpu_gradients` check in each).
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_finite_differences_0() {
    check_webgpu(Part::FiniteDifferences(0), 1).await;
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_finite_differences_1() {
    check_webgpu(Part::FiniteDifferences(1), 1).await;
}

#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_finite_differences_2() {
    check_webgpu(Part::FiniteDifferences(2), 1).await;
}

/// mul_mat over vocabulary-long rows (suite::long_row_cases: past one part of the per-row and
/// tiled kernels) on each configuration.
#[cfg(all(feature = "webgpu", not(target_feature = "relaxed-simd")))]
#[wasm_bindgen_test]
async fn webgpu_long_rows() {
    check_webgpu(Part::LongRows, usize::MAX).await;
}
