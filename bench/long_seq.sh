#!/usr/bin/env bash
# bench/long_seq.sh: the GPT benchmark model (L6 C512 H8 V256) at long sequences, 2 ranks x 1 thread,
# one sequence per rank, T = 256 .. 4096: tokens/s, fsdp-plan's predicted activations, the accounted
# peak the run measured, and what the unfused attention's stored T x T probabilities would add
# (L * H * T * T * 4 bytes per sequence). Attention is fused (docs/fsdp.md, "Memory"), so the
# activations grow linearly in T: the per-token column stays flat.
# Knobs: BUILD=build, BENCH_LONG_SEQS="256 1024 2048 4096", BENCH_LONG_STEPS=3.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SEQS=${BENCH_LONG_SEQS:-256 1024 2048 4096}
STEPS=${BENCH_LONG_STEPS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
L=6 C=512 H=8 V=256

echo "== long sequences, GPT L$L C$C H$H V$V, 2 ranks x 1 thread, 1 sequence per rank ($(date -u '+%F %T') UTC)"
printf '%6s %10s %14s %16s %14s %18s\n' "T" "tokens/s" "plan act. MiB" "act. KiB/token" "peak MiB" "unfused T x T MiB"
for T in $SEQS; do
  flags="--layers $L --d-model $C --heads $H --vocab $V --seq $T --batch 1"
  plan=$("$BUILD/bin/fsdp-plan" train $flags --world-size 2 2>/dev/null | sed -n 's/.*activations_peak \([0-9]*\).*/\1/p')
  log=$LOGS/long-seq-$T.log
  mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $flags --steps "$STEPS" >"$log" 2>&1
  tps=$(sed -n 's/^mean .* \([0-9][0-9]*\) tok\/s.*/\1/p' "$log")
  peak=$(sed -n 's/^mean .*peak memory \([0-9.]*\) MiB.*/\1/p' "$log")
  printf '%6s %10s %14s %16s %14s %18s\n' "$T" "${tps:-failed}" \
    "$(awk -v b="$plan" 'BEGIN{if (b > 0) printf "%.1f", b / 1048576; else print "n/a"}')" \
    "$(awk -v b="$plan" -v t="$T" 'BEGIN{if (b > 0) printf "%.1f", b / 1024 / t; else print "n/a"}')" \
    "${peak:-n/a}" "$(awk -v L=$L -v H=$H -v t="$T" 'BEGIN{printf "%.1f", L * H * t * t * 4 / 1048576}')"
done
echo "   (logs: $LOGS/long-seq-*.log)"
