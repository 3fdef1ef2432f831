//! Block quantization formats against the PyPI `gguf` package (0.19.0), whose numpy code
//! follows ggml's reference kernels: tests/fixtures/quant_vectors.bin, written by
//! tests/fixtures/make_quant_vectors.py. Natively a module of the `kernels` test binary; in
//! the browser (wasm-bindgen-test) the `quants` module of tests/browser/main.rs, where the SIMD128 kernels
//! are checked against the scalar reference.

use ggweb::cpu::arch::{self, Isa};
use ggweb::quants::blocks::*;
use ggweb::quants::{self, QuantError};
use ggweb::GgmlType;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::support::rng::Rng;

/// The tests that switch the process-wide kernel choices (`set_vnni_disabled`,
/// `set_zmm_disabled`) and assert which kernel runs take turns on this lock: run side by
/// side, one saw the other's switch ("left: None, right: Some(avx512 ...)", 2026-12-04).
/// So do the tests that compare two runs of a float product bit for bit (ops::mul_mat_*_gives_
/// the_batched_bits): the f32/f16 gemms' bits depend on the table's lane count. Every other
/// test gets the same bits whichever kernel runs.
pub(crate) fn kernel_choice_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// FORMAT_VERSION of make_quant_vectors.py that this file understands.
const FORMAT_VERSION: u32 = 2;
const FIXTURE: &[u8] = include_bytes!("../fixtures/quant_vectors.bin");
const NO_VECTOR: u32 = u32::MAX;

struct Entry {
    ty: GgmlType,
    origin: u32,
    vector: u32,
    bytes: Vec<u8>,
    deq: Vec<f32>,
}

struct Fixture {
    vectors: Vec<(String, Vec<f32>)>,
    entries: Vec<Entry>,
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        assert!(self.pos + n <= self.b.len(), "quant_vectors.bin truncated at byte {}", self.pos);
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }
}

fn fixture() -> Fixture {
    parse(FIXTURE)
}

fn parse(bytes: &[u8]) -> Fixture {
    let mut r = Reader { b: bytes, pos: 0 };
    assert_eq!(r.take(8), b"GGWQVEC\0", "tests/fixtures/quant_vectors.bin: bad magic");
    let version = r.u32();
    assert_eq!(
        version, FORMAT_VERSION,
        "tests/fixtures/quant_vectors.bin has FORMAT_VERSION {version}, this test reads {FORMAT_VERSION}: \
         regenerate it with `python tests/fixtures/make_quant_vectors.py` (gguf==0.19.0, numpy) \
         or update the reader"
    );
    let (nv, ne) = (r.u32() as usize, r.u32() as usize);
    let mut vectors = Vec::new();
    for _ in 0..nv {
        let n = r.u32() as usize;
        let name_len = r.u32() as usize;
        let name = String::from_utf8(r.take(name_len).to_vec()).unwrap();
        vectors.push((name, r.f32s(n)));
    }
    let mut entries = Vec::new();
    for _ in 0..ne {
        let id = r.u32();
        let ty = GgmlType::from_id(id).unwrap_or_else(|| panic!("fixture type id {id}"));
        let (origin, vector, n, nbytes) = (r.u32(), r.u32(), r.u32() as usize, r.u32() as usize);
        let bytes = r.take(nbytes).to_vec();
        let deq = r.f32s(n);
        assert_eq!(nbytes, ty.row_size(n as i64), "{ty} entry size");
        entries.push(Entry { ty, origin, vector, bytes, deq });
    }
    assert_eq!(r.pos, bytes.len(), "trailing bytes in quant_vectors.bin");
    Fixture { vectors, entries }
}

fn ulp_diff(a: f32, b: f32) -> u32 {
    if a.to_bits() == b.to_bits() {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u32::MAX;
    }
    // Map the float line onto integers monotonically.
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            i32::MIN - i
        } else {
            i
        }
    };
    key(a).abs_diff(key(b))
}

#[test]
fn fixture_has_every_type_and_origin() {
    let f = fixture();
    let names: Vec<&str> = f.vectors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["normal", "outliers", "ties", "wide", "special"]);
    let count = |ty: GgmlType, origin: u32| f.entries.iter().filter(|e| e.ty == ty && e.origin == origin).count();
    for ty in [GgmlType::F16, GgmlType::BF16] {
        assert_eq!(count(ty, 0), 5, "{ty}");
    }
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1] {
        assert_eq!(count(ty, 0), 4, "{ty}");
    }
    assert_eq!(count(GgmlType::Q8_K, 2), 4);
    assert_eq!(count(GgmlType::Q8_1, 2), 4);
    for ty in [GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        assert_eq!(count(ty, 1), 1, "{ty}");
    }
    assert_eq!(f.entries.len(), 43);
}

#[cfg(not(target_arch = "wasm32"))] // no unwinding there
#[test]
#[should_panic(
    expected = "has FORMAT_VERSION 3, this test reads 2: regenerate it with `python tests/fixtures/make_quant_vectors.py`"
)]
fn stale_fixture_asks_for_regeneration() {
    let mut b = FIXTURE.to_vec();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    parse(&b);
}

#[test]
fn block_structs_have_ggml_sizes() {
    use core::mem::{align_of, size_of};
    let sizes = [
        (GgmlType::Q4_0, size_of::<BlockQ4_0>(), align_of::<BlockQ4_0>()),
        (GgmlType::Q4_1, size_of::<BlockQ4_1>(), align_of::<BlockQ4_1>()),
        (GgmlType::Q5_0, size_of::<BlockQ5_0>(), align_of::<BlockQ5_0>()),
        (GgmlType::Q5_1, size_of::<BlockQ5_1>(), align_of::<BlockQ5_1>()),
        (GgmlType::Q8_0, size_of::<BlockQ8_0>(), align_of::<BlockQ8_0>()),
        (GgmlType::Q2_K, size_of::<BlockQ2_K>(), align_of::<BlockQ2_K>()),
        (GgmlType::Q3_K, size_of::<BlockQ3_K>(), align_of::<BlockQ3_K>()),
        (GgmlType::Q4_K, size_of::<BlockQ4_K>(), align_of::<BlockQ4_K>()),
        (GgmlType::Q5_K, size_of::<BlockQ5_K>(), align_of::<BlockQ5_K>()),
        (GgmlType::Q6_K, size_of::<BlockQ6_K>(), align_of::<BlockQ6_K>()),
        (GgmlType::Q8_K, size_of::<BlockQ8_K>(), align_of::<BlockQ8_K>()),
        (GgmlType::Q8_1, size_of::<BlockQ8_1>(), align_of::<BlockQ8_1>()),
    ];
    for (ty, size, align) in sizes {
        assert_eq!((size, align), (ty.type_size(), 1), "{ty}");
    }
}

/// Our dequantize of the package's bytes: bit for bit for the legacy and float types,
/// within 1 ulp for the K-quants (in fact also bit for bit: counted below).
#[test]
fn dequantize_matches_gguf_package() {
    let f = fixture();
    let mut k_exact = 0;
    for (i, e) in f.entries.iter().enumerate() {
        let ours = quants::dequantize(e.ty, &e.bytes).unwrap();
        assert_eq!(ours.len(), e.deq.len());
        let k_quant =
            matches!(e.ty, GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K);
        for (j, (&a, &b)) in ours.iter().zip(&e.deq).enumerate() {
            let ulps = ulp_diff(a, b);
            let allowed = if k_quant { 1 } else { 0 };
            assert!(ulps <= allowed, "entry {i} ({}) element {j}: ours {a:e} package {b:e} ({ulps} ulp)", e.ty);
            if k_quant && ulps == 0 {
                k_exact += 1;
            }
        }
    }
    assert_eq!(k_exact, 5 * 1024, "K-quant dequantization is expected to be exact");
}

/// Our quantize_row gives the package's bytes exactly: F16/BF16 round to nearest even
/// (NaN quieted), Q8_0 rounds halves away from zero, Q4_x/Q5_x truncate after adding the
/// offset, all as ggml's quantize_row_*_ref. Q8_K and Q8_1 against the script's transcriptions.
#[test]
fn quantize_matches_gguf_package() {
    let f = fixture();
    let mut checked = 0;
    for (i, e) in f.entries.iter().enumerate() {
        if e.vector == NO_VECTOR {
            continue;
        }
        let (name, x) = &f.vectors[e.vector as usize];
        let ours = quants::quantize(e.ty, x).unwrap();
        if let Some(j) = ours.iter().zip(&e.bytes).position(|(a, b)| a != b) {
            let bs = e.ty.type_size();
            let blk = j / bs;
            panic!(
                "entry {i}: {} of vector {name} differs at byte {j} (block {blk}):\n ours {:?}\n  ref {:?}",
                e.ty,
                &ours[blk * bs..(blk + 1) * bs],
                &e.bytes[blk * bs..(blk + 1) * bs]
            );
        }
        assert_eq!(ours.len(), e.bytes.len());
        checked += 1;
    }
    assert_eq!(checked, 5 * 2 + 4 * 5 + 4 + 4);
}

/// The "ties" vector's first block has absmax 127, so Q8_0 d = 1 and the quants are the
/// inputs rounded, halves away from zero (C's roundf).
#[test]
fn q8_0_rounds_halves_away_from_zero() {
    let f = fixture();
    let x = &f.vectors[2].1[..32];
    let mut q = [0u8; 34];
    quants::quantize_row(GgmlType::Q8_0, x, &mut q);
    assert_eq!(fp16_to_fp32(u16::from_le_bytes([q[0], q[1]])), 1.0);
    let qs: Vec<i8> = q[2..14].iter().map(|&b| b as i8).collect();
    // inputs: 127, 2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5, 3.49999976, 0.49999997, -63.5
    assert_eq!(qs, [127, 3, -3, 1, -1, 2, -2, 127, -127, 3, 0, -64]);
}

/// quantize_row to Q8_0 (SIMD on wasm) is the scalar reference bit for bit: random rows,
/// exact halves after scaling, NaN and ±inf in a block, huge and all-zero blocks.
#[test]
fn q8_0_quantize_equals_scalar_reference() {
    let mut rng = Rng::xorshift64_star(0x5eed_0008);
    let mut x = normal(&mut rng, 32 * 64);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3.0e38, -3.0e38, 1.0e-40, -0.0];
    for (b, &v) in specials.iter().enumerate() {
        x[32 * (b + 1) + 5] = v;
    }
    x[32 * 10..32 * 11].fill(0.0);
    for (i, v) in x[32 * 11..32 * 12].iter_mut().enumerate() {
        *v = i as f32 - 15.5; // absmax 16.5: scaled values land on and near halves
    }
    for (i, v) in x[32 * 12..32 * 13].iter_mut().enumerate() {
        *v = (i as f32 - 16.0) * 0.5; // with 127 below: d = 1, the scaled values are halves
    }
    x[32 * 12 + 31] = -127.0;
    let (mut got, mut want) = (vec![0u8; 34 * 64], vec![0u8; 34 * 64]);
    quants::quantize_row(GgmlType::Q8_0, &x, &mut got);
    quants::scalar::quantize_q8_0(&x, &mut want);
    for b in 0..64 {
        assert_eq!(got[34 * b..34 * b + 34], want[34 * b..34 * b + 34], "block {b}");
    }
}

/// Q4_0 and Q5_0 scale by the first value of largest magnitude, sign included.
#[test]
fn q4_0_scale_keeps_the_sign_of_the_first_absmax() {
    let mut x = [0.0f32; 32];
    x[0] = -3.0;
    x[1] = 3.0;
    x[2] = 1.5;
    let mut q = [0u8; 18];
    quants::quantize_row(GgmlType::Q4_0, &x, &mut q);
    // d = -3 / -8 = 0.375; q = trunc(x/d + 8.5): -3 → 0, 3 → 16 capped to 15, 1.5 → 12, 0 → 8
    assert_eq!(u16::from_le_bytes([q[0], q[1]]), fp32_to_fp16(0.375));
    assert_eq!(q[2..6], [0x80, 0x8F, 0x8C, 0x88]);
    let y = quants::dequantize(GgmlType::Q4_0, &q).unwrap();
    assert_eq!(y[..4], [-3.0, 2.625, 1.5, 0.0]);
    x[0] = 3.0;
    x[1] = -3.0;
    quants::quantize_row(GgmlType::Q4_0, &x, &mut q);
    assert_eq!(u16::from_le_bytes([q[0], q[1]]), fp32_to_fp16(-0.375));
}

#[test]
fn q8_k_quantizes_as_ggml_reference() {
    // Block 0: absmax 127/64 (negative, first of two), so iscale = -127/max = 64 exactly
    // and the quants are x·64 rounded half to even. Block 1: all zero.
    let mut x = vec![0.0f32; 512];
    for (i, v) in x[..256].iter_mut().enumerate() {
        *v = ((i % 7) as f32 - 3.0) * 0.25; // quants -48 ..= 48 in steps of 16
    }
    x[5..11].copy_from_slice(&[-1.984375, 1.984375, 1.5 / 64.0, 2.5 / 64.0, -0.5 / 64.0, -1.5 / 64.0]);
    let mut q = vec![0u8; GgmlType::Q8_K.row_size(512)];
    quants::quantize_row(GgmlType::Q8_K, &x, &mut q);
    let blocks: &[BlockQ8_K] = bytemuck::cast_slice(&q);
    assert_eq!(blocks[0].d(), 1.0 / 64.0);
    assert_eq!(blocks[0].qs[..16], [-48, -32, -16, 0, 16, -127, 127, 2, 2, 0, -2, 16, 32, 48, -48, -32]);
    for i in 16..256 {
        assert_eq!(blocks[0].qs[i] as i32, ((i % 7) as i32 - 3) * 16, "element {i}");
    }
    assert_eq!(blocks[0].bsum(0), -62);
    for j in 0..16 {
        let s: i32 = blocks[0].qs[16 * j..16 * j + 16].iter().map(|&v| v as i32).sum();
        assert_eq!(blocks[0].bsum(j) as i32, s, "bsum {j}");
    }
    assert_eq!(bytemuck::bytes_of(&blocks[1]), &[0u8; 292][..]);
}

/// quantize_row to Q8_K (AVX2 natively) is the scalar reference bit for bit: random blocks,
/// ties for the absmax (the first wins, sign included), halves after scaling, NaN (with a
/// payload), ±inf, huge, subnormal and all-zero or all-NaN blocks.
#[test]
fn q8_k_quantize_equals_scalar_reference() {
    let mut rng = Rng::xorshift64_star(0x005e_ed00_084b);
    let mut x = normal(&mut rng, 256 * 12);
    let specials = [f32::NAN, f32::from_bits(0x7fc1_2345), f32::INFINITY, f32::NEG_INFINITY, 3.0e38, 1.0e-40];
    for (b, &v) in specials.iter().enumerate() {
        x[256 * (b + 1) + 17] = v;
    }
    x[256 * 7..256 * 8].fill(0.0);
    x[256 * 8..256 * 9].fill(f32::NAN);
    for (i, v) in x[256 * 9..256 * 10].iter_mut().enumerate() {
        *v = (i % 9) as f32 - 4.0; // |4| first at 0 (negative) and again: iscale 127/4
    }
    for (i, v) in x[256 * 10..256 * 11].iter_mut().enumerate() {
        *v = (i as f32 - 127.0) * 0.5; // max 64.5 at the end: scaled values near halves
    }
    x[256 * 11..256 * 12].iter_mut().for_each(|v| *v *= 1e-39);
    let n = x.len() / 256;
    let (mut got, mut want) = (vec![0u8; 292 * n], vec![0u8; 292 * n]);
    quants::quantize_row(GgmlType::Q8_K, &x, &mut got);
    quants::scalar::quantize_q8_k(&x, &mut want);
    for b in 0..n {
        assert_eq!(got[292 * b..292 * b + 292], want[292 * b..292 * b + 292], "block {b}");
    }
}

#[test]
fn q4_k_scales_unpack_as_ggml() {
    let mut b: BlockQ4_K = bytemuck::Zeroable::zeroed();
    // scales 0..4 = 1, 2, 3, 4 with top bits 0b11 on scale 0 (→ bits 4-5 of scale 4);
    // mins 0..4 = 5, 6, 7, 8 with top bits 0b10 on min 1 (→ bits 4-5 of min 5);
    // byte 8 + j: low nibble = scale 4+j low bits, high nibble = min 4+j low bits.
    b.scales = [1 | 0xC0, 2, 3, 4, 5, 6 | 0x80, 7, 8, 0x9A, 0x21, 0x0F, 0xF0];
    let (sc, m) = b.scales_mins();
    assert_eq!(sc, [1, 2, 3, 4, 0x3A, 0x01, 0x0F, 0x00]);
    assert_eq!(m, [5, 6, 7, 8, 0x09, 0x22, 0x00, 0x0F]);
}

#[test]
fn q6_k_element_order() {
    let mut b: BlockQ6_K = bytemuck::Zeroable::zeroed();
    b.ql[0] = 0x21; // element 0 low nibble 1, element 64 low nibble 2
    b.ql[32] = 0x43; // element 32: 3, element 96: 4
    b.qh[0] = 0b11_10_01_00; // high bits: element 0 → 0, 32 → 1, 64 → 2, 96 → 3
    b.ql[64] = 0x05; // second half, element 128
    b.qh[32] = 0b01; // element 128 high bits 1
    assert_eq!([b.q(0), b.q(32), b.q(64), b.q(96), b.q(128)], [1, 0x13, 0x22, 0x34, 0x15]);
    let s = ggweb::cpu::arch::scalar::q6_k_signed(&b);
    assert_eq!([s[0], s[32], s[64], s[96], s[128], s[1]], [1 - 32, 19 - 32, 34 - 32, 52 - 32, 21 - 32, -32]);
}

#[test]
fn fp16_conversion_is_exact_for_every_half() {
    for h in 0..=u16::MAX {
        let ours = fp16_to_fp32(h);
        let reference = half::f16::from_bits(h).to_f32();
        if reference.is_nan() {
            assert!(ours.is_nan(), "{h:#06x}");
            // payload kept, as numpy and C casts do
            assert_eq!(ours.to_bits() & 0x807f_ffff, ((h as u32 & 0x8000) << 16) | ((h as u32 & 0x3ff) << 13));
        } else {
            assert_eq!(ours.to_bits(), reference.to_bits(), "{h:#06x}");
            assert_eq!(fp32_to_fp16(ours), h, "round trip {h:#06x}");
        }
    }
}

#[test]
fn bf16_rounding() {
    // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: even → 1.0; 1 + 3·2^-8 → up.
    assert_eq!(fp32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
    assert_eq!(fp32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
    assert_eq!(fp32_to_bf16(f32::MAX), 0x7f80); // rounds to inf
    assert_eq!(fp32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0); // sNaN → quiet
    assert_eq!(fp32_to_bf16(f32::from_bits(0xffa1_2345)), 0xffe1);
    assert_eq!(bf16_to_fp32(0xc040), -3.0);
}

#[test]
fn whole_buffer_errors_are_typed() {
    assert_eq!(
        quants::dequantize(GgmlType::Q8_0, &[0u8; 35]),
        Err(QuantError::BadLength { ty: GgmlType::Q8_0, len: 35, unit: 34, what: "bytes" })
    );
    assert_eq!(
        quants::dequantize(GgmlType::I32, &[0u8; 8]),
        Err(QuantError::Unsupported { ty: GgmlType::I32, op: "dequantize" })
    );
    assert_eq!(
        quants::quantize(GgmlType::Q4_K, &[0.0; 256]),
        Err(QuantError::Unsupported { ty: GgmlType::Q4_K, op: "quantize" })
    );
    assert_eq!(
        quants::quantize(GgmlType::Q4_0, &[0.0; 48]),
        Err(QuantError::BadLength { ty: GgmlType::Q4_0, len: 48, unit: 32, what: "elements" })
    );
    let msg = quants::dequantize(GgmlType::Q8_0, &[0u8; 35]).unwrap_err().to_string();
    assert_eq!(msg, "quants: 35 bytes is not a multiple of 34 (one q8_0 block)");
    assert_eq!(quants::dequantize(GgmlType::F32, &1.5f32.to_le_bytes()), Ok(vec![1.5]));
}

#[cfg(not(target_arch = "wasm32"))] // no unwinding there
#[test]
#[should_panic(expected = "need 34 bytes, got 33")]
fn short_row_is_a_programmer_error() {
    let mut y = [0f32; 32];
    quants::dequantize_row(GgmlType::Q8_0, &[0u8; 33], &mut y);
}

// ------------------------------------------------------------------ vec_dot

/// `n` random bytes: the top byte of each draw.
fn bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| (rng.next_u64() >> 56) as u8).collect()
}

/// `n` sums of four uniforms: cheap, roughly normal.
fn normal(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| (0..4).map(|_| rng.unit() - 0.5).sum::<f32>()).collect()
}

/// Random but valid weight rows: any quant bits, finite f16 scales of a sensible size.
fn random_row(rng: &mut Rng, ty: GgmlType, n: usize) -> Vec<u8> {
    let mut b = bytes(rng, ty.row_size(n as i64));
    let scale = |rng: &mut Rng| fp32_to_fp16(rng.unit() * 0.05 + 1e-4).to_le_bytes();
    let ts = ty.type_size();
    for blk in b.chunks_exact_mut(ts) {
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => blk[..2].copy_from_slice(&scale(rng)),
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K => {
                blk[..2].copy_from_slice(&scale(rng));
                let m = scale(rng);
                blk[2..4].copy_from_slice(&m);
                if ty != GgmlType::Q4_K {
                    blk[3] |= 0x80; // a negative min, as real blocks mostly have
                }
            }
            GgmlType::Q5_K => {
                blk[..2].copy_from_slice(&scale(rng));
                blk[2..4].copy_from_slice(&scale(rng));
            }
            GgmlType::Q2_K => {
                blk[ts - 4..ts - 2].copy_from_slice(&scale(rng));
                blk[ts - 2..].copy_from_slice(&scale(rng));
            }
            GgmlType::Q3_K | GgmlType::Q6_K => blk[ts - 2..].copy_from_slice(&scale(rng)),
            _ => {}
        }
    }
    match ty {
        GgmlType::F32 => quants::quantize(ty, &normal(rng, n)).unwrap(),
        GgmlType::F16 | GgmlType::BF16 => quants::quantize(ty, &normal(rng, n)).unwrap(),
        _ => b,
    }
}

fn dot_f64(a: &[f32], b: &[f32]) -> (f64, f64) {
    let dot = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let mag = a.iter().zip(b).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum();
    (dot, mag)
}

const DOT_TYPES: [GgmlType; 13] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// vec_dot against dequantize-then-dot in f64. The integer part is exact, so the error
/// is f32 rounding of scales, per-block products and the 8-lane sums: bounded by
/// 1e-6 · Σ|a_i·b_i| (seen: under 1e-7) (plus, for the `d·q + m` types, the cancellation inside each
/// dequantized weight, covered by using |d·q| + |m| in that sum).
#[test]
fn vec_dot_matches_dequantized_dot() {
    let f = fixture();
    let mut rng = Rng::xorshift64_star(0x9e37_79b9_7f4a_7c15);
    let mut worst = 0.0f64;
    for ty in DOT_TYPES {
        let vt = ty.vec_dot_type();
        let mut rows: Vec<Vec<u8>> = Vec::new();
        // weights: the fixture's (package-made) bytes where the type has them, plus random rows
        for e in f.entries.iter().filter(|e| e.ty == ty && e.vector != 4) {
            rows.push(e.bytes.clone());
        }
        if ty == GgmlType::F32 {
            rows.extend(f.vectors[..4].iter().map(|(_, v)| quants::quantize(ty, v).unwrap()));
        }
        for n in [256, 768, 2304] {
            rows.push(random_row(&mut rng, ty, n));
        }
        for (r, a) in rows.iter().enumerate() {
            let n = a.len() / ty.type_size() * ty.blck_size();
            let act: Vec<f32> = normal(&mut rng, n).iter().map(|v| v * 3.0).collect();
            let b = quants::quantize(vt, &act).unwrap();
            let (da, db) = (quants::dequantize(ty, a).unwrap(), quants::dequantize(vt, &b).unwrap());
            let (mut reference, mut mag) = dot_f64(&da, &db);
            if vt == GgmlType::Q8_1 {
                reference += q8_1_sum_correction(ty, a, &b, &db);
            }
            if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q2_K | GgmlType::Q4_K | GgmlType::Q5_K) {
                mag += offset_magnitude(ty, a, &db);
            }
            let got = arch::vec_dot(ty, n, a, &b) as f64;
            let err = (got - reference).abs() / mag;
            worst = worst.max(err);
            assert!(err <= 1e-6, "{ty} row {r} (n {n}): vec_dot {got} reference {reference} (rel err {err:e})");
            assert_eq!(arch::vec_dot_isa(Isa::Scalar, ty, n, a, &b).unwrap().to_bits(), (got as f32).to_bits());
        }
    }
    assert!(worst > 0.0 && worst < 1e-6, "worst {worst:e}");
}

/// Q4_1/Q5_1 against Q8_1 take `m · s` (s = d·Σq with the f32 d, rounded to f16) where the
/// dequantized dot has `m · Σ b_i`: the difference, block by block, so the reference is the
/// product ggml defines.
fn q8_1_sum_correction(ty: GgmlType, a: &[u8], b: &[u8], db: &[f32]) -> f64 {
    let ts = ty.type_size();
    let ys: &[BlockQ8_1] = bytemuck::cast_slice(b);
    a.chunks_exact(ts)
        .zip(ys)
        .enumerate()
        .map(|(i, (blk, y))| {
            let m = fp16_to_fp32(u16::from_le_bytes([blk[2], blk[3]])) as f64;
            let sum: f64 = db[32 * i..32 * i + 32].iter().map(|&v| v as f64).sum();
            m * (fp16_to_fp32(y.s()) as f64 - sum)
        })
        .sum()
}

/// Σ |m_i · b_i|: the offsets' share of the magnitude for the `d·q + m` types.
fn offset_magnitude(ty: GgmlType, a: &[u8], db: &[f32]) -> f64 {
    let mut m = vec![0f32; db.len()];
    match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => {
            let ts = ty.type_size();
            for (i, blk) in a.chunks_exact(ts).enumerate() {
                let mv = fp16_to_fp32(u16::from_le_bytes([blk[2], blk[3]]));
                m[32 * i..32 * i + 32].fill(mv);
            }
        }
        GgmlType::Q4_K => {
            let blocks: &[BlockQ4_K] = bytemuck::cast_slice(a);
            for (i, x) in blocks.iter().enumerate() {
                let (_, mins) = x.scales_mins();
                for j in 0..8 {
                    m[256 * i + 32 * j..256 * i + 32 * j + 32].fill(fp16_to_fp32(x.dmin()) * mins[j] as f32);
                }
            }
        }
        GgmlType::Q5_K => {
            let blocks: &[BlockQ5_K] = bytemuck::cast_slice(a);
            for (i, x) in blocks.iter().enumerate() {
                let (_, mins) = scales_mins_k4(&x.scales);
                for j in 0..8 {
                    m[256 * i + 32 * j..256 * i + 32 * j + 32].fill(fp16_to_fp32(x.dmin()) * mins[j] as f32);
                }
            }
        }
        GgmlType::Q2_K => {
            let blocks: &[BlockQ2_K] = bytemuck::cast_slice(a);
            for (i, x) in blocks.iter().enumerate() {
                for j in 0..16 {
                    let mv = fp16_to_fp32(x.dmin()) * (x.scales[j] >> 4) as f32;
                    m[256 * i + 16 * j..256 * i + 16 * j + 16].fill(mv);
                }
            }
        }
        _ => unreachable!(),
    }
    m.iter().zip(db).map(|(&x, &y)| (x as f64 * y as f64).abs()).sum()
}

/// Every SIMD kernel equals the scalar reference bit for bit, on adversarial data too
/// (Q8_0 quants of -128 on both sides, every block count from 1 to 19).
#[test]
fn simd_vec_dot_equals_scalar() {
    let isas = Isa::available();
    assert_eq!(isas[0], Isa::Scalar);
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    assert!(isas.contains(&Isa::Simd128));
    let mut rng = Rng::xorshift64_star(0x1234_5678_9abc_def1);
    let mut compared = 0;
    for ty in DOT_TYPES {
        let vt = ty.vec_dot_type();
        let bs = ty.blck_size().max(8);
        for nblk in 1..20usize {
            let n = nblk * bs + if ty.blck_size() == 1 { nblk % 8 } else { 0 };
            let a = random_row(&mut rng, ty, n);
            let mut b = if vt.is_quantized() {
                quants::quantize(vt, &normal(&mut rng, n)).unwrap()
            } else {
                random_row(&mut rng, vt, n)
            };
            if vt == GgmlType::Q8_0 && nblk % 2 == 1 {
                b[2] = 0x80; // -128: not made by quantize_row, but legal data
            }
            let reference = arch::vec_dot_isa(Isa::Scalar, ty, n, &a, &b).unwrap();
            for &isa in &isas[1..] {
                if let Some(got) = arch::vec_dot_isa(isa, ty, n, &a, &b) {
                    assert_eq!(got.to_bits(), reference.to_bits(), "{isa:?} {ty} n {n}: {got} vs scalar {reference}");
                    compared += 1;
                }
            }
        }
    }
    // every SIMD instruction set has its own kernel for every vec_dot type
    assert_eq!(compared, 19 * DOT_TYPES.len() * (isas.len() - 1));
}

#[test]
fn vec_dot_small_exact_cases() {
    // Q8_0 · Q8_0 with d = 1 on both sides: the plain integer dot product.
    let mut a = vec![0u8; 68];
    let mut b = vec![0u8; 68];
    for blk in 0..2 {
        a[34 * blk..34 * blk + 2].copy_from_slice(&fp32_to_fp16(1.0).to_le_bytes());
        b[34 * blk..34 * blk + 2].copy_from_slice(&fp32_to_fp16(0.5).to_le_bytes());
        for j in 0..32 {
            a[34 * blk + 2 + j] = (j as i8 - 16) as u8;
            b[34 * blk + 2 + j] = if blk == 0 { 1 } else { 0x80 }; // -128
        }
    }
    // block 0: Σ(j-16)·1 = -16, ×0.5; block 1: Σ(j-16)·(-128) = 2048, ×0.5
    for isa in Isa::available() {
        assert_eq!(arch::vec_dot_isa(isa, GgmlType::Q8_0, 64, &a, &b), Some(-8.0 + 1024.0), "{isa:?}");
    }
    // F32 ends that are not a multiple of 8 go to lanes i % 8.
    let x: Vec<f32> = (1..=11).map(|i| i as f32).collect();
    let xb = quants::quantize(GgmlType::F32, &x).unwrap();
    assert_eq!(arch::vec_dot(GgmlType::F32, 11, &xb, &xb), 506.0);
}

/// The build runs the prompt kernels it was made for: `npm test` compiles this file a second
/// time with relaxed SIMD (and GGWEB_EXPECT_RELAXED set), where Q4_0 must take the relaxed
/// dot product, so the bit-identity test below covers that kernel too.
#[test]
fn prompt_kernels_follow_the_build() {
    let _choice = kernel_choice_lock();
    let relaxed = option_env!("GGWEB_EXPECT_RELAXED").is_some();
    assert_eq!(cfg!(target_feature = "relaxed-simd"), relaxed, "relaxed SIMD in this build");
    let q4 = arch::prompt_gemm_kernel(GgmlType::Q4_0);
    let q8 = arch::prompt_gemm_kernel(GgmlType::Q8_0);
    if cfg!(target_arch = "wasm32") {
        // With relaxed SIMD, the u8 panels where the relaxed dot multiplies u8 by i8 exactly
        // (V8 on a CPU with AVX-VNNI), the i16 panels elsewhere.
        if relaxed && q8 != "simd128 i16 panels" {
            assert_eq!(q8, "simd128 u8 panels (relaxed dot as vpdpbusd)");
            arch::set_vnni_disabled(true);
            assert_eq!(arch::prompt_gemm_kernel(GgmlType::Q8_0), "simd128 i16 panels");
            arch::set_vnni_disabled(false);
        }
        assert!(relaxed || q8 == "simd128 i16 panels", "{q8}");
        // Set where the browser is known to emit vpdpbusd (Chromium on an AVX-VNNI CPU), so a
        // run there proves the u8 panels were the ones tested.
        if option_env!("GGWEB_EXPECT_U8_DOT").is_some() {
            assert_eq!(q8, "simd128 u8 panels (relaxed dot as vpdpbusd)");
        }
        println!("wasm Q8_0 prompt kernel here: {q8}");
        assert_eq!(q4, if relaxed { "simd128 nibble panels (relaxed dot)" } else { "simd128 i16 panels" });
    }
    if cfg!(target_arch = "x86_64") && Isa::best() != Isa::Scalar {
        // Which vpdpbusd form (if any) depends on the CPU; turned off, the plain AVX2 tiles.
        assert_eq!(q4, q8);
        assert!(
            ["avx2 tiles", "avx2 tiles (avx-vnni vpdpbusd)", "avx2 tiles (avx512-vnni vpdpbusd)"].contains(&q4),
            "{q4}"
        );
        println!("x86 prompt kernel here: {q4}");
        arch::set_vnni_disabled(true);
        let plain = arch::prompt_gemm_kernel(GgmlType::Q8_0);
        arch::set_vnni_disabled(false);
        assert_eq!(plain, "avx2 tiles");
    }
    // The other weight types' prompt kernels.
    use GgmlType::*;
    for ty in [Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
        let name = arch::prompt_gemm_kernel(ty);
        let k = ty.blck_size() == 256;
        if cfg!(target_arch = "x86_64") && Isa::best() != Isa::Scalar {
            assert_eq!(name, if k { "avx2 k-quant tiles" } else { q4 }, "{ty}");
        }
        if cfg!(target_arch = "wasm32") {
            let want = match ty {
                _ if k && relaxed => "simd128 k-quant tiles (relaxed dot)",
                _ if k => "simd128 k-quant tiles",
                Q5_0 => "simd128 i16 panels",
                _ if relaxed => "simd128 affine rows (relaxed dot)",
                _ => "simd128 affine rows",
            };
            assert_eq!(name, want, "{ty}");
        }
    }
    assert_eq!(arch::prompt_gemm_kernel(F32), "vec_dot");
}

/// arch::gemm gives each pair exactly what vec_dot gives (its own kernels for every type
/// here, natively and on wasm): block
/// counts around the groups of 8 (and the K-quants' 4-row tiles of b), strided rows, weights
/// holding -128, and an activation row holding -128 (which the Q8_0 kernel hands back to
/// vec_dot).
#[test]
fn gemm_equals_vec_dot_bit_for_bit() {
    let _choice = kernel_choice_lock();
    let mut rng = Rng::xorshift64_star(0x0bad_cafe_f00d_1234);
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let vt = ty.vec_dot_type();
        for (nblk, m, n) in [
            (1usize, 3usize, 2usize),
            (7, 5, 3),
            (8, 4, 1),
            (9, 2, 4),
            (24, 6, 5),
            (33, 3, 2),
            (13, 5, 9),
            // wasm's panel tiles (8 or 4 rows of a × 1..4 rows of b, from 4 rows of b on)
            // and the rows past them.
            (24, 19, 11),
            (9, 13, 6),
            (33, 12, 5),
            (1, 8, 4),
            // Under 16 rows of b (several sequences' decode step): panels of rows a quarter
            // of a apart, an odd panel count, and rows past 4·(m/4).
            (24, 37, 4),
            (9, 66, 7),
            // 2 to 4 rows of b (a step of 2 to 4 sequences on ggml's layout; the relaxed
            // build's shared-nibble Q4_0 decode), a tail of blocks past 8, rows past the last 4,
            // an odd row count in decode_row's two-stream order.
            (27, 21, 2),
            (24, 64, 3),
            (33, 17, 3),
            (27, 23, 4),
            // One row of b (a decode step): wasm's decode rows, in decode_row's 4-stream
            // order (from 16 rows of a on), with and without a tail of blocks past 8.
            (27, 21, 1),
            (24, 64, 1),
            // Several chunks of b (natively 112 rows of K = 768 here: equal parts in whole 4-row
            // tiles under the 120-row budget; on wasm up to 512), the last one short.
            (24, 9, 1100),
        ] {
            if n > 100 && !arch::has_gemm(ty) {
                continue; // chunks of b are the own kernels' concern; the vec_dot loop has none
            }
            let k = nblk * ty.blck_size();
            let (ra, rb) = (ty.row_size(k as i64), vt.row_size(k as i64));
            let (lda, ldb, ldc) = (ra + 6, rb + 2, m + 1);
            let mut a = Vec::new();
            for i in 0..m {
                let mut row = random_row(&mut rng, ty, k);
                if ty == GgmlType::Q8_0 && i == 1 {
                    row[2] = 0x80; // a -128 weight
                }
                a.extend_from_slice(&row);
                a.extend_from_slice(&[0xAB; 6]);
            }
            let mut b = Vec::new();
            for j in 0..n {
                let mut row = quants::quantize(vt, &normal(&mut rng, k)).unwrap();
                if vt == GgmlType::Q8_0 && j == 1 {
                    row[rb - 1] = 0x80; // -128 in the last block
                }
                b.extend_from_slice(&row);
                b.extend_from_slice(&[0xCD; 2]);
            }
            // With and without AVX-VNNI where the machine has it (no effect elsewhere; on
            // wasm with relaxed SIMD, the u8 panels and the i16 panels).
            for no_vnni in [false, true] {
                arch::set_vnni_disabled(no_vnni);
                let mut c = vec![f32::NAN; n * ldc];
                arch::gemm(ty, k, m, n, &a, lda, &b, ldb, &mut c, ldc);
                arch::set_vnni_disabled(false);
                for j in 0..n {
                    for i in 0..m {
                        let want = arch::vec_dot(ty, k, &a[i * lda..i * lda + ra], &b[j * ldb..j * ldb + rb]);
                        let got = c[j * ldc + i];
                        assert_eq!(got.to_bits(), want.to_bits(), "{ty} k {k} ({i}, {j}) no_vnni {no_vnni}");
                    }
                    assert!(c[j * ldc + m].is_nan(), "gemm wrote past row {j} of c");
                }
            }
        }
    }
}

/// `out_prod`'s panels of a repacked Q8_0 weight: every whole group dequantized in place
/// (`Kernels::q8_0_group` of each table this machine runs, and `repack::dequantize_group`)
/// has the bits of `dequantize_row` on the plain rows, block scales of every kind included
/// (the largest f16, subnormals, zero, negative), placed as rows (`ld` apart, blocks 32
/// apart) and as `f32_gemm_panels`' panels (rows 32 apart, blocks a panel apart) with
/// nothing written between; rows past the last group are refused.
fn q8_0_groups_dequantize_as_rows(rng: &mut Rng, a: &[u8], k: usize, m: usize) {
    use arch::repack;
    let ty = GgmlType::Q8_0;
    let g = repack::group(ty);
    // Rows k + 3 apart; a panel of 3 more rows than the group, the group from its row 2.
    for (ld, bs, at0) in [(k + 3, 32, 0), (32, (g + 3) * 32, 2 * 32)] {
        q8_0_groups_placed(rng, a, k, m, ld, bs, at0);
    }
    let ld = k + 3;
    let mut packed = a.to_vec();
    assert!(repack::pack(ty, k, m, &mut packed));
    let mut out = vec![0f32; g * ld];
    assert!(
        !repack::dequantize_group(ty, k, m, &packed, m / g * g, 0..k, &mut out, ld, 32),
        "rows past the last group"
    );
    assert!(
        m < 2 * g || !repack::dequantize_group(ty, k, m, &packed, 1, 0..k, &mut out, ld, 32),
        "a row inside a group"
    );
    assert!(!repack::dequantize_group(GgmlType::Q4_0, 32, 8, &[0; 8 * 18], 0, 0..32, &mut out, ld, 32), "Q4_0");
}

/// [`q8_0_groups_dequantize_as_rows`] with row r's block t at `at0 + r·ld + t·bs`.
fn q8_0_groups_placed(rng: &mut Rng, a: &[u8], k: usize, m: usize, ld: usize, bs: usize, at0: usize) {
    use arch::repack;
    let ty = GgmlType::Q8_0;
    let (ra, g) = (ty.row_size(k as i64), repack::group(ty));
    let place = |r: usize, x: usize| at0 + r * ld + x / 32 * bs + x % 32;
    let len = place(g - 1, k - 1) + 1 + 64;
    let mut a = a.to_vec();
    for blk in a.chunks_exact_mut(34) {
        let d: u16 = [0x7bff, 0x0001, 0x03ff, 0x0000, 0xfbff, 0x8001, 0x3c00, 0x2e66][(rng.next_u64() % 8) as usize];
        blk[..2].copy_from_slice(&d.to_le_bytes());
    }
    let mut packed = a.clone();
    assert!(repack::pack(ty, k, m, &mut packed));
    let mut want = vec![0f32; k];
    for isa in Isa::available() {
        let kernel = isa.kernels().unwrap().q8_0_group;
        for i in (0..m / g * g).step_by(g) {
            let mut got = vec![f32::NAN; len];
            kernel(k / 32, &packed[i * ra..(i + g) * ra], &mut got[at0..], ld, bs);
            let mut via = vec![f32::NAN; len];
            assert!(repack::dequantize_group(ty, k, m, &packed, i, 0..k, &mut via[at0..], ld, bs));
            // Columns from the middle block on (`out_prod`'s slices of a wide weight): the same
            // values, each at its place less the skipped blocks', nothing else written.
            let c0 = k / 64 * 32;
            let mut part = vec![f32::NAN; len];
            assert!(repack::dequantize_group(ty, k, m, &packed, i, c0..k, &mut part[at0..], ld, bs));
            for r in 0..g {
                for x in c0..k {
                    let (p, q) = (place(r, x), place(r, x) - c0 / 32 * bs);
                    assert_eq!(part[q].to_bits(), via[p].to_bits(), "columns {c0}..: row {} element {x}", i + r);
                    part[q] = f32::NAN;
                }
            }
            assert!(part.iter().all(|v| v.is_nan()), "columns {c0}..{k}: wrote outside their places");
            let mut written = vec![false; len];
            for r in 0..g {
                quants::dequantize_row(ty, &a[(i + r) * ra..(i + r + 1) * ra], &mut want);
                for (x, &w) in want.iter().enumerate() {
                    let (y, v) = (got[place(r, x)], via[place(r, x)]);
                    written[place(r, x)] = true;
                    let at = format!("{isa:?} k {k} m {m} ld {ld} bs {bs} row {} element {x}", i + r);
                    assert_eq!(y.to_bits(), w.to_bits(), "{at}: {y} vs {w}");
                    assert_eq!(v.to_bits(), w.to_bits(), "{at} (dequantize_group): {v} vs {w}");
                }
            }
            for (p, (&y, &v)) in got.iter().zip(&via).enumerate().filter(|(p, _)| !written[*p]) {
                assert!(y.is_nan() && v.is_nan(), "{isa:?} k {k} ld {ld} bs {bs}: wrote at {p}, no value's place");
            }
        }
    }
}

/// Weights repacked into groups (`cpu::arch::repack`: 4 rows on wasm, 8 rows of Q8_0, Q4_0,
/// Q4_K and Q6_K on x86_64) give every product the bits of the plain layout: the ISA's
/// packed decode kernel (one to three rows of b; on wasm SIMD128, plain and relaxed; on x86
/// with VNNI, up to four), its prompt kernel or the unpacking
/// path (more rows of b), rows past the last whole group, block counts around the groups
/// of 8, an activation row holding -128, Q8_0, Q4_0 and K-quant weights with extreme block
/// scales, every product also against `vec_dot`. Rows read back
/// through `unpack_row`/`unpack_bytes` are the original bytes.
#[test]
fn repacked_gemm_equals_plain_bit_for_bit() {
    let _choice = kernel_choice_lock();
    use arch::repack;
    let mut rng = Rng::xorshift64_star(0x5eed_4e9a_c4ed_0001);
    if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
        let relaxed = cfg!(target_feature = "relaxed-simd");
        let name = if relaxed { "simd128 4-row groups (relaxed dot)" } else { "simd128 4-row groups" };
        assert_eq!(repack::kernel_name(GgmlType::Q8_0), Some(name));
        // Q4_0 keeps ggml's layout on wasm (measured slower packed): the unpacking path here.
        assert_eq!(repack::kernel_name(GgmlType::Q4_0), None);
        let name = if relaxed { "simd128 4-row k-quant groups (relaxed dot)" } else { "simd128 4-row k-quant groups" };
        assert_eq!(repack::kernel_name(GgmlType::Q4_K), Some(name));
        assert_eq!(repack::kernel_name(GgmlType::Q6_K), Some(name));
        assert_eq!(repack::kernel_name(GgmlType::Q5_K), None);
    }
    #[cfg(target_arch = "x86_64")]
    {
        let f = ggweb::cpu::features::detect();
        let want = if !f.avx2_f16c() || ggweb::cpu::features::scalar_only() {
            None
        } else if f.avx512 {
            Some("avx512 8-row group pairs (avx512-vnni vpdpbusd zmm)")
        } else if f.avx_vnni {
            Some("avx2 8-row groups (avx-vnni vpdpbusd)")
        } else if f.avx512_vnni {
            Some("avx2 8-row groups (avx512-vnni vpdpbusd)")
        } else {
            None
        };
        assert_eq!(repack::kernel_name(GgmlType::Q8_0), want);
        if f.avx512 && want.is_some() {
            arch::set_zmm_disabled(true);
            let ymm = if f.avx_vnni {
                "avx2 8-row groups (avx-vnni vpdpbusd)"
            } else {
                "avx2 8-row groups (avx512-vnni vpdpbusd)"
            };
            assert_eq!(repack::kernel_name(GgmlType::Q4_K), Some(ymm));
            arch::set_zmm_disabled(false);
        }
        assert_eq!(repack::group(GgmlType::Q8_0), 8);
        assert_eq!(repack::group(GgmlType::Q4_0), 8);
        assert_eq!(repack::kernel_name(GgmlType::Q4_0), want);
        assert_eq!(repack::kernel_name(GgmlType::Q4_K), want);
        assert_eq!(repack::kernel_name(GgmlType::Q6_K), want);
    }
    let mut compared = 0;
    let legacy = [
        (1usize, 4usize, 1usize),
        (7, 6, 1),
        (8, 8, 2),
        (9, 19, 1),
        (24, 64, 1),
        (27, 70, 3),
        (24, 37, 4),
        (33, 13, 9),
        (9, 24, 20),
        (8, 8, 5),
        (24, 16, 32),
        (3, 41, 7),
        (96, 24, 5),
        // x86's AVX-512 prompt kernel takes two group pairs per pass (32 rows) where it can:
        // pairs of pairs, then a pair or a lone group left.
        (24, 72, 9),
        (3, 48, 6),
    ];
    // K-quant blocks of 256: counts around the groups of 8 blocks, 8-row groups and rests.
    let k_quants = [
        (1usize, 8usize, 1usize),
        (3, 16, 1),
        (3, 13, 2),
        (9, 24, 3),
        (12, 8, 1),
        (2, 40, 9),
        (3, 16, 32),
        (1, 4, 1),
        (3, 6, 1),
        (12, 64, 1),
        (2, 37, 4),
        (3, 24, 20),
        // 5 groups of 4 rows, one row of b (appended: the cases before keep their scales):
        // wasm's Q6_K decode takes groups 0 and 3, 1 and 4, then 2 alone.
        (3, 20, 1),
        // The same with 3 rows of b (its several-column form: the lone group too).
        (3, 20, 3),
    ];
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K] {
        if repack::layout(ty).is_none() {
            continue; // the K-quants: x86's layout only
        }
        let vt = ty.vec_dot_type();
        let kquant = ty.blck_size() == 256;
        for (case, &(nblk, m, n)) in if kquant { &k_quants[..] } else { &legacy[..] }.iter().enumerate() {
            let k = nblk * ty.blck_size();
            let (ra, rb) = (ty.row_size(k as i64), vt.row_size(k as i64));
            let mut a: Vec<u8> = (0..m).flat_map(|_| random_row(&mut rng, ty, k)).collect();
            if ty == GgmlType::Q8_0 {
                // Weights of -128 are not repacked (checked below); these rows hold none.
                for (i, v) in a.iter_mut().enumerate() {
                    if i % 34 >= 2 && *v == 0x80 {
                        *v = 0x81;
                    }
                }
            }
            if (kquant || ty == GgmlType::Q8_0 || ty == GgmlType::Q4_0) && case % 2 == 1 {
                // Extreme block scales: the largest finite f16, subnormals, zero, negative (the
                // wasm kernels convert them without the inf/NaN case: every finite f16 exact;
                // wasm's packed Q8_0 without a subnormal operand, so the smallest normal and
                // ±0 as well).
                let ts = ty.type_size();
                let d_at = if matches!(ty, GgmlType::Q4_K | GgmlType::Q8_0 | GgmlType::Q4_0) { 0 } else { ts - 2 };
                for (bi, blk) in a.chunks_exact_mut(ts).enumerate() {
                    let d: u16 =
                        [0x7bff, 0x0001, 0x03ff, 0x0000, 0xfbff, 0x8001, 0x3c00, 0x0400, 0x8000, 0x02a9][bi % 10];
                    blk[d_at..d_at + 2].copy_from_slice(&d.to_le_bytes());
                    if ty == GgmlType::Q4_K {
                        let dmin: u16 = [0x0002, 0x7a00, 0x8000, 0x03ff, 0x3555][bi % 5];
                        blk[2..4].copy_from_slice(&dmin.to_le_bytes());
                    }
                }
            }
            let mut b = Vec::new();
            for j in 0..n {
                let mut row = quants::quantize(vt, &normal(&mut rng, k)).unwrap();
                if j == 1 && !kquant {
                    row[rb - 1] = 0x80; // -128 in the last block
                }
                if j % 2 == 1 && kquant {
                    // -128 in the first and the last block, their sub-block sums kept right.
                    let bs = core::mem::size_of::<BlockQ8_K>();
                    for (blk, e) in [(0, 17), (nblk - 1, 255)] {
                        let o = blk * bs;
                        let old = row[o + 4 + e] as i8 as i16;
                        row[o + 4 + e] = 0x80;
                        let s = o + 4 + 256 + 2 * (e / 16);
                        let sum = i16::from_le_bytes([row[s], row[s + 1]]) - old - 128;
                        row[s..s + 2].copy_from_slice(&sum.to_le_bytes());
                    }
                }
                b.extend_from_slice(&row);
            }
            let mut packed = a.clone();
            assert!(repack::pack(ty, k, m, &mut packed), "{ty} k {k} m {m}");
            if m >= repack::group(ty) {
                assert_ne!(packed, a, "{ty}: the groups moved");
            }
            for i in 0..m {
                let mut row = vec![0u8; ra];
                repack::unpack_row(ty, k, m, &packed, i, &mut row);
                assert_eq!(row, a[i * ra..(i + 1) * ra], "{ty} row {i}");
            }
            if ty == GgmlType::Q8_0 {
                q8_0_groups_dequantize_as_rows(&mut rng, &a, k, m);
            }
            let mut some = vec![0u8; ra + 7];
            repack::unpack_bytes(ty, k, m, &packed, ra - 3, &mut some);
            assert_eq!(some, a[ra - 3..2 * ra + 4]);
            let mut want = vec![f32::NAN; n * (m + 1)];
            arch::gemm(ty, k, m, n, &a, ra, &b, rb, &mut want, m + 1);
            // On x86 with AVX-512: the 512-bit kernels, then the 256-bit ones.
            for no_zmm in [false, true] {
                arch::set_zmm_disabled(no_zmm);
                let mut got = vec![f32::NAN; n * (m + 1)];
                repack::gemm_packed(ty, k, m, n, &packed, &b, rb, &mut got, m + 1);
                arch::set_zmm_disabled(false);
                for j in 0..n {
                    for i in 0..m {
                        let (w, g) = (want[j * (m + 1) + i], got[j * (m + 1) + i]);
                        let d = arch::vec_dot(ty, k, &a[i * ra..(i + 1) * ra], &b[j * rb..(j + 1) * rb]);
                        let at = format!("{ty} k {k} m {m} n {n} ({i}, {j}) no_zmm {no_zmm}");
                        assert_eq!(g.to_bits(), w.to_bits(), "{at}: {g} vs {w}");
                        assert_eq!(g.to_bits(), d.to_bits(), "{at}: {g} vs vec_dot {d}");
                        compared += 1;
                    }
                    assert!(got[j * (m + 1) + m].is_nan(), "gemm_packed wrote past row {j} of c");
                }
            }
        }
    }
    assert!(compared > 1000);
    // A Q8_0 weight holding -128 stays in ggml's layout.
    let mut a = random_row(&mut rng, GgmlType::Q8_0, 4 * 64);
    a[5] = 0x80;
    let before = a.clone();
    assert!(!repack::pack(GgmlType::Q8_0, 64, 4, &mut a));
    assert_eq!(a, before);
    // So does a matrix with an inf or NaN scale (d, Q4_K's dmin), in any block.
    for (ty, at) in [(GgmlType::Q8_0, 0), (GgmlType::Q4_K, 0), (GgmlType::Q4_K, 2), (GgmlType::Q6_K, 208)] {
        if repack::layout(ty).is_none() {
            continue;
        }
        let k = 2 * ty.blck_size();
        for (blk, bits) in [(0usize, 0x7c00u16), (3, 0xfc00), (5, 0x7e01), (7, 0xffff)] {
            let mut a: Vec<u8> = (0..8).flat_map(|_| random_row(&mut rng, ty, k)).collect();
            if ty == GgmlType::Q8_0 {
                a.chunks_exact_mut(34).for_each(|b| b[2..].iter_mut().filter(|v| **v == 0x80).for_each(|v| *v = 0x81));
            }
            let mut fine = a.clone();
            assert!(repack::pack(ty, k, 8, &mut fine), "{ty}: finite scales are packed");
            let o = blk * ty.type_size() + at;
            a[o..o + 2].copy_from_slice(&bits.to_le_bytes());
            let before = a.clone();
            assert!(!repack::pack(ty, k, 8, &mut a), "{ty}: scale {bits:#06x} at byte {at} of block {blk}");
            assert_eq!(a, before);
        }
    }
}
