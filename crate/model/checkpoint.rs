//! Optimizer checkpoints (issue 39 item 3): a model keeps the optimizer state of its last
//! training run ([`OptState`]: per trained tensor AdamW's m and v or SGD's momentum buffer, the
//! update count, the data position); `save({ optimizer: true })` / `saveLora({ optimizer: true })`
//! write it beside the weights or the adapter, and a model loaded from such a file resumes it
//! on its next `train` (as Hugging Face Trainer's `resume_from_checkpoint`: otherwise each
//! `train` starts a fresh optimizer).
//!
//! In the file (GGUF, after the weights or adapter tensors):
//! - per trained tensor `W`, F32 tensors of `W`'s shape: `W.adam_m` and `W.adam_v` (AdamW),
//!   `W.momentum` (SGD with momentum; plain SGD has none);
//! - metadata `ggweb.optimizer.type` ('adamw' | 'sgd'), its hyper-parameters
//!   (`ggweb.optimizer.lr`, `.beta1`, `.beta2`, `.eps`, `.weight_decay`, `.momentum`: what the
//!   run that wrote it used, for the record: a resumed run takes its own options), the update
//!   count `ggweb.optimizer.step` (bias correction and the schedule go on from it), and the
//!   data position: `ggweb.train.tokens` and `ggweb.train.sequences` (sequences trained on,
//!   where the next update's batch starts), with the run's `ggweb.train.seq_len` and
//!   `ggweb.train.batch_size`.
//!
//! llama.cpp refuses these files: its model loader checks the tensor count against the
//! architecture's ("wrong number of tensors") and its adapter loader any tensor that is not a
//! `.lora_a`/`.lora_b` ("has unexpected suffix"). Checkpoints with optimizer state are for
//! ggweb; a plain `save` / `saveLora` is the file for llama.cpp.
//!
//! In memory the state of a tensor of n elements is one F32 tensor `[n, rows]` (train.rs): row
//! 0 the gradient accumulated over a batch (zero between updates: not written), then the rows
//! above. Where that is larger than one buffer of its buffer type (WebGPU's maxBufferSize:
//! the 124M model's token_embd has 463 MB of AdamW state against browsers' 256 MiB) it is
//! several: chunks `[len_c, rows]` of consecutive elements, each within one buffer
//! ([`state_chunks`]); the optimizer steps one chunk at a time. A checkpoint's are read
//! straight into that layout as the file streams in ([`OptState::write`]).

use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;

use super::lora::LoraConfig;
use super::optimizer::{Optimizer, MAX_STEPS};
use super::ModelError;
use crate::allocator::alloc_tensors;
use crate::backend::{Buffer, BufferType};
use crate::gguf::{GgufHeader, GgufValue};
use crate::tensor::{Context, ContextParams, Tensor, TENSOR_OVERHEAD};
use crate::types::GgmlType;

/// The suffixes of the state tensors in a file, row 1 first.
pub fn state_suffixes(opt: &Optimizer) -> &'static [&'static str] {
    match *opt {
        Optimizer::AdamW { .. } => &[".adam_m", ".adam_v"],
        Optimizer::Sgd { momentum, .. } if momentum != 0.0 => &[".momentum"],
        Optimizer::Sgd { .. } => &[],
    }
}

/// Every suffix a state tensor may have.
const ALL_SUFFIXES: [&str; 3] = [".adam_m", ".adam_v", ".momentum"];

/// `(trained tensor, suffix)` of a state tensor's name.
pub fn split_state_name(name: &str) -> Option<(&str, &'static str)> {
    ALL_SUFFIXES.iter().find_map(|s| name.strip_suffix(s).map(|w| (w, *s)))
}

/// The optimizer in words, for errors.
pub fn describe(opt: &Optimizer) -> String {
    match *opt {
        Optimizer::AdamW { .. } => "AdamW".into(),
        Optimizer::Sgd { momentum, .. } if momentum != 0.0 => "SGD with momentum".into(),
        Optimizer::Sgd { .. } => "SGD without momentum".into(),
    }
}

/// What a checkpoint says besides its tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptMeta {
    pub optimizer: Optimizer,
    /// Updates done.
    pub step: u32,
    pub tokens: u64,
    /// Sequences trained on (the next update's batch starts at this one, mod the data's count).
    pub sequences: u64,
    pub seq_len: u32,
    pub batch_size: u32,
}

/// A model's optimizer state (see the module docs).
pub struct OptState {
    pub meta: OptMeta,
    /// The adapter's shape when the state is a LoRA adapter's (None: the model's weights).
    pub lora: Option<LoraConfig>,
    /// Per trained tensor: its name and state, chunks `[len_c, rows]` of consecutive
    /// elements (one `[n, rows]` unless its buffer type's `max_size` splits it).
    pub tensors: Vec<(String, Vec<Tensor>)>,
    /// Read from a checkpoint, not yet continued: the next `train` resumes it.
    pub resume: bool,
    _ctx: Context,
    _buffers: Vec<Rc<dyn Buffer>>,
}

impl OptState {
    /// Zeroed state for `params` (`(name, elements)`) in buffers of `buft`.
    pub fn alloc(
        meta: OptMeta,
        lora: Option<LoraConfig>,
        params: &[(String, i64)],
        buft: &dyn BufferType,
    ) -> Result<OptState, ModelError> {
        OptState::alloc_on(meta, lora, params, &|_| buft)
    }

    /// [`OptState::alloc`] with each param's state in the buffer type `buft_of(i)` gives
    /// (a model split between WebGPU and the CPU: the state where its param is, since the
    /// optimizer step updates both in place on one backend).
    pub fn alloc_on<'b>(
        meta: OptMeta,
        lora: Option<LoraConfig>,
        params: &[(String, i64)],
        buft_of: &dyn Fn(usize) -> &'b dyn BufferType,
    ) -> Result<OptState, ModelError> {
        let rows = meta.optimizer.state_rows();
        let lens: Vec<Vec<i64>> = params
            .iter()
            .enumerate()
            .map(|(i, (name, n))| state_chunks(name, *n, rows, buft_of(i)))
            .collect::<Result<_, _>>()?;
        let n_chunks: usize = lens.iter().map(Vec::len).sum();
        let ctx = Context::new(ContextParams { mem_size: (n_chunks + 1) * TENSOR_OVERHEAD, no_alloc: true });
        let tensors: Vec<(String, Vec<Tensor>)> = params
            .iter()
            .zip(&lens)
            .map(|((name, _), lens)| {
                let chunks = lens
                    .iter()
                    .enumerate()
                    .map(|(c, &len)| {
                        let s = ctx.new_tensor_2d(GgmlType::F32, len, rows);
                        s.set_name(&if c == 0 { format!("{name}.opt_state") } else { format!("{name}.opt_state.{c}") });
                        s
                    })
                    .collect();
                (name.clone(), chunks)
            })
            .collect();
        // One allocation per buffer type, in the params' order within each.
        let mut buffers: Vec<Rc<dyn Buffer>> = Vec::new();
        let mut done = alloc::vec![false; tensors.len()];
        for i in 0..tensors.len() {
            if done[i] {
                continue;
            }
            let buft = buft_of(i);
            let group: Vec<usize> =
                (i..tensors.len()).filter(|&j| !done[j] && buft_of(j).name() == buft.name()).collect();
            let all: Vec<Tensor> = group.iter().flat_map(|&j| tensors[j].1.iter().cloned()).collect();
            let bufs = alloc_tensors(&all, buft).map_err(|e| ModelError::oom("the optimizer state", e))?;
            for b in &bufs {
                b.clear(0);
            }
            buffers.extend(bufs);
            group.iter().for_each(|&j| done[j] = true);
        }
        Ok(OptState { meta, lora, tensors, resume: false, _ctx: ctx, _buffers: buffers })
    }

    /// Bytes of the state.
    pub fn nbytes(&self) -> u64 {
        self.tensors.iter().flat_map(|(_, c)| c).map(|t| t.nbytes() as u64).sum()
    }

    /// The state of `name`: its chunks.
    pub fn get(&self, name: &str) -> Option<&[Tensor]> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, c)| c.as_slice())
    }

    /// Writes `bytes` at byte `offset` of trained tensor `k`'s state as if it were one
    /// `[n, rows]` tensor (a checkpoint's row r from byte `r·4n`), into the chunks holding them.
    pub fn write(&self, k: usize, offset: usize, bytes: &[u8]) {
        let chunks = &self.tensors[k].1;
        let row_bytes = 4 * chunks.iter().map(|c| c.ne[0] as usize).sum::<usize>();
        let (mut at, mut done) = (offset, 0);
        while done < bytes.len() {
            let (row, mut b) = (at / row_bytes, at % row_bytes);
            for c in chunks {
                let len = 4 * c.ne[0] as usize;
                if b < len {
                    let n = (len - b).min(bytes.len() - done);
                    c.set_bytes(&bytes[done..done + n], row * len + b);
                    (at, done) = (at + n, done + n);
                    break;
                }
                b -= len;
            }
        }
    }

    /// Copies rows 1.. (the optimizer's: the gradient row stays zero) of every trained
    /// tensor's state from `from` (the same tensors, any chunks; read synchronously: host
    /// memory, such as a checkpoint's as the loader reads it) in pieces of about 1 MiB: a
    /// checkpoint's state resumed where the params are (WebGPU).
    pub fn copy_rows_from(&self, from: &OptState) -> Result<(), ModelError> {
        for (k, (name, _)) in self.tensors.iter().enumerate() {
            let j = from.tensors.iter().position(|(n, _)| n == name).ok_or_else(|| {
                ModelError::Invalid(format!("train: the checkpoint has no optimizer state of '{name}'"))
            })?;
            let rows = self.tensors[k].1[0].ne[1] as usize;
            let n: usize = self.tensors[k].1.iter().map(|c| c.ne[0] as usize).sum();
            for row in 1..rows {
                let mut at = row * 4 * n;
                for (t, offset, len) in from.row_pieces(j, row) {
                    let mut done = 0;
                    while done < len {
                        let m = (len - done).min(1 << 20);
                        let mut buf = alloc::vec![0u8; m];
                        t.try_get_bytes(&mut buf, offset + done)?;
                        self.write(k, at, &buf);
                        (at, done) = (at + m, done + m);
                    }
                }
            }
        }
        Ok(())
    }

    /// Where row `row` of trained tensor `k`'s state is: `(chunk, byte offset, bytes)` per
    /// chunk, in element order.
    pub fn row_pieces(&self, k: usize, row: usize) -> Vec<(Tensor, usize, usize)> {
        self.tensors[k].1.iter().map(|c| (c.clone(), row * c.ne[0] as usize * 4, c.ne[0] as usize * 4)).collect()
    }

    /// The checkpoint's metadata keys, in the order they are written.
    pub fn kvs(&self) -> Vec<(&'static str, GgufValue)> {
        let m = &self.meta;
        let f = GgufValue::F32;
        let mut v: Vec<(&'static str, GgufValue)> = Vec::new();
        match m.optimizer {
            Optimizer::AdamW { lr, beta1, beta2, eps, weight_decay } => v.extend([
                ("ggweb.optimizer.type", GgufValue::String("adamw".into())),
                ("ggweb.optimizer.lr", f(lr)),
                ("ggweb.optimizer.beta1", f(beta1)),
                ("ggweb.optimizer.beta2", f(beta2)),
                ("ggweb.optimizer.eps", f(eps)),
                ("ggweb.optimizer.weight_decay", f(weight_decay)),
            ]),
            Optimizer::Sgd { lr, momentum, weight_decay } => v.extend([
                ("ggweb.optimizer.type", GgufValue::String("sgd".into())),
                ("ggweb.optimizer.lr", f(lr)),
                ("ggweb.optimizer.momentum", f(momentum)),
                ("ggweb.optimizer.weight_decay", f(weight_decay)),
            ]),
        }
        v.extend([
            ("ggweb.optimizer.step", GgufValue::U32(m.step)),
            ("ggweb.train.tokens", GgufValue::U64(m.tokens)),
            ("ggweb.train.sequences", GgufValue::U64(m.sequences)),
            ("ggweb.train.seq_len", GgufValue::U32(m.seq_len)),
            ("ggweb.train.batch_size", GgufValue::U32(m.batch_size)),
        ]);
        v
    }

    /// The state tensors of the file: `(file name, elements, where its bytes are: (state
    /// chunk, byte offset, bytes) in order)`, in the order written (each trained tensor's rows
    /// 1.. in turn).
    #[allow(clippy::type_complexity)]
    pub fn file_tensors(&self) -> Vec<(String, i64, Vec<(Tensor, usize, usize)>)> {
        let suffixes = state_suffixes(&self.meta.optimizer);
        let mut v = Vec::new();
        for (k, (name, chunks)) in self.tensors.iter().enumerate() {
            let n = chunks.iter().map(|c| c.ne[0]).sum();
            for (i, s) in suffixes.iter().enumerate() {
                v.push((format!("{name}{s}"), n, self.row_pieces(k, i + 1)));
            }
        }
        v
    }
}

/// The element counts of the chunks of a state `[n, rows]` of `name` in buffers of `buft`:
/// `[n]` when it fits one buffer (`max_size`), else as few near-equal chunks as fit one each;
/// `unsupported` with the sizes when not even a chunk of one element fits (a buffer type whose
/// buffers are smaller than `rows` floats).
pub fn state_chunks(name: &str, n: i64, rows: i64, buft: &dyn BufferType) -> Result<Vec<i64>, ModelError> {
    let max = buft.max_size() as u64;
    let row_bytes = 4 * rows.max(1) as u64;
    // What alloc_size and the alignment of the next tensor in a buffer may add.
    let slack = 2 * buft.alignment() as u64 + 4;
    if n as u64 * row_bytes <= max.saturating_sub(slack) || n <= 1 {
        return Ok(alloc::vec![n]);
    }
    let per = max.saturating_sub(slack) / row_bytes;
    if per == 0 {
        return Err(ModelError::Unsupported(format!(
            "train: the optimizer state of '{name}' ({n} elements × {rows} rows of f32): a {} buffer holds at most              {max} bytes, not one element's {row_bytes}",
            buft.name()
        )));
    }
    let count = (n as u64).div_ceil(per);
    let len = (n as u64).div_ceil(count) as i64;
    Ok((0..count as i64).map(|c| len.min(n - c * len)).filter(|&l| l > 0).collect())
}

fn bad(m: String) -> ModelError {
    ModelError::Format(format!("optimizer checkpoint: {m}"))
}

/// A checkpoint's metadata, None when the file has no `ggweb.optimizer.type`.
pub fn read_meta(h: &GgufHeader) -> Result<Option<OptMeta>, ModelError> {
    let Some(ty) = h.get("ggweb.optimizer.type") else { return Ok(None) };
    let f32_of = |k: &str, default: f32| -> Result<f32, ModelError> {
        match h.get(k) {
            None => Ok(default),
            Some(GgufValue::F32(v)) => Ok(*v),
            Some(v) => Err(bad(format!("{k} must be an f32, got {}", v.type_name()))),
        }
    };
    let u64_of = |k: &str| -> Result<u64, ModelError> {
        match h.get(k) {
            None => Ok(0),
            Some(GgufValue::U64(v)) => Ok(*v),
            Some(GgufValue::U32(v)) => Ok(*v as u64),
            Some(v) => Err(bad(format!("{k} must be a u64, got {}", v.type_name()))),
        }
    };
    let u32_of = |k: &str| -> Result<u32, ModelError> {
        u32::try_from(u64_of(k)?).map_err(|_| bad(format!("{k} is out of range")))
    };
    let optimizer = match ty.as_str() {
        Some("adamw") => Optimizer::AdamW {
            lr: f32_of("ggweb.optimizer.lr", 0.0)?,
            beta1: f32_of("ggweb.optimizer.beta1", 0.9)?,
            beta2: f32_of("ggweb.optimizer.beta2", 0.999)?,
            eps: f32_of("ggweb.optimizer.eps", 1e-8)?,
            weight_decay: f32_of("ggweb.optimizer.weight_decay", 0.01)?,
        },
        Some("sgd") => Optimizer::Sgd {
            lr: f32_of("ggweb.optimizer.lr", 0.0)?,
            momentum: f32_of("ggweb.optimizer.momentum", 0.0)?,
            weight_decay: f32_of("ggweb.optimizer.weight_decay", 0.0)?,
        },
        _ => return Err(bad(format!("ggweb.optimizer.type must be 'adamw' or 'sgd', got {ty:?}"))),
    };
    let step = u32_of("ggweb.optimizer.step")?;
    if step > MAX_STEPS {
        return Err(bad(format!("ggweb.optimizer.step {step} is above {}", MAX_STEPS)));
    }
    Ok(Some(OptMeta {
        optimizer,
        step,
        tokens: u64_of("ggweb.train.tokens")?,
        sequences: u64_of("ggweb.train.sequences")?,
        seq_len: u32_of("ggweb.train.seq_len")?,
        batch_size: u32_of("ggweb.train.batch_size")?,
    }))
}

/// Where a checkpoint's state tensors go: per header tensor index, `Some((state index in
/// `params`, byte offset of its row))` for a state tensor, None for the rest; and `params`,
/// the trained tensors `(name, elements)` in file order. Each state tensor must be F32 of its
/// trained tensor's element count, and each trained tensor must have all its optimizer's.
#[allow(clippy::type_complexity)]
pub fn plan_state(
    h: &GgufHeader,
    meta: &OptMeta,
    is_trained: impl Fn(&str) -> bool,
) -> Result<(Vec<Option<(usize, usize)>>, Vec<(String, i64)>), ModelError> {
    let suffixes = state_suffixes(&meta.optimizer);
    let mut params: Vec<(String, i64)> = Vec::new();
    let mut seen: Vec<Vec<bool>> = Vec::new();
    let mut slots = Vec::with_capacity(h.tensors.len());
    for t in &h.tensors {
        let Some((w, s)) = split_state_name(&t.name) else {
            slots.push(None);
            continue;
        };
        let Some(row) = suffixes.iter().position(|x| *x == s) else {
            return Err(bad(format!(
                "tensor '{}' is not state of {} (ggweb.optimizer.type)",
                t.name,
                describe(&meta.optimizer)
            )));
        };
        let Some(wi) = h.tensor_info(w).filter(|_| is_trained(w)) else {
            return Err(bad(format!("tensor '{}' is state of '{w}', which the file has no trained tensor of", t.name)));
        };
        let n: i64 = wi.ne.iter().product();
        if t.ty != GgmlType::F32 || t.ne.iter().product::<i64>() != n {
            return Err(bad(format!(
                "tensor '{}' must be F32 with the {n} elements of '{w}', got {} {:?}",
                t.name, t.ty, t.ne
            )));
        }
        let k = match params.iter().position(|(p, _)| p == w) {
            Some(k) => k,
            None => {
                params.push((String::from(w), n));
                seen.push(alloc::vec![false; suffixes.len()]);
                params.len() - 1
            }
        };
        if core::mem::replace(&mut seen[k][row], true) {
            return Err(bad(format!("tensor '{}' appears twice", t.name)));
        }
        slots.push(Some((k, (row + 1) * n as usize * 4)));
    }
    for (k, s) in seen.iter().enumerate() {
        if let Some(i) = s.iter().position(|&x| !x) {
            return Err(bad(format!("'{}' has no {} tensor beside its others", params[k].0, suffixes[i])));
        }
    }
    Ok((slots, params))
}
