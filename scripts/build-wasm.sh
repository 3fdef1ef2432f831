#!/usr/bin/env bash
# Builds web/pkg/: the release wasm module, its wasm-bindgen glue (--target web: plain ES
# modules, no bundler), optimized by npm binaryen's wasm-opt (Debian's binaryen 108 breaks
# wasm-bindgen output), then checked by loading it in Node.
#   GGWEB_WASM_OPT=0 skips wasm-opt (faster local iterations).
set -euo pipefail
LOG_TAG=build-wasm
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

t0=$(date +%s)
cargo build --lib --release --target wasm32-unknown-unknown
raw="$TARGET_DIR/wasm32-unknown-unknown/release/ggweb.wasm"
[ -f "$raw" ] || die "cargo produced no $raw"

out=web/pkg
rm -rf "$out"
wasm-bindgen --target web --out-dir "$out" --out-name ggweb_core "$raw"

wasm="$out/ggweb_core_bg.wasm"
if [ "${GGWEB_WASM_OPT:-1}" != 0 ]; then
    before=$(stat -c %s "$wasm")
    # The features rustc's wasm32 target emits by default, plus simd128 (.cargo/config.toml).
    # wasm-opt also reads the module's target_features section, so relaxed-simd is kept when used.
    node_modules/.bin/wasm-opt -O3 \
        --enable-simd --enable-bulk-memory --enable-bulk-memory-opt --enable-nontrapping-float-to-int \
        --enable-sign-ext --enable-reference-types --enable-multivalue --enable-mutable-globals \
        "$wasm" -o "$wasm.opt"
    mv "$wasm.opt" "$wasm"
    log "wasm-opt -O3: $before -> $(stat -c %s "$wasm") bytes"
fi

node --experimental-wasm-relaxed-simd scripts/check-wasm.mjs "$out"
log "built $out in $(($(date +%s) - t0)) s: $(cd "$out" && ls | tr '\n' ' ')"
