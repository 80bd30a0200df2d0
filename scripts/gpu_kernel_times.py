#!/usr/bin/env python3
"""gpu_kernel_times.py NCU.csv: one step's GPU time by kernel, from `ncu --metrics gpu__time_duration.sum --csv`.

Sums each kernel name's launches (the name up to its argument list), prints the total and the kernels
that take the most time with their share, launches and mean time. Exit 1 when the file has no rows."""
import csv
import sys


def main():
    rows = []
    with open(sys.argv[1], newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages start with ==PROF==
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            ns = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        name = r.get("Kernel Name", "?").split("(")[0].strip()
        rows.append((name, ns))
    if not rows:
        print("kernel times: no kernel rows in", sys.argv[1])
        return 1
    total = sum(ns for _, ns in rows)
    by_name = {}
    for name, ns in rows:
        t, n = by_name.get(name, (0.0, 0))
        by_name[name] = (t + ns, n + 1)
    print(f"kernel times: {len(rows)} launches, {total / 1e6:.1f} ms of GPU time in one step")
    for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"  {100 * t / total:5.1f}%  {t / 1e6:8.2f} ms  {n:5d} x {t / n / 1e3:9.1f} us  {name[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
