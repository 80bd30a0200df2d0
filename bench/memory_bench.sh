#!/usr/bin/env bash
# bench/memory_bench.sh: per-rank peak memory of the GPT benchmark model (6 layers, d_model 512,
# seq 256, 8 sequences per step in all) at 1, 2, 4 and 8 ranks (oversubscribed), with and without
# activation checkpointing: measured by fsdp-train's accounting (rank 0), beside fsdp-plan's
# prediction of the total and what the OS reports: peak RSS (which counts every shared-memory page a
# rank maps, its peers' included, and library code) and the data PSS (anonymous + proportional
# shared memory: what the rank holds; fsdp_os_memory in core/alloc.h). Then the same at 1 and 2 ranks for
# a model with GPT-2's vocabulary (50257; 2 layers, d_model 256, seq 128, 4 sequences per rank), where
# the LM head's gradient, its window in the shared-memory collectives and the bf16 GEMM's packed
# operands dominate. Part of `make bench`.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# row MODEL_FLAGS BATCH RANKS EXTRA_FLAGS: one table row (fsdp-train's accounting, fsdp-plan, the OS)
row() {
  local model=$1 batch=$2 n=$3 extra=$4
  out=$(mpirun -np $n -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $model --batch $batch --steps 2 --threads 1 \
        --summary $extra 2>&1)
  plan=$("$BUILD/bin/fsdp-plan" train $model --batch $batch --threads 1 --world-size $n $extra | sed -n 's/^prediction:.* total \([0-9]*\).*/\1/p')
  echo "$out" | awk -v n=$n -v flags="${extra:--}" -v plan="$plan" '
    /^memory rank 0:/ { for (i = 1; i <= NF; i++) v[$i] = $(i + 1) }
    /^os memory rank 0:/ { for (i = 1; i <= NF; i++) os[$i] = $(i + 1) }
    /^mean/ { for (i = 1; i <= NF; i++) if ($i == "tok/s,") tps = $(i - 1) }
    END { m = 1048576; printf "%-6s %-28s %10.1f %10.1f %11.1f %9.1f %9.1f %10.1f %10.1f %10.1f %9.1f %9.3f %8s\n", n,
          flags, (v["parameters"] + v["gradients"] + v["optimizer"]) / m, v["unsharded_peak"] / m,
          v["activations_peak"] / m, v["communication"] / m, v["workspace"] / m, v["total_peak"] / m, plan / m,
          os["peak_rss"] / m, os["data_pss"] / m, v["total_peak"] / os["data_pss"], tps }'
}
header() {
  printf '%-6s %-28s %10s %10s %11s %9s %9s %10s %10s %10s %9s %9s %8s\n' ranks flags "p+g+optim" unsharded activations \
    comm workspace total "plan total" "peak rss" "data pss" "acct/pss" "tok/s"
}
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256"
echo "== per-rank memory, GPT benchmark model ($(date -u '+%F %T') UTC), MiB"
header
for n in 1 2 4 8; do
  for ac in "" "--activation-checkpointing"; do row "$GPT" $((8 / n)) $n "$ac"; done
done
VOCAB="--layers 2 --d-model 256 --heads 4 --vocab 50257 --seq 128"
echo "== per-rank memory, GPT-2 vocabulary (vocab 50257, 2 layers, d_model 256, seq 128, batch 4 per rank), MiB"
header
for n in 1 2; do
  for mp in fp32 bf16; do row "$VOCAB" 4 $n "--mixed-precision $mp"; done
done
