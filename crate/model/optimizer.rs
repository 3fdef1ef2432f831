//! The optimizers `train` runs (PyTorch's) and their state's shape: what a training run
//! (train.rs) and a checkpoint of its state (checkpoint.rs) both speak of.

/// The optimizer of a run (PyTorch's, with the contract's defaults filled in).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// `torch.optim.AdamW`: decoupled weight decay, bias correction.
    AdamW { lr: f32, beta1: f32, beta2: f32, eps: f32, weight_decay: f32 },
    /// `torch.optim.SGD`: coupled L2 decay, momentum without dampening.
    Sgd { lr: f32, momentum: f32, weight_decay: f32 },
}

impl Optimizer {
    pub fn lr(&self) -> f32 {
        match *self {
            Optimizer::AdamW { lr, .. } | Optimizer::Sgd { lr, .. } => lr,
        }
    }
    /// Rows of a weight's state: the gradient, then m and v (AdamW) or the momentum buffer.
    pub(crate) fn state_rows(&self) -> i64 {
        match *self {
            Optimizer::AdamW { .. } => 3,
            Optimizer::Sgd { momentum, .. } if momentum != 0.0 => 2,
            Optimizer::Sgd { .. } => 1,
        }
    }
}

/// The most updates one run may take.
pub const MAX_STEPS: u32 = 1 << 24;
