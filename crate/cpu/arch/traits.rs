//! The one ISA dispatch of the CPU backend. ggml's `type_traits_cpu`: per type, the CPU's
//! conversions, dot product and products (F32 and F16 included), plus the elementwise row
//! helpers ([`Kernels`]), one table per instruction set, each filled once at compile time;
//! [`Isa::best`] picks the table after the one CPU detection ([`crate::cpu::features`]),
//! and [`kernels`] / [`cpu_traits`] hand it out. `dequantize_row`, `quantize_row`,
//! `vec_dot`, `gemm`, repacking and every op of the CPU backend read their kernels here:
//! nothing else chooses an ISA.
//!
//! ```
//! use ggweb::cpu::arch::{cpu_traits, Isa};
//! use ggweb::GgmlType;
//! let t = cpu_traits(GgmlType::Q4_K);
//! assert_eq!(t.vec_dot_type, GgmlType::Q8_K);
//! assert!(t.to_float.is_some() && t.vec_dot.is_some() && t.from_float.is_none());
//! // The scalar table is there on every machine, for tests to compare against.
//! assert!(Isa::Scalar.traits(GgmlType::Q8_0).unwrap().gemm.is_none());
//! ```

use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use alloc::vec::Vec;

use super::kernel::scalar_table;
pub use super::kernel::{F32Gemm, F32GemmPanels, FloatGemm, Kernels, PromptGemm, TypeTraitsCpu, VecDot};
pub use crate::quants::{FromFloat, ToFloat};
use crate::types::GgmlType;

static SCALAR: Kernels = scalar_table();
#[cfg(target_arch = "x86_64")]
static AVX2: Kernels = super::x86::table(super::x86::Vnni::None);
#[cfg(target_arch = "x86_64")]
static AVX_VNNI: Kernels = super::x86::table(super::x86::Vnni::Vex);
#[cfg(target_arch = "x86_64")]
static AVX512_VNNI: Kernels = super::x86::table(super::x86::Vnni::Evex);
#[cfg(target_arch = "x86_64")]
static AVX512: Kernels = super::x86::table_512();
#[cfg(all(target_family = "wasm", target_feature = "simd128"))]
static SIMD128: Kernels = super::wasm::table();

/// An instruction set with its own kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// The portable reference (the compiler may still vectorize it).
    Scalar,
    /// x86_64 with AVX2, FMA and F16C; its prompt kernel uses `vpdpbusd` where the CPU has
    /// AVX-VNNI or AVX512-VNNI (the same bits, see [`set_vnni_disabled`]). Without them
    /// an x86_64 CPU gets the scalar table (the compiler's SSE2).
    Avx2,
    /// wasm32 built with `+simd128` (and its relaxed-SIMD kernels when built with
    /// `+relaxed-simd`).
    Simd128,
}

/// See [`set_zmm_disabled`].
static ZMM_DISABLED: AtomicBool = AtomicBool::new(false);

impl Isa {
    /// Whether this build on this machine can run the kernels of `self`.
    pub fn is_available(self) -> bool {
        let f = crate::cpu::features::detect();
        match self {
            Isa::Scalar => true,
            // FMA for the float tiles; every AVX2 CPU has it.
            Isa::Avx2 => cfg!(target_arch = "x86_64") && f.avx2_fma_f16c(),
            Isa::Simd128 => f.simd128,
        }
    }

    /// Every available instruction set, the scalar reference first.
    pub fn available() -> Vec<Isa> {
        [Isa::Scalar, Isa::Avx2, Isa::Simd128].into_iter().filter(|i| i.is_available()).collect()
    }

    /// The fastest available.
    pub fn best() -> Isa {
        if crate::cpu::features::scalar_only() {
            Isa::Scalar
        } else if Isa::Simd128.is_available() {
            Isa::Simd128
        } else if Isa::Avx2.is_available() {
            Isa::Avx2
        } else {
            Isa::Scalar
        }
    }

    /// The kernels of `self` for `ty`; None when `self` cannot run here.
    pub fn traits(self, ty: GgmlType) -> Option<&'static TypeTraitsCpu> {
        Some(&self.kernels()?.types[ty as usize])
    }

    /// The whole table of `self` (tests compare ISAs through it); None when `self` cannot
    /// run here.
    pub fn kernels(self) -> Option<&'static Kernels> {
        self.table(crate::cpu::features::vnni_disabled(), ZMM_DISABLED.load(Ordering::Relaxed))
    }

    /// The table of `self`, with the plain AVX2 prompt kernels when `no_vnni`, without the
    /// 512-bit ones when `no_zmm`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn table(self, no_vnni: bool, no_zmm: bool) -> Option<&'static Kernels> {
        if !self.is_available() {
            return None;
        }
        Some(match self {
            Isa::Scalar => &SCALAR,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                let f = crate::cpu::features::detect();
                if no_vnni {
                    &AVX2
                } else if f.avx512 && !no_zmm {
                    &AVX512
                } else if f.avx_vnni {
                    &AVX_VNNI
                } else if f.avx512_vnni {
                    &AVX512_VNNI
                } else {
                    &AVX2
                }
            }
            #[cfg(all(target_family = "wasm", target_feature = "simd128"))]
            Isa::Simd128 => &SIMD128,
            #[allow(unreachable_patterns)]
            _ => return None,
        })
    }
}

/// The kernels for `ty` on this machine (the table of [`Isa::best`]).
#[inline]
pub fn cpu_traits(ty: GgmlType) -> &'static TypeTraitsCpu {
    &active().types[ty as usize]
}

/// The table of [`Isa::best`]: what every CPU kernel call reads (once per call, never per
/// element).
#[inline]
pub fn kernels() -> &'static Kernels {
    active()
}

/// The table of [`Isa::best`], chosen on first use (null until then).
static ACTIVE: AtomicPtr<Kernels> = AtomicPtr::new(core::ptr::null_mut());

#[inline]
fn active() -> &'static Kernels {
    if crate::cpu::features::scalar_only() {
        return &SCALAR;
    }
    let (no_vnni, no_zmm) = (crate::cpu::features::vnni_disabled(), ZMM_DISABLED.load(Ordering::Relaxed));
    if no_vnni || no_zmm {
        return Isa::best().table(no_vnni, no_zmm).expect("the best ISA is available");
    }
    let p = ACTIVE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: only ever one of the immutable statics above (stored below).
        return unsafe { &*p };
    }
    let t = Isa::best().table(false, false).expect("the best ISA is available");
    ACTIVE.store(t as *const Kernels as *mut Kernels, Ordering::Release);
    t
}

/// Makes [`super::gemm`] leave `vpdpbusd` (AVX-VNNI or AVX512-VNNI) unused (or use it again)
/// on x86_64, and on wasm with relaxed SIMD the u8 panels that rely on V8 emitting it, so
/// tests can check the plain kernels on a machine that has VNNI. Both
/// give the same bits; only speed differs, so flipping this while other threads compute is
/// harmless.
#[doc(hidden)]
pub fn set_vnni_disabled(disabled: bool) {
    crate::cpu::features::set_vnni_disabled(disabled);
}

/// Makes the x86 kernels leave 512-bit registers unused (the AVX2 `vpdpbusd` forms instead),
/// or use them again, so tests check both forms on an AVX-512 machine. Same bits; only speed
/// differs.
#[doc(hidden)]
pub fn set_zmm_disabled(disabled: bool) {
    ZMM_DISABLED.store(disabled, Ordering::Relaxed);
}
