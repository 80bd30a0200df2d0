#!/usr/bin/python3
"""PyTorch reference for the seed-model benchmark (bench/run.sh), one process.

The model fsdp-minimal trains: nn.Sequential of 4 x
nn.TransformerEncoderLayer(d_model 128, nhead 4, dim_feedforward 2048,
dropout 0.1) (post-LN, ReLU, input [seq, batch, d_model]), loss
mean(|model(x)|), AdamW(lr 1e-4, weight_decay 0.01), a fixed random input
x of shape [8, 16, 128].

  /usr/bin/python3 bench/torch_seed.py --steps 50 --threads 1

Prints `ms_per_step X` and `tokens_per_s Y` (seq * batch positions per
second), timed over --steps steps after --warmup warm-up steps. Unlike the
fsdp-minimal timing in run.sh, this excludes process start-up.
"""
import argparse
import os
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    # Thread counts must be set before torch (and its OpenBLAS) load.
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[k] = str(args.threads)
    import torch
    import torch.nn as nn

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = nn.Sequential(*[nn.TransformerEncoderLayer(args.d_model, args.heads, dim_feedforward=args.ffn,
                                                        dropout=args.dropout) for _ in range(args.layers)])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    x = torch.randn(args.seq, args.batch, args.d_model)

    def step():
        loss = model(x).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    dt = (time.perf_counter() - t0) / args.steps
    n_params = sum(q.numel() for q in model.parameters())
    print(f"config torch {torch.__version__} seed L{args.layers} C{args.d_model} H{args.heads} F{args.ffn} "
          f"T{args.seq} B{args.batch}, {args.threads} thread(s), {n_params} parameters")
    print(f"ms_per_step {dt * 1e3:.3f}")
    print(f"tokens_per_s {args.seq * args.batch / dt:.1f}")


if __name__ == "__main__":
    main()
