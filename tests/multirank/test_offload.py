"""--offload-dir (master shards, gradient shards and AdamW state in memory-mapped files) gives results
identical to keeping them in memory, on 1 and 2 ranks, through a checkpoint save and resume too;
--cpu-offload (a no-op on the CPU backend) changes nothing; a bad directory is a one-line error.
The state really lives in the files: the accounting's `offloaded` figure is 16 bytes per shard element
(fp32 master + gradient + AdamW m and v) with the flag and 0 without, and the OS sees that many bytes
move from anonymous memory to file-backed pages (shared memory where the directory is a tmpfs)."""
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc, st_load, tmpdir  # noqa: E402


def run(n, cmd, expect_ok=True):
    """cmd on n ranks; a failed run ends the test unless expect_ok is False."""
    return mpirun(n, cmd, expect_ok=expect_ok)


def numbers(text, prefix):
    """The `key value` pairs of the first line starting with prefix (fsdp-train --summary's reports)."""
    line = next((x for x in text.splitlines() if x.startswith(prefix)), "")
    return {k: float(v) for k, v in re.findall(r"([a-z_]+) ([0-9.]+)", line)}


def state_bytes(text):
    """16 bytes per shard element of rank 0, from --summary's `total: N parameters, M per rank` line."""
    m = re.search(r"^total: \d+ parameters, (\d+) per rank", text, re.M)
    return 16 * int(m.group(1)) if m else -1


def main():
    args = parse_args()
    tmp = tmpdir()
    os.makedirs(f"{tmp}/off")
    chk = Checker("offload")
    gpt = [os.path.join(args.bin, "fsdp-train"), "--layers", "3", "--d-model", "64", "--heads", "4", "--seq", "32",
           "--batch", "4", "--threads", "1"]
    for n in (1, 2):
        a = run(n, gpt + ["--steps", "4", "--summary", "--save", f"{tmp}/a{n}.safetensors"])
        b = run(n, gpt + ["--steps", "4", "--summary", "--offload-dir", f"{tmp}/off", "--save",
                          f"{tmp}/b{n}.safetensors"])
        expect = state_bytes(b.stdout)
        chk.true(f"{n} rank(s): the summary gives the per-rank state size", expect > 0, b.stdout[-2000:])
        chk.close(f"{n} rank(s): --offload-dir: offloaded bytes = 16 x shard elements",
                  [numbers(b.stdout, "memory rank 0:").get("offloaded", -1)], [expect], 0, 0)
        chk.close(f"{n} rank(s): without --offload-dir: nothing offloaded",
                  [numbers(a.stdout, "memory rank 0:").get("offloaded", -1)], [0], 0, 0)
        c = run(n, gpt + ["--steps", "4", "--cpu-offload", "--save", f"{tmp}/c{n}.safetensors"])
        chk.close(f"{n} rank(s): 4 steps", [len(parse_losses(a.stdout))], [4], 0, 0)
        chk.close(f"{n} rank(s): --offload-dir gives identical losses", parse_losses(b.stdout), parse_losses(a.stdout), 0, 0)
        chk.close(f"{n} rank(s): --cpu-offload gives identical losses", parse_losses(c.stdout), parse_losses(a.stdout), 0, 0)
        pa, pb = st_load(f"{tmp}/a{n}.safetensors"), st_load(f"{tmp}/b{n}.safetensors")
        chk.close(f"{n} rank(s): --offload-dir: identical parameters",
                  [max(float(np.max(np.abs(pa[k] - pb[k]))) for k in pa)], [0.0], 0, 0)
    chk.close("--offload-dir leaves no files behind", [len(os.listdir(f"{tmp}/off"))], [0], 0, 0)
    # What the OS sees in a plain process (no launcher, whose own memory varies by ~0.6 MB; no
    # shared-memory windows), with a model of 16 MB of state: that many bytes leave anonymous memory and
    # appear as pages of the mapped files (RSS, not PSS: PSS of the libraries' pages depends on what else
    # runs).
    big = [os.path.join(args.bin, "fsdp-train"), "--layers", "3", "--d-model", "160", "--heads", "4", "--seq", "32",
           "--batch", "4", "--threads", "1", "--steps", "2", "--summary"]
    a = proc(big)
    b = proc(big + ["--offload-dir", f"{tmp}/off"])
    expect = state_bytes(b.stdout)
    fs = subprocess.run(["stat", "-f", "-c", "%T", f"{tmp}/off"], capture_output=True, text=True).stdout.strip()
    kind = "shmem" if fs == "tmpfs" else "file"  # a tmpfs file's pages are counted as shared memory
    osa, osb = numbers(a.stdout, "os memory rank 0:"), numbers(b.stdout, "os memory rank 0:")
    chk.true("the OS memory report is there", "anon" in osa and "anon" in osb and expect > 15_000_000,
             f"{osa} {osb} {expect}")
    chk.close(f"--offload-dir: anonymous memory falls by the state's {expect} bytes",
              [osa.get("anon", 0) - osb.get("anon", 0)], [expect], 0.10, 0)
    chk.close(f"--offload-dir: {kind}-backed memory ({fs}) rises by the state's bytes",
              [osb.get(kind, 0) - osa.get(kind, 0)], [expect], 0.10, 0)
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
