#!/usr/bin/env bash
# bench/gemm_pair.sh: the GEMM rates as the 2-rank runs see them. Two gemm-bench processes of one thread
# each run at once (each core busy, as at 2 ranks x 1 thread); per shape it prints the fp32 kernel's and
# the bf16 path's GFLOP/s per process (mean of the two processes, best of ROUNDS rounds) and bf16/fp32.
# Knobs: BUILD=build, ROUNDS=2, FSDP_GEMM_BF16 (default: the best path the CPU has).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-2}
BIN=$BUILD/bin/gemm-bench
[ -x "$BIN" ] || { echo "gemm_pair.sh: $BIN not built (make build)" >&2; exit 1; }
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
rm -f "$LOGS"/gemm-pair-*.log
echo "== GEMM rates, two one-thread processes at once ($(date -u '+%F %T') UTC): $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
for r in $(seq "$ROUNDS"); do
  OMP_NUM_THREADS=1 "$BIN" >"$LOGS/gemm-pair-$r-a.log" 2>&1 &
  a=$!
  OMP_NUM_THREADS=1 "$BIN" >"$LOGS/gemm-pair-$r-b.log" 2>&1
  wait $a
done
# lines: "<path> <what...> M m N n K k  <rate> GFLOP/s"; the fp32 kernel is "avx512", bf16 paths "bf16/..."
awk '
  $1 == "avx512" || $1 ~ /^bf16\// && $1 != "bf16/emulate" {
    what = ""; for (i = 2; $i != "M"; i++) what = what (what == "" ? "" : " ") $i
    key = what " (" $(i+1) " x " $(i+3) " x " $(i+5) ")"; rate = $(NF-1)
    f = FILENAME; sub(/-[ab]\.log$/, "", f)  # the round
    kind = $1 == "avx512" ? "fp32" : "bf16"; if (kind == "bf16") path = $1
    sum[key, kind, f] += rate / 2; keys[key] = 1; rounds[f] = 1
  }
  END {
    printf "%-40s %10s %10s %10s\n", "product (M x N x K)", "fp32", path, "bf16/fp32"
    for (k in keys) {
      bf = bb = 0
      for (f in rounds) { if (sum[k, "fp32", f] > bf) bf = sum[k, "fp32", f]; if (sum[k, "bf16", f] > bb) bb = sum[k, "bf16", f] }
      printf "%-40s %10.1f %10.1f %9.2fx\n", k, bf, bb, (bf > 0 ? bb / bf : 0)
    }
  }' "$LOGS"/gemm-pair-*-[ab].log | { IFS= read -r head; echo "$head"; sort; }
echo "   (GFLOP/s per process, mean of the two processes, best of $ROUNDS rounds; logs: $LOGS/gemm-pair-*.log)"
