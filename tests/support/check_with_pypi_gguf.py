"""Reads the sample file `cargo test --test loader gguf::` writes (tests/artifacts/gguf-sample.gguf)
with the PyPI `gguf` package and checks what it finds. Run with a Python that has gguf + numpy:
    python3 tests/support/check_with_pypi_gguf.py [FILE]
"""
import struct
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as Q, GGUFValueType as V

path = sys.argv[1] if len(sys.argv) > 1 else "tests/artifacts/gguf-sample.gguf"
r = GGUFReader(path)
f = r.fields


def scalar(name):
    fld = f[name]
    return fld.parts[fld.data[0]][0]


def strings(name):
    fld = f[name]
    return [bytes(fld.parts[i]).decode() for i in fld.data]


assert r.alignment == 32, r.alignment
assert scalar("t.u8") == 200 and scalar("t.i8") == -5
assert scalar("t.u16") == 60000 and scalar("t.i16") == -30000
assert scalar("t.u32") == 4_000_000_000 and scalar("t.i32") == -2_000_000_000
assert scalar("t.f32") == np.float32(1.5)
assert struct.unpack("<I", struct.pack("<f", scalar("t.f32_nan")))[0] == 0x7FC01234
assert bool(scalar("t.bool_true")) and not bool(scalar("t.bool_false"))
assert bytes(f["t.str"].parts[f["t.str"].data[0]]).decode() == 'héllo ✓ "quoted"'
assert scalar("t.u64") == 2**64 - 1 and scalar("t.i64") == -(2**63)
assert f["t.u64"].types == [V.UINT64] and f["t.f64"].types == [V.FLOAT64]
assert strings("t.arr_str") == ["a", "", "ß"]
assert f["t.arr_i32_empty"].types[0] == V.ARRAY and len(f["t.arr_i32_empty"].data) == 0
assert [f["t.arr_f32"].parts[i][0] for i in f["t.arr_f32"].data] == [np.float32(0.25), np.float32(-1e30)]
assert f["t.arr_nested"].types[:2] == [V.ARRAY, V.ARRAY], f["t.arr_nested"].types
assert len(f) == 3 + 29, len(f)  # 3 pseudo-fields (version, counts) + 29 keys

want = {
    "a.f32": (Q.F32, [3, 2], 24),
    "b.f16": (Q.F16, [4], 8),
    "c.q8_0": (Q.Q8_0, [64, 2], 136),
    "d.q4_k": (Q.Q4_K, [256], 144),
    "e.empty": (Q.F32, [0, 3], 0),
    "f.i32": (Q.I32, [5, 1, 1, 1], 20),
    "g.bf16": (Q.BF16, [2, 2, 2], 16),
    "h.q4_0": (Q.Q4_0, [32, 3], 54),
}
got = {t.name: (t.tensor_type, [int(x) for x in t.shape], int(t.n_bytes)) for t in r.tensors}
assert got == want, got
raw = np.memmap(path, mode="r")
for t in r.tensors:
    assert t.data_offset % 32 == 0
# a.f32 holds the writer's pattern: compare the raw bytes at its offset with the tensor's view
a = next(t for t in r.tensors if t.name == "a.f32")
assert bytes(a.data.tobytes()) == bytes(raw[a.data_offset : a.data_offset + 24])
from importlib.metadata import version

print(f"ok: {path}: {len(r.tensors)} tensors, {len(f) - 3} keys, read by gguf {version('gguf')}")
