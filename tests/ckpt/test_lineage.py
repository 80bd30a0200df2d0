"""A --ckpt-dir holds one run's history (issue: checkpoint directories never lose or mix runs).

- A resume from an older checkpoint of the directory branches: the newer checkpoints move to archive/
  (intact, still verifiable), --keep-last removes only the branch's own older ones, and --resume auto
  then continues the branch exactly (bitwise, as the same branch run uninterrupted).
- A fresh run into a directory holding complete checkpoints is refused with one line naming the newest
  and the ways out, nothing touched; --new-run archives them and starts a new run id; a --resume of a
  checkpoint from elsewhere that does not continue the directory's history is refused.
- Two jobs started together on one directory: one is refused naming the holder, the other finishes
  intact; a job killed with kill -9 leaves a lock that blocks nothing.
- kill -9 at random points of a branch run with --save-every 1 --keep-last 2 (20 trials in the
  rotation, 20 in the save, 2 in the archiving, 6 at a random time): --resume auto always continues
  the branch from the newest complete checkpoint, exactly.
- --steps 0, or a run refused before its first save, leaves no directory it created behind."""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc, st_read, tmpdir  # noqa: E402

MODEL = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--batch", "2", "--threads", "1",
         "--lr-schedule", "constant", "--warmup", "0"]
BRANCH_LR = ["--lr", "3e-3"]  # the branch trains on with another learning rate: its own trajectory


def step_names(root):
    return sorted(f for f in os.listdir(root) if f.startswith("step_"))


def complete_steps(root):
    """The complete checkpoints of root that resume may take (an archiving journal sets some aside)."""
    after = None
    journal = os.path.join(root, ".archiving")
    if os.path.exists(journal):
        after = int(open(journal).read().split()[1])
    steps = [int(n[5:]) for n in step_names(root) if os.path.exists(os.path.join(root, n, "DONE"))]
    return sorted(s for s in steps if after is None or s <= after)


def tree_digest(root):
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            if f == ".lock":  # (names its last holder: a refused job holds it while it checks the directory)
                continue
            p = os.path.join(d, f)
            h.update(os.path.relpath(p, root).encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "step" in r}


def run_id(ckpt):
    header, _ = st_read(os.path.join(ckpt, "index.safetensors"))
    return header["__metadata__"].get("run_id", "")


def main():
    args = parse_args()
    train = os.path.join(args.bin, "fsdp-train")
    tool = os.path.join(args.bin, "fsdp-ckpt")
    tmp = tmpdir()
    chk = Checker("lineage")

    def t(extra, expect_ok=True, env=None, timeout=120):
        return proc([train] + MODEL + extra, expect_ok=expect_ok, env=env, timeout=timeout)

    def verify(path):
        return proc([tool, "verify", path], expect_ok=False).returncode == 0

    # run A: steps 2, 4, 6, 8 in the template directory
    template = f"{tmp}/template"
    t(["--steps", "8", "--save-every", "2", "--ckpt-dir", template])
    a_id = run_id(f"{template}/step_00000008")
    chk.true("every checkpoint records a run id", len(a_id) == 16 and run_id(f"{template}/step_00000002") == a_id,
             a_id)
    # the branch, uninterrupted: from a copy of A's step 2 outside any --ckpt-dir, to step 8
    os.makedirs(f"{tmp}/alone")
    shutil.copytree(f"{template}/step_00000002", f"{tmp}/alone/step_00000002")
    t(["--steps", "420", "--resume", f"{tmp}/alone/step_00000002", "--log-jsonl", f"{tmp}/branch_ref.jsonl"]
      + BRANCH_LR)
    branch_ref = losses(f"{tmp}/branch_ref.jsonl")

    # 1. the sequence: resume from step 2 of a directory holding 4, 6 (and 8), --keep-last 1
    ck = f"{tmp}/ck1"
    shutil.copytree(template, ck)
    r = t(["--steps", "5", "--save-every", "2", "--keep-last", "1", "--resume", f"{ck}/step_00000002",
           "--ckpt-dir", ck] + BRANCH_LR)
    archived = [os.path.join(d, n) for d in [os.path.join(ck, "archive", a) for a in os.listdir(f"{ck}/archive")]
                for n in os.listdir(d) if n.startswith("step_")]
    chk.true("branch: a note says where the newer checkpoints went", "moved to" in r.stdout and "archive" in r.stdout,
             r.stdout[-800:])
    chk.true("branch: --keep-last 1 leaves the branch's newest only", step_names(ck) == ["step_00000005"],
             str(step_names(ck)))
    chk.true("branch: A's steps 4, 6, 8 are archived whole and verify",
             sorted(os.path.basename(p) for p in archived) == ["step_00000004", "step_00000006", "step_00000008"]
             and all(verify(p) for p in archived), str(archived))
    r = t(["--steps", "8", "--resume", "auto", "--ckpt-dir", ck, "--log-jsonl", f"{tmp}/b1.jsonl"] + BRANCH_LR)
    got = losses(f"{tmp}/b1.jsonl")
    chk.true("branch: --resume auto continues the branch (step 5), not A's step 8",
             "resumed from " + f"{ck}/step_00000005" in r.stdout and sorted(got) == [5, 6, 7], r.stdout[-500:])
    chk.close("branch: ... exactly as the branch run uninterrupted", [got[s] for s in sorted(got)],
              [branch_ref[s] for s in sorted(got)], 0, 0)
    chk.true("branch: the branch keeps A's run id (a lineage, resumed)", run_id(f"{ck}/step_00000008") == a_id)

    # 2. a fresh run into a used directory: refused, nothing touched; --new-run archives, new run id
    ck = f"{tmp}/ck2"
    shutil.copytree(template, ck)
    before = tree_digest(ck)
    r = t(["--steps", "4", "--seed", "7", "--keep-last", "1", "--ckpt-dir", ck], expect_ok=False)
    lines = [x for x in r.stderr.splitlines() if x.startswith("fsdp-train:")]
    chk.true("fresh run into a used directory: refused in one line naming the newest and both ways out",
             r.returncode == 2 and len(lines) == 1 and "step_00000008" in lines[0] and "--resume auto" in lines[0]
             and "--new-run" in lines[0] and not r.stdout.strip(), r.stderr + r.stdout[-300:])
    chk.true("... and the directory is unchanged", tree_digest(ck) == before)
    r = t(["--steps", "4", "--seed", "7", "--keep-last", "1", "--ckpt-dir", ck, "--new-run"])
    arch = [os.path.join(ck, "archive", a) for a in os.listdir(f"{ck}/archive")]
    chk.true("--new-run: the other run's checkpoints are archived whole",
             len(arch) == 1 and step_names(arch[0]) == ["step_00000002", "step_00000004", "step_00000006",
                                                       "step_00000008"]
             and all(verify(os.path.join(arch[0], n)) for n in step_names(arch[0])), str(arch))
    new_id = run_id(f"{ck}/step_00000004")
    chk.true("--new-run: its own checkpoints only in the root, under a new run id",
             step_names(ck) == ["step_00000004"] and len(new_id) == 16 and new_id != a_id, str(step_names(ck)))
    r = t(["--steps", "5", "--seed", "7", "--resume", "auto", "--ckpt-dir", ck])
    chk.true("--new-run: --resume auto continues the new run", f"resumed from {ck}/step_00000004" in r.stdout,
             r.stdout[-300:])
    # a checkpoint from elsewhere that does not continue the directory's history
    r = t(["--steps", "9", "--resume", f"{tmp}/alone/step_00000002", "--ckpt-dir", ck], expect_ok=False)
    chk.true("--resume of another history into a used directory: refused naming both",
             r.returncode == 2 and "step_00000005" in r.stderr and "alone/step_00000002" in r.stderr
             and "--new-run" in r.stderr, r.stderr)
    r = t(["--steps", "3", "--new-run", "--resume", "auto", "--ckpt-dir", ck], expect_ok=False)
    chk.true("--new-run with --resume auto: a one-line error", r.returncode == 2 and "--new-run" in r.stderr, r.stderr)
    minimal = os.path.join(args.bin, "fsdp-minimal")
    mbase = [minimal, "--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq", "4", "--global-batch",
             "2", "--threads", "1", "--dropout", "0"]
    proc(mbase + ["--steps", "2", "--ckpt-dir", f"{tmp}/min"])
    r = proc(mbase + ["--steps", "3", "--ckpt-dir", f"{tmp}/min"], expect_ok=False)
    chk.true("fsdp-minimal: a fresh run into a used directory is refused too",
             r.returncode == 2 and "--resume auto" in r.stderr, r.stderr)

    # 3. two jobs started together on one directory: one refused, naming the holder; the other intact
    ck = f"{tmp}/ck3"
    cmd = [train] + MODEL + ["--steps", "20000", "--ckpt-dir", ck]
    jobs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [j.communicate(timeout=300) for j in jobs]
    codes = sorted(j.returncode for j in jobs)
    refused = [o[1] for j, o in zip(jobs, outs) if j.returncode != 0]
    chk.true("two jobs together: one refused at once, naming the holder's host and pid",
             codes == [0, 2] and "in use by another job" in refused[0] and "pid" in refused[0], f"{codes} {refused}")
    chk.true("... and the other's checkpoint is complete and verifies",
             step_names(ck) == ["step_00020000"] and verify(f"{ck}/step_00020000"), str(os.listdir(ck)))
    # a job killed with kill -9 while holding the lock: the next one is not blocked
    job = subprocess.Popen([train] + MODEL + ["--steps", "40000", "--resume", "auto", "--ckpt-dir", ck],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    job.kill()
    job.communicate()
    r = t(["--steps", "20001", "--resume", "auto", "--ckpt-dir", ck], expect_ok=False)
    chk.true("a killed job's lock blocks nothing", r.returncode == 0 and "step_00020001" in r.stdout, r.stderr)

    # 4. kill -9 at random points of a branch run (--save-every 1 --keep-last 2): --resume auto always
    # continues the branch from the newest complete checkpoint, exactly
    rng = random.Random(20261207)
    # 20 trials killed in the rotation (a random step and point), 20 in the save (after the shards, or
    # half-way through a shard), 2 in the archiving, 6 at a random time
    faults = ([("rotate", rng.randint(0, 2)) for _ in range(20)] + [(rng.choice(("save", "torn")), None)
                                                                    for _ in range(20)]
              + [("archive", None)] * 2 + [("timer", None)] * 6)
    for trial, (kind, point) in enumerate(faults):
        ck = f"{tmp}/kill{trial}"
        shutil.copytree(template, ck)
        k = rng.randint(4, 7)  # (the rotation after step 3's save removes nothing: 2 and 3 are kept)
        env = {"rotate": {"FSDP_TEST_CRASH_IN_ROTATE": f"{k}:{point}"}, "save": {"FSDP_TEST_CRASH_IN_SAVE": str(k)},
               "torn": {"FSDP_TEST_TORN_SHARD": f"{k}:0"}, "archive": {"FSDP_TEST_CRASH_IN_ARCHIVE": "1"},
               "timer": {}}[kind]
        first = ["--steps", "400" if kind == "timer" else "8", "--save-every", "1", "--keep-last", "2", "--resume",
                 f"{ck}/step_00000002", "--ckpt-dir", ck] + BRANCH_LR
        if kind == "timer":  # kill -9 after a random time
            job = subprocess.Popen([train] + MODEL + first, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.02, 0.3))
            job.kill()
            job.communicate()
            label = "kill -9 at a random time"
        else:
            r = t(first, expect_ok=False, env=env)
            label = f"{kind}{'' if point is None else f' point {point}'}, step {k}"
            chk.true(f"trial {trial} ({label}): the run died", r.returncode != 0, f"exit {r.returncode}")
        want = complete_steps(ck)[-1]
        last = want + 3 if kind == "timer" else 8
        r = t(["--steps", str(last), "--save-every", "1", "--keep-last", "2", "--resume", "auto", "--ckpt-dir", ck,
               "--log-jsonl", f"{ck}.jsonl"] + BRANCH_LR, expect_ok=False)
        got = losses(f"{ck}.jsonl") if os.path.exists(f"{ck}.jsonl") else {}
        ok = (r.returncode == 0 and f"resumed from {ck}/step_{want:08d}" in r.stdout
              and sorted(got) == list(range(want, last)))
        chk.true(f"trial {trial} ({label}): --resume auto continues from the newest complete, step {want}", ok,
                 f"exit {r.returncode}\n{r.stdout[-400:]}\n{r.stderr[-400:]}")
        chk.close(f"trial {trial}: ... exactly the branch's trajectory", [got.get(s) for s in range(want, last)],
                  [branch_ref[s] for s in range(want, last)], 0, 0)
        leftovers = [f for f in os.listdir(ck) if f.startswith(".") and f != ".lock"]
        chk.true(f"trial {trial}: nothing half-deleted or half-archived is left, the two newest kept",
                 not leftovers and step_names(ck) == [f"step_{last - 1:08d}", f"step_{last:08d}"],
                 f"{leftovers} {step_names(ck)}")

    # 5. no directory left behind by a run that saved nothing into the one it created
    t(["--steps", "0", "--ckpt-dir", f"{tmp}/zero"])
    chk.true("--steps 0 leaves no --ckpt-dir behind", not os.path.exists(f"{tmp}/zero"))
    os.makedirs(f"{tmp}/mine")
    t(["--steps", "0", "--ckpt-dir", f"{tmp}/mine"])
    chk.true("... but keeps a directory the user made", os.path.isdir(f"{tmp}/mine"))
    chk.report()


if __name__ == "__main__":
    main()
