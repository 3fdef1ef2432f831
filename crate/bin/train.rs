//! `ggweb train`: the JS `model.train` on a text file, natively on every core by default, with
//! a progress line on stderr (step, loss, tokens/s, ETA), then `model.save` to `--out` — or,
//! with `--lora-rank`, `model.saveLora` (the llama.cpp adapter; `--merge`: `model.save`, the
//! adapter merged). The flags go through the same checked option structs as the JS API's
//! ([`TrainParams`], [`SaveParams`], [`SaveLoraParams`]); errors name the flags.

use std::io::{IsTerminal, Write};
use std::rc::Rc;
use std::time::Instant;

use ggweb::common::options::{from_value, LoadOptions, SaveLoraParams, SaveParams, TrainParams};
use ggweb::cpu::CpuBackend;
use ggweb::model::context::block_on;
use ggweb::model::loader::load_from_path;
use ggweb::model::session::Session;
use serde_json::{json, Map, Value};

use crate::args::TrainArgs;

/// A message of the shared option checks with the JS keys written as this command's flags.
fn flags(msg: &str) -> String {
    let mut m = msg.strip_prefix("train options: ").unwrap_or(msg).to_string();
    for (key, flag) in [
        ("optimizer.lr", "--lr"),
        ("seqLen", "--seq-len"),
        ("batchSize", "--batch"),
        ("steps", "--steps"),
        ("gradClip", "--grad-clip"),
        ("nThreads", "--n-threads"),
        ("lora.rank", "--lora-rank"),
        ("lora.alpha", "--lora-alpha"),
        ("lora.targets", "--lora-targets"),
        ("lora: { rank }", "--lora-rank R"),
    ] {
        m = m.replace(key, flag);
    }
    m
}

/// `h:mm:ss` of a number of seconds.
fn hms(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

pub fn run(a: TrainArgs) -> Result<(), String> {
    let lora = a.lora_rank.is_some();
    if !lora {
        for (flag, given) in [
            ("--lora-alpha", a.lora_alpha.is_some()),
            ("--lora-targets", a.lora_targets.is_some()),
            ("--merge", a.merge),
        ] {
            if given {
                return Err(format!("{flag} needs --lora-rank (it sets up the LoRA adapter)"));
            }
        }
    }
    // The options, checked before the model is read (JSON has no NaN or infinity: named here).
    for (flag, v) in [("--lr", a.lr), ("--grad-clip", a.grad_clip), ("--lora-alpha", a.lora_alpha)] {
        if let Some(v) = v.filter(|v| !v.is_finite()) {
            return Err(format!("{flag} must be a finite number, got {v}"));
        }
    }
    let mut o = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    };
    put("seqLen", a.seq_len.map(Value::from));
    put("batchSize", a.batch.map(Value::from));
    put("steps", Some(Value::from(a.steps)));
    put("gradClip", a.grad_clip.map(Value::from));
    put("seed", a.seed.map(Value::from));
    if let Some(rank) = a.lora_rank {
        let mut l = Map::new();
        l.insert("rank".into(), Value::from(rank));
        if let Some(alpha) = a.lora_alpha {
            l.insert("alpha".into(), Value::from(alpha));
        }
        if let Some(t) = &a.lora_targets {
            l.insert("targets".into(), t.split(',').map(|t| Value::from(t.trim())).collect());
        }
        put("lora", Some(Value::Object(l)));
    }
    let opt = a.optimizer.clone().unwrap_or_else(|| "adamw".into());
    if opt != "adamw" && opt != "sgd" {
        return Err(format!("--optimizer must be adamw or sgd, got {opt:?}"));
    }
    put("optimizer", Some(json!({ "type": opt, "lr": a.lr.unwrap_or(ggweb::common::options::DEFAULT_TRAIN_LR) })));
    let params: TrainParams = from_value("train options", Value::Object(o)).map_err(|e| flags(&e.to_string()))?;
    // What --out gets: the adapter (saveLora's types) or the model (save's).
    enum Out {
        Model(ggweb::model::export::SaveType),
        Adapter(ggweb::types::GgmlType),
    }
    let out = if lora && !a.merge {
        let p = SaveLoraParams { ty: a.out_type.clone(), optimizer: None };
        Out::Adapter(p.ty().map_err(|e| e.to_string().replace("saveLora: type", "--type (of an adapter)"))?)
    } else {
        let p = SaveParams { ty: a.out_type.clone(), optimizer: None };
        Out::Model(p.save_type().map_err(|e| e.to_string().replace("save: type", "--type"))?)
    };
    let threads = match a.n_threads {
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
    };
    let load: LoadOptions = from_value("load options", json!({ "nThreads": threads, "backend": "cpu" }))
        .map_err(|e| flags(&e.to_string().replace("load options: ", "")))?;
    let text = std::fs::read_to_string(&a.data).map_err(|e| format!("--data {}: {e}", a.data))?;

    let gpt2 = load.model();
    // Full training resumes the checkpoint's weights: the model is read from it.
    let model_path = match (&a.resume, lora) {
        (Some(r), false) => r.as_str(),
        _ => a.model.as_str(),
    };
    let loaded = load_from_path(model_path, Rc::new(CpuBackend::new(gpt2.n_threads)), gpt2)
        .map_err(|e| format!("{model_path}: {e}"))?;
    let mut s = Session::new(loaded);
    if let (Some(r), true) = (&a.resume, lora) {
        let bytes = std::fs::read(r).map_err(|e| format!("--resume {r}: {e}"))?;
        s.load_lora(&bytes).map_err(|e| format!("--resume {r}: {e}"))?;
    }
    if let Some(r) = &a.resume {
        if !s.model.opt_state.as_ref().is_some_and(|o| o.resume) {
            return Err(format!(
                "--resume {r}: the file has no optimizer state to resume (write one with --checkpoint)"
            ));
        }
    }
    let cfg = params.config(s.model.n_ctx()).map_err(|e| flags(&e.to_string()))?;
    let seqs =
        s.train_windows(&[text], cfg.seq_len).map_err(|e| format!("--data {}: {}", a.data, flags(&e.to_string())))?;
    let (n_seqs, steps, seq_len, per_step) =
        (seqs.len(), cfg.steps, cfg.seq_len, (cfg.batch_size * cfg.seq_len) as f64);
    let plan = s.train_start(seqs, cfg).map_err(|e| flags(&e.to_string()))?;
    // A resumed run counts its updates on from the checkpoint's.
    let start = s.trainer().map_or(0, |t| t.step);
    eprintln!(
        "ggweb train: {} sequences of {} tokens, {steps} updates, {threads} threads; memory: {} MiB weights, {} MiB state, {} MiB compute",
        n_seqs,
        seq_len,
        plan.weights >> 20,
        plan.state >> 20,
        plan.compute >> 20
    );

    // One line per update; on a terminal the same line, rewritten.
    let tty = std::io::stderr().is_terminal();
    let t0 = Instant::now();
    let mut losses = Vec::with_capacity(steps as usize);
    let mut tokens = 0;
    while let Some(step) = block_on(s.train_step()).map_err(|e| e.to_string())? {
        let secs = t0.elapsed().as_secs_f64();
        let done = step.step - start;
        let tps = done as f64 * per_step / secs.max(1e-9);
        let eta = secs / done as f64 * (steps - done) as f64;
        let line = format!(
            "step {}/{}  loss {:.4}  {:.0} tokens/s  ETA {}",
            step.step,
            start + steps,
            step.loss,
            tps,
            hms(eta)
        );
        let mut err = std::io::stderr().lock();
        if tty {
            write!(err, "\r\x1b[K{line}").ok();
        } else {
            writeln!(err, "{line}").ok();
        }
        err.flush().ok();
        losses.push(step.loss);
        tokens = step.tokens;
    }
    if tty {
        eprintln!();
    }
    let stats = s.train_end().expect("the run was started");

    // Written a chunk at a time under a temporary name, then renamed: no half-written file,
    // and never whole in memory.
    let write = |stream: ggweb::model::save_stream::SaveStream, path: &str| -> Result<u64, String> {
        let tmp = format!("{path}.part");
        std::fs::File::create(&tmp)
            .map_err(|e| e.to_string())
            .and_then(|f| stream.write_to(std::io::BufWriter::new(f)))
            .and_then(|n| std::fs::rename(&tmp, path).map(|_| n).map_err(|e| e.to_string()))
            .inspect_err(|_| {
                std::fs::remove_file(&tmp).ok();
            })
    };
    let stream = match out {
        Out::Model(ty) => s.save_stream(ty, false),
        Out::Adapter(ty) => s.save_lora_stream(ty, false),
    }
    .map_err(|e| e.to_string())?;
    let bytes = write(stream, &a.out).map_err(|e| format!("--out {}: {e}", a.out))?;
    if let Some(c) = &a.checkpoint {
        let stream = if lora {
            s.save_lora_stream(ggweb::types::GgmlType::F32, true)
        } else {
            s.save_stream(ggweb::model::export::SaveType::F32, true)
        }
        .map_err(|e| format!("--checkpoint {c}: {e}"))?;
        let n = write(stream, c).map_err(|e| format!("--checkpoint {c}: {e}"))?;
        eprintln!("ggweb train: optimizer checkpoint (update {}) saved to {c} ({n} bytes)", stats.steps);
    }
    let type_name = a.out_type.as_deref().unwrap_or("f32");
    let adapter = lora && !a.merge;
    eprintln!(
        "ggweb train: {} updates, {tokens} tokens in {}; saved {} {} ({} bytes, {type_name})",
        stats.steps,
        hms(t0.elapsed().as_secs_f64()),
        if adapter {
            "the LoRA adapter to"
        } else if lora {
            "the merged model to"
        } else {
            "the model to"
        },
        a.out,
        bytes
    );
    if a.json {
        println!(
            "{}",
            json!({ "stop": stats.stop, "steps": stats.steps, "tokens": stats.tokens, "losses": losses,
                    "out": a.out, "bytes": bytes, "type": type_name, "adapter": adapter })
        );
    }
    Ok(())
}

/// `ggweb bench --train`: tokens/s of full (or, with `--lora-rank`, LoRA) AdamW training on
/// fixed pseudo-random ids (`bench_ids`, as pp/tg use; bench/train_torch.py trains PyTorch on
/// the same ones): one untimed warm-up update (it touches the compute buffers first), then
/// `--steps` timed ones, each reported in wall time and per CPU second of the process.
pub fn bench(a: &crate::args::BenchArgs) -> Result<(), String> {
    use crate::run::{bench_ids, clock, process_cpu, profile_table, thread_clock};
    let t = &a.train;
    if a.load.backend.as_deref().is_some_and(|b| b != "cpu") || a.load.gpu_layers.is_some() {
        return Err("bench --train: training runs on the cpu backend: leave out --backend and --gpu-layers".into());
    }
    let opts = a.load.options()?;
    let threads = opts.model().n_threads;
    let mut o = Map::new();
    o.insert("seqLen".into(), Value::from(t.seq_len));
    o.insert("batchSize".into(), Value::from(t.batch_size));
    o.insert("steps".into(), Value::from(t.steps.saturating_add(1)));
    if let Some(rank) = t.lora_rank {
        let mut l = Map::new();
        l.insert("rank".into(), Value::from(rank));
        if let Some(ts) = &t.lora_targets {
            l.insert("targets".into(), ts.split(',').map(|t| Value::from(t.trim())).collect());
        }
        o.insert("lora".into(), Value::Object(l));
    } else if t.lora_targets.is_some() {
        return Err("--lora-targets needs --lora-rank (it sets up the LoRA adapter)".into());
    }
    let params: TrainParams = from_value("train options", Value::Object(o)).map_err(|e| {
        flags(&e.to_string()).replace("--batch", "--batch-size").replace("--steps", "--steps (+ 1 warm-up)")
    })?;
    let cpu = Rc::new(match (a.profile, threads) {
        (false, _) => CpuBackend::new(threads),
        (true, 1) => CpuBackend::with_profiler(threads, thread_clock),
        (true, _) => CpuBackend::with_profiler(threads, clock),
    });
    let t_load = Instant::now();
    let loaded =
        load_from_path(&a.load.model, cpu.clone(), opts.model()).map_err(|e| format!("{}: {e}", a.load.model))?;
    let mut s = Session::new(loaded);
    let cfg = params.config(s.model.n_ctx()).map_err(|e| flags(&e.to_string()).replace("--batch", "--batch-size"))?;
    let (seq_len, batch) = (cfg.seq_len, cfg.batch_size);
    // One batch of distinct sequences, the same every update.
    let ids = bench_ids(seq_len * batch, s.model.hparams.n_vocab);
    let seqs: Vec<Vec<u32>> = ids.chunks_exact(seq_len).map(<[u32]>::to_vec).collect();
    let weight_type = s.model.weights.layers.first().map_or("none", |l| l.attn_qkv_w.ty.name());
    let plan = s.train_start(seqs, cfg).map_err(|e| flags(&e.to_string()))?;
    let load_s = t_load.elapsed().as_secs_f64();
    let per_step = (seq_len * batch) as f64;
    let (mut wall, mut per_cpu, mut losses) = (Vec::new(), Vec::new(), Vec::new());
    let mut warmup_s = 0.0;
    for i in 0..=t.steps {
        if i == 1 {
            cpu.reset_profile(); // the warm-up update is not profiled either
        }
        let (t0, c0) = (Instant::now(), process_cpu());
        let step = block_on(s.train_step()).map_err(|e| e.to_string())?.ok_or("bench --train: the run ended early")?;
        let secs = t0.elapsed().as_secs_f64();
        losses.push(step.loss);
        if i == 0 {
            warmup_s = secs;
            continue;
        }
        wall.push(per_step / secs);
        if let (Some(c0), Some(c1)) = (c0, process_cpu()) {
            per_cpu.push(per_step / (c1 - c0));
        }
    }
    s.train_end();
    let prof = profile_table(&cpu.profile(), per_step * t.steps as f64);
    let sorted = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    };
    let (w, c) = (sorted(&wall), sorted(&per_cpu));
    let med = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
    let ends = |v: &[f64]| [v.first().copied().unwrap_or(f64::NAN), v.last().copied().unwrap_or(f64::NAN)];
    let mode = match t.lora_rank {
        Some(r) => format!("lora rank {r}"),
        None => "full".into(),
    };
    if a.json {
        println!(
            "{}",
            json!({
                "model": a.load.model, "weight_type": weight_type, "mode": mode, "threads": threads,
                "seq_len": seq_len, "batch_size": batch, "steps": t.steps, "optimizer": "adamw",
                "train_tok_s": med(&w), "train_tok_s_spread": ends(&w), "train_tok_s_all": wall,
                "train_tok_per_cpu_s": med(&c), "train_tok_per_cpu_s_spread": ends(&c),
                "warmup_s": warmup_s, "load_s": load_s, "losses": losses,
                "memory": { "weights": plan.weights, "state": plan.state, "compute": plan.compute },
                "profile": if a.profile { prof.to_json() } else { json!(null) },
            })
        );
    } else {
        println!(
            "{} ({weight_type}), {mode} AdamW training, seqLen {seq_len}, batch {batch}, {threads} threads",
            a.load.model
        );
        println!("| test | tokens/s (median of {}) | min–max | tokens per CPU second | min–max |", t.steps);
        println!("|---|---|---|---|---|");
        let (ws, cs) = (ends(&w), ends(&c));
        println!(
            "| train b{batch}×{seq_len} | {:.1} | {:.1}–{:.1} | {:.1} | {:.1}–{:.1} |",
            med(&w),
            ws[0],
            ws[1],
            med(&c),
            cs[0],
            cs[1]
        );
        println!(
            "warm-up update {warmup_s:.2} s; losses {losses:?}; memory: {} MiB weights, {} MiB state, {} MiB compute",
            plan.weights >> 20,
            plan.state >> 20,
            plan.compute >> 20
        );
        if a.profile {
            let clock = if threads == 1 { "thread CPU" } else { "wall" };
            println!("\nprofile: {clock} ms per token by node class\n{}", prof.to_text());
        }
    }
    Ok(())
}
