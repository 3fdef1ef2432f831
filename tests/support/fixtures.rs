//! The reference models' folder and Hugging Face's outputs for them, and raw GGUF bytes
//! for files the writer refuses to produce.
#![allow(dead_code)]

use std::path::PathBuf;

/// The llama.cpp-made reference models and their Hugging Face outputs, kept in the repository
/// (`tests/fixtures/llamacpp/`, copied from the shared models folder by
/// `tests/fixtures/trim_llamacpp_ref.py`); `GGWEB_MODELS_DIR` points elsewhere.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GGWEB_MODELS_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llamacpp")
}

/// Hugging Face's reference for the llama.cpp-made models (`tiny-gpt2.hf-ref.json`), each
/// prompt's `logits` put back from `tiny-gpt2.hf-ref.logits.bin` (one array of n_vocab per
/// entry of `logits_positions`).
pub fn hf_reference() -> serde_json::Value {
    let dir = models_dir();
    let read =
        |name: &str| std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()));
    let mut v: serde_json::Value = serde_json::from_slice(&read("tiny-gpt2.hf-ref.json")).expect("hf-ref.json parses");
    let bin = read(v["logits_file"].as_str().expect("logits_file"));
    let n_vocab = v["n_vocab"].as_u64().expect("n_vocab") as usize;
    assert_eq!(bin.len() % (4 * n_vocab), 0, "logits file is whole rows");
    for p in v["prompts"].as_array_mut().expect("prompts") {
        let rows: Vec<serde_json::Value> = p["logits_rows"]
            .as_array()
            .expect("logits_rows")
            .iter()
            .map(|i| {
                let at = i.as_u64().unwrap() as usize * 4 * n_vocab;
                bin[at..at + 4 * n_vocab]
                    .chunks_exact(4)
                    .map(|b| serde_json::Value::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64))
                    .collect()
            })
            .collect();
        p["logits"] = serde_json::Value::Array(rows);
    }
    v
}

pub fn model_bytes(name: &str) -> Vec<u8> {
    let p = models_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Little-endian GGUF bytes, field by field, for files the writer refuses to produce.
#[derive(Default, Clone)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn new() -> Raw {
        Raw(Vec::new())
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u8(self, v: u8) -> Raw {
        self.bytes(&[v])
    }
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn i32(self, v: i32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// magic, version, n_tensors, n_kv
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::new().bytes(b"GGUF").u32(version).u64(n_tensors).u64(n_kv)
    }
    /// A u32 key/value pair.
    pub fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info: name, dims, type id, offset.
    pub fn tensor(self, name: &str, ne: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(ne.len() as u32);
        for &n in ne {
            r = r.u64(n);
        }
        r.u32(ty).u64(offset)
    }
    /// Zero padding up to a multiple of `align`.
    pub fn pad(mut self, align: usize) -> Raw {
        let n = self.0.len().div_ceil(align) * align;
        self.0.resize(n, 0);
        self
    }
    pub fn zeros(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}
