"""Self-describing files: every file the tools write records the model configuration (Hugging Face
style keys) and the run's settings, and loading takes the shape from it.

fsdp-train (GPT-2 with 8 heads, vocab 300, 24 positions: none of them the defaults): a sharded and a
full checkpoint resume without any shape flag and continue exactly as the uninterrupted run; --init of
its --save file without shape flags computes the loss that the same --init with the shape flags spelled
out computes; a flag contradicting the file is a one-line error naming the flag, the given value and
the file's; fsdp-ckpt info prints the configuration and settings; consolidate, reshard and convert
carry them over (a resharded checkpoint resumes without shape flags); a bf16-converted checkpoint is
refused for training unless --allow-lowp-resume, and then resumes within bf16 rounding.
fsdp-minimal (TransformerEncoderLayer stack, non-default nhead, ffn, activation, norm_first,
batch_first) likewise: resume and --init without shape flags, contradiction error, wrong model_type, a
recorded value outside the flag's range."""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc, st_load, st_read, st_save, tmpdir  # noqa: E402

ENV = {"OMP_NUM_THREADS": "1"}
GPT = ["--layers", "2", "--d-model", "32", "--heads", "8", "--vocab", "300", "--max-seq", "24"]
RUN = ["--seq", "16", "--batch", "2", "--threads", "1", "--lr", "3e-3", "--warmup", "1"]
CONFIG = {"model_type": "gpt2", "n_layer": "2", "n_embd": "32", "n_head": "8", "vocab_size": "300",
          "n_positions": "24"}
ENC = ["--layers", "2", "--d-model", "32", "--heads", "8", "--ffn", "48", "--activation", "gelu", "--norm-first",
       "--batch-first"]
ENC_RUN = ["--seq", "4", "--global-batch", "4", "--threads", "1", "--lr", "1e-3"]
ENC_CONFIG = {"model_type": "transformer_encoder", "num_layers": "2", "d_model": "32", "nhead": "8",
              "dim_feedforward": "48", "activation": "gelu", "norm_first": "true", "batch_first": "true"}


def meta(path):
    return st_read(path)[0].get("__metadata__", {})


def refused(chk, label, r, pattern):
    """A run that must fail with one stderr line matching pattern."""
    lines = r.stderr.strip().splitlines()
    chk.true(label, r.returncode != 0 and len(lines) == 1 and re.search(pattern, lines[0]) is not None,
             f"rc {r.returncode}, stderr {r.stderr.strip()[-400:]!r}")


def main():
    args = parse_args()
    train, minimal, tool = (os.path.join(args.bin, b) for b in ("fsdp-train", "fsdp-minimal", "fsdp-ckpt"))
    tmp = tmpdir()
    chk = Checker("self-describing files")

    # the uninterrupted run, with a sharded checkpoint after step 2 and the weights at the end
    full_run = parse_losses(proc([train] + GPT + RUN + ["--steps", "4", "--ckpt-dir", f"{tmp}/ck", "--save-every", "2",
                                                        "--save", f"{tmp}/m.safetensors"], env=ENV).stdout)
    ck = f"{tmp}/ck/step_00000002"
    index = meta(f"{ck}/index.safetensors")
    chk.true("checkpoint index records the configuration", all(index.get(k) == v for k, v in CONFIG.items()), str(index))
    chk.true("checkpoint index records the settings", index.get("setting.lr") == "0.003" and
             index.get("setting.seq") == "16" and index.get("setting.save-every") == "2", str(index))
    chk.true("--save file records the configuration",
             all(meta(f"{tmp}/m.safetensors").get(k) == v for k, v in CONFIG.items()), str(meta(f"{tmp}/m.safetensors")))

    # --resume without shape flags continues exactly
    r = proc([train] + RUN + ["--steps", "4", "--resume", ck], env=ENV)
    chk.close("sharded checkpoint resumes without shape flags == uninterrupted run (steps 2-3)",
              parse_losses(r.stdout), full_run[2:], 0, 0)
    proc([train] + GPT + RUN + ["--steps", "2", "--ckpt-dir", f"{tmp}/fk", "--save-every", "2", "--ckpt-type", "full"],
         env=ENV)
    fk = f"{tmp}/fk/step_00000002"
    chk.true("full checkpoint: both files record the configuration", all(
        meta(f"{fk}/{f}.safetensors").get(k) == v for f in ("model", "optimizer") for k, v in CONFIG.items()))
    r = proc([train] + RUN + ["--steps", "4", "--resume", fk], env=ENV)
    chk.close("full checkpoint resumes without shape flags == uninterrupted run (steps 2-3)",
              parse_losses(r.stdout), full_run[2:], 0, 0)

    # --init without shape flags builds the saved model (8 heads, not the default 4)
    m = f"{tmp}/m.safetensors"
    spelled = parse_losses(proc([train] + GPT + RUN + ["--steps", "1", "--init", m], env=ENV).stdout)
    bare = parse_losses(proc([train] + RUN + ["--steps", "1", "--init", m], env=ENV).stdout)
    chk.close("--init without shape flags == with them spelled out (first loss)", bare, spelled, 0, 0)

    # flags that contradict the file
    refused(chk, "--resume with --heads 4 on an 8-head checkpoint: error naming both",
            proc([train] + RUN + ["--heads", "4", "--steps", "4", "--resume", ck], expect_ok=False, env=ENV),
            r"--heads 4 .*n_head 8")
    refused(chk, "--init with --layers 3 on a 2-layer file: error naming both",
            proc([train] + RUN + ["--layers", "3", "--steps", "1", "--init", m], expect_ok=False, env=ENV),
            r"--layers 3 .*n_layer 2")
    refused(chk, "--resume auto with --vocab 256: error naming both",
            proc([train] + RUN + ["--vocab", "256", "--steps", "4", "--ckpt-dir", f"{tmp}/ck", "--resume", "auto"],
                 expect_ok=False, env=ENV), r"--vocab 256 .*vocab_size 300")

    # fsdp-ckpt info, consolidate, reshard, convert
    info = proc([tool, "info", ck]).stdout
    chk.true("fsdp-ckpt info prints the configuration and settings", re.search(r"config:", info) and
             re.search(r"n_head\s+8\b", info) and re.search(r"settings:", info) and re.search(r"\blr\s+0\.003\b", info),
             info[-800:])
    chk.true("fsdp-ckpt info FILE prints the configuration", re.search(r"n_positions\s+24\b",
                                                                       proc([tool, "info", m]).stdout) is not None)
    proc([tool, "consolidate", ck, f"{tmp}/c.safetensors"])
    cmeta = meta(f"{tmp}/c.safetensors")
    chk.true("consolidate keeps the configuration and settings (not the checkpoint's own keys)",
             all(cmeta.get(k) == v for k, v in CONFIG.items()) and cmeta.get("setting.lr") == "0.003"
             and "world_size" not in cmeta, str(cmeta))
    proc([tool, "reshard", ck, f"{tmp}/rs", "--world-size", "2"])
    rmeta = meta(f"{tmp}/rs/index.safetensors")
    chk.true("reshard keeps the configuration and settings", all(rmeta.get(k) == v for k, v in CONFIG.items())
             and rmeta.get("setting.lr") == "0.003" and rmeta.get("world_size") == "2", str(rmeta))
    r = mpirun(2, [train] + RUN[:2] + ["--batch", "1", "--threads", "1", "--lr", "3e-3", "--warmup", "1",
                                       "--steps", "4", "--resume", f"{tmp}/rs"])
    chk.close("resharded checkpoint resumes on 2 ranks without shape flags == uninterrupted run",
              parse_losses(r.stdout), full_run[2:], 1e-5, 0)
    proc([tool, "convert", ck, f"{tmp}/bf", "--dtype", "bf16"])
    bmeta = meta(f"{tmp}/bf/index.safetensors")
    chk.true("convert keeps the configuration and records dtype bf16",
             all(bmeta.get(k) == v for k, v in CONFIG.items()) and bmeta.get("dtype") == "bf16", str(bmeta))

    # a bf16 export is refused for training unless --allow-lowp-resume
    refused(chk, "resume from a bf16-converted checkpoint is refused, naming --allow-lowp-resume",
            proc([train] + RUN + ["--steps", "4", "--resume", f"{tmp}/bf"], expect_ok=False, env=ENV),
            r"BF16.*--allow-lowp-resume")
    r = proc([train] + RUN + ["--steps", "4", "--resume", f"{tmp}/bf", "--allow-lowp-resume"], env=ENV)
    chk.close("with --allow-lowp-resume it resumes (losses within bf16 rounding)", parse_losses(r.stdout),
              full_run[2:], 2e-3, 0)

    # fsdp-minimal: the encoder stack's configuration
    enc_run = parse_losses(proc([minimal] + ENC + ENC_RUN + ["--steps", "4", "--ckpt-dir", f"{tmp}/ek",
                                                             "--save-every", "2", "--save", f"{tmp}/e.safetensors"],
                                env=ENV).stdout)
    ek = f"{tmp}/ek/step_00000002"
    emeta = meta(f"{ek}/index.safetensors")
    chk.true("fsdp-minimal: checkpoint and --save file record the encoder configuration", all(
        emeta.get(k) == v and meta(f"{tmp}/e.safetensors").get(k) == v for k, v in ENC_CONFIG.items()), str(emeta))
    r = proc([minimal] + ENC_RUN + ["--steps", "4", "--resume", ek], env=ENV)
    chk.close("fsdp-minimal: resumes without shape flags == uninterrupted run (steps 2-3)", parse_losses(r.stdout),
              enc_run[2:], 0, 0)
    e = f"{tmp}/e.safetensors"
    spelled = parse_losses(proc([minimal] + ENC + ENC_RUN + ["--steps", "1", "--init", e], env=ENV).stdout)
    bare = parse_losses(proc([minimal] + ENC_RUN + ["--steps", "1", "--init", e], env=ENV).stdout)
    chk.close("fsdp-minimal: --init without shape flags == with them spelled out", bare, spelled, 0, 0)
    refused(chk, "fsdp-minimal: --activation relu on a gelu checkpoint: error naming both",
            proc([minimal] + ENC_RUN + ["--activation", "relu", "--steps", "4", "--resume", ek], expect_ok=False,
                 env=ENV), r"--activation relu .*activation gelu")
    refused(chk, "fsdp-minimal: --init of a GPT-2 file: error naming the model type",
            proc([minimal] + ENC_RUN + ["--steps", "1", "--init", m], expect_ok=False, env=ENV),
            r"model_type gpt2")
    bad = dict(meta(e), nhead="0")
    st_save(f"{tmp}/e_bad.safetensors", st_load(e), bad)
    refused(chk, "fsdp-minimal: a recorded value outside the flag's range (nhead 0): error naming it",
            proc([minimal] + ENC_RUN + ["--steps", "1", "--init", f"{tmp}/e_bad.safetensors"], expect_ok=False, env=ENV),
            r"nhead '0'.*--heads")
    chk.report()


if __name__ == "__main__":
    main()
