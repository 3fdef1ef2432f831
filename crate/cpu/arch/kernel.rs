//! What the CPU kernels share with the tables that hold them and the code that calls them
//! (ggml-cpu's `ggml_type_traits_cpu` and kernel signatures): one ISA's table ([`Kernels`]:
//! the per-type entries [`TypeTraitsCpu`] and the elementwise row helpers), the kernels'
//! types ([`PromptGemm`], [`PackedKernel`], [`FloatGemm`]) and their one argument struct
//! ([`GemmArgs`]), the portable table every ISA's table starts from ([`scalar_table`]),
//! and the byte order of the packed groups that [`super::repack`] writes and the kernels
//! read. Below both the ISA kernels (`x86.rs`, `wasm.rs`) and the one dispatch over them
//! ([`super::traits`]), so neither imports the other's types.

use super::{scalar, ColPrep};
use crate::quants::{self, FromFloat, ToFloat};
use crate::types::GgmlType;
/// Σ a·b over `n` elements: `a` a checked row of the type, `b` of its `vec_dot_type`.
pub type VecDot = fn(n: usize, a: &[u8], b: &[u8]) -> f32;

/// The rows-of-a kernel of a prompt product ([`super::gemm`] does the chunking and the
/// per-row-of-b preparation it asks for).
pub struct PromptGemm {
    /// For tests and `ggweb bench` to show which kernel a build runs.
    pub name: &'static str,
    /// c\[j·ldc + i\] for `m` rows of a (`nb` blocks each) and every row of b not `plain`.
    /// SAFETY of the stored pointer: only in the table of an ISA this machine runs.
    pub(crate) rows: GemmRows,
    /// Rows of b holding -128 go to `vec_dot` (the AVX2 Q8_0 `maddubs` product is exact
    /// only without them).
    pub(crate) needs_plain: bool,
    /// The kernel reads the block quant sums of b (the u8 × i8 offsets).
    pub(crate) wants_sums: bool,
    /// Natively, about how many bytes of b's rows one call takes ([`super::L1_CHUNK`] for
    /// kernels that walk one row of b at a time, [`super::L2_CHUNK`] for ones taking four
    /// per pass). wasm sizes its chunks by the widened rows instead.
    pub(crate) chunk: usize,
}

/// The arguments of every quantized product kernel, by reference, with the output `c` as a
/// parameter of its own: as a `&mut` parameter (`noalias`) it tells the compiler that its
/// stores touch nothing the kernel reads, so `cols`' vectors need no reload after each store
/// (a `&mut` field of the struct carries no such promise).
///
/// `c[j·ldc + i]` = row i of `a` · row j of `b`, for `i < m` and every row j of b the kernel
/// takes (`cols.plain.len()` of them; a prompt kernel skips those marked
/// `plain`). Rows of `a` hold `nb` blocks of `ty`, `lda` bytes apart (a packed kernel: whole
/// groups of rows, `m` a multiple of the group); rows of `b`, of the `vec_dot_type`, `ldb`
/// bytes apart; `cols` what [`super::gemm`] took from b's rows once. A packed decode takes
/// one row of b and writes `c[0..m]`.
#[derive(Clone, Copy)]
pub(crate) struct GemmArgs<'a> {
    pub ty: GgmlType,
    pub nb: usize,
    pub m: usize,
    pub a: &'a [u8],
    pub lda: usize,
    pub b: &'a [u8],
    pub ldb: usize,
    pub cols: &'a ColPrep,
    pub ldc: usize,
}

pub(crate) type GemmRows = fn(&GemmArgs, c: &mut [f32]);

/// One type's CPU kernels (None: the type has no such kernel).
#[derive(Clone, Copy)]
pub struct TypeTraitsCpu {
    pub to_float: Option<ToFloat>,
    pub from_float: Option<FromFloat>,
    /// Against rows of `vec_dot_type`. Q8_1 and Q8_K (activation types) have none.
    pub vec_dot: Option<VecDot>,
    pub vec_dot_type: GgmlType,
    /// The prompt kernel, or None: [`super::gemm`] loops over `vec_dot`.
    pub gemm: Option<&'static PromptGemm>,
    /// The kernel that reads weights repacked at load ([`super::repack`]), or None: weights
    /// of this type stay in ggml's layout on this ISA.
    pub packed: Option<&'static PackedKernel>,
    /// F32 and F16 only: `mul_mat`'s product of these weights with f32 activations as they
    /// are (not rounded to the `vec_dot_type` first, unlike ggml's F16 path: one rounding
    /// less), in register tiles. Sums in its own order, so it agrees with `vec_dot` to
    /// rounding, not bit for bit (the model's float logits have always come from it).
    pub float_gemm: Option<FloatGemm>,
}

/// A block of float dot products, `mul_mat`'s inner kernel for F32 and F16 weights:
/// `c[j·ldc + i] = Σ_l a[i·lda + l] · b[j·ldb + l]` for `i < m`, `j < n`, `l < k`, the rows
/// of `a` f32 or f16 bits as the entry's type says. Strides are in elements. A result does
/// not depend on the tile it fell in (a 1×1 call gives the same bits).
///
/// # Safety
/// Every row named must be readable for `k` elements and every `c` element writable, and
/// the pointer only called from the table of an ISA this machine runs.
pub type FloatGemm = unsafe fn(
    k: usize,
    m: usize,
    n: usize,
    a: *const u8,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
);

/// A blocked f32 product: `C[i·ldc + j]` = (or `+=` when `accumulate`)
/// `Σ_l X[i·rsx + l·csx] · Y[l·rsy + j·csy]` for `i < m`, `j < n`, `l < k`, strides in
/// elements (either operand may be transposed). Each sum is taken in blocks of l from 0
/// (a chain of FMAs per block, each block added to C), so a result does not depend on m, n
/// or where its row and column fall. Blocks of l where X is all zero are skipped (Y's rows
/// there are not read: 0 · ∞ does not make a NaN, as `out_prod`'s panels never did).
///
/// # Safety
/// Every element named must be readable (X, Y) or writable (C), and the pointer only called
/// from the table of an ISA this machine runs.
pub type F32Gemm = unsafe fn(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    rsx: usize,
    csx: usize,
    y: *const f32,
    rsy: usize,
    csy: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
);

/// Columns per panel of [`F32GemmPanels`]'s Y: one Q8_0 block, so a row's block dequantizes
/// straight into its place in a panel.
pub const F32_PANEL_WIDTH: usize = 32;
/// The most values of l [`F32GemmPanels`] takes: [`F32Gemm`]'s block of l, so one call sums
/// as one of that product's blocks does.
pub const F32_PANEL_DEPTH: usize = 256;

/// [`F32Gemm`] over one block of `k ≤ F32_PANEL_DEPTH` values of l with Y already packed
/// (`out_prod`'s frozen quantized weights, dequantized into that layout): Y's `n` columns in
/// panels of [`F32_PANEL_WIDTH`], panel p at `yp[p·k·W..]` holding `Y[l, p·W + jj]` at
/// `l·W + jj` (columns past n zero). The bits of [`F32Gemm`] on the same X and Y; an X of
/// zeros skips Y as there.
///
/// # Safety
/// As [`F32Gemm`]; `yp` holds `n.div_ceil(W)·k·W` floats, 64-byte aligned.
pub type F32GemmPanels = unsafe fn(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    rsx: usize,
    csx: usize,
    yp: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
);

/// One instruction set's kernels: the per-type entries (ggml-cpu's `type_traits_cpu`) and
/// the f32 row helpers of the elementwise ops, which have no type to hang on. One of these
/// per ISA, picked in one place ([`super::traits`]).
pub struct Kernels {
    /// For tests and `ggweb bench`: "scalar", "avx2", "simd128".
    pub name: &'static str,
    /// Indexed by `GgmlType as usize`.
    pub types: [TypeTraitsCpu; N_TYPES],
    /// f16 bits → f32, exactly ([`super::f16_bits_to_f32`] per element).
    pub f16_to_f32: fn(src: &[u16], dst: &mut [f32]),
    /// GELU (tanh form) in place, as [`super::gelu_f32`] defines it (f64, rounded once);
    /// the SIMD forms evaluate the same formula with a polynomial exp accurate to ~1e-11.
    pub gelu: fn(x: &mut [f32]),
    /// `x[i] = exp(x[i] - sub)` (f32, within 2 ulp; 0 below -87.3), returning Σ x[i] in
    /// f64: a softmax row's exponentials.
    pub exp_sum: fn(x: &mut [f32], sub: f32) -> f64,
    /// The largest element (-inf for an empty row; NaNs are not looked for).
    pub max: fn(x: &[f32]) -> f32,
    /// What [`super::gemm`] takes once from a Q8_0 row of b (`ColPrep`): per block its scale
    /// as f32 into `dy`, its quant sum into `ysum` when `sums`; whether the row holds a -128
    /// (looked for at least when `look`).
    pub(crate) prep_q8_0: PrepQ8_0,
    /// The backward pass's `out_prod` inner product: `acc[k, i] += Σ_jj cs[k, jj] · panel[jj, i]`
    /// (acc: rows of n0, cs: rows of [`OUT_PROD_J`], panel: `OUT_PROD_J` rows of n0).
    pub out_prod_panel: fn(acc: &mut [f32], n0: usize, panel: &[f32], cs: &[f32]),
    /// How many values of l the F32/F16 `float_gemm` sums over per pass of its tiles
    /// (`usize::MAX`: whole rows, one pass): `mul_mat` sizes its blocks of a's rows by that
    /// much of a row, the part each pass keeps in cache.
    pub float_gemm_depth: usize,
    /// The backward pass's `out_prod` of f32 operands as one blocked product (packed panels,
    /// register tiles, cache blocks), or None: `out_prod_panel` takes those too.
    pub f32_gemm: Option<F32Gemm>,
    /// `f32_gemm` with Y packed by the caller, where a table has `f32_gemm`.
    pub f32_gemm_panels: Option<F32GemmPanels>,
    /// One whole group of a repacked Q8_0 weight ([`Q8_0_GROUP`]'s layout, `nb` blocks per
    /// row) dequantized: row r's block t into `out[r·ld + t·bs..][..32]` (rows of f32 for
    /// `bs` = 32, [`F32GemmPanels`]' panels for `ld` = 32), each value `q · d` with the
    /// bits `dequantize_row` gives. `out_prod`'s panels read the groups in place with it.
    pub q8_0_group: fn(nb: usize, grp: &[u8], out: &mut [f32], ld: usize, bs: usize),
    /// `out[i] = dy[i] · GELU'(x[i])`, as [`super::gelu_back_f32`] defines it (f64, rounded
    /// once); the SIMD forms use the polynomial exp of `gelu`.
    pub gelu_back: fn(dy: &[f32], x: &[f32], out: &mut [f32]),
}

pub use super::scalar::simd::OUT_PROD_J;
pub(crate) use super::scalar::simd::Q8_0_GROUP;

pub(crate) type PrepQ8_0 = fn(row: &[u8], nb: usize, dy: &mut [f32], ysum: &mut [i32], sums: bool, look: bool) -> bool;

/// Indexed by `GgmlType as usize` (ggml's type ids; the gaps hold empty entries).
pub(crate) const N_TYPES: usize = GgmlType::BF16 as usize + 1;

const EMPTY: TypeTraitsCpu = TypeTraitsCpu {
    to_float: None,
    from_float: None,
    vec_dot: None,
    vec_dot_type: GgmlType::F32,
    gemm: None,
    packed: None,
    float_gemm: None,
};

/// The portable kernels every table starts from.
pub(crate) const fn scalar_table() -> Kernels {
    use GgmlType::*;
    let mut t = [EMPTY; N_TYPES];
    let mut i = 0;
    while i < GgmlType::ALL.len() {
        let ty = GgmlType::ALL[i];
        t[ty as usize].vec_dot_type = ty.vec_dot_type();
        // The conversions are the references (ggml-base's `to_float`, `from_float_ref`).
        t[ty as usize].to_float = quants::to_float(ty);
        t[ty as usize].from_float = quants::from_float_ref(ty);
        i += 1;
    }
    macro_rules! set {
        ($ty:ident, $dot:expr) => {
            t[$ty as usize].vec_dot = $dot;
        };
    }
    set!(F32, Some(scalar::vec_dot_f32));
    set!(F16, Some(scalar::vec_dot_f16));
    set!(BF16, Some(scalar::vec_dot_bf16));
    set!(Q4_0, Some(|_, a, b| scalar::vec_dot_q4_0_q8_0(a, b)));
    set!(Q4_1, Some(|_, a, b| scalar::vec_dot_q4_1_q8_1(a, b)));
    set!(Q5_0, Some(|_, a, b| scalar::vec_dot_q5_0_q8_0(a, b)));
    set!(Q5_1, Some(|_, a, b| scalar::vec_dot_q5_1_q8_1(a, b)));
    set!(Q8_0, Some(|_, a, b| scalar::vec_dot_q8_0_q8_0(a, b)));
    set!(Q2_K, Some(|_, a, b| scalar::vec_dot_q2_k_q8_k(a, b)));
    set!(Q3_K, Some(|_, a, b| scalar::vec_dot_q3_k_q8_k(a, b)));
    set!(Q4_K, Some(|_, a, b| scalar::vec_dot_q4_k_q8_k(a, b)));
    set!(Q5_K, Some(|_, a, b| scalar::vec_dot_q5_k_q8_k(a, b)));
    set!(Q6_K, Some(|_, a, b| scalar::vec_dot_q6_k_q8_k(a, b)));
    t[F32 as usize].float_gemm = Some(scalar::simd::gemm_f32);
    t[F16 as usize].float_gemm = Some(scalar::simd::gemm_f16);
    Kernels {
        name: "scalar",
        types: t,
        f16_to_f32: scalar::simd::f16_to_f32,
        gelu: scalar::simd::gelu,
        exp_sum: scalar::simd::exp_sum,
        max: scalar::simd::max,
        prep_q8_0: scalar::prep_q8_0,
        out_prod_panel: scalar::simd::out_prod_panel,
        float_gemm_depth: usize::MAX,
        f32_gemm: None,
        f32_gemm_panels: None,
        q8_0_group: scalar::simd::q8_0_group,
        gelu_back: scalar::simd::gelu_back,
    }
}

/// A kernel that reads the packed layout: a few rows of b (a decode step of one or several
/// sequences) against `ng` groups of a.
pub struct PackedKernel {
    /// For tests and `ggweb bench` to show which kernel a build runs.
    pub name: &'static str,
    /// `c[j·ldc + i]` = row i of `a` (`m` rows in groups of R = [`super::repack::group`], `nb`
    /// blocks each) · row j of `b` (of the vec_dot_type, `ldb` bytes apart), for the
    /// `cols.plain.len()` ≤ [`Self::cols`] rows of b given. False (c untouched) where this
    /// kernel cannot take b exactly (a relaxed product with an activation of -128): the
    /// caller unpacks instead.
    pub(crate) decode: PackedDecode,
    /// The most rows of b one `decode` call takes: with more than one, each group's weights
    /// are loaded and unpacked once for all of them (several sequences per step).
    pub(crate) cols: usize,
    /// Reads the block quant sums of b (`ColPrep::ysum`).
    pub(crate) wants_sums: bool,
    /// The prompt kernel on whole groups (for more rows of b than `decode` takes), or None: the
    /// groups are unpacked per call for the plain one. It never hands rows of b back
    /// (`plain`).
    pub(crate) prompt: Option<&'static PromptGemm>,
}

pub(crate) type PackedDecode = fn(&GemmArgs, c: &mut [f32]) -> bool;

/// Rows per group of wasm's layout (the smallest group of any [`layout`](super::repack::layout)).
pub const GROUP: usize = 4;
// wasm's Q8_0 group is its 4-row group.
const _: () = assert!(cfg!(target_arch = "x86_64") || Q8_0_GROUP.0 == GROUP);
