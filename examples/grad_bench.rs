//! Times a gradient run against the forward pass it extends, and attribution patching against
//! the exact sweep (issue 37), on one model, 1 thread, by thread CPU time (what counts on a
//! shared machine) and wall time: the median of `REPS` runs of each, interleaved.
//!
//! ```text
//! cargo run --release --example grad_bench -- MODEL.gguf [N_TOKENS] [REPS] [PATCH_TOKENS]
//! ```
//!
//! `PATCH_TOKENS` 0 leaves the patch sweeps out (an exact sweep is timed once, attribution
//! `REPS` times: a run of it is short enough for the load to swing it); `GGWEB_GRAD_PROFILE=1` prints where one
//! gradient run's time goes instead (after `REPS` runs, so a sampling profiler such as
//! `perf record` sees mostly gradient runs); `GGWEB_GRAD_PROFILE=z` or `=resid_pre`: where one
//! attribution patching call over `PATCH_TOKENS` tokens goes.
//!
//! Rows: `forward` = `run` without grad (one ubatch of all the tokens on a scheduler of its
//! own, the path a gradient run takes, every position's logits), `decode` = the hot path
//! (`Gpt2::decode`, n_batch 512, every position's logits), `fwd+bwd (wrt hook_embed)` and
//! `fwd+bwd (wrt '*')` = `run` with `grad` of a logit difference; then the patch sweeps over a
//! prompt of `PATCH_TOKENS` tokens at `resid_pre` and `z`, exact and attribution.
// Native only: `wasm-pack test` (cargo test for wasm32) builds the examples too.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use std::rc::Rc;
use std::time::Instant;

use ggweb::cpu::CpuBackend;
use ggweb::model::context::{block_on, Batch, Gpt2Options};
use ggweb::model::grad::{GradSpec, Metric, Wrt};
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;

fn thread_cpu() -> f64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock_id: i32, tp: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes one timespec; 3 = CLOCK_THREAD_CPUTIME_ID.
    unsafe { clock_gettime(3, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("MODEL.gguf");
    let n: usize = args.get(2).map_or(64, |s| s.parse().unwrap());
    let reps: usize = args.get(3).map_or(3, |s| s.parse().unwrap());
    let n_patch: usize = args.get(4).map_or(16, |s| s.parse().unwrap());
    let opts = Gpt2Options { n_batch: 512, n_threads: 1, ..Gpt2Options::default() };
    if std::env::var_os("GGWEB_GRAD_PROFILE").is_some() {
        // Where one gradient run's time goes, by node class and op (thread CPU time).
        let cpu = Rc::new(CpuBackend::with_profiler(1, thread_cpu));
        let mut s = Session::new(load_from_path(path, cpu.clone(), opts).unwrap());
        let nv = s.model.hparams.n_vocab as u32;
        let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % nv).collect();
        let of = Metric::LogitDiff { answer: 262, against: 13, pos: None };
        let spec = GradSpec { of, wrt: Wrt::List(vec!["hook_embed".into()]) };
        // `GGWEB_GRAD_PROFILE=z` (or `resid_pre`): one attribution patching call over the
        // `PATCH_TOKENS` prompt instead (its clean run and its gradient run).
        let at = std::env::var("GGWEB_GRAD_PROFILE").ok().filter(|a| a == "z" || a == "resid_pre");
        let clean: Vec<u32> = (0..n_patch as u32).map(|i| (i * 104729 + 5) % nv).collect();
        let mut corrupted = clean.clone();
        corrupted[n_patch / 2] = (corrupted[n_patch / 2] + 1) % nv;
        let one = |s: &mut Session| match &at {
            Some(at) => drop(block_on(s.patch(&clean, &corrupted, at, 262, 13, Some("attribution"))).unwrap()),
            None => drop(block_on(s.run_grad(&tokens, &[], &[], Some(&spec))).unwrap()),
        };
        // REPS runs before the profiled one (a sampling profiler then sees mostly gradient runs).
        for _ in 0..reps.max(1) {
            one(&mut s);
        }
        cpu.reset_profile();
        one(&mut s);
        let p = cpu.profile();
        let total: f64 = p.iter().map(|e| e.secs).sum();
        match &at {
            Some(at) => {
                println!("{path}: attribution patching at {at}, {n_patch} tokens, {:.1} ms in kernels", total * 1e3)
            }
            None => println!("{path}: one fwd+bwd of {n} tokens (wrt hook_embed), {:.1} ms in kernels", total * 1e3),
        }
        for e in p.iter().take(24) {
            println!(
                "  {:28} {:18} {:4} calls {:8.1} ms {:5.1}%",
                e.class,
                e.op,
                e.calls,
                e.secs * 1e3,
                100.0 * e.secs / total
            );
        }
        return;
    }
    let mut s = Session::new(load_from_path(path, Rc::new(CpuBackend::new(1)), opts).unwrap());
    let nv = s.model.hparams.n_vocab as u32;
    let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % nv).collect();
    let of = Metric::LogitDiff { answer: 262, against: 13, pos: None };
    let embed = GradSpec { of: of.clone(), wrt: Wrt::List(vec!["hook_embed".into()]) };
    let all = GradSpec { of: of.clone(), wrt: Wrt::All("*".into()) };
    type Job<'a> = Box<dyn FnMut(&mut Session) + 'a>;
    let mut jobs: Vec<(&str, Job)> = vec![
        ("forward (run, no grad)", Box::new(|s: &mut Session| drop(block_on(s.run(&tokens, &[], &[])).unwrap()))),
        (
            "decode (hot path, all logits)",
            Box::new(|s: &mut Session| drop(block_on(s.model.decode(Batch::all(&tokens, 0))).unwrap())),
        ),
        (
            "fwd+bwd (wrt hook_embed)",
            Box::new(|s: &mut Session| drop(block_on(s.run_grad(&tokens, &[], &[], Some(&embed))).unwrap())),
        ),
        (
            "fwd+bwd (wrt '*')",
            Box::new(|s: &mut Session| drop(block_on(s.run_grad(&tokens, &[], &[], Some(&all))).unwrap())),
        ),
    ];
    let mut times: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); jobs.len()];
    for _ in 0..reps {
        for (i, (_, job)) in jobs.iter_mut().enumerate() {
            let (c0, w0) = (thread_cpu(), Instant::now());
            job(&mut s);
            times[i].0.push(thread_cpu() - c0);
            times[i].1.push(w0.elapsed().as_secs_f64());
        }
    }
    println!("{path}: {n} tokens, 1 thread, median of {reps}");
    let base = median(times[0].0.clone());
    for ((name, _), (cpu, wall)) in jobs.iter().zip(&times) {
        let c = median(cpu.clone());
        println!(
            "  {name:32} {:8.1} ms CPU {:8.1} ms wall  {:5.2}x forward",
            c * 1e3,
            median(wall.clone()) * 1e3,
            c / base
        );
    }
    if n_patch == 0 {
        return;
    }
    let clean: Vec<u32> = (0..n_patch as u32).map(|i| (i * 104729 + 5) % nv).collect();
    let mut corrupted = clean.clone();
    corrupted[n_patch / 2] = (corrupted[n_patch / 2] + 1) % nv;
    println!("patch sweeps, {n_patch} tokens (exact: one run; attribution: the median of {reps})");
    for at in ["resid_pre", "z"] {
        let mut row = Vec::new();
        for (method, runs) in [("exact", 1), ("attribution", reps.max(1))] {
            let (mut cpu, mut wall) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                let (c0, w0) = (thread_cpu(), Instant::now());
                block_on(s.patch(&clean, &corrupted, at, 262, 13, Some(method))).unwrap();
                cpu.push(thread_cpu() - c0);
                wall.push(w0.elapsed().as_secs_f64());
            }
            row.push((median(cpu), median(wall)));
        }
        println!(
            "  {at:10} exact {:8.1} ms CPU ({:8.1} wall), attribution {:7.1} ms CPU ({:7.1} wall): {:.1}x faster",
            row[0].0 * 1e3,
            row[0].1 * 1e3,
            row[1].0 * 1e3,
            row[1].1 * 1e3,
            row[0].0 / row[1].0
        );
    }
}
