#!/usr/bin/env python3
"""Do ggweb and llama.cpp compute the same model? Compares all-position logits of one prompt.

    /opt/ggweb-llamacpp/bin/python bench/native_logits_check.py --ggweb $CARGO_TARGET_DIR/release/ggweb \
        .models/124m-f32.gguf .models/124m-q8_0.gguf

The prompt is tokenized by `ggweb logits`; llama.cpp evaluates those same ids with logits_all.
Prints, per model, the max |difference|, the largest |logit| and how many positions agree on argmax.
"""

import argparse
import json
import subprocess

import numpy as np
import llama_cpp

ap = argparse.ArgumentParser()
ap.add_argument("--ggweb", required=True)
ap.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog because")
ap.add_argument("models", nargs="+")
a = ap.parse_args()
for path in a.models:
    out = subprocess.run([a.ggweb, "logits", "--model", path, "--prompt", a.prompt],
                         capture_output=True, text=True, check=True).stdout
    g = json.loads(out)
    ids, gl = g["tokens"], np.array(g["logits"], dtype=np.float32)
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False)
    llm.eval(ids)
    ll = np.array(llm.scores[: len(ids)], dtype=np.float32)
    same = int((gl.argmax(1) == ll.argmax(1)).sum())
    print(json.dumps({"model": path, "tokens": len(ids), "max_abs_diff": float(np.abs(gl - ll).max()),
                      "max_abs_logit": float(np.abs(ll).max()), "argmax_equal": same}))
