#!/usr/bin/env bash
# bench/multihost_overlap.sh: overlap across hosts. The GPT benchmark model trains with FULL_SHARD on
# 2 "hosts" (network namespaces, tests/multihost/mhbed.sh) x 1 rank x 1 thread, over a link shaped to
# RATE, so that a step's traffic takes about as long as its compute. Four runs in one go: prefetch on
# (backward pre + forward) and off, each with the device's progress polls on (FSDP_COMM_PROGRESS=poll,
# the default) and off (none). Prints ms/step and exposed communication (the share of the step a rank
# spends blocked in collectives). Needs root; removes its namespaces on exit.
# Knobs: RATE=2gbit (tc rate), STEPS=5, BUILD=build, BATCH=4 (sequences per rank).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RATE=${RATE:-2gbit}
STEPS=${STEPS:-5}
BATCH=${BATCH:-4}
BED=ovb$$
BED=${BED:0:6}
MH=tests/multihost/mhbed.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$MH" check || { echo "multihost_overlap: no test bed on this machine (see above)"; exit 0; }
trap '"$MH" down "$BED"' EXIT
"$MH" up "$BED" 2 "$RATE"
LOGS=$BUILD/bench/logs
mkdir -p "$LOGS"
GPT="--layers 6 --d-model 512 --heads 8 --vocab 256 --seq 256 --batch $BATCH --steps $STEPS --threads 1"
echo "== overlap across hosts: GPT bench model, FULL_SHARD, 2 hosts x 1 rank x 1 thread, link $RATE" \
     "($(date -u '+%F %T') UTC; $(lscpu | sed -n 's/^Model name: *//p' | head -1))"
printf '%-34s %10s %10s %9s\n' "run" "ms/step" "tokens/s" "exposed"
for progress in poll none; do
    for pf in on off; do
        if [ $pf = on ]; then flags="--backward-prefetch pre --forward-prefetch"; else flags="--backward-prefetch none"; fi
        log="$LOGS/overlap-$progress-$pf.log"
        if ! FSDP_COMM_PROGRESS=$progress OMP_NUM_THREADS=1 "$MH" mpirun "$BED" --host "$("$MH" hosts "$BED" 1)" -np 2 \
            -x FSDP_COMM_PROGRESS -x OMP_NUM_THREADS "$BUILD/bin/fsdp-train" $GPT $flags >"$log" 2>&1; then
            printf '%-34s %s\n' "prefetch $pf, polls $progress" "failed (see $log)"
            continue
        fi
        grep '^mean' "$log" | tail -1 |
            sed -E 's/.*: ([0-9.]+) ms\/step, ([0-9]+) tok\/s, exposed comm ([0-9.]+)%.*/\1 \2 \3/' |
            awk -v l="prefetch $pf, polls $progress" '{printf "%-34s %10.1f %10d %8.1f%%\n", l, $1, $2, $3}'
    done
done
