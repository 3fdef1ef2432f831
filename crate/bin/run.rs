//! `ggweb generate | score | trace | logits | tokenize | bench`: the commands that run the
//! model, each through the session core ([`Session`]) where it generates or scores.

use std::io::{BufRead, Write};
use std::rc::Rc;
use std::time::Instant;

use ggweb::backend::Backend;
use ggweb::common::open_backends;
use ggweb::common::options::LoadOptions;
use ggweb::cpu::CpuBackend;
use ggweb::gguf::{GgufStreamReader, Limits, NullSink};
use ggweb::model::context::{block_on, Batch, Logits, SeqPos};
use ggweb::model::loader::{load_from_path, load_from_path_split, tokenizer_from_gguf, LoadedModel};
use ggweb::model::session::Session;
use ggweb::tokenizer::Tokenizer;
use ggweb::webgpu::{WebGpuOptions, WebGpuStats};
use serde_json::json;

use crate::args::{
    BenchArgs, GenerateArgs, InputArgs, LensArgs, LoadArgs, LogitsArgs, PatchArgs, RunArgs, SaliencyArgs, ScoreArgs,
    TokenizeArgs, TraceArgs,
};

fn load(args: &LoadArgs) -> Result<LoadedModel, String> {
    let opts = args.options()?;
    let threads = opts.model().n_threads;
    load_with(args, &opts, move || Rc::new(CpuBackend::new(threads)))
}

/// Loads `args.model` on the backends `opts` asks for ([`open_backends`], the policy the JS
/// bindings use too), the CPU one made by `cpu` when one is needed.
fn load_with(
    args: &LoadArgs,
    opts: &LoadOptions,
    cpu: impl FnOnce() -> Rc<dyn Backend>,
) -> Result<LoadedModel, String> {
    let b = block_on(open_backends(opts, webgpu_options()?, cpu)).map_err(|e| format!("--backend webgpu: {e}"))?;
    if let Some(note) = &b.note {
        eprintln!("ggweb: {note}");
    }
    let (path, m) = (&args.model, opts.model());
    match (b.split, b.gpu.clone(), b.cpu.clone()) {
        (Some(n), Some(gpu), Some(cpu)) => load_from_path_split(path, Rc::new(gpu), cpu, n, m),
        _ => load_from_path(path, b.list().swap_remove(0), m),
    }
    .map_err(|e| e.to_string())
}

/// The CLI's WebGPU backend: encode time in thread-CPU milliseconds (`stats.webgpu.encodeMs`
/// counts the encoding, not the waits of a loaded machine). For kernel comparisons
/// (scripts/device-bench.sh) the environment can force the kernel variants:
/// `GGWEB_WEBGPU_KERNELS=workgroup|per-row`, `GGWEB_WEBGPU_SUBGROUPS=0|1`,
/// `GGWEB_WEBGPU_F16=0|1` (unset: the adapter decides), and `GGWEB_WEBGPU_INFO=1` prints
/// the adapter and the kernels in use.
fn webgpu_options() -> Result<WebGpuOptions, String> {
    use ggweb::webgpu::MatMulKernels;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let flag = |k: &str| match env(k).as_deref() {
        None => Ok(None),
        Some("0") => Ok(Some(false)),
        Some("1") => Ok(Some(true)),
        Some(v) => Err(format!("{k}={v}: expected 0 or 1")),
    };
    let kernels = match env("GGWEB_WEBGPU_KERNELS").as_deref() {
        None => MatMulKernels::Auto,
        Some("workgroup") => MatMulKernels::Workgroup,
        Some("per-row") => MatMulKernels::PerRow,
        Some(v) => return Err(format!("GGWEB_WEBGPU_KERNELS={v}: expected workgroup or per-row")),
    };
    Ok(WebGpuOptions {
        encode_clock: Some(|| thread_clock() * 1e3),
        mat_mul_kernels: kernels,
        subgroups: flag("GGWEB_WEBGPU_SUBGROUPS")?,
        shader_f16: flag("GGWEB_WEBGPU_F16")?,
        ..WebGpuOptions::default()
    })
}

/// Seconds since the first call: the profiler's clock with several threads.
pub(crate) fn clock() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// CPU seconds of the calling thread (Linux), else wall seconds: with one thread, the
/// profile then counts the time we ran, not the time other processes had the core.
pub(crate) fn thread_clock() -> f64 {
    cpu_seconds(CLOCK_THREAD_CPUTIME_ID).unwrap_or_else(clock)
}

/// CPU seconds of the whole process, every thread (Linux).
pub(crate) fn process_cpu() -> Option<f64> {
    cpu_seconds(CLOCK_PROCESS_CPUTIME_ID)
}

const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

#[cfg(target_os = "linux")]
fn cpu_seconds(clock_id: i32) -> Option<f64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock_id: i32, tp: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: libc's clock_gettime writes one timespec (two 64-bit fields on 64-bit Linux).
    let rc = unsafe { clock_gettime(clock_id, &mut ts) };
    (rc == 0 && cfg!(target_pointer_width = "64")).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

#[cfg(not(target_os = "linux"))]
fn cpu_seconds(_clock_id: i32) -> Option<f64> {
    None
}

/// The model and the input's tokens (never empty): `--ids 1,2,3` as given, else `--prompt`
/// tokenized.
fn session_and_prompt(load_args: &LoadArgs, input: &InputArgs) -> Result<(Session, Vec<u32>), String> {
    let session = Session::new(load(load_args)?);
    let ids = match (&input.ids, &input.prompt) {
        (Some(list), _) => list
            .split(',')
            .map(|x| x.trim().parse::<u32>().map_err(|_| format!("--ids: '{x}' is not a token id")))
            .collect::<Result<Vec<u32>, String>>()?,
        (None, p) => session.tokenizer.encode(p.as_deref().unwrap_or_default(), input.special),
    };
    if ids.is_empty() {
        return Err("the prompt encodes to no tokens".into());
    }
    Ok((session, ids))
}

pub fn generate(args: GenerateArgs) -> Result<(), String> {
    let opts = args.options()?;
    let json_out = args.json;
    let (mut s, prompt_ids) = session_and_prompt(&args.load, &args.input)?;
    let prompt = s.tokenizer.decode(&prompt_ids).map_err(|e| e.to_string())?;
    let top_k = opts.top_logprobs;
    s.start(prompt_ids.clone(), opts).map_err(|e| e.to_string())?;
    while !block_on(s.prompt_step()).map_err(|e| e.to_string())? {}
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if !json_out {
        write!(w, "{prompt}").ok();
    }
    let (mut tokens, mut text, mut logprobs, mut tops) = (Vec::new(), String::new(), Vec::new(), Vec::new());
    while let Some(item) = block_on(s.next()).map_err(|e| e.to_string())? {
        if !json_out {
            write!(w, "{}", item.text).ok();
            w.flush().ok();
        }
        tokens.push(item.token);
        text.push_str(&item.text);
        if top_k > 0 {
            logprobs.push(item.logprob);
            tops.push(item.top);
        }
    }
    let stats = s.stats();
    let stop = stats.stop.map(|r| r.as_str());
    if json_out {
        let mut v = json!({ "prompt_tokens": prompt_ids, "tokens": tokens, "text": text, "stop": stop });
        if top_k > 0 {
            v["logprobs"] = json!(logprobs);
            v["top_logprobs"] = json!(tops);
        }
        writeln!(w, "{v}").ok();
    } else {
        writeln!(w).ok();
    }
    Ok(())
}

pub fn score(args: ScoreArgs) -> Result<(), String> {
    let (top_k, json_out) = (args.top_k, args.json);
    let hooks = parse_hooks(&args.hook)?;
    let (mut s, ids) = session_and_prompt(&args.load, &args.input)?;
    let r = block_on(s.score(&ids, top_k, &hooks)).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if json_out {
        // The JS score result (`Score`'s own serialization) without the per-call keys the CLI
        // never printed (`cachedTokens`, `webgpu`).
        let mut v = serde_json::to_value(&r).expect("plain data");
        if let Some(o) = v.as_object_mut() {
            o.remove("cachedTokens");
            o.remove("webgpu");
        }
        writeln!(w, "{v}").ok();
    } else {
        writeln!(w, "| i | token | logprob | rank | entropy |\n|---|---|---|---|---|").ok();
        for i in 0..r.logprobs.len() {
            let t = r.tokens[i + 1];
            let piece = s.tokenizer.decode(&[t]).unwrap_or_default();
            writeln!(w, "| {} | {:?} | {:.4} | {} | {:.4} |", i + 1, piece, r.logprobs[i], r.ranks[i], r.entropies[i])
                .ok();
        }
        let n = r.logprobs.len().max(1) as f64;
        let nll: f64 = r.logprobs.iter().map(|&x| -(x as f64)).sum::<f64>() / n;
        writeln!(w, "perplexity {:.4} over {} predictions", nll.exp(), r.logprobs.len()).ok();
    }
    Ok(())
}

pub fn trace(args: TraceArgs) -> Result<(), String> {
    let taps: Vec<String> = args.taps.split(',').filter(|t| !t.is_empty()).map(String::from).collect();
    let json_out = args.json;
    let (mut s, ids) = session_and_prompt(&args.load, &args.input)?;
    let t = block_on(s.trace(&ids, &taps)).map_err(|e| e.to_string())?;
    // The nodes as the JS trace's `nodes` (TapValue's own serialization); the rest the CLI's own keys.
    let nodes: serde_json::Map<String, serde_json::Value> =
        t.nodes.iter().map(|n| (n.name.clone(), serde_json::to_value(n).expect("plain data"))).collect();
    let v = json!({ "tokens": t.tokens, "attn": t.attn, "hidden": t.hidden, "nodes": nodes, "compute_bytes": t.compute_bytes });
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if json_out {
        writeln!(w, "{v}").ok();
    } else {
        let hp = &s.model.hparams;
        writeln!(w, "{} tokens; compute {} B with the taps kept", t.tokens.len(), t.compute_bytes).ok();
        if let Some(a) = &t.attn {
            writeln!(w, "attn: {} layers of [{} heads][{n}][{n}]", a.len(), hp.n_head, n = t.tokens.len()).ok();
        }
        if let Some(h) = &t.hidden {
            writeln!(w, "hidden: {} arrays of [{}][{}]", h.len(), t.tokens.len(), hp.n_embd).ok();
        }
        for n in &t.nodes {
            writeln!(w, "{}: shape {:?}", n.name, n.shape()).ok();
        }
    }
    Ok(())
}

pub fn logits(args: LogitsArgs) -> Result<(), String> {
    let LoadedModel { mut model, tokenizer } = load(&args.load)?;
    let ids = tokenizer.encode(&args.prompt, args.special);
    if ids.is_empty() {
        return Err("the prompt encodes to no tokens".into());
    }
    let all = block_on(model.decode(Batch::all(&ids, 0))).map(|o| o.logits).map_err(|e| e.to_string())?;
    // Rows are written as f32 (shortest round-trip digits), not widened to f64.
    let rows: Vec<String> =
        all.chunks(model.hparams.n_vocab).map(|r| serde_json::to_string(r).expect("floats serialize")).collect();
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    writeln!(w, "{{\"tokens\":{},\"logits\":[{}]}}", json!(ids), rows.join(",")).ok();
    Ok(())
}

/// Only the header is read: the tokenizer lives in the metadata.
fn tokenizer_only(path: &str) -> Result<Tokenizer, String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let size = f.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    let mut reader = GgufStreamReader::new(Limits::default()).with_file_size(size);
    let mut buf = vec![0u8; 1 << 20];
    while reader.header().is_none() {
        let n = f.read(&mut buf).map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            return Err(format!("{path}: ended before the GGUF header did"));
        }
        reader.feed(&buf[..n], &mut NullSink).map_err(|e| format!("{path}: {e}"))?;
    }
    tokenizer_from_gguf(reader.header().expect("header parsed")).map_err(|e| format!("{path}: {e}"))
}

pub fn tokenize(args: TokenizeArgs) -> Result<(), String> {
    let (special, decode) = (args.special, args.decode);
    let tok = tokenizer_only(&args.model)?;
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |e: serde_json::Error| format!("stdin line {}: {e}", i + 1);
        if decode {
            let ids: Vec<u32> = serde_json::from_str(&line).map_err(bad)?;
            let text = tok.decode(&ids).map_err(|e| format!("stdin line {}: {e}", i + 1))?;
            writeln!(w, "{}", serde_json::to_string(&text).expect("a string serializes")).ok();
        } else {
            let text: String = serde_json::from_str(&line).map_err(bad)?;
            writeln!(w, "{}", json!(tok.encode(&text, special))).ok();
        }
    }
    Ok(())
}

/// WebGPU counters over `n` tokens, per token, as the JS `stats.webgpu` names them.
fn per_token(s: &WebGpuStats, n: usize) -> serde_json::Value {
    let n = n.max(1) as f64;
    json!({
        "dispatches": s.dispatches as f64 / n, "submits": s.submits as f64 / n, "readbacks": s.readbacks as f64 / n,
        "readbackBytes": s.readback_bytes as f64 / n, "encodeMs": s.encode_ms / n,
    })
}

pub fn bench(args: BenchArgs) -> Result<(), String> {
    let (n_prompt, n_gen, reps, json_out, profile) =
        (args.n_prompt, args.n_gen, args.reps.max(1), args.json, args.profile);
    let opts = args.load.options()?;
    let threads = opts.model().n_threads;
    let path = args.load.model.clone();
    // Decode steps of this many sequences at once (one batch per step, the KV cache's
    // sequence ids); tg then counts steps per second.
    let seqs = args.seqs as usize;
    // The profiler lives in the CPU backend: with WebGPU in the run there is nothing to time per op.
    let cpu_only = opts.backend() == ggweb::common::options::BackendChoice::Cpu;
    if profile && !cpu_only {
        return Err("--profile times the cpu backend's ops: leave out --backend webgpu and --gpu-layers".into());
    }
    let cpu = Rc::new(match (profile, threads) {
        (false, _) => CpuBackend::new(threads),
        (true, 1) => CpuBackend::with_profiler(threads, thread_clock),
        (true, _) => CpuBackend::with_profiler(threads, clock),
    });
    let t_load = Instant::now();
    let cpu_for_load = cpu.clone();
    let LoadedModel { mut model, .. } = load_with(&args.load, &opts, move || cpu_for_load)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let depths = args.n_past.as_deref().map(parse_depths).transpose()?;
    if let Some(depths) = depths {
        let run = DepthRun { n_gen, reps, threads, profile, json_out, path: &path, load_s };
        return bench_depths(&mut model, &cpu, &depths, &run);
    }
    if n_prompt + seqs * n_gen > model.n_ctx() {
        return Err(format!("-p {n_prompt} + -n {n_gen} exceeds the context ({})", model.n_ctx()));
    }
    // Fixed pseudo-random ids: bench numbers must not depend on a tokenizer or a prompt.
    let ids = bench_ids(n_prompt, model.hparams.n_vocab);
    let (mut pp, mut tg) = (Vec::new(), Vec::new());
    // Tokens per CPU second of the process (all threads): on a shared, loaded machine
    // closer to what an idle one would give than wall time, for one thread.
    let (mut pp_cpu, mut tg_cpu) = (Vec::new(), Vec::new());
    let (mut pp_prof, mut tg_prof) = (Vec::new(), Vec::new());
    // WebGPU work of the last repetition (None without a WebGPU backend): the first one
    // also compiles the pipelines, which the encode time would count.
    let (mut pp_gpu, mut tg_gpu) = (None, None);
    for _ in 0..reps {
        cpu.reset_profile();
        let g0 = model.webgpu_stats();
        let (t, c) = (Instant::now(), process_cpu());
        let logits = block_on(model.decode(Batch::last(&ids, 0))).map(|o| o.logits).map_err(|e| e.to_string())?;
        pp.push(n_prompt as f64 / t.elapsed().as_secs_f64());
        let g1 = model.webgpu_stats();
        if let (Some(c0), Some(c1)) = (c, process_cpu()) {
            pp_cpu.push(n_prompt as f64 / (c1 - c0));
        }
        pp_prof.extend(cpu.profile());
        cpu.reset_profile();
        let mut tok = ggweb::model::sampling::argmax(&logits);
        if seqs > 1 {
            model.kv.seq_cp(0, u64::MAX >> (64 - seqs));
        }
        let (t, c) = (Instant::now(), process_cpu());
        for i in 0..n_gen {
            let l = if seqs == 1 {
                block_on(model.decode(Batch::last(&[tok], n_prompt + i)))
            } else {
                let toks = vec![tok; seqs];
                let pos: Vec<SeqPos> = (0..seqs).map(|j| SeqPos { pos: (n_prompt + i) as u32, seqs: 1 << j }).collect();
                block_on(model.decode(Batch { tokens: &toks, logits: Logits::All, seq: &pos, ..Batch::default() }))
            }
            .map(|o| o.logits)
            .map_err(|e| e.to_string())?;
            tok = ggweb::model::sampling::argmax(&l[..model.hparams.n_vocab]);
        }
        tg.push(n_gen as f64 / t.elapsed().as_secs_f64());
        if let (Some(g0), Some(g1), Some(g2)) = (g0, g1, model.webgpu_stats()) {
            (pp_gpu, tg_gpu) = (Some(g1.since(&g0)), Some(g2.since(&g1)));
        }
        if let (Some(c0), Some(c1)) = (c, process_cpu()) {
            tg_cpu.push(n_gen as f64 / (c1 - c0));
        }
        tg_prof.extend(cpu.profile());
    }
    // Per token, averaged over the repetitions.
    let pp_table = profile_table(&pp_prof, (reps * n_prompt.max(1)) as f64);
    let tg_table = profile_table(&tg_prof, (reps * n_gen.max(1)) as f64);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let (pp_cpu_med, tg_cpu_med) = (median(&mut pp_cpu), median(&mut tg_cpu));
    let (pp_med, tg_med) = (median(&mut pp), median(&mut tg));
    // The repetitions' spread (each vector is sorted by `median`): on a shared machine, and
    // between processes, prefill swings more than decode, so a median alone hides it.
    let spread = |v: &[f64]| (v.first().copied().unwrap_or(f64::NAN), v.last().copied().unwrap_or(f64::NAN));
    let (pp_sp, tg_sp, pp_cpu_sp, tg_cpu_sp) = (spread(&pp), spread(&tg), spread(&pp_cpu), spread(&tg_cpu));
    let mem = model.memory_plan();
    let pp_gpu = pp_gpu.map(|s: WebGpuStats| per_token(&s, n_prompt));
    let tg_gpu = tg_gpu.map(|s: WebGpuStats| per_token(&s, n_gen));
    if json_out {
        println!(
            "{}",
            json!({
                "model": path, "backend": model.backend.name(), "threads": threads, "n_batch": model.n_batch,
                "n_prompt": n_prompt, "n_gen": n_gen, "reps": reps, "load_s": load_s,
                "prompt_tok_s": pp_med, "gen_tok_s": tg_med, "repacked_bytes": model.repacked_bytes,
                "prompt_tok_per_cpu_s": pp_cpu_med, "gen_tok_per_cpu_s": tg_cpu_med,
                "prompt_tok_s_all": pp, "gen_tok_s_all": tg,
                "prompt_tok_s_spread": [pp_sp.0, pp_sp.1], "gen_tok_s_spread": [tg_sp.0, tg_sp.1],
                "prompt_tok_per_cpu_s_spread": [pp_cpu_sp.0, pp_cpu_sp.1],
                "gen_tok_per_cpu_s_spread": [tg_cpu_sp.0, tg_cpu_sp.1],
                "memory": { "weights": mem.weights, "kv": mem.kv, "compute": mem.compute, "kv_type": model.kv.ty.name() },
                "profile": if profile { json!({ "pp": pp_table.to_json(), "tg": tg_table.to_json() }) } else { json!(null) },
                "memory_by_backend": model.memory_by_backend().iter().map(|m| json!({
                    "backend": m.backend, "weights": m.weights, "kv": m.kv, "compute": m.compute,
                })).collect::<Vec<_>>(),
                "copies_per_token": model.sched.last_run().copies,
                "webgpu_per_token": match (&pp_gpu, &tg_gpu) {
                    (Some(p), Some(t)) => json!({ "pp": p, "tg": t }),
                    _ => json!(null),
                },
            })
        );
    } else {
        println!("{}", model.describe());
        println!("| test | tokens/s (median of {reps}) | min–max | tokens per CPU second | min–max |");
        println!("|---|---|---|---|---|");
        let row = |name: String, med: f64, sp: (f64, f64), cmed: f64, csp: (f64, f64)| {
            println!("| {name} | {med:.2} | {:.2}–{:.2} | {cmed:.2} | {:.2}–{:.2} |", sp.0, sp.1, csp.0, csp.1)
        };
        row(format!("pp{n_prompt}"), pp_med, pp_sp, pp_cpu_med, pp_cpu_sp);
        row(format!("tg{n_gen}"), tg_med, tg_sp, tg_cpu_med, tg_cpu_sp);
        println!(
            "memory: weights {} B, kv {} B ({}), compute {} B; load {:.3} s",
            mem.weights,
            mem.kv,
            model.kv.ty.name(),
            mem.compute,
            load_s
        );
        if model.sched.n_backends() > 1 {
            for m in model.memory_by_backend() {
                println!("  {}: weights {} B, kv {} B, compute {} B", m.backend, m.weights, m.kv, m.compute);
            }
            let r = model.sched.last_run();
            println!("  last token: {} splits, {} copies ({} B)", r.splits, r.copies, r.copy_bytes);
        }
        if let (Some(p), Some(t)) = (&pp_gpu, &tg_gpu) {
            println!("| WebGPU per token | dispatches | submits | read-backs | read-back bytes | encode CPU ms |");
            println!("|---|---|---|---|---|---|");
            for (name, s) in [(format!("pp{n_prompt}"), p), (format!("tg{n_gen}"), t)] {
                let f = |k: &str| s[k].as_f64().unwrap_or(f64::NAN);
                println!(
                    "| {name} | {:.2} | {:.3} | {:.3} | {:.0} | {:.3} |",
                    f("dispatches"),
                    f("submits"),
                    f("readbacks"),
                    f("readbackBytes"),
                    f("encodeMs")
                );
            }
        }
        if profile {
            let clock = if threads == 1 { "thread CPU" } else { "wall" };
            println!("\nprofile pp{n_prompt}: {clock} ms per token by node class\n{}", pp_table.to_text());
            println!("profile tg{n_gen}: {clock} ms per token by node class\n{}", tg_table.to_text());
        }
    }
    Ok(())
}

/// Fixed pseudo-random ids: bench numbers must not depend on a tokenizer or a prompt
/// (bench/llama_cpp_native.py uses the same formula).
pub(crate) fn bench_ids(n: usize, n_vocab: usize) -> Vec<u32> {
    (0..n as u64).map(|i| ((i * 2654435761 + 12345) % n_vocab as u64) as u32).collect()
}

/// `--n-past 64,512,1000`: increasing context depths, each at least 1.
fn parse_depths(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let d: usize = part.parse().map_err(|_| format!("--n-past: '{part}' is not a token count"))?;
        if d == 0 || v.last().is_some_and(|&p| d <= p) {
            return Err(format!("--n-past {s}: depths must be increasing and at least 1"));
        }
        v.push(d);
    }
    if v.is_empty() {
        return Err("--n-past: give at least one depth, e.g. 64,512,1000".into());
    }
    Ok(v)
}

struct DepthRun<'a> {
    n_gen: usize,
    reps: usize,
    threads: usize,
    profile: bool,
    json_out: bool,
    path: &'a str,
    load_s: f64,
}

/// Decode cost against context depth: per depth D, the KV cache is filled with D prompt ids
/// (one untimed prompt `decode`), then `n_gen` greedy single-token steps at positions D.. are
/// timed, `reps` times from the same state (each repetition overwrites the same cache rows).
fn bench_depths(
    model: &mut ggweb::model::context::Gpt2,
    cpu: &CpuBackend,
    depths: &[usize],
    run: &DepthRun,
) -> Result<(), String> {
    let n_gen = run.n_gen.max(1);
    let max = *depths.last().expect("at least one depth");
    if max + n_gen > model.n_ctx() {
        return Err(format!(
            "--n-past {max} + -n {n_gen} exceeds the context ({}); pass a smaller -n or a larger --ctx",
            model.n_ctx()
        ));
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let mut rows = Vec::new();
    for &d in depths {
        let ids = bench_ids(d, model.hparams.n_vocab);
        let t = Instant::now();
        let logits = block_on(model.decode(Batch::last(&ids, 0))).map(|o| o.logits).map_err(|e| e.to_string())?;
        let fill_tok_s = d as f64 / t.elapsed().as_secs_f64();
        let first = ggweb::model::sampling::argmax(&logits);
        let (mut tg, mut tg_cpu, mut prof) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..run.reps {
            cpu.reset_profile();
            let mut tok = first;
            let (t, c) = (Instant::now(), process_cpu());
            for i in 0..n_gen {
                let l =
                    block_on(model.decode(Batch::last(&[tok], d + i))).map(|o| o.logits).map_err(|e| e.to_string())?;
                tok = ggweb::model::sampling::argmax(&l);
            }
            tg.push(n_gen as f64 / t.elapsed().as_secs_f64());
            if let (Some(c0), Some(c1)) = (c, process_cpu()) {
                tg_cpu.push(n_gen as f64 / (c1 - c0));
            }
            prof.extend(cpu.profile());
        }
        let table = profile_table(&prof, (run.reps * n_gen) as f64);
        rows.push((d, fill_tok_s, median(&tg), median(&tg_cpu), tg, table));
    }
    let (base, base_cpu) = (rows[0].2, rows[0].3);
    let kv_type = model.kv.ty.name();
    if run.json_out {
        let out: Vec<_> = rows
            .iter()
            .map(|(d, fill, tg, tgc, all, table)| {
                json!({
                    "n_past": d, "fill_tok_s": fill, "gen_tok_s": tg, "gen_tok_per_cpu_s": tgc, "gen_tok_s_all": all,
                    "slowdown": base / tg, "slowdown_cpu": base_cpu / tgc,
                    "profile": if run.profile { table.to_json() } else { json!(null) },
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "model": run.path, "backend": model.backend.name(), "threads": run.threads, "n_gen": n_gen,
                "reps": run.reps, "load_s": run.load_s, "kv_type": kv_type, "n_ctx": model.n_ctx(), "depths": out,
            })
        );
        return Ok(());
    }
    println!("{}", model.describe());
    println!("| n_past | decode tok/s (median of {}) | tok per CPU second | slowdown vs n_past {} (wall / CPU) | fill tok/s |", run.reps, rows[0].0);
    println!("|--:|--:|--:|--:|--:|");
    for (d, fill, tg, tgc, _, _) in &rows {
        println!("| {d} | {tg:.2} | {tgc:.2} | {:.2}× / {:.2}× | {fill:.1} |", base / tg, base_cpu / tgc);
    }
    println!("{n_gen} decode steps per repetition; KV cache {kv_type}, n_ctx {}", model.n_ctx());
    if run.profile {
        let clock = if run.threads == 1 { "thread CPU" } else { "wall" };
        for (d, _, _, _, _, table) in &rows {
            println!("\nprofile tg{n_gen} at n_past {d}: {clock} ms per token by node class\n{}", table.to_text());
        }
    }
    Ok(())
}

/// Profile rows merged by class and by op, in ms per token.
pub(crate) struct ProfileTable {
    by_class: Vec<(String, &'static str, f64, u64)>,
    by_op: Vec<(&'static str, f64, u64)>,
    total_ms: f64,
}

pub(crate) fn profile_table(entries: &[ggweb::cpu::ProfileEntry], n_tokens: f64) -> ProfileTable {
    use std::collections::BTreeMap;
    let mut by_class: BTreeMap<(String, &'static str), (f64, u64)> = BTreeMap::new();
    let mut by_op: BTreeMap<&'static str, (f64, u64)> = BTreeMap::new();
    for e in entries {
        let ms = e.secs * 1e3 / n_tokens;
        let c = by_class.entry((e.class.clone(), e.op)).or_default();
        c.0 += ms;
        c.1 += e.calls;
        let o = by_op.entry(e.op).or_default();
        o.0 += ms;
        o.1 += e.calls;
    }
    let mut by_class: Vec<_> = by_class.into_iter().map(|((c, op), (ms, n))| (c, op, ms, n)).collect();
    by_class.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut by_op: Vec<_> = by_op.into_iter().map(|(op, (ms, n))| (op, ms, n)).collect();
    by_op.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total_ms = by_op.iter().map(|o| o.1).sum();
    ProfileTable { by_class, by_op, total_ms }
}

impl ProfileTable {
    pub(crate) fn to_text(&self) -> String {
        let pct = |ms: f64| if self.total_ms > 0.0 { 100.0 * ms / self.total_ms } else { 0.0 };
        let mut s = String::from("| class | op | ms/token | % | calls |\n|---|---|---|---|---|\n");
        for (c, op, ms, n) in &self.by_class {
            s += &format!("| {c} | {op} | {ms:.3} | {:.1} | {n} |\n", pct(*ms));
        }
        s += &format!(
            "| total | | {:.3} | 100 | |\n\n| op | ms/token | % | calls |\n|---|---|---|---|\n",
            self.total_ms
        );
        for (op, ms, n) in &self.by_op {
            s += &format!("| {op} | {ms:.3} | {:.1} | {n} |\n", pct(*ms));
        }
        s
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "total_ms_per_token": self.total_ms,
            "by_class": self.by_class.iter().map(|(c, op, ms, n)| json!({"class": c, "op": op, "ms_per_token": ms, "calls": n})).collect::<Vec<_>>(),
            "by_op": self.by_op.iter().map(|(op, ms, n)| json!({"op": op, "ms_per_token": ms, "calls": n})).collect::<Vec<_>>(),
        })
    }
}

/// `ggweb run`: one pass with hooks and captures, as the JS `model.run` (JSON out).
pub fn run(args: RunArgs) -> Result<(), String> {
    let (mut s, ids) = session_and_prompt(&args.load, &args.input)?;
    let hooks = parse_hooks(&args.hook)?;
    let capture: Vec<String> = args.capture.split(',').filter(|c| !c.is_empty()).map(String::from).collect();
    let grad: Option<ggweb::model::grad::GradSpec> =
        args.grad.as_deref().map(|g| serde_json::from_str(g).map_err(|e| format!("--grad {g}: {e}"))).transpose()?;
    let r = block_on(s.run_grad(&ids, &capture, &hooks, grad.as_ref())).map_err(|e| e.to_string())?;
    let n_vocab = s.model.hparams.n_vocab;
    let logits: Vec<&[f32]> = r.logits.chunks(n_vocab).collect();
    let logits = if args.all_logits { logits } else { logits[logits.len() - 1..].to_vec() };
    let cache: serde_json::Map<String, serde_json::Value> =
        r.cache.iter().map(|v| (v.name.clone(), serde_json::to_value(v).expect("plain data"))).collect();
    let mut out = json!({ "tokens": r.tokens, "logits": logits, "cache": cache });
    if let (Some(m), Some(g)) = (r.metric, &r.grads) {
        let grads: serde_json::Map<String, serde_json::Value> =
            g.iter().map(|v| (v.name.clone(), serde_json::to_value(v).expect("plain data"))).collect();
        out["metric"] = json!(m);
        out["grads"] = serde_json::Value::Object(grads);
    }
    println!("{out}");
    Ok(())
}

/// `ggweb patch`: an activation patching sweep, as the JS `model.patch` (JSON out).
pub fn patch(args: PatchArgs) -> Result<(), String> {
    let t0 = Instant::now();
    let mut s = Session::new(load(&args.load)?);
    let clean = s.tokenizer.encode(&args.clean, false);
    let corrupted = s.tokenizer.encode(&args.corrupted, false);
    let t1 = Instant::now();
    let p = block_on(s.patch(&clean, &corrupted, &args.at, args.answer, args.against, Some(&args.method)))
        .map_err(|e| e.to_string())?;
    if args.timing {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        eprintln!(
            "patch {} ({}): {} tokens, load {:.1} ms, sweep {:.1} ms",
            args.at,
            args.method,
            clean.len(),
            ms(t1 - t0),
            ms(t1.elapsed())
        );
    }
    println!("{}", json!(p));
    Ok(())
}

/// `ggweb saliency`: input attribution, as the JS `model.saliency` (JSON out).
pub fn saliency(args: SaliencyArgs) -> Result<(), String> {
    let (mut s, ids) = session_and_prompt(&args.load, &args.input)?;
    let of: ggweb::model::grad::Metric =
        serde_json::from_str(&args.of).map_err(|e| format!("--of {}: {e}", args.of))?;
    let r = block_on(s.saliency(&ids, &of, &args.method, args.steps)).map_err(|e| e.to_string())?;
    println!("{}", json!(r));
    Ok(())
}

/// `ggweb lens`: the logit lens, as the JS `model.logitLens` (JSON out).
pub fn lens(args: LensArgs) -> Result<(), String> {
    let (mut s, ids) = session_and_prompt(&args.load, &args.input)?;
    let l = block_on(s.logit_lens(&ids, args.top_k)).map_err(|e| e.to_string())?;
    println!("{}", json!(l));
    Ok(())
}

/// `--hook` values: one JSON [`Hook`](ggweb::model::hooks::Hook) each.
fn parse_hooks(args: &[String]) -> Result<Vec<ggweb::model::hooks::Hook>, String> {
    args.iter().map(|h| serde_json::from_str(h).map_err(|e| format!("--hook {h}: {e}"))).collect()
}
