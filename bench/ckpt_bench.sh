#!/usr/bin/env bash
# bench/ckpt_bench.sh: save and load time and peak extra memory (rank 0) of sharded and full
# checkpoints of the GPT benchmark model (6 layers, d_model 512, vocab 256: 19.2M parameters plus
# AdamW state) at 1, 2 and 4 ranks. Part of `make bench`.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256 --threads 1"
TMP=$(mktemp -d)
echo "== checkpoints of the GPT benchmark model ($(date -u '+%F %T') UTC)"
printf '%-8s %-8s %10s %16s %10s %16s %12s\n' ranks type "save s" "save extra MiB" "load s" "load extra MiB" "on disk MiB"
for n in 1 2 4; do
  for type in sharded full; do
    dir=$TMP/$n-$type
    out=$(mpirun -np $n -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT --batch $((8 / n)) --steps 1 --save-every 1 \
          --ckpt-dir "$dir" --ckpt-type $type 2>&1 | grep '^checkpoint:')
    save_s=$(echo "$out" | sed -E 's/.*\(([0-9.]+) s, peak extra memory ([0-9.]+) MiB.*/\1/')
    save_m=$(echo "$out" | sed -E 's/.*\(([0-9.]+) s, peak extra memory ([0-9.]+) MiB.*/\2/')
    inp=$(mpirun -np $n -x OMP_NUM_THREADS=1 "$BUILD/bin/fsdp-train" $GPT --batch $((8 / n)) --steps 1 \
          --resume "$dir/step_00000001" 2>&1 | grep '^resumed')
    load_s=$(echo "$inp" | sed -E 's/.*loaded in ([0-9.]+) s, peak extra memory ([0-9.]+) MiB.*/\1/')
    load_m=$(echo "$inp" | sed -E 's/.*loaded in ([0-9.]+) s, peak extra memory ([0-9.]+) MiB.*/\2/')
    disk=$(du -sm "$dir/step_00000001" | cut -f1)
    printf '%-8s %-8s %10s %16s %10s %16s %12s\n' $n $type "${save_s:-?}" "${save_m:-?}" "${load_s:-?}" "${load_m:-?}" "$disk"
  done
done
rm -rf "$TMP"
