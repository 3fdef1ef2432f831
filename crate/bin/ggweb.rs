//! `ggweb`: the native CLI (generate, score, trace, logits, tokenize, bench, inspect).
//!
//! Errors go to stderr with exit status 1; machine-readable output (`--json`, `logits`,
//! `tokenize`) is a contract other tools rely on.

mod args;
mod inspect;
mod run;

/// Each command and its usage line.
const COMMANDS: [(&str, &str); 7] = [
    ("generate", run::GENERATE_USAGE),
    ("score", run::SCORE_USAGE),
    ("trace", run::TRACE_USAGE),
    ("logits", run::LOGITS_USAGE),
    ("tokenize", run::TOKENIZE_USAGE),
    ("bench", run::BENCH_USAGE),
    ("inspect", inspect::USAGE),
];

fn usage() -> String {
    let lines: Vec<&str> = COMMANDS.iter().map(|c| c.1).collect();
    format!(
        "usage: ggweb <command> [options]   (ggweb <command> --help; ggweb --version)\n\ncommands:\n  {}",
        lines.join("\n  ")
    )
}

fn version() -> String {
    format!("ggweb {}", env!("CARGO_PKG_VERSION"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or(&[]);
    // --help / --version anywhere after a command answer for that command and run nothing.
    if let Some((_, usage)) = COMMANDS.iter().find(|c| args.first().map(String::as_str) == Some(c.0)) {
        if rest.iter().any(|a| a == "--help" || a == "-h") {
            println!("usage: {usage}");
            return;
        }
        if rest.iter().any(|a| a == "--version" || a == "-V") {
            println!("{}", version());
            return;
        }
    }
    let result = match args.first().map(String::as_str) {
        Some("--version" | "-V" | "version") => {
            println!("{}", version());
            Ok(())
        }
        Some("generate") => run::generate(rest),
        Some("score") => run::score(rest),
        Some("trace") => run::trace(rest),
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
