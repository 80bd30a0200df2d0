"""What a trainer user expects (fsdp-train, fsdp-ckpt):
- --log-jsonl: a resumed run appends (the earlier run's records stay: steps 0..4 after 0..2 then a
  resume to 5); a fresh run without --resume starts the file anew. The gradient norm is in every step
  line ("grad norm X") and every JSONL record ("grad_norm", the same value, finite and positive).
- --save confirms in one line, once on 2 ranks, the tensors and parameters the file holds (fsdp-train
  and fsdp-minimal).
- The end-of-run trace summary says "dropped" only with a span buffer (--trace), not when tracing is off.
- --resume DIR that does not exist: one line "no such directory" (no "DONE"); --resume given the parent
  --ckpt-dir picks its newest complete checkpoint (an incomplete newer one skipped) and continues bitwise.
- fsdp-ckpt SUBCOMMAND --help prints that subcommand's usage and exits 0.
- --config FILE: a switch the file sets is turned off by --no-NAME on the command line
- --config FILE: the flags as a file ("name value", "name = value", "--name value", comments); the
  command line overrides it; the run equals, bitwise, the same flags typed on the command line. The
  resolved configuration is printed at start ("config: ... --steps 3 ..."), is the JSONL's first record
  and is in the checkpoint's metadata ("setting.config", "setting.lr"); a bad line is one error naming
  the file and the line, exit 2. fsdp-minimal takes the same --config (its run equals the typed flags;
  --summary prints the configuration; the checkpoint records it)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc, st_read, tmpdir  # noqa: E402

MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--threads", "1",
         "--warmup", "0", "--lr-schedule", "constant", "--lr", "3e-3"]


def records(path):
    return [json.loads(line) for line in open(path)]


def step_records(path):
    return [r for r in records(path) if "step" in r]


def check_logs(chk, train, minimal, tmp):
    ck, log = f"{tmp}/ck", f"{tmp}/log.jsonl"
    r = proc([train] + MODEL + ["--steps", "3", "--ckpt-dir", ck, "--log-jsonl", log])
    proc([train] + MODEL + ["--steps", "5", "--log-jsonl", f"{tmp}/whole.jsonl"])
    whole = [x["loss"] for x in step_records(f"{tmp}/whole.jsonl")]
    proc([train] + MODEL + ["--steps", "5", "--ckpt-dir", ck, "--resume", "auto", "--log-jsonl", log])
    recs = step_records(log)
    chk.true("--log-jsonl on resume appends: steps 0..4 (the first run's 0..2 kept)",
             [x["step"] for x in recs] == [0, 1, 2, 3, 4], str([x.get("step") for x in recs]))
    chk.close("... and the appended losses continue the uninterrupted run's", [x["loss"] for x in recs], whole, 0, 0)
    proc([train] + MODEL + ["--steps", "2", "--log-jsonl", log])
    chk.true("a fresh run (no --resume) starts the file anew: steps 0..1 only",
             [x["step"] for x in step_records(log)] == [0, 1], str([x.get("step") for x in step_records(log)]))

    printed = [float(line.split("grad norm ")[1].split()[0]) for line in r.stdout.splitlines()
               if line.startswith("step ") and "grad norm " in line]
    r = proc([train] + MODEL + ["--steps", "3", "--log-jsonl", f"{tmp}/norm.jsonl"])
    norms = [x.get("grad_norm") for x in step_records(f"{tmp}/norm.jsonl")]
    chk.true("the gradient norm is in every step line and every JSONL record, finite and positive",
             len(printed) == 3 and len(norms) == 3 and all(isinstance(x, float) and x > 0 for x in norms),
             f"printed {printed}, logged {norms}")
    chk.close("... the line's value is the record's (4 significant digits)", printed, norms, 1e-3, 0)

    # --save on 2 ranks: one line, what the file holds
    save = f"{tmp}/w.safetensors"
    r = mpirun(2, [train] + MODEL + ["--steps", "1", "--save", save])
    header, _ = st_read(save)
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    numel = sum(int(__import__("numpy").prod(v["shape"])) for v in tensors.values())
    want = f"fsdp-train: saved {len(tensors)} tensors ({numel / 1e6:.2f}M parameters) to {save}"
    lines = [x for x in r.stdout.splitlines() if "saved" in x]
    chk.true("--save: one line (2 ranks) with the file's tensor and parameter counts", lines == [want],
             f"{lines} vs {want!r}")
    msave = f"{tmp}/m.safetensors"
    m = mpirun(2, [minimal, "--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32", "--batch", "4",
                   "--threads", "1", "--steps", "1", "--save", msave])
    mt = {k: v for k, v in st_read(msave)[0].items() if k != "__metadata__"}
    mnum = sum(int(__import__("numpy").prod(v["shape"])) for v in mt.values())
    lines = [x for x in m.stdout.splitlines() if "saved" in x]
    chk.true("fsdp-minimal --save: the same one line", lines == [f"fsdp-minimal: saved {len(mt)} tensors "
             f"({mnum / 1e6:.2f}M parameters) to {msave}"], str(lines))

    # the trace summary: "dropped" only where a span buffer exists
    off = [x for x in r.stdout.splitlines() if x.startswith("trace rank")]
    chk.true("tracing off: the summary does not say 'dropped'", len(off) == 1 and "dropped" not in off[0], str(off))
    r = proc([train] + MODEL + ["--steps", "1", "--trace", f"{tmp}/t.json"])
    on = [x for x in r.stdout.splitlines() if x.startswith("trace rank")]
    chk.true("--trace: the summary says 'kept N, dropped 0'", len(on) == 1 and ", dropped 0)" in on[0], str(on))


def check_resume_errors(chk, train, ckpt_tool, tmp):
    r = proc([train] + MODEL + ["--steps", "2", "--resume", f"{tmp}/no_such_dir"], expect_ok=False)
    lines = [x for x in r.stderr.splitlines() if x.startswith("fsdp-train:")]
    chk.true("--resume of a missing directory: one line 'no such directory', not DONE",
             r.returncode == 2 and len(lines) == 1 and "no such directory" in lines[0] and "no_such_dir" in lines[0]
             and "DONE" not in r.stderr and "step " not in r.stdout, f"rc {r.returncode}: {r.stderr[-600:]}")
    chk.true("--resume of a missing directory: refused before the model is built (no banner)",
             "memory per rank" not in r.stdout and "config:" not in r.stdout, r.stdout[-400:])

    ck = f"{tmp}/parent"
    proc([train] + MODEL + ["--steps", "4", "--save-every", "2", "--ckpt-dir", ck])
    os.makedirs(f"{ck}/step_00000006")  # newer, but incomplete (no DONE): skipped
    whole = parse_losses(proc([train] + MODEL + ["--steps", "6"]).stdout)
    r = proc([train] + MODEL + ["--steps", "6", "--resume", ck], expect_ok=False)
    chk.true("--resume PARENT: picks the newest complete checkpoint (step 4)",
             r.returncode == 0 and f"resumed from {ck}/step_00000004" in r.stdout, f"rc {r.returncode}: "
             f"{r.stdout[-600:]}{r.stderr[-600:]}")
    chk.close("... and continues bitwise", parse_losses(r.stdout), whole[4:], 0, 0)

    for sub in ("info", "verify", "consolidate", "reshard", "convert"):
        r = proc([ckpt_tool, sub, "--help"], expect_ok=False)
        chk.true(f"fsdp-ckpt {sub} --help: exit 0, its usage", r.returncode == 0 and
                 r.stdout.startswith(f"usage: fsdp-ckpt {sub} ") and len(r.stdout.splitlines()) >= 2,
                 f"rc {r.returncode}: {r.stdout}{r.stderr}")


def check_config(chk, train, minimal, tmp):
    cfg = f"{tmp}/run.cfg"
    with open(cfg, "w") as f:
        f.write("# a small model\nlayers 1\nd-model = 32\n--heads 2\nseq 16\nbatch 2\nthreads 1\nwarmup 0\n"
                "lr-schedule constant   # after the warmup\nlr = 3e-3\nsteps 5\nskip-nonfinite = false\n")
    typed = proc([train] + MODEL + ["--steps", "3"])
    ck, log = f"{tmp}/cfg_ck", f"{tmp}/cfg.jsonl"
    r = proc([train, "--config", cfg, "--steps", "3", "--ckpt-dir", ck, "--log-jsonl", log], expect_ok=False)
    chk.true("--config: runs, 3 steps (the command line's --steps 3 overrides the file's 5)",
             r.returncode == 0 and len(parse_losses(r.stdout)) == 3, f"rc {r.returncode}: {r.stderr[-600:]}")
    chk.close("--config: the losses of the same flags typed (bitwise)", parse_losses(r.stdout),
              parse_losses(typed.stdout), 0, 0)
    printed = [x for x in r.stdout.splitlines() if x.startswith("  config:")]
    chk.true("--config: the resolved configuration printed at start (--d-model 32 --steps 3 --config FILE)",
             len(printed) == 1 and " --d-model 32 " in printed[0] and " --steps 3 " in printed[0]
             and f" --config {cfg}" in printed[0] and " --skip-nonfinite" not in printed[0], str(printed))
    first = records(log)[0] if os.path.exists(log) else {}
    c = first.get("config", {})
    chk.true("--config: the JSONL's first record is the configuration",
             c.get("model_type") == "gpt2" and c.get("steps") == 3 and c.get("d-model") == 32 and c.get("lr") == 0.003
             and c.get("config") == cfg and c.get("skip-nonfinite") is False, str(first)[:600])
    meta = st_read(f"{ck}/step_00000003/index.safetensors")[0].get("__metadata__", {}) \
        if os.path.exists(f"{ck}/step_00000003/index.safetensors") else {}
    chk.true("--config: the checkpoint records the settings (setting.config, setting.lr, setting.steps)",
             meta.get("setting.config") == cfg and meta.get("setting.lr") == "0.003" and meta.get("setting.steps") == "3",
             str(meta)[:600])
    with open(f"{tmp}/bad.cfg", "w") as f:
        f.write("layers 1\nno-such-flag 3\n")
    r = proc([train, "--config", f"{tmp}/bad.cfg"], expect_ok=False)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    chk.true("--config with an unknown flag: exit 2, one line naming the file, line 2 and the flag",
             r.returncode == 2 and len(lines) == 1 and "bad.cfg" in lines[0] and "line 2" in lines[0]
             and "no-such-flag" in lines[0], f"rc {r.returncode}: {r.stderr}")
    # fsdp-minimal: the same file format; its run equals the typed flags, the checkpoint records the file
    with open(f"{tmp}/minimal.cfg", "w") as f:
        f.write("layers 1\nd-model 16\nheads 2\nffn 32\nbatch 4\nthreads 1\nsteps 9\n")
    mtyped = ["--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32", "--batch", "4", "--threads", "1"]
    want = parse_losses(proc([minimal] + mtyped + ["--steps", "3"]).stdout)
    r = proc([minimal, "--config", f"{tmp}/minimal.cfg", "--steps", "3", "--summary", "--ckpt-dir", f"{tmp}/mck"],
             expect_ok=False)
    chk.close("fsdp-minimal --config (command line --steps 3 over the file's 9): the typed flags' losses",
              parse_losses(r.stdout), want, 0, 0)
    idx = f"{tmp}/mck/step_00000003/index.safetensors"
    meta = st_read(idx)[0].get("__metadata__", {}) if os.path.exists(idx) else {}
    chk.true("fsdp-minimal --config: printed with --summary, recorded in the checkpoint",
             any(x.startswith("  config:") and " --ffn 32 " in x for x in r.stdout.splitlines())
             and meta.get("setting.config") == f"{tmp}/minimal.cfg", f"{r.stdout[:800]} {str(meta)[:300]}")
    # a switch the file turns on, turned off again on the command line (--no-NAME)
    with open(f"{tmp}/switch.cfg", "w") as f:
        f.write(open(cfg).read() + "forward-prefetch\n")
    on = [x for x in proc([train, "--config", f"{tmp}/switch.cfg", "--steps", "1"]).stdout.splitlines()
          if x.startswith("  config:")]
    off = [x for x in proc([train, "--config", f"{tmp}/switch.cfg", "--steps", "1", "--no-forward-prefetch"]).stdout
           .splitlines() if x.startswith("  config:")]
    chk.true("--config sets a switch; --no-forward-prefetch on the command line turns it off again",
             len(on) == 1 and " --forward-prefetch" in on[0] and len(off) == 1 and " --forward-prefetch" not in off[0],
             f"{on} {off}")
    r = proc([train, "--config", f"{tmp}/missing.cfg"], expect_ok=False)
    chk.true("--config of a missing file: exit 2, one line naming it",
             r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "missing.cfg" in r.stderr, r.stderr)


def main():
    args = parse_args()
    chk = Checker("user path")
    train, ckpt_tool = os.path.join(args.bin, "fsdp-train"), os.path.join(args.bin, "fsdp-ckpt")
    tmp = tmpdir()
    check_logs(chk, train, os.path.join(args.bin, "fsdp-minimal"), tmp)
    check_resume_errors(chk, train, ckpt_tool, tmp)
    check_config(chk, train, os.path.join(args.bin, "fsdp-minimal"), tmp)
    chk.report()


if __name__ == "__main__":
    main()
