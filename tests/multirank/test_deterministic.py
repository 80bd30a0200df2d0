"""--deterministic: the same bits on any world size (docs/deterministic.md).

For every strategy, in fp32 and bf16, fsdp-train runs the same global batch on 1 rank (2 threads), 2 and
4 ranks (1 thread each; 3 ranks for full_shard), with dropout and clipping on; every printed loss and
gradient norm (the JSONL's round-trip digits, validation loss included) and every byte of the saved
parameters must equal the 1-rank run's. So must runs with --grad-accum given, activation
checkpointing, --offload-dir, other wrap policies, the guard device, and a run checkpointed on 2 ranks
and resumed on 3 and on 4. fsdp-minimal (dropout 0.1, fp32 and bf16) likewise on 1, 2 and 4 ranks.
The deterministic run must also train the default mode's model: on one process with the same 12
micro-batches, losses and norms within 1e-4 and weights within rounding (a gradient that is lost,
mis-scaled or zero would still be the same on every world size). The default mode, on the same runs,
must differ between world sizes in fp32 (so this comparison can see a difference). Bad flag combinations are one-line errors with exit status 2."""
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, proc, st_read, tmpdir  # noqa: E402



def write_corpus(path):
    """A byte-level text of 64 KiB, the same on every run (the tests need no data from outside the repository)."""
    words = ["the", "of", "and", "to", "shard", "gather", "reduce", "rank", "step", "loss", "model", "bits", "same"]
    state, out = 12345, []
    while sum(len(w) + 1 for w in out) < 65536:
        state = (state * 1103515245 + 12345) % 2**31
        out.append(words[state % len(words)] + ("\n" if state % 11 == 0 else ""))
    with open(path, "w") as f:
        f.write(" ".join(out))
# a tiny GPT; 12 sequences per step, 12 chunks: world sizes 1, 2, 3, 4 all divide them
TRAIN = ["--layers", "2", "--d-model", "32", "--heads", "2", "--seq", "16", "--global-batch", "12",
         "--steps", "3", "--dropout", "0.1", "--clip-grad-norm", "0.5", "--lr", "3e-3", "--warmup", "0",
         "--lr-schedule", "constant"]  # constant: a run cut short at step 2 updates as the whole run does
MINIMAL = ["--layers", "2", "--d-model", "32", "--heads", "4", "--ffn", "64", "--seq", "4", "--global-batch", "8",
           "--steps", "3", "--clip-grad-norm", "0.5"]
STRATEGIES = ["full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "ddp"]


def threads(n):
    return ["--threads", "2" if n == 1 else "1"]


def strategy_flags(strategy, n):
    flags = ["--strategy", strategy]
    if strategy == "hybrid_shard" and n % 2 == 0:
        flags += ["--shard-group-size", "2"]
    return flags


def tensors(path):
    """{name: raw bytes} of a safetensors file (metadata, which names the run's own flags, left out)."""
    header, data = st_read(path)
    return {k: data[e["data_offsets"][0]:e["data_offsets"][1]] for k, e in header.items() if k != "__metadata__"}


def train(binary, n, tmp, label, extra, env=None):
    """Runs fsdp-train; returns (the JSONL records' loss, grad_norm and val_loss texts, {tensor: bytes})."""
    out = os.path.join(tmp, label + ".safetensors")
    log = os.path.join(tmp, label + ".jsonl")
    mpirun(n, [binary] + TRAIN + threads(n) + extra + ["--save", out, "--log-jsonl", log], env=env)
    with open(log) as f:
        text = f.read()
    records = re.findall(r'"step": \d+, "loss": ([^,]+), "grad_norm": ([^,]+)', text)
    vals = re.findall(r'"val_loss": ([^,}]+)', text)
    return records + vals, tensors(out)


def minimal(binary, n, tmp, label, extra):
    out = os.path.join(tmp, label + ".safetensors")
    r = mpirun(n, [binary] + MINIMAL + threads(n) + extra + ["--save", out])
    lines = re.findall(r"^step \d+ loss \S+ grad_norm \S+$", r.stdout, re.M)
    return lines, tensors(out)


def same(chk, label, got, ref, steps):
    logged, params = got
    ok_log = len(logged) >= steps and logged == ref[0] and "null" not in str(logged) and "nan" not in str(logged)
    chk.true(f"{label}: {len(logged)} printed losses/norms identical", ok_log, f"{logged}\nvs {ref[0]}")
    bad = sorted(k for k in ref[1] if params.get(k) != ref[1][k])
    chk.true(f"{label}: {len(params)} saved tensors bit-identical", len(params) == len(ref[1]) > 0 and not bad,
             f"{len(params)} vs {len(ref[1])} tensors; differ: {', '.join(bad)[:300]}")


def main():
    args = parse_args()
    train_bin = os.path.join(args.bin, "fsdp-train")
    minimal_bin = os.path.join(args.bin, "fsdp-minimal")
    tmp = tmpdir()
    chk = Checker("deterministic")
    data = os.path.join(tmp, "corpus.txt")
    write_corpus(data)
    det = ["--deterministic", "--data", data, "--val-data", data, "--eval-every", "2", "--eval-batches", "1"]

    for precision in ("fp32", "bf16"):
        base = det + ["--mixed-precision", precision]
        ref = train(train_bin, 1, tmp, f"ref-{precision}", base)
        chk.true(f"{precision}: the reference logged 3 steps and 2 validations", len(ref[0]) == 5, str(ref[0]))
        for strategy in STRATEGIES:
            for n in ((1, 2, 3, 4) if strategy == "full_shard" else (2, 4)):
                label = f"{precision}-{strategy}-{n}"
                same(chk, f"{precision} {strategy} on {n} rank(s)",
                     train(train_bin, n, tmp, label, base + strategy_flags(strategy, n)), ref, 5)
        if precision == "fp32":
            variants = {
                "--grad-accum 6 on 2 ranks": (2, ["--grad-accum", "6"]),
                "--det-chunks 12 --grad-accum 3 on 4 ranks": (4, ["--det-chunks", "12", "--grad-accum", "3"]),
                "activation checkpointing on 2 ranks": (2, ["--activation-checkpointing"]),
                "--offload-dir on 2 ranks": (2, ["--offload-dir", os.path.join(tmp, "offload")]),
                "--wrap none on 3 ranks": (3, ["--wrap", "none"]),
                "--wrap size:3000 shard_grad_op on 2 ranks": (2, ["--wrap", "size:3000", "--strategy", "shard_grad_op"]),
                "--device guard on 2 ranks": (2, ["--device", "guard"]),
                "forward prefetch, no backward prefetch, 4 ranks": (4, ["--forward-prefetch", "--backward-prefetch",
                                                                        "none"]),
            }
            os.makedirs(os.path.join(tmp, "offload"), exist_ok=True)
            for label, (n, extra) in variants.items():
                same(chk, label, train(train_bin, n, tmp, "v-" + re.sub(r"\W+", "_", label), base + extra), ref, 5)

            # checkpointed on 2 ranks after 2 of 3 steps, resumed on 3 and on 4
            for n in (3, 4):
                ck = os.path.join(tmp, f"ck{n}")
                first = train(train_bin, 2, tmp, f"ck-a{n}", base + ["--ckpt-dir", ck, "--steps", "2"])
                second = train(train_bin, n, tmp, f"ck-b{n}", base + ["--ckpt-dir", ck, "--resume", "auto"])
                logged = first[0][:2] + second[0][:1] + first[0][2:] + second[0][1:]  # steps, then validations
                same(chk, f"checkpoint of 2 ranks resumed on {n}", (logged, second[1]), ref, 5)
                shutil.rmtree(ck)

            # the chunking decides the bits: 3 chunks of 4 sequences is another (equally exact) run
            ref3 = train(train_bin, 1, tmp, "c3-1", base + ["--det-chunks", "3"])
            same(chk, "--det-chunks 3 on 3 ranks", train(train_bin, 3, tmp, "c3-3", base + ["--det-chunks", "3"]), ref3, 5)
            chk.true("--det-chunks 3 differs from 12 chunks", ref3[1] != ref[1])

            # and it trains the same model as the default mode: on one process with the same micro-batches
            # (--grad-accum 12, dropout keyed alike) the losses and weights agree to rounding, so a gradient
            # lost, mis-scaled or left at zero fails here even though it would be the same on every world size
            same_chunks = train(train_bin, 1, tmp, "plain-accum", ["--data", data, "--global-batch", "12", "--grad-accum",
                                                                   "12"])
            # the training records (loss, norm): validation chunks the batch differently in the two modes
            chk.close("deterministic losses and norms vs the default mode, same chunks (1 process)",
                      [float(x) for rec in ref[0][:3] for x in rec], [float(x) for rec in same_chunks[0][:3] for x in rec],
                      1e-4, 0)
            moved = [k for k in ref[1] if np.frombuffer(ref[1][k], np.float32).size and
                     not np.allclose(np.frombuffer(ref[1][k], np.float32), np.frombuffer(same_chunks[1][k], np.float32),
                                     rtol=1e-3, atol=1e-5)]
            chk.true("deterministic weights vs the default mode's, same chunks: within rounding", not moved,
                     f"differ: {moved[:5]}")

            # the default mode is not world-size independent: the comparison above can see a difference
            plain = ["--data", data, "--global-batch", "12"]
            p1 = train(train_bin, 1, tmp, "plain-1", plain)
            p2 = train(train_bin, 2, tmp, "plain-2", plain)
            chk.true("without --deterministic, 1 and 2 ranks differ in the last bits", p1[1] != p2[1] and p1[0] != p2[0])

    for precision in ("fp32", "bf16"):
        base = ["--deterministic", "--mixed-precision", precision]
        ref = minimal(minimal_bin, 1, tmp, f"min-{precision}-1", base)
        chk.true(f"fsdp-minimal {precision}: 3 steps printed", len(ref[0]) == 3, str(ref[0]))
        for n in (2, 4):
            for strategy in (("full_shard", "no_shard", "hybrid_shard") if precision == "fp32" else ("full_shard",)):
                same(chk, f"fsdp-minimal {precision} {strategy} on {n} ranks",
                     minimal(minimal_bin, n, tmp, f"min-{precision}-{strategy}-{n}",
                             base + strategy_flags(strategy, n)), ref, 3)

    # flags that cannot work together: one line naming them, exit status 2
    bad = {
        "needs --global-batch": ["--deterministic"],
        "does not divide --global-batch": ["--deterministic", "--global-batch", "12", "--det-chunks", "5"],
        "needs --deterministic": ["--global-batch", "12", "--det-chunks", "4"],
        "--no-sync does not apply": ["--deterministic", "--global-batch", "12", "--no-sync"],
        "--reduce-dtype bf16 does not apply": ["--deterministic", "--global-batch", "12", "--reduce-dtype", "bf16"],
        "micro-steps (one chunk each)": ["--deterministic", "--global-batch", "12", "--det-chunks", "12",
                                         "--grad-accum", "4"],
        "not divisible by the world size": ["--deterministic", "--global-batch", "12", "--det-chunks", "3"],
        "--batch 4 with --deterministic": ["--deterministic", "--global-batch", "12", "--batch", "4"],
    }
    for want, flags in bad.items():
        for binary in (train_bin, minimal_bin):
            n = 2 if "world size" in want else 1
            r = mpirun(n, [binary] + flags + ["--steps", "1"], expect_ok=False) if n > 1 else \
                proc([binary] + flags + ["--steps", "1"], expect_ok=False)
            tool = os.path.basename(binary)
            err = [line for line in r.stderr.splitlines() if line.startswith(tool)]
            chk.true(f"{tool} {' '.join(flags)}: exit 2, one line naming the flags",
                     r.returncode == 2 and len(err) == 1 and want in err[0] and (n > 1 or r.stderr.count("\n") == 1),
                     f"exit {r.returncode}, stderr {r.stderr!r}")
    chk.report()


if __name__ == "__main__":
    main()
