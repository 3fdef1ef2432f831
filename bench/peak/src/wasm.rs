//! wasm32 ceilings (SIMD128 and relaxed SIMD), exported for bench/peak.mjs.
#![no_std]
#![cfg(target_arch = "wasm32")]

use core::arch::wasm32::*;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}

/// 12 independent multiply-add chains of 4 lanes, `n` rounds: enough chains to hide the
/// latency on two FMA ports, so the result is the issue rate. `relaxed_madd` is one fused
/// instruction where V8 has FMA3; the plain build's multiply then add is two.
#[no_mangle]
pub extern "C" fn madd_relaxed(n: u32) -> f32 {
    chains(n, |a, x, y| f32x4_relaxed_madd(a, x, y))
}

#[no_mangle]
pub extern "C" fn madd_plain(n: u32) -> f32 {
    chains(n, |a, x, y| f32x4_add(f32x4_mul(a, x), y))
}

#[inline(always)]
fn chains(n: u32, f: impl Fn(v128, v128, v128) -> v128) -> f32 {
    let (x, y) = (f32x4_splat(0.999), f32x4_splat(0.0001));
    let mut a = [f32x4_splat(0.0); 12];
    for (i, v) in a.iter_mut().enumerate() {
        *v = f32x4_splat(i as f32);
    }
    for _ in 0..n {
        for v in a.iter_mut() {
            *v = f(*v, x, y);
        }
    }
    let s = a.iter().fold(f32x4_splat(0.0), |s, &v| f32x4_add(s, v));
    f32x4_extract_lane::<0>(s)
}

/// Reads `len` bytes at `p` as `parts` sequential streams side by side (part k starts at
/// k·len/parts), 64 bytes of each per step in 4 independent 16-byte load chains: one
/// thread's streaming rate. wasm memory has 4 KiB pages, where one stream stalls at each
/// page the prefetcher has not reached; several streams keep more misses in flight.
///
/// # Safety
/// `p..p + len` is in linear memory.
#[no_mangle]
pub unsafe extern "C" fn stream(p: *const u8, len: usize, parts: usize) -> i32 {
    let mut a = [i32x4_splat(0); 4];
    let part = len / parts;
    let mut i = 0;
    while i + 64 <= part {
        for s in 0..parts {
            let q = p.add(s * part + i);
            for (k, v) in a.iter_mut().enumerate() {
                *v = i32x4_add(*v, v128_load(q.add(16 * k) as *const v128));
            }
        }
        i += 64;
    }
    let s = i32x4_add(i32x4_add(a[0], a[1]), i32x4_add(a[2], a[3]));
    i32x4_extract_lane::<0>(s)
}

/// Grows linear memory by `pages` and returns the new region's address.
#[no_mangle]
pub extern "C" fn grow(pages: usize) -> usize {
    memory_grow(0, pages) * 65536
}
