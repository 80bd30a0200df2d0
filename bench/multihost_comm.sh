#!/usr/bin/env bash
# multihost_comm.sh: comm-bench across hosts of a multi-host test bed (tests/multihost/mhbed.sh: network
# namespaces joined by veth links, Open MPI over TCP), with reduce-scatters and all-reduces run by MPI's
# collectives (FSDP_COMM_ALGO=mpi), point to point (p2p) and the default (auto); 2 hosts x 1 rank and
# 2 hosts x 2 ranks (the world spans the hosts: no shared memory). Needs root. The bed is removed on exit.
#   bench/multihost_comm.sh [BIN_DIR [BED [RATE]]]    (default build/bin, bed bmc, no shaping)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$here/build/bin}" && pwd)
bed=${2:-bmc}
rate=${3:-}
mh="$here/tests/multihost/mhbed.sh"
"$mh" check
trap '"$mh" down "$bed"' EXIT INT TERM
"$mh" down "$bed"
"$mh" up "$bed" 2 $rate >/dev/null
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc --all) cores; $(mpirun --version | head -1)"
for per in 1 2; do
    for algo in mpi p2p auto; do
        echo "## 2 hosts x $per ranks, FSDP_COMM_ALGO=$algo"
        FSDP_COMM_ALGO=$algo "$mh" mpirun "$bed" --host "$("$mh" hosts "$bed" "$per")" -np $((2 * per)) \
            --map-by slot -x OMP_NUM_THREADS -x FSDP_COMM_ALGO "$bin/comm-bench"
    done
done
