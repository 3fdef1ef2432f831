#!/usr/bin/env bash
# Installs what building and testing ggweb needs, skipping whatever is already present,
# so it is cheap to run before every build or test:
#   Rust's wasm32-unknown-unknown target; Debian's chromium, chromium-driver (headless tests)
#   and mesa-vulkan-drivers (lavapipe, for native wgpu); wasm-bindgen-cli at exactly the
#   crate's wasm-bindgen version; nightly Rust with rust-src (the threaded wasm build's
#   -Z build-std) and cargo-fuzz (the fuzz smoke); the npm dev dependencies from package-lock.json.
# Never downloads a browser build: tests drive Debian's /usr/bin/chromium.
#   setup.sh        everything npm test needs (the default)
#   setup.sh demo   only what npm start needs to build and serve the demo: no browsers, no
#                   lavapipe, no cargo-fuzz, no test-only tools
set -euo pipefail
LOG_TAG=setup
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
MODE="${1:-test}"
case "$MODE" in test | demo) ;; *) die "unknown mode '$MODE' (expected: test, demo)" ;; esac

command -v cargo >/dev/null || die "cargo not found: install Rust with rustup first"
command -v rustup >/dev/null || die "rustup not found: it is needed to add the wasm32 target"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    log "adding Rust target wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown
fi

missing=()
if [ "$MODE" = test ]; then
    for p in chromium chromium-driver mesa-vulkan-drivers; do
        deb_installed "$p" || missing+=("$p")
    done
fi
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
if [ "$MODE" = test ] && ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz $CARGO_FUZZ_VERSION (takes ~3 minutes on 2 cores)"
    env -u CARGO_TARGET_DIR cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION"
    cargo fuzz --version >/dev/null 2>&1 || die "cargo-fuzz still not on PATH after cargo install"
fi

# npm ci when node_modules is missing or was installed from another package-lock.json.
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
stamp=node_modules/.ggweb-lock.sha256
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
    log "npm ci"
    npm ci --no-audit --no-fund
    echo "$lock_sum" > "$stamp"
fi

if [ "$MODE" = demo ]; then
    log "ok (demo): $(rustc --version | cut -d' ' -f1-2), $(wasm-bindgen --version), node $(node --version)," \
        "wasm-opt $(node_modules/.bin/wasm-opt --version | cut -d' ' -f3)"
else
    log "ok: $(rustc --version | cut -d' ' -f1-2), $(wasm-bindgen --version), $(cargo fuzz --version), node $(node --version)," \
        "$(/usr/bin/chromium --version 2>/dev/null | grep -o 'Chromium [0-9.]*'), wasm-opt $(node_modules/.bin/wasm-opt --version | cut -d' ' -f3)"
fi
