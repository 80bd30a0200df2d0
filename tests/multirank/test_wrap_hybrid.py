"""--wrap size:N at its threshold, and HYBRID_SHARD's edge cases, through fsdp-minimal.
size:N wraps a block when its parameter count reaches N (size_based_auto_wrap_policy's min_num_params;
candidates are blocks): N = a block's count wraps every block and leaves no root, N + 1 wraps none (one
root unit); the layout is read from --summary, and 2 and 3 ranks equal one process for both.
HYBRID_SHARD with shard groups of 1 rank on a world of 2 is pure replication: equal to one process and
to DDP. A world of 3 with --shard-group-size 2 stops with one line naming the flag and the world size."""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
sys.path.insert(0, HERE)
from fsdp_testlib import Checker, mpirun, parse_args, tmpdir  # noqa: E402
from test_fsdp_equivalence import MODEL, compare, launch  # noqa: E402


def units(stdout):
    """{unit name: numel} from --summary."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+\d+\s+(\d+)\s+\d+\s+\d+\s+\d+$", stdout, re.M)}


def main():
    args = parse_args()
    binary = os.path.join(args.bin, "fsdp-minimal")
    tmp = tmpdir()
    chk = Checker("wrap size and hybrid")
    ref = launch(binary, 1, ["--summary"], os.path.join(tmp, "ref.safetensors"))
    layers = int(MODEL[MODEL.index("--layers") + 1])
    block = units(ref[3]).get("0", 0)  # the transformer policy's unit "0": one block's parameter count
    chk.true(f"transformer wrap: {layers} block units of {block} parameters",
             block > 0 and units(ref[3]) == {str(b): block for b in range(layers)}, ref[3])

    # the threshold: N = block count wraps every block (>=), N + 1 wraps none
    for n_min, want in ((block, {str(b): block for b in range(layers)}), (block + 1, {"(root)": layers * block})):
        for n in (1, 2, 3):
            got = launch(binary, n, ["--wrap", f"size:{n_min}", "--summary"],
                         os.path.join(tmp, f"size{n_min}-{n}.safetensors"))
            if n == 1:
                chk.true(f"size:{n_min}: units {want}", units(got[3]) == want, f"{units(got[3])}\n{got[3]}")
            compare(chk, f"size:{n_min} np {n}:", got, ref)

    # HYBRID_SHARD with one-rank shard groups on 2 ranks: replication across the groups
    hyb = launch(binary, 2, ["--strategy", "hybrid_shard", "--shard-group-size", "1", "--summary"],
                 os.path.join(tmp, "hybrid-1.safetensors"))
    chk.true("hybrid_shard, groups of 1: the summary says shard group 1, replicated across groups",
             "world 2, shard group 1 (replicated across groups)" in hyb[3], hyb[3][:400])
    compare(chk, "hybrid_shard groups of 1, np 2 vs 1 rank:", hyb, ref)
    ddp = launch(binary, 2, ["--strategy", "ddp"], os.path.join(tmp, "ddp.safetensors"))
    compare(chk, "hybrid_shard groups of 1, np 2 vs ddp np 2:", hyb, ddp)

    # a world that the shard group size does not divide: one clear line, non-zero exit
    r = mpirun(3, [binary] + MODEL + ["--strategy", "hybrid_shard", "--shard-group-size", "2"], expect_ok=False)
    lines = [line for line in r.stderr.splitlines()  # errors, not notes (e.g. the oversubscription note)
             if line.startswith("fsdp-minimal:") and not line.startswith("fsdp-minimal: note:")]
    chk.true("hybrid_shard, world 3, group size 2: fails with one line naming --shard-group-size 2 and world size 3",
             r.returncode != 0 and len(lines) == 1 and "--shard-group-size 2" in lines[0]
             and "world size 3" in lines[0] and not re.search(r"^step ", r.stdout, re.M), r.stderr[-800:])
    chk.report()


if __name__ == "__main__":
    main()
