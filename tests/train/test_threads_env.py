"""Threads per rank from the environment (src/cli/cli_threads.c): OMP_NUM_THREADS out of --threads's
range [0, 1024] (2000), or not an integer, is a one-line error naming OMP_NUM_THREADS, exit 2, for
both tools; an explicit --threads makes it irrelevant; a value in range is used. The oversubscription
note (one core, two threads) is one whole sentence: its advice to set OMP_WAIT_POLICY ends in a word,
not cut after "OpenMP's"."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import SANITIZER_EXIT, Checker, parse_args, tmpdir  # noqa: E402

ARGS = {"fsdp-train": ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--batch", "2", "--steps", "1"],
        "fsdp-minimal": ["--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq", "4", "--batch", "2",
                         "--steps", "1"]}


def run(cmd, omp=None, one_core=False):
    """cmd with OMP_NUM_THREADS=omp (unset: None) and no OMP_WAIT_POLICY, on one core when one_core."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    cpu = min(os.sched_getaffinity(0))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60,
                       preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if one_core else None)
    if r.returncode == SANITIZER_EXIT:
        print(f"FAIL: sanitizer report: {' '.join(cmd)}\n{r.stderr}", file=sys.stderr)
        sys.exit(1)
    return r


def main():
    args = parse_args()
    tmpdir()
    chk = Checker("threads from the environment")
    for tool, flags in ARGS.items():
        binary = os.path.join(args.bin, tool)
        for bad in ("2000", "abc", "-3"):
            r = run([binary] + flags, omp=bad)
            ours = [line for line in r.stderr.splitlines() if line.startswith(tool)]
            chk.true(f"{tool}: OMP_NUM_THREADS={bad}: exit 2, one line naming it and the range",
                     r.returncode == 2 and len(ours) == 1 and f"OMP_NUM_THREADS={bad}" in ours[0]
                     and "[0, 1024]" in ours[0] and not r.stdout, f"rc {r.returncode}: {r.stderr}")
        r = run([binary] + flags + ["--threads", "1"], omp="2000")
        chk.true(f"{tool}: --threads 1 overrides OMP_NUM_THREADS=2000", r.returncode == 0, r.stderr)
        r = run([binary] + flags + ["--summary"] if tool == "fsdp-minimal" else [binary] + flags, omp="1")
        chk.true(f"{tool}: OMP_NUM_THREADS=1 is used", r.returncode == 0 and "threads per rank 1" in r.stdout
                 and "from OMP_NUM_THREADS" in r.stdout, r.stderr + r.stdout[-300:])
    train = os.path.join(args.bin, "fsdp-train")
    r = run([train] + ARGS["fsdp-train"] + ["--threads", "2"], one_core=True)
    note = [line for line in r.stderr.splitlines() if "note: oversubscribed" in line]
    want = "set OMP_WAIT_POLICY=passive to make them yield too"
    chk.true("2 threads on 1 core: the oversubscription note is whole, ending in its advice",
             r.returncode == 0 and len(note) == 1 and note[0].endswith(want) and "1 core)" in note[0], r.stderr)
    chk.report()


if __name__ == "__main__":
    main()
