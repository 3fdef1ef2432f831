#!/usr/bin/env python3
"""llama.cpp's own quantizations of an F16 GGUF, for bench/native_compare.py (issue #25).

    /opt/llama-py/bin/python bench/make_llamacpp_quants.py .models/bench-124m-f16.gguf \
        --out .models --prefix llama-124m- --types q8_0,q4_k_m

writes <out>/<prefix><type>.gguf with `llama_model_quantize` (llama-cpp-python built as
tests/fixtures/README.md says), skipping files already there. The source is
examples/make_bench_models' seeded F16 model, so both runtimes read the very file a user of
llama.cpp would make with `llama-quantize model-f16.gguf out.gguf Q4_K_M`.
"""

import argparse
import ctypes
import os
import sys

# llama.h's LLAMA_FTYPE_MOSTLY_* for the mixes the benchmarks use.
FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src", help="an F16 (or F32) GGUF")
    ap.add_argument("--out", default=".models")
    ap.add_argument("--prefix", default="llama-124m-")
    ap.add_argument("--types", default="q8_0,q4_k_m")
    args = ap.parse_args()
    import llama_cpp

    for t in args.types.split(","):
        if t not in FTYPES:
            sys.exit(f"--types: '{t}' is not one of {', '.join(FTYPES)}")
        dst = os.path.join(args.out, f"{args.prefix}{t}.gguf")
        if os.path.exists(dst):
            print(f"{dst} is there")
            continue
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = FTYPES[t]
        params.nthread = 2
        tmp = dst + ".part"
        rc = llama_cpp.llama_model_quantize(args.src.encode(), tmp.encode(), ctypes.byref(params))
        if rc != 0:
            sys.exit(f"llama_model_quantize({args.src} -> {dst}, {t}) failed: {rc}")
        os.replace(tmp, dst)
        print(f"{dst}: {os.path.getsize(dst)} bytes (llama.cpp {llama_cpp.__version__})")


if __name__ == "__main__":
    main()
