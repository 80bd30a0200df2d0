"""fsdp-run, the launcher:
- a 2-rank fsdp-train run through `fsdp-run -n 2 fsdp-train ...` (the bare name found next to fsdp-run)
  prints the same losses, bitwise, as the same run under plain mpirun;
- 3 ranks on fewer cores start without any Open MPI setting in the environment (fsdp-run adds
  --oversubscribe, and --allow-run-as-root when running as root);
- a bad flag to the tool: its one-line error printed exactly once (not once per rank), no Open MPI box
  (no line of dashes, no "Primary job terminated normally" / "mpirun detected"), exit 2 (the rank's);
- a rank killed by a signal: exit 128 + signal; a tool that does not exist: exit 127 and one line naming
  it; fsdp-run's own bad option: exit 2; --help: exit 0 with the usage;
- --tag-output prefixes the step lines with the ranks' tags, and without it they have none."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc  # noqa: E402

MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--threads", "1",
         "--steps", "3", "--warmup", "0", "--lr", "3e-3"]
# no Open MPI switches from the environment: what fsdp-run must supply itself
OMPI_KEYS = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_rmaps_base_oversubscribe")


def fsdp_run(bin_dir, args, expect_ok=True):
    saved = {k: os.environ.pop(k) for k in OMPI_KEYS if k in os.environ}
    try:
        return proc([os.path.join(bin_dir, "fsdp-run")] + args, expect_ok=expect_ok, env={"OMP_NUM_THREADS": "1"})
    finally:
        os.environ.update(saved)


def main():
    args = parse_args()
    chk = Checker("fsdp-run")
    train = os.path.join(args.bin, "fsdp-train")

    direct = parse_losses(mpirun(2, [train] + MODEL).stdout)
    r = fsdp_run(args.bin, ["-n", "2", "fsdp-train"] + MODEL, expect_ok=False)
    chk.true("-n 2 fsdp-train (bare name): exit 0", r.returncode == 0, f"rc {r.returncode}: {r.stderr[-800:]}")
    chk.close("-n 2 fsdp-train: the losses of the plain mpirun run (bitwise)", parse_losses(r.stdout), direct, 0, 0)
    chk.true("-n 2: the banner says 2 ranks", "2 rank(s)" in r.stdout, r.stdout[:600])

    r = fsdp_run(args.bin, ["-n", "3", "--", "fsdp-train"] + MODEL + ["--batch", "1"], expect_ok=False)
    chk.true(f"-n 3 on {os.cpu_count()} cores: runs without Open MPI settings in the environment",
             r.returncode == 0 and len(parse_losses(r.stdout)) == 3, f"rc {r.returncode}: {r.stderr[-800:]}")

    r = fsdp_run(args.bin, ["-n", "2", "fsdp-train", "--no-such-flag"], expect_ok=False)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    chk.true("a bad flag: exit 2, the tool's one-line error exactly once, nothing else on stderr",
             r.returncode == 2 and lines == ["fsdp-train: unknown flag --no-such-flag (see --help)"],
             f"rc {r.returncode}: {r.stderr[-1500:]}")
    chk.true("a bad flag: no Open MPI box (dashes, 'Primary job', 'mpirun detected')",
             "-----" not in r.stderr and "Primary job" not in r.stderr and "mpirun detected" not in r.stderr,
             r.stderr[-1500:])
    # the same under plain mpirun prints it per rank and inside boxes: the filtering is what is tested
    m = mpirun(2, [train, "--no-such-flag"], expect_ok=False)
    chk.true("(plain mpirun: the error twice and a box, so the check above tests fsdp-run)",
             m.stderr.count("unknown flag") == 2 and "-----" in m.stderr, m.stderr[-800:])

    r = fsdp_run(args.bin, ["-n", "2", "sh", "-c", "exit 5"], expect_ok=False)
    chk.true("a rank exiting with 5: exit 5", r.returncode == 5, f"rc {r.returncode}: {r.stderr[-600:]}")
    r = fsdp_run(args.bin, ["-n", "2", "sh", "-c", "kill -9 $$"], expect_ok=False)
    chk.true("a rank killed by SIGKILL: exit 137, no box", r.returncode == 137 and "-----" not in r.stderr,
             f"rc {r.returncode}: {r.stderr[-600:]}")

    r = fsdp_run(args.bin, ["-n", "2", "fsdp-no-such-tool", "--steps", "1"], expect_ok=False)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    chk.true("a missing tool: exit 127 and one line naming it",
             r.returncode == 127 and len(lines) == 1 and "fsdp-no-such-tool" in lines[0] and "not found" in lines[0],
             f"rc {r.returncode}: {r.stderr}")
    r = fsdp_run(args.bin, ["-n", "two", "fsdp-train"], expect_ok=False)
    chk.true("fsdp-run's own bad option: exit 2, one line naming -n",
             r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "-n" in r.stderr, f"rc {r.returncode}: {r.stderr}")
    r = fsdp_run(args.bin, ["--help"], expect_ok=False)
    chk.true("--help: exit 0, the usage", r.returncode == 0 and r.stdout.startswith("usage: fsdp-run"), r.stdout[:300])

    r = fsdp_run(args.bin, ["-n", "2", "--tag-output", "fsdp-train"] + MODEL, expect_ok=False)
    tagged = [x for x in r.stdout.splitlines() if "step " in x]
    chk.true("--tag-output: the step lines carry rank 0's tag [1,0]<stdout>:",
             r.returncode == 0 and len(tagged) == 3 and all(x.startswith("[1,0]<stdout>:step ") for x in tagged),
             r.stdout[-800:])
    r = fsdp_run(args.bin, ["-n", "2", "fsdp-train"] + MODEL, expect_ok=False)
    chk.true("without --tag-output: no tags", not any(x.startswith("[1,") for x in r.stdout.splitlines()),
             r.stdout[-400:])
    chk.report()


if __name__ == "__main__":
    main()
