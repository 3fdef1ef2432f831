#!/usr/bin/env bash
# npm run test:scale: the GPT-2 family at full size (not part of npm test: ~3-6 GB of models
# under .models/ and minutes per browser load). Makes the models it lacks
# (tests/fixtures/make_scale_models.sh; llama.cpp's quantizer for Q4_K_M), builds the native
# CLI (release) and, if missing, the wasm packages, then runs tests/scale/*.spec.mjs:
# XL at Q8_0 and Q4_K_M in headless Chromium on 1 and 2 threads against the native CLI, then
# XL at F16 wholly on WebGPU (lavapipe) against the CPU backend (tests/webgpu/webgpu_load.rs).
# tests/scale/memory64.spec.mjs (with the xl shape): XL at F32 (6.2 GB, past wasm32's 4 GiB)
# on the CPU in Chromium through the Memory64 build (web/pkg-m64/) against the native CLI.
# tests/scale/gradient.spec.mjs: a gradient pass over 256 tokens of the 124M shape at Q8_0
# (.models/124m-q8_0.gguf, from bench/make_models.sh) in wasm32, its peak wasm memory printed.
# tests/scale/train.spec.mjs: full AdamW training of the 124M shape (.models/124m-f16.gguf and
# 124m-f32.gguf) at seqLen 128, batch 4 in wasm32, its peak wasm memory printed, a checkpoint to
# OPFS and the resume from it; tests/scale/load-memory.spec.mjs: the renderer's memory while the
# first of the XL models loads; then natively, LoRA on the XL
# shape at Q8_0 (tests/model/train.rs lora_on_the_xl_shape_at_q8_0_plans_and_runs), its peak RSS,
# and the same wholly on WebGPU on lavapipe (tests/webgpu/train_webgpu.rs).
#   GGWEB_SCALE_SHAPES=xl,large,medium npm run test:scale     # more shapes (default xl)
# Logs: tests/artifacts/logs/scale.log.
set -euo pipefail
LOG_TAG=test-scale
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

shapes="${GGWEB_SCALE_SHAPES:-xl}"
types=q8_0,q4_k_m
models=()
for s in ${shapes//,/ }; do
    for t in ${types//,/ }; do models+=("bench-$s-$t.gguf"); done
done
# GGWEB_PROFILE=test: the CLI and the generator from `cargo test`'s build (opt-level 2).
export GGWEB_PROFILE="${GGWEB_PROFILE:-release}"
profile_dir=$([ "$GGWEB_PROFILE" = release ] && echo release || echo debug)
log "building the native CLI (profile $GGWEB_PROFILE)"
cargo build --profile "$GGWEB_PROFILE" --bin ggweb --color never
bash tests/fixtures/make_scale_models.sh --shapes "$shapes" --types "$types" --out .models
specs=(tests/scale/scale.spec.mjs tests/scale/gradient.spec.mjs tests/scale/train.spec.mjs tests/scale/load-memory.spec.mjs)
if [[ ",$shapes," == *",xl,"* ]]; then
    bash tests/fixtures/make_scale_models.sh --shapes xl --types f32 --out .models
    specs+=(tests/scale/memory64.spec.mjs)
fi
for p in pkg pkg-threads pkg-m64 pkg-m64-threads; do
    [ -f "web/$p/ggweb_core.js" ] || { log "web/$p is missing: building the wasm packages"; bash scripts/build-wasm.sh; break; }
done
[ -f .models/124m-q8_0.gguf ] || die ".models/124m-q8_0.gguf is missing (tests/scale/gradient.spec.mjs): bash bench/make_models.sh"
for f in 124m-f16.gguf 124m-f32.gguf; do
    [ -f ".models/$f" ] || die ".models/$f is missing (tests/scale/train.spec.mjs): bash bench/make_models.sh"
done
mkdir -p tests/artifacts/logs
BROWSER_TMP="$(mktemp -d -t ggweb-browser.XXXXXX)"
trap 'rm -rf "$BROWSER_TMP"' EXIT
env TMPDIR="$BROWSER_TMP" GGWEB_GGWEB="$TARGET_DIR/$profile_dir/ggweb" GGWEB_SCALE_MODELS="$(IFS=,; echo "${models[*]}")" \
    node --test --test-reporter=spec --test-concurrency=1 "${specs[@]}" 2>&1 | tee tests/artifacts/logs/scale.log
passed=$(grep -Eo '^ℹ pass [0-9]+' tests/artifacts/logs/scale.log | grep -Eo '[0-9]+' || true)
failed=$(grep -Eo '^ℹ fail [0-9]+' tests/artifacts/logs/scale.log | grep -Eo '[0-9]+' || true)
[ "${failed:-1}" = 0 ] && [ "${passed:-0}" -gt 0 ] || die "scale tests: ${failed:-?} failed, ${passed:-0} passed"
# XL at F16 (3.3 GB of weights, more than wasm32 could hold) wholly on WebGPU, natively on
# lavapipe: streamed into device buffers with nothing on the host, one forward pass against
# the CPU backend's (tests/webgpu/webgpu_load.rs; ~5 min, lavapipe runs the shaders on the CPU).
if [[ ",$shapes," == *",xl,"* ]]; then
    bash tests/fixtures/make_scale_models.sh --shapes xl --types f16 --out .models
    GGWEB_SCALE_XL_F16="$ROOT/.models/bench-xl-f16.gguf" cargo test --color never --test webgpu -- --ignored --nocapture xl_f16 \
        2>&1 | tee tests/artifacts/logs/scale-webgpu.log
    n=$(grep -Eo 'test result: ok\. [0-9]+ passed' tests/artifacts/logs/scale-webgpu.log | grep -Eo '[0-9]+' | head -1 || true)
    [ "${n:-0}" -gt 0 ] || die "the XL F16 WebGPU scale test did not pass"
    passed=$((passed + n))
fi
# LoRA on the XL shape at Q8_0, natively (issue 39's memory acceptance; its peak RSS printed).
if [[ ",$shapes," == *",xl,"* ]]; then
    GGWEB_SCALE_XL_Q8_0="$ROOT/.models/bench-xl-q8_0.gguf" cargo test --color never --test model -- --ignored --nocapture \
        train::lora_on_the_xl_shape 2>&1 | tee tests/artifacts/logs/scale-xl-lora.log
    k=$(grep -Eo 'test result: ok\. [0-9]+ passed' tests/artifacts/logs/scale-xl-lora.log | grep -Eo '[0-9]+' | head -1 || true)
    [ "${k:-0}" -gt 0 ] || die "the XL Q8_0 LoRA training test did not pass"
    passed=$((passed + k))
    # The same on WebGPU (lavapipe): the frozen XL weights, the adapter and its state in device memory.
    GGWEB_SCALE_XL_Q8_0="$ROOT/.models/bench-xl-q8_0.gguf" cargo test --color never --test webgpu -- --ignored --nocapture \
        train_webgpu::lora_on_the_xl_shape 2>&1 | tee tests/artifacts/logs/scale-xl-lora-webgpu.log
    k=$(grep -Eo 'test result: ok\. [0-9]+ passed' tests/artifacts/logs/scale-xl-lora-webgpu.log | grep -Eo '[0-9]+' | head -1 || true)
    [ "${k:-0}" -gt 0 ] || die "the XL Q8_0 LoRA training test on WebGPU did not pass"
    passed=$((passed + k))
fi
echo "summary: $passed passed, 0 failed (models: ${models[*]}${n:+ + bench-xl-f16.gguf on WebGPU})"
