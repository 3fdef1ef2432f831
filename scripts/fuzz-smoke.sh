#!/usr/bin/env bash
# Fuzz smoke: builds every cargo-fuzz target in fuzz/ once (gguf_chunks, tokenizer_roundtrip,
# gallocr_plan, model_split, model_sizes32, sae_safetensors: whatever `cargo fuzz list` names),
# runs them side by side for FUZZ_SECS seconds each (default 30: they share the machine's
# cores; a smoke run, which the committed seeds' coverage makes worth it: longer runs with
# FUZZ_SECS, or with `cargo +nightly fuzz run` directly), and fails on any crash, hang, oversized allocation
# or a target that ran no inputs. Prints one line per target:
#   fuzz <target>: <runs> runs, <exec/s> exec/s, cov <edges>, corpus <n>, 0 crashes
# (scripts/test.sh counts those lines.)
#
# Environment:
#   FUZZ_SECS=30            seconds per target (libFuzzer -max_total_time)
#   FUZZ_SANITIZER=none     or address: ASAN + LeakSanitizer, which check the unsafe code
#                           (host buffers, SIMD kernels) too, but compile the crate ~7x
#                           slower (~170 s of CPU instead of ~25 s) and run 2-3x slower:
#                           too slow for npm test on 2 cores; use it for long runs.
#   Without a sanitizer, Rust's bounds and overflow checks (cargo fuzz builds with debug
#   assertions) and the fuzz crate's capped allocator (no single allocation over 32 MiB,
#   no more than 256 MiB live) still turn bad behaviour into crashes.
#   FUZZ_TARGETS="a b"      a subset (default: all of `cargo fuzz list`)
#   FUZZ_SERIAL=1           one target after the other instead of side by side
#
# Each run starts from the committed seeds (fuzz/corpus/<target>, read only), with the
# dictionary fuzz/dict/<target>.dict when there is one, and grows a scratch corpus; crashing inputs are kept in tests/artifacts/fuzz/ with the logs.
# Reproduce one with: cargo +nightly fuzz run <target> tests/artifacts/fuzz/<target>-crash-...
set -euo pipefail
LOG_TAG=fuzz
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

SECS=${FUZZ_SECS:-30}
SANITIZER=${FUZZ_SANITIZER:-none}
OUT=tests/artifacts/fuzz
FUZZ_DIR="$TARGET_DIR/fuzz-$SANITIZER"
mkdir -p "$OUT"

cargo +nightly fuzz --version >/dev/null 2>&1 || die "cargo-fuzz or the nightly toolchain is missing: run scripts/setup.sh"
read -r -a targets <<<"${FUZZ_TARGETS:-$(cargo +nightly fuzz list | tr '\n' ' ')}"
[ ${#targets[@]} -gt 0 ] || die "no fuzz targets in fuzz/"

t0=$(date +%s)
log "building ${targets[*]} (nightly, sanitizer $SANITIZER)"
# One build for all targets: cargo fuzz builds every [[bin]] of fuzz/Cargo.toml.
# The build's output goes to a log; on failure the compiler's errors are shown, not the tail
# of cargo-fuzz's own backtrace.
if ! cargo +nightly fuzz build --sanitizer "$SANITIZER" --target-dir "$FUZZ_DIR" >"$OUT/build.log" 2>&1; then
    grep -E -A8 '^error' "$OUT/build.log" | head -n 60 >&2
    die "the fuzz targets do not build (all of it in $OUT/build.log)"
fi
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
BIN="$FUZZ_DIR/$triple/release"
log "built in $(($(date +%s) - t0)) s"

SCRATCH="$(mktemp -d -t ggweb-fuzz.XXXXXX)"
trap 'rm -rf "$SCRATCH"' EXIT

# -timeout: an input running 25 s (wall clock, so generous for a busy machine) is a hang.
# -rss_limit_mb: the whole process. Under ASAN -malloc_limit_mb also catches C-level
# allocations (the capped Rust allocator in fuzz/src/lib.rs catches Rust ones in every build).
run_one() {
    local t=$1 dict=()
    mkdir -p "$SCRATCH/$t"
    [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
    "$BIN/$t" "$SCRATCH/$t" "fuzz/corpus/$t" "${dict[@]}" \
        -max_total_time="$SECS" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=256 \
        -print_final_stats=1 -artifact_prefix="$OUT/$t-" >"$OUT/$t.log" 2>&1
}

t1=$(date +%s)
log "running each target for $SECS s"
declare -A rc=()
if [ "${FUZZ_SERIAL:-0}" = 1 ]; then
    for t in "${targets[@]}"; do
        run_one "$t" && rc[$t]=0 || rc[$t]=$?
    done
else
    declare -A pid=()
    for t in "${targets[@]}"; do
        run_one "$t" &
        pid[$t]=$!
    done
    for t in "${targets[@]}"; do
        wait "${pid[$t]}" && rc[$t]=0 || rc[$t]=$?
    done
fi

failed=0
for t in "${targets[@]}"; do
    log="$OUT/$t.log"
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+' || true)
    corpus=$(ls "$SCRATCH/$t" | wc -l)
    if [ "${rc[$t]}" != 0 ]; then
        echo "fuzz $t: FAILED (exit ${rc[$t]}) after ${runs:-?} runs; see $log"
        grep -E 'panicked at|ERROR: libFuzzer|ERROR: AddressSanitizer|SUMMARY|Test unit written' "$log" | head -n 8 | sed 's/^/    /'
        failed=$((failed + 1))
    elif [ "${runs:-0}" -le 0 ]; then
        echo "fuzz $t: FAILED: no input ran; see $log"
        failed=$((failed + 1))
    else
        echo "fuzz $t: $runs runs, $speed exec/s, cov ${cov:-?}, corpus $corpus, 0 crashes"
    fi
done
log "fuzzed for $(($(date +%s) - t1)) s; total $(($(date +%s) - t0)) s including the build"
[ "$failed" = 0 ] || die "$failed fuzz target(s) failed"
