#!/usr/bin/env python3
"""Splits a GGUF into shards the way llama.cpp's gguf-split does (split.* keys, -0000k-of-0000n names),
for wllama: a single file over ~512 MB loads but then fails in its first completion (wllama
recommends shards of at most 512 MB). Tensor data is copied byte for byte.

    /opt/ggweb-py/bin/python bench/split_gguf.py .models/124m-f32.gguf --max-mb 400
    # -> .models/124m-f32-00001-of-00002.gguf, .models/124m-f32-00002-of-00002.gguf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("--max-mb", type=int, default=400)
    args = ap.parse_args()

    import gguf
    from gguf import GGUFValueType as T

    src = Path(args.src)
    r = gguf.GGUFReader(str(src))
    arch = r.get_field("general.architecture").contents()
    # GGUFWriter names shards <stem>-0000k-of-0000n.gguf from the path it is given.
    w = gguf.GGUFWriter(str(src), arch, split_max_size=args.max_mb * 1000 * 1000)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name.startswith("split."):
            continue
        vtype = f.types[0]
        sub = f.types[1] if vtype == T.ARRAY and len(f.types) > 1 else None
        w.add_key_value(name, f.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        data = np.asarray(t.data)
        raw = None if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) else t.tensor_type
        if raw is not None:
            data = data.view(np.uint8)
        w.add_tensor(t.name, data, raw_shape=data.shape if raw is None else None, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    shards = sorted(src.parent.glob(f"{src.stem}-0*-of-0*.gguf"))
    if len(shards) < 2:
        sys.exit(f"error: expected shards next to {src}, found {shards}")
    for s in shards:
        print(f"  {s.stat().st_size:>12}  {s}")


if __name__ == "__main__":
    main()
