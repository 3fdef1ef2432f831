//! `ggweb`: the native CLI (generate, score, trace, logits, tokenize, bench, inspect, train).
//!
//! Errors go to stderr with exit status 1; machine-readable output (`--json`, `logits`,
//! `tokenize`) is a contract other tools rely on. Arguments: crate/bin/args.rs (clap).

// Native only: clap is not a wasm32 dependency (`cargo build --tests` for wasm32, as
// wasm-pack test runs it, builds this target too).
#[cfg(not(target_family = "wasm"))]
mod args;
#[cfg(not(target_family = "wasm"))]
mod inspect;
#[cfg(not(target_family = "wasm"))]
mod run;
#[cfg(not(target_family = "wasm"))]
mod train;

#[cfg(target_family = "wasm")]
fn main() {}

#[cfg(not(target_family = "wasm"))]
fn version() -> String {
    format!("ggweb {}", env!("CARGO_PKG_VERSION"))
}

#[cfg(not(target_family = "wasm"))]
fn main() {
    use args::Command;
    let argv: Vec<String> = std::env::args().collect();
    // `--version` anywhere (after a command too) and `ggweb version` answer and run nothing.
    if argv.iter().skip(1).any(|a| a == "--version" || a == "-V") || argv.get(1).is_some_and(|a| a == "version") {
        println!("{}", version());
        return;
    }
    let result = match args::parse(argv) {
        Ok(None) => Ok(()),
        Ok(Some(cli)) => match cli.command {
            Command::Generate(a) => run::generate(a),
            Command::Score(a) => run::score(a),
            Command::Trace(a) => run::trace(a),
            Command::Logits(a) => run::logits(a),
            Command::Tokenize(a) => run::tokenize(a),
            // `bench --train` times training (train.rs); otherwise prompt and decode (run.rs).
            Command::Bench(a) if a.train.train => train::bench(&a),
            Command::Bench(a) => run::bench(a),
            Command::Inspect(a) => inspect::run(a),
            Command::Run(a) => run::run(a),
            Command::Patch(a) => run::patch(a),
            Command::Saliency(a) => run::saliency(a),
            Command::Lens(a) => run::lens(a),
            Command::Train(a) => train::run(a),
        },
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        eprintln!("ggweb: {}", e.trim_end());
        std::process::exit(1);
    }
}
