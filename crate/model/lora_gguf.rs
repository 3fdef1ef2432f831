//! A LoRA adapter as a GGUF file in llama.cpp's layout (what its `convert_lora_to_gguf.py`
//! writes and `llama_adapter_lora_init` reads): metadata `general.architecture` (the base's,
//! `gpt2`), `general.type = 'adapter'`, `adapter.type = 'lora'`, `adapter.lora.alpha` (f32);
//! per adapted weight `{weight}.lora_a` `[n_in, rank]` and `{weight}.lora_b` `[rank, n_out]`
//! (ggml order). `model.saveLora` writes one, `Model.load(base, { lora })` reads one.

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use super::checkpoint::{plan_state, read_meta, split_state_name, OptState};
use super::gpt2::{block_index, Hparams};
use super::lora::{Lora, LoraConfig, Target};
use super::save_stream::{SaveStream, Source};
use super::ModelError;
use crate::backend::Backend;
use crate::gguf::{read_header, GgufValue, GgufWriter, Limits};
use crate::types::GgmlType;

fn format_err(m: String) -> ModelError {
    ModelError::Format(format!("LoRA adapter: {m}"))
}

impl Lora {
    /// The adapter as a llama.cpp LoRA GGUF with F32 or F16 tensors; with `state`, a ggweb
    /// checkpoint: the adapter's optimizer state after its tensors (checkpoint.rs), which
    /// llama.cpp refuses. Whole in memory (the adapter is small); [`Lora::gguf_stream`]
    /// makes it a chunk at a time.
    pub fn to_gguf(&self, ty: GgmlType, state: Option<&OptState>) -> Result<Vec<u8>, ModelError> {
        self.gguf_stream(ty, state, Vec::new())?.into_vec(None)
    }

    /// [`Lora::to_gguf`]'s file as a [`SaveStream`], read through `backends` (the model's).
    pub fn gguf_stream(
        &self,
        ty: GgmlType,
        state: Option<&OptState>,
        backends: Vec<Rc<dyn Backend>>,
    ) -> Result<SaveStream, ModelError> {
        if !matches!(ty, GgmlType::F32 | GgmlType::F16) {
            return Err(ModelError::Invalid(format!("saveLora: type must be 'f32' or 'f16', got {ty}")));
        }
        let gguf = |e: crate::gguf::GgufError| ModelError::Format(format!("saveLora: {e}"));
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", GgufValue::String("gpt2".into())).map_err(gguf)?;
        w.add_kv("general.type", GgufValue::String("adapter".into())).map_err(gguf)?;
        w.add_kv("general.name", GgufValue::String("ggweb LoRA adapter".into())).map_err(gguf)?;
        w.add_kv("adapter.type", GgufValue::String("lora".into())).map_err(gguf)?;
        w.add_kv("adapter.lora.alpha", GgufValue::F32(self.cfg.alpha)).map_err(gguf)?;
        let mut sources = Vec::new();
        for t in self.tensors() {
            w.declare_tensor(&t.name(), ty, &t.ne[..2]).map_err(gguf)?;
            sources.push(match ty {
                GgmlType::F32 => Source::Bytes { t: t.clone(), offset: 0, len: t.nbytes() },
                _ => Source::Convert { what: format!("adapter tensor '{}'", t.name()), t, to: ty, lora: None },
            });
        }
        if let Some(st) = state {
            for (k, v) in st.kvs() {
                w.add_kv(k, v).map_err(gguf)?;
            }
            for (name, n, pieces) in st.file_tensors() {
                let weight = split_state_name(&name).map_or("", |(w, _)| w);
                let ne = self.tensors().into_iter().find(|x| x.name() == weight).map_or([n, 1], |x| [x.ne[0], x.ne[1]]);
                w.declare_tensor(&name, GgmlType::F32, &ne).map_err(gguf)?;
                sources.push(Source::Pieces(pieces));
            }
        }
        SaveStream::new(&w, sources, backends, "saveLora", "")
    }

    /// Reads a llama.cpp LoRA GGUF for a GPT-2 of `hp` into an f32 adapter in `backend`'s
    /// buffer type. Its pairs must adapt block matrices (attn_qkv, attn_output, ffn_up,
    /// ffn_down) with one rank; LayerNorm tensors are skipped as llama.cpp skips them; a
    /// target adapted in some blocks only is zero in the others (B = 0: no change there). An
    /// alpha of 0 (llama.cpp: no scaling) reads as alpha = rank. `format` naming what is wrong.
    /// A ggweb checkpoint's optimizer state (`saveLora({ optimizer: true })`) comes back
    /// beside it, to be resumed.
    pub fn from_gguf(
        bytes: &[u8],
        hp: &Hparams,
        backend: &dyn Backend,
    ) -> Result<(Lora, Option<OptState>), ModelError> {
        let h = read_header(bytes, bytes.len() as u64, Limits::default())?;
        let meta = read_meta(&h)?;
        let s = |k: &str| h.get(k).and_then(GgufValue::as_str);
        if s("general.type") != Some("adapter") || s("adapter.type") != Some("lora") {
            return Err(format_err(format!(
                "general.type must be 'adapter' and adapter.type 'lora', got {:?} and {:?}",
                s("general.type"),
                s("adapter.type")
            )));
        }
        if s("general.architecture") != Some("gpt2") {
            return Err(format_err(format!("made for {:?}, not gpt2", s("general.architecture"))));
        }
        let alpha = match h.get("adapter.lora.alpha") {
            None => 0.0,
            Some(GgufValue::F32(a)) => *a,
            Some(v) => return Err(format_err(format!("adapter.lora.alpha must be an f32, got {}", v.type_name()))),
        };
        // (layer, target, is_b) → tensor index, with one rank.
        let mut found: Vec<(usize, Target, bool, usize)> = Vec::new();
        let mut rank = None;
        for (i, t) in h.tensors.iter().enumerate() {
            if meta.is_some() && split_state_name(&t.name).is_some() {
                continue; // optimizer state, read below
            }
            let (weight, is_b) = match (t.name.strip_suffix(".lora_a"), t.name.strip_suffix(".lora_b")) {
                (Some(w), _) => (w, false),
                (_, Some(w)) => (w, true),
                _ if t.name.ends_with("_norm.weight") => continue,
                _ => return Err(format_err(format!("tensor '{}' is neither a .lora_a nor a .lora_b", t.name))),
            };
            let target = weight.strip_suffix(".weight").and_then(|w| w.rsplit('.').next()).and_then(Target::parse);
            let (Some(Ok(il)), Some(target)) = (block_index(weight), target) else {
                return Err(ModelError::Unsupported(format!(
                    "LoRA adapter: tensor '{}' adapts '{weight}'; ggweb applies adapters to the block matrices \
                     attn_qkv, attn_output, ffn_up and ffn_down",
                    t.name
                )));
            };
            if il >= hp.n_layer {
                return Err(format_err(format!(
                    "tensor '{}' is for block {il} of a {}-block model",
                    t.name, hp.n_layer
                )));
            }
            let (n_in, n_out) = target.dims(hp);
            let r = if is_b { t.ne[0] } else { t.ne[1] };
            let want = if is_b { [r, n_out as i64, 1, 1] } else { [n_in as i64, r, 1, 1] };
            if t.ne != want || r < 1 {
                return Err(format_err(format!(
                    "tensor '{}' has shape {:?}; this model's is {:?}",
                    t.name, t.ne, want
                )));
            }
            if *rank.get_or_insert(r) != r {
                return Err(ModelError::Unsupported(format!(
                    "LoRA adapter: tensor '{}' has rank {r}, another than the first pair's {}; ggweb applies one rank",
                    t.name,
                    rank.unwrap_or(0)
                )));
            }
            found.push((il, target, is_b, i));
        }
        let Some(rank) = rank else { return Err(format_err("no .lora_a / .lora_b tensor".into())) };
        for &(il, target, is_b, i) in &found {
            if !found.iter().any(|&(l, t, b, _)| l == il && t == target && b != is_b) {
                return Err(format_err(format!(
                    "tensor '{}' has no {} beside it",
                    h.tensors[i].name,
                    if is_b { "lora_a" } else { "lora_b" }
                )));
            }
        }
        let mut targets: Vec<String> = Vec::new();
        for &(_, t, _, _) in &found {
            if !targets.iter().any(|n| n == t.name()) {
                targets.push(t.name().into());
            }
        }
        let alpha = if alpha == 0.0 { rank as f32 } else { alpha };
        let cfg = LoraConfig::new(rank as u32, Some(alpha), Some(&targets)).map_err(|e| match e {
            ModelError::Invalid(m) => format_err(m),
            e => e,
        })?;
        cfg.check_model(hp)
            .map_err(|_| format_err(format!("rank {rank} is above the model's n_embd ({})", hp.n_embd)))?;
        let lora = Lora::alloc(hp, cfg, backend)?; // zeros
        for (il, target, is_b, i) in found {
            let info = &h.tensors[i];
            let start = (h.data_offset + info.offset) as usize;
            let data = bytes
                .get(start..start + info.nbytes)
                .ok_or_else(|| format_err(format!("tensor '{}' runs past the end of the file", info.name)))?;
            let vals = crate::quants::dequantize(info.ty, data)
                .map_err(|e| format_err(format!("tensor '{}' of type {}: {e:?}", info.name, info.ty)))?;
            let p = lora.layers[il][target as usize].as_ref().expect("allocated for every target");
            let dst = if is_b { &p.b } else { &p.a };
            dst.set_bytes(bytemuck::cast_slice(&vals), 0);
        }
        let Some(meta) = meta else { return Ok((lora, None)) };
        let names: Vec<String> = lora.tensors().iter().map(|t| t.name()).collect();
        let (slots, params) = plan_state(&h, &meta, |w| names.iter().any(|n| n == w))?;
        let mut state = OptState::alloc(meta, Some(lora.cfg.clone()), &params, &*backend.buffer_type())?;
        for (i, slot) in slots.iter().enumerate() {
            let Some((k, offset)) = *slot else { continue };
            let info = &h.tensors[i];
            let start = (h.data_offset + info.offset) as usize;
            let data = bytes
                .get(start..start + info.nbytes)
                .ok_or_else(|| format_err(format!("tensor '{}' runs past the end of the file", info.name)))?;
            state.write(k, offset, data);
        }
        state.resume = true;
        Ok((lora, Some(state)))
    }
}
