#!/usr/bin/env python3
"""Native llama.cpp (through llama-cpp-python) timed like `ggweb bench`.

    /opt/ggweb-llamacpp/bin/python bench/llama_cpp_native.py \
        --model .models/124m-q8_0.gguf --threads 1 -p 64 -n 64 --reps 3

Per repetition: the KV cache is emptied, a prompt of `-p` fixed token ids is evaluated in one
call (llama.cpp splits it by n_batch), then `-n` tokens are decoded one at a time, each the argmax
of the previous logits (greedy, as `ggweb bench`). Prefill and decode are timed separately, in
wall time and in CPU time of the whole process (`time.process_time`, all threads, the same clock
as ggweb's `CLOCK_PROCESS_CPUTIME_ID`). Prints one JSON object per model x thread count, with the
same field names as `ggweb bench --json` where they mean the same thing; medians over reps.

With `--n-past 64,512,1000` it times decode at context depths instead, as `ggweb bench --n-past`
does: per depth D, one evaluation of D fixed ids fills the KV cache, then `-n` greedy steps at
positions D.. are timed, `--reps` times from the same state (positions from D on are dropped
before each repetition); one JSON object with a `depths` list, slowdowns against the first depth.
`--kv-type f16|f32` picks llama.cpp's KV cache type (default: llama.cpp's own, F16).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

try:
    import llama_cpp
    from llama_cpp import llama_cpp as lib
except ImportError:
    sys.exit("llama_cpp_native.py: llama-cpp-python is missing; run it with /opt/ggweb-llamacpp/bin/python (bench/README.md)")


def prompt_ids(n_prompt, n_vocab):
    # The same ids as `ggweb bench` (crate/bin/run.rs): no tokenizer involved.
    return [(i * 2654435761 + 12345) % n_vocab for i in range(n_prompt)]


# ggml_type ids of the KV cache types (ggml.h: GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1).
KV_TYPES = {"f32": 0, "f16": 1}


def open_model(path, threads, n_ctx, n_batch, kv_type):
    kv = {} if kv_type is None else {"type_k": KV_TYPES[kv_type], "type_v": KV_TYPES[kv_type]}
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=path,
        n_ctx=n_ctx,
        n_batch=n_batch,
        n_threads=threads,
        n_threads_batch=threads,
        n_gpu_layers=0,
        verbose=False,
        **kv,
    )
    return llm, time.perf_counter() - t0


def argmax_last(llm):
    n_vocab = llm.n_vocab()
    logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
    return int(np.argmax(logits))


def greedy_steps(llm, tok, n_gen):
    """n_gen greedy single-token steps from `tok`: (wall tok/s, tok per CPU second, the ids fed)."""
    out = []
    w, c = time.perf_counter(), time.process_time()
    for _ in range(n_gen):
        out.append(tok)
        llm.eval([tok])
        tok = argmax_last(llm)
    w, c = time.perf_counter() - w, time.process_time() - c
    return n_gen / w, (n_gen / c if c > 0 else float("nan")), out


def bench_depths(path, threads, depths, n_gen, reps, n_ctx, n_batch, kv_type):
    llm, load_s = open_model(path, threads, max(n_ctx, depths[-1] + n_gen), n_batch, kv_type)
    if depths[-1] + n_gen > llm.n_ctx():
        raise SystemExit(f"{path}: --n-past {depths[-1]} + -n {n_gen} exceeds n_ctx {llm.n_ctx()}")
    med = statistics.median
    rows = []
    for d in depths:
        llm.reset()
        lib.llama_memory_clear(lib.llama_get_memory(llm.ctx), True)
        w = time.perf_counter()
        llm.eval(prompt_ids(d, llm.n_vocab()))
        first = argmax_last(llm)
        fill = d / (time.perf_counter() - w)
        tg, tg_cpu = [], []
        for _ in range(reps):
            llm.n_tokens = d  # eval() drops the cache from here on, so every rep starts at depth d
            w, c, _ = greedy_steps(llm, first, n_gen)
            tg.append(w)
            tg_cpu.append(c)
        rows.append({"n_past": d, "fill_tok_s": fill, "gen_tok_s": med(tg), "gen_tok_per_cpu_s": med(tg_cpu),
                     "gen_tok_s_all": tg})
    for r in rows:
        r["slowdown"] = rows[0]["gen_tok_s"] / r["gen_tok_s"]
        r["slowdown_cpu"] = rows[0]["gen_tok_per_cpu_s"] / r["gen_tok_per_cpu_s"]
    return {
        "runtime": "llama.cpp",
        "model": path,
        "threads": threads,
        "n_ctx": llm.n_ctx(),
        "n_batch": llm.n_batch,
        "n_gen": n_gen,
        "reps": reps,
        "load_s": load_s,
        "kv_type": kv_type or "f16",
        "depths": rows,
        "llama_cpp_python": llama_cpp.__version__,
    }


def bench_one(path, threads, n_prompt, n_gen, reps, n_ctx, n_batch, kv_type=None):
    llm, load_s = open_model(path, threads, n_ctx, n_batch, kv_type)
    if n_prompt + n_gen > llm.n_ctx():
        raise SystemExit(f"{path}: -p {n_prompt} + -n {n_gen} exceeds n_ctx {llm.n_ctx()}")
    ctx = llm.ctx
    ids = prompt_ids(n_prompt, llm.n_vocab())

    pp, tg, pp_cpu, tg_cpu, gen_ids = [], [], [], [], []
    for _ in range(reps):
        llm.reset()
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        w, c = time.perf_counter(), time.process_time()
        llm.eval(ids)
        tok = argmax_last(llm)
        w, c = time.perf_counter() - w, time.process_time() - c
        pp.append(n_prompt / w)
        pp_cpu.append(n_prompt / c if c > 0 else float("nan"))
        w, c, gen_ids = greedy_steps(llm, tok, n_gen)
        tg.append(w)
        tg_cpu.append(c)
    med = statistics.median
    return {
        "runtime": "llama.cpp",
        "model": path,
        "threads": threads,
        "n_ctx": llm.n_ctx(),
        "n_batch": llm.n_batch,
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "reps": reps,
        "load_s": load_s,
        "prompt_tok_s": med(pp),
        "gen_tok_s": med(tg),
        "prompt_tok_per_cpu_s": med(pp_cpu),
        "gen_tok_per_cpu_s": med(tg_cpu),
        "prompt_cpu_s_per_tok": 1.0 / med(pp_cpu),
        "gen_cpu_s_per_tok": 1.0 / med(tg_cpu),
        "prompt_tok_s_all": pp,
        "gen_tok_s_all": tg,
        "gen_ids": gen_ids,
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": lib.llama_print_system_info().decode().strip(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", "-m", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("--threads", "-t", default="1", help="comma-separated thread counts, e.g. 1,2")
    ap.add_argument("-p", "--n-prompt", type=int, default=64)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("--reps", "-r", type=int, default=3)
    ap.add_argument("--n-ctx", type=int, default=256)
    ap.add_argument("--n-batch", type=int, default=512, help="llama.cpp's logical batch (capped at n_ctx)")
    ap.add_argument("--kv-type", choices=sorted(KV_TYPES), help="KV cache type (default: llama.cpp's, f16)")
    ap.add_argument("--n-past", help="decode at these context depths instead, e.g. 64,512,1000")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",") if t]
    depths = [int(d) for d in a.n_past.split(",") if d] if a.n_past else None
    if depths is not None and (not depths or depths != sorted(set(depths)) or depths[0] < 1):
        raise SystemExit(f"llama_cpp_native.py: --n-past {a.n_past}: depths must be increasing and at least 1")
    for path in a.model:
        if not os.path.isfile(path):
            raise SystemExit(f"llama_cpp_native.py: no model file at {path}")
        for t in threads:
            if depths:
                r = bench_depths(path, t, depths, max(1, a.n_gen), max(1, a.reps), a.n_ctx, a.n_batch, a.kv_type)
            else:
                r = bench_one(path, t, a.n_prompt, a.n_gen, max(1, a.reps), a.n_ctx, a.n_batch, a.kv_type)
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
