#!/usr/bin/env bash
# Builds the two wasm modules engine.js chooses between, each with its wasm-bindgen glue
# (--target web: plain ES modules, no bundler, same file names in both folders), optimized
# by npm binaryen's wasm-opt (Debian's binaryen 108 breaks wasm-bindgen output), then
# checked by loading it in Node:
#   web/pkg/          single-thread (stable Rust, simd128): runs everywhere
#   web/pkg-threads/  threaded (nightly, -Z build-std, atomics + shared memory): used when
#                     the page is cross-origin isolated and more than one thread is asked for
#   GGWEB_WASM_OPT=0 skips wasm-opt (faster local iterations).
#   GGWEB_THREADS=0 skips the threaded build (engine.js then falls back to web/pkg/).
set -euo pipefail
LOG_TAG=build-wasm
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

# bindgen_opt RAW_WASM OUT_DIR [extra wasm-opt flags]: glue, wasm-opt, load check.
bindgen_opt() {
    local raw=$1 out=$2
    shift 2
    [ -f "$raw" ] || die "cargo produced no $raw"
    rm -rf "$out"
    wasm-bindgen --target web --out-dir "$out" --out-name ggweb_core "$raw"
    local wasm="$out/ggweb_core_bg.wasm"
    if [ "${GGWEB_WASM_OPT:-1}" != 0 ]; then
        local before
        before=$(stat -c %s "$wasm")
        # The features rustc's wasm32 target emits by default, plus simd128 (.cargo/config.toml).
        # wasm-opt also reads the module's target_features section, so relaxed-simd is kept when used.
        node_modules/.bin/wasm-opt -O3 \
            --enable-simd --enable-bulk-memory --enable-bulk-memory-opt --enable-nontrapping-float-to-int \
            --enable-sign-ext --enable-reference-types --enable-multivalue --enable-mutable-globals "$@" \
            "$wasm" -o "$wasm.opt"
        mv "$wasm.opt" "$wasm"
        log "wasm-opt -O3: $before -> $(stat -c %s "$wasm") bytes"
    fi
    node --experimental-wasm-relaxed-simd scripts/check-wasm.mjs "$out"
}

t0=$(date +%s)
cargo build --lib --release --target wasm32-unknown-unknown
bindgen_opt "$TARGET_DIR/wasm32-unknown-unknown/release/ggweb.wasm" web/pkg
log "built web/pkg in $(($(date +%s) - t0)) s: $(cd web/pkg && ls | tr '\n' ' ')"

if [ "${GGWEB_THREADS:-1}" = 0 ]; then
    rm -rf web/pkg-threads
    log "GGWEB_THREADS=0: no threaded build (web/pkg-threads removed; pages use web/pkg)"
    exit 0
fi
t1=$(date +%s)
# Threads need std rebuilt with atomics (-Z build-std, nightly + rust-src) and a shared,
# imported memory with the TLS symbols wasm-bindgen's thread transform uses. The maximum
# is wasm32's 4 GiB, as for the single-thread build (host::address_space_left assumes it);
# browsers reserve it as address space, not memory. Own target dir: other RUSTFLAGS would
# otherwise rebuild the single-thread artifacts every time.
THREADS_TARGET_DIR="$TARGET_DIR/wasm-threads"
RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128 \
-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=4294967296 \
-C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align \
-C link-arg=--export=__tls_base -C link-arg=--export=__heap_base" \
CARGO_TARGET_DIR="$THREADS_TARGET_DIR" \
    cargo +nightly build --lib --release --target wasm32-unknown-unknown -Z build-std=panic_abort,std
bindgen_opt "$THREADS_TARGET_DIR/wasm32-unknown-unknown/release/ggweb.wasm" web/pkg-threads --enable-threads
log "built web/pkg-threads in $(($(date +%s) - t1)) s: $(cd web/pkg-threads && ls | tr '\n' ' ')"
