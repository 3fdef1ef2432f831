#!/usr/bin/env python3
"""Exports the Hugging Face folder written by export_hf.py to the layout transformers.js loads:

    <out>/config.json, generation_config.json, tokenizer.json, tokenizer_config.json, ...
    <out>/onnx/model.onnx             dtype 'fp32'  (optimum-onnx, text-generation-with-past)
    <out>/onnx/model_quantized.onnx   dtype 'q8'    (onnxruntime dynamic quantization, uint8 weights)
    <out>/onnx/model_q4.onnx          dtype 'q4'    (MatMulNBits, 4-bit blocks of 32, symmetric)

Needs transformers < 4.58 (optimum-onnx), so it runs in its own venv (see bench/make_models.sh):

    /opt/ggweb-onnx/bin/python bench/export_onnx.py --hf .models/gpt2-124m-hf --out .models/gpt2-124m-onnx
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

KEEP = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "vocab.json", "merges.txt"]


def export_fp32(hf: Path, dst: Path):
    from optimum.exporters.onnx import main_export

    tmp = Path(tempfile.mkdtemp(prefix="ggweb-onnx-"))
    try:
        main_export(str(hf), output=str(tmp), task="text-generation-with-past", device="cpu",
                    do_validation=True)
        onnx_files = sorted(p.name for p in tmp.glob("*.onnx"))
        if onnx_files != ["model.onnx"]:
            sys.exit(f"error: expected one model.onnx from optimum, got {onnx_files}")
        (dst / "onnx").mkdir(parents=True, exist_ok=True)
        shutil.move(str(tmp / "model.onnx"), dst / "onnx" / "model.onnx")
        if (tmp / "model.onnx_data").exists():
            sys.exit("error: optimum wrote external data (model.onnx_data); transformers.js expects one file here")
        for name in KEEP:
            src = tmp / name if (tmp / name).exists() else hf / name
            if src.exists():
                shutil.copyfile(src, dst / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def quantize_q8(src: Path, dst: Path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QUInt8, per_channel=False, reduce_range=False,
                     op_types_to_quantize=["MatMul", "Gemm"])


def gemm_to_matmul(model) -> int:
    """GPT-2's Conv1D layers export as Gemm (torch.addmm), which MatMulNBits quantization skips:
    rewrite each Gemm(A, B, C) with constant B, no transposes and unit alpha/beta as MatMul + Add."""
    import onnx
    from onnx import helper

    inits = {i.name for i in model.graph.initializer}
    nodes, n = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = (attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
                 and not attrs.get("transA", 0) and not attrs.get("transB", 0))
        if node.op_type == "Gemm" and plain and len(node.input) == 3 and node.input[1] in inits:
            mid = node.output[0] + "_matmul"
            nodes.append(helper.make_node("MatMul", [node.input[0], node.input[1]], [mid], name=node.name + "_MatMul"))
            nodes.append(helper.make_node("Add", [mid, node.input[2]], [node.output[0]], name=node.name + "_Add"))
            n += 1
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return n


def quantize_q4(src: Path, dst: Path):
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(src))
    n = gemm_to_matmul(model)
    q = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
    q.process()
    q.model.save_model_to_file(str(dst), use_external_data_format=False)
    out = onnx.load(str(dst), load_external_data=False)
    nbits = sum(1 for x in out.graph.node if x.op_type == "MatMulNBits")
    left = [x.name for x in out.graph.node if x.op_type in ("MatMul", "Gemm") and
            any(i in {t.name for t in out.graph.initializer} for i in x.input)]
    print(f"  q4: {n} Gemm rewritten as MatMul+Add, {nbits} MatMulNBits, constant MatMul/Gemm left: {left}")
    if nbits < 4 * 12:
        sys.exit("error: q4 quantization left the layer matmuls unquantized")


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
        print("exporting fp32 (optimum-onnx)", flush=True)
        export_fp32(hf, tmp)
        print("quantizing q8", flush=True)
        quantize_q8(tmp / "onnx" / "model.onnx", tmp / "onnx" / "model_quantized.onnx")
        print("quantizing q4", flush=True)
        quantize_q4(tmp / "onnx" / "model.onnx", tmp / "onnx" / "model_q4.onnx")
        print("checking against PyTorch", flush=True)
        report = check(tmp, hf)
        (tmp / "ggweb-bench.json").write_text(json.dumps({**json.loads((hf / "ggweb-bench.json").read_text()),
                                                          "onnx_check": report}, indent=1) + "\n")
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
