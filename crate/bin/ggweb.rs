//! `ggweb`: the native CLI (generate, tokenize, logits, bench, inspect).

fn main() {
    eprintln!("ggweb: no subcommands yet");
    std::process::exit(2);
}
