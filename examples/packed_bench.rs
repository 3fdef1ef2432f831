//! Times the repacked decode kernels (`quants::repack::gemm_packed` against one row of b) on
//! GPT-2-124M shapes, in cache (one matrix, again and again) and streamed from memory
//! (rotating through copies that add up to ~256 MiB), in GB/s of weights read and GMAC/s.
//! One thread, thread CPU time, the best of five trials.
//!
//! ```text
//! cargo run --release --example packed_bench -- [q8_0,q4_K,q6_K]   # GGWEB_NO_REPACK=1: ggml's layout
//! ```
// Native only: `wasm-pack test` (cargo test for wasm32) builds the examples too.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use ggweb::quants::{self, repack};
use ggweb::GgmlType;

fn thread_cpu() -> f64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock_id: i32, tp: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec; 3 = CLOCK_THREAD_CPUTIME_ID.
    unsafe { clock_gettime(3, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

struct Xorshift(u32);
impl Xorshift {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
    fn f32(&mut self) -> f32 {
        self.next() as f32 / u32::MAX as f32 - 0.5
    }
}

/// `m` rows of `k` weights of `ty`: quantized from random floats where ggweb can quantize
/// `ty`, else random quant bytes with small normal f16 scales (as examples/kernel_bench).
fn weights(ty: GgmlType, k: usize, m: usize, rng: &mut Xorshift) -> Vec<u8> {
    if quants::can_quantize(ty) {
        let v: Vec<f32> = (0..k * m).map(|_| rng.f32()).collect();
        return quants::quantize(ty, &v).expect("quantize");
    }
    let mut bytes: Vec<u8> = (0..ty.row_size(k as i64) * m).map(|_| rng.next() as u8).collect();
    let ts = ty.type_size();
    let d = half::f16::from_f32(2e-4).to_le_bytes();
    let at: &[usize] = match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        _ => &[ts - 2],
    };
    for blk in bytes.chunks_exact_mut(ts) {
        for &o in at {
            blk[o..o + 2].copy_from_slice(&d);
        }
    }
    bytes
}

/// Best thread-CPU seconds per product over five trials of at least 0.1 s each, rotating
/// through `copies`.
fn time(ty: GgmlType, k: usize, m: usize, copies: &[Vec<u8>], b: &[u8], packed: bool) -> f64 {
    let mut c = vec![0f32; m];
    let rs = ty.row_size(k as i64);
    let run = |i: usize, c: &mut [f32]| {
        let a = &copies[i % copies.len()];
        if packed {
            repack::gemm_packed(ty, k, m, 1, a, b, b.len(), c, m);
        } else {
            quants::gemm(ty, k, m, 1, a, rs, b, b.len(), c, m);
        }
    };
    for i in 0..copies.len() {
        run(i, &mut c);
    }
    let mut best = f64::MAX;
    let mut i = 0;
    for _ in 0..5 {
        let (mut runs, c0) = (0, thread_cpu());
        while thread_cpu() - c0 < 0.1 || runs < copies.len() {
            run(i, &mut c);
            i += 1;
            runs += 1;
        }
        best = best.min((thread_cpu() - c0) / runs as f64);
    }
    std::hint::black_box(&c);
    best
}

fn main() {
    let only = std::env::args().nth(1).unwrap_or_else(|| "q8_0,q4_K,q6_K".into());
    let no_repack = std::env::var("GGWEB_NO_REPACK").is_ok_and(|v| v == "1");
    let mut rng = Xorshift(7);
    println!("| type | K × M | layout | kernel table (`repack::kernel_name`) | in cache GB/s | GMAC/s | from memory GB/s | GMAC/s |");
    println!("|---|---|---|---|--:|--:|--:|--:|");
    for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
        if !only.split(',').any(|n| n.eq_ignore_ascii_case(ty.name())) {
            continue;
        }
        for (k, m) in [(768usize, 2304usize), (3072, 768), (768, 50257)] {
            let one = weights(ty, k, m, &mut rng);
            let packed = !no_repack && repack::wants(ty, k, m, false);
            let copies_n = ((256 << 20) / one.len()).max(2);
            let mut copies: Vec<Vec<u8>> = (0..copies_n).map(|_| one.clone()).collect();
            if packed {
                for a in &mut copies {
                    assert!(repack::pack(ty, k, m, a), "pack {ty}");
                }
            }
            let x: Vec<f32> = (0..k).map(|_| rng.f32()).collect();
            let b = quants::quantize(ty.vec_dot_type(), &x).expect("quantize b");
            let hot = time(ty, k, m, &copies[..1], &b, packed);
            let cold = time(ty, k, m, &copies, &b, packed);
            let (bytes, macs) = (one.len() as f64, (k * m) as f64);
            let name = if packed { repack::kernel_name(ty).unwrap_or("?") } else { "vec_dot rows" };
            println!(
                "| {ty} | {k} × {m} | {} | {name} | {:.1} | {:.1} | {:.1} | {:.1} |",
                if packed { "packed" } else { "ggml" },
                bytes / hot * 1e-9,
                macs / hot * 1e-9,
                bytes / cold * 1e-9,
                macs / cold * 1e-9
            );
        }
    }
}
