//! Weights repacked at load (`cpu::arch::repack`) give the logits of ggml's layout bit for bit:
//! a prompt (the packed prompt kernel where the ISA has one, else the plain kernels on
//! unpacked groups), decode steps (the packed decode kernel where the ISA has one, else the
//! unpacking path, forced here on machines without), 2 to 4 sequences a step, several
//! threads (mul_mat's blocks of whole groups), and the tied `token_embd` read by `get_rows`.

use crate::support::eval::{seq_steps, Eval};
use ggweb::cpu::repack_buffer::{is_packed, Repack};
use ggweb::model::context::Gpt2Options;
use ggweb::model::loader::{load_from_bytes, LoadedModel};
use ggweb::GgmlType;

/// `repack::set_disabled` is global: the tests here that turn it off take turns.
static FLAG: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A load with repacking off (ggml's layout), whatever other tests do meanwhile.
fn load_plain(bytes: &[u8], opts: Gpt2Options) -> LoadedModel {
    let _turn = FLAG.lock().unwrap_or_else(|e| e.into_inner());
    ggweb::cpu::arch::repack::set_disabled(true);
    let plain = load_from_bytes(bytes, opts);
    ggweb::cpu::arch::repack::set_disabled(false);
    plain.unwrap()
}

/// A load as a user gets it (repacked where this machine's kernels read the layout).
fn load_packed(bytes: &[u8], opts: Gpt2Options) -> LoadedModel {
    let _turn = FLAG.lock().unwrap_or_else(|e| e.into_inner());
    load_from_bytes(bytes, opts).unwrap()
}

/// Both copies' logits, bit for bit: the prompt, then 4 greedy decode steps from `tok`.
fn same_logits(plain: &mut LoadedModel, packed: &mut LoadedModel, prompt: &[u32], mut tok: u32, what: &str) {
    let (a, b) = (plain.model.eval(prompt, 0, true).unwrap(), packed.model.eval(prompt, 0, true).unwrap());
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{what} prompt");
    for step in 0..4 {
        let n_past = prompt.len() + step;
        let (a, b) =
            (plain.model.eval(&[tok], n_past, false).unwrap(), packed.model.eval(&[tok], n_past, false).unwrap());
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{what} step {step}");
        tok = ggweb::model::sampling::argmax(&a);
    }
    // 2 to 4 sequences a step: the packed kernels' several-column path (or, where a kernel
    // takes one column, one call per column, then the packed prompt kernel from 4).
    for n in 2..=4 {
        let (a, b) =
            (seq_steps(&mut plain.model, prompt, n, 3).unwrap(), seq_steps(&mut packed.model, prompt, n, 3).unwrap());
        assert_eq!(a.len(), 3);
        for (step, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_eq!(a.len(), n * plain.model.hparams.n_vocab);
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "{what}: {n} sequences, step {step}");
        }
    }
}

#[test]
fn repacked_weights_give_the_same_logits_bit_for_bit() {
    for (file, ty) in [("tiny-gpt2-q8_0.gguf", GgmlType::Q8_0), ("tiny-gpt2-q4_0.gguf", GgmlType::Q4_0)] {
        for n_threads in [1, 3] {
            // One copy in ggml's layout; the other repacked where the ISA reads the layout
            // (x86 with VNNI: Q8_0), forced otherwise (its products then unpack the groups).
            // Other tests loading meanwhile may repack or not: both give the same bits.
            let bytes = std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llamacpp").join(file),
            )
            .unwrap();
            let opts = Gpt2Options { n_batch: 16, n_threads, ..Default::default() };
            let mut plain = load_plain(&bytes, opts.clone());
            let packed = load_packed(&bytes, opts.clone());
            assert_eq!(plain.model.repacked_bytes, 0, "{file}: a load with repacking off repacked");
            let native = ggweb::cpu::arch::repack::kernel_name(ty).is_some();
            let down = &packed.model.weights.layers[0].ffn_down_w;
            assert_eq!(is_packed(down), native, "{file}: {ty} repacked at load");
            // Repacked on any machine: the load option.
            let mut packed = load_from_bytes(&bytes, Gpt2Options { repack: Repack::Force, ..opts.clone() }).unwrap();
            let w = &packed.model.weights;
            assert!(packed.model.repacked_bytes > 0 && is_packed(&w.layers[0].ffn_down_w), "{file}: repacked");
            assert_eq!(w.layers[0].ffn_down_w.ty, ty);
            // get_bytes still reads ggml's layout (the buffer unpacks).
            let t = &plain.model.weights.layers[0].ffn_down_w;
            let (mut before, mut after) = (vec![0u8; t.nbytes()], vec![0u8; t.nbytes()]);
            t.get_bytes(&mut before, 0);
            w.layers[0].ffn_down_w.get_bytes(&mut after, 0);
            assert_eq!(after, before, "{file}: get_bytes of a repacked weight");
            let prompt: Vec<u32> = (0..21).map(|i| (i * 977 + 13) % 50257).collect();
            same_logits(&mut plain, &mut packed, &prompt, 50256, &format!("{file}, {n_threads} threads"));
        }
    }
}

/// A gradient run's `out_prod` reads a repacked Q8_0 weight's groups in place
/// (`Kernels::q8_0_group`): the metric and every hook point's gradient have the bits of the
/// plain layout's, whose rows are dequantized one at a time.
#[test]
fn repacked_weights_give_the_same_gradients_bit_for_bit() {
    use ggweb::model::context::block_on;
    use ggweb::model::grad::{GradSpec, Metric, Wrt};
    use ggweb::model::session::Session;
    let bytes = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llamacpp/tiny-gpt2-q8_0.gguf"),
    )
    .unwrap();
    let opts = Gpt2Options { n_batch: 16, n_threads: 1, ..Default::default() };
    let mut plain = Session::new(load_plain(&bytes, opts.clone()));
    let mut packed = Session::new(load_from_bytes(&bytes, Gpt2Options { repack: Repack::Force, ..opts }).unwrap());
    assert!(
        is_packed(&packed.model.weights.layers[0].ffn_down_w) && is_packed(&packed.model.weights.layers[0].attn_qkv_w)
    );
    let tokens: Vec<u32> = (0..13).map(|i| (i * 977 + 13) % 50257).collect();
    let of = Metric::LogitDiff { answer: 262, against: 13, pos: None };
    let spec = GradSpec { of, wrt: Wrt::All("*".into()) };
    let a = block_on(plain.run_grad(&tokens, &[], &[], Some(&spec))).unwrap();
    let b = block_on(packed.run_grad(&tokens, &[], &[], Some(&spec))).unwrap();
    assert_eq!(a.metric.unwrap().to_bits(), b.metric.unwrap().to_bits());
    let (ga, gb) = (a.grads.unwrap(), b.grads.unwrap());
    assert!(ga.len() > 20 && ga.len() == gb.len());
    let embed = ga.iter().find(|g| g.name == "hook_embed").expect("hook_embed's gradient");
    assert!(embed.data.iter().any(|&v| v != 0.0), "hook_embed's gradient is all zero");
    for (x, y) in ga.iter().zip(&gb) {
        assert_eq!(x.name, y.name);
        assert!(x.data.iter().zip(&y.data).all(|(p, q)| p.to_bits() == q.to_bits()), "{}", x.name);
    }
}

/// llama.cpp's own K-quant mixes (Q4_K_M: Q4_K and Q6_K matrices, a Q6_K output; Q6_K)
/// repacked where the ISA reads those layouts (x86 with VNNI) give the logits of ggml's
/// layout bit for bit: a prompt (the packed prompt kernels), decode steps, 1 and 3 threads.
#[test]
fn repacked_k_quant_mixes_give_the_same_logits_bit_for_bit() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mixes");
    for file in ["gpt2-mini-q4_k_m.gguf", "gpt2-mini-q6_k.gguf"] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        for n_threads in [1, 3] {
            let opts = Gpt2Options { n_batch: 16, n_threads, ..Default::default() };
            let mut plain = load_plain(&bytes, opts.clone());
            let packed = load_packed(&bytes, opts.clone());
            assert_eq!(plain.model.repacked_bytes, 0);
            for t in [&packed.model.weights.layers[0].ffn_up_w, &packed.model.weights.output] {
                let native = ggweb::cpu::arch::repack::kernel_name(t.ty).is_some();
                assert_eq!(is_packed(t), native, "{file}: {} ({}) repacked", t.name(), t.ty);
            }
            let mut packed = if packed.model.repacked_bytes == 0 {
                load_from_bytes(&bytes, Gpt2Options { repack: Repack::Force, ..opts }).unwrap()
            } else {
                packed
            };
            let w = &packed.model.weights;
            assert!(is_packed(&w.layers[0].ffn_up_w) && is_packed(&w.output), "{file}");
            let n_vocab = packed.model.hparams.n_vocab as u32;
            let prompt: Vec<u32> = (0..21).map(|i| (i * 977 + 13) % n_vocab).collect();
            same_logits(&mut plain, &mut packed, &prompt, 7, &format!("{file}, {n_threads} threads"));
        }
    }
}
