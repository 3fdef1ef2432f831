//! `ggweb generate | logits | tokenize | bench`: the commands that run the model.

use std::io::{BufRead, Write};
use std::rc::Rc;
use std::time::Instant;

use ggweb::backend::Backend;
use ggweb::cpu::CpuBackend;
use ggweb::gguf::{GgufStreamReader, Limits, NullSink};
use ggweb::model::gpt2::Gpt2Options;
use ggweb::model::loader::{load_from_path, tokenizer_from_gguf, LoadedModel};
use ggweb::model::sampling::{Sampler, SamplingParams};
use ggweb::tokenizer::Tokenizer;
use serde_json::json;

use crate::args::Args;

pub const GENERATE_USAGE: &str = "ggweb generate --model M --prompt P [--n-predict N] [--temp T] [--top-k K] [--top-p P] [--repeat-penalty R] [--seed S] [--batch B] [--ctx C] [--threads T] [--json]";
pub const LOGITS_USAGE: &str = "ggweb logits --model M --prompt P [--batch B] [--special]";
pub const TOKENIZE_USAGE: &str = "ggweb tokenize --model M [--special] [--decode]   (stdin: one JSON string, or with --decode one JSON array of ids, per line)";
pub const BENCH_USAGE: &str = "ggweb bench --model M [-p 128] [-n 64] [--threads T] [--batch B] [--reps R] [--json]";

fn backend(args: &Args) -> Result<Rc<dyn Backend>, String> {
    let threads: usize = args.get(&["threads", "t"], 1)?;
    match args.str(&["backend"]).as_deref() {
        None | Some("cpu") => Ok(Rc::new(CpuBackend::new(threads))),
        Some("webgpu") => {
            let gpu = ggweb::webgpu::WebGpuBackend::new(ggweb::webgpu::WebGpuOptions::default())
                .map_err(|e| format!("--backend webgpu: {e}"))?;
            Ok(Rc::new(gpu))
        }
        Some(other) => Err(format!("--backend {other}: choose cpu or webgpu")),
    }
}

fn load(args: &Args) -> Result<LoadedModel, String> {
    let path = args.required(&["model", "m"])?;
    let opts = Gpt2Options {
        n_ctx: args.get(&["ctx", "c"], 0)?,
        n_batch: args.get(&["batch", "b"], 32)?,
        n_threads: args.get(&["threads", "t"], 1)?,
    };
    let backend = backend(args)?;
    load_from_path(&path, backend, opts).map_err(|e| e.to_string())
}

pub fn generate(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["json", "special"])?;
    let prompt = args.required(&["prompt", "p"])?;
    let n_predict: usize = args.get(&["n-predict", "n"], 32)?;
    let params = SamplingParams {
        temperature: args.get(&["temp"], 0.8)?,
        top_k: args.get(&["top-k"], 40)?,
        top_p: args.get(&["top-p"], 0.95)?,
        repeat_penalty: args.get(&["repeat-penalty"], 1.0)?,
        repeat_last_n: args.get(&["repeat-last-n"], 64)?,
        seed: args.get(&["seed"], 0)?,
    };
    let json_out = args.flag("json");
    let special = args.flag("special");
    let LoadedModel { mut model, tokenizer } = load(&args)?;
    args.finish()?;

    let prompt_ids = tokenizer.encode(&prompt, special);
    if prompt_ids.is_empty() {
        return Err("the prompt encodes to no tokens".into());
    }
    let mut logits = model.eval_prompt(&prompt_ids, 0, false).map_err(|e| e.to_string())?;
    let mut sampler = Sampler::new(params);
    let mut history = prompt_ids.clone();
    let mut out = Vec::new();
    let mut decoder = tokenizer.stream_decoder();
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if !json_out {
        write!(w, "{prompt}").ok();
    }
    let mut n_past = prompt_ids.len();
    while out.len() < n_predict && n_past < model.n_ctx() {
        let t = sampler.sample(&logits, &history);
        out.push(t);
        history.push(t);
        if !json_out {
            let piece = decoder.push(&tokenizer, t).map_err(|e| e.to_string())?;
            write!(w, "{piece}").ok();
            w.flush().ok();
        }
        if Some(t) == tokenizer.eos() {
            break;
        }
        logits = model.eval(&[t], n_past, false).map_err(|e| e.to_string())?;
        n_past += 1;
    }
    if json_out {
        let text = tokenizer.decode(&out).map_err(|e| e.to_string())?;
        writeln!(w, "{}", json!({ "prompt_tokens": prompt_ids, "tokens": out, "text": text })).ok();
    } else {
        writeln!(w, "{}", decoder.flush()).ok();
    }
    Ok(())
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
    let all = model.eval_prompt(&ids, 0, true).map_err(|e| e.to_string())?;
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

pub fn bench(argv: &[String]) -> Result<(), String> {
    let args = Args::parse(argv, &["json"])?;
    let n_prompt: usize = args.get(&["p", "n-prompt"], 128)?;
    let n_gen: usize = args.get(&["n", "n-gen"], 64)?;
    let reps: usize = args.get(&["reps", "r"], 3)?.max(1);
    let json_out = args.flag("json");
    let threads: usize = args.get(&["threads", "t"], 1)?;
    let path = args.required(&["model", "m"])?;
    let t_load = Instant::now();
    let LoadedModel { mut model, .. } = load(&args)?;
    let load_s = t_load.elapsed().as_secs_f64();
    args.finish()?;
    if n_prompt + n_gen > model.n_ctx() {
        return Err(format!("-p {n_prompt} + -n {n_gen} exceeds the context ({})", model.n_ctx()));
    }
    // Fixed pseudo-random ids: bench numbers must not depend on a tokenizer or a prompt.
    let n_vocab = model.hparams.n_vocab as u64;
    let ids: Vec<u32> = (0..n_prompt as u64).map(|i| ((i * 2654435761 + 12345) % n_vocab) as u32).collect();
    let (mut pp, mut tg) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let t = Instant::now();
        let logits = model.eval_prompt(&ids, 0, false).map_err(|e| e.to_string())?;
        pp.push(n_prompt as f64 / t.elapsed().as_secs_f64());
        let mut tok = ggweb::model::sampling::argmax(&logits);
        let t = Instant::now();
        for i in 0..n_gen {
            let l = model.eval(&[tok], n_prompt + i, false).map_err(|e| e.to_string())?;
            tok = ggweb::model::sampling::argmax(&l);
        }
        tg.push(n_gen as f64 / t.elapsed().as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let (pp_med, tg_med) = (median(&mut pp), median(&mut tg));
    let mem = model.memory_plan();
    if json_out {
        println!(
            "{}",
            json!({
                "model": path, "backend": model.backend.name(), "threads": threads, "n_batch": model.n_batch,
                "n_prompt": n_prompt, "n_gen": n_gen, "reps": reps, "load_s": load_s,
                "prompt_tok_s": pp_med, "gen_tok_s": tg_med,
                "memory": { "weights": mem.weights, "kv": mem.kv, "compute": mem.compute },
            })
        );
    } else {
        println!("{}", model.describe());
        println!("| test | tokens/s (median of {reps}) |");
        println!("|---|---|");
        println!("| pp{n_prompt} | {pp_med:.2} |");
        println!("| tg{n_gen} | {tg_med:.2} |");
        println!("memory: weights {} B, kv {} B, compute {} B; load {:.3} s", mem.weights, mem.kv, mem.compute, load_s);
    }
    Ok(())
}
