"""FSDP for the Llama family (fsdp-train --arch llama) on the built-in corpus, grouped-query and untied:
- every strategy at 2 and 4 ranks (HYBRID_SHARD 2 x 2) trains as 1 rank does (losses and saved weights
  within fp32 reduction-order rounding), FULL_SHARD at 3 ranks too;
- activation checkpointing: the same losses and the same bytes saved, and less activation memory;
- --deterministic: every byte of the saved weights and every printed loss the same on 1, 2 and 3 ranks;
- bf16 mixed precision: trains (losses within the bf16 distance of the fp32 run's, finite, falling);
- a sharded checkpoint written at step 2 on 2 ranks and resumed on 3 ends where the 4-step run ends;
- --eval-only from the --save file generates text, and the file records model_type llama;
- bad Llama flags are one-line errors with exit status 2."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, memory_line, mpirun, parse_args, parse_losses, proc, st_load, st_read, tmpdir  # noqa: E402

MODEL = ["--arch", "llama", "--layers", "3", "--d-model", "48", "--heads", "6", "--kv-heads", "2", "--d-ff", "96",
         "--seq", "16", "--global-batch", "12", "--steps", "4", "--lr", "3e-3", "--warmup", "0",
         "--lr-schedule", "constant", "--clip-grad-norm", "1.0"]


def train(chk, exe, n, extra, tmp, tag):
    out = os.path.join(tmp, tag + ".safetensors")
    r = mpirun(n, [exe] + MODEL + extra + ["--save", out])
    losses = parse_losses(r.stdout)
    chk.true(f"{tag}: 4 finite losses", len(losses) == 4 and all(np.isfinite(losses)), r.stdout[-400:])
    return losses, st_load(out), r.stdout, out


# Weights within 5% of one lr step (3e-3): ranks sum gradients in another order, and AdamW turns a
# rounding difference in a near-zero gradient into a part of a step; a wrong shard or offset moves
# weights by whole steps, a wrong gradient scale shows in the losses (compared at 2e-5).
WEIGHT_ATOL = 0.05 * 3e-3


def close_weights(chk, label, a, b, rtol=0.0, atol=WEIGHT_ATOL):
    chk.true(f"{label}: the same tensors", sorted(a) == sorted(b) and len(a) > 0, f"{sorted(set(a) ^ set(b))}")
    worst = max((float(np.max(np.abs(a[k] - b[k]) - atol - rtol * np.abs(b[k]))) for k in a if k in b), default=1.0)
    chk.close(f"{label}: weights beyond the tolerance", [max(worst, 0.0)], [0.0], 0, 0)


def main():
    args = parse_args()
    exe = os.path.join(args.bin, "fsdp-train")
    chk = Checker("llama fsdp")
    tmp = tmpdir()
    base, base_w, _, base_path = train(chk, exe, 1, [], tmp, "1 rank")
    chk.true("the model learns: loss falls over 4 steps", base[-1] < base[0], str(base))
    for n, strategy in ((2, "full_shard"), (3, "full_shard"), (2, "shard_grad_op"), (2, "no_shard"),
                        (4, "hybrid_shard"), (2, "ddp")):
        extra = ["--strategy", strategy] + (["--shard-group-size", "2"] if strategy == "hybrid_shard" else [])
        losses, w, _, _ = train(chk, exe, n, extra, tmp, f"{strategy} {n} ranks")
        chk.close(f"{strategy} {n} ranks: losses = 1 rank's", losses, base, 2e-5, 0)
        close_weights(chk, f"{strategy} {n} ranks", w, base_w)
    # activation checkpointing: same bits, less memory
    plain, plain_w, plain_out, _ = train(chk, exe, 2, ["--summary"], tmp, "2 ranks")
    ac, ac_w, ac_out, _ = train(chk, exe, 2, ["--summary", "--activation-checkpointing"], tmp, "2 ranks checkpointed")
    chk.close("activation checkpointing: identical losses", ac, plain, 0, 0)
    chk.identical("activation checkpointing: identical weights", ac_w, plain_w)
    pa, pb = memory_line(plain_out).get("activations_peak", 0), memory_line(ac_out).get("activations_peak", 0)
    chk.true(f"activation checkpointing: activation peak {pa:.0f} -> {pb:.0f} bytes, smaller", 0 < pb < pa)
    # deterministic: the same bits on any world size
    det = [train(chk, exe, n, ["--deterministic"], tmp, f"deterministic {n} ranks") for n in (1, 2, 3)]
    for n, (losses, w, _, _) in zip((2, 3), det[1:]):
        chk.close(f"--deterministic {n} ranks: identical losses", losses, det[0][0], 0, 0)
        chk.identical(f"--deterministic {n} ranks: identical weights", w, det[0][1])
    chk.close("--deterministic trains the same model: losses within 1e-4 of the default mode's", det[0][0], base,
              1e-4, 0)
    # bf16 mixed precision
    bf, _, _, _ = train(chk, exe, 2, ["--mixed-precision", "bf16"], tmp, "bf16 2 ranks")
    chk.close("bf16: losses within the bf16 distance of fp32's", bf, base, 2e-2, 0)
    # sharded checkpoint at step 2 on 2 ranks, resumed on 3: the 4-step run's end
    ckpt = os.path.join(tmp, "ckpt")
    steps = MODEL.index("--steps")
    mpirun(2, [exe] + MODEL[:steps] + ["--steps", "2"] + MODEL[steps + 2:] + ["--ckpt-dir", ckpt])
    # the checkpoint consolidated into a Hugging Face directory: config.json from the recorded configuration
    hf_dir = os.path.join(tmp, "consolidated")
    step_dir = os.path.join(ckpt, sorted(x for x in os.listdir(ckpt) if x.startswith("step_"))[-1])
    proc([os.path.join(args.bin, "fsdp-ckpt"), "consolidate", step_dir, hf_dir])
    with open(os.path.join(hf_dir, "config.json")) as f:
        hc = json.load(f)
    chk.true("fsdp-ckpt consolidate DIR: a LlamaForCausalLM config.json of the model's shape",
             hc.get("architectures") == ["LlamaForCausalLM"] and hc.get("num_key_value_heads") == 2 and
             hc.get("intermediate_size") == 96 and hc.get("num_hidden_layers") == 3 and
             hc.get("tie_word_embeddings") is False, json.dumps(hc)[:300])
    r = proc([exe, "--init", hf_dir, "--eval-only", "--seq", "16", "--global-batch", "2", "--eval-batches", "1"])
    chk.true("the consolidated directory loads (--init DIR, its config.json alone)",
             "Llama 3 layers, d_model 48, 6 heads (2 key/value" in r.stdout and "val_loss" in r.stdout, r.stdout[-300:])
    resumed_path = os.path.join(tmp, "resumed.safetensors")
    r = mpirun(3, [exe] + MODEL + ["--ckpt-dir", ckpt, "--resume", "auto", "--save", resumed_path], expect_ok=False)
    if r.returncode == 0:
        close_weights(chk, "checkpoint on 2 ranks resumed on 3", st_load(resumed_path), base_w)
        chk.close("resumed losses = the run's steps 2, 3", parse_losses(r.stdout)[-2:], base[2:], 2e-5, 0)
    else:
        chk.fail("resume on 3 ranks", r.stdout[-500:] + r.stderr[-500:])
    # the file is self-describing: --eval-only rebuilds the model from it alone and generates
    header, _ = st_read(base_path)
    meta = header.get("__metadata__", {})
    chk.true("--save records model_type llama and the shape", meta.get("model_type") == "llama" and
             meta.get("num_key_value_heads") == "2" and meta.get("intermediate_size") == "96", json.dumps(meta)[:300])
    r = proc([exe, "--init", base_path, "--eval-only", "--max-new-tokens", "24", "--seq", "16", "--global-batch", "2"])
    chk.true("--eval-only from the file alone: a Llama of its shape, 24 tokens generated",
             "Llama 3 layers, d_model 48, 6 heads (2 key/value" in r.stdout and "--- sample (24 tokens) ---" in r.stdout,
             r.stdout[-400:])
    # bad flags: one line, exit 2
    for flags, words in ((["--kv-heads", "4"], "--kv-heads 4 must divide --heads 6"),
                         (["--head-dim", "7"], "must be even"),
                         (["--rope-scaling", "yarn:2"], "--rope-scaling 'yarn:2'"),
                         (["--attention-bias", "--qkv-bias"], "drop --qkv-bias")):
        r = proc([exe] + MODEL + flags, expect_ok=False)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        chk.true(f"bad {' '.join(flags)}: exit 2 and one line naming it", r.returncode == 2 and len(lines) == 1 and
                 words in lines[0], f"rc {r.returncode}: {r.stderr[-300:]}")
    r = proc([exe, "--arch", "gpt2", "--kv-heads", "2", "--steps", "1"], expect_ok=False)
    chk.true("--kv-heads with --arch gpt2: exit 2, one line", r.returncode == 2 and
             "--kv-heads applies to the Llama family" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
             r.stderr[-300:])
    chk.report()


if __name__ == "__main__":
    main()
