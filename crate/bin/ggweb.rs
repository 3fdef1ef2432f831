//! `ggweb`: the native CLI (generate, logits, tokenize, bench, inspect).
//!
//! Errors go to stderr with exit status 1; machine-readable output (`--json`, `logits`,
//! `tokenize`) is a contract other tools rely on.

mod args;
mod inspect;
mod run;

fn usage() -> String {
    format!(
        "usage: ggweb <command> [options]\n\ncommands:\n  {}\n  {}\n  {}\n  {}\n  ggweb inspect --model FILE [--json] [--items N] [--gpu-layers N [--batch B] [--ctx C]]",
        run::GENERATE_USAGE,
        run::LOGITS_USAGE,
        run::TOKENIZE_USAGE,
        run::BENCH_USAGE
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or(&[]);
    let result = match args.first().map(String::as_str) {
        Some("generate") => run::generate(rest),
        Some("logits") => run::logits(rest),
        Some("tokenize") => run::tokenize(rest),
        Some("bench") => run::bench(rest),
        Some("inspect") => inspect::run(rest),
        Some("--help" | "-h" | "help") => {
            println!("{}", usage());
            Ok(())
        }
        Some(other) => Err(format!("unknown command '{other}'\n{}", usage())),
        None => Err(usage()),
    };
    if let Err(e) = result {
        eprintln!("ggweb: {e}");
        std::process::exit(1);
    }
}
