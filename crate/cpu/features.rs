//! The one CPU detection: what this machine and build can run, found once and read by the
//! one choice of kernel table ([`super::arch::traits`]) and the kernels' tuning knobs.
//!
//! ```
//! let f = ggweb::cpu::features::detect();
//! // wasm32 knows at compile time; x86_64 asks CPUID (under `std` through std's macros).
//! assert_eq!(f.simd128, cfg!(all(target_family = "wasm", target_feature = "simd128")));
//! if f.avx_vnni || f.avx512_vnni {
//!     assert!(f.avx2);
//! }
//! ```
//!
//! x86_64: AVX2, FMA and F16C at run time under `std` (else only what the build enables);
//! `vpdpbusd` on 256-bit registers (AVX-VNNI, or AVX512-VNNI + VL with the OS saving the
//! AVX-512 state) and AVX-512 on 512-bit ones (F, BW, VL, VNNI) by CPUID by hand, which
//! also works without `std`. wasm32: SIMD128 and relaxed SIMD are compile-time target
//! features (no run-time detection exists in wasm).

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// What the CPU offers the kernels. Every flag is already anded with what the kernels need
/// to run it (e.g. the VNNI forms only with AVX2 and F16C).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    /// AVX-VNNI: the VEX form of `vpdpbusd`.
    pub avx_vnni: bool,
    /// AVX512-VNNI + AVX512-VL, state saved by the OS: the EVEX form on 256-bit registers.
    pub avx512_vnni: bool,
    /// AVX-512 F, BW, VL and VNNI on 512-bit registers (the packed kernels' zmm form).
    pub avx512: bool,
    pub simd128: bool,
    pub relaxed_simd: bool,
    /// A decode step visits quantized weight rows as four streams a quarter of the block
    /// apart ([`crate::quants`]' `decode_row`) instead of in order: on Intel CPUs (Xeon,
    /// 2026-11-30) that made Q8_0 decode ~1.4× faster; on AMD Zen (EPYC, 2026-12-02) it made
    /// it ~1.5× slower natively and ~1.25× slower in Chromium, where in-order rows are one
    /// sequential stream for its prefetcher. So: GenuineIntel only; wasm (no vendor to read)
    /// goes in order. `GGWEB_DECODE_STREAMS=0/1` overrides it natively, for A/B runs.
    pub decode_streams: bool,
    /// A decode step's repacked kernels ask for the weights 16 KiB ahead of use
    /// (`prefetcht0`, [`crate::quants`]' x86 `packed`). On AMD Zen 5 (family 1Ah, 2026-12-02)
    /// that took 124M Q4_K_M decode from ~188 to ~215 tok/s at 1 thread; on Zen 4 (family 19h,
    /// EPYC 2026-12-04) any distance into L1 made it slower (Q4_K_M 186 → 122 tok/s at 1
    /// thread, 262 → 191 at 2; Q8_0 152 → 135), and into L2 did not beat no prefetch at 2
    /// threads. So: off on AMD family 19h, on elsewhere (Intel unmeasured: as before).
    /// `GGWEB_DECODE_PREFETCH=0/1` overrides it natively, for A/B runs.
    pub decode_prefetch: bool,
}

/// See [`crate::cpu::arch::set_vnni_disabled`]; kept here, beside the other switches, so
/// that the tables (`arch/traits.rs`) and the wasm kernels that probe V8's `vpdpbusd`
/// (`arch/wasm.rs`) both read it without importing each other.
static VNNI_DISABLED: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_vnni_disabled(disabled: bool) {
    VNNI_DISABLED.store(disabled, Ordering::Relaxed);
}

/// Whether [`crate::cpu::arch::set_vnni_disabled`] turned the VNNI kernels off.
#[inline]
pub(crate) fn vnni_disabled() -> bool {
    VNNI_DISABLED.load(Ordering::Relaxed)
}

/// See [`set_scalar_only`].
static SCALAR_ONLY: AtomicBool = AtomicBool::new(false);

/// Makes every CPU kernel the portable scalar one (the
/// [`crate::cpu::arch::Isa::best`] table) until called with `false`, whatever the machine
/// offers: tests/backend_ops runs its cases on the scalar kernels too. Process-wide; the
/// caller keeps other computations out meanwhile.
#[doc(hidden)]
pub fn set_scalar_only(on: bool) {
    SCALAR_ONLY.store(on, Ordering::Relaxed);
}

/// Whether [`set_scalar_only`] is in effect.
#[inline]
pub fn scalar_only() -> bool {
    SCALAR_ONLY.load(Ordering::Relaxed)
}

/// See [`set_decode_streams`]: 0 none, 1 off, 2 on.
static DECODE_STREAMS: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

/// Overrides [`CpuFeatures::decode_streams`] (None: back to what [`detect`] found), so tests
/// check both row orders on any CPU. The order never changes a value, only the speed.
#[doc(hidden)]
pub fn set_decode_streams(on: Option<bool>) {
    DECODE_STREAMS.store(on.map_or(0, |on| 1 + on as u8), Ordering::Relaxed);
}

/// Whether a decode step visits quantized rows as four streams ([`CpuFeatures::decode_streams`],
/// unless [`set_decode_streams`] says otherwise).
#[inline]
pub fn decode_streams() -> bool {
    match DECODE_STREAMS.load(Ordering::Relaxed) {
        0 => detect().decode_streams,
        v => v == 2,
    }
}

/// 0 until the first [`detect`], then the flags as bits with bit 31 set.
static FOUND: AtomicU32 = AtomicU32::new(0);
const DONE: u32 = 1 << 31;

/// The features, detected on the first call and cached (a race detects twice, same answer).
pub fn detect() -> CpuFeatures {
    let mut bits = FOUND.load(Ordering::Relaxed);
    if bits == 0 {
        bits = probe().to_bits();
        FOUND.store(bits, Ordering::Relaxed);
    }
    CpuFeatures::from_bits(bits)
}

impl CpuFeatures {
    fn to_bits(self) -> u32 {
        let on = [
            self.avx2,
            self.fma,
            self.f16c,
            self.avx_vnni,
            self.avx512_vnni,
            self.simd128,
            self.relaxed_simd,
            self.decode_streams,
            self.avx512,
            self.decode_prefetch,
        ];
        on.iter().enumerate().fold(DONE, |b, (i, &x)| b | (x as u32) << i)
    }
    fn from_bits(b: u32) -> CpuFeatures {
        let on = |i: u32| b & (1 << i) != 0;
        CpuFeatures {
            avx2: on(0),
            fma: on(1),
            f16c: on(2),
            avx_vnni: on(3),
            avx512_vnni: on(4),
            simd128: on(5),
            relaxed_simd: on(6),
            decode_streams: on(7),
            avx512: on(8),
            decode_prefetch: on(9),
        }
    }
    /// AVX2 with F16C: what the quantized AVX2 kernels need.
    pub fn avx2_f16c(&self) -> bool {
        self.avx2 && self.f16c
    }
    /// AVX2, FMA and F16C: what the f32 AVX2 kernels need.
    pub fn avx2_fma_f16c(&self) -> bool {
        self.avx2 && self.fma && self.f16c
    }
}

#[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
fn probe() -> CpuFeatures {
    let mut f = CpuFeatures {
        simd128: cfg!(all(target_family = "wasm", target_feature = "simd128")),
        relaxed_simd: cfg!(all(target_family = "wasm", target_feature = "relaxed-simd")),
        ..CpuFeatures::default()
    };
    #[cfg(target_arch = "x86_64")]
    {
        #[cfg(feature = "std")]
        {
            f.avx2 = std::is_x86_feature_detected!("avx2");
            f.fma = std::is_x86_feature_detected!("fma");
            f.f16c = std::is_x86_feature_detected!("f16c");
        }
        f.avx2 |= cfg!(target_feature = "avx2");
        f.fma |= cfg!(target_feature = "fma");
        f.f16c |= cfg!(target_feature = "f16c");
        if f.avx2_f16c() {
            (f.avx_vnni, f.avx512_vnni, f.avx512) = x86_vnni();
        }
        let vendor = x86_vendor();
        f.decode_streams = vendor == *b"GenuineIntel";
        f.decode_prefetch = !(vendor == *b"AuthenticAMD" && x86_family() == 0x19);
        #[cfg(feature = "std")]
        if let Ok(v) = std::env::var("GGWEB_DECODE_STREAMS") {
            f.decode_streams = v == "1";
        }
        #[cfg(feature = "std")]
        if let Ok(v) = std::env::var("GGWEB_DECODE_PREFETCH") {
            f.decode_prefetch = v == "1";
        }
        // `GGWEB_NO_ZMM=1`: the 256-bit forms of the packed kernels, for A/B runs.
        #[cfg(feature = "std")]
        if std::env::var("GGWEB_NO_ZMM").is_ok_and(|v| v == "1") {
            f.avx512 = false;
        }
    }
    f
}

/// CPUID leaf 0's vendor string ("GenuineIntel", "AuthenticAMD", ...).
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // __cpuid is a safe fn in newer Rust
fn x86_vendor() -> [u8; 12] {
    // SAFETY: CPUID leaf 0 exists on every x86_64.
    let l0 = unsafe { core::arch::x86_64::__cpuid(0) };
    let mut v = [0u8; 12];
    for (i, r) in [l0.ebx, l0.edx, l0.ecx].iter().enumerate() {
        v[4 * i..4 * i + 4].copy_from_slice(&r.to_le_bytes());
    }
    v
}

/// CPUID leaf 1's display family: the base family, plus the extended family where the base
/// is 0xF (AMD Zen 3/4: 0x19, Zen 5: 0x1A).
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // __cpuid is a safe fn in newer Rust
fn x86_family() -> u32 {
    // SAFETY: CPUID leaf 1 exists on every x86_64.
    let eax = unsafe { core::arch::x86_64::__cpuid(1) }.eax;
    let base = (eax >> 8) & 0xF;
    if base == 0xF {
        base + ((eax >> 20) & 0xFF)
    } else {
        base
    }
}

/// (AVX-VNNI, AVX512-VNNI usable on 256-bit registers, and with AVX512-BW on 512-bit ones).
#[cfg(target_arch = "x86_64")]
#[allow(unused_unsafe)] // __cpuid_count is a safe fn in newer Rust
fn x86_vnni() -> (bool, bool, bool) {
    use core::arch::x86_64::{__cpuid, __cpuid_count, __get_cpuid_max};
    // SAFETY: CPUID exists on every x86_64; leaves are checked before they are read, and
    // XGETBV only once CPUID says the OS enabled it (OSXSAVE).
    unsafe {
        if __get_cpuid_max(0).0 < 7 {
            return (false, false, false);
        }
        let l7 = __cpuid_count(7, 0);
        // Leaf 7 sub-leaf 1 EAX bit 4.
        let vex = l7.eax >= 1 && (__cpuid_count(7, 1).eax >> 4) & 1 == 1;
        // AVX512F (EBX 16), AVX512VL (EBX 31), AVX512-VNNI (ECX 11), and XCR0 bits 5–7.
        let avx512 = (l7.ebx >> 16) & 1 == 1 && (l7.ebx >> 31) & 1 == 1 && (l7.ecx >> 11) & 1 == 1;
        let osxsave = (__cpuid(1).ecx >> 27) & 1 == 1;
        let evex = avx512 && osxsave && xcr0() & 0xE6 == 0xE6;
        // AVX512-BW (EBX 30): the byte and word ops of the zmm kernels.
        (vex, evex, evex && (l7.ebx >> 30) & 1 == 1)
    }
}

/// XCR0: which register state the OS saves (bits 1–2 SSE/AVX, 5–7 the AVX-512 state).
#[cfg(target_arch = "x86_64")]
fn xcr0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: called only when CPUID reports OSXSAVE, so XGETBV exists and ECX = 0 is valid.
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags))
    };
    (u64::from(hi) << 32) | u64::from(lo)
}
