//! `ggweb generate | score | trace | logits | tokenize | bench`: the commands that run the
//! model, each through the session core ([`Session`]) where it generates or scores.

use std::io::{BufRead, Write};
use std::rc::Rc;
use std::time::Instant;

use ggweb::backend::Backend;
use ggweb::cpu::CpuBackend;
use ggweb::gguf::{GgufStreamReader, Limits, NullSink};
use ggweb::model::context::{block_on, Batch, Gpt2Options, Logits, SeqPos};
use ggweb::model::loader::{load_from_path, load_from_path_split, tokenizer_from_gguf, LoadedModel};
use ggweb::model::options::parse_kv_type;
use ggweb::model::sampling::SamplingParams;
use ggweb::model::session::{GenerateOptions, Session};
use ggweb::tokenizer::Tokenizer;
use ggweb::webgpu::{WebGpuBackend, WebGpuOptions, WebGpuStats};
use serde_json::json;

use crate::args::Args;

pub const GENERATE_USAGE: &str = "ggweb generate --model M (--prompt P | --ids I,I,...) [--n-predict N] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--repeat-last-n N] [--seed S] [--stop S] [--logit-bias ID=BIAS,...] [--ignore-eos] [--top-logprobs K] [--special] [--batch B] [--ctx C] [--threads T] [--kv-type f32|f16] [--backend cpu|webgpu] [--gpu-layers N] [--json]";
pub const SCORE_USAGE: &str =
    "ggweb score --model M (--prompt P | --ids I,I,...) [--top-k K] [--special] [--batch B] [--ctx C] [--kv-type f32|f16] [--backend cpu|webgpu] [--json]";
pub const TRACE_USAGE: &str = "ggweb trace --model M (--prompt P | --ids I,I,...) [--taps attn,hidden,NODE...] [--special] [--ctx C] [--kv-type f32|f16] [--backend cpu|webgpu] [--json]";
pub const LOGITS_USAGE: &str =
    "ggweb logits --model M --prompt P [--batch B] [--special] [--kv-type f32|f16] [--backend cpu|webgpu] [--gpu-layers N]";
pub const TOKENIZE_USAGE: &str = "ggweb tokenize --model M [--special] [--decode]   (stdin: one JSON string, or with --decode one JSON array of ids, per line)";
pub const BENCH_USAGE: &str = "ggweb bench --model M [-p 128] [-n 64] [--threads T] [--batch B] [--reps R] [--kv-type f32|f16] [--n-past D1,D2,...] [--seqs N] [--backend cpu|webgpu] [--gpu-layers N] [--profile] [--json]\n  --n-past: decode at context depths instead: per depth, fill the KV cache with D prompt ids, then time -n decode steps at positions D.. (the slowdown is against the first depth)\n  --seqs N: decode N sequences per step (one batch, sequence ids in the KV cache); tg is then steps per second";

fn backend(args: &Args) -> Result<Rc<dyn Backend>, String> {
    let threads: usize = args.get(&["threads", "t"], 1)?;
    match args.str(&["backend"]).as_deref() {
        None | Some("cpu") => Ok(Rc::new(CpuBackend::new(threads))),
        Some("webgpu") => {
            let gpu =
                ggweb::webgpu::WebGpuBackend::new(webgpu_options()).map_err(|e| format!("--backend webgpu: {e}"))?;
            Ok(Rc::new(gpu))
        }
        Some(other) => Err(format!("--backend {other}: choose cpu or webgpu")),
    }
}

fn load(args: &Args) -> Result<LoadedModel, String> {
    load_on(args, backend(args)?)
}

fn load_on(args: &Args, backend: Rc<dyn Backend>) -> Result<LoadedModel, String> {
    let path = args.required(&["model", "m"])?;
    let opts = Gpt2Options {
        n_ctx: args.get(&["ctx", "c"], 0)?,
        n_batch: args.get(&["batch", "b"], 32)?,
        n_threads: args.get(&["threads", "t"], 1)?,
        kv_type: match args.str(&["kv-type"]) {
            None => Gpt2Options::default().kv_type,
            Some(s) => parse_kv_type("--kv-type", &s).map_err(|e| e.to_string())?,
        },
    };
    if let Some(n) = args.str(&["gpu-layers", "ngl"]) {
        let n: usize = n.parse().map_err(|_| format!("--gpu-layers: cannot parse '{n}'"))?;
        return load_split(args, &path, n, opts);
    }
    load_from_path(&path, backend, opts).map_err(|e| e.to_string())
}

/// `--gpu-layers N`: the last N blocks (and the head; the embeddings too when N exceeds
/// the block count) on WebGPU, the rest, and any op WebGPU lacks, on the CPU.
fn load_split(args: &Args, path: &str, gpu_layers: usize, opts: Gpt2Options) -> Result<LoadedModel, String> {
    if !matches!(args.str(&["backend"]).as_deref(), None | Some("webgpu")) {
        return Err("--gpu-layers splits the model between webgpu and cpu: leave out --backend or pass webgpu".into());
    }
    let gpu = WebGpuBackend::new(webgpu_options()).map_err(|e| format!("--gpu-layers: WebGPU: {e}"))?;
    let cpu = Rc::new(CpuBackend::new(opts.n_threads));
    load_from_path_split(path, Rc::new(gpu), cpu, gpu_layers, opts).map_err(|e| e.to_string())
}

/// The CLI's WebGPU backend: encode time in thread-CPU milliseconds (`stats.webgpu.encodeMs`
/// counts the encoding, not the waits of a loaded machine).
fn webgpu_options() -> WebGpuOptions {
    WebGpuOptions { encode_clock: Some(|| thread_clock() * 1e3), ..WebGpuOptions::default() }
}

/// Seconds since the first call: the profiler's clock with several threads.
fn clock() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// CPU seconds of the calling thread (Linux), else wall seconds: with one thread, the
/// profile then counts the time we ran, not the time other processes had the core.
fn thread_clock() -> f64 {
    cpu_seconds(CLOCK_THREAD_CPUTIME_ID).unwrap_or_else(clock)
}

/// CPU seconds of the whole process, every thread (Linux).
fn process_cpu() -> Option<f64> {
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

/// `--stop`: stop strings separated by `|` would be ambiguous, so each `--stop` value is one
/// string; `--logit-bias ID=BIAS[,ID=BIAS...]` (`-inf` bans).
/// Defaults are `GenerateOptions::default()`'s, the ones the JS options get too.
fn generate_options(args: &Args) -> Result<GenerateOptions, String> {
    let d = GenerateOptions::default();
    let s = &d.sampling;
    let sampling = SamplingParams {
        temperature: args.get(&["temp"], s.temperature)?,
        top_k: args.get(&["top-k"], s.top_k)?,
        top_p: args.get(&["top-p"], s.top_p)?,
        min_p: args.get(&["min-p"], s.min_p)?,
        repeat_penalty: args.get(&["repeat-penalty"], s.repeat_penalty)?,
        repeat_last_n: args.get(&["repeat-last-n"], s.repeat_last_n)?,
        seed: args.get(&["seed"], s.seed)?,
    };
    let mut logit_bias = Vec::new();
    if let Some(spec) = args.str(&["logit-bias"]) {
        for part in spec.split(',').filter(|p| !p.is_empty()) {
            let (id, bias) = part.split_once('=').ok_or_else(|| format!("--logit-bias: '{part}' is not ID=BIAS"))?;
            let id: u32 = id.trim().parse().map_err(|_| format!("--logit-bias: '{id}' is not a token id"))?;
            let bias: f32 = bias.trim().parse().map_err(|_| format!("--logit-bias: '{bias}' is not a number"))?;
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(format!("--logit-bias: {id}={bias}: a bias must be a number or -inf"));
            }
            logit_bias.push((id, bias));
        }
    }
    Ok(GenerateOptions {
        max_tokens: args.get(&["n-predict", "n"], d.max_tokens)?,
        sampling,
        logit_bias,
        ignore_eos: args.flag("ignore-eos"),
        stop: args.str(&["stop"]).into_iter().collect(),
        top_logprobs: args.get(&["top-logprobs"], d.top_logprobs)?,
        reuse_prompt: d.reuse_prompt,
        ..GenerateOptions::default()
    })
}

/// The model and the input's tokens (never empty): `--ids 1,2,3` as given, else `--prompt`
/// tokenized.
fn session_and_prompt(args: &Args) -> Result<(Session, Vec<u32>), String> {
    let given = args.str(&["ids"]);
    let special = args.flag("special");
    let prompt = if given.is_none() { Some(args.required(&["prompt", "p"])?) } else { None };
    let session = Session::new(load(args)?);
    let ids = match (given, prompt) {
        (Some(list), _) => list
            .split(',')
            .map(|x| x.trim().parse::<u32>().map_err(|_| format!("--ids: '{x}' is not a token id")))
            .collect::<Result<Vec<u32>, String>>()?,
        (None, p) => session.tokenizer.encode(&p.unwrap_or_default(), special),
    };
    if ids.is_empty() {
        return Err("the prompt encodes to no tokens".into());
    }
    Ok((session, ids))
}

pub fn generate(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["json", "special", "ignore-eos"])?;
    let opts = generate_options(&args)?;
    let json_out = args.flag("json");
    let (mut s, prompt_ids) = session_and_prompt(&args)?;
    let prompt = s.tokenizer.decode(&prompt_ids).map_err(|e| e.to_string())?;
    args.finish()?;
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
            tops.push(
                item.top
                    .iter()
                    .map(|t| json!({ "token": t.token, "text": t.text, "logprob": t.logprob }))
                    .collect::<Vec<_>>(),
            );
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

pub fn score(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["json", "special"])?;
    let top_k: usize = args.get(&["top-k"], 0)?;
    let json_out = args.flag("json");
    let (mut s, ids) = session_and_prompt(&args)?;
    args.finish()?;
    let r = block_on(s.score(&ids, top_k)).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if json_out {
        let top: Vec<Vec<serde_json::Value>> = r
            .top
            .iter()
            .map(|row| row.iter().map(|&(token, logprob)| json!({ "token": token, "logprob": logprob })).collect())
            .collect();
        let v = json!({
            "tokens": r.tokens, "logprobs": r.logprobs, "ranks": r.ranks, "entropies": r.entropies, "top": top,
        });
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

pub fn trace(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["json", "special"])?;
    let taps: Vec<String> = args
        .str(&["taps"])
        .unwrap_or_else(|| "attn,hidden".into())
        .split(',')
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect();
    let json_out = args.flag("json");
    let (mut s, ids) = session_and_prompt(&args)?;
    args.finish()?;
    let t = block_on(s.trace(&ids, &taps)).map_err(|e| e.to_string())?;
    let mut nodes = serde_json::Map::new();
    for n in &t.nodes {
        nodes.insert(n.name.clone(), json!({ "shape": row_major_shape(n.ne), "data": n.data }));
    }
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
            writeln!(w, "{}: shape {:?}", n.name, row_major_shape(n.ne)).ok();
        }
    }
    Ok(())
}

/// A ggml shape (`ne[0]` fastest) outermost first, as NumPy writes it, without the
/// leading 1s of unused dimensions (at least one dimension stays).
pub fn row_major_shape(ne: [i64; 4]) -> Vec<i64> {
    let mut v: Vec<i64> = ne.iter().rev().copied().collect();
    while v.len() > 1 && v[0] == 1 {
        v.remove(0);
    }
    v
}

pub fn logits(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["special"])?;
    let prompt = args.required(&["prompt", "p"])?;
    let special = args.flag("special");
    let LoadedModel { mut model, tokenizer } = load(&args)?;
    args.finish()?;
    let ids = tokenizer.encode(&prompt, special);
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

pub fn tokenize(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["special", "decode"])?;
    let path = args.required(&["model", "m"])?;
    let (special, decode) = (args.flag("special"), args.flag("decode"));
    args.finish()?;
    let tok = tokenizer_only(&path)?;
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

pub fn bench(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["json", "profile"])?;
    let n_prompt: usize = args.get(&["p", "n-prompt"], 128)?;
    let n_gen: usize = args.get(&["n", "n-gen"], 64)?;
    let reps: usize = args.get(&["reps", "r"], 3)?.max(1);
    let json_out = args.flag("json");
    let profile = args.flag("profile");
    let threads: usize = args.get(&["threads", "t"], 1)?;
    // Decode steps of this many sequences at once (one batch per step, the KV cache's
    // sequence ids); tg then counts steps per second.
    let seqs: usize = args.get(&["seqs"], 1)?;
    if !(1..=64).contains(&seqs) {
        return Err(format!("--seqs {seqs}: 1 to 64"));
    }
    let path = args.required(&["model", "m"])?;
    // The profiler lives in the CPU backend: with WebGPU in the run there is nothing to time per op.
    let cpu_only =
        matches!(args.str(&["backend"]).as_deref(), None | Some("cpu")) && args.str(&["gpu-layers", "ngl"]).is_none();
    if profile && !cpu_only {
        return Err("--profile times the cpu backend's ops: leave out --backend webgpu and --gpu-layers".into());
    }
    let cpu = Rc::new(match (profile, threads) {
        (false, _) => CpuBackend::new(threads),
        (true, 1) => CpuBackend::with_profiler(threads, thread_clock),
        (true, _) => CpuBackend::with_profiler(threads, clock),
    });
    let t_load = Instant::now();
    let LoadedModel { mut model, .. } = if cpu_only { load_on(&args, cpu.clone())? } else { load(&args)? };
    let load_s = t_load.elapsed().as_secs_f64();
    let depths = args.str(&["n-past"]).map(|s| parse_depths(&s)).transpose()?;
    args.finish()?;
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
    let mem = model.memory_plan();
    let pp_gpu = pp_gpu.map(|s: WebGpuStats| per_token(&s, n_prompt));
    let tg_gpu = tg_gpu.map(|s: WebGpuStats| per_token(&s, n_gen));
    if json_out {
        println!(
            "{}",
            json!({
                "model": path, "backend": model.backend.name(), "threads": threads, "n_batch": model.n_batch,
                "n_prompt": n_prompt, "n_gen": n_gen, "reps": reps, "load_s": load_s,
                "prompt_tok_s": pp_med, "gen_tok_s": tg_med,
                "prompt_tok_per_cpu_s": pp_cpu_med, "gen_tok_per_cpu_s": tg_cpu_med,
                "prompt_tok_s_all": pp, "gen_tok_s_all": tg,
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
        println!("| test | tokens/s (median of {reps}) | tokens per CPU second |");
        println!("|---|---|---|");
        println!("| pp{n_prompt} | {pp_med:.2} | {pp_cpu_med:.2} |");
        println!("| tg{n_gen} | {tg_med:.2} | {tg_cpu_med:.2} |");
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
fn bench_ids(n: usize, n_vocab: usize) -> Vec<u32> {
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
/// (one untimed `eval_prompt`), then `n_gen` greedy single-token steps at positions D.. are
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
struct ProfileTable {
    by_class: Vec<(String, &'static str, f64, u64)>,
    by_op: Vec<(&'static str, f64, u64)>,
    total_ms: f64,
}

fn profile_table(entries: &[ggweb::cpu::ProfileEntry], n_tokens: f64) -> ProfileTable {
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
    fn to_text(&self) -> String {
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

    fn to_json(&self) -> serde_json::Value {
        json!({
            "total_ms_per_token": self.total_ms,
            "by_class": self.by_class.iter().map(|(c, op, ms, n)| json!({"class": c, "op": op, "ms_per_token": ms, "calls": n})).collect::<Vec<_>>(),
            "by_op": self.by_op.iter().map(|(op, ms, n)| json!({"op": op, "ms_per_token": ms, "calls": n})).collect::<Vec<_>>(),
        })
    }
}
