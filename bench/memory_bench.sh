#!/usr/bin/env bash
# bench/memory_bench.sh: per-rank peak memory of the GPT benchmark model (6 layers, d_model 512,
# seq 256, 8 sequences per step in all) at 1, 2, 4 and 8 ranks (oversubscribed), with and without
# activation checkpointing: measured by fsdp-train's accounting (rank 0), beside fsdp-plan's
# prediction of the total and what the OS reports: peak RSS (which counts every shared-memory page a
# rank maps, its peers' included, and library code) and the data PSS (anonymous + proportional
# shared memory: what the rank holds; fsdp_os_memory in core/alloc.h). Part of `make bench`.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256"
echo "== per-rank memory, GPT benchmark model ($(date -u '+%F %T') UTC), MiB"
printf '%-6s %-4s %12s %12s %12s %12s %12s %12s %12s %9s %12s\n' ranks AC "p+g+optim" unsharded activations "total" \
  "plan total" "peak rss" "data pss" "acct/pss" "tok/s"
for n in 1 2 4 8; do
  for ac in "" "--activation-checkpointing"; do
    out=$(mpirun -np $n -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT --batch $((8 / n)) --steps 2 --threads 1 \
          --summary $ac 2>&1)
    plan=$("$BUILD/bin/fsdp-plan" $GPT --batch $((8 / n)) --world-size $n $ac | sed -n 's/^prediction:.* total \([0-9]*\).*/\1/p')
    echo "$out" | awk -v n=$n -v ac="${ac:+yes}" -v plan="$plan" '
      /^memory rank 0:/ { for (i = 1; i <= NF; i++) v[$i] = $(i + 1) }
      /^os memory rank 0:/ { for (i = 1; i <= NF; i++) os[$i] = $(i + 1) }
      /^mean/ { for (i = 1; i <= NF; i++) if ($i == "tok/s,") tps = $(i - 1) }
      END { m = 1048576; printf "%-6s %-4s %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %9.3f %12s\n", n,
            (ac == "" ? "no" : ac), (v["parameters"] + v["gradients"] + v["optimizer"]) / m, v["unsharded_peak"] / m,
            v["activations_peak"] / m, v["total_peak"] / m, plan / m, os["peak_rss"] / m, os["data_pss"] / m,
            v["total_peak"] / os["data_pss"], tps }'
  done
done
