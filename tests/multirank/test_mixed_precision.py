"""bf16 mixed precision (--mixed-precision bf16, --reduce-dtype):

1. bf16 training follows fp32: the GPT-2 loss curve over 40 AdamW steps stays within 2% of the fp32
   curve at every step, and both fall by the same amount to within 2% of the fp32 drop. Why 2%: a bf16
   operand carries a relative rounding error of at most 2^-9 = 0.2%; a matrix product sums K such
   errors with random signs, so its outputs move by about 0.2% / sqrt(K) .. 0.2%, and through the
   layers and 40 optimizer steps the observed loss difference stays near 0.1-0.3% (printed below).
   2% leaves a margin of about 10x, yet a path that lost a term, used the wrong operand or dropped
   the rounding on one side of a product (a 5-100% loss change) fails.
2. N ranks match 1 rank in bf16: with reduce_dtype fp32 the only difference from one process is the
   fp32 summation order of the gradient (as in fp32 training), plus the occasional bf16 operand that
   rounds the other way, so losses agree to 1e-3 relative for FULL_SHARD, SHARD_GRAD_OP, DDP and
   HYBRID_SHARD; with reduce_dtype bf16 (each rank's gradient rounded to bf16 once) to 1e-2.
3. The shared-memory and the plain-MPI bf16 reductions sum the same bf16 payloads in the same order:
   their losses are identical.
4. The all-gather moves half the bytes: bytes sent per step under bf16 are 0.5x those of fp32 (params
   and gradients in bf16), and with --reduce-dtype fp32 the share fsdp-plan gives (only the gathers halve).
5. The bf16 products really run in bf16: the step-0 loss differs from fp32's (a bf16 flag that is
   parsed and ignored gives identical losses).
6. bf16 composes: activation checkpointing and --offload-dir give the same losses as without them; a
   checkpoint saved under bf16 (fp32 master state) resumes under bf16 exactly as an uninterrupted run,
   and resumes under fp32.
7. The same flags on the seed model (fsdp-minimal): bf16 follows fp32 within 2%, 2 ranks match 1 rank
   (1e-3 with fp32 reductions, FULL_SHARD and DDP).
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc  # noqa: E402
MODEL = ["--layers", "3", "--d-model", "128", "--heads", "4", "--seq", "64", "--vocab", "256", "--lr", "1e-3",
         "--warmup", "5", "--threads", "1"]


def run(n, extra, steps, env=None):
    r = mpirun(n, [os.path.join(ARGS.bin, "fsdp-train")] + MODEL + ["--batch", str(8 // n), "--steps", str(steps)] +
               extra, env=env)
    losses = parse_losses(r.stdout)
    sent = re.search(r"bytes_sent_per_step ([0-9.]+)", r.stdout)
    return losses, float(sent.group(1)) if sent else None, r.stdout


def main():
    chk = Checker("mixed precision")
    steps = 40
    fp32, _, _ = run(1, [], steps)
    bf16, _, _ = run(1, ["--mixed-precision", "bf16"], steps)
    chk.close("bf16 runs", [len(bf16)], [steps], 0, 0)
    rel = [abs(a - b) / a for a, b in zip(fp32, bf16)]
    print(f"fp32 loss {fp32[0]:.4f} -> {fp32[-1]:.4f}, bf16 {bf16[0]:.4f} -> {bf16[-1]:.4f}, "
          f"largest step difference {100 * max(rel):.3f}%")
    chk.close("bf16 loss curve within 2% of fp32 at every step", bf16, fp32, 0.02, 0)
    chk.close("bf16 loss falls as much as fp32's (2%)", [bf16[0] - bf16[-1]], [fp32[0] - fp32[-1]], 0.02, 0)
    chk.close("training learns (loss falls by > 20%)", [int(fp32[-1] < 0.8 * fp32[0])], [1], 0, 0)
    chk.close("bf16 products really are bf16 (step-0 loss differs from fp32)", [int(bf16[0] != fp32[0])], [1], 0, 0)

    short = 6
    one_fp32reduce, _, _ = run(1, ["--mixed-precision", "bf16", "--reduce-dtype", "fp32"], short)
    one_bf16reduce = bf16[:short]
    for n, strategy, extra in ((2, "full_shard", []), (4, "full_shard", []), (2, "shard_grad_op", []), (2, "ddp", []),
                               (4, "hybrid_shard", ["--shard-group-size", "2"])):
        flags = ["--strategy", strategy, "--mixed-precision", "bf16"] + extra
        got, _, _ = run(n, flags + ["--reduce-dtype", "fp32"], short)
        chk.close(f"{n} ranks {strategy}, reduce fp32: losses match 1 rank (1e-3)", got, one_fp32reduce, 1e-3, 0)
        got, _, _ = run(n, flags, short)
        chk.close(f"{n} ranks {strategy}, reduce bf16: losses match 1 rank (1e-2)", got, one_bf16reduce, 1e-2, 0)

    for strategy in ("full_shard", "ddp"):
        flags = ["--strategy", strategy, "--mixed-precision", "bf16"]
        shm, _, _ = run(2, flags, 3)
        mpi, _, _ = run(2, flags, 3, {"FSDP_COMM_NO_SHM": "1"})
        chk.close(f"{strategy}: bf16 reductions over MPI and over shared memory give identical losses",
                  [int(shm == mpi and len(shm) == 3)], [1], 0, 0)

    _, sent32, _ = run(2, ["--summary"], 2)
    _, sent16, _ = run(2, ["--summary", "--mixed-precision", "bf16"], 2)
    _, sent_mixed, _ = run(2, ["--summary", "--mixed-precision", "bf16", "--reduce-dtype", "fp32"], 2)
    chk.close("bytes sent per step: bf16 / fp32 = 0.5", [sent16 / sent32], [0.5], 0.02, 0)
    # bf16 gathers, fp32 reductions: in between; the split of gathers and reductions is fsdp-plan's
    def planned(extra):
        p = proc([os.path.join(ARGS.bin, "fsdp-plan"), "train", "--world-size", "2", "--batch", "4"] + MODEL + extra)
        return float(re.search(r"bytes_sent_per_step ([0-9.]+)", p.stdout).group(1))
    expect = planned(["--mixed-precision", "bf16", "--reduce-dtype", "fp32"]) / planned([])
    chk.close(f"bytes sent per step: bf16 params, fp32 reduce / fp32 = {expect:.3f} (fsdp-plan's split)",
              [sent_mixed / sent32], [expect], 0.02, 0)
    chk.close("... which lies strictly between 0.5 and 1", [int(0.55 < sent_mixed / sent32 < 0.95)], [1], 0, 0)
    base, _, _ = run(2, ["--mixed-precision", "bf16"], 3)
    ac, _, _ = run(2, ["--mixed-precision", "bf16", "--activation-checkpointing"], 3)
    chk.close("bf16 runs 3 steps", [len(base)], [3], 0, 0)
    chk.close("bf16 with activation checkpointing: identical losses", ac, base, 0, 0)
    with tempfile.TemporaryDirectory() as d:
        off, _, _ = run(2, ["--mixed-precision", "bf16", "--offload-dir", d], 3)
    chk.close("bf16 with --offload-dir: identical losses", off, base, 0, 0)

    with tempfile.TemporaryDirectory() as d:
        full, _, _ = run(2, ["--mixed-precision", "bf16"], 4)
        run(2, ["--mixed-precision", "bf16", "--ckpt-dir", d, "--save-every", "2"], 2)
        resumed, _, _ = run(2, ["--mixed-precision", "bf16", "--ckpt-dir", d, "--resume", "auto"], 4)
        chk.close("bf16 checkpoint resumes exactly (steps 2-3)", resumed, full[2:], 0, 0)
        as_fp32, _, _ = run(2, ["--resume", os.path.join(d, "step_00000002")], 4)  # auto: the resumed run's step 4
        chk.close("bf16 checkpoint resumes under fp32 (losses within 2%)", as_fp32, full[2:], 0.02, 0)

    minimal = ["--layers", "2", "--d-model", "64", "--heads", "4", "--ffn", "256", "--seq", "16", "--global-batch", "8",
               "--dropout", "0", "--steps", "8", "--lr", "1e-3", "--threads", "1"]

    def seed_run(n, extra):
        return parse_losses(mpirun(n, [os.path.join(ARGS.bin, "fsdp-minimal")] + minimal + extra).stdout)
    s32, s16 = seed_run(1, []), seed_run(1, ["--mixed-precision", "bf16"])
    chk.close("seed model: bf16 runs", [len(s16)], [8], 0, 0)
    chk.close("seed model: bf16 loss within 2% of fp32 at every step", s16, s32, 0.02, 0)
    chk.close("seed model: bf16 products really are bf16", [int(s16[0] != s32[0])], [1], 0, 0)
    one = seed_run(1, ["--mixed-precision", "bf16", "--reduce-dtype", "fp32"])
    for strategy in ("full_shard", "ddp"):
        two = seed_run(2, ["--mixed-precision", "bf16", "--reduce-dtype", "fp32", "--strategy", strategy])
        chk.close(f"seed model: 2 ranks {strategy} bf16 match 1 rank (1e-3)", two, one, 1e-3, 0)
    chk.report()


if __name__ == "__main__":
    ARGS = parse_args()
    main()
