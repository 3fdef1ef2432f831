//! A forward pass that starts at block L from a given residual stream ([`Start`]), the pass
//! activation patching re-uses the corrupted run with: from a run's own
//! `blocks.L.hook_resid_pre` it gives that run's logits bit for bit on the CPU, on the
//! reserved path (chunked by n_batch) and the hooked one; it writes the K/V of blocks L.. only,
//! stays within the reserved compute plan, and refuses a wrong residual or an earlier hook.

use std::rc::Rc;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Batch, Gpt2Options, Logits, SeqPos, Start};
use ggweb::model::hooks::{Hook, HookOp, HookValue};
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;
use ggweb::model::ModelError;

use crate::support::fixtures;

fn session(file: &str, n_batch: usize) -> Session {
    let path = fixtures::models_dir().join(file);
    let opts = Gpt2Options { n_batch, ..Gpt2Options::default() };
    Session::new(load_from_path(path.to_str().unwrap(), Rc::new(CpuBackend::new(1)), opts).unwrap())
}

const PROMPT: [u32; 11] = [464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 198];

/// Every position's logits and `blocks.*.hook_resid_pre` of one unhooked run from position 0.
fn reference(s: &mut Session) -> (Vec<f32>, Vec<Vec<f32>>) {
    let run = block_on(s.run(&PROMPT, &["blocks.*.hook_resid_pre".to_string()], &[])).unwrap();
    assert_eq!(run.cache.len(), s.model.hparams.n_layer);
    (run.logits, run.cache.into_iter().map(|v| v.data).collect())
}

fn identity_hook(at: &str) -> Hook {
    Hook { at: at.into(), op: HookOp::Scale, head: None, pos: None, index: None, value: Some(HookValue::Number(1.0)) }
}

#[test]
fn a_pass_from_a_runs_own_residual_gives_its_logits_bit_for_bit() {
    // n_batch 4 < 11 tokens: the reserved path goes in chunks, each with its rows of the residual.
    for (file, n_batch) in [("tiny-gpt2-f32.gguf", 4), ("tiny-gpt2-q8_0.gguf", 32)] {
        let mut s = session(file, n_batch);
        let (logits, resid) = reference(&mut s);
        let (n, nv, e) = (PROMPT.len(), s.model.hparams.n_vocab, s.model.hparams.n_embd);
        let plan = s.model.memory_plan();
        for (l, r) in resid.iter().enumerate() {
            // Every position from 0, every row's logits, through the reserved buffers.
            let start = Some(Start { layer: l, resid: r });
            let out = block_on(s.model.decode(Batch { start, ..Batch::all(&PROMPT, 0) })).unwrap();
            assert!(out.logits == logits, "{file}: start at block {l}, all positions");
            // Positions p.. on the cache's positions before p, last row: as a patching cell.
            for p in [1, n / 2, n - 1] {
                let start = Some(Start { layer: l, resid: &r[p * e..] });
                let out = block_on(s.model.decode(Batch { start, ..Batch::last(&PROMPT[p..], p) })).unwrap();
                assert!(out.logits == logits[(n - 1) * nv..], "{file}: block {l} from position {p}");
                // The hooked path (own graph and buffers), with a hook that changes nothing.
                let hooks = [identity_hook(&format!("blocks.{l}.hook_resid_pre"))];
                let start = Some(Start { layer: l, resid: &r[p * e..] });
                let b = Batch { start, hooks: &hooks, ..Batch::last(&PROMPT[p..], p) };
                let out = block_on(s.model.decode(b)).unwrap();
                assert!(out.logits == logits[(n - 1) * nv..], "{file}: hooked, block {l} from position {p}");
            }
        }
        // The partial graph is a subgraph of the reserved worst case: no buffer grew.
        assert_eq!(s.model.memory_plan(), plan, "{file}");
    }
}

#[test]
fn only_the_blocks_from_the_start_write_their_kv_cells() {
    let mut s = session("tiny-gpt2-f32.gguf", 32);
    let (_, resid) = reference(&mut s);
    let nl = s.model.hparams.n_layer;
    assert!(nl >= 2);
    let kv = |s: &Session| -> Vec<Vec<u8>> {
        let bytes = |t: &ggweb::tensor::Tensor| {
            let mut b = vec![0u8; t.nbytes()];
            t.try_get_bytes(&mut b, 0).unwrap();
            b
        };
        s.model.kv.k.iter().chain(&s.model.kv.v).map(bytes).collect()
    };
    let before = kv(&s);
    // Block 1 from a different residual (block 0's), positions 0..: blocks 1.. change, block 0 not.
    let start = Some(Start { layer: 1, resid: &resid[0] });
    block_on(s.model.decode(Batch { start, ..Batch::last(&PROMPT, 0) })).unwrap();
    let after = kv(&s);
    for il in 0..nl {
        for (what, i) in [("K", il), ("V", nl + il)] {
            assert_eq!(before[i] == after[i], il == 0, "{what} of block {il}");
        }
    }
}

#[test]
fn a_wrong_residual_an_earlier_hook_or_tap_is_invalid_and_the_model_stays_usable() {
    let mut s = session("tiny-gpt2-f32.gguf", 32);
    let (logits, resid) = reference(&mut s);
    let (nl, e) = (s.model.hparams.n_layer, s.model.hparams.n_embd);
    let err = |s: &mut Session, b: Batch| match block_on(s.model.decode(b)) {
        Err(ModelError::Invalid(m)) => m,
        other => panic!("expected invalid, got {:?}", other.map(|o| o.logits.len())),
    };
    let short = &resid[1][..resid[1].len() - 1];
    let m = err(&mut s, Batch { start: Some(Start { layer: 1, resid: short }), ..Batch::last(&PROMPT, 0) });
    assert!(m.contains("start") && m.contains(&format!("{}", PROMPT.len() * e - 1)), "{m}");
    let m = err(&mut s, Batch { start: Some(Start { layer: nl, resid: &resid[0] }), ..Batch::last(&PROMPT, 0) });
    assert!(m.contains(&format!("layer {nl}")), "{m}");
    for at in ["blocks.0.hook_mlp_out", "hook_embed", "blocks.0.hook_resid_pre", "blocks.x.hook_resid_pre"] {
        let hooks = [identity_hook(at)];
        let b = Batch { start: Some(Start { layer: 1, resid: &resid[1] }), hooks: &hooks, ..Batch::last(&PROMPT, 0) };
        let m = err(&mut s, b);
        assert!(m.contains(&format!("'{at}'")) && m.contains("block 1"), "{at}: {m}");
    }
    // A graph node of an earlier block is not in the graph.
    let taps = ["l0.ffn_out".to_string()];
    let b = Batch { start: Some(Start { layer: 1, resid: &resid[1] }), taps: &taps, ..Batch::last(&PROMPT, 0) };
    let m = err(&mut s, b);
    assert!(m.contains("'l0.ffn_out'"), "{m}");
    // Several sequences: one only.
    let seq: Vec<SeqPos> = (0..PROMPT.len() as u32).map(|pos| SeqPos { pos, seqs: 1 }).collect();
    let b = Batch {
        start: Some(Start { layer: 1, resid: &resid[1] }),
        seq: &seq,
        logits: Logits::Last,
        ..Batch::last(&PROMPT, 0)
    };
    assert!(err(&mut s, b).contains("one sequence"));
    // Afterwards: the same logits as before.
    let start = Some(Start { layer: 1, resid: &resid[1] });
    let out = block_on(s.model.decode(Batch { start, ..Batch::all(&PROMPT, 0) })).unwrap();
    assert!(out.logits == logits);
}
