#!/usr/bin/env bash
# bench/ab_step.sh: is build B's training step faster than build A's? For changes of a few percent on a VM
# whose speed drifts by 5-15% within minutes, where one best-of-3 run of each build cannot tell.
#
#   bench/ab_step.sh BUILD_A BUILD_B [fsdp-train flags...]
#
# Runs fsdp-train of each build as one process with one thread on one core (the same core for both,
# taskset), ROUNDS rounds in the order A B, B A, A B, ... so that a drift within a round falls on both
# alike, and prints each round's ms/step (fsdp-train's mean over its steps after the first) and the ratio
# B / A, then the median, lowest and highest ratio over the rounds. Below 1: B is faster.
# Default model: the GPT bench model of bench/cpu_speed.sh (L6 C512 H8 V256 T256), 8 sequences, 6 steps;
# flags given replace the defaults entirely (e.g. add --mixed-precision bf16 to the default set by
# passing all of it). Knobs: ROUNDS=8, CORE=0.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_A BUILD_B [fsdp-train flags...]" >&2; exit 2; }
A=$1 B=$2
shift 2
for b in "$A" "$B"; do
  [ -x "$b/bin/fsdp-train" ] || { echo "ab_step.sh: $b/bin/fsdp-train not built" >&2; exit 2; }
done
ROUNDS=${ROUNDS:-8}
CORE=${CORE:-0}
if [ $# -gt 0 ]; then FLAGS=("$@"); else
  FLAGS=(--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256 --batch 8 --steps 6)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# build: ms/step of one run (exits if the run fails or prints no mean: a failed run is no measurement)
step_ms() {
  if ! taskset -c "$CORE" "$1/bin/fsdp-train" "${FLAGS[@]}" >"$log" 2>&1; then
    echo "ab_step.sh: $1/bin/fsdp-train ${FLAGS[*]} failed:" >&2
    tail -3 "$log" >&2
    exit 1
  fi
  local ms
  ms=$(sed -n 's/^mean .*: \([0-9.]*\) ms\/step.*/\1/p' "$log" | tail -1)
  # a number above zero, or no measurement (nan, inf, 0 and an empty match all end here)
  if ! awk -v m="$ms" 'BEGIN{exit !(m ~ /^[0-9]*\.?[0-9]+$/ && m + 0 > 0)}'; then
    echo "ab_step.sh: no mean ms/step above zero from $1/bin/fsdp-train (need --steps >= 2)" >&2
    exit 1
  fi
  echo "$ms"
}
echo "== A/B step time on core $CORE, $(date -u '+%F %T') UTC: $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "   A: $A   B: $B   flags: ${FLAGS[*]}"
ratios=()
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then a=$(step_ms "$A") || exit 1; b=$(step_ms "$B") || exit 1
  else b=$(step_ms "$B") || exit 1; a=$(step_ms "$A") || exit 1; fi
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.4f", b / a}')
  ratios+=("$ratio")
  printf '   round %2d: A %9.1f ms  B %9.1f ms  B/A %s\n' "$r" "$a" "$b" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR] = $1} END {
  med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "B/A over %d rounds: median %.4f, lowest %.4f, highest %.4f\n", NR, med, v[1], v[NR]}'
