"""A checkpoint whose completion marker cannot be written says why (src/fsdp/checkpoint.c
write_marker): with FSDP_TEST_MARKER_FULL=1 the marker DONE is written into /dev/full, whose write
fails with the kernel's ENOSPC; fsdp-train (sharded and full checkpoints) and fsdp-minimal exit
non-zero with one line naming DONE and "No space left on device", and leave no DONE (nor its
temporary file), so the incomplete checkpoint is never resumed."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc, tmpdir  # noqa: E402

TRAIN = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--batch", "2", "--threads", "1",
         "--steps", "1"]
MINIMAL = ["--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq", "4", "--batch", "2",
           "--threads", "1", "--steps", "1"]


def main():
    args = parse_args()
    tmp = tmpdir()
    chk = Checker("completion marker errors")
    cases = [("fsdp-train", TRAIN, []), ("fsdp-train", TRAIN, ["--ckpt-type", "full"]), ("fsdp-minimal", MINIMAL, [])]
    for i, (tool, model, extra) in enumerate(cases):
        ck = f"{tmp}/ck{i}"
        r = proc([os.path.join(args.bin, tool)] + model + extra + ["--ckpt-dir", ck], expect_ok=False,
                 env={"FSDP_TEST_MARKER_FULL": "1"})
        errs = [line for line in r.stderr.splitlines() if "DONE" in line]
        step = f"{ck}/step_00000001"
        left = sorted(os.listdir(step)) if os.path.isdir(step) else []
        label = f"{tool} {' '.join(extra)}".strip()
        chk.true(f"{label}: a failed DONE write names the system error (No space left on device)",
                 r.returncode != 0 and len(errs) == 1 and "No space left on device" in errs[0], r.stderr)
        chk.true(f"{label}: no DONE, no temporary marker left", not [f for f in left if f.startswith("DONE")], str(left))
    chk.report()


if __name__ == "__main__":
    main()
