//! Models built on the tensor core. One file per model ([`gpt2`]), plus [`sampling`],
//! [`logprobs`], [`stop`] strings, and the [`session`] core that every front end drives.

pub mod checkpoint;
pub mod context;
pub mod export;
pub mod gpt2;
pub mod grad;
pub mod hooks;
pub mod hparams;
pub mod inside;
pub mod kv_cache;
pub mod loader;
pub mod logprobs;
pub mod lora;
mod lora_gguf;
pub mod optimizer;
pub mod plan;
mod plan_backend;
#[cfg(feature = "std")]
pub mod report;
#[cfg(feature = "std")]
pub mod sae;
pub mod sampling;
pub mod save_stream;
pub mod session;
mod session_train;
pub mod stop;
pub mod train;

use alloc::string::String;

use crate::backend::BackendError;

/// Why a model could not be loaded or run. Each variant names what and where.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelError {
    /// The file lacks a weight the architecture needs.
    MissingTensor(String),
    /// A weight has the wrong shape for the hyperparameters.
    BadShape {
        name: String,
        expected: [i64; 4],
        got: [i64; 4],
    },
    /// A metadata key is missing or has the wrong type/value.
    Metadata(String),
    /// The architecture in the file is not one we run.
    UnsupportedArch(String),
    /// Options that cannot work (n_ctx larger than the model's, n_batch 0, ...).
    Config(String),
    /// A bad argument of a call (an unknown option key, a call out of order), its message
    /// complete: what, where, and the value.
    Invalid(String),
    /// The prompt (plus output) does not fit in the context.
    ContextFull {
        needed: usize,
        n_ctx: usize,
    },
    /// The model needs more memory than the backend can give (or the caller allows),
    /// found before anything was allocated. `what` itemizes `needed`.
    OverBudget {
        what: String,
        needed: u64,
        limit: u64,
    },
    /// One call's own memory (a run's captures and hook maps, its compute buffer) is more
    /// than is left, found before it was allocated; the model is untouched.
    RunTooLarge {
        what: String,
        needed: u64,
        left: u64,
    },
    /// A token id outside the vocabulary.
    BadToken {
        id: u32,
        n_vocab: usize,
    },
    Backend(BackendError),
    /// The file itself is malformed (GGUF parse error), with its message.
    Format(String),
    Tokenizer(String),
    /// The caller stopped a long call between two of its steps ([`session::Interrupt`]).
    Aborted,
    /// What this model or build cannot do yet (training a quantized weight in full, training
    /// on WebGPU), naming what.
    Unsupported(String),
}

impl core::fmt::Display for ModelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ModelError::MissingTensor(n) => write!(f, "model file has no tensor '{n}'"),
            ModelError::BadShape { name, expected, got } => {
                write!(f, "tensor '{name}' has ne={got:?}, expected {expected:?} for these hyperparameters")
            }
            ModelError::Metadata(s) => write!(f, "metadata: {s}"),
            ModelError::UnsupportedArch(a) => write!(f, "unsupported architecture '{a}' (ggweb runs 'gpt2')"),
            ModelError::Config(s) => write!(f, "invalid options: {s}"),
            ModelError::Invalid(s) => f.write_str(s),
            ModelError::ContextFull { needed, n_ctx } => {
                write!(f, "context full: {needed} positions needed, n_ctx is {n_ctx}")
            }
            ModelError::OverBudget { what, needed, limit } => {
                write!(f, "model too large: needs {needed} bytes ({what}), the memory budget is {limit} bytes")
            }
            ModelError::RunTooLarge { what, needed, left } => write!(
                f,
                "{what} need {needed} bytes, {left} bytes of memory are left: capture or hook fewer points, or a shorter input"
            ),
            ModelError::BadToken { id, n_vocab } => {
                write!(f, "token id {id} is outside the vocabulary (n_vocab {n_vocab})")
            }
            ModelError::Backend(e) => write!(f, "{e}"),
            ModelError::Format(s) => write!(f, "{s}"),
            // The tokenizer's messages name it already ("tokenizer: no token for byte ...").
            ModelError::Tokenizer(s) => f.write_str(s),
            ModelError::Aborted => write!(f, "aborted"),
            ModelError::Unsupported(s) => f.write_str(s),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ModelError {}

impl From<BackendError> for ModelError {
    fn from(e: BackendError) -> Self {
        ModelError::Backend(e)
    }
}

impl ModelError {
    /// An allocation's `OutOfMemory` as `OverBudget` naming `what` was being allocated (the
    /// sizes an app shows); any other backend error as it is.
    pub(crate) fn oom(what: &str, e: BackendError) -> Self {
        match e {
            BackendError::OutOfMemory { requested, limit, .. } => {
                ModelError::OverBudget { what: what.into(), needed: requested as u64, limit: limit as u64 }
            }
            e => e.into(),
        }
    }
}
