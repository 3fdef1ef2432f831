#!/usr/bin/env bash
# npm start: install what is missing, build the wasm, serve the demo (PORT, default 8080).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
bash scripts/setup.sh demo
bash scripts/build-wasm.sh
exec node scripts/serve.mjs
