"""Across hosts, N ranks must still equal one process: on 2 hosts x 2 ranks (tests/multihost/mhbed.sh),
every strategy (full_shard, shard_grad_op, no_shard, hybrid_shard with its default groups: one shard
group per host, replicated across hosts, and ddp) trains the seed model of
tests/multirank/test_fsdp_equivalence.py to the same losses, gradient norms and final parameters as
one process, at that test's tolerances. Collectives here run over TCP between the hosts (no shared
memory across them), a path the single-host tests never take. A deliberately wrong reference (another
learning rate) must fail the same comparison."""
import contextlib
import io
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
sys.path.insert(0, os.path.join(HERE, "..", "multirank"))
sys.path.insert(0, HERE)
from fsdp_testlib import Checker, parse_args, st_load, tmpdir  # noqa: E402
from mhlib import Bed, require_bed  # noqa: E402
from test_fsdp_equivalence import MODEL, STRATEGIES, compare, launch  # noqa: E402


def main():
    args = parse_args()
    require_bed()
    binary = os.path.join(args.bin, "fsdp-minimal")
    tmp = tmpdir()
    chk = Checker("multi-host equivalence")
    ref = launch(binary, 1, [], os.path.join(tmp, "ref.safetensors"))
    wrong = launch(binary, 1, ["--lr", "2e-4"], os.path.join(tmp, "wrong.safetensors"))
    with Bed(hosts=2) as bed:
        for strategy in STRATEGIES:
            t0 = time.time()
            out = os.path.join(tmp, f"{strategy}.safetensors")
            extra = ["--strategy", strategy, "--wrap", "transformer", "--summary", "--save", out]
            r = bed.mpirun(2, [binary] + MODEL + extra)
            losses = [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)", r.stdout, re.M)]
            norms = [float(m.group(1)) for m in re.finditer(r"grad_norm (\S+)", r.stdout)]
            got = (losses, norms, st_load(out), r.stdout)
            chk.true(f"2 hosts x 2 ranks {strategy}: world of 4 ranks on 2 nodes ({time.time() - t0:.1f} s)",
                     "groups: world 4 ranks on 2 nodes" in r.stdout, r.stdout[-1500:])
            compare(chk, f"2 hosts x 2 ranks {strategy}:", got, ref)
            if strategy == "full_shard":  # the comparison must catch a wrong result: against a wrong reference
                probe = Checker("probe")
                with contextlib.redirect_stdout(io.StringIO()):
                    compare(probe, "wrong reference", got, wrong)
                chk.true("a wrong reference (lr 2e-4) fails the comparison", probe.failures > 0,
                         f"{probe.failures} of {probe.count} comparisons failed")
    chk.report()


if __name__ == "__main__":
    main()
