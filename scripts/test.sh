#!/usr/bin/env bash
# npm test: everything, from a fresh Debian machine with Rust.
#   1. setup (idempotent installs); 1b. types: web/ggweb.d.ts under tsc --strict (tests/types/)
#   1c. no import cycles between the files of crate/ (scripts/check-cycles.mjs)
#   2. cargo test (native: unit, integration, doc tests),
#      then PyPI's gguf reading a file our writer made (tests/support/check_with_pypi_gguf.py)
#   3. no_std core build for wasm32 (and x86_64)   4. wasm tests (wasm-pack test) in headless Chromium, Firefox
#   5. release wasm builds (web/pkg*)   6. browser tests (tests/e2e/*.spec.mjs, Playwright; then
#      tests/engines/*.spec.mjs in Firefox and WebKit)
#   7. npm pack: the package's files, and that the packed module loads
#   7b. the packed package in a Vite 8 and a webpack 5 app (tests/bundlers/), built and run in
#       headless Chromium; 7c. in Node.js (tests/node/); 7d. the examples (examples/react,
#       service-worker, node-vitest) built and run (tests/examples/)
#   8. fuzz smoke: every cargo-fuzz target for 30 s (scripts/fuzz-smoke.sh)
# Each runner's output is checked for a count of tests that actually ran: a runner that
# skips everything and exits 0 fails here. Logs go to tests/artifacts/logs/.
set -euo pipefail
LOG_TAG=test
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

LOGS=tests/artifacts/logs
mkdir -p "$LOGS"
# The llama.cpp-made reference models live in tests/fixtures/llamacpp (GGWEB_MODELS_DIR overrides);
# serve.mjs and the browser tests serve them at /shared-models/, native tests read them there.
GGWEB_MODELS_DIR="$(find_models_dir)"
[ -n "$GGWEB_MODELS_DIR" ] || die "the reference models (tiny-gpt2-f32.gguf) are not in tests/fixtures/llamacpp; set GGWEB_MODELS_DIR"
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

# Counts node:test's "ℹ pass N" / "ℹ fail M"; fails on any failure or none run.
count_node_test() {
    local file=$1 what=$2 passed failed
    passed=$(grep -Eo '^ℹ pass [0-9]+' "$file" | grep -Eo '[0-9]+' || true)
    failed=$(grep -Eo '^ℹ fail [0-9]+' "$file" | grep -Eo '[0-9]+' || true)
    [ "${failed:-1}" = 0 ] || die "$what: ${failed:-?} failed"
    [ "${passed:-0}" -gt 0 ] || die "$what: none ran"
    echo "$passed"
}

# 1. setup
STEP=setup
t0=$(date +%s)
bash scripts/setup.sh
SUMMARY+=("setup: $(($(date +%s) - t0)) s")

# 1b. the public types as an app compiles them: tsc --strict --noEmit over tests/types/usage.ts
# (every method, option and result field) and typos.ts (mistakes that must not compile)
run_step types node --test --test-reporter=spec tests/types/*.test.mjs
n=$(count_node_test "$LOGS/types.log" "type checks")
PASSED=$((PASSED + n))
SUMMARY+=("types (tsc --strict --noEmit, TypeScript $(node -p "require('typescript/package.json').version")): $n passed ($STEP_SECS s)")

# 1c. no import cycles between the files of crate/ (scripts/check-cycles.mjs: `use` lines and
# paths in code, resolved to the file that defines each name; a cycle fails, named file -> file)
run_step cycles node scripts/check-cycles.mjs crate
grep -qE '^import cycles: 0 .*: ok$' "$LOGS/cycles.log" || die "import cycles in crate/ (see $LOGS/cycles.log)"
PASSED=$((PASSED + 1))
SUMMARY+=("$(grep -E '^import cycles: ' "$LOGS/cycles.log") ($STEP_SECS s)")

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
# in .venv/ by setup.sh) on the sample `cargo test --test loader gguf::` wrote
[ -f tests/artifacts/gguf-sample.gguf ] || die "cargo test wrote no tests/artifacts/gguf-sample.gguf"
run_step gguf-pypi .venv/bin/python tests/support/check_with_pypi_gguf.py tests/artifacts/gguf-sample.gguf
grep -q '^ok: ' "$LOGS/gguf-pypi.log" || die "PyPI gguf did not read the sample back"
PASSED=$((PASSED + 1))
SUMMARY+=("GGUF writer read by PyPI gguf: ok ($STEP_SECS s)")

# 3. the tensor core without std, as the browser's no_std build sees it
run_step nostd cargo build --lib --no-default-features --target wasm32-unknown-unknown --color never
SUMMARY+=("no_std wasm32 core build: ok ($STEP_SECS s)")
# ... and natively, where the x86 kernels are compiled in, as an rlib (a native no_std cdylib
# has no allocator or panic handler to link). A type check is all an rlib build proved (it
# links nothing), and step 2 already generated code for the same kernels: `--profile check`
# skips that second codegen.
run_step nostd-x86 cargo rustc --lib --no-default-features --crate-type rlib --profile check --color never
SUMMARY+=("no_std x86_64 core type check: ok ($STEP_SECS s)")

# 4. wasm tests: `wasm-pack test --headless --chrome`, then `--firefox`, as a Rust/wasm user
# runs them (wasm-pack builds every test target for wasm32 and runs each through
# wasm-bindgen-test-runner; chromedriver, geckodriver and the browsers' options in
# webdriver.json: WebGPU on in both, SwiftShader in Chromium, Mesa's lavapipe in Firefox).
# The browser suite is the test crates with `wasm_bindgen_test_configure!(run_in_browser)`:
# tests/browser/main.rs, one crate with a module per subject (smoke, simd: the SIMD kernels;
# quants: tests/kernels/quants.rs, the quantized products bit for bit against vec_dot;
# backend_ops: tests/backend_ops/suite.rs's op cases on the wasm CPU and WebGPU; model: the
# model bindings against HF; kquant_mixes; webgpu, webgpu_sched: WebGPU in the browser, GPT-2
# split between WebGPU and the CPU), and tests/wasm_memory.rs (the memory a load takes, alone
# in its module so that the high-water mark is that one load's). They are named with --test:
# a bare `wasm-pack test` also runs the native test binaries (tests/<layer>/main.rs), compiled
# out on wasm32 ("no tests to run!"), tests/wasm_bench.rs, a Node benchmark it skips, and the
# doc tests, which "pass" with nothing to run (they run natively in step 2).
mapfile -t browser_files < <(grep -l 'wasm_bindgen_test_configure!(run_in_browser)' tests/*.rs tests/*/main.rs | sort)
[ ${#browser_files[@]} -gt 0 ] || die "no test crate runs in the browser"
browser_tests=()
for f in "${browser_files[@]}"; do
    case $f in */main.rs) browser_tests+=(--test "$(basename "$(dirname "$f")")") ;; *) browser_tests+=(--test "$(basename "$f" .rs)") ;; esac
done
# The modules of tests/browser/main.rs (not the inline `mod support { ... }`): each must pass tests.
mapfile -t browser_modules < <(sed -nE 's/^ *mod ([a-z0-9_]+);.*/\1/p' tests/browser/main.rs)
[ ${#browser_modules[@]} -gt 0 ] || die "tests/browser/main.rs declares no test module"

# check_modules LOG WHAT MODULE...: wasm-bindgen-test's "test <module>::<name> ... ok" lines:
# each MODULE passed > 0 tests, and no test in LOG failed. Prints "module=N ...".
check_modules() {
    local log=$1 what=$2 m n out=()
    shift 2
    ! grep -qE '^test .* \.\.\. FAILED' "$log" || die "$what: failed: $(grep -E '^test .* \.\.\. FAILED' "$log" | cut -d' ' -f2 | paste -sd' ' -)"
    for m in "$@"; do
        n=$(grep -cE "^test $m::[^ ]+ \.\.\. ok\$" "$log" || true)
        [ "${n:-0}" -gt 0 ] || die "$what: module $m of tests/browser passed no test"
        out+=("$m=$n")
    done
    echo "${out[*]}"
}

# check_wasm_pack LOG BROWSER: the runner's verdict per test crate cargo ran ("Running
# <file>"): each browser crate passed > 0 tests with 0 failures, none was skipped or empty,
# every one ran, and so did every module of tests/browser. Prints the number of tests that passed.
check_wasm_pack() {
    local log=$1 browser=$2 f n total=0 verdicts
    verdicts=$(awk '
        /^ +Running / { if (file != "") print file, v; file = ($2 == "unittests") ? $3 : $2; v = "none"; next }
        /^ +Doc-tests / { if (file != "") print file, v; file = "doc-tests"; v = "none"; next }
        /no tests to run!/ { v = "empty" }
        /only configured to run in node.js/ { v = "skipped" }
        /^test result: / { p = $0; sub(/^test result: [A-Za-z]+\. /, "", p); sub(/ passed.*/, "", p); fl = $0; sub(/.* passed; /, "", fl); sub(/ failed.*/, "", fl)
                           v = (index($0, "test result: ok.") ? "ok" : "FAILED") " " p " " fl }
        END { if (file != "") print file, v }' "$log")
    echo "$verdicts" > "${log%.log}.files"
    grep -q "Running headless tests in $browser" "$log" || die "wasm-pack: no test ran in headless $browser"
    [ "$(wc -l <<< "$verdicts")" = "${#browser_files[@]}" ] ||
        die "wasm-pack ($browser): ${#browser_files[@]} test crates expected, cargo ran: $(cut -d' ' -f1 <<< "$verdicts" | paste -sd' ' -)"
    for f in "${browser_files[@]}"; do
        n=$(awk -v f="$f" '$1 == f && $2 == "ok" && $4 == 0 { print $3 }' <<< "$verdicts")
        [ "${n:-0}" -gt 0 ] || die "wasm-pack ($browser): $f ran no test or failed ($(awk -v f="$f" '$1 == f { $1 = ""; print }' <<< "$verdicts"))"
        total=$((total + n))
    done
    check_modules "$log" "wasm-pack ($browser)" "${browser_modules[@]}" >> "${log%.log}.files"
    echo "$total"
}

for browser in chrome firefox; do
    driver=(--chromedriver /usr/bin/chromedriver)
    [ "$browser" = firefox ] && driver=(--geckodriver "$(command -v geckodriver)")
    # wasm-pack builds with `cargo build --tests` (the dev profile), then runs `cargo test` (the
    # test profile: opt-level 2); with dev at opt-level 2 too the second reuses the first's
    # artifacts instead of rebuilding the crate and every test file, twice per browser. The
    # runner's 300 s per test is also .cargo/config.toml's [env], for a bare `wasm-pack test`.
    run_step "wasm-$browser" env CARGO_PROFILE_DEV_OPT_LEVEL=2 WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-300}" TMPDIR="$BROWSER_TMP" \
        wasm-pack --log-level warn test --headless "--$browser" "${driver[@]}" -- "${browser_tests[@]}"
    name=$([ "$browser" = chrome ] && echo Chrome || echo Firefox)
    n=$(check_wasm_pack "$LOGS/wasm-$browser.log" "$name")
    PASSED=$((PASSED + n))
    SUMMARY+=("wasm-pack test --$browser: $n passed in ${#browser_files[@]} crates, ${#browser_modules[@]} modules in tests/browser ($STEP_SECS s)")
done

# 4b. the same quantization tests on the relaxed-SIMD build (web/pkg-relaxed's kernels: Q4_0
# prompts use i32x4.relaxed_dot_i8x16_i7x16_add), bit for bit against vec_dot, the repacked
# layouts' kernels (repack: the relaxed build has its own several-row paths), the backend_ops
# cases on its CPU kernels, and the float kernels' checks (simd: the fused f16 and f32 tiles,
# the f16 tile's scaled and exact paths bit for bit): tests/browser's quants, backend_ops,
# repack and simd modules (the runner takes one name filter, so the other modules are left out
# with --skip), in Chromium. Built without the `webgpu` feature: these modules' WebGPU cases are
# compiled out under relaxed SIMD anyway, and wgpu's crates were ~40 s of the step's build.
relaxed_modules=(quants backend_ops repack simd)
relaxed_skip=()
for m in "${browser_modules[@]}"; do
    [[ " ${relaxed_modules[*]} " == *" $m "* ]] || relaxed_skip+=(--skip "$m::")
done
run_step wasm-relaxed env WASM_BINDGEN_USE_BROWSER=1 CHROMEDRIVER=/usr/bin/chromedriver \
    WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-300}" TMPDIR="$BROWSER_TMP" \
    RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" CARGO_TARGET_DIR="$TARGET_DIR/wasm-relaxed-tests" GGWEB_EXPECT_RELAXED=1 \
    cargo test --color never --target wasm32-unknown-unknown --no-default-features --features std --test browser -- "${relaxed_skip[@]}"
grep -q 'Running headless tests in Chrome' "$LOGS/wasm-relaxed.log" || die "relaxed-SIMD wasm tests did not run in headless Chrome"
relaxed_counts=$(check_modules "$LOGS/wasm-relaxed.log" "relaxed-SIMD wasm tests" "${relaxed_modules[@]}")
n=$(count_libtest "$LOGS/wasm-relaxed.log" "relaxed-SIMD wasm tests in Chromium")
[ "$n" = "$(tr ' ' '\n' <<< "$relaxed_counts" | awk -F= '{s += $2} END {print s}')" ] ||
    die "relaxed-SIMD wasm tests: $n passed, but $relaxed_counts in ${relaxed_modules[*]} (--skip let another module run?)"
PASSED=$((PASSED + n))
SUMMARY+=("relaxed-SIMD wasm tests in headless Chromium: $n passed, $relaxed_counts ($STEP_SECS s)")

# 5. the wasm module the browser tests and the package use
run_step build-wasm bash scripts/build-wasm.sh
SUMMARY+=("release wasm builds (pkg, pkg-threads, both -relaxed, pkg-tokenizer, pkg-m64, pkg-m64-threads) + wasm-opt + load checks: ok ($STEP_SECS s)")
# `npm start` after `npm test` runs build-wasm.sh again: with every build up to date it must
# compile, bind and optimize nothing (cargo fresh, each output's stamp current).
run_step build-wasm-again bash scripts/build-wasm.sh
built=$(grep -c '^\[build-wasm\] built web/' "$LOGS/build-wasm-again.log" || true)
reused=$(grep -c ' is up to date with ' "$LOGS/build-wasm-again.log" || true)
if grep -q '^ *Compiling ' "$LOGS/build-wasm-again.log" || [ "${built:-0}" = 0 ] || [ "$built" != "$reused" ]; then
    die "build-wasm.sh run again redid work: $reused of $built builds reused (see $LOGS/build-wasm-again.log)"
fi
SUMMARY+=("build-wasm.sh again (npm start after npm test): all $built builds reused ($STEP_SECS s)")

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

# 6b. the model checks in Firefox (puppeteer-core over WebDriver BiDi) and WebKit
# (WebKitWebDriver + selenium-webdriver, under Xvfb): one page load per engine
run_step engines env TMPDIR="$BROWSER_TMP" node --test --test-reporter=spec tests/engines/*.spec.mjs
e_pass=$(grep -Eo '^ℹ pass [0-9]+' "$LOGS/engines.log" | grep -Eo '[0-9]+' || true)
e_fail=$(grep -Eo '^ℹ fail [0-9]+' "$LOGS/engines.log" | grep -Eo '[0-9]+' || true)
[ "${e_fail:-1}" = 0 ] || die "engine tests: ${e_fail:-?} failed"
for engine in Firefox WebKit; do
    grep -qE "^✔ $engine \(" "$LOGS/engines.log" || die "engine tests: the $engine suite did not run and pass"
done
PASSED=$((PASSED + e_pass))
e_rerun=$(grep -c '^Firefox page rerun after a hang' "$LOGS/engines.log" || true)
SUMMARY+=("model checks in Firefox and WebKit: $e_pass passed ($STEP_SECS s; Firefox pages rerun after a hang: ${e_rerun:-0})")

# 7. the npm package
run_step pack node scripts/check-pack.mjs
SUMMARY+=("npm pack: contents and import ok ($STEP_SECS s)")

# 7b. the packed package as apps use it: Vite 8 and webpack 5 production builds (each app's
# bundler pinned by its package-lock.json, installed with npm ci), the Vite dev server, and Node.js
PACK_DIR="$BROWSER_TMP/pack"
mkdir -p "$PACK_DIR"
GGWEB_TARBALL="$PACK_DIR/$(npm pack --silent --pack-destination "$PACK_DIR" | tail -n 1)"
[ -f "$GGWEB_TARBALL" ] || die "npm pack made no tarball in $PACK_DIR"
run_step bundlers env TMPDIR="$BROWSER_TMP" GGWEB_TARBALL="$GGWEB_TARBALL" node --test --test-reporter=spec tests/bundlers/*.test.mjs
n=$(count_node_test "$LOGS/bundlers.log" "bundler apps")
PASSED=$((PASSED + n))
sizes=$(sed -nE 's/^(vite|webpack|esbuild): dist\/ holds ([0-9]+) files, ([0-9]+) bytes:$/\1 \3 B/p' "$LOGS/bundlers.log" | paste -sd, -)
SUMMARY+=("bundler apps (Vite, webpack, esbuild recipe) in Chromium: $n passed; dist: $sizes ($STEP_SECS s)")

# 7c. Node.js: the packed package loads a model from a path and from bytes
run_step node env GGWEB_TARBALL="$GGWEB_TARBALL" node --test --test-reporter=spec tests/node/*.test.mjs
n=$(count_node_test "$LOGS/node.log" "Node.js tests")
PASSED=$((PASSED + n))
SUMMARY+=("Node.js ($(node --version)): $n passed ($STEP_SECS s)")

# 7d. the examples in examples/ as their READMEs run them, on the same packed package: the React
# app (Vite build and dev server, StrictMode) and the service worker in Chromium, Vitest in Node
run_step examples env TMPDIR="$BROWSER_TMP" GGWEB_TARBALL="$GGWEB_TARBALL" node --test --test-reporter=spec tests/examples/*.test.mjs
n=$(count_node_test "$LOGS/examples.log" "examples")
[ "$n" -ge 3 ] || die "examples: 3 tests expected (react, service-worker, node-vitest), $n passed"
grep -qE '^ℹ skipped 0$' "$LOGS/examples.log" || die "examples: some tests were skipped"
PASSED=$((PASSED + n))
SUMMARY+=("examples (React + Vite, service worker, Vitest): $n passed ($STEP_SECS s)")

# 8. fuzz smoke: each target must have run inputs and found no crash
run_step fuzz bash scripts/fuzz-smoke.sh
f_pass=$(grep -cE '^fuzz [a-z0-9_]+: [0-9]+ runs, .* 0 crashes$' "$LOGS/fuzz.log" || true)
f_all=$(grep -cE '^fuzz [a-z0-9_]+: ' "$LOGS/fuzz.log" || true)
[ "$f_all" -gt 0 ] || die "fuzz smoke: no target ran"
[ "$f_pass" = "$f_all" ] || die "fuzz smoke: $((f_all - f_pass)) of $f_all targets failed"
PASSED=$((PASSED + f_pass))
speeds=$(sed -nE 's/^fuzz ([a-z0-9_]+): [0-9]+ runs, ([0-9.]+) exec\/s.*/\1 \2 exec\/s/p' "$LOGS/fuzz.log" | paste -sd, -)
SUMMARY+=("fuzz smoke: $f_pass targets without a crash: $speeds ($STEP_SECS s)")

rm -rf "$BROWSER_TMP"
SUMMARY+=("disk: $(du -sh "$TARGET_DIR" | cut -f1) under $TARGET_DIR")
echo
echo "== npm test passed in $(($(date +%s) - T_ALL)) s"
for s in "${SUMMARY[@]}"; do echo "   $s"; done
echo "summary: $PASSED passed, 0 failed"
