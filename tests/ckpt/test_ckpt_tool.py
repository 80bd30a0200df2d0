"""fsdp-ckpt: info, verify (and a flipped byte caught), consolidate (PyTorch loads the file with
strict=True and computes the loss our trainer computes), reshard N -> M (resuming from it equals
resuming from the original) and convert to bf16 (resumes within bf16 rounding)."""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import MPI_ENV, Checker, parse_args, parse_losses, proc, st_load, st_save, tmpdir  # noqa: E402
from test_gpt2_parity import GPT2  # noqa: E402

L, C, H, T, V = 2, 48, 4, 16, 256
MODEL = ["--layers", str(L), "--d-model", str(C), "--heads", str(H), "--seq", str(T), "--threads", "1"]


def sh(cmd, env=None, expect_ok=True):
    """A command (mpirun or a tool); a failed run ends the test unless expect_ok is False."""
    return proc(cmd, expect_ok=expect_ok, env={**MPI_ENV, **(env or {})})


losses = parse_losses


def main():
    args = parse_args()
    train, tool = os.path.join(args.bin, "fsdp-train"), os.path.join(args.bin, "fsdp-ckpt")
    tmp = tmpdir()
    chk = Checker("fsdp-ckpt")
    r = sh(["mpirun", "-np", "2", train] + MODEL + ["--batch", "6", "--steps", "3", "--save-every", "3",
                                                    "--ckpt-dir", f"{tmp}/ck"])
    ck = f"{tmp}/ck/step_00000003"
    r = sh([tool, "info", ck])
    chk.close("info: world size, step, tensors", [int("world_size    2" in r.stdout and "step          3" in r.stdout
                                                      and "h.1.mlp.c_fc.weight" in r.stdout)], [1], 0, 0)
    chk.close("verify: a good checkpoint passes", [sh([tool, "verify", ck]).returncode], [0], 0, 0)

    # consolidate, then PyTorch loads it strictly and gets our loss on a batch
    out = f"{tmp}/full.safetensors"
    chk.close("consolidate: exit status", [sh([tool, "consolidate", ck, out]).returncode], [0], 0, 0)
    model = GPT2(V, T, L, C, H)
    state = {k: torch.from_numpy(np.array(v)) for k, v in st_load(out).items()}
    model.load_state_dict(state, strict=True)
    rng = np.random.RandomState(3)
    idx, tgt = rng.randint(0, V, (4, T)), rng.randint(0, V, (4, T))
    with torch.no_grad():
        ref = model(torch.from_numpy(idx), torch.from_numpy(tgt)).item()
    st_save(f"{tmp}/batch.safetensors", {"idx": idx.astype(np.int64), "targets": tgt.astype(np.int64)})
    r = sh([train, "--init", out, "--heads", str(H), "--seq", str(T), "--batch", "4", "--steps", "1", "--input",
            f"{tmp}/batch.safetensors", "--threads", "1"])
    chk.close("PyTorch (strict load of the consolidated file) computes our loss", losses(r.stdout), [ref], 1e-5, 0)

    # strict and non-strict loading of a full state dict through --init
    full = st_load(out)
    extra = dict(full)
    extra["bogus.weight"] = np.zeros(3, np.float32)
    st_save(f"{tmp}/extra.safetensors", extra)
    missing = {k: v for k, v in full.items() if k != "h.1.ln_2.bias"}
    st_save(f"{tmp}/missing.safetensors", missing)
    base = [train, "--heads", str(H), "--seq", str(T), "--batch", "4", "--steps", "1", "--threads", "1"]
    for name, path, token in (("unexpected", "extra", "bogus.weight"), ("missing", "missing", "h.1.ln_2.bias")):
        r = sh(base + ["--init", f"{tmp}/{path}.safetensors"], expect_ok=False)
        chk.close(f"strict --init with a {name} tensor: fails naming it",
                  [int(r.returncode != 0 and token in r.stderr and len(r.stderr.strip().splitlines()) == 1)], [1], 0, 0)
        r = sh(base + ["--init", f"{tmp}/{path}.safetensors", "--init-nonstrict"], expect_ok=False)
        chk.close(f"--init-nonstrict with a {name} tensor: trains and reports it",
                  [int(r.returncode == 0 and token in r.stderr and "note" in r.stderr)], [1], 0, 0)

    # reshard 2 -> 3: resuming from it on 3 ranks equals resuming from the original on 3 ranks
    chk.close("reshard: exit status", [sh([tool, "reshard", ck, f"{tmp}/rs3", "--world-size", "3"]).returncode], [0], 0, 0)
    a = losses(sh(["mpirun", "-np", "3", train] + MODEL + ["--batch", "4", "--steps", "6", "--resume", ck]).stdout)
    b = losses(sh(["mpirun", "-np", "3", train] + MODEL + ["--batch", "4", "--steps", "6", "--resume",
                                                           f"{tmp}/rs3"]).stdout)
    chk.close("resume from the resharded checkpoint == from the original", b, a, 0, 0)
    chk.close("convert: exit status", [sh([tool, "convert", ck, f"{tmp}/bf", "--dtype", "bf16"]).returncode], [0], 0, 0)
    c = losses(sh(["mpirun", "-np", "2", train] + MODEL + ["--batch", "6", "--steps", "6", "--resume",
                                                           f"{tmp}/bf", "--allow-lowp-resume"]).stdout)
    chk.close("resume from the bf16 checkpoint: within bf16 rounding", c, a, 2e-3, 0)

    # a flipped byte: verify names the file and fails
    path = f"{tmp}/rs3/shard_00002.safetensors"
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(path, "wb").write(bytes(data))
    r = sh([tool, "verify", f"{tmp}/rs3"], expect_ok=False)
    chk.close("verify: a flipped byte fails, naming the file", [int(r.returncode != 0 and "shard_00002" in r.stderr)],
              [1], 0, 0)
    r = sh([tool, "info", f"{tmp}/nonexistent"], expect_ok=False)
    chk.close("info on a missing checkpoint: one-line error", [int(r.returncode != 0 and len(r.stderr.splitlines()) == 1)],
              [1], 0, 0)
    chk.report()


if __name__ == "__main__":
    main()
