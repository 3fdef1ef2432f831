#!/usr/bin/env bash
# Installs what building and testing ggweb needs, skipping whatever is already present,
# so it is cheap to run before every build or test:
#   Rust's wasm32-unknown-unknown target; Debian's chromium, chromium-driver (headless tests),
#   firefox-esr, webkit2gtk-driver (WebKitWebDriver and WebKitGTK's MiniBrowser) with xvfb
#   (MiniBrowser's only headless mode), and mesa-vulkan-drivers (lavapipe, for native wgpu);
#   wasm-bindgen-cli at exactly the crate's wasm-bindgen version; wasm-pack and geckodriver
#   (`wasm-pack test --firefox`); nightly Rust with rust-src (the threaded wasm build's
#   -Z build-std) and cargo-fuzz (the fuzz smoke); the npm dev dependencies from package-lock.json
#   (playwright-core, puppeteer-core, selenium-webdriver: drivers only, no browser downloads);
#   PyPI's gguf in .venv/ (an independent reader of the GGUFs ggweb writes).
# Never downloads a browser build: tests drive Debian's chromium, firefox-esr and MiniBrowser.
#   setup.sh        everything npm test needs (the default)
#   setup.sh demo   only what npm start needs to build and serve the demo: no browsers, no
#                   lavapipe, no cargo-fuzz, wasm-pack or geckodriver, no test-only tools
set -euo pipefail
LOG_TAG=setup
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
MODE="${1:-test}"
case "$MODE" in test | demo) ;; *) die "unknown mode '$MODE' (expected: test, demo)" ;; esac

# Pinned so that every machine runs the same tools (any recent version works).
WASM_PACK_VERSION=0.15.1
GECKODRIVER_VERSION=0.37.1

command -v cargo >/dev/null || die "cargo not found: install Rust with rustup first"
command -v rustup >/dev/null || die "rustup not found: it is needed to add the wasm32 target"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    log "adding Rust target wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown
fi

missing=()
if [ "$MODE" = test ]; then
    for p in chromium chromium-driver firefox-esr webkit2gtk-driver xvfb mesa-vulkan-drivers; do
        deb_installed "$p" || missing+=("$p")
    done
fi
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# The slow installs (Debian packages, and each `cargo install`, ~3-6 minutes on 2 cores) run
# side by side: one compile alone leaves a core idle for much of its time (its last crates
# build one at a time). Each job's output goes to target/setup-logs/NAME.log; a failed job's
# log is shown and setup fails.
SETUP_LOGS="$TARGET_DIR/setup-logs"
mkdir -p "$SETUP_LOGS"
job_pids=()
job_names=()
in_background() {
    local name=$1
    shift
    log "$name: started (log: $SETUP_LOGS/$name.log)"
    ("$@") >"$SETUP_LOGS/$name.log" 2>&1 &
    job_pids+=($!)
    job_names+=("$name")
}
wait_background() {
    local i failed=()
    for i in "${!job_pids[@]}"; do
        if wait "${job_pids[$i]}"; then
            log "${job_names[$i]}: done"
        else
            echo "---- ${job_names[$i]} failed; the end of its log:" >&2
            tail -n 30 "$SETUP_LOGS/${job_names[$i]}.log" >&2
            failed+=("${job_names[$i]}")
        fi
    done
    job_pids=()
    job_names=()
    [ ${#failed[@]} = 0 ] || die "setup steps failed: ${failed[*]}"
}
# cargo_install NAME VERSION [FLAGS]: its own temporary target dir (as cargo install does by
# default), so a project CARGO_TARGET_DIR is never locked meanwhile.
cargo_install() { env -u CARGO_TARGET_DIR cargo install "$@"; }

if [ ${#missing[@]} -gt 0 ]; then
    in_background "apt (${missing[*]})" bash -c 'as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
        as_root apt-get update && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"' apt "${missing[@]}"
fi

have_bindgen() {
    [ "$(wasm-bindgen --version 2>/dev/null)" = "wasm-bindgen $WASM_BINDGEN_VERSION" ] &&
        [ "$(wasm-bindgen-test-runner --version 2>/dev/null)" = "wasm-bindgen-test-runner $WASM_BINDGEN_VERSION" ]
}
# Not --locked: its lock file pins a webpki-roots the registry here lacks.
have_bindgen || in_background wasm-bindgen-cli cargo_install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"

# wasm-pack runs the wasm tests as Rust/wasm users do (`wasm-pack test --headless --chrome`,
# `--firefox`), with the wasm-bindgen above and Debian's chromedriver; geckodriver is a crate
# (Debian has no package). Debug builds, like cargo-fuzz's below: these tools only start
# other programs, and build in ~3 minutes each instead of ~10.
have_tool() { [ "$("$1" --version 2>/dev/null | sed -n 1p | cut -d' ' -f1-2)" = "$1 $2" ]; }
if [ "$MODE" = test ]; then
    for tool in "wasm-pack $WASM_PACK_VERSION" "geckodriver $GECKODRIVER_VERSION"; do
        read -r name version <<< "$tool"
        have_tool "$name" "$version" || in_background "$name" cargo_install --debug "$name" --version "$version"
    done
    # The fuzz smoke (scripts/fuzz-smoke.sh) builds with cargo-fuzz, which needs nightly Rust.
    cargo fuzz --version >/dev/null 2>&1 || in_background cargo-fuzz cargo_install --debug cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi

# The threaded wasm build (web/pkg-threads) rebuilds std with atomics: nightly + rust-src.
if ! rustup toolchain list | grep -q '^nightly-'; then
    log "installing the nightly Rust toolchain (for cargo fuzz and the threaded wasm build)"
    rustup toolchain install nightly --profile minimal
fi
if ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
    log "adding rust-src to nightly (for -Z build-std in the threaded wasm build)"
    rustup component add rust-src --toolchain nightly
fi

wait_background
have_bindgen || die "wasm-bindgen $WASM_BINDGEN_VERSION still not on PATH after cargo install"
if [ "$MODE" = test ]; then
    have_tool wasm-pack "$WASM_PACK_VERSION" || die "wasm-pack $WASM_PACK_VERSION still not on PATH after cargo install"
    have_tool geckodriver "$GECKODRIVER_VERSION" || die "geckodriver $GECKODRIVER_VERSION still not on PATH after cargo install"
    cargo fuzz --version >/dev/null 2>&1 || die "cargo-fuzz still not on PATH after cargo install"
fi

# An independent reader for the GGUF writer: PyPI's gguf (pinned, with numpy) reads the
# sample `cargo test --test loader gguf::` writes (tests/support/check_with_pypi_gguf.py), from
# a virtual environment inside the repository (.venv/, git-ignored).
GGUF_PY_VERSION=0.19.0
NUMPY_PY_VERSION=2.4.6
have_gguf_py() {
    .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(not (m.version('gguf') == '$GGUF_PY_VERSION' and m.version('numpy') == '$NUMPY_PY_VERSION'))" 2>/dev/null
}
if [ "$MODE" = test ] && ! have_gguf_py; then
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

if [ "$MODE" = demo ]; then
    log "ok (demo): $(rustc --version | cut -d' ' -f1-2), $(wasm-bindgen --version), node $(node --version)," \
        "wasm-opt $(node_modules/.bin/wasm-opt --version | cut -d' ' -f3)"
else
    log "ok: $(rustc --version | cut -d' ' -f1-2), $(wasm-bindgen --version), $(wasm-pack --version), $(cargo fuzz --version)," \
        "node $(node --version), $(/usr/bin/chromium --version 2>/dev/null | grep -o 'Chromium [0-9.]*'), $(firefox-esr --version 2>/dev/null)," \
        "$(geckodriver --version 2>/dev/null | sed -n 1p), WebKitGTK $(dpkg-query -W -f='${Version}' webkit2gtk-driver)," \
        "wasm-opt $(node_modules/.bin/wasm-opt --version | cut -d' ' -f3)"
fi
