//! Writes the committed seed corpus: `cargo run --example make_seeds` in fuzz/ (stable is
//! fine). Seeds are small on purpose (a few KB): libFuzzer's -max_len defaults to the
//! largest seed, and mutations of small files reach the parser's corners faster.
//!
//! - gguf_chunks: tiny GPT-2 models (F32, F16 weights) that ModelLoader accepts, and
//!   plain GGUFs with every metadata type, nested arrays, a custom alignment, version 2,
//!   zero-sized tensors and each block type the reader knows;
//! - tokenizer_roundtrip: text in several scripts, emoji, whitespace runs, contractions,
//!   `<|endoftext|>`;
//! - gallocr_plan: byte strings that build graphs of each op family;
//! - hyperparameter mutations (for gguf_chunks, model_split, model_sizes32): tiny models
//!   whose `gpt2.*` values were changed (u32::MAX block count, contexts and widths that
//!   imply huge or, in 32 bits, wrapping sizes, a head count of 0) or that carry a block
//!   index past every count (`blk.18446744073709551615.…`): each must be refused;
//! - model_split and model_sizes32: an 8-byte option prefix (n_ctx, n_batch, gpu_layers,
//!   op mask: fuzz/src/sizes.rs) before tiny models, with options that split each way and
//!   contexts and batches that stress the size arithmetic.
//!
//! `seed-regress-*` files are not written here: they are minimized crash inputs of long runs
//! (see SECURITY.md, Fuzzing), kept by hand as regression seeds.

use std::fs;
use std::path::Path;

use ggweb::gguf::{GgufArray, GgufValue, GgufWriter};
use ggweb::types::GgmlType;
use ggweb_fuzz::model_support::{tiny_gpt2, values, TinySpec};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("seed-{name}"));
    fs::write(&path, bytes).unwrap();
    println!("{:>6} bytes  {}", bytes.len(), path.display());
}

fn plain_ggufs() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

    let mut w = GgufWriter::new();
    let kvs = [
        ("u8", GgufValue::U8(7)),
        ("i8", GgufValue::I8(-7)),
        ("u16", GgufValue::U16(65535)),
        ("i16", GgufValue::I16(-300)),
        ("u32", GgufValue::U32(1 << 31)),
        ("i32", GgufValue::I32(-1)),
        ("f32", GgufValue::F32(f32::NAN)),
        ("bool", GgufValue::Bool(true)),
        ("str", GgufValue::String("héllo".into())),
        ("u64", GgufValue::U64(u64::MAX)),
        ("i64", GgufValue::I64(i64::MIN)),
        ("f64", GgufValue::F64(-0.0)),
        ("arr.str", GgufValue::Array(GgufArray::String(vec!["a".into(), "".into(), "Ġthe".into()]))),
        ("arr.nested", GgufValue::Array(GgufArray::Array(vec![GgufArray::I32(vec![1, 2]), GgufArray::Bool(vec![])]))),
        ("arr.f64", GgufValue::Array(GgufArray::F64(vec![1.5, -2.5]))),
    ];
    for (k, v) in kvs {
        w.add_kv(&format!("test.{k}"), v).unwrap();
    }
    w.add_tensor("f32", GgmlType::F32, &[3, 2], values(GgmlType::F32, 6, 1)).unwrap();
    w.add_tensor("empty", GgmlType::F32, &[0, 4], vec![]).unwrap();
    w.add_tensor("f16", GgmlType::F16, &[2, 1, 1, 2], values(GgmlType::F16, 4, 2)).unwrap();
    out.push(("metadata", w.to_bytes()));

    let mut w = GgufWriter::new();
    w.add_kv("general.alignment", GgufValue::U32(64)).unwrap();
    w.add_tensor("q8", GgmlType::Q8_0, &[32, 2], values(GgmlType::Q8_0, 64, 3)).unwrap();
    w.add_tensor("q4", GgmlType::Q4_0, &[32], values(GgmlType::Q4_0, 32, 4)).unwrap();
    w.add_tensor("i32", GgmlType::I32, &[5], (0..20u8).collect()).unwrap();
    out.push(("blocks-align64", w.to_bytes()));

    // Version 2 (same layout as 3), no tensors.
    let mut w = GgufWriter::new();
    w.add_kv("general.name", GgufValue::String("v2".into())).unwrap();
    let mut v2 = w.to_bytes();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    out.push(("v2-no-tensors", v2));
    out
}

/// `file` with the u32 value of metadata key `key` replaced.
fn set_u32(file: &[u8], key: &str, v: u32) -> Vec<u8> {
    let mut f = file.to_vec();
    let k = key.as_bytes();
    let at = f.windows(k.len()).position(|w| w == k).unwrap_or_else(|| panic!("no key {key}")) + k.len() + 4;
    f[at..at + 4].copy_from_slice(&v.to_le_bytes());
    f
}

/// `file` with every occurrence of `from` (a tensor name) respelled `to` (same length).
fn rename(file: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut f = file.to_vec();
    let at = f.windows(from.len()).position(|w| w == from.as_bytes()).unwrap_or_else(|| panic!("no {from}"));
    f[at..at + from.len()].copy_from_slice(to.as_bytes());
    f
}

/// `file` with the type of 1-D tensor `name` set to `type_id` (the info is the name, then
/// n_dims: u32, ne[0]: u64, type: u32).
fn retype_1d(file: &[u8], name: &str, type_id: u32) -> Vec<u8> {
    let mut f = file.to_vec();
    let n = name.as_bytes();
    let at = f.windows(n.len()).rposition(|w| w == n).unwrap_or_else(|| panic!("no {name}")) + n.len();
    assert_eq!(f[at..at + 4], 1u32.to_le_bytes(), "{name} is not 1-D");
    f[at + 12..at + 16].copy_from_slice(&type_id.to_le_bytes());
    f
}

/// Tiny models whose hyperparameters lie (or whose names do), each refused by the loader.
fn hparam_mutations(base: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let keys = [
        ("block_count", "gpt2.block_count", vec![0, 3, u32::MAX]),
        ("context_length", "gpt2.context_length", vec![0, 5, 1 << 16, 1 << 30, u32::MAX]),
        ("embedding_length", "gpt2.embedding_length", vec![0, 3, 4, 1 << 16, u32::MAX]),
        ("feed_forward_length", "gpt2.feed_forward_length", vec![0, 5, u32::MAX]),
        ("head_count", "gpt2.attention.head_count", vec![0, 3, u32::MAX]),
    ];
    for (name, key, values) in keys {
        for v in values {
            out.push((format!("hparam-{name}-{v}"), set_u32(base, key, v)));
        }
    }
    out
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let g = root.join("gguf_chunks");
    let tiny = TinySpec { n_embd: 2, n_head: 1, n_ff: 4, n_ctx: 4, ..TinySpec::default() };
    write(&g, "tiny-gpt2-f16", &tiny_gpt2(TinySpec { ty: GgmlType::F16, ..tiny }));
    write(&g, "tiny-gpt2-f32-2layers", &tiny_gpt2(TinySpec { n_layer: 2, ..tiny }));
    for (name, bytes) in plain_ggufs() {
        write(&g, name, &bytes);
    }

    // sae_safetensors: [cfg length u16][cfg.json][safetensors]: tests/fixtures/tiny-sae (d_in 32,
    // d_sae 64), and a smaller one written here (d_in 2, d_sae 3) with an extra tensor and
    // metadata, whose tensors tile its data region in another order.
    let s = root.join("sae_safetensors");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-sae");
    let sae_seed = |cfg: &str, file: &[u8]| [&(cfg.len() as u16).to_le_bytes()[..], cfg.as_bytes(), file].concat();
    let cfg = fs::read_to_string(fixture.join("cfg.json")).unwrap();
    write(&s, "tiny-sae", &sae_seed(&cfg, &fs::read(fixture.join("sae_weights.safetensors")).unwrap()));
    let small_cfg =
        r#"{"d_in":2,"d_sae":3,"apply_b_dec_to_input":false,"metadata":{"hook_name":"blocks.0.hook_resid_pre"}}"#;
    let header = r#"{"__metadata__":{"format":"pt"},"b_dec":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"extra":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"W_enc":{"dtype":"F32","shape":[2,3],"data_offsets":[12,36]},"b_enc":{"dtype":"F32","shape":[3],"data_offsets":[36,48]},"W_dec":{"dtype":"F32","shape":[3,2],"data_offsets":[48,72]}}"#;
    let data: Vec<u8> = (0..18).flat_map(|i| (i as f32 * 0.25 - 2.0).to_le_bytes()).collect();
    let small = [&(header.len() as u64).to_le_bytes()[..], header.as_bytes(), &data].concat();
    write(&s, "small-sae-extra-tensor", &sae_seed(small_cfg, &small));

    let base = tiny_gpt2(TinySpec { n_layer: 2, ..tiny });
    for (name, bytes) in hparam_mutations(&base) {
        write(&g, &name, &bytes);
    }
    // An i32 bias: as many bytes as the f32 one, so only the loader's runnable check
    // (gpt2::check_runnable) refuses it; before it, the first token failed as a backend error.
    let i32_bias = retype_1d(&base, "blk.0.attn_norm.bias", 26);
    write(&g, "type-i32-bias", &i32_bias);
    // Block indices no count reaches (respelled in place, so lengths match): usize::MAX
    // (which `il + gpu_layers` once overflowed), and 99999999999.
    let one = tiny_gpt2(tiny);
    write(&g, "hparam-block-index-max", &rename(&one, "blk.0.attn_output.weight", "blk.18446744073709551615"));
    write(&g, "hparam-block-index-huge", &rename(&one, "blk.0.ffn_down.bias", "blk.99999999999.bia"));

    // model_split / model_sizes32: option prefix (n_ctx u16, n_batch u16, gpu_layers, op
    // mask, 2 spare) + a model.
    let pre = |n_ctx: u16, n_batch: u16, gpu: u8, mask: u8| {
        let mut p = Vec::new();
        p.extend(n_ctx.to_le_bytes());
        p.extend(n_batch.to_le_bytes());
        p.extend([gpu, mask, 0, 0]);
        p
    };
    let wide = TinySpec { n_embd: 4, n_head: 2, n_ff: 8, n_ctx: 16, n_layer: 2, ..TinySpec::default() };
    let models = [("f32-2layers", tiny_gpt2(wide)), ("f16", tiny_gpt2(TinySpec { ty: GgmlType::F16, ..wide }))];
    let options = [
        ("all-gpu", pre(0, 4, 255, 0)),
        ("one-layer", pre(8, 3, 1, 0)),
        ("head-only", pre(0, 16, 0, 0)),
        ("no-mulmat", pre(16, 2, 2, 1)),
        ("no-softmax-norm", pre(4, 4, 3, 6)),
        ("beyond", pre(0, 1, 199, 24)),
    ];
    for target in ["model_split", "model_sizes32"] {
        let d = root.join(target);
        for (o, p) in &options {
            for (m, bytes) in &models {
                write(&d, &format!("{m}-{o}"), &[&p[..], bytes].concat());
            }
        }
        for (name, bytes) in hparam_mutations(&models[0].1) {
            write(&d, &name, &[&pre(0, 0xffff, 255, 0)[..], &bytes].concat());
        }
        write(&d, "type-i32-bias", &[&pre(0, 4, 1, 0)[..], &i32_bias].concat());
    }

    let t = root.join("tokenizer_roundtrip");
    let texts = [
        ("english", "Hello, my name is GPT-2. I'm 124M parameters; you've seen 'em.\n"),
        ("spaces", "  leading\t\ttabs   and\n\n\nnewlines   \r\n trailing  "),
        ("scripts", "Größe – Ελληνικά, русский, 中文字符, 日本語のテキスト, العربية, हिन्दी"),
        ("emoji", "🦀🔥 👩‍👩‍👧 ✔︎ e\u{301} \u{feff}\u{200b}"),
        ("special", "a<|endoftext|>b <|endoftext|><|endoftext|> <|endoftext"),
        ("numbers", "3.14159 1,000,000 0x7fff_ffff 2024-05-19T12:00:00Z"),
    ];
    for (name, text) in texts {
        write(&t, name, text.as_bytes());
    }

    // gallocr_plan: 8 config bytes (three buffer kinds' alignment and size limit, how many
    // buffer ids and which kinds, in-place, id pattern), then the graph (graph_gen::build):
    // a shape, then per step "which tensor" (2 bytes), the op and its arguments.
    let a = root.join("gallocr_plan");
    let graphs: [(&str, &[u8]); 5] = [
        (
            "one-buffer-chain",
            &[
                8, 8, 8, 0, 0, 1, 0, 0, 5, 5, 0, 0, 1, 0, 1, 0, 1, 0, 2, 1, 0, 3, 1, 0, 4, 1, 0, 5, 1, 1, 0, 14, 1, 0,
                15, 1, 0, 6, 1, 1,
            ],
        ),
        (
            "two-buffers-mulmat",
            &[
                8, 9, 6, 1, 18, 1, 3, 0, 3, 3, 0, 0, 1, 0, 8, 0, 1, 0, 8, 1, 3, 1, 0, 6, 2, 0, 1, 1, 0, 7, 1, 0, 1, 0,
                14, 1, 0, 15, 0, 0, 2, 1, 0, 8, 0,
            ],
        ),
        (
            "views-permute-cpy",
            &[
                6, 8, 9, 2, 0x24, 1, 5, 0, 4, 3, 1, 1, 1, 0, 9, 1, 1, 1, 0, 10, 1, 0, 15, 1, 0, 11, 0, 1, 0, 12, 1, 3,
                1, 1, 0, 12, 0, 1, 0, 1, 0, 13, 1, 1, 0, 13, 0, 0, 1, 0, 2,
            ],
        ),
        (
            "inplace-off-outputs",
            &[
                9, 9, 9, 0, 0, 0, 0, 0, 6, 6, 0, 0, 1, 0, 1, 1, 1, 0, 14, 1, 0, 2, 1, 0, 0, 3, 3, 1, 1, 1, 0, 6, 0, 0,
                1, 0, 0, 3, 1, 0, 14, 1, 0, 4,
            ],
        ),
        ("small-max-size", &[2, 2, 2, 0, 0, 1, 0, 0, 6, 6, 2, 1, 1, 0, 8, 2, 1, 1, 0, 15, 1, 0, 2]),
    ];
    for (name, bytes) in graphs {
        write(&a, name, bytes);
    }
}
