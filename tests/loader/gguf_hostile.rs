//! Hostile GGUF input: crafted headers, every truncation point, random corruption. Each
//! must end in the right typed error (never a panic) while allocating little: a counting
//! global allocator tracks this thread's peak heap use during each load.
//!
//! `cargo test --test loader gguf_hostile::`

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::rc::Rc;

use ggweb::cpu::CpuBufferType;
use ggweb::gguf::{
    load_with, BufferLoader, GgufArray, GgufError, GgufErrorKind as K, GgufStreamReader, GgufValue, GgufWriter, Limits,
    LoadedGguf,
};
use ggweb::types::GgmlType;

use crate::support::fixtures::Raw;
use crate::support::rng::Rng;

// ---- a global allocator that counts this thread's live bytes and their peak ----

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            track(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            track(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        track(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new_size) };
        if !q.is_null() {
            track(new_size as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the peak heap growth (bytes) while it ran.
pub(crate) fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let out = f();
    (out, (PEAK.with(|p| p.get()) - base).max(0) as usize)
}

/// What any input of a few KB may cost at most, whatever it declares.
const PEAK_CAP: usize = 64 * 1024;

fn load(bytes: &[u8], chunk: usize, limits: Limits) -> Result<LoadedGguf, GgufError> {
    load_with(bytes, chunk, limits, BufferLoader::new(Rc::new(CpuBufferType)))
}

/// Loads `bytes` whole and one byte at a time (file size known): both must fail the same
/// way, within the allocation cap. Returns the error.
fn must_fail(case: &str, bytes: &[u8], limits: Limits) -> GgufError {
    let mut errors = Vec::new();
    for chunk in [bytes.len().max(1), 1] {
        let (r, peak) = peak_during(|| load(bytes, chunk, limits).map(|_| ()));
        let e = r.err().unwrap_or_else(|| panic!("{case}: loaded without error"));
        assert!(peak < PEAK_CAP, "{case}: {peak} bytes allocated at peak (cap {PEAK_CAP})");
        errors.push(e);
    }
    assert_eq!(errors[0], errors[1], "{case}: whole and 1-byte feeds disagree");
    errors.pop().unwrap()
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    limits: Limits,
    kind: K,
    offset: u64,
    key: Option<&'static str>,
    tensor: Option<&'static str>,
}

fn case(name: &'static str, bytes: Raw, kind: K, offset: u64) -> Case {
    Case { name, bytes: bytes.0, limits: Limits::default(), kind, offset, key: None, tensor: None }
}

impl Case {
    fn key(mut self, k: &'static str) -> Case {
        self.key = Some(k);
        self
    }
    fn tensor(mut self, t: &'static str) -> Case {
        self.tensor = Some(t);
        self
    }
    fn limits(mut self, l: Limits) -> Case {
        self.limits = l;
        self
    }
}

const KV0: u64 = 24; // first key/value pair or tensor info
const F32: u32 = 0;
const Q8_0: u32 = 8;

/// A header with one key "k" of value type `ty`; the value starts at byte 37.
fn one_kv(ty: u32) -> Raw {
    Raw::header(3, 0, 1).str("k").u32(ty)
}

/// A valid file: one F32 tensor of `n` elements at offset 0, data, padding to 32.
fn one_tensor_file(n: u64) -> Raw {
    let r = Raw::header(3, 1, 0).tensor("t", &[n], F32, 0).pad(32);
    let data: Vec<u8> = (0..n as usize * 4).map(|i| i as u8 | 1).collect();
    r.bytes(&data).pad(32)
}

fn cases() -> Vec<Case> {
    let depth_bomb = {
        let mut r = one_kv(9);
        for _ in 0..1000 {
            r = r.u32(9).u64(1);
        }
        r
    };
    // 7 floats: 28 bytes of data, then 4 bytes of padding that must be zero.
    let mut bad_padding = one_tensor_file(7);
    let n = bad_padding.0.len();
    bad_padding.0[n - 2] = 7;
    vec![
        case("bad magic", Raw::new().bytes(b"GGUG").u32(3).u64(0).u64(0), K::BadMagic { found: *b"GGUG" }, 0),
        case("version 1", Raw::header(1, 0, 0), K::UnsupportedVersion { version: 1 }, 4),
        case("version 99", Raw::header(99, 0, 0), K::UnsupportedVersion { version: 99 }, 4),
        case(
            "big-endian version",
            Raw::new().bytes(b"GGUF").bytes(&3u32.to_be_bytes()).u64(0).u64(0),
            K::UnsupportedVersion { version: 3 << 24 },
            4,
        ),
        case(
            "2^40 tensors",
            Raw::header(3, 1 << 40, 0),
            K::TooMany { what: "tensors", count: 1 << 40, limit: 65536 },
            8,
        ),
        case(
            "2^64-1 key/values",
            Raw::header(3, 0, u64::MAX),
            K::TooMany { what: "key-value pairs", count: u64::MAX, limit: 65536 },
            16,
        ),
        case(
            "key of 2^63 bytes",
            Raw::header(3, 0, 1).u64(1 << 63),
            K::StringTooLong { len: 1 << 63, limit: 1 << 20 },
            KV0,
        ),
        case(
            "string value of 2^63 bytes",
            one_kv(8).u64(1 << 63),
            K::StringTooLong { len: 1 << 63, limit: 1 << 20 },
            37,
        )
        .key("k"),
        case("unknown value type", one_kv(13).u32(0), K::UnknownValueType { type_id: 13 }, 33).key("k"),
        case("unknown array element type", one_kv(9).u32(77).u64(0), K::UnknownValueType { type_id: 77 }, 37).key("k"),
        case("nested array depth bomb", depth_bomb, K::NestedArrayTooDeep { limit: 8 }, 37 + 7 * 12).key("k"),
        case(
            "array of 2^40 elements",
            one_kv(9).u32(0).u64(1 << 40),
            K::TooMany { what: "array elements", count: 1 << 40, limit: 64 << 20 },
            41,
        )
        .key("k"),
        case(
            "array of 2^26 strings, 3 present",
            one_kv(9).u32(8).u64(1 << 26).str("a").str("b").str("c"),
            K::Truncated { expected: 76 + 8, got: 76 },
            76,
        ),
        case(
            "invalid UTF-8 key",
            Raw::header(3, 0, 1).u64(3).bytes(&[b'a', 0xff, b'b']).u32(4).u32(1),
            K::BadUtf8,
            KV0 + 8 + 1,
        ),
        case("invalid UTF-8 value", one_kv(8).u64(2).bytes(&[0xc3, 0x28]), K::BadUtf8, 45).key("k"),
        case("bool byte 2", one_kv(7).u8(2), K::InvalidBool { value: 2 }, 37).key("k"),
        case(
            "duplicate key",
            Raw::header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2),
            K::DuplicateKey { key: "k".into() },
            KV0 + 17,
        )
        .key("k"),
        case("alignment 0", Raw::header(3, 0, 1).kv_u32("general.alignment", 0), K::BadAlignment { value: 0 }, KV0)
            .key("general.alignment"),
        case("alignment 48", Raw::header(3, 0, 1).kv_u32("general.alignment", 48), K::BadAlignment { value: 48 }, KV0)
            .key("general.alignment"),
        case(
            "alignment as u64",
            Raw::header(3, 0, 1).str("general.alignment").u32(10).u64(64),
            K::WrongKeyType { key: "general.alignment".into(), expected: "u32", found: "u64".into() },
            KV0,
        )
        .key("general.alignment"),
        case(
            "unknown tensor type",
            Raw::header(3, 1, 0).tensor("t", &[32], 99, 0),
            K::UnknownTensorType { name: "t".into(), type_id: 99 },
            45,
        )
        .tensor("t"),
        case(
            "ggml's removed Q4_2 (id 4)",
            Raw::header(3, 1, 0).tensor("t", &[32], 4, 0),
            K::UnknownTensorType { name: "t".into(), type_id: 4 },
            45,
        )
        .tensor("t"),
        case("5 dims", Raw::header(3, 1, 0).str("t").u32(5), K::TooManyDims { n_dims: 5 }, 33).tensor("t"),
        case(
            "dims product overflows",
            Raw::header(3, 1, 0).tensor("t", &[1 << 32, 1 << 32], F32, 0),
            K::DimsOverflow { ne: [1 << 32, 1 << 32, 1, 1] },
            53,
        )
        .tensor("t"),
        case(
            "strides overflow behind a zero dim",
            Raw::header(3, 1, 0).tensor("t", &[1 << 62, 0, 4], F32, 0),
            K::DimsOverflow { ne: [1 << 62, 0, 4, 1] },
            61,
        )
        .tensor("t"),
        case(
            "negative dim",
            Raw::header(3, 1, 0).tensor("t", &[4, u64::MAX], F32, 0),
            K::NegativeDim { dim: 1, value: -1 },
            45,
        )
        .tensor("t"),
        case(
            "ne0 not a multiple of the block",
            Raw::header(3, 1, 0).tensor("t", &[33], Q8_0, 0),
            K::BadBlockSize { ne0: 33, ty: GgmlType::Q8_0 },
            45,
        )
        .tensor("t"),
        case(
            "misaligned offset",
            Raw::header(3, 1, 0).tensor("t", &[4], F32, 16),
            K::MisalignedOffset { offset: 16, alignment: 32 },
            49,
        )
        .tensor("t"),
        case(
            "overlapping tensors",
            Raw::header(3, 2, 0).tensor("a", &[16], F32, 0).tensor("b", &[16], F32, 32).pad(32).zeros(96),
            K::OverlappingTensors { first: "a".into(), second: "b".into() },
            90,
        )
        .tensor("b"),
        case(
            "duplicate tensor name",
            Raw::header(3, 2, 0).tensor("a", &[8], F32, 0).tensor("a", &[8], F32, 32),
            K::DuplicateTensorName { name: "a".into() },
            57,
        )
        .tensor("a"),
        case(
            "tensor name of 64 bytes",
            Raw::header(3, 1, 0).tensor(&"n".repeat(64), &[8], F32, 0),
            K::NameTooLong { len: 64, limit: 63 },
            KV0,
        ),
        case(
            "tensor name of 2^62 bytes",
            Raw::header(3, 1, 0).u64(1 << 62),
            K::NameTooLong { len: 1 << 62, limit: 63 },
            KV0,
        ),
        case(
            "invalid UTF-8 tensor name",
            Raw::header(3, 1, 0).u64(2).bytes(&[0xff, 0xfe]).u32(1).u64(8).u32(0).u64(0),
            K::BadUtf8,
            KV0 + 8,
        ),
        case(
            "data past the end",
            Raw::header(3, 1, 0).tensor("t", &[16], F32, 0).pad(32).zeros(32),
            K::TensorPastEnd { end: 128, file_size: 96 },
            57,
        )
        .tensor("t"),
        case(
            "offset 2^32 past the end",
            Raw::header(3, 1, 0).tensor("t", &[16], F32, 1 << 32).pad(32).zeros(64),
            K::TensorPastEnd { end: 64 + (1 << 32) + 64, file_size: 128 },
            57,
        )
        .tensor("t"),
        case(
            "1 GiB tensor in a 128-byte file",
            Raw::header(3, 1, 0).tensor("t", &[1 << 28], F32, 0).pad(32).zeros(64),
            K::TensorPastEnd { end: 64 + (1 << 30), file_size: 128 },
            57,
        )
        .tensor("t"),
        case(
            "offset 2^40 over the weight limit",
            Raw::header(3, 1, 0).tensor("t", &[16], F32, 1 << 40),
            K::Budget { needed: (1 << 40) + 64, limit: 64 << 30 },
            49,
        )
        .tensor("t"),
        case(
            "tensor over the weight limit",
            Raw::header(3, 1, 0).tensor("t", &[1 << 36], F32, 0),
            K::Budget { needed: 1 << 38, limit: 64 << 30 },
            45,
        )
        .tensor("t"),
        case("garbage in the final padding", bad_padding, K::TrailingData { allowed_end: 96 }, 94),
        case("zeros past the final padding", one_tensor_file(7).zeros(32), K::TrailingData { allowed_end: 96 }, 96),
        case(
            "header over the header limit",
            Raw::header(3, 0, 2).kv_u32("a.key.of.some.length", 1).kv_u32("b", 2),
            K::TooMany { what: "header bytes", count: 41, limit: 40 },
            40,
        )
        .limits(Limits { max_header_bytes: 40, ..Limits::default() }),
    ]
}

#[test]
fn crafted_headers_give_typed_errors() {
    let cases = cases();
    assert!(cases.len() >= 20);
    for c in &cases {
        let e = must_fail(c.name, &c.bytes, c.limits);
        assert_eq!(e.kind, c.kind, "{}: {e}", c.name);
        assert_eq!(e.offset, Some(c.offset), "{}: {e}", c.name);
        assert_eq!(e.key.as_deref(), c.key, "{}: {e}", c.name);
        assert_eq!(e.tensor.as_deref(), c.tensor, "{}: {e}", c.name);
        // The message says what and where.
        let msg = e.to_string();
        assert!(msg.contains(&format!("at byte {}", c.offset)), "{}: {msg}", c.name);
    }
}

#[test]
fn error_messages_name_what_and_where() {
    let e =
        must_fail("unknown tensor type", &Raw::header(3, 1, 0).tensor("blk.0.w", &[32], 99, 0).0, Limits::default());
    assert_eq!(e.to_string(), "GGUF: tensor 'blk.0.w' has unknown ggml type 99, in tensor 'blk.0.w', at byte 51");
    let e = must_fail("v1", &Raw::header(1, 0, 0).0, Limits::default());
    assert_eq!(e.to_string(), "GGUF: unsupported GGUF version 1 (2 and 3 are supported), at byte 4");
}

#[test]
fn valid_controls_load() {
    // The crafted files' well-formed relatives load, so the failures above are the fields'.
    for (name, raw) in [
        ("no tensors, no keys", Raw::header(3, 0, 0)),
        ("version 2", Raw::header(2, 0, 0)),
        ("ends with an array", one_kv(9).u32(4).u64(2).u32(1).u32(2)),
        ("ends with an empty array", one_kv(9).u32(8).u64(0)),
        ("ends with nested empty arrays", one_kv(9).u32(9).u64(2).u32(0).u64(0).u32(8).u64(0)),
        ("one tensor", one_tensor_file(7)),
        ("one tensor, no final padding", Raw(one_tensor_file(7).0[..92].to_vec())),
        (
            "alignment 64",
            Raw::header(3, 1, 1).kv_u32("general.alignment", 64).tensor("t", &[4], F32, 0).pad(64).zeros(16),
        ),
        ("n_dims 0", Raw::header(3, 1, 0).str("s").u32(0).u32(F32).u64(0).pad(32).zeros(4)),
        (
            "tensors out of file order",
            Raw::header(3, 2, 0).tensor("a", &[8], F32, 32).tensor("b", &[8], F32, 0).pad(32).zeros(64),
        ),
    ] {
        for chunk in [1, 5, 1 << 20] {
            let (r, peak) = peak_during(|| load(&raw.0, chunk, Limits::default()).map(|m| m.header.tensors.len()));
            assert!(r.is_ok(), "{name}: {}", r.unwrap_err());
            assert!(peak < PEAK_CAP, "{name}: {peak}");
        }
    }
    let m = load(
        &Raw::header(3, 1, 0).str("s").u32(0).u32(F32).u64(0).pad(32).bytes(&2.5f32.to_le_bytes()).0,
        3,
        Limits::default(),
    )
    .unwrap();
    assert_eq!((m.header.tensors[0].n_dims, m.tensors[0].to_f32_vec()), (0, vec![2.5]));
    let out_of_order = Raw::header(3, 2, 0)
        .tensor("a", &[1], F32, 32)
        .tensor("b", &[1], F32, 0)
        .pad(32)
        .bytes(&1.0f32.to_le_bytes())
        .zeros(28)
        .bytes(&2.0f32.to_le_bytes());
    let m = load(&out_of_order.0, 1, Limits::default()).unwrap();
    assert_eq!((m.tensor("a").unwrap().to_f32_vec(), m.tensor("b").unwrap().to_f32_vec()), (vec![2.0], vec![1.0]));
}

#[test]
fn reader_stays_failed_after_an_error() {
    let mut r = GgufStreamReader::new(Limits::default());
    let e = r.feed(b"GGUFxxxx", &mut ggweb::gguf::NullSink).unwrap_err();
    assert!(matches!(e.kind, K::UnsupportedVersion { .. }));
    assert_eq!(r.feed(&[0; 16], &mut ggweb::gguf::NullSink).unwrap_err(), e);
    assert_eq!(r.finish().unwrap_err(), e);
}

/// A small complete file (about 3 KB) with strings, arrays, nested arrays and 3 tensors.
fn small_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", GgufValue::String("gpt2".into())).unwrap();
    w.add_kv("gpt2.block_count", GgufValue::U32(2)).unwrap();
    w.add_kv("x.eps", GgufValue::F32(1e-5)).unwrap();
    let tokens: Vec<String> = (0..40).map(|i| format!("tok{i}")).collect();
    w.add_kv("tokenizer.ggml.tokens", GgufValue::Array(GgufArray::String(tokens))).unwrap();
    w.add_kv("tokenizer.ggml.token_type", GgufValue::Array(GgufArray::I32((0..40).collect()))).unwrap();
    w.add_kv(
        "x.nested",
        GgufValue::Array(GgufArray::Array(vec![GgufArray::U8(vec![1, 2]), GgufArray::Bool(vec![true])])),
    )
    .unwrap();
    w.add_tensor("a", GgmlType::F32, &[4, 3], (0..48).map(|i| i as u8).collect()).unwrap();
    w.add_tensor("b", GgmlType::Q8_0, &[32, 2], (0..68).map(|i| (i * 7) as u8).collect()).unwrap();
    w.add_tensor("c", GgmlType::F32, &[500], (0..2000).map(|i| (i % 251) as u8).collect()).unwrap();
    w.to_bytes()
}

#[test]
fn every_truncation_point_is_reported() {
    let file = small_file();
    assert!(file.len() > 2500 && file.len() < 4096, "{}", file.len());
    let full = load(&file, file.len(), Limits::default()).unwrap();
    let data_end = full.header.data_offset + full.header.data_end();
    assert_eq!(data_end, file.len() as u64 - 16); // c: 2000 bytes, padded by 16
    for cut in 0..file.len() {
        let prefix = &file[..cut];
        let mut results = Vec::new();
        for chunk in [cut.max(1), 1] {
            let (r, peak) = peak_during(|| {
                let mut reader = GgufStreamReader::new(Limits::default());
                let mut sink = BufferLoader::new(Rc::new(CpuBufferType));
                for c in prefix.chunks(chunk) {
                    reader.feed(c, &mut sink).unwrap();
                }
                reader.finish().map(|h| h.tensors.len())
            });
            assert!(peak < PEAK_CAP + 4096, "cut {cut}: {peak}");
            results.push(r);
        }
        assert_eq!(results[0], results[1], "cut {cut}");
        match &results[0] {
            // Only the final zero padding may be missing.
            Ok(3) => assert!(cut as u64 >= data_end, "cut {cut} accepted"),
            Err(e) => {
                let K::Truncated { expected, got } = e.kind else { panic!("cut {cut}: {e}") };
                assert_eq!(got, cut as u64);
                assert!(expected > got && expected <= data_end, "cut {cut}: {e}");
                assert_eq!(e.offset, Some(cut as u64));
            }
            other => panic!("cut {cut}: {other:?}"),
        }
        // With the (short) file size known up front the header already tells: a tensor is past the end.
        let (r, _) = peak_during(|| load(prefix, 64, Limits::default()).map(|_| ()));
        match r {
            Ok(()) => assert!(cut as u64 >= data_end),
            Err(e) => assert!(matches!(e.kind, K::Truncated { .. } | K::TensorPastEnd { .. }), "cut {cut}: {e}"),
        }
    }
    // Expected sizes of the field being waited for: magic (4), version (8), counts (16, 24).
    let expected_at = |cut: usize| match GgufStreamReader::new(Limits::default()).finish_after(&file[..cut]) {
        Err(e) => match e.kind {
            K::Truncated { expected, .. } => expected,
            _ => panic!("{e}"),
        },
        Ok(_) => panic!("cut {cut} accepted"),
    };
    assert_eq!([expected_at(0), expected_at(3), expected_at(5), expected_at(10), expected_at(20)], [4, 4, 8, 16, 24]);
}

trait FinishAfter {
    fn finish_after(self, bytes: &[u8]) -> Result<ggweb::gguf::GgufHeader, GgufError>;
}

impl FinishAfter for GgufStreamReader {
    fn finish_after(mut self, bytes: &[u8]) -> Result<ggweb::gguf::GgufHeader, GgufError> {
        self.feed(bytes, &mut ggweb::gguf::NullSink)?;
        self.finish()
    }
}

#[test]
fn random_corruption_never_panics_or_balloons() {
    let file = small_file();
    let mut rng = Rng::xorshift64(0x9E37_79B9_7F4A_7C15);
    let mut next = || rng.next_u64();
    let (mut ok, mut failed) = (0, 0);
    for round in 0..3000 {
        let mut bytes = file.clone();
        // 1 to 4 corrupted bytes, biased to the header where the structure is.
        for _ in 0..1 + next() % 4 {
            let at = (next() % 700) as usize;
            bytes[at] = match next() % 3 {
                0 => next() as u8,
                1 => 0xff,
                _ => bytes[at] ^ (1 << (next() % 8)),
            };
        }
        let chunk = [1, 13, 4096][round % 3];
        let (r, peak) = peak_during(|| load(&bytes, chunk, Limits::default()).map(|_| ()));
        assert!(peak < 256 * 1024, "round {round}: {peak} bytes at peak");
        if r.is_ok() {
            ok += 1
        } else {
            failed += 1
        }
    }
    // Most corruptions break the structure; some (inside string bytes or data) do not.
    assert!(failed > 1000 && ok > 10, "ok {ok}, failed {failed}");
}

#[test]
fn size_helpers_refuse_what_usize_cannot_hold() {
    use ggweb::tensor::{contiguous_nbytes, try_contiguous_strides};
    // In u64, whatever the target: a 2^40-element F32 tensor is 4 TiB; past u64 is None.
    assert_eq!(contiguous_nbytes(GgmlType::F32, &[1 << 20, 1 << 20, 1, 1]), Some(4 << 40));
    assert_eq!(contiguous_nbytes(GgmlType::Q8_0, &[64, 3, 1, 1]), Some(2 * 34 * 3));
    assert_eq!(contiguous_nbytes(GgmlType::F32, &[1 << 31, 1 << 31, 1 << 2, 1]), None);
    assert_eq!(contiguous_nbytes(GgmlType::Q8_0, &[33, 1, 1, 1]), None, "not whole blocks");
    assert_eq!(contiguous_nbytes(GgmlType::F32, &[-1, 1, 1, 1]), None);
    // Strides in usize: checked, never wrapped.
    assert_eq!(try_contiguous_strides(GgmlType::F32, &[4, 3, 2, 1]), Some([4, 16, 48, 96]));
    assert_eq!(try_contiguous_strides(GgmlType::F32, &[i64::MAX, 2, 1, 1]), None);
    assert_eq!(try_contiguous_strides(GgmlType::F32, &[1 << 32, 1 << 32, 1 << 2, 1]), None);
    assert_eq!(GgmlType::F32.try_row_size(-4), None);
    assert_eq!(GgmlType::Q4_0.try_row_size(64), Some(36));
    if usize::BITS == 64 {
        assert_eq!(GgmlType::F32.try_row_size(i64::MAX), None);
    }
    // Bounds checks of host buffers add without wrapping.
    use ggweb::backend::host::in_bounds;
    assert!(in_bounds(8, 8, 16) && !in_bounds(9, 8, 16) && !in_bounds(usize::MAX, 2, 16));
}
