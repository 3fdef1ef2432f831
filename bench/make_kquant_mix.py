#!/usr/bin/env python3
"""A Q4_K_M-typed copy of a bench GGUF (tests/fixtures/make_scale_models.sh's bench-<shape>-q8_0)
for speed measurements where llama.cpp's quantizer is not installed: the same metadata and
F32 tensors, every 2-D weight replaced by random (valid, finite) K-quant blocks in the tensor
types llama.cpp's Q4_K_M mix gives GPT-2 (tests/fixtures/mixes/mixes.json: output Q6_K,
attn_qkv and ffn_down Q6_K on use_more_bits layers, the rest Q4_K). The values mean nothing;
the kernels' work per token is a real Q4_K_M file's.

    python3 bench/make_kquant_mix.py .models/bench-124m-q8_0.gguf .models/bench-124m-q4_k_m-rand.gguf
Needs the `gguf` package (PyPI) for reading.
"""
import struct
import sys

import numpy as np
from gguf import GGUFReader

Q4_K, Q6_K, Q8_0, F32 = 12, 14, 8, 0
BLOCK = {Q4_K: 144, Q6_K: 210}


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def blocks(rng, ty, n_blocks):
    b = rng.integers(0, 256, size=(n_blocks, BLOCK[ty]), dtype=np.uint8)
    d = np.frombuffer(np.float16(2e-4).tobytes(), dtype=np.uint8)
    if ty == Q4_K:  # d, dmin, scales[12], qs[128]
        b[:, 0:2] = d
        b[:, 2:4] = d
    else:  # ql[128], qh[64], scales[16] (i8), d
        b[:, 192:208] = rng.integers(-32, 32, size=(n_blocks, 16)).astype(np.int8).view(np.uint8)
        b[:, 208:210] = d
    return b


def main(src, dst):
    r = GGUFReader(src)
    raw = open(src, "rb").read()
    n_layer = int(r.fields["gpt2.block_count"].parts[-1][0])
    kv = [f for name, f in r.fields.items() if not name.startswith("GGUF.")]
    kv_start, last = kv[0].offset, kv[-1]
    kv_end = last.offset + sum(p.nbytes for p in last.parts)
    head = bytearray(raw[kv_start:kv_end])
    ft = r.fields["general.file_type"]
    pos = ft.offset - kv_start + sum(p.nbytes for p in ft.parts[:-1])
    head[pos : pos + 4] = struct.pack("<I", 15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    align = int(r.fields["general.alignment"].parts[-1][0]) if "general.alignment" in r.fields else 32
    rng = np.random.default_rng(0x5EED)
    infos, datas, off = bytearray(), [], 0
    for t in r.tensors:
        ne = [int(x) for x in t.shape]  # ggml order: ne0 first
        ty = int(t.tensor_type)
        data = bytes(t.data.tobytes())
        if ty != F32 and len(ne) == 2:
            name = t.name
            layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
            ty = Q4_K
            if name == "output.weight" or (
                (name.endswith("attn_qkv.weight") or name.endswith("ffn_down.weight")) and use_more_bits(layer, n_layer)
            ):
                ty = Q6_K
            assert ne[0] % 256 == 0, name
            data = blocks(rng, ty, ne[0] // 256 * ne[1]).tobytes()
        nb = t.name.encode()
        infos += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(ne))
        infos += b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", ty, off)
        datas.append(data)
        off += len(data)
        off += -off % align
    with open(dst + ".tmp", "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(r.tensors), len(kv)))
        f.write(head)
        f.write(infos)
        f.write(b"\0" * (-f.tell() % align))
        for d in datas:
            f.write(d)
            f.write(b"\0" * (-len(d) % align))
    import os

    os.replace(dst + ".tmp", dst)
    print(f"{dst}: {os.path.getsize(dst)} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:3])
