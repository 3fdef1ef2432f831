//! `ggweb`: the native CLI (generate, tokenize, logits, bench, inspect).

mod inspect;

const USAGE: &str = "usage: ggweb <command> [args]\n\ncommands:\n  inspect --model FILE [--json] [--items N]   GGUF metadata and tensors";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("inspect") => inspect::run(&args[1..]),
        Some("--help" | "-h" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command '{other}'\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    if let Err(e) = result {
        eprintln!("ggweb: {e}");
        std::process::exit(1);
    }
}
