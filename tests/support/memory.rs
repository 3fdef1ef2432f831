//! Memory in the tests: the process's peak resident set, and a model loaded under a budget.

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::{LoadedModel, ModelLoader};

/// The process's peak resident memory (VmHWM), in bytes (Linux; 0 elsewhere).
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.split_whitespace().nth(1).unwrap().to_owned())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// `bytes` (a GGUF file) loaded on one CPU thread with `opts`, held to a memory budget of `budget`.
pub fn load_with_budget(bytes: &[u8], opts: Gpt2Options, budget: u64) -> LoadedModel {
    let mut l = ModelLoader::new(Rc::new(CpuBackend::new(1)), opts, Default::default(), Some(bytes.len() as u64))
        .with_budget(budget);
    for c in bytes.chunks(1 << 16) {
        l.feed(c).unwrap();
    }
    l.finish().unwrap()
}
