//! Hidden exports for the wasm decode harness (`bench/wasm-decode.mjs`), not part of the JS
//! API: the CPU backend's per-node profiler (`CpuBackend::with_profiler`, what `ggweb bench
//! --profile` reads natively) with `performance.now()` as its clock, and the packed decode
//! kernels timed alone on matrices of a model's shapes, in cache or streaming from memory.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;

use wasm_bindgen::prelude::*;

use serde::Serialize;

use super::js_error;
use crate::cpu::arch::{gemm, quantize_row, repack};
use crate::cpu::CpuBackend;
use crate::GgmlType;

#[wasm_bindgen]
extern "C" {
    /// `performance.now()` (Node, windows and workers alike), one import call per reading.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn perf_now() -> f64;
}

fn clock() -> f64 {
    perf_now() / 1e3
}

std::thread_local! {
    /// Set by `_debugProfileNext`: the next CPU backend a load opens is a profiled one.
    static NEXT: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    /// The last profiled backend opened, which `_debugProfile` reads.
    static PROFILED: RefCell<Option<Rc<CpuBackend>>> = const { RefCell::new(None) };
}

/// The CPU backend of a load with `n` threads: profiled when `_debugProfileNext(true)` came
/// before it (that one load only), else a plain one.
pub(super) fn cpu_backend(n: usize) -> Rc<CpuBackend> {
    if !NEXT.with(|c| c.replace(false)) {
        return Rc::new(CpuBackend::new(n));
    }
    let b = Rc::new(CpuBackend::with_profiler(n, clock));
    PROFILED.with(|p| *p.borrow_mut() = Some(b.clone()));
    b
}

/// The next load's CPU backend times every node (see [`debug_profile`]).
#[wasm_bindgen(js_name = _debugProfileNext)]
pub fn debug_profile_next(on: bool) {
    NEXT.with(|c| c.set(on));
}

/// The profiled backend's time per (node class, op) since the last call, as
/// `[{ class, op, calls, secs }]`, largest first; then starts again from zero. Empty when no
/// load was profiled.
#[wasm_bindgen(js_name = _debugProfile)]
pub fn debug_profile() -> JsValue {
    #[derive(Serialize)]
    struct Row {
        class: String,
        op: &'static str,
        calls: f64,
        secs: f64,
    }
    let rows: Vec<Row> = PROFILED.with(|p| {
        let p = p.borrow();
        let Some(b) = p.as_ref() else { return Vec::new() };
        let rows = b
            .profile()
            .into_iter()
            .map(|e| Row { class: e.class, op: e.op, calls: e.calls as f64, secs: e.secs })
            .collect();
        b.reset_profile();
        rows
    });
    rows.serialize(&serde_wasm_bindgen::Serializer::json_compatible()).expect("plain data serializes")
}

/// Times the packed decode product (one row of activations, as a decode step's `mul_mat`
/// runs it: `repack::gemm_packed`) of `copies` matrices of `m` rows of `k` elements of `ty`
/// (`"q8_0"`, `"q4_K"`, `"q6_K"`: random weights with finite scales, repacked; `"q4_0"`: in
/// ggml's layout, which wasm keeps for it, through `cpu::arch::gemm`), visiting the
/// copies in turn `reps` times after one untimed pass. One copy stays in cache as far as it
/// fits; copies adding up to more than the caches stream from memory as a model's weights
/// do. `block` > 0 hands the kernel that many rows a call, as `mul_mat` splits a product into
/// jobs (0: the whole matrix in one call). `cols` (default 1) rows of activations a product: up
/// to 4, a decode step of that many sequences; up to 512, a prompt's or a training batch's
/// product (the panel kernels). Returns `[seconds of all timed products, bytes
/// of weights they read]`.
#[wasm_bindgen(js_name = _benchMatvec)]
pub fn bench_matvec(
    ty: &str,
    k: usize,
    m: usize,
    copies: usize,
    reps: usize,
    block: usize,
    cols: Option<usize>,
) -> Result<Vec<f64>, JsValue> {
    let cols = cols.unwrap_or(1);
    let ty = match ty {
        "q8_0" => GgmlType::Q8_0,
        "q4_K" => GgmlType::Q4_K,
        "q6_K" => GgmlType::Q6_K,
        "q4_0" => GgmlType::Q4_0,
        other => {
            return Err(js_error("invalid", format!("_benchMatvec: type {other:?} is not q8_0, q4_0, q4_K or q6_K")))
        }
    };
    // Q4_0 is not repacked on wasm (its decode kernels read ggml's layout): rows of 4 as the
    // plain kernels' tiles.
    let packed = ty != GgmlType::Q4_0;
    let group = if packed { repack::group(ty) } else { 4 };
    if k == 0
        || !k.is_multiple_of(ty.blck_size())
        || m == 0
        || !m.is_multiple_of(group)
        || copies == 0
        || reps == 0
        || !(1..=512).contains(&cols)
    {
        return Err(js_error(
            "invalid",
            format!(
                "_benchMatvec: k {k} (a multiple of {}), m {m} (of {}), copies {copies} and reps {reps} (> 0), cols {cols} (1 to 512)",
                ty.blck_size(),
                group
            ),
        ));
    }
    let rs = ty.row_size(k as i64);
    let bytes = m * rs;
    // Random bytes (an LCG), then each block's scales made finite and Q8_0's -128 quants
    // 127: what `repack::pack` takes.
    let mut x: u32 = 0x1234_5678;
    let mut rnd = || {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (x >> 24) as u8
    };
    let mut one: Vec<u8> = (0..bytes).map(|_| rnd()).collect();
    let (bs, scales): (usize, &[usize]) = match ty {
        GgmlType::Q8_0 => (34, &[0]),
        GgmlType::Q4_0 => (18, &[0]),
        GgmlType::Q4_K => (144, &[0, 2]),
        _ => (210, &[208]),
    };
    for b in one.chunks_exact_mut(bs) {
        for &o in scales {
            b[o..o + 2].copy_from_slice(&0x2c00u16.to_le_bytes());
        }
        if ty == GgmlType::Q8_0 {
            b[2..].iter_mut().filter(|q| **q == 0x80).for_each(|q| *q = 0x7f);
        }
    }
    if packed && !repack::pack(ty, k, m, &mut one) {
        return Err(js_error("invalid", format!("_benchMatvec: {ty} {m}×{k} has no packed layout in this build")));
    }
    let mut all = vec![0u8; bytes * copies];
    all.chunks_exact_mut(bytes).for_each(|c| c.copy_from_slice(&one));
    drop(one);
    let src: Vec<f32> = (0..k).map(|i| ((i * 7919 % 997) as f32 / 997.0) - 0.5).collect();
    let vt = ty.vec_dot_type();
    let ldb = vt.row_size(k as i64);
    let mut b = vec![0u8; ldb * cols];
    b.chunks_exact_mut(ldb).for_each(|r| quantize_row(vt, &src, r));
    let mut c = vec![0f32; m * cols];
    let block = if block == 0 { m } else { block.div_ceil(group) * group };
    let mut run = |i: usize| {
        let a = &all[i * bytes..(i + 1) * bytes];
        for m0 in (0..m).step_by(block) {
            let m1 = (m0 + block).min(m);
            // Column j of c at j·m (ldc = m): the block's rows of each.
            if packed {
                repack::gemm_packed(ty, k, m1 - m0, cols, &a[m0 * rs..m1 * rs], &b, ldb, &mut c[m0..], m);
            } else {
                gemm(ty, k, m1 - m0, cols, &a[m0 * rs..m1 * rs], rs, &b, ldb, &mut c[m0..], m);
            }
        }
    };
    (0..copies).for_each(&mut run);
    let t0 = clock();
    for _ in 0..reps {
        (0..copies).for_each(&mut run);
    }
    let secs = clock() - t0;
    Ok(vec![secs, bytes as f64 * copies as f64 * reps as f64])
}
