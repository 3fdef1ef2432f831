#!/usr/bin/env python3
"""Training speed, native ggweb vs PyTorch eager on the CPU, interleaved (BENCHMARKS.md "Training").

    /opt/ggweb-py/bin/python bench/train_compare.py --ggweb target/release/ggweb \
        --f32 .models/124m-f32.gguf --q8 .models/124m-q8_0.gguf --rounds 3 --out /tmp/train.jsonl

Every round runs, each a fresh process with the same shape (seqLen 128, batch 4, AdamW, one
warm-up update then --steps timed ones, 1 thread by default): `ggweb bench --train` on the F32
file, bench/train_torch.py (Hugging Face GPT2LMHeadModel, untied head, F32,
torch.set_num_threads), and, with --q8, `ggweb bench --train --lora-rank` on the Q8_0 file; the
order rotates every round so each sees the same machine load. Every result line goes to --out.
The table gives the median over rounds of each run's median tokens/s (wall, and per CPU second
of the process: on a shared machine closer to what an idle one gives), min–max over rounds,
and the ratios native ÷ PyTorch and LoRA ÷ full per round (median, min–max).
"""

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


# The same helpers as the native decode comparison beside it (bench/ is on sys.path when run).
from native_compare import loadavg, run_json  # noqa: E402

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ggweb", required=True, help="the ggweb binary (release build)")
    ap.add_argument("--f32", required=True, help="the 124M-shape F32 GGUF (full training)")
    ap.add_argument("--q8", help="the 124M-shape Q8_0 GGUF (the LoRA row)")
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="the Python with torch and transformers")
    ap.add_argument("--out", help="append every result line here (JSON lines)")
    args = ap.parse_args()

    shape = ["--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size), "--steps", str(args.steps)]
    gg = [args.ggweb, "bench", "--train", "--json", "-t", str(args.threads)] + shape
    runs = {
        "ggweb full": gg + ["-m", args.f32],
        "pytorch full": [args.python, os.path.join(HERE, "train_torch.py"), "--threads", str(args.threads)] + shape,
    }
    if args.q8:
        runs[f"ggweb lora r{args.lora_rank} q8_0"] = gg + ["-m", args.q8, "--lora-rank", str(args.lora_rank)]
    names = list(runs)
    res = {k: [] for k in names}
    out = open(args.out, "a") if args.out else None
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            la = loadavg()
            j = run_json(runs[name])
            j.update({"run": name, "round": r, "loadavg_before": la})
            res[name].append(j)
            print(f"round {r} {name}: {j['train_tok_s']:.1f} tok/s, {j['train_tok_per_cpu_s']:.1f} tok/CPU-s "
                  f"(loadavg {la})", file=sys.stderr, flush=True)
            if out:
                out.write(json.dumps(j) + "\n")
                out.flush()

    def col(name, key):
        return [j[key] for j in res[name]]

    def cell(v):
        return f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})"

    print(f"\nseqLen {args.seq_len}, batch {args.batch_size}, AdamW, {args.threads} thread(s), "
          f"{args.steps} timed updates per run, {args.rounds} rounds (median over rounds, min–max)\n")
    print("| run | tokens/s | tokens per CPU second |")
    print("|---|---|---|")
    for name in names:
        print(f"| {name} | {cell(col(name, 'train_tok_s'))} | {cell(col(name, 'train_tok_per_cpu_s'))} |")

    def ratio(a, b, key):
        return [x / y for x, y in zip(col(a, key), col(b, key))]

    print("\n| ratio (per round) | wall | per CPU second |")
    print("|---|---|---|")
    pairs = [("ggweb full", "pytorch full", "native ÷ PyTorch")]
    if args.q8:
        pairs.append((names[2], "ggweb full", "LoRA Q8_0 ÷ full"))
    for a, b, label in pairs:
        w, c = ratio(a, b, "train_tok_s"), ratio(a, b, "train_tok_per_cpu_s")
        print(f"| {label} | {statistics.median(w):.2f}× ({min(w):.2f}–{max(w):.2f}) "
              f"| {statistics.median(c):.2f}× ({min(c):.2f}–{max(c):.2f}) |")


if __name__ == "__main__":
    main()
