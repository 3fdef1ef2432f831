#!/usr/bin/env bash
# Native wgpu (Vulkan) decode and prefill of the GPT-2 124M and XL shapes on a real GPU,
# against the GPU's memory bandwidth (issue #25 item 4). One script for a session that is
# lent a GPU machine: everything it finds is printed, nothing else is needed.
#
#   bash scripts/device-bench.sh --bw-gbs 4800                  # H200: 4.8 TB/s nominal
#   bash scripts/device-bench.sh --bw-gbs 4800 --no-build       # binaries built elsewhere
#   bash scripts/device-bench.sh --bw-gbs 50 --no-build --tiny  # the script's own check (lavapipe)
#
# Options: --bw-gbs N (the GPU's nominal bandwidth, GB/s; required), --shapes 124m,xl,
# --types f16,q8_0 (make_bench_models types: f32, f16, q8_0, q4_0), --models DIR (.models),
# --decode N (tokens, 64), --prompt N (tokens, 512; also the batch: one graph of N tokens),
# --reps N (3), --no-build (use target/release/ggweb and target/release/examples/
# make_bench_models as they are), --ab (each model again with subgroups off, then with
# shader-f16 off), --tiny (only tests/fixtures' tiny model, -p 16 -n 8 -r 1 unless given,
# with the workgroup kernels forced: a check of the script itself on any adapter).
#
# The device machine has no network: cargo must find every crate offline (a warm
# ~/.cargo), or build here and carry the two binaries (8.8 MB + 0.9 MB):
#   cargo build --release --bin ggweb --example make_bench_models
#   run(carry=["target/release/ggweb", "target/release/examples/make_bench_models"],
#       command="bash scripts/device-bench.sh --bw-gbs 4800 --no-build")
# Time on a 16-core machine with a GPU: making the models ~1-2 min (XL f16 3.3 GB, q8_0
# 1.75 GB, written to --models), each bench well under a minute; build ~3-5 min when asked.
#
# What it prints per model: the adapter and kernels (GGWEB_WEBGPU_INFO), ggweb bench's
# JSON, then two SUMMARY lines: decode tok/s, the bytes of the weight matrices (every
# decode step reads each once, the LM head included; from `ggweb inspect`), the bandwidth
# that implies, its fraction of --bw-gbs, and the bandwidth-bound ceiling (bw / bytes per
# token); prefill tok/s and the FLOP rate in the matrices it implies (2 x their weights
# per token; attention's own products left out).
set -euo pipefail
LOG_TAG=device-bench
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

bw=""
shapes=124m,xl
types=f16,q8_0
models=.models
n_gen=""
n_prompt=""
reps=""
build=1
ab=0
tiny=0
while [ $# -gt 0 ]; do
    case $1 in
        --bw-gbs) bw=$2; shift 2 ;;
        --shapes) shapes=$2; shift 2 ;;
        --types) types=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        --decode) n_gen=$2; shift 2 ;;
        --prompt) n_prompt=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --ab) ab=1; shift ;;
        --tiny) tiny=1; shift ;;
        *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
# The tiny model's context is short: smaller runs there.
if [ "$tiny" = 1 ]; then n_gen=${n_gen:-8} n_prompt=${n_prompt:-16} reps=${reps:-1}; fi
n_gen=${n_gen:-64} n_prompt=${n_prompt:-512} reps=${reps:-3}
[[ "$bw" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--bw-gbs N: the GPU's nominal memory bandwidth in GB/s (H200: 4800)"

BIN="$TARGET_DIR/release/ggweb"
GEN="$TARGET_DIR/release/examples/make_bench_models"
t0=$SECONDS
if [ "$build" = 1 ]; then
    log "cargo build --release --bin ggweb --example make_bench_models (features: default, webgpu included)"
    cargo build --release --features webgpu --bin ggweb --example make_bench_models --color never
fi
[ -x "$BIN" ] || die "$BIN is missing (build it, or carry it and pass --no-build)"
log "binary: $BIN ($(stat -c %s "$BIN") bytes, $(date -u -r "$BIN" +%FT%TZ)); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

log "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv || true
fi
# wgpu needs a Vulkan loader and the GPU's ICD: say which are installed (for a failed adapter).
log "Vulkan ICDs: $(ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null | grep -i json | paste -sd' ' - || true)"

REF=tests/fixtures/llamacpp/tiny-gpt2-f32.gguf
files=()
if [ "$tiny" = 1 ]; then
    # The script's own check: the tiny model with the workgroup kernels (Auto would pick the
    # per-row ones on a CPU adapter).
    export GGWEB_WEBGPU_KERNELS=workgroup
    files=("$REF")
else
    [ -x "$GEN" ] || die "$GEN is missing (build it, or carry it and pass --no-build)"
    mkdir -p "$models"
    for shape in ${shapes//,/ }; do
        missing=()
        for t in ${types//,/ }; do
            f="$models/bench-$shape-$t.gguf"
            [ -f "$f" ] || missing+=("$t")
            files+=("$f")
        done
        if [ ${#missing[@]} -gt 0 ]; then
            log "making $shape: ${missing[*]} (examples/make_bench_models)"
            "$GEN" "$REF" "$models" --shape "$shape" --types "$(IFS=,; echo "${missing[*]}")"
        fi
    done
fi
log "models ready after $((SECONDS - t0)) s"

# bench MODEL LABEL: one ggweb bench on WebGPU (decode n_gen tokens after an n_prompt-token
# prompt in one graph), its output and the summary lines.
bench() {
    local f=$1 label=$2 out
    log "$label: $f"
    out=$(GGWEB_WEBGPU_INFO=1 "$BIN" bench -m "$f" --backend webgpu -p "$n_prompt" -b "$n_prompt" -n "$n_gen" \
        -r "$reps" --json 2>&1) || { printf '%s\n' "$out"; die "ggweb bench failed on $f"; }
    # (wgpu's Vulkan loader complains about XDG_RUNTIME_DIR on headless machines: noise.)
    printf '%s\n' "$out" | grep -v '^error: XDG_RUNTIME_DIR' || true
    python3 - "$bw" "$label" "$(printf '%s\n' "$out" | tail -n 1)" "$("$BIN" inspect -m "$f" --json 2>/dev/null)" <<'EOF'
import json, os, sys
bw, label, r, inspect = float(sys.argv[1]) * 1e9, sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
name = os.path.basename(r["model"])
# The matrices a token multiplies by: the 2-D weights but the position table and, when
# the head is its own output.weight (as in make_bench_models' files), token_embd, which
# are only indexed. Every decode step reads each once.
names = {t["name"] for t in inspect["tensors"]}
indexed = {"position_embd.weight"} | ({"token_embd.weight"} if "output.weight" in names else set())
mats = [t for t in inspect["tensors"] if len([n for n in t["ne"] if n > 1]) == 2 and t["name"] not in indexed]
mb = sum(t["bytes"] for t in mats)
params = sum(t["ne"][0] * t["ne"][1] for t in mats)
tg, pp, sp = r["gen_tok_s"], r["prompt_tok_s"], r["gen_tok_s_spread"]
ach = mb * tg
disp = (r.get("webgpu_per_token") or {}).get("tg", {}).get("dispatches", float("nan"))
print(f"SUMMARY {label} {name}: decode {tg:.1f} tok/s (spread {sp[0]:.1f}-{sp[1]:.1f}), "
      f"{mb / 1e6:.1f} MB of matrices per token -> {ach / 1e9:.1f} GB/s = {100 * ach / bw:.1f}% of "
      f"{bw / 1e9:.0f} GB/s (bandwidth-bound ceiling {bw / mb:.0f} tok/s); {disp:.0f} dispatches per token")
print(f"SUMMARY {label} {name}: prefill pp{r['n_prompt']} {pp:.1f} tok/s -> "
      f"{2 * params * pp / 1e12:.3f} TFLOP/s in the matrices (2 x {params / 1e6:.0f}M weights per token)")
EOF
}

for f in "${files[@]}"; do
    bench "$f" "default"
    if [ "$ab" = 1 ]; then
        GGWEB_WEBGPU_SUBGROUPS=0 bench "$f" "no-subgroups"
        GGWEB_WEBGPU_F16=0 bench "$f" "no-f16"
    fi
done
log "done in $((SECONDS - t0)) s"
