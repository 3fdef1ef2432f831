#!/usr/bin/env python3
"""Native ggweb vs llama.cpp, interleaved, as a Markdown table (BENCHMARKS.md "Native").

    /opt/ggweb-llamacpp/bin/python bench/native_compare.py \
        --ggweb $CARGO_TARGET_DIR/release/ggweb --models .models --out /tmp/native.jsonl

For every dtype and thread count, runs `ggweb bench --json` and bench/llama_cpp_native.py back
to back (order swapped every other pair, each a fresh process, same -p/-n/--reps), so both see
the same machine load. Every result line goes to --out; the table uses the median over rounds
of each run's own median.

    ... native_compare.py --ggweb ... --n-past 64,512,1000 -n 16 [--kv-type f16]

times decode at those context depths instead (`ggweb bench --n-past`, llama_cpp_native.py
--n-past: fill the KV cache to the depth, then -n decode steps there) and prints tok/s per depth
and the slowdown against the first depth, both runtimes side by side. --kv-type sets both
runtimes' KV cache type (default: each one's own, ggweb F32, llama.cpp F16).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ggweb", required=True, help="path to the release ggweb binary")
    ap.add_argument("--models", default=".models")
    ap.add_argument("--dtypes", default="f32,f16,q8_0,q4_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("-p", type=int, default=64)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", default="native_compare.jsonl")
    ap.add_argument("--prefix", default="124m-", help="model files are <models>/<prefix><dtype>.gguf")
    ap.add_argument("--kv-type", choices=["f16", "f32"], help="both runtimes' KV cache type")
    ap.add_argument("--n-past", help="decode at these context depths instead, e.g. 64,512,1000 (with -n 16)")
    a = ap.parse_args()
    common = ["-p", str(a.p), "-n", str(a.n), "--reps", str(a.reps)]
    if a.kv_type:
        common += ["--kv-type", a.kv_type]
    if a.n_past:
        common += ["--n-past", a.n_past]
    rows, k = {}, 0
    with open(a.out, "a") as log:
        for dt in a.dtypes.split(","):
            model = os.path.join(a.models, f"{a.prefix}{dt}.gguf")
            for t in [int(x) for x in a.threads.split(",")]:
                for _ in range(a.rounds):
                    g = [a.ggweb, "bench", "--model", model, "--threads", str(t), "--json", *common]
                    l = [sys.executable, os.path.join(HERE, "llama_cpp_native.py"), "-m", model, "-t", str(t), *common]
                    pair = [("ggweb", g), ("llama.cpp", l)]
                    if k % 2:
                        pair.reverse()
                    k += 1
                    for name, cmd in pair:
                        before = loadavg()
                        r = run_json(cmd)
                        r.update(runtime=name, dtype=dt, threads=t, loadavg_before=before)
                        r.pop("profile", None)
                        log.write(json.dumps(r) + "\n")
                        log.flush()
                        rows.setdefault((dt, t, name), []).append(r)
                        if a.n_past:
                            d = " ".join(f"{x['n_past']}:{x['gen_tok_s']:.1f}" for x in r["depths"])
                            print(f"{dt} t{t} {name}: decode tok/s at n_past {d} load {before}", file=sys.stderr, flush=True)
                            continue
                        print(f"{dt} t{t} {name}: pp {r['prompt_tok_s']:.1f} tg {r['gen_tok_s']:.1f} tok/s "
                              f"(tg {r['gen_tok_per_cpu_s']:.1f}/cpu-s) load {before}", file=sys.stderr, flush=True)
    med = lambda xs: statistics.median(xs)
    if a.n_past:
        return depth_table(a, rows, med)
    print("| dtype | threads | ggweb prefill tok/s | llama.cpp prefill tok/s | ggweb decode tok/s | "
          "llama.cpp decode tok/s | decode time ggweb ÷ llama.cpp | decode tok/CPU-s ggweb / llama.cpp | ≤ 1.25× |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for dt in a.dtypes.split(","):
        for t in [int(x) for x in a.threads.split(",")]:
            g, l = rows[(dt, t, "ggweb")], rows[(dt, t, "llama.cpp")]
            gp, lp = med([r["prompt_tok_s"] for r in g]), med([r["prompt_tok_s"] for r in l])
            gt, lt = med([r["gen_tok_s"] for r in g]), med([r["gen_tok_s"] for r in l])
            gc, lc = med([r["gen_tok_per_cpu_s"] for r in g]), med([r["gen_tok_per_cpu_s"] for r in l])
            ratio = lt / gt  # time per token: ggweb's over llama.cpp's
            ok = ("yes" if ratio <= 1.25 else "**no**") if t == 1 else ""
            print(f"| {dt.upper()} | {t} | {gp:.0f} | {lp:.0f} | {gt:.1f} | {lt:.1f} | {ratio:.2f}× | {gc:.1f} / {lc:.1f} | {ok} |")


def depth_table(a, rows, med):
    """Decode at each depth, both runtimes: medians over rounds; slowdown = tok/s at the first
    depth over tok/s at this one (wall time; CPU time in brackets)."""
    print("| dtype | threads | n_past | ggweb KV | ggweb decode tok/s | ggweb slowdown | llama.cpp KV | "
          "llama.cpp decode tok/s | llama.cpp slowdown | decode time ggweb ÷ llama.cpp |")
    print("|---|--:|--:|---|--:|--:|---|--:|--:|--:|")
    for dt in a.dtypes.split(","):
        for t in [int(x) for x in a.threads.split(",")]:
            g, l = rows[(dt, t, "ggweb")], rows[(dt, t, "llama.cpp")]
            for i, d in enumerate(int(x) for x in a.n_past.split(",")):
                cell = lambda rs, k: med([r["depths"][i][k] for r in rs])
                gt, lt = cell(g, "gen_tok_s"), cell(l, "gen_tok_s")
                gs, ls = f"{cell(g, 'slowdown'):.2f}× ({cell(g, 'slowdown_cpu'):.2f}×)", f"{cell(l, 'slowdown'):.2f}× ({cell(l, 'slowdown_cpu'):.2f}×)"
                print(f"| {dt.upper()} | {t} | {d} | {g[0]['kv_type']} | {gt:.1f} | {gs} | {l[0]['kv_type']} | {lt:.1f} | {ls} | {lt / gt:.2f}× |")


if __name__ == "__main__":
    main()
