//! Native ceilings on x86-64 (bench/peak.mjs runs it): 512-, 256- and 128-bit FMA issue rates
//! and one thread's read rate, as JSON lines, the best of `rounds`.
use std::arch::x86_64::*;
use std::hint::black_box;
use std::time::Instant;

macro_rules! chains {
    ($feat:literal, $name:ident, $set:ident, $fma:ident, $add:ident, $t:ty) => {
        #[target_feature(enable = $feat)]
        unsafe fn $name(n: u32) -> f32 {
            let (x, y) = ($set(0.999), $set(0.0001));
            let mut a: [$t; 12] = [$set(0.0); 12];
            for (i, v) in a.iter_mut().enumerate() {
                *v = $set(i as f32);
            }
            for _ in 0..n {
                for v in a.iter_mut() {
                    *v = $fma(*v, x, y);
                }
            }
            let s = a.iter().fold($set(0.0), |s, &v| $add(s, v));
            let mut out = [0f32; 16];
            std::ptr::copy_nonoverlapping(
                &s as *const $t as *const f32,
                out.as_mut_ptr(),
                std::mem::size_of::<$t>() / 4,
            );
            out[0]
        }
    };
}
chains!("avx512f", fma512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, __m512);
chains!("avx2,fma", fma256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, __m256);
chains!("fma", fma128, _mm_set1_ps, _mm_fmadd_ps, _mm_add_ps, __m128);

/// Reads `len` bytes at `p` as `parts` sequential streams side by side (part k starts at
/// k·len/parts), 64 bytes of each per step in 4 independent 16-byte load chains, as the wasm
/// `stream` does. On 4 KiB pages one stream stalls at each page where the prefetcher stops;
/// several streams keep more misses in flight.
#[target_feature(enable = "sse2")]
unsafe fn stream(p: *const u8, len: usize, parts: usize) -> i32 {
    let mut a = [_mm_setzero_si128(); 4];
    let part = len / parts;
    let mut i = 0;
    while i + 64 <= part {
        for s in 0..parts {
            let q = p.add(s * part + i);
            for (k, v) in a.iter_mut().enumerate() {
                *v = _mm_add_epi32(*v, _mm_loadu_si128(q.add(16 * k) as *const __m128i));
            }
        }
        i += 64;
    }
    _mm_cvtsi128_si32(_mm_add_epi32(_mm_add_epi32(a[0], a[1]), _mm_add_epi32(a[2], a[3])))
}

extern "C" {
    fn posix_memalign(p: *mut *mut u8, align: usize, size: usize) -> i32;
    fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
}

/// `len` bytes aligned to 2 MiB, advised as transparent huge pages when `huge` (as
/// crate/backend/host.rs does for native weights; wasm memory never is).
fn buffer(len: usize, huge: bool) -> *mut u8 {
    let mut p = std::ptr::null_mut();
    // SAFETY: a fresh allocation of `len` bytes, written whole before it is read; leaked.
    unsafe {
        assert_eq!(posix_memalign(&mut p, 2 << 20, len), 0);
        if huge {
            madvise(p, len, 14); // MADV_HUGEPAGE
        }
        std::ptr::write_bytes(p, 7, len);
    }
    p
}

fn best(rounds: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..rounds).map(|_| f()).fold(0.0, f64::max)
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let n = 20_000_000u32;
    let fma = |f: unsafe fn(u32) -> f32, lanes: f64| {
        best(rounds, || {
            let t = Instant::now();
            black_box(unsafe { f(black_box(n)) });
            n as f64 * 12.0 * lanes * 2.0 / t.elapsed().as_secs_f64() / 1e9
        })
    };
    if is_x86_feature_detected!("avx512f") {
        println!(r#"{{"what":"native fma 512-bit","gflops":{:.1}}}"#, fma(fma512, 16.0));
    }
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        println!(r#"{{"what":"native fma 256-bit","gflops":{:.1}}}"#, fma(fma256, 8.0));
        println!(r#"{{"what":"native fma 128-bit","gflops":{:.1}}}"#, fma(fma128, 4.0));
    }
    let len = 256usize << 20;
    for huge in [false, true] {
        let p = buffer(len, huge);
        for parts in [1, 4] {
            let gbs = best(rounds, || {
                let t = Instant::now();
                // SAFETY: `p` holds `len` bytes.
                black_box(unsafe { stream(black_box(p), len, parts) });
                len as f64 / t.elapsed().as_secs_f64() / 1e9
            });
            let pages = if huge { "2 MiB pages" } else { "4 KiB pages" };
            println!(r#"{{"what":"native read, {parts} stream(s), {pages}","gbs":{gbs:.1}}}"#);
        }
    }
}
