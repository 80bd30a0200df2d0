"""One vocabulary across the tools (issue 17):
1. --batch is the per-rank micro-batch in fsdp-minimal as in fsdp-train: --batch 4 on 1 and 2 ranks
   trains on 4 and 8 sequences (the losses of --global-batch 4 and 8); --global-batch N gives the same
   losses on 1, 2 and 3 ranks (bitwise at step 0, within 1e-5 after the reductions, whose order the
   world size changes; bitwise against --batch N / world on the same world); --global-batch not
   dividing world x --grad-accum, or given with --batch, is a one-line usage error (exit 2) naming
   the flags and values, printed once on 2 ranks; fsdp-train's --global-batch sets the same batch.
2. --clip-grad-norm on both tools; --clip-grad and --clip are rejected with one line
   "unknown flag --clip-grad (did you mean --clip-grad-norm?)"; a typo gets the nearest flag.
3. choices parse case-insensitively (--strategy FULL_SHARD, --mixed-precision BF16); the banner and
   fsdp-ckpt speak fp32 (convert --dtype fp32, f32 refused); fsdp-ckpt info prints the strategy's name.
4. fsdp-train --no-sync with --grad-accum 2 on 2 ranks: the losses of the synced run, fewer bytes sent.
5. fsdp-plan train|minimal: every flag of the tool with the same help text, the planner's own flags,
   --offload-dir accepted, the old --model form refused, and the prediction equal to the run's
   measured memory (the `memory rank 0:` line) for a few argv lists of each tool."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc  # noqa: E402

ENC = ["--layers", "2", "--d-model", "32", "--heads", "4", "--ffn", "64", "--seq", "4", "--dropout", "0",
       "--steps", "3", "--lr", "1e-3", "--threads", "1"]
GPT = ["--layers", "2", "--d-model", "32", "--heads", "4", "--seq", "16", "--vocab", "256", "--steps", "3",
       "--threads", "1", "--warmup", "1", "--lr", "3e-3"]


def tool_lines(stderr, prog):
    """The tool's own stderr lines (not mpirun's boxes)."""
    return [x for x in stderr.splitlines() if x.startswith(prog + ":")]


def usage_error(chk, label, r, prog, words):
    """Exit 2 with one line of the tool naming every word in words."""
    lines = tool_lines(r.stderr, prog)
    chk.true(f"{label}: exit 2, one line naming {' '.join(words)}",
             r.returncode == 2 and len(lines) == 1 and all(w in lines[0] for w in words),
             f"exit {r.returncode}, stderr:\n{r.stderr}")


def numbers(text, prefix):
    line = next((x for x in text.splitlines() if x.startswith(prefix)), "")
    return {k: float(v) for k, v in re.findall(r"([a-z_]+) ([0-9.]+)", line)}


def help_entries(text):
    """--help's flag entries: each flag line with its indented lines, keyed by the flag."""
    entries, cur = {}, None
    for line in text.splitlines():
        if line.startswith("  --"):
            cur = line.split()[0]
            entries[cur] = [line]
        elif line.startswith("      ") and cur:
            entries[cur].append(line)
        else:
            cur = None
    return {k: "\n".join(v) for k, v in entries.items()}


def main():
    args = parse_args()
    minimal, train, plan, tool = (os.path.join(args.bin, b) for b in ("fsdp-minimal", "fsdp-train", "fsdp-plan",
                                                                      "fsdp-ckpt"))
    chk = Checker("one vocabulary")

    # 1. --batch per rank, --global-batch over all ranks
    def enc(n, extra):
        return parse_losses(mpirun(n, [minimal] + ENC + extra).stdout)
    g4, g8 = enc(1, ["--global-batch", "4"]), enc(2, ["--global-batch", "8"])
    chk.close("fsdp-minimal --batch 4 on 1 rank == --global-batch 4 (4 sequences)", enc(1, ["--batch", "4"]), g4, 0, 0)
    chk.close("fsdp-minimal --batch 4 on 2 ranks == --global-batch 8 (8 sequences)", enc(2, ["--batch", "4"]), g8, 0, 0)
    g4_2 = enc(2, ["--global-batch", "4"])
    chk.true("... and differs from --global-batch 4 on 2 ranks (--batch is not global)",
             len(g4_2) == 3 and g4_2 != g8, f"{g4_2} vs {g8}")
    ref = enc(1, ["--global-batch", "6"])
    for n in (2, 3):
        got = enc(n, ["--global-batch", "6"])
        chk.close(f"--global-batch 6 on {n} ranks: step 0 loss bitwise equal to 1 rank", got[:1], ref[:1], 0, 0)
        chk.close(f"--global-batch 6 on {n} ranks: losses equal to 1 rank (reduction order)", got, ref, 1e-5, 0)
        chk.close(f"--global-batch 6 on {n} ranks == --batch {6 // n} (bitwise)", got,
                  enc(n, ["--batch", str(6 // n)]), 0, 0)
    chk.close("--global-batch 12 --grad-accum 2 on 2 ranks == --batch 3 --grad-accum 2",
              enc(2, ["--global-batch", "12", "--grad-accum", "2"]), enc(2, ["--batch", "3", "--grad-accum", "2"]), 0, 0)
    usage_error(chk, "fsdp-minimal --global-batch 5 on 2 ranks",
                mpirun(2, [minimal] + ENC + ["--global-batch", "5"], expect_ok=False), "fsdp-minimal",
                ["--global-batch 5", "2"])
    usage_error(chk, "fsdp-minimal --global-batch 6 --grad-accum 4",
                proc([minimal] + ENC + ["--global-batch", "6", "--grad-accum", "4"], expect_ok=False), "fsdp-minimal",
                ["--global-batch 6", "--grad-accum 4"])
    usage_error(chk, "fsdp-minimal --batch 2 --global-batch 4",
                proc([minimal] + ENC + ["--batch", "2", "--global-batch", "4"], expect_ok=False), "fsdp-minimal",
                ["--batch 2", "--global-batch 4"])
    usage_error(chk, "fsdp-train --global-batch 5 on 2 ranks",
                mpirun(2, [train] + GPT + ["--global-batch", "5"], expect_ok=False), "fsdp-train",
                ["--global-batch 5", "2"])
    usage_error(chk, "fsdp-train --batch 2 --global-batch 4",
                proc([train] + GPT + ["--batch", "2", "--global-batch", "4"], expect_ok=False), "fsdp-train",
                ["--batch 2", "--global-batch 4"])
    tg = parse_losses(mpirun(2, [train] + GPT + ["--global-batch", "8", "--grad-accum", "2"]).stdout)
    tb = parse_losses(mpirun(2, [train] + GPT + ["--batch", "2", "--grad-accum", "2"]).stdout)
    chk.close("fsdp-train --global-batch 8 --grad-accum 2 on 2 ranks == --batch 2", tg, tb, 0, 0)

    # 2. --clip-grad-norm, and the old spellings refused with a did-you-mean line
    for prog, binary, model in (("fsdp-train", train, GPT), ("fsdp-minimal", minimal, ENC)):
        for old in ("--clip-grad", "--clip"):
            r = proc([binary] + model + [old, "1"], expect_ok=False)
            want = f"{prog}: unknown flag {old} (did you mean --clip-grad-norm?)"
            chk.true(f"{prog} {old}: exit 2, '{want}'", r.returncode == 2 and r.stderr.strip() == want, r.stderr)
    r = proc([train] + GPT + ["--grad-acum", "2"], expect_ok=False)
    chk.true("a typo --grad-acum: did you mean --grad-accum?", r.returncode == 2 and
             "did you mean --grad-accum?" in r.stderr, r.stderr)
    clipped = parse_losses(proc([train] + GPT + ["--clip-grad-norm", "0.01"]).stdout)
    unclipped = parse_losses(proc([train] + GPT + ["--clip-grad-norm", "0"]).stdout)
    chk.true("fsdp-train --clip-grad-norm 0.01 changes the losses (it clips)", len(clipped) == 3 and
             clipped[1:] != unclipped[1:], f"{clipped} vs {unclipped}")
    r = proc([minimal] + ENC + ["--global-batch", "4", "--clip-grad-norm", "0.5"])
    chk.true("fsdp-minimal --clip-grad-norm logs the norm", "grad_norm" in r.stdout, r.stdout)

    # 3. case-insensitive choices, fp32, strategy names
    lower = enc(2, ["--global-batch", "4", "--strategy", "shard_grad_op"])
    chk.close("--strategy SHARD_GRAD_OP == shard_grad_op", enc(2, ["--global-batch", "4", "--strategy",
                                                                   "SHARD_GRAD_OP"]), lower, 0, 0)
    r = proc([minimal] + ENC + ["--global-batch", "4", "--strategy", "FULL_SHARD", "--mixed-precision", "BF16",
                                "--summary"])
    chk.true("--strategy FULL_SHARD --mixed-precision BF16 accepted (param_dtype bf16)",
             "FULL_SHARD" in r.stdout and "param_dtype bf16" in r.stdout, r.stdout)
    r = proc([train] + GPT + ["--steps", "1"])
    chk.true("fsdp-train's banner: precision fp32 (reduce fp32", "precision fp32 (reduce fp32" in r.stdout, r.stdout)
    with tempfile.TemporaryDirectory() as tmp:
        mpirun(2, [minimal] + ENC + ["--global-batch", "4", "--strategy", "shard_grad_op", "--ckpt-dir", f"{tmp}/s"])
        mpirun(2, [minimal] + ENC + ["--global-batch", "4", "--strategy", "no_shard", "--ckpt-dir", f"{tmp}/f",
                                     "--ckpt-type", "full"])
        info = proc([tool, "info", f"{tmp}/s/step_00000003"]).stdout
        chk.true("fsdp-ckpt info (sharded): strategy SHARD_GRAD_OP",
                 re.search(r"^\s+strategy\s+SHARD_GRAD_OP$", info, re.M) is not None, info)
        info = proc([tool, "info", f"{tmp}/f/step_00000003"]).stdout
        chk.true("fsdp-ckpt info (full): strategy NO_SHARD",
                 re.search(r"^\s+strategy\s+NO_SHARD$", info, re.M) is not None, info)
        proc([tool, "convert", f"{tmp}/s/step_00000003", f"{tmp}/bf", "--dtype", "bf16"])
        r = proc([tool, "convert", f"{tmp}/bf", f"{tmp}/fp", "--dtype", "fp32"], expect_ok=False)
        chk.true("fsdp-ckpt convert --dtype fp32 accepted", r.returncode == 0, r.stderr)
        r = proc([tool, "convert", f"{tmp}/bf", f"{tmp}/f32", "--dtype", "f32"], expect_ok=False)
        chk.true("fsdp-ckpt convert --dtype f32 refused, naming fp32", r.returncode == 2 and "fp32" in r.stderr,
                 r.stderr)

    # 4. fsdp-train --no-sync
    accum = GPT + ["--batch", "2", "--grad-accum", "2", "--summary"]
    synced = mpirun(2, [train] + accum).stdout
    nosync = mpirun(2, [train] + accum + ["--no-sync"]).stdout
    chk.close("fsdp-train --grad-accum 2 --no-sync: losses of the synced run", parse_losses(nosync),
              parse_losses(synced), 1e-5, 0)
    sent = [numbers(x, "memory rank 0:").get("bytes_sent_per_step") for x in (synced, nosync)]
    chk.true(f"... and fewer bytes sent per step ({sent[1]} < {sent[0]})",
             None not in sent and sent[1] < 0.9 * sent[0], str(sent))

    # 5. fsdp-plan train|minimal: the tool's flags, help and prediction
    for sub, binary in (("train", train), ("minimal", minimal)):
        tool_help = help_entries(proc([binary, "--help"]).stdout)
        plan_help = help_entries(proc([plan, sub, "--help"]).stdout)
        missing = [f for f, text in tool_help.items() if plan_help.get(f) != text]
        chk.true(f"fsdp-plan {sub} --help: all {len(tool_help)} flags of fsdp-{sub} with the same help",
                 len(tool_help) > 40 and not missing, f"differ or missing: {missing}")
        chk.true(f"fsdp-plan {sub} --help: plus --world-size and --no-shared-memory",
                 {"--world-size", "--no-shared-memory"} <= set(plan_help), str(sorted(plan_help)))
    r = proc([plan, "--model", "gpt2"], expect_ok=False)
    chk.true("fsdp-plan --model gpt2: exit 2 pointing to the subcommands", r.returncode == 2 and
             "fsdp-plan train" in r.stderr, r.stderr)
    keys = ["parameters", "gradients", "optimizer", "unsharded_peak", "activations_peak"]
    with tempfile.TemporaryDirectory() as off:
        cases = [
            ("train", train, 2, GPT + ["--global-batch", "8", "--summary", "--steps", "2"]),
            ("train", train, 2, GPT + ["--batch", "2", "--grad-accum", "2", "--summary", "--steps", "2"]),
            ("train", train, 2, GPT + ["--global-batch", "4", "--offload-dir", off, "--summary", "--steps", "2"]),
            ("train", train, 3, GPT + ["--global-batch", "6", "--strategy", "SHARD_GRAD_OP", "--summary", "--steps",
                                       "2"]),
            ("minimal", minimal, 2, ENC + ["--global-batch", "8", "--summary"]),
            ("minimal", minimal, 2, ENC + ["--batch", "2", "--grad-accum", "2", "--activation-checkpointing",
                                           "--summary"]),
        ]
        for sub, binary, n, argv in cases:
            label = f"fsdp-plan {sub} == fsdp-{sub} on {n} ranks {' '.join(argv[len(GPT if sub == 'train' else ENC):])}"
            measured = numbers(mpirun(n, [binary] + argv).stdout, "memory rank 0:")
            predicted = numbers(proc([plan, sub, "--world-size", str(n)] + argv).stdout, "prediction:")
            want = keys + (["communication", "workspace", "bytes_sent_per_step"] if sub == "train" else [])
            for k in want:
                chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 1e-3, 64)
    chk.report()


if __name__ == "__main__":
    main()
