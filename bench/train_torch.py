#!/usr/bin/env python3
"""PyTorch's side of `ggweb bench --train`: training tokens/s of Hugging Face's GPT2LMHeadModel,
eager, on the CPU, one JSON line on stdout (the same keys as `ggweb bench --train --json`).

    /opt/ggweb-py/bin/python bench/train_torch.py --threads 1 --steps 3

The 124M shape (n_layer 12, n_head 12, n_embd 768, n_ctx 1024, n_vocab 50257) with `lm_head`
untied from `wte` (GGUF GPT-2 files carry both, and ggweb trains them as two), F32, no dropout,
AdamW (lr 5e-5, weight decay 0.01, PyTorch's defaults otherwise: the foreach implementation),
`labels=input_ids` loss. The batch is the same fixed pseudo-random ids as ggweb's
(`bench_ids`: id i = (i·2654435761 + 12345) mod n_vocab, cut into batchSize rows of seqLen),
one warm-up update untimed, then --steps timed ones (zero_grad, forward, backward, step).
Weights are seeded random: the speed of a dense F32 step does not depend on their values.
"""

import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-vocab", type=int, default=50257)
    ap.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa (the default) or eager")
    args = ap.parse_args()

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    t_load = time.perf_counter()
    cfg = GPT2Config(
        vocab_size=args.n_vocab, n_positions=1024, n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False, attn_implementation=args.attn,
    )
    model = GPT2LMHeadModel(cfg).float().train()
    assert model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr(), "lm_head must be untied"
    # Weight decay on tensors of two or more dimensions only (the contract's, as ggweb's).
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": other, "weight_decay": 0.0}], lr=5e-5)
    n = args.seq_len * args.batch_size
    ids = [(i * 2654435761 + 12345) % args.n_vocab for i in range(n)]
    batch = torch.tensor(ids, dtype=torch.long).view(args.batch_size, args.seq_len)
    load_s = time.perf_counter() - t_load

    wall, per_cpu, losses = [], [], []
    warmup_s = 0.0
    for i in range(args.steps + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        losses.append(loss.item())
        if i == 0:
            warmup_s = secs
            continue
        wall.append(n / secs)
        per_cpu.append(n / cpu)
    w, c = sorted(wall), sorted(per_cpu)
    print(json.dumps({
        "runtime": "pytorch", "torch": torch.__version__, "attn": getattr(model.config, "_attn_implementation", None),
        "threads": torch.get_num_threads(), "seq_len": args.seq_len, "batch_size": args.batch_size,
        "steps": args.steps, "optimizer": "adamw", "mode": "full", "weight_type": "f32",
        "train_tok_s": statistics.median(wall), "train_tok_s_spread": [w[0], w[-1]], "train_tok_s_all": wall,
        "train_tok_per_cpu_s": statistics.median(per_cpu), "train_tok_per_cpu_s_spread": [c[0], c[-1]],
        "warmup_s": warmup_s, "load_s": load_s, "losses": losses,
    }))


if __name__ == "__main__":
    main()
