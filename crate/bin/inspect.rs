//! `ggweb inspect --model FILE [--json] [--items N] [load options]`: a GGUF file's metadata,
//! tensors and memory plan.
//!
//! Reads only the header (the data section is never read: the file size checks that
//! every tensor lies inside the file). Long arrays show their length and first items.
//! The memory plan is [`HeaderPlan`]'s (the bytes a load with these options allocates per
//! backend, equal to its `info().memory`), with whether it fits here (each backend's budget:
//! natively the machine's memory or `GGWEB_MAX_MEMORY`) and in wasm32's 4 GiB (the check a
//! CPU load there makes: the loader's estimate in a 32-bit address space, as
//! `ModelLoader::with_usize_bits(32)` checks it natively). `--gpu-layers` also loads the model
//! to report how graphs split.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};

use std::rc::Rc;

use ggweb::common::open_backends;
use ggweb::common::options::LoadOptions;
use ggweb::cpu::CpuBackend;
use ggweb::gguf::{GgufArray, GgufHeader, GgufStreamReader, GgufValue, Limits, NullSink};
use ggweb::model::context::{block_on, Gpt2Options};
use ggweb::model::loader::{load_from_path_split, LoadedModel};
use ggweb::model::plan::HeaderPlan;
use ggweb::webgpu::WebGpuOptions;
use ggweb::GgmlType;
use serde_json::{json, Value};

use crate::args::InspectArgs;

/// wasm32's linear memory: 65536 pages of 64 KiB.
const WASM32_SPACE: u64 = 4 << 30;

struct Args {
    model: String,
    json: bool,
    items: usize,
    /// The load's options (the backend, `--gpu-layers`: the model split between WebGPU and
    /// the CPU, reported instead of the header).
    opts: LoadOptions,
    gpu_layers: Option<usize>,
    kv_type: GgmlType,
    threads: usize,
}

impl Args {
    fn new(a: InspectArgs) -> Result<Args, String> {
        let opts = a.load.options()?;
        let m = opts.model();
        Ok(Args {
            model: a.load.model,
            json: a.json,
            items: a.items,
            gpu_layers: opts.gpu_layers,
            opts,
            kv_type: m.kv_type,
            threads: m.n_threads.max(1),
        })
    }
}

/// Parses the header of `path`, feeding 1 MiB chunks until it is complete.
fn read_header(path: &str) -> Result<(GgufHeader, u64), String> {
    let mut file = File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let size = file.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    let mut reader = GgufStreamReader::new(Limits::default()).with_file_size(size);
    let mut buf = vec![0u8; 1 << 20];
    while reader.header().is_none() {
        let n = file.read(&mut buf).map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            // Past the end: finish reports how the header was truncated.
            return Err(format!("{path}: {}", reader.finish().err().map_or("truncated".into(), |e| e.to_string())));
        }
        reader.feed(&buf[..n], &mut NullSink).map_err(|e| format!("{path}: {e}"))?;
    }
    let header = reader.into_header().expect("loop ends with a header");
    Ok((header, size))
}

pub fn run(args: InspectArgs) -> Result<(), String> {
    let args = Args::new(args)?;
    let (header, size) = read_header(&args.model)?;
    // A header that is no GPT-2 ggweb can load still has metadata to show: the plan says why not.
    let plan = plan(&args, &header)
        .unwrap_or_else(|e| PlanReport { text: format!("memory plan: none: {e}\n"), json: json!({ "error": e }) });
    let out = if let Some(n) = args.gpu_layers {
        split_report(&args, n, &plan)?
    } else if args.json {
        let mut doc = to_json(&args.model, size, &header, args.items);
        doc["plan"] = plan.json;
        let mut s = serde_json::to_string_pretty(&doc).expect("a json! value serializes");
        s.push('\n');
        s
    } else {
        to_text(&args.model, size, &header, args.items) + &plan.text
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("writing output: {e}")),
        _ => Ok(()),
    }
}

/// Loads the model with its last `gpu_layers` blocks on WebGPU and reports how graphs
/// split: bytes per backend, and for one token and for a full batch the splits and the
/// copies between backends each run makes.
fn split_report(args: &Args, gpu_layers: usize, plan: &PlanReport) -> Result<String, String> {
    let b = block_on(open_backends(&args.opts, WebGpuOptions::default(), || Rc::new(CpuBackend::new(1))))
        .map_err(|e| format!("--gpu-layers: WebGPU: {e}"))?;
    let (Some(gpu), Some(cpu)) = (b.gpu, b.cpu) else { return Err("--gpu-layers: WebGPU is not usable here".into()) };
    let opts = Gpt2Options { n_threads: 1, ..args.opts.model() };
    let LoadedModel { mut model, .. } =
        load_from_path_split(&args.model, Rc::new(gpu), cpu, gpu_layers, opts).map_err(|e| e.to_string())?;
    let n_layer = model.hparams.n_layer;
    let on_gpu = gpu_layers.min(n_layer);
    let memory = model.memory_by_backend();
    let mut runs = Vec::new();
    for (what, n_tokens) in [("token", 1), ("batch", model.n_batch)] {
        model.plan_split(0, n_tokens).map_err(|e| e.to_string())?;
        let (copies, bytes) = model.sched.copies_per_run();
        runs.push((what, n_tokens, model.sched.splits().len(), copies, bytes, model.sched.describe_splits()));
    }
    if args.json {
        let doc = json!({
            "file": args.model,
            "gpu_layers": gpu_layers,
            "n_layer": n_layer,
            "gpu_blocks": (n_layer - on_gpu..n_layer).collect::<Vec<_>>(),
            "embeddings_on_gpu": gpu_layers > n_layer,
            "backends": model.sched.backends().iter().map(|b| b.name().to_string()).collect::<Vec<_>>(),
            "memory_by_backend": memory.iter().map(|m| json!({
                "backend": m.backend, "weights": m.weights, "kv": m.kv, "compute": m.compute,
            })).collect::<Vec<_>>(),
            "runs": runs.iter().map(|(what, n, splits, copies, bytes, lines)| json!({
                "run": what, "n_tokens": n, "splits": splits, "copies": copies, "copy_bytes": bytes, "split_lines": lines,
            })).collect::<Vec<_>>(),
            "plan": plan.json,
        });
        let mut s = serde_json::to_string_pretty(&doc).expect("a json! value serializes");
        s.push('\n');
        return Ok(s);
    }
    let mut s = String::new();
    let _ = writeln!(s, "{}: {}", args.model, model.describe());
    let blocks =
        if on_gpu == 0 { "none".to_string() } else { format!("blocks {}..={}", n_layer - on_gpu, n_layer - 1) };
    let embd = if gpu_layers > n_layer { ", embeddings too" } else { "" };
    let _ = writeln!(s, "gpu layers: {gpu_layers} of {n_layer} on {} ({blocks}{embd})", model.backend.name());
    let _ = writeln!(s, "memory by backend:");
    for m in &memory {
        let _ = writeln!(
            s,
            "  {:<8} weights {:>12} B, kv {:>10} B, compute {:>10} B",
            m.backend, m.weights, m.kv, m.compute
        );
    }
    for (what, n, splits, copies, bytes, lines) in &runs {
        let run = if *n == 1 { "one token".to_string() } else { format!("a {what} of {n} tokens") };
        let _ = writeln!(s, "{run}: {splits} splits, {copies} copies per run ({bytes} B)");
        for l in lines {
            let _ = writeln!(s, "  {l}");
        }
    }
    s.push_str(&plan.text);
    Ok(s)
}

/// The memory plan in both forms.
struct PlanReport {
    text: String,
    json: Value,
}

/// [`HeaderPlan`] for the options, on the backends a load with them uses; whether it fits
/// here (each backend's budget and largest buffer) and on wasm32 (a CPU load there: the
/// loader's own estimate and check, in 32 bits, against the 4 GiB address space).
fn plan(args: &Args, header: &GgufHeader) -> Result<PlanReport, String> {
    let opts = Gpt2Options { n_threads: args.threads, ..args.opts.model() };
    let threads = args.threads;
    let b = block_on(open_backends(&args.opts, WebGpuOptions::default(), || Rc::new(CpuBackend::new(threads))))
        .map_err(|e| format!("--backend webgpu: {e}"))?;
    let (backend, split) = match (b.name, b.split) {
        ("webgpu", Some(n)) => ("webgpu+cpu", Some(n)),
        (name, _) => (name, None),
    };
    let p = HeaderPlan::new(header, b.list(), split, &opts).map_err(|e| format!("{}: {e}", args.model))?;
    let wasm32 = p.estimate.check(&p.hparams, Some(WASM32_SPACE), 32).err().map(|e| e.to_string());
    let (kv_type, est) = (args.kv_type.name(), &p.estimate);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "memory plan ({backend}, n_ctx {}, n_batch {}, kv {kv_type}, threads {}{}):",
        p.n_ctx,
        p.n_batch,
        args.threads,
        split.map_or(String::new(), |n| format!(", gpu layers {n}"))
    );
    for m in &p.by_backend {
        let _ = writeln!(
            text,
            "  {:<8} weights {:>12} B, kv {:>10} B, compute {:>10} B",
            m.backend, m.weights, m.kv, m.compute
        );
    }
    let compute = if p.compute_measured { p.compute().to_string() } else { "not measured".into() };
    let _ = writeln!(
        text,
        "  total    {} B ({:.2} MiB): weights {} + kv {} + compute {compute}",
        p.total(),
        mib(p.total()),
        p.weights(),
        p.kv()
    );
    let budgets: Vec<String> = p
        .by_backend
        .iter()
        .zip(&p.limits)
        .map(|(m, (budget, max))| {
            let b = budget.map_or("unknown".into(), |b| format!("{b} B"));
            format!("{} budget {b}, largest buffer {max} B", m.backend)
        })
        .collect();
    if let Some(g) = p.gradient {
        let _ = writeln!(
            text,
            "  gradient {g} B ({:.2} MiB) more per gradient run over {} tokens (backward to hook_embed)",
            mib(g),
            p.n_ctx
        );
    }
    let verdict = |misfit: &Option<String>| misfit.as_ref().map_or("yes".to_string(), |r| format!("no: {r}"));
    let _ = writeln!(text, "fits here: {} ({})", verdict(&p.misfit), budgets.join("; "));
    let _ = writeln!(
        text,
        "fits wasm32 (cpu, 4 GiB): {} (the loader's estimate {} B: weights {} + kv {} + compute bound {})",
        verdict(&wasm32),
        est.total(),
        est.weights,
        est.kv,
        est.compute
    );

    let json = json!({
        "backend": backend,
        "n_ctx": p.n_ctx,
        "n_batch": p.n_batch,
        "kv_type": kv_type,
        "threads": args.threads,
        "gpu_layers": split,
        "by_backend": p.by_backend.iter().zip(&p.limits).map(|(m, (budget, max))| json!({
            "backend": m.backend, "weights": m.weights, "kv": m.kv, "compute": m.compute,
            "budget": budget, "max_buffer_size": max,
        })).collect::<Vec<_>>(),
        "weights": p.weights(),
        "kv": p.kv(),
        "compute": p.compute_measured.then(|| p.compute()),
        "gradient": p.gradient,
        "total": p.total(),
        "fits": { "ok": p.misfit.is_none(), "reason": p.misfit },
        "wasm32": {
            "ok": wasm32.is_none(),
            "reason": wasm32,
            "estimate": { "weights": est.weights, "kv": est.kv, "compute": est.compute, "total": est.total() },
            "address_space": WASM32_SPACE,
        },
    });
    Ok(PlanReport { text, json })
}

fn scalar_text(v: &GgufValue) -> String {
    match v {
        GgufValue::U8(x) => x.to_string(),
        GgufValue::I8(x) => x.to_string(),
        GgufValue::U16(x) => x.to_string(),
        GgufValue::I16(x) => x.to_string(),
        GgufValue::U32(x) => x.to_string(),
        GgufValue::I32(x) => x.to_string(),
        GgufValue::U64(x) => x.to_string(),
        GgufValue::I64(x) => x.to_string(),
        GgufValue::F32(x) => format!("{x:e}"),
        GgufValue::F64(x) => format!("{x:e}"),
        GgufValue::Bool(x) => x.to_string(),
        GgufValue::String(s) => format!("{s:?}"),
        GgufValue::Array(a) => array_text(a, 3),
    }
}

fn array_text(a: &GgufArray, items: usize) -> String {
    let shown: Vec<String> = (0..a.len().min(items)).filter_map(|i| a.get(i)).map(|v| scalar_text(&v)).collect();
    let more = if a.len() > items { format!(", ... ({} more)", a.len() - items) } else { String::new() };
    format!("[{}{more}]", shown.join(", "))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn to_text(path: &str, size: u64, h: &GgufHeader, items: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{path}: GGUF v{}, {size} bytes, alignment {}, data at byte {}",
        h.version, h.alignment, h.data_offset
    );
    let _ = writeln!(s, "metadata ({} keys):", h.metadata.len());
    for (k, v) in &h.metadata {
        let text = match v {
            GgufValue::Array(a) => format!("{}, {} items = {}", a.type_name(), a.len(), array_text(a, items)),
            v => format!("{} = {}", v.type_name(), scalar_text(v)),
        };
        let _ = writeln!(s, "  {k}: {text}");
    }
    let _ = writeln!(s, "tensors ({}):", h.tensors.len());
    let width = h.tensors.iter().map(|t| t.name.len()).max().unwrap_or(4);
    let _ =
        writeln!(s, "  {:>4}  {:<width$}  {:<5}  {:<24}  {:>12}  {:>12}", "#", "name", "type", "ne", "bytes", "offset");
    for (i, t) in h.tensors.iter().enumerate() {
        let ne = format!("{:?}", &t.ne[..(t.n_dims as usize).max(1)]);
        let _ = writeln!(
            s,
            "  {i:>4}  {:<width$}  {:<5}  {ne:<24}  {:>12}  {:>12}",
            t.name,
            t.ty.name(),
            t.nbytes,
            t.offset
        );
    }
    let total = h.total_weight_bytes();
    let _ = writeln!(s, "total weight memory: {total} bytes ({:.2} MiB)", mib(total));
    s
}

fn value_json(v: &GgufValue, items: usize) -> Value {
    match v {
        GgufValue::U8(x) => json!(x),
        GgufValue::I8(x) => json!(x),
        GgufValue::U16(x) => json!(x),
        GgufValue::I16(x) => json!(x),
        GgufValue::U32(x) => json!(x),
        GgufValue::I32(x) => json!(x),
        GgufValue::U64(x) => json!(x),
        GgufValue::I64(x) => json!(x),
        GgufValue::F32(x) => json!(x),
        GgufValue::F64(x) => json!(x),
        GgufValue::Bool(x) => json!(x),
        GgufValue::String(x) => json!(x),
        GgufValue::Array(a) => {
            let head: Vec<Value> =
                (0..a.len().min(items)).filter_map(|i| a.get(i)).map(|v| value_json(&v, items)).collect();
            json!({ "len": a.len(), "head": head })
        }
    }
}

fn to_json(path: &str, size: u64, h: &GgufHeader, items: usize) -> Value {
    let metadata: Vec<Value> = h
        .metadata
        .iter()
        .map(|(k, v)| json!({ "key": k, "type": v.type_name(), "value": value_json(v, items) }))
        .collect();
    let tensors: Vec<Value> = h
        .tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.ty.name(),
                "ne": &t.ne[..(t.n_dims as usize).max(1)],
                "bytes": t.nbytes,
                "offset": t.offset,
            })
        })
        .collect();
    json!({
        "file": path,
        "file_size": size,
        "version": h.version,
        "alignment": h.alignment,
        "data_offset": h.data_offset,
        "metadata": metadata,
        "tensors": tensors,
        "total_weight_bytes": h.total_weight_bytes(),
    })
}
