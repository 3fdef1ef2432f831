#!/usr/bin/env bash
# Installs what building and testing ggweb needs, skipping whatever is already present,
# so it is cheap to run before every build or test:
#   Rust's wasm32-unknown-unknown target; Debian's chromium, chromium-driver (headless tests)
#   and mesa-vulkan-drivers (lavapipe, for native wgpu); wasm-bindgen-cli at exactly the
#   crate's wasm-bindgen version; nightly Rust with rust-src (the threaded wasm build's
#   -Z build-std) and cargo-fuzz (the fuzz smoke); the npm dev dependencies from package-lock.json;
#   PyPI's gguf in .venv/ (an independent reader of the GGUFs ggweb writes).
# Never downloads a browser build: tests drive Debian's /usr/bin/chromium.
set -euo pipefail
LOG_TAG=setup
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

command -v cargo >/dev/null || die "cargo not found: install Rust with rustup first"
command -v rustup >/dev/null || die "rustup not found: it is needed to add the wasm32 target"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    log "adding Rust target wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown
fi

missing=()
for p in chromium chromium-driver mesa-vulkan-drivers; do
    deb_installed "$p" || missing+=("$p")
done
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

have_bindgen() {
    [ "$(wasm-bindgen --version 2>/dev/null)" = "wasm-bindgen $WASM_BINDGEN_VERSION" ] &&
        [ "$(wasm-bindgen-test-runner --version 2>/dev/null)" = "wasm-bindgen-test-runner $WASM_BINDGEN_VERSION" ]
}
if ! have_bindgen; then
    log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (takes ~6 minutes on 2 cores)"
    # Not --locked: its lock file pins a webpki-roots the registry here lacks. Its own
    # temporary target dir, so a project CARGO_TARGET_DIR is not locked meanwhile.
    env -u CARGO_TARGET_DIR cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
    have_bindgen || die "wasm-bindgen $WASM_BINDGEN_VERSION still not on PATH after cargo install"
fi

# The fuzz smoke (scripts/fuzz-smoke.sh) builds with cargo-fuzz, which needs nightly Rust;
# the threaded wasm build (web/pkg-threads) rebuilds std with atomics, which needs rust-src.
if ! rustup toolchain list | grep -q '^nightly-'; then
    log "installing the nightly Rust toolchain (for cargo fuzz and the threaded wasm build)"
    rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
    log "adding rust-src to nightly (for -Z build-std in the threaded wasm build)"
    rustup component add rust-src --toolchain nightly
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz $CARGO_FUZZ_VERSION (takes ~3 minutes on 2 cores)"
    env -u CARGO_TARGET_DIR cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION"
    cargo fuzz --version >/dev/null 2>&1 || die "cargo-fuzz still not on PATH after cargo install"
fi

# An independent reader for the GGUF writer: PyPI's gguf (pinned, with numpy) reads the
# sample `cargo test --test gguf` writes (tests/gguf_support/check_with_pypi_gguf.py), from
# a virtual environment inside the repository (.venv/, git-ignored).
GGUF_PY_VERSION=0.19.0
NUMPY_PY_VERSION=2.4.6
have_gguf_py() {
    .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(not (m.version('gguf') == '$GGUF_PY_VERSION' and m.version('numpy') == '$NUMPY_PY_VERSION'))" 2>/dev/null
}
if ! have_gguf_py; then
    if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        log "installing Debian packages: python3 python3-venv"
        as_root apt-get update
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y python3 python3-venv
    fi
    log "installing PyPI gguf $GGUF_PY_VERSION and numpy $NUMPY_PY_VERSION into .venv/"
    [ -x .venv/bin/pip ] || python3 -m venv .venv
    .venv/bin/pip install --disable-pip-version-check --quiet "gguf==$GGUF_PY_VERSION" "numpy==$NUMPY_PY_VERSION"
    have_gguf_py || die "PyPI gguf $GGUF_PY_VERSION is still missing from .venv/ after pip install"
fi

# npm ci when node_modules is missing or was installed from another package-lock.json.
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
stamp=node_modules/.ggweb-lock.sha256
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
    log "npm ci"
    npm ci --no-audit --no-fund
    echo "$lock_sum" > "$stamp"
fi

log "ok: $(rustc --version | cut -d' ' -f1-2), $(wasm-bindgen --version), $(cargo fuzz --version), node $(node --version)," \
    "$(/usr/bin/chromium --version 2>/dev/null | grep -o 'Chromium [0-9.]*'), wasm-opt $(node_modules/.bin/wasm-opt --version | cut -d' ' -f3)"
