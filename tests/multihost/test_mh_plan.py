"""fsdp-plan's inter-host bytes per step (`fsdp-plan train --world-size 4 --ranks-per-host 2`) against
what each host of a 2-host bed (tests/multihost/mhbed.sh: 2 ranks per host) sends through its link:
eth0's tx_bytes inside the host's namespace, before and after a run of fsdp-train. Start-up (MPI
wire-up, the launch's out-of-band traffic, the initial broadcast) is the same in a 1-step and a 6-step
run of the same flags, so (tx(6 steps) - tx(1 step)) / 5 is the traffic of one step.

Cases: FULL_SHARD, HYBRID_SHARD (the shard group is a host: only the replica all-reduce crosses),
DDP and bf16 mixed precision (FULL_SHARD and HYBRID_SHARD).

Also rank 0's memory by category and bytes sent as fsdp-train --summary accounts them, within 10% as
in tests/multirank/test_plan.py: groups spanning hosts have no shared memory (no gradient staging, the
bf16 scratch of plain MPI collectives), groups inside a host do.

Tolerance: 15% on the busiest host's NIC. The wire carries more than the payload: Ethernet, IP and
TCP headers (66 bytes per segment of up to 1448 payload bytes at MTU 1500: 4.6%), ACKs for the
traffic the host receives, Open MPI's fragment headers, and the per-step scalar all-reduces (loss,
gradient norm) the planner leaves out; measured, these add 1-3% here. A term of the model off by a
factor 2 moves the prediction by 30% or more in at least one case, so it fails.

The planner models every collective as pairwise (each rank sends every peer of the group its share
directly). Open MPI's fp32 reduce-scatter-block on these sizes reduces to rank 0 and then scatters:
the other host sends what the pairwise model says, rank 0's host sends less (half of its reduce-
scatter bytes) and receives more. So every host must send at most the prediction (+15%), and the
busiest must send the prediction (+-15%): that NIC bounds the step's communication time."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mhlib import Bed, require_bed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc  # noqa: E402

MODEL = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "32", "--vocab", "256", "--batch", "2",
         "--threads", "1"]
CASES = [
    [],
    ["--strategy", "hybrid_shard"],
    ["--strategy", "ddp"],
    ["--mixed-precision", "bf16"],
    ["--strategy", "hybrid_shard", "--mixed-precision", "bf16"],
]
MEMORY_KEYS = ["parameters", "gradients", "optimizer", "unsharded_peak", "activations_peak", "communication",
               "total", "bytes_sent_per_step"]
STEPS = (1, 6)
TOL = 0.15


def numbers(text, prefix):
    line = next((x for x in text.splitlines() if x.startswith(prefix)), "")
    return {k: float(v) for k, v in re.findall(r"([a-z_]+) ([0-9.]+)", line)}


def tx_bytes(bed, host):
    return int(bed.exec(host, ["cat", "/sys/class/net/eth0/statistics/tx_bytes"]).stdout.strip())


def main():
    args = parse_args()
    require_bed()
    chk = Checker("fsdp-plan across hosts")
    train = os.path.join(args.bin, "fsdp-train")
    with Bed(hosts=2, name="c1") as bed:
        for extra in CASES:
            label = " ".join(extra) or "full_shard"
            sent = {}
            for steps in STEPS:
                before = [tx_bytes(bed, h) for h in range(2)]
                summary = ["--summary"] if steps == STEPS[-1] else []
                r = bed.mpirun(2, [train] + MODEL + ["--steps", str(steps)] + summary + extra,
                               env={"OMP_NUM_THREADS": "1"})
                sent[steps] = [tx_bytes(bed, h) - before[h] for h in range(2)]
            per_step = [(sent[STEPS[1]][h] - sent[STEPS[0]][h]) / (STEPS[1] - STEPS[0]) for h in range(2)]
            p = proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", "4", "--ranks-per-host", "2"] +
                     MODEL + extra)
            pred = numbers(p.stdout, "prediction:")
            want = pred.get("inter_host_bytes_per_step")
            print(f"{label}: measured per step host 0 {per_step[0]:.0f} B, host 1 {per_step[1]:.0f} B; predicted "
                  f"{want} B per host NIC ({pred.get('hosts')} hosts x {pred.get('ranks_per_host')})")
            chk.close(f"{label}: busiest host's NIC bytes per step", [want], [max(per_step)], TOL, 0)
            # rank 0's memory and bytes as fsdp-train accounts them: the shard group in shared memory
            # only where it lies in one host (as tests/multirank/test_plan.py checks on one host)
            measured = numbers(r.stdout, "memory rank 0:")
            measured["total"] = measured.pop("total_peak", None)
            for k in MEMORY_KEYS:
                chk.close(f"{label}: rank 0's {k}", [pred.get(k)], [measured.get(k)], 0.10, 64)
            for h in range(2):
                chk.count += 1
                if want is None or per_step[h] > want * (1 + TOL):
                    chk.fail(f"{label}: host {h}", f"sent {per_step[h]:.0f} B per step, over the prediction {want} + 15%")
    chk.report()


if __name__ == "__main__":
    main()
