# Shared helpers for scripts/*.sh (sourced, not run).
# shellcheck shell=bash

# The wasm-bindgen CLI must match the crate's `wasm-bindgen = "=..."` in Cargo.toml exactly.
WASM_BINDGEN_VERSION=0.2.130
# cargo-fuzz for scripts/fuzz-smoke.sh (any recent version works; pinned for repeatability).
CARGO_FUZZ_VERSION=0.13.2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.cargo/bin:$PATH"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

log() { printf '[%s] %s\n' "${LOG_TAG:-ggweb}" "$*"; }
die() { printf '[%s] error: %s\n' "${LOG_TAG:-ggweb}" "$*" >&2; exit 1; }

# True when a Debian package is fully installed (not merely known, or removed with config left).
deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# The llama.cpp-made reference models (tiny-gpt2-*.gguf, tiny-gpt2.hf-ref.json): $GGWEB_MODELS_DIR,
# else the copy in the repository (tests/fixtures/llamacpp). Prints the absolute path, or
# nothing when absent.
find_models_dir() {
    local d
    for d in "${GGWEB_MODELS_DIR:-}" "$ROOT/tests/fixtures/llamacpp"; do
        if [ -n "$d" ] && [ -f "$d/tiny-gpt2-f32.gguf" ]; then
            (cd "$d" && pwd)
            return
        fi
    done
}
