//! Sizes as on wasm32, found natively. An input is an 8-byte option prefix (n_ctx,
//! n_batch: see `ggweb_fuzz::sizes::prefix`) and a GGUF, loaded through ModelLoader with
//! 32-bit `usize` rules (`with_usize_bits(32)`) and a 4 GiB budget, as in the browser.
//! A header it accepts must be one wasm32 can run without a size wrapping:
//! - the worst-case graph, built from the header and planned by gallocr without memory
//!   (`sizes::measure`, in 64-bit arithmetic), has no tensor past 2^31 - 1 bytes and a
//!   compute buffer within the loader's bound (`LoadEstimate::compute`);
//! - weights + KV + that compute buffer fit 4 GiB.
//!
//! A refused header must be refused as the file's fault (format), or as over budget,
//! never anything else. Models small enough for the fuzz allocator are loaded and run one
//! token, and their real memory plan is compared with the estimate.
#![no_main]

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::gguf::Limits;
use ggweb::model::loader::ModelLoader;
use ggweb::model::ModelError;
use ggweb_fuzz::sizes::{header_of, measure, prefix};
use libfuzzer_sys::fuzz_target;

/// wasm32's address space: what the browser's budget is at most.
const SPACE: u64 = 4 << 30;
/// Largest load the harness completes for real (the fuzz allocator allows 256 MiB live).
const RUN_LIMIT: u64 = 24 << 20;

fn limits() -> Limits {
    // Weights stay small (the harness allocates them); KV and compute may be anything the
    // hyperparameters imply.
    Limits {
        max_tensors: 1024,
        max_kv: 1024,
        max_header_bytes: 1 << 20,
        max_weight_bytes: 8 << 20,
        ..Limits::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let (p, file) = prefix(data);
    let mut loader = ModelLoader::new(Rc::new(CpuBackend::new(1)), p.opts.clone(), limits(), Some(file.len() as u64))
        .with_usize_bits(32)
        .with_budget(SPACE);
    // Feed only the header (and some data): the verdict on sizes comes with the header.
    let fed = loader.feed(file);
    let Some(est) = loader.estimate() else {
        match fed {
            Err(ModelError::Backend(e)) => panic!("refused as a backend failure before any allocation: {e}"),
            Err(ModelError::Aborted) => panic!("aborted"),
            _ => return,
        }
    };
    let header = header_of(file, limits()).expect("the loader accepted this header");
    let hp = ggweb::model::gpt2::Hparams::from_gguf(&header).expect("accepted hyperparameters");
    let m = measure(&header, &hp, est.n_ctx, est.n_batch).expect("an accepted header builds its graph");
    assert!(m.largest < 1 << 31, "accepted, but a tensor of {} bytes passes wasm32's isize", m.largest);
    assert!(
        m.compute <= est.compute,
        "gallocr plans {} bytes of compute, the loader's bound is {} ({:?})",
        m.compute,
        est.compute,
        est
    );
    assert!(est.total() <= SPACE, "accepted {est:?} over 4 GiB");
    if fed.is_err() || est.total() > RUN_LIMIT {
        return;
    }
    let Ok(mut loaded) = loader.finish() else { return };
    let plan = loaded.model.memory_plan();
    assert_eq!((plan.weights as u64, plan.kv as u64), (est.weights, est.kv), "estimate {est:?}");
    assert!(plan.compute as u64 <= est.compute, "real compute {} over the bound {est:?}", plan.compute);
    let n_vocab = loaded.model.hparams.n_vocab;
    let logits = ggweb::model::context::block_on(
        loaded.model.decode(ggweb::model::context::Batch::last(&[(file.len() % n_vocab) as u32], 0)),
    )
    .map(|o| o.logits)
    .expect("one token runs");
    assert_eq!(logits.len(), n_vocab);
});
