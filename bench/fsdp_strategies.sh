#!/usr/bin/env bash
# bench/fsdp_strategies.sh: every FSDP strategy at 2 ranks (1 OpenMP thread each) on the seed model
# and on the GPT benchmark model: ms/step, tokens/s, exposed communication (share of the step a rank
# spends blocked in collectives), peak memory per rank; beside PyTorch DDP (gloo, 2 ranks) and our
# own 1-process run, all in this run. Then the collective bandwidth sweep at 2 ranks.
# Knobs: BENCH_CORETYPE (OPENBLAS_CORETYPE for the PyTorch rows; default as in the environment),
#        BENCH_GPT_STEPS=4, BENCH_SEED_STEPS=40, BUILD=build, BENCH_PYTHON=/usr/bin/python3.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=${BENCH_PYTHON:-/usr/bin/python3}
GPT_STEPS=${BENCH_GPT_STEPS:-4}
SEED_STEPS=${BENCH_SEED_STEPS:-40}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
CT=${BENCH_CORETYPE:-${OPENBLAS_CORETYPE:-}}
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256"  # --batch is per rank: 8 sequences in all

row() {  # label, log: parse our "mean" line
  local m
  m=$(grep '^mean' "$2" | tail -1)
  if [ -z "$m" ]; then printf '%-44s %s\n' "$1" "failed (see $2)"; return; fi
  echo "$m" | sed -E 's/.*: ([0-9.]+) ms\/step, ([0-9]+) tok\/s(, exposed comm ([0-9.]+)%)?(, peak memory ([0-9.]+) MiB)?.*/\1 \2 \4 \6/' |
    awk -v l="$1" '{printf "%-44s %10.1f %10d %9s %12s\n", l, $1, $2, ($3==""?"-":$3"%"), ($4==""?"-":$4)}'
}

echo "== FSDP strategies at 2 ranks x 1 thread ($(date -u '+%F %T') UTC; OPENBLAS_CORETYPE for PyTorch: ${CT:-unset})"
for model in gpt seed; do
  printf '\n%-44s %10s %10s %9s %12s\n' "$model model" "ms/step" "tokens/s" "comm" "peak MiB/rank"
  if [ $model = gpt ]; then bin="$BUILD/bin/fsdp-train $GPT --steps $GPT_STEPS"; else bin="$BUILD/bin/fsdp-minimal --global-batch 16 --steps $SEED_STEPS"; fi
  one=""; two=""
  if [ $model = gpt ]; then one="--batch 8"; two="--batch 4"; fi
  OMP_NUM_THREADS=2 $bin $one >"$LOGS/strat-$model-1proc.log" 2>&1
  row "ours, 1 process x 2 threads" "$LOGS/strat-$model-1proc.log"
  for s in full_shard shard_grad_op no_shard hybrid_shard ddp; do
    mpirun -np 2 -x OMP_NUM_THREADS=1 $bin $two --strategy $s >"$LOGS/strat-$model-$s.log" 2>&1
    row "ours, 2 ranks, $s" "$LOGS/strat-$model-$s.log"
  done
  if [ $model = gpt ] && "$PY" -c 'import torch' 2>/dev/null; then
    if [ -n "$CT" ]; then  # (an empty OPENBLAS_CORETYPE is not "unset": OpenBLAS then picks Cooperlake)
      OPENBLAS_CORETYPE=$CT "$PY" bench/torch_gpt.py --ddp --steps 2 >"$LOGS/strat-torch-ddp.log" 2>&1
    else
      env -u OPENBLAS_CORETYPE "$PY" bench/torch_gpt.py --ddp --steps 2 >"$LOGS/strat-torch-ddp.log" 2>&1
    fi
    ms=$(awk '/^ms_per_step/ {print $2}' "$LOGS/strat-torch-ddp.log")
    tps=$(awk '/^tokens_per_s/ {print $2}' "$LOGS/strat-torch-ddp.log")
    printf '%-44s %10s %10s %9s %12s\n' "PyTorch DDP (gloo), 2 ranks x 1 thread" "${ms:-n/a}" "${tps:-n/a}" "-" "-"
  fi
done

echo
echo "== collective bandwidth at 2 ranks (shared-memory path, then MPI's own collectives)"
mpirun -np 2 -x OMP_NUM_THREADS=1 "$BUILD/bin/comm-bench"
mpirun -np 2 -x OMP_NUM_THREADS=1 -x FSDP_COMM_NO_SHM=1 "$BUILD/bin/comm-bench"
