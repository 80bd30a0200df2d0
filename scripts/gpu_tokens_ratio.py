#!/usr/bin/env python3
"""gpu_tokens_ratio.py BASE.jsonl NCCL.jsonl: tokens/s of two fsdp-train --log-jsonl runs of the same model
(GPT-2 124M bf16 on one GPU, staged and through NCCL), the mean over steps 2 onwards, and their ratio
against the 0.98 the NCCL machinery may cost at most. Prints one line; exit 1 when a log has no steps."""
import json
import sys


def tokens_per_s(path):
    try:
        recs = [json.loads(line) for line in open(path) if line.strip()]
    except (OSError, ValueError):
        return None
    toks = [r["tokens_per_s"] for r in recs if r.get("step", 0) >= 2 and "tokens_per_s" in r]
    return sum(toks) / len(toks) if toks else None


def main():
    base, nccl = tokens_per_s(sys.argv[1]), tokens_per_s(sys.argv[2])
    if not base or not nccl:
        print(f"speed: NCCL overhead: no figure (no steps in {sys.argv[1] if not base else sys.argv[2]})")
        return 1
    print(f"speed: GPT-2 124M bf16, 1 rank: staged {base:,.0f} tok/s, NCCL {nccl:,.0f} tok/s, "
          f"NCCL / staged {nccl / base:.3f}x ({'meets' if nccl / base >= 0.98 else 'misses'} >= 0.98)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
