//! Sparse autoencoders in SAELens's saved format (SAELens 6, the standard ReLU
//! architecture): `cfg.json` and `sae_weights.safetensors` with `W_enc` `[d_in, d_sae]`,
//! `b_enc` `[d_sae]`, `W_dec` `[d_sae, d_in]`, `b_dec` `[d_in]` (f32). Everything in the files
//! is checked before use: a file that lies, or one of an architecture, option or dtype this
//! does not implement, is a typed `format` error naming what and where.
//!
//! `encode` follows SAELens's `StandardSAE`: `f = relu((x − b_dec·apply_b_dec_to_input) W_enc
//! + b_enc)`, the reconstruction `f W_dec + b_dec`.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::ModelError;

/// A loaded SAE.
#[derive(Clone, Debug)]
pub struct Sae {
    pub d_in: usize,
    pub d_sae: usize,
    /// The hook point it reads (`cfg.metadata.hook_name`).
    pub hook_name: String,
    pub apply_b_dec_to_input: bool,
    w_enc: Vec<f32>,
    b_enc: Vec<f32>,
    w_dec: Vec<f32>,
    b_dec: Vec<f32>,
}

// ts: export SaeEncoded
/// The features of one encode: per position, the `top_k` largest (index, value), how many are
/// active (l0) and the reconstruction's mean squared error.
/// Serializes as the API's `sae.encode` result.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "std", derive(serde::Serialize))]
pub struct Encoded {
    /// The encoded tokens ([`Session::sae_encode`](super::session::Session) fills them in).
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::u32s"))]
    pub tokens: Vec<u32>,
    /// `{ index, value }` per feature, per position.
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::index_values"))]
    pub top: Vec<Vec<(u32, f32)>>,
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub l0: Vec<f32>,
    #[cfg_attr(feature = "std", serde(serialize_with = "crate::typed::f32s"))]
    pub mse: Vec<f32>,
}

fn format_err(what: String) -> ModelError {
    ModelError::Format(format!("SAE: {what}"))
}

/// `cfg.json`'s fields an SAE needs, checked.
#[derive(Clone, Debug)]
struct SaeCfg {
    d_in: usize,
    d_sae: usize,
    hook_name: String,
    apply_b_dec_to_input: bool,
}

impl SaeCfg {
    fn parse(cfg: &str) -> Result<SaeCfg, ModelError> {
        let cfg: serde_json::Value =
            serde_json::from_str(cfg).map_err(|e| format_err(format!("cfg.json is not JSON: {e}")))?;
        let field = |k: &str| cfg.get(k).ok_or_else(|| format_err(format!("cfg.json has no '{k}'")));
        let uint = |k: &str| -> Result<usize, ModelError> {
            match field(k)?.as_u64() {
                Some(n) if (1..=1 << 24).contains(&n) => Ok(n as usize),
                _ => {
                    Err(format_err(format!("cfg.json '{k}' must be a whole number from 1 to 2^24, got {}", field(k)?)))
                }
            }
        };
        let (d_in, d_sae) = (uint("d_in")?, uint("d_sae")?);
        let arch = cfg.get("architecture").and_then(|v| v.as_str()).unwrap_or("standard");
        if arch != "standard" {
            return Err(format_err(format!("architecture '{arch}' (only SAELens's 'standard' ReLU SAE)")));
        }
        match cfg.get("normalize_activations").and_then(|v| v.as_str()).unwrap_or("none") {
            "none" => {}
            other => return Err(format_err(format!("normalize_activations '{other}' (only 'none')"))),
        }
        let apply_b_dec_to_input = match cfg.get("apply_b_dec_to_input") {
            None => true,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format_err(format!("cfg.json 'apply_b_dec_to_input' must be true or false, got {v}")))?,
        };
        let hook_name = cfg
            .get("metadata")
            .and_then(|m| m.get("hook_name"))
            .or_else(|| cfg.get("hook_name"))
            .and_then(|v| v.as_str())
            .ok_or_else(|| format_err("cfg.json has no metadata.hook_name".into()))?
            .to_string();
        Ok(SaeCfg { d_in, d_sae, hook_name, apply_b_dec_to_input })
    }

    /// The four tensors in the order they are checked: name and shape.
    fn tensors(&self) -> [(&'static str, [usize; 2]); 4] {
        let (i, s) = (self.d_in, self.d_sae);
        [("W_enc", [i, s]), ("b_enc", [s, 0]), ("W_dec", [s, i]), ("b_dec", [i, 0])]
    }
}

impl Sae {
    /// From `cfg.json`'s text and the bytes of `sae_weights.safetensors` ([`SaeStream`] in
    /// one piece).
    pub fn from_parts(cfg: &str, weights: &[u8]) -> Result<Sae, ModelError> {
        let mut s = SaeStream::new(cfg)?;
        s.push(weights)?;
        s.finish()
    }

    /// Whether this SAE can read model `hp`: its hook is one of the model's hook points and
    /// holds `d_in` values per position (an SAE made for another GPT-2 size, or for a hook
    /// whose width depends on the text, is refused when it is loaded, not at encode).
    pub fn check_fits(&self, hp: &super::gpt2::Hparams) -> Result<(), ModelError> {
        let name = self.hook_name.as_str();
        super::hooks::hook_point(name, hp)
            .map_err(|e| ModelError::Invalid(format!("the SAE's hook '{name}' is not in this model: {e}")))?;
        let width = super::hooks::per_position(name, hp).ok_or_else(|| {
            ModelError::Invalid(format!(
                "the SAE reads '{name}', whose values per position depend on the text's length"
            ))
        })?;
        if width != self.d_in {
            return Err(ModelError::Invalid(format!(
                "the SAE's d_in is {} but '{name}' has {width} values per position in this model",
                self.d_in
            )));
        }
        Ok(())
    }

    /// Row `i` of `W_dec` (`d_in` values): feature `i`'s direction, e.g. to steer with.
    pub fn decoder_row(&self, i: usize) -> Result<Vec<f32>, ModelError> {
        if i >= self.d_sae {
            return Err(ModelError::Invalid(format!("feature {i} is out of range (0..{})", self.d_sae)));
        }
        Ok(self.w_dec[i * self.d_in..(i + 1) * self.d_in].to_vec())
    }

    /// Encodes `x` (`[rows][d_in]`).
    pub fn encode(&self, x: &[f32], top_k: usize) -> Result<Encoded, ModelError> {
        let (di, ds) = (self.d_in, self.d_sae);
        if !x.len().is_multiple_of(di) {
            return Err(ModelError::Invalid(format!("{} values are not rows of d_in {di}", x.len())));
        }
        let mut out = Encoded { tokens: Vec::new(), top: Vec::new(), l0: Vec::new(), mse: Vec::new() };
        let mut f = alloc::vec![0f32; ds];
        for row in x.chunks_exact(di) {
            let input: Vec<f32> =
                (0..di).map(|i| if self.apply_b_dec_to_input { row[i] - self.b_dec[i] } else { row[i] }).collect();
            f.copy_from_slice(&self.b_enc);
            for (i, &v) in input.iter().enumerate() {
                for (fj, &w) in f.iter_mut().zip(&self.w_enc[i * ds..(i + 1) * ds]) {
                    *fj += v * w;
                }
            }
            f.iter_mut().for_each(|v| *v = v.max(0.0));
            let mut recon = self.b_dec.clone();
            for (j, &a) in f.iter().enumerate().filter(|(_, &a)| a > 0.0) {
                for (r, &w) in recon.iter_mut().zip(&self.w_dec[j * di..(j + 1) * di]) {
                    *r += a * w;
                }
            }
            let mse = recon.iter().zip(row).map(|(r, x)| ((r - x) as f64).powi(2)).sum::<f64>() / di as f64;
            let mut idx: Vec<u32> = (0..ds as u32).collect();
            idx.sort_by(|&a, &b| f[b as usize].total_cmp(&f[a as usize]).then(a.cmp(&b)));
            out.top.push(idx.iter().take(top_k.min(ds)).map(|&i| (i, f[i as usize])).collect());
            out.l0.push(f.iter().filter(|&&v| v > 0.0).count() as f32);
            out.mse.push(mse as f32);
        }
        Ok(out)
    }
}

/// The most header bytes a safetensors file may claim.
const MAX_HEADER: u64 = 100 << 20;

/// One tensor's bytes in the data region.
#[derive(Clone, Copy, Debug)]
struct Span {
    begin: u64,
    end: u64,
}

/// An SAE read from `sae_weights.safetensors` as it streams in (any chunk sizes): an 8-byte
/// little-endian header length, a JSON header `{ name: { dtype, shape, data_offsets: [begin,
/// end] } }` checked against `cfg.json` as soon as it is complete, then the data, each
/// tensor's bytes kept as they pass. Memory grows with the bytes received, never with what
/// a header claims; the whole file is never held.
pub struct SaeStream {
    cfg: SaeCfg,
    /// The length and header bytes until the header is complete.
    head: Vec<u8>,
    /// W_enc, b_enc, W_dec, b_dec, once the header is read.
    spans: Option<[Span; 4]>,
    /// The data region's length (where the last tensor ends), once the header is read.
    data_end: u64,
    /// Data bytes received so far.
    data_len: u64,
    parts: [Vec<u8>; 4],
    total: u64,
}

fn bad_file(what: String) -> ModelError {
    format_err(format!("sae_weights.safetensors: {what}"))
}

impl SaeStream {
    /// Checks `cfg.json`'s text.
    pub fn new(cfg: &str) -> Result<SaeStream, ModelError> {
        Ok(SaeStream {
            cfg: SaeCfg::parse(cfg)?,
            head: Vec::new(),
            spans: None,
            data_end: 0,
            data_len: 0,
            parts: Default::default(),
            total: 0,
        })
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.total
    }

    /// The claimed header length, once 8 bytes are in.
    fn header_len(&self) -> Option<u64> {
        (self.head.len() >= 8).then(|| u64::from_le_bytes(self.head[..8].try_into().expect("8 bytes")))
    }

    /// The next bytes of the file.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<(), ModelError> {
        self.total += chunk.len() as u64;
        if self.spans.is_none() {
            if self.head.len() < 8 {
                let take = (8 - self.head.len()).min(chunk.len());
                self.head.extend_from_slice(&chunk[..take]);
                chunk = &chunk[take..];
            }
            let Some(n) = self.header_len() else { return Ok(()) };
            if n > MAX_HEADER {
                return Err(bad_file(format!("the header claims {n} bytes (at most {MAX_HEADER})")));
            }
            let want = 8 + n as usize;
            let take = (want - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.head.len() < want {
                return Ok(());
            }
            let (spans, end) = self.read_header()?;
            (self.spans, self.data_end) = (Some(spans), end);
            self.head = Vec::new();
        }
        let spans = self.spans.expect("header read");
        let (from, to) = (self.data_len, self.data_len + chunk.len() as u64);
        if to > self.data_end {
            return Err(bad_file(format!(
                "bytes past the end of the data (its tensors end at byte {} of it)",
                self.data_end
            )));
        }
        for (span, part) in spans.iter().zip(&mut self.parts) {
            // Bytes arrive in order, so a tensor's next byte is at begin + part.len().
            let (b, e) = (span.begin.max(from), span.end.min(to));
            if b < e {
                debug_assert_eq!(b, span.begin + part.len() as u64);
                part.extend_from_slice(&chunk[(b - from) as usize..(e - from) as usize]);
            }
        }
        self.data_len = to;
        Ok(())
    }

    /// The header's four tensors, each checked: F32, cfg.json's shape, a span of its size;
    /// and every tensor's span together, as the format requires: they tile the data region
    /// from byte 0, with no byte shared by two tensors and none left over.
    fn read_header(&self) -> Result<([Span; 4], u64), ModelError> {
        let header: serde_json::Value =
            serde_json::from_slice(&self.head[8..]).map_err(|e| bad_file(format!("the header is not JSON: {e}")))?;
        let header = header.as_object().ok_or_else(|| bad_file("the header is not a JSON object".into()))?;
        // A list of whole numbers, or None when it is not one (a fraction, a string, a negative).
        let uints =
            |v: Option<&serde_json::Value>| -> Option<Vec<u64>> { v?.as_array()?.iter().map(|x| x.as_u64()).collect() };
        let mut spans = [Span { begin: 0, end: 0 }; 4];
        for (k, (name, shape)) in self.cfg.tensors().into_iter().enumerate() {
            let shape: Vec<usize> = shape.into_iter().filter(|&d| d > 0).collect();
            let bad = |what: String| bad_file(format!("tensor '{name}': {what}"));
            let t = header
                .get(name)
                .ok_or_else(|| format_err(format!("sae_weights.safetensors has no tensor '{name}'")))?;
            match t.get("dtype").and_then(|v| v.as_str()) {
                Some("F32") => {}
                Some(other) => return Err(format_err(format!("tensor '{name}' of dtype {other} (only F32)"))),
                None => return Err(bad("no dtype".into())),
            }
            let want: Vec<u64> = shape.iter().map(|&x| x as u64).collect();
            if uints(t.get("shape")).as_ref() != Some(&want) {
                return Err(bad(format!(
                    "shape {} where cfg.json implies {want:?}",
                    t.get("shape").map_or("none".into(), |v| v.to_string())
                )));
            }
            let Some([begin, end]) = uints(t.get("data_offsets")).and_then(|o| <[u64; 2]>::try_from(o).ok()) else {
                return Err(bad("data_offsets is not [begin, end]".into()));
            };
            let need = want.iter().product::<u64>() * 4;
            if begin > end || end - begin != need {
                return Err(bad(format!("data_offsets [{begin}, {end}] for {need} bytes")));
            }
            spans[k] = Span { begin, end };
        }
        // Every tensor's span, the four above and any other the file holds.
        let mut all: Vec<(u64, u64, &str)> = Vec::with_capacity(header.len());
        for (name, t) in header.iter().filter(|(k, _)| k.as_str() != "__metadata__") {
            let offs = uints(t.get("data_offsets")).and_then(|o| <[u64; 2]>::try_from(o).ok());
            match offs {
                Some([b, e]) if b <= e => all.push((b, e, name)),
                _ => {
                    return Err(bad_file(format!("tensor '{name}': data_offsets is not [begin, end] with begin ≤ end")))
                }
            }
        }
        all.sort_unstable();
        let mut at = 0u64;
        for &(b, e, name) in &all {
            if b != at {
                let what = if b > at { "a hole" } else { "an overlap" };
                return Err(bad_file(format!(
                    "tensor '{name}': data_offsets [{b}, {e}] leave {what} at byte {} of the data (the tensors must tile it)",
                    b.min(at)
                )));
            }
            at = e;
        }
        Ok((spans, at))
    }

    /// The SAE, once every byte of its tensors came; typed `format` errors for a file that
    /// ended early.
    pub fn finish(self) -> Result<Sae, ModelError> {
        let Some(spans) = self.spans else {
            return Err(match self.header_len() {
                None => bad_file(format!("{} bytes: too short for the header length", self.total)),
                Some(n) => {
                    bad_file(format!("the header claims {n} bytes, the file has {} after the length", self.total - 8))
                }
            });
        };
        let c = &self.cfg;
        let mut out: [Vec<f32>; 4] = Default::default();
        for (k, ((name, _), span)) in c.tensors().into_iter().zip(spans).enumerate() {
            if span.end > self.data_len {
                return Err(bad_file(format!(
                    "tensor '{name}': data_offsets [{}, {}] past the end of the data ({} bytes): the file is truncated",
                    span.begin, span.end, self.data_len
                )));
            }
            out[k] =
                self.parts[k].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        }
        let [w_enc, b_enc, w_dec, b_dec] = out;
        Ok(Sae {
            d_in: c.d_in,
            d_sae: c.d_sae,
            hook_name: c.hook_name.clone(),
            apply_b_dec_to_input: c.apply_b_dec_to_input,
            w_enc,
            b_enc,
            w_dec,
            b_dec,
        })
    }
}
