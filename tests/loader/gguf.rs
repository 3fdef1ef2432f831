//! GGUF reader, loader and writer on the reference models and on written files.
//!
//! `cargo test --test loader gguf::`

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use ggweb::backend::{BackendError, Buffer, BufferType};
use ggweb::cpu::CpuBufferType;
use ggweb::gguf::{
    load_from_bytes, load_from_reader, load_with, read_header, BufferLoader, GgufArray, GgufErrorKind,
    GgufStreamReader, GgufValue, GgufWriter, Limits, LoadedGguf, NullSink, TensorInfo, ValueType,
};
use ggweb::types::GgmlType;

use crate::support::fixtures::{model_bytes, models_dir};

fn cpu() -> Rc<dyn BufferType> {
    Rc::new(CpuBufferType)
}

fn buffer_contents(m: &LoadedGguf) -> Vec<Vec<u8>> {
    m.buffers
        .iter()
        .map(|b| {
            let mut v = vec![0u8; b.size()];
            b.get_bytes(0, &mut v);
            v
        })
        .collect()
}

fn tensor_bytes(m: &LoadedGguf, i: usize) -> Vec<u8> {
    let t = &m.tensors[i];
    let mut v = vec![0u8; t.nbytes()];
    t.get_bytes(&mut v, 0);
    v
}

/// Facts every reference model shares (README and `gguf-dump`).
fn check_common_facts(m: &LoadedGguf, file: &[u8], embd_type: GgmlType, output_type: GgmlType) {
    let h = &m.header;
    assert_eq!(h.version, 3);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.data_offset, 1768576);
    assert_eq!(h.tensors.len(), 29);
    assert_eq!(h.metadata.len(), 20);
    assert_eq!(h.get_str("general.architecture"), Ok("gpt2"));
    assert_eq!(h.get_u32("gpt2.block_count"), Ok(2));
    assert_eq!(h.get_u32("gpt2.context_length"), Ok(128));
    assert_eq!(h.get_u32("gpt2.embedding_length"), Ok(64));
    assert_eq!(h.get_u32("gpt2.feed_forward_length"), Ok(256));
    assert_eq!(h.get_u32("gpt2.attention.head_count"), Ok(4));
    assert_eq!(h.get_f32("gpt2.attention.layer_norm_epsilon"), Ok(1e-5f32));
    assert_eq!(h.get_str("tokenizer.ggml.model"), Ok("gpt2"));
    assert_eq!(h.get_str("tokenizer.ggml.pre"), Ok("gpt-2"));
    for k in ["bos", "eos", "unknown"] {
        assert_eq!(h.get_u32(&format!("tokenizer.ggml.{k}_token_id")), Ok(50256));
    }
    let tokens = h.get_arr_str("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 50257);
    assert_eq!((tokens[0].as_str(), tokens[198].as_str(), tokens[50256].as_str()), ("!", "Ċ", "<|endoftext|>"));
    let merges = h.get_arr_str("tokenizer.ggml.merges").unwrap();
    assert_eq!(merges.len(), 50000);
    assert_eq!((merges[0].as_str(), merges[49999].as_str()), ("Ġ t", "Ġg azed"));
    let token_type = h.get_arr_i32("tokenizer.ggml.token_type").unwrap();
    assert_eq!(token_type.len(), 50257);
    assert!(token_type[..50256].iter().all(|&t| t == 1) && token_type[50256] == 3);

    let info = |name: &str| h.tensor_info(name).unwrap_or_else(|| panic!("no tensor {name}"));
    assert_eq!(info("token_embd.weight").ne, [64, 50257, 1, 1]);
    assert_eq!(info("token_embd.weight").ty, embd_type);
    assert_eq!(info("output.weight").ne, [64, 50257, 1, 1]);
    assert_eq!(info("output.weight").ty, output_type);
    assert_eq!((info("position_embd.weight").ne, info("position_embd.weight").ty), ([64, 128, 1, 1], GgmlType::F32));
    assert_eq!(info("blk.1.attn_qkv.weight").ne, [64, 192, 1, 1]);
    assert_eq!(info("blk.0.ffn_up.weight").ne, [64, 256, 1, 1]);
    assert_eq!(info("blk.0.ffn_down.weight").ne, [256, 64, 1, 1]);
    assert_eq!((info("blk.0.attn_qkv.bias").n_dims, info("blk.0.attn_qkv.bias").ne), (1, [192, 1, 1, 1]));
    for t in &h.tensors {
        if t.name.ends_with(".bias") || t.name.contains("norm") {
            assert_eq!(t.ty, GgmlType::F32, "{}", t.name);
        }
    }

    // Tensors are named in the context and hold exactly the file's bytes at their offsets.
    for (i, t) in h.tensors.iter().enumerate() {
        let tensor = &m.tensors[i];
        assert_eq!(tensor.name(), t.name);
        assert_eq!((tensor.ty, tensor.ne, tensor.nbytes()), (t.ty, t.ne, t.nbytes));
        assert_eq!(m.ctx.get_tensor(&t.name).as_ref(), Some(tensor));
        let at = (h.data_offset + t.offset) as usize;
        assert!(tensor_bytes(m, i) == file[at..at + t.nbytes], "bytes of {}", t.name);
    }
}

/// Loads a fixture whole, then in 4096-, 7- and 1-byte chunks: the same header, the same
/// placement and byte-identical weight buffers (padding included) every time.
fn check_fixture(name: &str, embd_type: GgmlType, output_type: GgmlType, data_end: u64) {
    let file = model_bytes(name);
    let whole = load_from_bytes(&file, file.len(), cpu()).unwrap();
    check_common_facts(&whole, &file, embd_type, output_type);
    assert_eq!(whole.header.data_end(), data_end);
    let whole_buffers = buffer_contents(&whole);
    assert_eq!(whole_buffers.len(), 1);
    for chunk in [4096, 7, 1] {
        let m = load_from_bytes(&file, chunk, cpu()).unwrap();
        assert!(m.header == whole.header, "{name}: header differs with {chunk}-byte chunks");
        let offsets = |m: &LoadedGguf| m.tensors.iter().map(|t| t.data().unwrap().offset).collect::<Vec<_>>();
        assert_eq!(offsets(&m), offsets(&whole));
        assert!(buffer_contents(&m) == whole_buffers, "{name}: weight buffers differ with {chunk}-byte chunks");
    }

    // Written back with our writer, the header and tensors reproduce the file exactly.
    let mut w = GgufWriter::new();
    for (k, v) in &whole.header.metadata {
        w.add_kv(k, v.clone()).unwrap();
    }
    for (i, t) in whole.header.tensors.iter().enumerate() {
        w.add_tensor(&t.name, t.ty, &t.ne[..t.n_dims as usize], tensor_bytes(&whole, i)).unwrap();
    }
    assert_eq!(w.file_size(), file.len() as u64);
    assert!(w.to_bytes() == file, "{name}: rewritten file differs");
}

#[test]
fn fixture_f32_every_chunk_size() {
    check_fixture("tiny-gpt2-f32.gguf", GgmlType::F32, GgmlType::F32, 27933312 - 1768576);
}

#[test]
fn fixture_f16_every_chunk_size() {
    check_fixture("tiny-gpt2-f16.gguf", GgmlType::F16, GgmlType::F16, 14870912 - 1768576);
}

#[test]
fn fixture_q8_0_every_chunk_size() {
    // The last tensor ends 28 bytes before the end of the file: zero padding to 32.
    check_fixture("tiny-gpt2-q8_0.gguf", GgmlType::Q8_0, GgmlType::Q8_0, 8747940 - 1768576);
}

#[test]
fn fixture_q4_0_every_chunk_size() {
    check_fixture("tiny-gpt2-q4_0.gguf", GgmlType::Q4_0, GgmlType::Q8_0, 7090592 - 1768576);
}

#[test]
fn q4_0_layout_matches_gguf_dump() {
    // Offsets and sizes as the PyPI gguf package reports them.
    let file = model_bytes("tiny-gpt2-q4_0.gguf");
    let m = load_from_bytes(&file, 1 << 16, cpu()).unwrap();
    let h = &m.header;
    let expect = [
        ("output.weight", GgmlType::Q8_0, 0, 3417476),
        ("output_norm.bias", GgmlType::F32, 3417504, 256),
        ("position_embd.weight", GgmlType::F32, 3418016, 32768),
        ("token_embd.weight", GgmlType::Q4_0, 3450784, 1809252),
        ("blk.1.ffn_down.weight", GgmlType::Q4_0, 5302048, 9216),
        ("blk.1.ffn_up.weight", GgmlType::Q4_0, 5312800, 9216),
    ];
    for (name, ty, offset, nbytes) in expect {
        let t = h.tensor_info(name).unwrap();
        assert_eq!((t.ty, t.offset, t.nbytes), (ty, offset, nbytes), "{name}");
    }
    assert_eq!(h.tensors[0].name, "output.weight");
    assert_eq!(h.total_weight_bytes(), 5321960);
    // Q8_0 block 0 of output.weight: f16 scale then 32 quants, straight from the file.
    let t = m.tensor("output.weight").unwrap();
    let mut block = [0u8; 34];
    t.get_bytes(&mut block, 0);
    assert_eq!(&block[..], &file[1768576..1768576 + 34]);
}

#[test]
fn progress_is_reported() {
    let file = model_bytes("tiny-gpt2-q8_0.gguf");
    let mut r = GgufStreamReader::new(Limits::default());
    let mut seen_total = None;
    for (k, chunk) in file.chunks(1 << 20).enumerate() {
        r.feed(chunk, &mut NullSink).unwrap();
        assert_eq!(r.bytes_consumed(), ((k + 1) << 20).min(file.len()) as u64);
        if seen_total.is_none() {
            seen_total = r.total_expected();
            // The 1.7 MB header is complete after the second chunk, not before.
            assert_eq!(seen_total.is_some(), k >= 1, "chunk {k}");
        }
    }
    assert_eq!(seen_total, Some(8747940));
    assert_eq!(r.bytes_consumed(), 8747968);
    r.finish().unwrap();
}

#[test]
fn read_header_stops_before_the_data() {
    let file = model_bytes("tiny-gpt2-f32.gguf");
    let full = load_from_bytes(&file, 1 << 20, cpu()).unwrap();
    // Only the first 1.8 MB (the header and its padding) are needed, with the file size.
    let h = read_header(&file[..1768576], file.len() as u64, Limits::default()).unwrap();
    assert!(h == full.header);
    // The same prefix claimed as the whole file: the tensors lie past its end.
    let e = read_header(&file[..1768576], 1768576, Limits::default()).unwrap_err();
    assert_eq!(e.kind, GgufErrorKind::TensorPastEnd { end: 27933312, file_size: 1768576 });
    let e = read_header(&file[..1000], file.len() as u64, Limits::default()).unwrap_err();
    assert!(matches!(e.kind, GgufErrorKind::Truncated { got: 1000, .. }), "{e}");
}

#[test]
fn load_from_reader_reads_a_file() {
    let path = models_dir().join("tiny-gpt2-f16.gguf");
    let file = std::fs::read(&path).unwrap();
    let a = load_from_reader(std::fs::File::open(&path).unwrap(), 65536, cpu()).unwrap();
    let b = load_from_bytes(&file, file.len(), cpu()).unwrap();
    assert!(a.header == b.header);
    assert!(buffer_contents(&a) == buffer_contents(&b));
}

#[test]
fn accessors_report_missing_keys_and_wrong_types() {
    let file = model_bytes("tiny-gpt2-q4_0.gguf");
    let mut r = GgufStreamReader::new(Limits::default());
    r.feed(&file, &mut NullSink).unwrap();
    let h = r.finish().unwrap();
    let e = h.get_u32("gpt2.rope.dimension_count").unwrap_err();
    assert_eq!(e.kind, GgufErrorKind::MissingKey { key: "gpt2.rope.dimension_count".into() });
    let e = h.get_f32("gpt2.block_count").unwrap_err();
    assert_eq!(
        e.kind,
        GgufErrorKind::WrongKeyType { key: "gpt2.block_count".into(), expected: "f32", found: "u32".into() }
    );
    assert_eq!(
        e.to_string(),
        "GGUF: metadata key 'gpt2.block_count' has type u32, expected f32, in key 'gpt2.block_count'"
    );
    let e = h.get_arr_i32("tokenizer.ggml.tokens").unwrap_err();
    assert_eq!(
        e.kind,
        GgufErrorKind::WrongKeyType {
            key: "tokenizer.ggml.tokens".into(),
            expected: "arr[i32]",
            found: "arr[str]".into()
        }
    );
    assert!(matches!(h.get_str("tokenizer.ggml.merges").unwrap_err().kind, GgufErrorKind::WrongKeyType { .. }));
    assert_eq!(
        h.get_u64("gpt2.block_count").unwrap_err().kind.to_string(),
        "metadata key 'gpt2.block_count' has type u32, expected u64"
    );
    assert_eq!(h.get("general.file_type"), Some(&GgufValue::U32(2)));
}

// ---- written files ----

/// Deterministic bytes (an LCG), so tensors are not all zeros.
fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            (x >> 24) as u8
        })
        .collect()
}

const NAN_BITS: u32 = 0x7fc0_1234;

/// Every value type, nested arrays, and tensors of several types and sizes.
fn sample_writer(alignment: Option<u32>) -> GgufWriter {
    let mut w = GgufWriter::new();
    if let Some(a) = alignment {
        w.add_kv("general.alignment", GgufValue::U32(a)).unwrap();
    }
    let kvs = vec![
        ("t.u8", GgufValue::U8(200)),
        ("t.i8", GgufValue::I8(-5)),
        ("t.u16", GgufValue::U16(60000)),
        ("t.i16", GgufValue::I16(-30000)),
        ("t.u32", GgufValue::U32(4_000_000_000)),
        ("t.i32", GgufValue::I32(-2_000_000_000)),
        ("t.f32", GgufValue::F32(1.5)),
        ("t.f32_nan", GgufValue::F32(f32::from_bits(NAN_BITS))),
        ("t.bool_true", GgufValue::Bool(true)),
        ("t.bool_false", GgufValue::Bool(false)),
        ("t.str", GgufValue::String("héllo ✓ \"quoted\"".into())),
        ("t.empty_str", GgufValue::String(String::new())),
        ("t.u64", GgufValue::U64(u64::MAX)),
        ("t.i64", GgufValue::I64(i64::MIN)),
        ("t.f64", GgufValue::F64(-0.0)),
        ("t.arr_u8", GgufValue::Array(GgufArray::U8(vec![1, 2, 255]))),
        ("t.arr_i8", GgufValue::Array(GgufArray::I8(vec![-128, 127]))),
        ("t.arr_u16", GgufValue::Array(GgufArray::U16(vec![65535]))),
        ("t.arr_i16", GgufValue::Array(GgufArray::I16(vec![-1, 2, -3]))),
        ("t.arr_u32", GgufValue::Array(GgufArray::U32(vec![7, 8]))),
        ("t.arr_i32_empty", GgufValue::Array(GgufArray::I32(vec![]))),
        ("t.arr_f32", GgufValue::Array(GgufArray::F32(vec![0.25, -1e30]))),
        ("t.arr_bool", GgufValue::Array(GgufArray::Bool(vec![true, false, true]))),
        ("t.arr_str", GgufValue::Array(GgufArray::String(vec!["a".into(), String::new(), "ß".into()]))),
        ("t.arr_u64", GgufValue::Array(GgufArray::U64(vec![1 << 40]))),
        ("t.arr_i64", GgufValue::Array(GgufArray::I64(vec![-(1 << 40)]))),
        ("t.arr_f64", GgufValue::Array(GgufArray::F64(vec![std::f64::consts::PI]))),
        (
            "t.arr_nested",
            GgufValue::Array(GgufArray::Array(vec![
                GgufArray::U32(vec![1, 2]),
                GgufArray::String(vec!["x".into()]),
                GgufArray::U8(vec![]),
                GgufArray::Array(vec![GgufArray::I16(vec![-7])]),
            ])),
        ),
        ("t.arr_of_empty_arrays", GgufValue::Array(GgufArray::Array(vec![]))),
    ];
    for (k, v) in kvs {
        w.add_kv(k, v).unwrap();
    }
    let tensors: [(&str, GgmlType, &[i64]); 8] = [
        ("a.f32", GgmlType::F32, &[3, 2]),
        ("b.f16", GgmlType::F16, &[4]),
        ("c.q8_0", GgmlType::Q8_0, &[64, 2]),
        ("d.q4_k", GgmlType::Q4_K, &[256]),
        ("e.empty", GgmlType::F32, &[0, 3]),
        ("f.i32", GgmlType::I32, &[5, 1, 1, 1]),
        ("g.bf16", GgmlType::BF16, &[2, 2, 2]),
        ("h.q4_0", GgmlType::Q4_0, &[32, 3]),
    ];
    for (k, (name, ty, ne)) in tensors.into_iter().enumerate() {
        let n = ne.iter().product::<i64>() as usize / ty.blck_size() * ty.type_size();
        w.add_tensor(name, ty, ne, pattern(n, k as u32)).unwrap();
    }
    w
}

#[test]
fn round_trip_with_every_chunk_size() {
    for alignment in [None, Some(64), Some(8)] {
        let w = sample_writer(alignment);
        let file = w.to_bytes();
        let mut via_io = Vec::new();
        w.write_to(&mut via_io).unwrap();
        assert!(via_io == file);
        assert_eq!(w.file_size(), file.len() as u64);

        let whole = load_from_bytes(&file, file.len(), cpu()).unwrap();
        let h = &whole.header;
        let align = alignment.unwrap_or(32) as u64;
        assert_eq!(h.alignment, align);
        assert_eq!(h.data_offset % align, 0);
        // Packed in order, each tensor padded to the alignment.
        let mut expect_offset = 0;
        for t in &h.tensors {
            assert_eq!(t.offset, expect_offset, "{}", t.name);
            expect_offset += (t.nbytes as u64).div_ceil(align) * align;
        }
        assert_eq!(file.len() as u64, h.data_offset + expect_offset);
        let names: Vec<&str> = h.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a.f32", "b.f16", "c.q8_0", "d.q4_k", "e.empty", "f.i32", "g.bf16", "h.q4_0"]);
        let f32_info = h.tensor_info("a.f32").unwrap();
        assert_eq!((f32_info.n_dims, f32_info.ne, f32_info.nbytes), (2, [3, 2, 1, 1], 24));
        assert_eq!(h.tensor_info("c.q8_0").unwrap().nbytes, 136);
        assert_eq!(h.tensor_info("d.q4_k").unwrap().nbytes, 144);
        assert_eq!(h.tensor_info("e.empty").unwrap().nbytes, 0);
        assert_eq!(h.tensor_info("f.i32").unwrap().n_dims, 4);
        assert_eq!(h.tensor_info("h.q4_0").unwrap().nbytes, 54);

        // Values come back with the exact types and bits written.
        assert_eq!(h.get_u8("t.u8"), Ok(200));
        assert_eq!(h.get_i8("t.i8"), Ok(-5));
        assert_eq!(h.get_u16("t.u16"), Ok(60000));
        assert_eq!(h.get_i16("t.i16"), Ok(-30000));
        assert_eq!(h.get_u32("t.u32"), Ok(4_000_000_000));
        assert_eq!(h.get_i32("t.i32"), Ok(-2_000_000_000));
        assert_eq!(h.get_f32("t.f32"), Ok(1.5));
        assert_eq!(h.get_f32("t.f32_nan").unwrap().to_bits(), NAN_BITS);
        assert_eq!((h.get_bool("t.bool_true"), h.get_bool("t.bool_false")), (Ok(true), Ok(false)));
        assert_eq!(h.get_str("t.str"), Ok("héllo ✓ \"quoted\""));
        assert_eq!(h.get_str("t.empty_str"), Ok(""));
        assert_eq!(h.get_u64("t.u64"), Ok(u64::MAX));
        assert_eq!(h.get_i64("t.i64"), Ok(i64::MIN));
        assert_eq!(h.get_f64("t.f64").unwrap().to_bits(), (-0.0f64).to_bits());
        assert_eq!(h.get_arr_str("t.arr_str").unwrap(), ["a", "", "ß"]);
        assert_eq!(h.get_arr_i32("t.arr_i32_empty").unwrap(), &[] as &[i32]);
        assert_eq!(h.get_arr_f32("t.arr_f32").unwrap(), [0.25, -1e30]);
        assert_eq!(h.get_arr_u32("t.arr_u32").unwrap(), [7, 8]);
        let nested = h.get_arr("t.arr_nested").unwrap();
        assert_eq!(nested.type_name(), "arr[arr[u32]]");
        assert_eq!(
            nested,
            &GgufArray::Array(vec![
                GgufArray::U32(vec![1, 2]),
                GgufArray::String(vec!["x".into()]),
                GgufArray::U8(vec![]),
                GgufArray::Array(vec![GgufArray::I16(vec![-7])]),
            ])
        );
        assert_eq!(h.get_arr("t.arr_of_empty_arrays").unwrap().elem_type(), ValueType::Array);
        let expect_keys = 29 + alignment.is_some() as usize;
        assert_eq!(h.metadata.len(), expect_keys);

        let whole_buffers = buffer_contents(&whole);
        for (k, t) in h.tensors.iter().enumerate() {
            let at = (h.data_offset + t.offset) as usize;
            assert!(tensor_bytes(&whole, k) == file[at..at + t.nbytes]);
            assert!(tensor_bytes(&whole, k) == pattern(t.nbytes, k as u32), "{}", t.name);
        }
        for chunk in [1, 7, 4096] {
            let m = load_from_bytes(&file, chunk, cpu()).unwrap();
            assert!(m.header.tensors == h.tensors && m.header.data_offset == h.data_offset);
            assert_eq!(format!("{:?}", m.header.metadata), format!("{:?}", h.metadata));
            assert!(buffer_contents(&m) == whole_buffers, "chunk {chunk}");
            // Re-encoding compares every value bit for bit (NaN payloads included).
            let mut w2 = GgufWriter::new();
            for (k, v) in &m.header.metadata {
                w2.add_kv(k, v.clone()).unwrap();
            }
            for (k, t) in m.header.tensors.iter().enumerate() {
                w2.add_tensor(&t.name, t.ty, &t.ne[..t.n_dims as usize], tensor_bytes(&m, k)).unwrap();
            }
            assert!(w2.to_bytes() == file, "chunk {chunk}: re-encoded file differs");
        }
    }
}

/// Written for the PyPI `gguf` package to read back (tests/support/check_with_pypi_gguf.py).
#[test]
fn writes_a_sample_for_external_readers() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let w = sample_writer(None);
    w.write_to(std::fs::File::create(dir.join("gguf-sample.gguf")).unwrap()).unwrap();
    assert_eq!(std::fs::metadata(dir.join("gguf-sample.gguf")).unwrap().len(), w.file_size());
}

#[test]
fn writer_rejects_bad_tensors_and_keys() {
    let mut w = GgufWriter::new();
    let kind = |r: Result<(), ggweb::gguf::GgufError>| r.unwrap_err().into_kind();
    assert_eq!(
        kind(w.add_tensor("x", GgmlType::F32, &[3], vec![0; 8])),
        GgufErrorKind::DataSizeMismatch { expected: 12, got: 8 }
    );
    assert_eq!(
        kind(w.add_tensor("q", GgmlType::Q8_0, &[33], vec![])),
        GgufErrorKind::BadBlockSize { ne0: 33, ty: GgmlType::Q8_0 }
    );
    assert_eq!(
        kind(w.add_tensor(&"n".repeat(64), GgmlType::F32, &[1], vec![0; 4])),
        GgufErrorKind::NameTooLong { len: 64, limit: 63 }
    );
    assert_eq!(
        kind(w.add_tensor("d", GgmlType::F32, &[1, 1, 1, 1, 1], vec![0; 4])),
        GgufErrorKind::TooManyDims { n_dims: 5 }
    );
    w.add_tensor("ok", GgmlType::F32, &[1], vec![0; 4]).unwrap();
    assert_eq!(
        kind(w.add_tensor("ok", GgmlType::F32, &[1], vec![0; 4])),
        GgufErrorKind::DuplicateTensorName { name: "ok".into() }
    );
    w.add_kv("k", GgufValue::U8(1)).unwrap();
    assert_eq!(kind(w.add_kv("k", GgufValue::U8(2))), GgufErrorKind::DuplicateKey { key: "k".into() });
    assert_eq!(kind(w.add_kv("general.alignment", GgufValue::U32(48))), GgufErrorKind::BadAlignment { value: 48 });
    assert!(matches!(kind(w.add_kv("general.alignment", GgufValue::U64(64))), GgufErrorKind::WrongKeyType { .. }));
}

// ---- placement on two buffer types, budget ----

/// A device-like buffer type: not host memory, bytes only through set/get, counts allocations.
struct FakeDevice {
    allocs: Rc<Cell<usize>>,
}

struct FakeDeviceBuffer(RefCell<Vec<u8>>);

impl Buffer for FakeDeviceBuffer {
    fn buffer_type_name(&self) -> &str {
        "FakeDevice"
    }
    fn size(&self) -> usize {
        self.0.borrow().len()
    }
    fn set_bytes(&self, offset: usize, data: &[u8]) {
        self.0.borrow_mut()[offset..offset + data.len()].copy_from_slice(data);
    }
    fn get_bytes(&self, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.0.borrow()[offset..offset + out.len()]);
    }
    fn clear(&self, value: u8) {
        self.0.borrow_mut().fill(value);
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl BufferType for FakeDevice {
    fn name(&self) -> &str {
        "FakeDevice"
    }
    fn alignment(&self) -> usize {
        256
    }
    fn alloc_buffer(&self, size: usize) -> Result<Rc<dyn Buffer>, BackendError> {
        self.allocs.set(self.allocs.get() + 1);
        Ok(Rc::new(FakeDeviceBuffer(RefCell::new(vec![0xAA; size]))))
    }
}

#[test]
fn placement_closure_splits_tensors_between_buffer_types() {
    let file = model_bytes("tiny-gpt2-q4_0.gguf");
    let allocs = Rc::new(Cell::new(0));
    let device: Rc<dyn BufferType> = Rc::new(FakeDevice { allocs: allocs.clone() });
    let on_device =
        |info: &TensorInfo| info.name.starts_with("blk.") && info.name.ends_with(".weight") && info.n_dims == 2;
    let place = {
        let device = device.clone();
        move |info: &TensorInfo| if on_device(info) { device.clone() } else { cpu() }
    };
    let m = load_with(&file, 1000, Limits::default(), BufferLoader::with_placement(place)).unwrap();
    assert_eq!(allocs.get(), 1);
    assert_eq!(m.buffers.len(), 2);
    let mut n_device = 0;
    for (i, info) in m.header.tensors.iter().enumerate() {
        let d = m.tensors[i].data().unwrap();
        let want = if on_device(info) { "FakeDevice" } else { "CPU" };
        assert_eq!(d.buffer.buffer_type_name(), want, "{}", info.name);
        if on_device(info) {
            n_device += 1;
            assert_eq!(d.offset % 256, 0);
            assert!(m.tensors[i].host_ptr().is_none());
        }
        let at = (m.header.data_offset + info.offset) as usize;
        assert!(tensor_bytes(&m, i) == file[at..at + info.nbytes], "{}", info.name);
    }
    assert_eq!(n_device, 8); // attn_qkv, attn_output, ffn_up, ffn_down in 2 blocks
}

#[test]
fn budget_is_checked_before_allocating() {
    let file = model_bytes("tiny-gpt2-q4_0.gguf");
    let allocs = Rc::new(Cell::new(0));
    let device: Rc<dyn BufferType> = Rc::new(FakeDevice { allocs: allocs.clone() });
    let loader = BufferLoader::new(device).with_budget(4 << 20);
    let e = load_with(&file, 1 << 16, Limits::default(), loader).err().unwrap();
    // 29 tensors rounded up to 256 bytes each.
    assert_eq!(e.kind, GgufErrorKind::Budget { needed: 5322240, limit: 4 << 20 });
    assert_eq!(allocs.get(), 0);
    // The reader's own limit on weight bytes refuses it from the header alone.
    let limits = Limits { max_weight_bytes: 5_000_000, ..Limits::default() };
    let e = load_with(&file, 1 << 16, limits, BufferLoader::new(cpu())).err().unwrap();
    assert!(matches!(e.kind, GgufErrorKind::Budget { limit: 5_000_000, .. }), "{e}");
}

/// Our own golden fixtures (tests/fixtures/, written by make_fixtures.py): every chunk size
/// gives the same header, placement and weight bytes, each tensor equal to the file's bytes.
#[test]
fn golden_fixtures_every_chunk_size() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (name, n_tensors) in
        [("tiny-f32.gguf", 40), ("tiny-f16.gguf", 41), ("tiny-q8_0.gguf", 41), ("tiny-q4_0.gguf", 41)]
    {
        let file = std::fs::read(dir.join(name)).unwrap();
        let whole = load_from_bytes(&file, file.len(), cpu()).unwrap();
        // 3 layers × 12 + embeddings (2) + output norm (2) [+ output.weight, absent when tied]
        assert_eq!(whole.header.tensors.len(), n_tensors, "{name}");
        assert_eq!(whole.header.get_u32("gpt2.block_count"), Ok(3));
        for (i, t) in whole.header.tensors.iter().enumerate() {
            let at = (whole.header.data_offset + t.offset) as usize;
            assert!(tensor_bytes(&whole, i) == file[at..at + t.nbytes], "{name}: bytes of {}", t.name);
        }
        let whole_buffers = buffer_contents(&whole);
        for chunk in [4096, 7, 1] {
            let m = load_from_bytes(&file, chunk, cpu()).unwrap();
            assert!(m.header == whole.header, "{name}: header differs with {chunk}-byte chunks");
            assert!(buffer_contents(&m) == whole_buffers, "{name}: weight buffers differ with {chunk}-byte chunks");
        }
    }
}
