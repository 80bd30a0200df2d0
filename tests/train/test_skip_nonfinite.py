"""fsdp-train with non-finite values, injected for real (src/core/fault_inject.h): a NaN loss scale in one
rank's backward (every gradient of that rank NaN, spread by the reduce-scatter), a NaN in one element of
one rank's reduced gradient shard (only that rank sees it, under FULL_SHARD and under DDP, where the
norm is computed locally), and a NaN loss.

On one fixed batch with a constant learning rate, a 4-step run whose step 2 is skipped must end exactly
where a 3-step run without the fault ends (losses of steps 0-2 equal, the loss after the skipped step
equals the reference's step-2 loss, final parameters bitwise equal): the skipped step changed neither
the parameters nor the AdamW state (a step count or moment touched by the skip changes every later
update). Without --skip-nonfinite the run stops at step 2, before the update and before that step's
checkpoint, with one message naming the step."""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, st_load, st_save, tmpdir  # noqa: E402

N, B, T, V = 2, 4, 32, 256
SMALL = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq", str(T), "--batch", str(B), "--threads", "1",
         "--lr", "3e-3", "--warmup", "0", "--lr-schedule", "constant"]


def main():
    args = parse_args()
    train = os.path.join(args.bin, "fsdp-train")
    tmp = tmpdir()
    chk = Checker("skip non-finite")
    rng = np.random.RandomState(5)
    st_save(f"{tmp}/batch.safetensors", {"idx": rng.randint(0, V, (N * B, T)).astype(np.int64),
                                         "targets": rng.randint(0, V, (N * B, T)).astype(np.int64)})
    base = [train] + SMALL + ["--input", f"{tmp}/batch.safetensors"]

    def trained(tag, steps, extra=(), env=None):
        """(losses, final parameters, stderr) of a run."""
        r = mpirun(N, base + ["--steps", str(steps), "--save", f"{tmp}/{tag}.safetensors"] + list(extra), env=env,
                   timeout=120)
        return parse_losses(r.stdout), st_load(f"{tmp}/{tag}.safetensors"), r.stderr

    refs = {}
    for strategy in ("full_shard", "ddp"):
        refs[strategy] = trained(f"ref_{strategy}", 3, ["--strategy", strategy])
        chk.true(f"reference ({strategy}): 3 finite, falling losses", len(refs[strategy][0]) == 3 and
                 refs[strategy][0][2] < refs[strategy][0][0], str(refs[strategy][0]))
    cases = [  # label, strategy, hook, what the message names
        ("NaN in rank 1's backward", "full_shard", {"FSDP_TEST_NAN_GRAD": "2:1"}, "gradient norm is nan"),
        ("NaN in one element of rank 1's gradient shard", "full_shard", {"FSDP_TEST_NAN_SHARD": "2:1"},
         "gradient norm is nan"),
        ("NaN in one element of rank 1's gradient shard, DDP", "ddp", {"FSDP_TEST_NAN_SHARD": "2:1"},
         "gradient norm is nan"),
        ("NaN loss", "full_shard", {"FSDP_TEST_NAN_LOSS": "2"}, "loss is nan"),
    ]
    for i, (label, strategy, env, needle) in enumerate(cases):
        jl = f"{tmp}/skip{i}.jsonl"
        losses, params, err = trained(f"skip{i}", 4, ["--strategy", strategy, "--skip-nonfinite", "--log-jsonl", jl],
                                      env)
        ref_losses, ref_params, _ = refs[strategy]
        msgs = [line for line in err.splitlines() if "skipping this update" in line]
        chk.true(f"{label}: one message naming step 2 and the cause", len(msgs) == 1 and "step 2:" in msgs[0] and
                 needle in msgs[0], err[-1000:])
        if needle == "loss is nan":  # the reported loss of step 2 is the injected NaN
            chk.true(f"{label}: step 2 reported as nan", len(losses) == 4 and np.isnan(losses[2]), str(losses))
            losses = losses[:2] + ref_losses[2:] + losses[3:]
        chk.close(f"{label}: steps 0-2 as the reference", losses[:3], ref_losses, 0, 0)
        chk.close(f"{label}: step 3 (after the skip, finite) == the reference's step 2", losses[3:], ref_losses[2:], 0, 0)
        chk.identical(f"{label}: final parameters == the 3-step reference's (the skip changed neither the parameters "
                    "nor the AdamW state)", params, ref_params)
        recs = [r for r in map(json.loads, open(jl)) if "step" in r]
        chk.true(f"{label}: the JSONL has 4 steps, null only for a non-finite loss",
                 len(recs) == 4 and (recs[2]["loss"] is None) == (needle == "loss is nan") and
                 all(recs[s]["loss"] is not None for s in (0, 1, 3)), str(recs))

    # without --skip-nonfinite: every rank stops at step 2 before the update and before its checkpoint
    for label, env, needle in (("NaN in rank 1's backward", {"FSDP_TEST_NAN_GRAD": "2:1"}, "gradient norm is nan"),
                               ("NaN loss", {"FSDP_TEST_NAN_LOSS": "2"}, "loss is nan")):
        ck = f"{tmp}/ck_{needle.split()[0]}"
        r = mpirun(N, base + ["--steps", "4", "--ckpt-dir", ck, "--save-every", "1"], env=env, expect_ok=False,
                   timeout=120)
        lines = [line for line in r.stderr.splitlines() if line.startswith("fsdp-train:")]
        chk.true(f"{label}, no --skip-nonfinite: exit 1 with one message naming step 2", r.returncode == 1 and
                 len(lines) == 1 and "step 2:" in lines[0] and needle in lines[0] and
                 "stopping before the update" in lines[0], f"rc {r.returncode}: {r.stderr[-1000:]}")
        chk.close(f"{label}, no --skip-nonfinite: steps 0 and 1 logged, as the reference", parse_losses(r.stdout),
                  refs["full_shard"][0][:2], 0, 0)
        saved = sorted(d for d in os.listdir(ck) if d.startswith("step_")) if os.path.isdir(ck) else []
        chk.true(f"{label}, no --skip-nonfinite: checkpoints of steps 1 and 2 only",
                 saved == ["step_00000001", "step_00000002"], str(saved))
    chk.report()


if __name__ == "__main__":
    main()
