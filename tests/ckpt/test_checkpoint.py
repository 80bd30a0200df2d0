"""Sharded checkpoints through fsdp-train: exact (bitwise) resume on the same world size, resume on any
other world size 1-4 and another strategy, --keep-last rotation, --resume auto skipping incomplete
checkpoints, a rank killed mid-save leaving the previous checkpoint loadable, and damaged checkpoints
(flipped byte, missing shard, truncated shard, another model) failing with a message naming the file
or tensor."""
import json
import os
import shutil
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc, st_load, st_read, st_save, tmpdir  # noqa: E402

MODEL = ["--layers", "2", "--d-model", "48", "--heads", "4", "--seq", "16", "--threads", "1", "--lr", "3e-3"]
GLOBAL_BATCH = 12


def train(binary, n, extra, env=None, expect_ok=True):
    """fsdp-train on n ranks; a failed run ends the test unless expect_ok is False."""
    return mpirun(n, [binary] + MODEL + ["--batch", str(GLOBAL_BATCH // n)] + extra, expect_ok=expect_ok, env=env)


def steps_of(path):  # the step records (a run's first record is its {"config": ...})
    return [r for r in map(json.loads, open(path)) if "step" in r]


def losses(path):
    return [r["loss"] for r in steps_of(path)]


def main():
    args = parse_args()
    binary = os.path.join(args.bin, "fsdp-train")
    tmp = tmpdir()
    chk = Checker("checkpoints")

    # uninterrupted references, 6 steps, on 1 and 2 ranks
    ref = {}
    for n in (1, 2):
        train(binary, n, ["--steps", "6", "--log-jsonl", f"{tmp}/ref{n}.jsonl"])
        ref[n] = losses(f"{tmp}/ref{n}.jsonl")

    # exact resume: save after 3 steps, resume to 6, on the same world size: bitwise equal
    ck = f"{tmp}/ck2"
    train(binary, 2, ["--steps", "3", "--save-every", "3", "--ckpt-dir", ck])
    train(binary, 2, ["--steps", "6", "--resume", "auto", "--ckpt-dir", ck, "--log-jsonl", f"{tmp}/res.jsonl"])
    got = losses(f"{tmp}/res.jsonl")
    chk.close("resume on 2 ranks prints steps 3..5", [r["step"] for r in steps_of(f"{tmp}/res.jsonl")],
              [3, 4, 5], 0, 0)
    chk.close("resume on the same world size is bitwise identical", got, ref[2][3:], 0, 0)

    # N -> M: save on N ranks, resume on M ranks (and another strategy): fp32 reduction tolerance
    for n in (1, 2, 3, 4):
        ckn = f"{tmp}/ckn{n}"
        train(binary, n, ["--steps", "3", "--save-every", "3", "--ckpt-dir", ckn])
        for m in (1, 2, 3, 4):
            strategy = ["--strategy", "no_shard"] if (n + m) % 3 == 0 else []
            train(binary, m, ["--steps", "6", "--resume", f"{ckn}/step_00000003", "--log-jsonl",
                              f"{tmp}/r{n}{m}.jsonl"] + strategy)
            chk.close(f"saved on {n} ranks, resumed on {m}{' as no_shard' if strategy else ''}",
                      losses(f"{tmp}/r{n}{m}.jsonl"), ref[1][3:], 2e-5, 0)

    # full checkpoints (model.safetensors + optimizer.safetensors from rank 0): exact on the same world
    # size, within tolerance on another
    ckf = f"{tmp}/full"
    train(binary, 2, ["--steps", "3", "--save-every", "3", "--ckpt-dir", ckf, "--ckpt-type", "full"])
    chk.close("full checkpoint files", [int(sorted(os.listdir(f"{ckf}/step_00000003")) ==
                                            ["DONE", "model.safetensors", "optimizer.safetensors"])], [1], 0, 0)
    for m in (2, 3):
        train(binary, m, ["--steps", "6", "--resume", f"{ckf}/step_00000003", "--log-jsonl", f"{tmp}/f{m}.jsonl"])
        got = losses(f"{tmp}/f{m}.jsonl")
        if m == 2:
            chk.close("full checkpoint: resume on the same world size is bitwise identical", got, ref[2][3:], 0, 0)
        else:
            chk.close("full checkpoint saved on 2 ranks, resumed on 3", got, ref[1][3:], 2e-5, 0)

    # fsdp-minimal has the same flags: save on 2 ranks, resume on 4 as shard_grad_op
    minimal = os.path.join(args.bin, "fsdp-minimal")
    base = ["--dropout", "0", "--threads", "1", "--layers", "2", "--d-model", "32", "--heads", "4", "--ffn", "64",
            "--global-batch", "16"]
    whole = mpirun(2, [minimal] + base + ["--steps", "6"]).stdout
    mpirun(2, [minimal] + base + ["--steps", "3", "--save-every", "3", "--ckpt-dir", f"{tmp}/min"])
    resumed = mpirun(4, [minimal] + base + ["--steps", "6", "--resume", "auto", "--ckpt-dir", f"{tmp}/min",
                                            "--strategy", "shard_grad_op"]).stdout
    chk.close("fsdp-minimal: saved on 2 ranks, resumed on 4 (shard_grad_op)", parse_losses(resumed),
              parse_losses(whole)[3:], 2e-5, 0)

    # --keep-last 2 with a save every step keeps the two newest
    ckk = f"{tmp}/keep"
    train(binary, 2, ["--steps", "5", "--save-every", "1", "--keep-last", "2", "--ckpt-dir", ckk])
    entries = sorted(f for f in os.listdir(ckk) if not f.startswith("."))  # (.lock: the directory's lock file)
    chk.close("--keep-last 2 keeps the two newest", [int(entries == ["step_00000004", "step_00000005"])],
              [1], 0, 0)

    # --resume auto ignores a checkpoint without its DONE marker; a rank killed mid-save leaves the previous
    cka = f"{tmp}/auto"
    train(binary, 2, ["--steps", "2", "--save-every", "2", "--ckpt-dir", cka])
    r = train(binary, 2, ["--steps", "4", "--save-every", "2", "--resume", "auto", "--ckpt-dir", cka],
              env={"FSDP_TEST_CRASH_IN_SAVE": "4"}, expect_ok=False)
    chk.close("a rank killed during the save: the job fails", [int(r.returncode != 0)], [1], 0, 0)
    chk.close("... and the half-written checkpoint has no DONE",
              [int(not os.path.exists(f"{cka}/step_00000004/DONE"))], [1], 0, 0)
    r = train(binary, 2, ["--steps", "4", "--resume", "auto", "--ckpt-dir", cka, "--log-jsonl", f"{tmp}/auto.jsonl"])
    steps = [r["step"] for r in steps_of(f"{tmp}/auto.jsonl")]
    chk.close("--resume auto picks the last complete checkpoint (step 2)", steps, [2, 3], 0, 0)
    chk.close("... and continues exactly", losses(f"{tmp}/auto.jsonl"), ref[2][2:4], 0, 0)

    # damaged checkpoints: every rank fails with one message naming the file or tensor
    good = f"{tmp}/ck2/step_00000003"

    def damaged(name, mutate, expect):
        d = f"{tmp}/bad-{name}"
        shutil.copytree(good, d)
        mutate(d)
        r = train(binary, 2, ["--steps", "6", "--resume", d], expect_ok=False)
        lines = [line for line in r.stderr.splitlines() if line.startswith("fsdp-train:")]
        # the rank that found the damage names it; the others say another rank failed
        ok = r.returncode != 0 and any(all(e in line for e in expect) for line in lines)
        if not ok:
            print(name, r.returncode, r.stderr[-500:])
        chk.close(f"damaged checkpoint ({name}): clear error", [int(bool(ok))], [1], 0, 0)

    def flip(d):
        path = f"{d}/shard_00001.safetensors"
        data = bytearray(open(path, "rb").read())
        data[-10] ^= 0xFF
        open(path, "wb").write(bytes(data))

    def truncate(d):
        path = f"{d}/shard_00000.safetensors"
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])

    damaged("flipped byte", flip, ["shard_00001", "checksum"])
    damaged("missing shard", lambda d: os.remove(f"{d}/shard_00000.safetensors"), ["shard_00000"])
    damaged("truncated shard", truncate, ["shard_00000", "checksum"])
    damaged("no DONE marker", lambda d: os.remove(f"{d}/DONE"), ["DONE"])
    # a full checkpoint's files are checked against the CRC-32s listed in DONE
    bad_full = f"{tmp}/bad-full"
    shutil.copytree(f"{ckf}/step_00000003", bad_full)
    path = f"{bad_full}/model.safetensors"
    data = bytearray(open(path, "rb").read())
    data[-100] ^= 0x01
    open(path, "wb").write(bytes(data))
    r = train(binary, 2, ["--steps", "6", "--resume", bad_full], expect_ok=False)
    chk.close("damaged full checkpoint: clear error",
              [int(r.returncode != 0 and "model.safetensors" in r.stderr and "checksum" in r.stderr)], [1], 0, 0)
    r = proc([os.path.join(args.bin, "fsdp-ckpt"), "verify", bad_full], expect_ok=False)
    chk.close("fsdp-ckpt verify catches it", [int(r.returncode != 0 and "checksum" in r.stderr)], [1], 0, 0)
    other = [binary, "--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "16", "--batch", "6", "--threads",
             "1", "--steps", "6", "--resume"]
    r = mpirun(2, other + [good], expect_ok=False)
    chk.close("a checkpoint of another model: error naming the flag and both widths",
              [int(r.returncode != 0 and "--d-model 64" in r.stderr and "n_embd 48" in r.stderr)], [1], 0, 0)
    # an older checkpoint, without the configuration metadata: the load names a tensor and both shapes
    old = f"{tmp}/old_ckpt"
    shutil.copytree(good, old)
    header, _ = st_read(f"{old}/index.safetensors")
    keep = {k: v for k, v in header["__metadata__"].items() if k in (
        "format", "world_size", "strategy", "step", "seed", "global_batch", "adam_step") or k.startswith("crc32.")}
    st_save(f"{old}/index.safetensors", st_load(f"{old}/index.safetensors"), keep)
    crc = zlib.crc32(open(f"{old}/index.safetensors", "rb").read())
    open(f"{old}/DONE", "w").write(f"complete\nindex.safetensors {crc:08x}\n")
    r = mpirun(2, other + [old], expect_ok=False)
    chk.close("an older checkpoint of another model: error naming a tensor and shapes",
              [int(r.returncode != 0 and "shape" in r.stderr and "h.0." in r.stderr)], [1], 0, 0)
    chk.report()


if __name__ == "__main__":
    main()
