"""Flags that used to do nothing, or something else than they say, without a word (fsdp-train and
fsdp-minimal):
- --ckpt-dir always saves after the last step: without --save-every the directory holds exactly the final
  step (a real checkpoint: resuming it continues bitwise), and --steps 5 --save-every 2 keeps 2, 4 and 5.
- --save-every, --keep-last and --ckpt-type without --ckpt-dir, --val-data without --eval-every and
  --shard-group-size with a strategy other than hybrid_shard are one-line errors (once under mpirun)
  before anything runs; with hybrid_shard the group size is accepted.
- --steps is the total: --steps below a checkpoint's step count is a one-line error; equal to it, one
  note line and nothing trained (the run still writes --save). --help says "in total".
- --cpu-offload on the CPU backend: one note line (once under mpirun), the same losses as without.
- --eval-every without --val-data validates on the last 10% of --data, which training never sees: the
  losses and val losses equal, bitwise, a run on the first 90% with --val-data the last 10% (on data that
  wraps within the run, so a split that still trained on the tail, or validated on training batches,
  differs); data too short to split is a one-line error naming --val-data."""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc, tmpdir  # noqa: E402

TRAIN_MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--threads", "1",
               "--warmup", "0", "--lr-schedule", "constant", "--lr", "3e-3"]
MINIMAL_MODEL = ["--dropout", "0", "--threads", "1", "--layers", "2", "--d-model", "32", "--heads", "4", "--ffn", "64",
                 "--global-batch", "4"]


def checkpoints(d):
    return sorted(x for x in os.listdir(d) if x.startswith("step_")) if os.path.isdir(d) else []


def tool_lines(stderr, tool):
    return [line for line in stderr.splitlines() if line.startswith(tool + ":")]


def refused(chk, label, r, tool, needles):
    """Exit 2, exactly one line from the tool naming every needle, and no training step printed."""
    lines = tool_lines(r.stderr, tool)
    chk.true(f"{label}: exit 2, one line naming {', '.join(needles)}, nothing trained",
             r.returncode == 2 and len(lines) == 1 and all(n in lines[0] for n in needles)
             and not any(x.startswith("step ") for x in r.stdout.splitlines()), f"rc {r.returncode}: {r.stderr[-800:]}")


def check_checkpoints(chk, tool, cmd, tmp):
    ck = f"{tmp}/{tool}_end"
    whole = parse_losses(proc(cmd + ["--steps", "5"]).stdout)
    proc(cmd + ["--steps", "3", "--ckpt-dir", ck])
    chk.true(f"{tool}: --ckpt-dir without --save-every saves the last step (step 3) only",
             checkpoints(ck) == ["step_00000003"] and os.path.exists(f"{ck}/step_00000003/DONE"), str(checkpoints(ck)))
    resumed = parse_losses(proc(cmd + ["--steps", "5", "--resume", "auto", "--ckpt-dir", ck]).stdout)
    chk.close(f"{tool}: ... a real checkpoint: resuming it to 5 steps continues bitwise", resumed, whole[3:], 0, 0)
    chk.true(f"{tool}: ... and the resumed run saves its own last step too",
             checkpoints(ck) == ["step_00000003", "step_00000005"], str(checkpoints(ck)))
    ck2 = f"{tmp}/{tool}_every"
    proc(cmd + ["--steps", "5", "--save-every", "2", "--ckpt-dir", ck2])
    chk.true(f"{tool}: --steps 5 --save-every 2 saves steps 2, 4 and the last, 5",
             checkpoints(ck2) == ["step_00000002", "step_00000004", "step_00000005"], str(checkpoints(ck2)))
    for flag in (["--save-every", "1"], ["--keep-last", "2"], ["--ckpt-type", "full"], ["--ckpt-type", "sharded"]):
        r = proc(cmd + ["--steps", "2"] + flag, expect_ok=False)
        refused(chk, f"{tool}: {' '.join(flag)} without --ckpt-dir", r, tool, [flag[0], "--ckpt-dir"])
    r = mpirun(2, cmd + ["--steps", "2", "--save-every", "1"], expect_ok=False)
    refused(chk, f"{tool} on 2 ranks: --save-every without --ckpt-dir", r, tool, ["--save-every", "--ckpt-dir"])

    # --steps is the total (step_00000004 comes from --save-every, so these checks stand on their own)
    r = proc(cmd + ["--steps", "3", "--resume", f"{ck2}/step_00000004"], expect_ok=False)
    refused(chk, f"{tool}: --steps 3 --resume of a step-4 checkpoint", r, tool, ["--steps 3", "4 steps", "total"])
    save = f"{tmp}/{tool}_equal.safetensors"
    r = proc(cmd + ["--steps", "4", "--resume", f"{ck2}/step_00000004", "--save", save], expect_ok=False)
    lines = tool_lines(r.stderr, tool)
    chk.true(f"{tool}: --steps 4 --resume of a step-4 checkpoint: exit 0, one note that nothing is trained, "
             "--save still written", r.returncode == 0 and len(lines) == 1 and "note:" in lines[0]
             and "nothing to train" in lines[0] and "total" in lines[0] and parse_losses(r.stdout) == []
             and os.path.exists(save) and os.path.getsize(save) > 0, f"rc {r.returncode}: {r.stderr[-800:]}")
    help_steps = proc(cmd[:1] + ["--help"]).stdout.splitlines()
    at = help_steps.index("  --steps N") if "  --steps N" in help_steps else -1
    chk.true(f"{tool}: --help says --steps is the total", at >= 0 and "in total" in help_steps[at + 1],
             "\n".join(help_steps[at:at + 2]))


def check_fsdp_flags(chk, tool, cmd):
    plain = mpirun(2, cmd + ["--steps", "3"])
    off = mpirun(2, cmd + ["--steps", "3", "--cpu-offload"])
    lines = tool_lines(off.stderr, tool)
    chk.true(f"{tool} on 2 ranks: --cpu-offload prints one note naming it and the CPU backend",
             len(lines) == 1 and "note:" in lines[0] and "--cpu-offload" in lines[0] and "CPU backend" in lines[0],
             off.stderr[-800:])
    chk.close(f"{tool}: --cpu-offload: the same losses as without", parse_losses(off.stdout),
              parse_losses(plain.stdout), 0, 0)
    chk.true(f"{tool}: without --cpu-offload no note", tool_lines(plain.stderr, tool) == [], plain.stderr[-800:])
    for strategy in ("full_shard", "ddp"):
        r = mpirun(2, cmd + ["--steps", "2", "--strategy", strategy, "--shard-group-size", "1"], expect_ok=False)
        refused(chk, f"{tool} on 2 ranks: --shard-group-size with --strategy {strategy}", r, tool,
                ["--shard-group-size 1", "hybrid_shard", strategy])
    r = mpirun(2, cmd + ["--steps", "2", "--shard-group-size", "1"], expect_ok=False)
    refused(chk, f"{tool}: --shard-group-size with the default strategy", r, tool, ["--shard-group-size", "full_shard"])
    hyb = mpirun(2, cmd + ["--steps", "2", "--strategy", "hybrid_shard", "--shard-group-size", "1"])
    chk.true(f"{tool}: --shard-group-size 1 with hybrid_shard runs 2 steps", len(parse_losses(hyb.stdout)) == 2,
             hyb.stdout[-500:])


def jsonl(path):
    recs = [r for r in map(json.loads, open(path)) if "step" in r]  # (the first record is the config)
    return [r["loss"] for r in recs], {r["step"]: r["val_loss"] for r in recs if "val_loss" in r}


def check_holdout(chk, train, tmp):
    # 400 bytes: training on the first 360 wraps after 11.25 steps of 32 tokens, within the 14 steps
    data = np.random.RandomState(3).randint(32, 127, size=400).astype(np.uint8).tobytes()
    paths = {}
    for name, part in (("all", data), ("head", data[:360]), ("tail", data[360:])):
        paths[name] = f"{tmp}/{name}.txt"
        open(paths[name], "wb").write(part)
    ev = ["--steps", "14", "--eval-every", "7", "--eval-batches", "2"]
    r = proc([train] + TRAIN_MODEL + ev + ["--data", paths["all"], "--log-jsonl", f"{tmp}/split.jsonl"])
    losses, val = jsonl(f"{tmp}/split.jsonl")
    proc([train] + TRAIN_MODEL + ev + ["--data", paths["head"], "--val-data", paths["tail"],
                                       "--log-jsonl", f"{tmp}/explicit.jsonl"])
    ref_losses, ref_val = jsonl(f"{tmp}/explicit.jsonl")
    chk.true("--eval-every without --val-data: validation after steps 7 and 14, logged as val", sorted(val) == [6, 13]
             and any(" val " in x for x in r.stdout.splitlines() if x.startswith("step 6 ")), str(val))
    chk.close("... training losses == training on the first 90% only (the tail is never trained on)", losses,
              ref_losses, 0, 0)
    chk.close("... val losses == --val-data the last 10%", [val.get(s, float("nan")) for s in (6, 13)],
              [ref_val.get(s, float("nan")) for s in (6, 13)], 0, 0)
    chk.true("... the banner names the held-out part", "validation: 2 batches of " + paths["all"] + " (last 10%)"
             in r.stdout, r.stdout[:800])
    short = f"{tmp}/short.txt"
    open(short, "wb").write(data[:100])  # 10 held-out bytes < seq + 1
    r = proc([train] + TRAIN_MODEL + ev + ["--data", short], expect_ok=False)
    refused(chk, "--eval-every on data too short to hold out 10%", r, "fsdp-train", ["--val-data", short, "17"])
    r = proc([train] + TRAIN_MODEL + ["--steps", "2", "--val-data", paths["tail"]], expect_ok=False)
    refused(chk, "--val-data without --eval-every", r, "fsdp-train", ["--val-data", "--eval-every"])


def main():
    args = parse_args()
    chk = Checker("no_silent_noops")
    tmp = tmpdir()
    train, minimal = os.path.join(args.bin, "fsdp-train"), os.path.join(args.bin, "fsdp-minimal")
    for tool, cmd in (("fsdp-train", [train] + TRAIN_MODEL), ("fsdp-minimal", [minimal] + MINIMAL_MODEL)):
        check_checkpoints(chk, tool, cmd, tmp)
        check_fsdp_flags(chk, tool, cmd)
    check_holdout(chk, train, tmp)
    chk.report()


if __name__ == "__main__":
    main()
