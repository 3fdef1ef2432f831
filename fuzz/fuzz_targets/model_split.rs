//! The split loader (`ModelLoader::new_split`): an 8-byte option prefix (n_ctx, n_batch,
//! gpu_layers, the ops the second device lacks: `ggweb_fuzz::sizes::prefix`) and a GGUF.
//! The second device is a `HostBackend` (CPU kernels in buffers of type "DEV", refusing
//! memory of other types), so the scheduler's copies are checked as on a GPU. Besides "no
//! panic, no unbounded allocation", for a model that loads:
//! - each weight is on the device exactly when `weight_on_gpu` says (any `gpu_layers`,
//!   usize::MAX and counts past `n_layer` included);
//! - the memory plan matches the estimate the header was budgeted with (weights and KV
//!   exactly, compute within its bound);
//! - one token gives the same logits, bit for bit, as the model loaded on the CPU alone.
#![no_main]

use std::rc::Rc;

use ggweb::backend::Backend;
use ggweb::cpu::CpuBackend;
use ggweb::gguf::Limits;
use ggweb::model::gpt2::weight_on_gpu;
use ggweb::model::loader::{LoadedModel, ModelLoader};
use ggweb::model::ModelError;
use ggweb::tensor::Op;
use ggweb_fuzz::chunk_plan;
use ggweb_fuzz::chunks;
use ggweb_fuzz::fnv1a;
use ggweb_fuzz::sizes::prefix;
use libfuzzer_sys::fuzz_target;

// Test support shared with tests/sched.rs.
#[path = "../../tests/support/host_backend.rs"]
mod host_backend;
use host_backend::HostBackend;

const BUDGET: u64 = 8 << 20;

fn limits() -> Limits {
    Limits {
        max_tensors: 1024,
        max_kv: 1024,
        max_string_len: 1 << 16,
        max_array_len: 1 << 16,
        max_array_depth: 4,
        max_header_bytes: 1 << 20,
        max_weight_bytes: 4 << 20,
        max_tensor_name_len: 63,
    }
}

fn load(loader: ModelLoader, file: &[u8]) -> Result<(LoadedModel, ggweb::model::loader::LoadEstimate), ModelError> {
    let mut loader = loader.with_budget(BUDGET);
    for c in chunks(file, &chunk_plan(file.len(), fnv1a(file))) {
        loader.feed(c)?;
    }
    // None when the stream ended before the header did: finish says why.
    let est = loader.estimate();
    let loaded = loader.finish()?;
    Ok((loaded, est.expect("a model that loads had its header accepted")))
}

fuzz_target!(|data: &[u8]| {
    let (p, file) = prefix(data);
    let mask = p.op_mask;
    // The device lacks the ops the mask names, so graphs split around them.
    let dev = HostBackend::new("DEV", "DEV", move |t| {
        let off = match t.op {
            Op::MulMat => mask & 1,
            Op::SoftMax { .. } => mask & 2,
            Op::Norm { .. } => mask & 4,
            Op::GetRows => mask & 8,
            Op::Add => mask & 16,
            _ => 0,
        };
        off == 0
    });
    let (dev, cpu): (Rc<dyn Backend>, Rc<dyn Backend>) = (Rc::new(dev), Rc::new(CpuBackend::new(1)));
    let split = ModelLoader::new_split(dev, cpu, p.gpu_layers, p.opts.clone(), limits(), Some(file.len() as u64));
    let Ok((mut m, est)) = load(split, file) else { return };

    let n_layer = m.model.hparams.n_layer;
    for t in m.model.weight_ctx.tensors() {
        let on_dev = t.data().expect("loaded").buffer.buffer_type_name() == "DEV";
        let want = weight_on_gpu(&t.name(), n_layer, p.gpu_layers.min(n_layer + 1));
        assert_eq!(on_dev, want, "'{}' with gpu_layers {} of {n_layer}", t.name(), p.gpu_layers);
    }
    let plan = m.model.memory_plan();
    assert_eq!((plan.weights as u64, plan.kv as u64), (est.weights, est.kv), "estimate {est:?}");
    assert!(plan.compute as u64 <= est.compute, "real compute {} over the bound {est:?}", plan.compute);

    let token = (file.len() % m.model.hparams.n_vocab) as u32;
    let split_logits = ggweb::model::context::block_on(m.model.decode(ggweb::model::context::Batch::last(&[token], 0))).map(|o| o.logits).expect("one token runs split");
    let cpu_only = ModelLoader::new(Rc::new(CpuBackend::new(1)), p.opts.clone(), limits(), Some(file.len() as u64));
    let (mut c, _) = load(cpu_only, file).expect("a file that loads split loads on the CPU");
    let cpu_logits = ggweb::model::context::block_on(c.model.decode(ggweb::model::context::Batch::last(&[token], 0))).map(|o| o.logits).expect("one token runs on the CPU");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(bits(&split_logits) == bits(&cpu_logits), "split logits differ from the CPU's");
});
