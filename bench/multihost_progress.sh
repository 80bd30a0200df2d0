#!/usr/bin/env bash
# multihost_progress.sh: progress of a collective in flight while the rank computes, across 2 hosts x
# 1 rank of the multi-host test bed (tests/multihost/mhbed.sh), one core per rank: no progress calls,
# fsdp_comm_test polls between kernels (the device's way), and a progress thread (bench/progress_bench.c).
# Unshaped and with the link shaped to RATE (default 2gbit). Needs root. The bed is removed on exit.
#   bench/multihost_progress.sh [BIN_DIR [BED [RATE]]]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$here/build/bin}" && pwd)
bed=${2:-bmp}
rate=${3:-2gbit}
mh="$here/tests/multihost/mhbed.sh"
"$mh" check
trap '"$mh" down "$bed"' EXIT INT TERM
cores=$(nproc --all)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $cores cores; $(mpirun --version | head -1)"
for shaped in "" "$rate"; do
    "$mh" down "$bed"
    "$mh" up "$bed" 2 $shaped >/dev/null
    for coll in reduce_scatter all_gather all_reduce; do
        echo "## link ${shaped:-unshaped}, $coll"
        "$mh" mpirun "$bed" --host "$("$mh" hosts "$bed" 1)" -np 2 --map-by slot --bind-to core -x OMP_NUM_THREADS \
            "$bin/progress-bench" --collective "$coll" --bytes $((64 << 20))
    done
done
