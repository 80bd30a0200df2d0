#!/usr/bin/env python3
"""gpu_compare_logs.py A.jsonl B.jsonl RTOL: two fsdp-train --log-jsonl runs agree step by step.

Every step's loss and grad_norm must be finite in both and agree within RTOL (relative); the runs must
log the same steps, at least one. Prints the worst relative difference; exit 1 on any failure."""
import json
import math
import sys


def steps(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if "step" in r:
                    out[r["step"]] = r
    return out


def main():
    a_path, b_path, rtol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    try:
        a, b = steps(a_path), steps(b_path)
    except (OSError, ValueError) as e:
        print(f"cannot read the logs: {e}")
        return 1
    if not a or sorted(a) != sorted(b):
        print(f"steps differ: {sorted(a)} vs {sorted(b)}")
        return 1
    worst, where, bad = 0.0, "", 0
    for s in sorted(a):
        for key in ("loss", "grad_norm"):
            x, y = a[s].get(key), b[s].get(key)
            if not (isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isfinite(x) and math.isfinite(y)):
                print(f"step {s} {key}: {x} vs {y} (not finite)")
                bad += 1
                continue
            rel = abs(x - y) / max(abs(x), 1e-30)
            if rel > worst:
                worst, where = rel, f"step {s} {key} {x:.9g} vs {y:.9g}"
            if rel > rtol:
                print(f"step {s} {key}: {x:.9g} vs {y:.9g} (rel {rel:.2e} > {rtol:g})")
                bad += 1
    print(f"{len(a)} steps, worst relative difference {worst:.2e} ({where}), tolerance {rtol:g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
