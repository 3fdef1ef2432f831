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
    let loaded = load_from_path(&a.model, Rc::new(CpuBackend::new(gpt2.n_threads)), gpt2)
        .map_err(|e| format!("{}: {e}", a.model))?;
    let mut s = Session::new(loaded);
    let cfg = params.config(s.model.n_ctx()).map_err(|e| flags(&e.to_string()))?;
    let seqs =
        s.train_windows(&[text], cfg.seq_len).map_err(|e| format!("--data {}: {}", a.data, flags(&e.to_string())))?;
    let (n_seqs, steps, seq_len, per_step) =
        (seqs.len(), cfg.steps, cfg.seq_len, (cfg.batch_size * cfg.seq_len) as f64);
    let plan = s.train_start(seqs, cfg).map_err(|e| flags(&e.to_string()))?;
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
        let tps = step.step as f64 * per_step / secs.max(1e-9);
        let eta = secs / step.step as f64 * (steps - step.step) as f64;
        let line = format!("step {}/{steps}  loss {:.4}  {:.0} tokens/s  ETA {}", step.step, step.loss, tps, hms(eta));
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

    let bytes = match out {
        Out::Model(ty) => s.save(ty),
        Out::Adapter(ty) => s.save_lora(ty, false),
    }
    .map_err(|e| e.to_string())?;
    // Written whole under a temporary name, then renamed: no half-written --out.
    let tmp = format!("{}.part", a.out);
    std::fs::write(&tmp, &bytes).and_then(|_| std::fs::rename(&tmp, &a.out)).map_err(|e| {
        std::fs::remove_file(&tmp).ok();
        format!("--out {}: {e}", a.out)
    })?;
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
        bytes.len()
    );
    if a.json {
        println!(
            "{}",
            json!({ "stop": stats.stop, "steps": stats.steps, "tokens": stats.tokens, "losses": losses,
                    "out": a.out, "bytes": bytes.len(), "type": type_name, "adapter": adapter })
        );
    }
    Ok(())
}
