"""bench/ab_step.sh (two builds' step times, alternating rounds) reports only measurements:
- the built fsdp-train against itself, 2 rounds of a tiny model: exit 0, a line per round, and every ratio
  and the median finite and above zero (near 1: the same build);
- a run that fails, one that prints no mean (--steps 1), a mean of nan, of 0, and a build without
  fsdp-train each end the script with a non-zero exit and a message naming the cause, never a ratio."""
import os
import re
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args  # noqa: E402

SCRIPT = os.path.join(ROOT, "bench", "ab_step.sh")
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "256", "--seq", "16", "--batch", "2"]


def run(a, b, flags, rounds=2):
    env = dict(os.environ, ROUNDS=str(rounds))
    return subprocess.run(["bash", SCRIPT, a, b] + flags, capture_output=True, text=True, env=env, timeout=600)


def fake_build(root, name, body):
    """A build directory whose bin/fsdp-train is the shell script body."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "bin"))
    path = os.path.join(d, "bin", "fsdp-train")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return d


def main():
    args = parse_args()
    ck = Checker("ab_step")
    build = os.path.dirname(os.path.abspath(args.bin))

    r = run(build, build, TINY + ["--steps", "3"])
    rounds = re.findall(r"round +\d+: A +([0-9.]+) ms +B +([0-9.]+) ms +B/A ([0-9.]+)", r.stdout)
    med = re.search(r"median ([0-9.]+), lowest ([0-9.]+), highest ([0-9.]+)", r.stdout)
    ck.true("A/A exits 0", r.returncode == 0, r.stdout[-400:] + r.stderr[-400:])
    ck.true("A/A prints a line per round", len(rounds) == 2, r.stdout[-400:])
    ck.true("A/A's summary line", med is not None, r.stdout[-400:])
    if rounds and med:
        values = [float(v) for row in rounds for v in row] + [float(v) for v in med.groups()]
        ck.true("every time and ratio above zero", all(v > 0 for v in values), str(values))
        ck.true("the same build's median ratio near 1", 0.2 < float(med.group(1)) < 5.0, med.group(0))

    with tempfile.TemporaryDirectory() as tmp:
        cases = [
            ("a run that fails", fake_build(tmp, "fails", "echo 'fsdp-train: broken' >&2; exit 1"), "failed"),
            ("a mean of nan", fake_build(tmp, "nan", "echo 'mean (steps 1..2): nan ms/step, 0 tok/s'"), "no mean"),
            ("a mean of 0", fake_build(tmp, "zero", "echo 'mean (steps 1..2): 0 ms/step, 0 tok/s'"), "no mean"),
            ("no mean line", fake_build(tmp, "silent", "echo 'step 0 loss 1.0'"), "no mean"),
        ]
        for label, bad, why in cases:
            for a, b in ((build, bad), (bad, build)):  # either side
                r = run(a, b, TINY + ["--steps", "3"], rounds=1)
                ck.true(f"{label} ({'B' if b == bad else 'A'}) exits non-zero", r.returncode != 0,
                        r.stdout[-300:])
                ck.true(f"{label} ({'B' if b == bad else 'A'}) says why", why in r.stderr, r.stderr[-300:])
                ck.true(f"{label} ({'B' if b == bad else 'A'}) reports no ratio", "median" not in r.stdout,
                        r.stdout[-300:])
        r = run(build, build, TINY + ["--steps", "1"], rounds=1)
        ck.true("--steps 1 (no mean) exits non-zero", r.returncode != 0 and "no mean" in r.stderr,
                r.stdout[-300:] + r.stderr[-300:])
        r = run(build, os.path.join(tmp, "missing"), TINY)
        ck.true("a build without fsdp-train exits 2", r.returncode == 2 and "not built" in r.stderr, r.stderr[-300:])
    ck.report()


if __name__ == "__main__":
    main()
