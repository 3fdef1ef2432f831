//! `ggweb inspect --model FILE [--json] [--items N]`: a GGUF file's metadata and tensors.
//!
//! Reads only the header (the data section is never read: the file size checks that
//! every tensor lies inside the file). Long arrays show their length and first items.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Write};

use ggweb::gguf::{GgufArray, GgufHeader, GgufStreamReader, GgufValue, Limits, NullSink};
use serde_json::{json, Value};

const USAGE: &str = "usage: ggweb inspect --model FILE [--json] [--items N]";

struct Args {
    model: String,
    json: bool,
    items: usize,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let (mut model, mut json, mut items) = (None, false, 6usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--model" | "-m" => model = Some(it.next().ok_or("--model needs a file")?.clone()),
            "--json" => json = true,
            "--items" => {
                let v = it.next().ok_or("--items needs a number")?;
                items = v.parse().map_err(|_| format!("--items: '{v}' is not a number"))?;
            }
            "--help" | "-h" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    let model = model.ok_or_else(|| format!("missing --model\n{USAGE}"))?;
    Ok(Args { model, json, items })
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

pub fn run(args: &[String]) -> Result<(), String> {
    let args = parse_args(args)?;
    let (header, size) = read_header(&args.model)?;
    let out = if args.json {
        to_json(&args.model, size, &header, args.items)
    } else {
        to_text(&args.model, size, &header, args.items)
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("writing output: {e}")),
        _ => Ok(()),
    }
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

fn to_json(path: &str, size: u64, h: &GgufHeader, items: usize) -> String {
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
    let doc = json!({
        "file": path,
        "file_size": size,
        "version": h.version,
        "alignment": h.alignment,
        "data_offset": h.data_offset,
        "metadata": metadata,
        "tensors": tensors,
        "total_weight_bytes": h.total_weight_bytes(),
    });
    let mut s = serde_json::to_string_pretty(&doc).expect("a json! value serializes");
    s.push('\n');
    s
}
