#!/usr/bin/env bash
# npm test: everything, from a fresh Debian machine with Rust.
#   1. setup (idempotent installs)        2. cargo test (native: unit, integration, doc tests),
#      then PyPI's gguf reading a file our writer made (tests/gguf_support/check_with_pypi_gguf.py)
#   3. no_std core build for wasm32       4. wasm tests (tests/wasm_*.rs) in headless Chromium
#   5. release wasm builds (web/pkg*)   6. browser tests (tests/e2e/*.spec.mjs, Playwright)
#   7. npm pack: the package's files, and that the packed module loads
#   8. fuzz smoke: every cargo-fuzz target for 60 s (scripts/fuzz-smoke.sh)
# Each runner's output is checked for a count of tests that actually ran: a runner that
# skips everything and exits 0 fails here. Logs go to tests/artifacts/logs/.
set -euo pipefail
LOG_TAG=test
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

LOGS=tests/artifacts/logs
mkdir -p "$LOGS"
# tests/wasm_model.rs embeds a shared model at compile time; serve.mjs and the browser tests
# serve it at /shared-models/. Native tests (tests/gpt2_shared.rs) read the same folder.
GGWEB_MODELS_DIR="$(find_models_dir)"
[ -n "$GGWEB_MODELS_DIR" ] || die "the shared reference models (tiny-gpt2-f32.gguf) are not in ../shared/models; set GGWEB_MODELS_DIR"
export GGWEB_MODELS_DIR
# A clean build gains nothing from incremental state (~1 GB in target/debug/incremental).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The whole run needs ~3 GB under target/ (native and wasm test binaries, release wasm, fuzz):
# say so up front instead of failing in a linker with "No space left on device".
mkdir -p "$TARGET_DIR"
free_kb=$(df -Pk "$TARGET_DIR" | awk 'NR==2 {print $4}')
if [ "${free_kb:-0}" -lt $((4 * 1024 * 1024)) ]; then
    log "warning: only $((free_kb / 1024)) MB free for $TARGET_DIR; npm test needs about 3 GB"
fi
# Chromium leaves ~12 MB of scoped dirs per run in TMPDIR: give browser runs a private one.
BROWSER_TMP="$(mktemp -d -t ggweb-browser.XXXXXX)"
declare -a SUMMARY=()
PASSED=0
STEP=setup
T_ALL=$(date +%s)

cleanup() {
    local rc=$?
    rm -rf "$BROWSER_TMP"
    if [ $rc -ne 0 ]; then
        echo
        echo "== npm test FAILED in step '$STEP' (exit $rc); logs in $LOGS/"
        for s in "${SUMMARY[@]}"; do echo "   $s"; done
        echo "summary: $PASSED passed, 1 failed"
    fi
}
trap cleanup EXIT

# run_step NAME CMD...: runs CMD with its output shown and kept in $LOGS/NAME.log.
run_step() {
    STEP=$1
    shift
    local t0=$(date +%s)
    log "── $STEP: $*"
    "$@" 2>&1 | tee "$LOGS/$STEP.log"
    STEP_SECS=$(($(date +%s) - t0))
}

# Sums libtest's "test result: ok. N passed; M failed" lines; fails on any failure or none run.
count_libtest() {
    local file=$1 what=$2 passed failed
    passed=$(grep -E '^test result: ' "$file" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
    failed=$(grep -E '^test result: ' "$file" | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
    [ "$failed" = 0 ] || die "$what: $failed tests failed"
    [ "$passed" -gt 0 ] || die "$what: no test ran (no 'test result: ok. N passed' with N > 0)"
    echo "$passed"
}

# 1. setup
STEP=setup
t0=$(date +%s)
bash scripts/setup.sh
SUMMARY+=("setup: $(($(date +%s) - t0)) s")

# 2. native tests
run_step native cargo test --color never
n=$(count_libtest "$LOGS/native.log" "cargo test")
# A test that printed SKIPPED returned early and counted as passed (WebGPU tests under
# GGWEB_ALLOW_NO_GPU=1 without an adapter): a CI run must not pass on tests that never ran.
if grep -qE '^SKIPPED' "$LOGS/native.log"; then
    grep -E '^SKIPPED' "$LOGS/native.log" | sort | uniq -c | sed 's/^/    /'
    die "cargo test: $(grep -cE '^SKIPPED' "$LOGS/native.log") test(s) skipped (GGWEB_ALLOW_NO_GPU=1 without a WebGPU adapter?)"
fi
PASSED=$((PASSED + n))
SUMMARY+=("native cargo test: $n passed ($STEP_SECS s)")

# 2b. the GGUF writer read back by an implementation that is not ours: PyPI's gguf (pinned,
# in .venv/ by setup.sh) on the sample `cargo test --test gguf` wrote
[ -f tests/artifacts/gguf-sample.gguf ] || die "cargo test wrote no tests/artifacts/gguf-sample.gguf"
run_step gguf-pypi .venv/bin/python tests/gguf_support/check_with_pypi_gguf.py tests/artifacts/gguf-sample.gguf
grep -q '^ok: ' "$LOGS/gguf-pypi.log" || die "PyPI gguf did not read the sample back"
PASSED=$((PASSED + 1))
SUMMARY+=("GGUF writer read by PyPI gguf: ok ($STEP_SECS s)")

# 3. the tensor core without std, as the browser's no_std build sees it
run_step nostd cargo build --lib --no-default-features --target wasm32-unknown-unknown --color never
SUMMARY+=("no_std wasm32 core build: ok ($STEP_SECS s)")

# 4. wasm tests in headless Chromium (wasm-bindgen-test-runner + chromedriver + webdriver.json)
wasm_tests=()
for f in tests/wasm_*.rs; do
    [ -e "$f" ] && wasm_tests+=(--test "$(basename "$f" .rs)")
done
[ ${#wasm_tests[@]} -gt 0 ] || die "no tests/wasm_*.rs found"
# WebGPU ops against the CPU backend, in Chromium's WebGPU (SwiftShader): --enable-unsafe-webgpu
# is in webdriver.json. (Named apart from wasm_* because it needs the webgpu feature, which
# the default features include.)
wasm_tests+=(--test webgpu_browser)
# GPT-2 split between WebGPU and the CPU by the scheduler, in the same browser.
wasm_tests+=(--test webgpu_sched_browser)
# The quantization formats and quants::gemm against vec_dot bit for bit, on simd128 (the
# browser's own Q8_0/Q4_0 prompt kernels).
wasm_tests+=(--test quants)
# Never -q here: the runner rejects --quiet and every test "fails".
run_step wasm-browser env WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver \
    WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-300}" TMPDIR="$BROWSER_TMP" \
    cargo test --color never --target wasm32-unknown-unknown "${wasm_tests[@]}"
if grep -qiE 'skipping|running 0 tests' "$LOGS/wasm-browser.log"; then
    die "a wasm test file ran no tests in the browser (see $LOGS/wasm-browser.log)"
fi
grep -q 'Running headless tests in Chrome' "$LOGS/wasm-browser.log" || die "wasm tests did not run in headless Chrome"
n=$(count_libtest "$LOGS/wasm-browser.log" "wasm tests in Chromium")
PASSED=$((PASSED + n))
SUMMARY+=("wasm tests in headless Chromium: $n passed ($STEP_SECS s)")

# 4b. the same quantization tests on the relaxed-SIMD build (web/pkg-relaxed's kernels: Q4_0
# prompts use i32x4.relaxed_dot_i8x16_i7x16_add), bit for bit against vec_dot, in Chromium.
run_step wasm-relaxed env WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver \
    WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-300}" TMPDIR="$BROWSER_TMP" \
    RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" CARGO_TARGET_DIR="$TARGET_DIR/wasm-relaxed-tests" GGWEB_EXPECT_RELAXED=1 \
    cargo test --color never --target wasm32-unknown-unknown --test quants
grep -q 'Running headless tests in Chrome' "$LOGS/wasm-relaxed.log" || die "relaxed-SIMD wasm tests did not run in headless Chrome"
n=$(count_libtest "$LOGS/wasm-relaxed.log" "relaxed-SIMD wasm tests in Chromium")
PASSED=$((PASSED + n))
SUMMARY+=("relaxed-SIMD wasm tests in headless Chromium: $n passed ($STEP_SECS s)")

# 5. the wasm module the browser tests and the package use
run_step build-wasm bash scripts/build-wasm.sh
SUMMARY+=("release wasm builds (pkg, pkg-threads, both -relaxed) + wasm-opt + load checks: ok ($STEP_SECS s)")

# 6. browser tests (node's test runner, playwright-core, /usr/bin/chromium)
run_step e2e env TMPDIR="$BROWSER_TMP" node --test --test-reporter=spec tests/e2e/*.spec.mjs
e_pass=$(grep -Eo '^ℹ pass [0-9]+' "$LOGS/e2e.log" | grep -Eo '[0-9]+' || true)
e_fail=$(grep -Eo '^ℹ fail [0-9]+' "$LOGS/e2e.log" | grep -Eo '[0-9]+' || true)
[ "${e_fail:-1}" = 0 ] || die "browser tests: ${e_fail:-?} failed"
[ "${e_pass:-0}" -gt 0 ] || die "browser tests: none ran"
e_skip=$(grep -Eo '^ℹ (skipped|todo) [0-9]+' "$LOGS/e2e.log" | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
[ "$e_skip" = 0 ] || die "browser tests: $e_skip skipped or todo"
PASSED=$((PASSED + e_pass))
SUMMARY+=("browser tests (Playwright): $e_pass passed ($STEP_SECS s)")

# 7. the npm package
run_step pack node scripts/check-pack.mjs
SUMMARY+=("npm pack: contents and import ok ($STEP_SECS s)")

# 8. fuzz smoke: each target must have run inputs and found no crash
run_step fuzz bash scripts/fuzz-smoke.sh
f_pass=$(grep -cE '^fuzz [a-z_]+: [0-9]+ runs, .* 0 crashes$' "$LOGS/fuzz.log" || true)
f_all=$(grep -cE '^fuzz [a-z_]+: ' "$LOGS/fuzz.log" || true)
[ "$f_all" -gt 0 ] || die "fuzz smoke: no target ran"
[ "$f_pass" = "$f_all" ] || die "fuzz smoke: $((f_all - f_pass)) of $f_all targets failed"
PASSED=$((PASSED + f_pass))
speeds=$(sed -nE 's/^fuzz ([a-z_]+): [0-9]+ runs, ([0-9.]+) exec\/s.*/\1 \2 exec\/s/p' "$LOGS/fuzz.log" | paste -sd, -)
SUMMARY+=("fuzz smoke: $f_pass targets without a crash: $speeds ($STEP_SECS s)")

rm -rf "$BROWSER_TMP"
SUMMARY+=("disk: $(du -sh "$TARGET_DIR" | cut -f1) under $TARGET_DIR")
echo
echo "== npm test passed in $(($(date +%s) - T_ALL)) s"
for s in "${SUMMARY[@]}"; do echo "   $s"; done
echo "summary: $PASSED passed, 0 failed"
