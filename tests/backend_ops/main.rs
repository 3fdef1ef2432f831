//! test-backend-ops, natively: every case of tests/backend_ops/suite.rs (the one case list,
//! shared with the browser's tests/browser/backend_ops.rs) against its f64 reference on
//! - the CPU backend on each instruction set this machine has: the portable scalar
//!   kernels (forced with `ggweb::cpu::features::set_scalar_only`), x86 AVX2 (plain
//!   `vpmaddubsw` prompt kernels) and AVX2 with `vpdpbusd` (AVX-VNNI or AVX512-VNNI);
//! - WebGPU (wgpu on Vulkan; Mesa's lavapipe in CI) with the per-row mat-vec kernels; with
//!   the workgroup kernels, every optional extension the adapter has (subgroups,
//!   shader-f16) and storage bindings lowered to 64 KiB (weights above it go through the
//!   row-range split path); and with the workgroup kernels and no extensions. Without an adapter these fail, as in
//!   tests/webgpu/; `GGWEB_ALLOW_NO_GPU=1` makes that a printed `SKIPPED` (which
//!   scripts/test.sh refuses).
//!
//! `cargo test --test backend_ops [TEST]`; `GGWEB_BACKEND_OPS_CASE=mul_mat` runs only the
//! cases whose name contains it.
#![cfg(not(target_arch = "wasm32"))] // native only: `wasm-pack test` builds every test target for wasm32

#[path = "../support/mod.rs"]
mod support;

mod suite;

use std::sync::Mutex;

use ggweb::cpu::arch::{set_vnni_disabled, set_zmm_disabled, Isa};
use ggweb::cpu::features;
use ggweb::cpu::CpuBackend;
use suite::{block_on, check_all, Kind, Read, Target};

/// The CPU's kernel choice is process-wide: one CPU configuration at a time.
static CPU_ISA: Mutex<()> = Mutex::new(());

fn filter() -> String {
    std::env::var("GGWEB_BACKEND_OPS_CASE").unwrap_or_default()
}

/// Runs the suite on the CPU backend (2 threads: the rows split between them) as
/// configured by `setup`, which `reset` undoes.
fn check_cpu(label: &str, setup: impl Fn(), reset: impl Fn()) {
    let _one = CPU_ISA.lock().unwrap_or_else(|p| p.into_inner());
    /// Undoes `setup` however the test ends.
    struct Reset<F: Fn()>(F);
    impl<F: Fn()> Drop for Reset<F> {
        fn drop(&mut self) {
            (self.0)()
        }
    }
    let _reset = Reset(reset);
    setup();
    let cpu = CpuBackend::new(2);
    let t =
        Target { label: label.into(), backend: &cpu, read: Read::Blocking, rounds_activations: true, kind: Kind::Cpu };
    run(&t, label);
}

/// Every case on `t`, the ones it cannot run listed, then pass or fail.
fn run(t: &Target, label: &str) {
    let r = block_on(check_all(t, &filter(), &|l| eprintln!("{l}")));
    for (c, why) in &r.not_supported {
        eprintln!("NOTE {label}: {c} not run: {why}");
    }
    eprintln!("{label}: {} cases passed", r.passed);
    r.assert_ok(label);
}

#[test]
fn cpu_scalar() {
    check_cpu(
        "cpu(scalar)",
        || {
            features::set_scalar_only(true);
            assert_eq!(Isa::best(), Isa::Scalar);
            assert_eq!(ggweb::cpu::arch::kernels().name, "scalar");
        },
        || features::set_scalar_only(false),
    );
}

#[test]
fn cpu_avx2() {
    if !Isa::Avx2.is_available() {
        eprintln!("NOTE: no AVX2+F16C on this machine: the scalar run covers its CPU");
        return;
    }
    check_cpu(
        "cpu(avx2)",
        || {
            set_vnni_disabled(true);
            assert_eq!(Isa::best(), Isa::Avx2);
        },
        || set_vnni_disabled(false),
    );
}

#[test]
fn cpu_avx2_vnni() {
    let f = features::detect();
    if !Isa::Avx2.is_available() || !(f.avx_vnni || f.avx512_vnni) {
        eprintln!("NOTE: no AVX-VNNI or AVX512-VNNI on this machine: cpu_avx2 covers its CPU");
        return;
    }
    check_cpu(
        "cpu(avx2+vnni)",
        || {
            set_zmm_disabled(true);
            assert_eq!(Isa::best(), Isa::Avx2);
        },
        || set_zmm_disabled(false),
    );
}

/// The packed weights' 512-bit prompt kernels (`cpu/arch/x86/packed512.rs`).
#[test]
fn cpu_avx512() {
    if !features::detect().avx512 {
        eprintln!("NOTE: no AVX-512 F/BW/VL/VNNI on this machine: cpu_avx2_vnni covers its CPU");
        return;
    }
    check_cpu("cpu(avx512)", || assert_eq!(Isa::best(), Isa::Avx2), || {});
}

#[cfg(feature = "webgpu")]
mod webgpu {
    use super::*;
    use ggweb::webgpu::{AdapterSummary, MatMulKernels, WebGpuOptions};

    /// Runs the suite on a device opened with `opts`, checking that it uses the subgroup
    /// and shader-f16 kernels exactly when `opts` forces them on.
    fn check_webgpu(label: &str, opts: WebGpuOptions) {
        let Some(gpu) = support::gpu::webgpu(opts.clone()) else { return };
        let a = gpu.adapter();
        assert_eq!(a.subgroup_kernels, opts.subgroups == Some(true), "{label}: {a:?}");
        assert_eq!(a.f16_kernels, opts.shader_f16 == Some(true), "{label}: {a:?}");
        let t = Target {
            label: label.into(),
            backend: &gpu,
            read: Read::Blocking,
            rounds_activations: false,
            kind: Kind::WebGpu,
        };
        run(&t, label);
    }

    /// The adapter's optional features (from a default device), printed for the log.
    fn adapter() -> Option<AdapterSummary> {
        let a = support::gpu::webgpu(WebGpuOptions::default())?.adapter().clone();
        eprintln!("NOTE adapter '{}' ({}): subgroups {}, shader-f16 {}", a.name, a.backend, a.subgroups, a.shader_f16);
        Some(a)
    }

    #[test]
    fn webgpu_per_row() {
        let opts = WebGpuOptions {
            mat_mul_kernels: MatMulKernels::PerRow,
            subgroups: Some(false),
            shader_f16: Some(false),
            ..Default::default()
        };
        check_webgpu("webgpu(per-row)", opts);
    }

    /// The workgroup kernels with every extension the adapter has (subgroup reductions,
    /// shader-f16 loads and tiles): forced on, so a missing one is not silently skipped.
    #[test]
    fn webgpu_workgroup_64k_bindings() {
        let Some(a) = adapter() else { return };
        let opts = WebGpuOptions {
            max_binding_size_override: Some(64 << 10),
            mat_mul_kernels: MatMulKernels::Workgroup,
            subgroups: Some(a.subgroups),
            shader_f16: Some(a.shader_f16),
            ..Default::default()
        };
        check_webgpu(
            &format!("webgpu(workgroup, 64 KiB bindings, subgroups {}, f16 {})", a.subgroups, a.shader_f16),
            opts,
        );
    }

    /// suite::long_row_cases (rows past one part of the per-row and tiled kernels) on both
    /// kernel families, with the default bindings (their rows do not fit 64 KiB ones).
    #[test]
    fn webgpu_long_rows() {
        for kernels in [MatMulKernels::PerRow, MatMulKernels::Workgroup] {
            let opts = WebGpuOptions {
                mat_mul_kernels: kernels,
                subgroups: Some(false),
                shader_f16: Some(false),
                ..Default::default()
            };
            let Some(gpu) = support::gpu::webgpu(opts) else { return };
            let label = format!("webgpu({kernels:?}) long rows");
            let t = Target {
                label: label.clone(),
                backend: &gpu,
                read: Read::Blocking,
                rounds_activations: false,
                kind: Kind::WebGpu,
            };
            let r = block_on(suite::check_cases(&t, &suite::long_row_cases(), &|l| eprintln!("{l}")));
            eprintln!("{label}: {} cases passed", r.passed);
            r.assert_ok(&label);
        }
    }

    /// The workgroup kernels' fallbacks: the tree reduction and unpack2x16float loads.
    #[test]
    fn webgpu_workgroup_no_extensions() {
        let opts = WebGpuOptions {
            mat_mul_kernels: MatMulKernels::Workgroup,
            subgroups: Some(false),
            shader_f16: Some(false),
            ..Default::default()
        };
        check_webgpu("webgpu(workgroup, no subgroups, no f16)", opts);
    }
}

/// The list itself: names are unique (they seed the inputs and name failures) and it holds
/// every op GPT-2's graph uses and mul_mat and get_rows for every weight type.
#[test]
fn case_list_covers_the_graph() {
    let cases = suite::cases();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "duplicate case names");
    for op in ["add", "mul", "scale", "norm", "gelu", "soft_max", "diag_mask_inf", "cont", "cpy", "get_rows", "mul_mat"]
    {
        assert!(names.iter().any(|c| c.starts_with(op)), "no case for {op}");
    }
    // Every backward op alone, and a gradient case (f64 reference and finite differences)
    // for every op of the forward graph.
    for op in [
        "out_prod",
        "soft_max_ext_back",
        "gelu_back",
        "norm_back",
        "repeat_back",
        "get_rows_back",
        "acc",
        "diag_mask_zero",
        "fill",
    ] {
        assert!(names.iter().any(|c| c.starts_with(op)), "no case for {op}");
    }
    for op in ["add", "mul", "scale", "norm", "gelu", "soft_max", "diag_mask_inf", "cont", "cpy", "get_rows", "mul_mat"]
    {
        assert!(names.iter().any(|c| c.starts_with("grad ") && c.contains(op)), "no gradient case for {op}");
    }
    for ty in suite::WEIGHT_TYPES {
        for op in ["get_rows", "mul_mat"] {
            assert!(names.iter().any(|c| c.starts_with(&format!("{op} {ty}"))), "no {op} case for {ty}");
        }
    }
    eprintln!("{n} cases");
}
