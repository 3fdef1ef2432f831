#!/usr/bin/env python3
"""Exports the Hugging Face folder written by export_hf.py the way transformers.js's docs tell its users
to ("Use custom models": convert with Optimum), into the layout transformers.js loads:

    <out>/config.json, generation_config.json, tokenizer.json, tokenizer_config.json, ...
    <out>/onnx/model.onnx             dtype 'fp32': `optimum-cli export onnx --model <hf> <dir>`, stock
                                      (no --task: Optimum picks text-generation-with-past for GPT-2)
    <out>/onnx/model_quantized.onnx   dtype 'q8':   transformers.js scripts/quantize.py's q8 recipe
    <out>/onnx/model_q4.onnx          dtype 'q4':   transformers.js scripts/quantize.py's q4 recipe

The quantized files use the same onnxruntime calls and arguments as transformers.js's own conversion
script (scripts/convert.py + scripts/quantize.py) for a GPT-2 model, applied to the stock export:
  q8  ONNXQuantizer in IntegerOps (dynamic) mode on every op type of onnxruntime's IntegerOpsRegistry
      (MatMul, Gather, ... : the embedding too), signed int8 weights (QInt8: the model has no Conv),
      per_channel and reduce_range off (convert.py's choice for gpt2), EnableSubgraph and MatMulConstBOnly;
  q4  MatMulNBitsQuantizer (quantize.py's MatMul4BitsQuantizer, renamed in onnxruntime 1.2x), 4 bits,
      block_size 32, symmetric, accuracy_level unset.
(convert.py also runs onnxslim before quantizing; see bench/README.md for what that does here.)

Needs transformers < 4.58 (optimum-onnx), so it runs in its own venv (see bench/make_models.sh):

    /opt/ggweb-onnx/bin/python bench/export_onnx.py --hf .models/gpt2-124m-hf --out .models/gpt2-124m-onnx
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np


def export_fp32(hf: Path, dst: Path):
    """The stock command; optimum-cli writes the tokenizer and config files beside model.onnx."""
    cli = Path(sys.executable).parent / "optimum-cli"
    tmp = Path(tempfile.mkdtemp(prefix="ggweb-onnx-"))
    try:
        # A local folder needs --task (Optimum infers it only for Hub names); -with-past: the KV cache as inputs.
        cmd = [str(cli), "export", "onnx", "--model", str(hf), "--task", "text-generation-with-past", str(tmp)]
        print("  " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        onnx_files = sorted(p.name for p in tmp.glob("*.onnx"))
        if onnx_files != ["model.onnx"]:
            sys.exit(f"error: expected one model.onnx from optimum-cli, got {onnx_files}")
        if (tmp / "model.onnx_data").exists():
            sys.exit("error: optimum-cli wrote external data (model.onnx_data); transformers.js expects one file here")
        (dst / "onnx").mkdir(parents=True, exist_ok=True)
        for p in tmp.iterdir():
            shutil.move(str(p), dst / "onnx" / p.name if p.suffix == ".onnx" else dst / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def quantize_q8(src: Path, dst: Path):
    import onnx
    from onnxruntime.quantization import QuantizationMode, QuantType
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from onnxruntime.quantization.registry import IntegerOpsRegistry

    q = ONNXQuantizer(onnx.load(str(src)), False, False, mode=QuantizationMode.IntegerOps, static=False,
                      weight_qType=QuantType.QInt8, activation_qType=QuantType.QUInt8, tensors_range=None,
                      nodes_to_quantize=[], nodes_to_exclude=[], op_types_to_quantize=set(IntegerOpsRegistry.keys()),
                      extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True})
    q.quantize_model()
    onnx.save(q.model.model, str(dst))


def quantize_q4(src: Path, dst: Path):
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=32, is_symmetric=True, accuracy_level=None)
    q.process()
    q.model.save_model_to_file(str(dst), use_external_data_format=False)


def graph_summary(path: Path) -> dict:
    """What a file holds: op counts, the weights' element types, the past-KV inputs."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    types = Counter()
    for t in m.graph.initializer:
        types[onnx.TensorProto.DataType.Name(t.data_type)] += int(np.prod(t.dims)) if t.dims else 1
    # The output projection: its own weight (stock install) or the embedding through a Transpose
    # (with accelerate installed, Optimum re-ties the weights that way); its ops once quantized.
    head = [n for n in m.graph.node if n.name.startswith("/lm_head/") or n.name.startswith("/lm_head_")]
    tied = any(n.op_type == "Transpose" and any("wte" in i for i in n.input) for n in m.graph.node)
    lm_head = (f"{'+'.join(sorted({n.op_type for n in head})) or '?'}, "
               f"{'the embedding through a Transpose' if tied else 'its own weight'}")
    return {
        "lm_head": lm_head,
        "ops": dict(sorted(Counter(n.op_type for n in m.graph.node).items())),
        "initializer_elements_by_type": dict(types),
        "past_inputs": sum(1 for i in m.graph.input if i.name.startswith("past_key_values")),
        "opset": max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=None),
    }


def check(model_dir: Path, hf: Path):
    """Last-position logits of each ONNX file vs PyTorch on the bench prompt's ids."""
    import onnxruntime as ort
    import torch
    from transformers import GPT2LMHeadModel

    info = json.loads((hf / "ggweb-bench.json").read_text())
    ids = np.array([info["prompt_ids"]], dtype=np.int64)
    ref = GPT2LMHeadModel.from_pretrained(str(hf), attn_implementation="eager").eval()
    with torch.no_grad():
        want = ref(input_ids=torch.from_numpy(ids)).logits[0, -1].numpy()
    cfg = ref.config
    report = {}
    for f in sorted((model_dir / "onnx").glob("*.onnx")):
        s = ort.InferenceSession(str(f), providers=["CPUExecutionProvider"])
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        names = {i.name for i in s.get_inputs()}
        if "position_ids" in names:
            feeds["position_ids"] = np.arange(ids.shape[1], dtype=np.int64)[None]
        hd = cfg.n_embd // cfg.n_head
        for i in range(cfg.n_layer):
            for kv in ("key", "value"):
                feeds[f"past_key_values.{i}.{kv}"] = np.zeros((1, cfg.n_head, 0, hd), dtype=np.float32)
        got = s.run(["logits"], feeds)[0][0, -1]
        err = float(np.abs(got - want).max())
        report[f.name] = {"max_abs_diff_last_logits": err, "argmax_same": int(got.argmax()) == int(want.argmax())}
        print(f"  {f.name}: max |logits - torch| {err:.3g}, argmax same: {report[f.name]['argmax_same']}")
    if report["model.onnx"]["max_abs_diff_last_logits"] > 1e-3:
        sys.exit("error: the fp32 ONNX model does not match PyTorch")
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hf", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    hf, out = Path(args.hf), Path(args.out)

    tmp = Path(tempfile.mkdtemp(prefix="ggweb-onnx-out-", dir=out.parent))
    try:
        print("exporting fp32 (optimum-cli export onnx, stock)", flush=True)
        export_fp32(hf, tmp)
        print("quantizing q8", flush=True)
        quantize_q8(tmp / "onnx" / "model.onnx", tmp / "onnx" / "model_quantized.onnx")
        print("quantizing q4", flush=True)
        quantize_q4(tmp / "onnx" / "model.onnx", tmp / "onnx" / "model_q4.onnx")
        print("checking against PyTorch", flush=True)
        report = check(tmp, hf)
        graphs = {f.name: graph_summary(f) for f in sorted((tmp / "onnx").glob("*.onnx"))}
        for name, g in graphs.items():
            print(f"  {name}: lm_head {g['lm_head']}; {g['ops']}, weights {g['initializer_elements_by_type']}")
        (tmp / "ggweb-bench.json").write_text(json.dumps({**json.loads((hf / "ggweb-bench.json").read_text()),
                                                          "onnx_check": report, "onnx_graphs": graphs}, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for p in sorted(out.rglob("*")):
        if p.is_file():
            print(f"  {p.stat().st_size:>12}  {p}")


if __name__ == "__main__":
    main()
