"""Activation checkpointing (--activation-checkpointing): results identical to running without it
(the recomputed forward uses the same dropout masks), on 1 and 2 ranks, for the seed model and GPT-2,
and activation memory at least 3x smaller on a 6-layer model."""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, st_load, tmpdir  # noqa: E402


def run(n, cmd):
    """stdout of cmd on n ranks; a failed run ends the test."""
    return mpirun(n, cmd).stdout


def main():
    args = parse_args()
    tmp = tmpdir()
    chk = Checker("activation checkpointing")
    minimal = [os.path.join(args.bin, "fsdp-minimal"), "--layers", "6", "--d-model", "64", "--heads", "4", "--ffn",
               "256", "--seq", "16", "--global-batch", "8", "--dropout", "0.1", "--steps", "3", "--summary", "--threads", "1"]
    for n in (1, 2):
        plain = run(n, minimal + ["--save", f"{tmp}/a{n}.safetensors"])
        ac = run(n, minimal + ["--activation-checkpointing", "--save", f"{tmp}/b{n}.safetensors"])
        chk.close(f"seed model, {n} rank(s), dropout 0.1: identical losses", parse_losses(ac), parse_losses(plain), 0, 0)
        a, b = st_load(f"{tmp}/a{n}.safetensors"), st_load(f"{tmp}/b{n}.safetensors")
        worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
        chk.close(f"seed model, {n} rank(s): identical parameters", [worst], [0.0], 0, 0)
        pa = int(re.search(r"activations_peak (\d+)", plain).group(1))
        pb = int(re.search(r"activations_peak (\d+)", ac).group(1))
        chk.close(f"seed model, {n} rank(s): activation memory {pa} -> {pb} bytes, at least 3x smaller",
                  [int(pa >= 3 * pb)], [1], 0, 0)
    gpt = [os.path.join(args.bin, "fsdp-train"), "--layers", "3", "--d-model", "64", "--heads", "4", "--seq", "32",
           "--batch", "4", "--steps", "3", "--dropout", "0.1", "--threads", "1"]
    chk.close("GPT-2, 2 ranks, dropout 0.1: identical losses",
              parse_losses(run(2, gpt + ["--activation-checkpointing"])), parse_losses(run(2, gpt)), 0, 0)
    chk.report()


if __name__ == "__main__":
    main()
