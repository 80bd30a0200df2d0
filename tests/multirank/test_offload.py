"""--offload-dir (master shards, gradient shards and AdamW state in memory-mapped files) gives results
identical to keeping them in memory, on 1 and 2 ranks, through a checkpoint save and resume too;
--cpu-offload (a no-op on the CPU backend) changes nothing; a bad directory is a one-line error."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, st_load, tmpdir  # noqa: E402


def run(n, cmd, expect_ok=True):
    """cmd on n ranks; a failed run ends the test unless expect_ok is False."""
    return mpirun(n, cmd, expect_ok=expect_ok)


def main():
    args = parse_args()
    tmp = tmpdir()
    os.makedirs(f"{tmp}/off")
    chk = Checker("offload")
    gpt = [os.path.join(args.bin, "fsdp-train"), "--layers", "3", "--d-model", "64", "--heads", "4", "--seq", "32",
           "--batch", "4", "--threads", "1"]
    for n in (1, 2):
        a = run(n, gpt + ["--steps", "4", "--save", f"{tmp}/a{n}.safetensors"])
        b = run(n, gpt + ["--steps", "4", "--offload-dir", f"{tmp}/off", "--save", f"{tmp}/b{n}.safetensors"])
        c = run(n, gpt + ["--steps", "4", "--cpu-offload", "--save", f"{tmp}/c{n}.safetensors"])
        chk.close(f"{n} rank(s): 4 steps", [len(parse_losses(a.stdout))], [4], 0, 0)
        chk.close(f"{n} rank(s): --offload-dir gives identical losses", parse_losses(b.stdout), parse_losses(a.stdout), 0, 0)
        chk.close(f"{n} rank(s): --cpu-offload gives identical losses", parse_losses(c.stdout), parse_losses(a.stdout), 0, 0)
        pa, pb = st_load(f"{tmp}/a{n}.safetensors"), st_load(f"{tmp}/b{n}.safetensors")
        chk.close(f"{n} rank(s): --offload-dir: identical parameters",
                  [max(float(np.max(np.abs(pa[k] - pb[k]))) for k in pa)], [0.0], 0, 0)
    chk.close("--offload-dir leaves no files behind", [len(os.listdir(f"{tmp}/off"))], [0], 0, 0)
    # save with offload, resume without (and the reverse): the same losses as an uninterrupted run
    whole = run(2, gpt + ["--steps", "6"])
    run(2, gpt + ["--steps", "3", "--save-every", "3", "--ckpt-dir", f"{tmp}/ck", "--offload-dir", f"{tmp}/off"])
    resumed = run(2, gpt + ["--steps", "6", "--resume", "auto", "--ckpt-dir", f"{tmp}/ck"])
    chk.close("checkpoint saved with --offload-dir resumes exactly", parse_losses(resumed.stdout),
              parse_losses(whole.stdout)[3:], 0, 0)
    bad = run(1, gpt + ["--steps", "1", "--offload-dir", f"{tmp}/does/not/exist"], expect_ok=False)
    lines = [line for line in bad.stderr.splitlines() if line.startswith("fsdp-train:")]
    chk.close("a missing --offload-dir: one-line error naming it",
              [int(bad.returncode != 0 and len(lines) == 1 and "offload-dir" in lines[0])], [1], 0, 0)
    chk.report()


if __name__ == "__main__":
    main()
