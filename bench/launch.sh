#!/usr/bin/env bash
# bench/launch.sh: launch defaults. The same training run started the ways people start it: ranks
# bound one per core with one thread (the reference), more ranks than cores (--oversubscribe -np 3),
# unbound ranks (--bind-to none -np 2), both with the default threads per rank (OMP_NUM_THREADS
# unset), and unbound with an explicit --threads 2 (oversubscribed on purpose: passive waits). Seed
# model (fsdp-minimal, global batch 12) and GPT benchmark model (fsdp-train, 12 sequences in all), so
# every launch does the same work per step. Ratio: the reference's tokens/s over the row's.
# Knobs: BENCH_SEED_STEPS=30, BENCH_GPT_STEPS=4, BENCH_TIMEOUT=600 (seconds per run), BUILD=build.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SEED_STEPS=${BENCH_SEED_STEPS:-30}
GPT_STEPS=${BENCH_GPT_STEPS:-4}
TMO=${BENCH_TIMEOUT:-600}
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256"

# the mean line's ms/step and tok/s ("" when the run failed)
mean() { sed -n -E 's/^mean \(steps [0-9.]+\): ([0-9.]+) ms\/step, ([0-9]+) tok\/s.*/\1 \2/p' "$1" | tail -1; }

echo "== launch defaults on $(nproc) cores ($(date -u '+%F %T') UTC; load average $(cut -d' ' -f1-3 /proc/loadavg))"
for model in seed gpt; do
  printf '\n%-52s %10s %10s %8s %s\n' "$model model" ms/step tokens/s ratio threads
  ref=
  for launch in bound over unbound unbound-t2; do
    case $launch in
      bound)      label="-np 2, bound to a core each, --threads 1"; mpi=(-np 2); extra=(--threads 1); n=2 ;;
      over)       label="--oversubscribe -np 3 (default threads)"; mpi=(--oversubscribe -np 3); extra=(); n=3 ;;
      unbound)    label="--bind-to none -np 2 (default threads)"; mpi=(--bind-to none -np 2); extra=(); n=2 ;;
      unbound-t2) label="--bind-to none -np 2 --threads 2 (passive waits)"; mpi=(--bind-to none -np 2); extra=(--threads 2); n=2 ;;
    esac
    if [ $model = seed ]; then
      cmd=("$BUILD/bin/fsdp-minimal" --steps "$SEED_STEPS" --global-batch 12 --summary)
    else
      cmd=("$BUILD/bin/fsdp-train" $GPT --batch $((12 / n)) --steps "$GPT_STEPS")
    fi
    log=$LOGS/launch-$model-$launch.log
    env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY timeout "$TMO" mpirun "${mpi[@]}" "${cmd[@]}" "${extra[@]}" >"$log" 2>&1 ||
      echo "bench: $model $launch: exit $? (timeout ${TMO}s; see $log)" >&2
    read -r ms tps <<<"$(mean "$log")"
    threads=$(grep -o -m1 'threads per rank [0-9]*' "$log" | awk '{print $4}')
    if [ -z "${ms:-}" ]; then printf '%-52s %10s\n' "$label" "failed (see $log)"; continue; fi
    [ $launch = bound ] && ref=$tps
    awk -v l="$label" -v ms="$ms" -v t="$tps" -v r="$ref" -v th="${threads:-?}" \
      'BEGIN{printf "%-52s %10.1f %10d %8s %s\n", l, ms, t, (r > 0 && t > 0) ? sprintf("%.2fx", r / t) : "n/a", th}'
  done
done
echo "   (ratio: bound reference tokens/s / this row's; the issue's target is under 1.5x)"
