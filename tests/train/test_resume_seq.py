"""--resume takes --seq from the checkpoint's recorded setting (setting.seq) when --seq is not given on
the command line or in --config (src/cli/model_config.c): fsdp-train resumed from a --seq 16
checkpoint without --seq (and without any shape flag) runs, at seq 16, and its losses equal the
uninterrupted run's bitwise; an explicit --seq that fits the position table still wins; one that does
not is refused naming --max-seq; a --seq in --config counts as given. fsdp-minimal (no position
table) likewise resumes at the recorded seq, bitwise like its uninterrupted run."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, parse_losses, proc, tmpdir  # noqa: E402

SHAPE = ["--layers", "1", "--d-model", "16", "--heads", "2"]
RUN = ["--batch", "2", "--threads", "1", "--lr-schedule", "constant", "--warmup", "0"]
MINIMAL = ["--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32", "--batch", "2", "--threads", "1"]


def main():
    args = parse_args()
    train, minimal = os.path.join(args.bin, "fsdp-train"), os.path.join(args.bin, "fsdp-minimal")
    tmp = tmpdir()
    chk = Checker("--resume takes --seq")
    ref = parse_losses(proc([train] + SHAPE + RUN + ["--seq", "16", "--steps", "4"]).stdout)
    proc([train] + SHAPE + RUN + ["--seq", "16", "--steps", "2", "--ckpt-dir", f"{tmp}/ck"])
    r = proc([train] + RUN + ["--steps", "4", "--resume", f"{tmp}/ck"], expect_ok=False)
    chk.true("fsdp-train --resume without --seq: runs at the checkpoint's seq 16",
             r.returncode == 0 and "seq 16:" in r.stdout, r.stderr)
    chk.close("fsdp-train --resume without --seq: losses == the uninterrupted run's", parse_losses(r.stdout), ref[2:],
              0, 0)
    r = proc([train] + RUN + ["--steps", "3", "--seq", "8", "--resume", f"{tmp}/ck"], expect_ok=False)
    chk.true("an explicit --seq 8 (fits --max-seq 16) wins", r.returncode == 0 and "seq 8:" in r.stdout, r.stderr)
    r = proc([train] + RUN + ["--steps", "3", "--seq", "32", "--resume", f"{tmp}/ck"], expect_ok=False)
    chk.true("an explicit --seq 32 beyond the checkpoint's position table: refused naming --max-seq",
             r.returncode == 2 and "--max-seq 16" in r.stderr and "--seq 32" in r.stderr, r.stderr)
    cfg = f"{tmp}/seq.cfg"
    open(cfg, "w").write("seq 8\n")
    r = proc([train] + RUN + ["--steps", "3", "--config", cfg, "--resume", f"{tmp}/ck"], expect_ok=False)
    chk.true("--seq in --config counts as given", r.returncode == 0 and "seq 8:" in r.stdout, r.stderr)

    mref = parse_losses(proc([minimal] + MINIMAL + ["--seq", "4", "--steps", "4"]).stdout)
    proc([minimal] + MINIMAL + ["--seq", "4", "--steps", "2", "--ckpt-dir", f"{tmp}/mk"])
    r = proc([minimal] + MINIMAL + ["--steps", "4", "--resume", f"{tmp}/mk"], expect_ok=False)
    chk.close("fsdp-minimal --resume without --seq: losses == the uninterrupted --seq 4 run's",
              parse_losses(r.stdout) if r.returncode == 0 else [], mref[2:], 0, 0)
    chk.report()


if __name__ == "__main__":
    main()
