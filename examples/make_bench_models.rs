//! GPT-2-shaped GGUFs (124M, medium, large, XL) with seeded random weights and the real
//! tokenizer metadata, for speed, memory and native-vs-wasm checks (the text they produce
//! means nothing). The generator is tests/support/bench_gpt2.rs (its weights from the tests'
//! shared RNG, tests/support/rng.rs).
//!
//! ```text
//! cargo run --release --example make_bench_models -- tests/fixtures/llamacpp/tiny-gpt2-f32.gguf .models/
//! # writes .models/bench-124m-{f32,f16,q8_0,q4_0}.gguf
//! cargo run --release --example make_bench_models -- REF.gguf .models/ --shape xl --types f16,q8_0
//! # writes .models/bench-xl-f16.gguf (3.28 GB) and .models/bench-xl-q8_0.gguf (1.75 GB)
//! ```
//!
//! Q4_K_M and the other llama.cpp mixes come from llama.cpp's own quantizer, run on the F16
//! file: tests/fixtures/make_scale_models.sh.
// Native only: `wasm-pack test` (cargo test for wasm32) builds the examples too.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

// bench_gpt2 draws from crate::support::rng: both as in the test crates.
#[path = "../tests/support"]
mod support {
    pub mod bench_gpt2;
    pub mod rng;
}

use ggweb::gguf::{read_header, Limits};
use support::bench_gpt2::{file_name, file_type, shape, write_bench_gpt2, SHAPES, TYPES};

const USAGE: &str =
    "usage: make_bench_models REFERENCE.gguf OUT_DIR [--shape 124m|medium|large|xl] [--types f32,f16,q8_0,q4_0]";

fn main() {
    if let Err(e) = run(std::env::args().skip(1).collect()) {
        eprintln!("make_bench_models: {e}\n{USAGE}");
        std::process::exit(2);
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let (mut pos, mut shape_name, mut types) = (Vec::new(), "124m".to_string(), "f32,f16,q8_0,q4_0".to_string());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--shape" => shape_name = it.next().ok_or("--shape needs a value")?,
            "--types" => types = it.next().ok_or("--types needs a value")?,
            _ if a.starts_with("--") => return Err(format!("unknown option {a}")),
            _ => pos.push(a),
        }
    }
    let [reference, out] = <[String; 2]>::try_from(pos).map_err(|_| "REFERENCE.gguf and OUT_DIR are needed")?;
    let sh = shape(&shape_name)
        .ok_or_else(|| format!("--shape {shape_name}: one of {}", SHAPES.map(|s| s.name).join(", ")))?;
    let types = types
        .split(',')
        .map(|t| {
            file_type(t).ok_or_else(|| format!("--types: '{t}' is not one of {}", TYPES.map(|t| t.name).join(", ")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bytes = std::fs::read(&reference).map_err(|e| format!("{reference}: {e}"))?;
    let header = read_header(&bytes, bytes.len() as u64, Limits::default()).map_err(|e| format!("{reference}: {e}"))?;
    let out = std::path::Path::new(&out);
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for ty in &types {
        let path = out.join(file_name(&sh, ty));
        let t0 = std::time::Instant::now();
        let size = write_bench_gpt2(&header, &sh, ty, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}: {size} bytes ({:.1} s)", path.display(), t0.elapsed().as_secs_f64());
    }
    Ok(())
}
