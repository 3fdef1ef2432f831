//! GPT-2-124M-shaped GGUFs with seeded random weights, for speed measurements only (the
//! numbers they produce mean nothing). The tokenizer metadata is copied from a reference
//! model, so the files load like real ones.
//!
//! ```text
//! cargo run --release --example make_bench_models -- tests/fixtures/llamacpp/tiny-gpt2-f32.gguf .models/
//! # writes .models/bench-124m-{f32,f16,q8_0,q4_0}.gguf
//! ```
//!
//! Layout as llama.cpp writes GPT-2: 2-D weights in the file's type (F16, Q8_0, Q4_0),
//! biases, norms and `position_embd` in F32; the Q4_0 file keeps `output.weight` in Q8_0,
//! as llama-quantize's Q4_0 mix does for narrow models.
// Native only: `wasm-pack test` (cargo test for wasm32) builds the examples too.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use ggweb::gguf::{read_header, GgufValue, GgufWriter, Limits};
use ggweb::quants;
use ggweb::GgmlType;

const N_LAYER: usize = 12;
const N_EMBD: usize = 768;
const N_HEAD: usize = 12;
const N_CTX: usize = 1024;
const N_VOCAB: usize = 50257;

struct Rng(u64);

impl Rng {
    /// Roughly normal (sum of four uniforms), scaled to `std`.
    fn normal(&mut self, std: f32) -> f32 {
        let mut s = 0.0f32;
        for _ in 0..4 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            s += (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        }
        s * std * 1.732
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: make_bench_models REFERENCE.gguf OUT_DIR");
        std::process::exit(2);
    }
    let bytes = std::fs::read(&args[1]).expect("read the reference model");
    let header = read_header(&bytes, bytes.len() as u64, Limits::default()).expect("parse the reference header");
    let out = std::path::Path::new(&args[2]);
    std::fs::create_dir_all(out).expect("create the output folder");

    for (variant, wty, out_ty, file_type) in [
        ("f32", GgmlType::F32, GgmlType::F32, 0u32),
        ("f16", GgmlType::F16, GgmlType::F16, 1),
        ("q8_0", GgmlType::Q8_0, GgmlType::Q8_0, 7),
        ("q4_0", GgmlType::Q4_0, GgmlType::Q8_0, 2),
    ] {
        let mut w = GgufWriter::new();
        for (k, v) in &header.metadata {
            let v = match k.as_str() {
                "gpt2.block_count" => GgufValue::U32(N_LAYER as u32),
                "gpt2.context_length" => GgufValue::U32(N_CTX as u32),
                "gpt2.embedding_length" => GgufValue::U32(N_EMBD as u32),
                "gpt2.feed_forward_length" => GgufValue::U32(4 * N_EMBD as u32),
                "gpt2.attention.head_count" => GgufValue::U32(N_HEAD as u32),
                "general.file_type" => GgufValue::U32(file_type),
                "general.name" => GgufValue::String("bench-124m (random weights)".into()),
                _ => v.clone(),
            };
            w.add_kv(k, v).expect("copy a key");
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let std = 0.02f32;
        let mut add = |name: &str, ne: &[usize], ty: GgmlType, std: f32, mean: f32| {
            let n: usize = ne.iter().product();
            let vals: Vec<f32> = (0..n).map(|_| mean + rng.normal(std)).collect();
            let data = quants::quantize(ty, &vals).expect("quantize");
            let ne: Vec<i64> = ne.iter().map(|&x| x as i64).collect();
            w.add_tensor(name, ty, &ne, data).expect("add a tensor");
        };
        let e = N_EMBD;
        add("token_embd.weight", &[e, N_VOCAB], wty, std, 0.0);
        add("position_embd.weight", &[e, N_CTX], GgmlType::F32, std, 0.0);
        add("output_norm.weight", &[e], GgmlType::F32, 0.1, 1.0);
        add("output_norm.bias", &[e], GgmlType::F32, 0.02, 0.0);
        add("output.weight", &[e, N_VOCAB], out_ty, std, 0.0);
        for il in 0..N_LAYER {
            let n = |s: &str| format!("blk.{il}.{s}");
            add(&n("attn_norm.weight"), &[e], GgmlType::F32, 0.1, 1.0);
            add(&n("attn_norm.bias"), &[e], GgmlType::F32, 0.02, 0.0);
            add(&n("attn_qkv.weight"), &[e, 3 * e], wty, std, 0.0);
            add(&n("attn_qkv.bias"), &[3 * e], GgmlType::F32, 0.02, 0.0);
            add(&n("attn_output.weight"), &[e, e], wty, std, 0.0);
            add(&n("attn_output.bias"), &[e], GgmlType::F32, 0.02, 0.0);
            add(&n("ffn_norm.weight"), &[e], GgmlType::F32, 0.1, 1.0);
            add(&n("ffn_norm.bias"), &[e], GgmlType::F32, 0.02, 0.0);
            add(&n("ffn_up.weight"), &[e, 4 * e], wty, std, 0.0);
            add(&n("ffn_up.bias"), &[4 * e], GgmlType::F32, 0.02, 0.0);
            add(&n("ffn_down.weight"), &[4 * e, e], wty, std, 0.0);
            add(&n("ffn_down.bias"), &[e], GgmlType::F32, 0.02, 0.0);
        }
        let path = out.join(format!("bench-124m-{variant}.gguf"));
        let f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create the file"));
        w.write_to(f).expect("write the file");
        println!("{}: {} bytes", path.display(), w.file_size());
    }
}
