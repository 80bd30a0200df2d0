"""Hierarchical collectives in the engine, on one machine: 4 ranks in pretended hosts of 2
(FSDP_COMM_RANKS_PER_HOST=2, so the world spans two "hosts" and its all-gathers and reduce-scatters run
hierarchically: src/comm/comm_hier.c) train the seed model of test_fsdp_equivalence.py to the same
losses, gradient norms and final parameters as one process, at that test's tolerances, for full_shard,
shard_grad_op and hybrid_shard (whose default shard groups are then the pretended hosts); the summary
says which groups are hierarchical, and FSDP_COMM_ALGO=p2p turns it off. Unlike tests/multihost/, this
needs no root and runs under the sanitizers (make test-asan)."""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
sys.path.insert(0, HERE)
from fsdp_testlib import Checker, parse_args, run, st_load, tmpdir  # noqa: E402
from test_fsdp_equivalence import MODEL, MPI_ENV, compare, launch  # noqa: E402


def main():
    args = parse_args()
    binary = os.path.join(args.bin, "fsdp-minimal")
    tmp = tmpdir()
    chk = Checker("pretended hosts")
    ref = launch(binary, 1, [], os.path.join(tmp, "ref.safetensors"))
    for strategy, algo, hier in (("full_shard", "auto", True), ("shard_grad_op", "auto", True),
                                 ("hybrid_shard", "auto", False), ("full_shard", "p2p", False)):
        out = os.path.join(tmp, f"{strategy}-{algo}.safetensors")
        env = {**MPI_ENV, "FSDP_COMM_RANKS_PER_HOST": "2", "FSDP_COMM_ALGO": algo}
        cmd = ["mpirun", "-np", "4", "-x", "FSDP_COMM_RANKS_PER_HOST", "-x", "FSDP_COMM_ALGO", binary] + MODEL + [
            "--strategy", strategy, "--wrap", "transformer", "--summary", "--save", out]
        _, stdout, _ = run(cmd, env=env)
        losses = [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)", stdout, re.M)]
        norms = [float(m.group(1)) for m in re.finditer(r"grad_norm (\S+)", stdout)]
        label = f"4 ranks in hosts of 2, {strategy}, FSDP_COMM_ALGO={algo}:"
        line = next((x for x in stdout.splitlines() if x.startswith("groups:")), "")
        chk.true(f"{label} world of 4 ranks on 2 nodes, hierarchical {'on' if hier else 'off'}: {line!r}",
                 "world 4 ranks on 2 nodes" in line and ("hierarchical" in line) == hier, stdout[-1500:])
        compare(chk, label, (losses, norms, st_load(out), stdout), ref)
    chk.report()


if __name__ == "__main__":
    main()
