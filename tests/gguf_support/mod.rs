// Shared by the gguf test binaries (included with `mod`): fixture paths and raw GGUF building.
#![allow(dead_code)]

use std::path::PathBuf;

/// The reference models: `../shared/models` next to the repo (CI), or two levels up for
/// a worktree under a sibling folder; `GGWEB_MODELS_DIR` overrides. Missing is a failure.
pub fn models_dir() -> PathBuf {
    if let Ok(d) = std::env::var("GGWEB_MODELS_DIR") {
        return PathBuf::from(d);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for up in ["../shared/models", "../../shared/models"] {
        let d = root.join(up);
        if d.join("tiny-gpt2-f32.gguf").exists() {
            return d;
        }
    }
    panic!("reference models not found under {}/../shared/models (set GGWEB_MODELS_DIR)", root.display());
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
