"""Frozen parameters (--freeze GLOB, requires_grad=False) against PyTorch: a float64 GPT-2 (Hugging
Face names and Conv1D layout, test_gpt2_parity.py's) with the same parameters requires_grad_(False),
AdamW (weight decay and clip_grad_norm_ see only the trainable ones), the same weights and tokens.

- whole blocks frozen (h.0.* and wpe.weight) and a mix inside every unit (*.bias, h.1.ln_*, and the
  tied wte.weight: no embedding or LM-head weight gradient), on 1 rank and on 2-4 ranks under
  full_shard, shard_grad_op, no_shard and hybrid_shard: the loss of every step, the first step's
  gradients of the trainable parameters (the dump holds no frozen parameter), the trainable parameters
  after the last step, and the frozen ones bit-unchanged;
- per-rank gradient and AdamW bytes (the tool's accounting) are exactly those of the trainable
  segments, and the bytes sent per step are exactly the all-gathers of every parameter plus the
  reduce-scatters of the trainable ones (so they fall by the frozen share);
- --deterministic with frozen parameters: 1 and 2 ranks bit-identical;
- a sharded checkpoint saved on 2 ranks (no AdamW moments for frozen parameters) resumed on 3, and a
  full one resumed on 1, end where the uninterrupted run ends; fsdp-ckpt reshards it (resumed on 4: the
  same end) and converts it to bf16 (it resumes);
- fsdp-minimal (the encoder stack: Linear layers and in_proj) with a block frozen: 1 and 2 ranks agree,
  and the frozen block differs from the unfrozen run only in what training changed;
- bad globs: one-line errors."""
import fnmatch
import json
import os
import sys

import numpy as np
import torch

from fsdp_testlib import (Checker, memory_line, mpirun, parse_args, parse_losses, proc, st_load, st_read, st_save,
                          tmpdir)
from test_gpt2_parity import GPT2

V, MAXT, L, C, H, T, GB = 96, 16, 3, 64, 4, 16, 12  # vocab, positions, layers, width, heads, seq, global batch
STEPS, LR, WD, CLIP = 4, 2e-3, 1.0, 0.5  # decay: lr x wd x |p| x steps ~ 1e-4, well above the tolerance
FREEZES = {
    "blocks": ["h.0.*", "wpe.weight"],
    "mixed": ["*.bias", "h.1.ln_*", "wte.weight"],
}
RUNS = [  # freeze set, ranks, extra flags
    ("blocks", 1, []), ("blocks", 3, []), ("blocks", 2, ["--strategy", "shard_grad_op"]),
    ("mixed", 1, []), ("mixed", 2, []), ("mixed", 4, ["--strategy", "hybrid_shard", "--shard-group-size", "2"]),
    ("mixed", 2, ["--strategy", "no_shard"]), ("mixed", 3, ["--activation-checkpointing"]),
    ("mixed", 2, ["--offload-dir", "TMP"]),
]


def frozen(name, globs):
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def reference(init, idx, targets, globs):
    """float64 PyTorch: losses, first-step gradients (after clipping) and final state of a run with the
    parameters matching globs frozen."""
    torch.manual_seed(0)
    model = GPT2(V, MAXT, L, C, H).double()
    model.load_state_dict({k: torch.from_numpy(v).double() for k, v in init.items()})
    for name, p in model.named_parameters():
        p.requires_grad_(not frozen(name, globs))
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=LR, weight_decay=WD)
    losses, grads, smallest = [], None, {}
    for step in range(STEPS):
        opt.zero_grad()
        loss = model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, CLIP)
        if step == 0:
            grads = {k: p.grad.clone().numpy() for k, p in model.named_parameters() if p.requires_grad}
        for k, p in model.named_parameters():  # each element's smallest |gradient| relative to its tensor's largest
            if p.requires_grad:
                rel = (p.grad.abs() / (p.grad.abs().max() + 1e-30)).numpy()
                smallest[k] = np.minimum(smallest.get(k, rel), rel)
        losses.append(loss.item())
        opt.step()
    return losses, grads, {k: v.numpy() for k, v in model.state_dict().items()}, smallest


def shapes():
    """Parameter name -> numel in the model's registration order, per unit (block units, then the root)."""
    block = [("ln_1.weight", C), ("ln_1.bias", C), ("attn.c_attn.weight", 3 * C * C), ("attn.c_attn.bias", 3 * C),
             ("attn.c_proj.weight", C * C), ("attn.c_proj.bias", C), ("ln_2.weight", C), ("ln_2.bias", C),
             ("mlp.c_fc.weight", 4 * C * C), ("mlp.c_fc.bias", 4 * C), ("mlp.c_proj.weight", 4 * C * C),
             ("mlp.c_proj.bias", C)]
    units = [[(f"h.{i}.{n}", k) for n, k in block] for i in range(L)]
    units.append([("wte.weight", V * C), ("wpe.weight", MAXT * C), ("ln_f.weight", C), ("ln_f.bias", C)])
    return units


def layout(globs, group):
    """Per unit (padded, grad_padded) under the engine's rule: trainable and frozen segments, each
    padded to a multiple of 16 x the shard group."""
    q = 16 * group
    up = lambda n: (n + q - 1) // q * q  # noqa: E731
    out = []
    for unit in shapes():
        t = sum(k for n, k in unit if not frozen(n, globs))
        f = sum(k for n, k in unit if frozen(n, globs))
        out.append((up(t) + up(f), up(t)))
    return out


def main():
    args = parse_args()
    chk = Checker("freeze parity")
    train = os.path.join(args.bin, "fsdp-train")
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    init = {k: v.detach().numpy().copy() for k, v in GPT2(V, MAXT, L, C, H).state_dict().items()}
    idx = torch.from_numpy(rng.integers(0, V, (GB, T))).long()
    targets = torch.from_numpy(rng.integers(0, V, (GB, T))).long()
    tmp = tmpdir()
    paths = {k: os.path.join(tmp, k + ".safetensors") for k in ("init", "input")}
    st_save(paths["init"], {k: torch.from_numpy(v) for k, v in init.items()})
    st_save(paths["input"], {"idx": idx.int(), "targets": targets.int()})
    model = ["--vocab", str(V), "--max-seq", str(MAXT), "--layers", str(L), "--d-model", str(C), "--heads", str(H),
             "--seq", str(T), "--global-batch", str(GB), "--lr", str(LR), "--weight-decay", str(WD),
             "--clip-grad-norm", str(CLIP), "--warmup", "0", "--lr-schedule", "constant", "--threads", "1",
             "--init", paths["init"], "--input", paths["input"]]
    refs = {name: reference(init, idx, targets, globs) for name, globs in FREEZES.items()}

    def freeze_flags(globs):
        return [x for g in globs for x in ("--freeze", g)]

    finals = {}
    for ri, (name, world, extra) in enumerate(RUNS):
        globs = FREEZES[name]
        label = f"[{name}, {world} rank(s) {' '.join(extra) or 'full_shard'}]"
        dump, final = os.path.join(tmp, f"g{ri}.safetensors"), os.path.join(tmp, f"f{ri}.safetensors")
        finals[(name, world, tuple(extra))] = final
        extra = [tmp if x == "TMP" else x for x in extra]
        r = mpirun(world, [train] + model + ["--steps", str(STEPS), "--dump-grads", dump, "--save", final, "--summary"] +
                   freeze_flags(globs) + extra)
        losses, grads, state, smallest = refs[name]
        chk.close(f"{label} losses", parse_losses(r.stdout), losses, 2e-6, 0)
        g = st_load(dump)
        chk.true(f"{label} the gradient dump holds exactly the trainable parameters", sorted(g) == sorted(grads),
                 f"{sorted(set(g) ^ set(grads))}")
        for k in sorted(grads):
            if k in g:
                scale = float(np.abs(grads[k]).max()) + 1e-30
                chk.close(f"{label} grad {k}", g[k], grads[k], 1e-3, 1e-5 * scale)
        fin = st_load(final)
        for k, ref in state.items():
            if frozen(k, globs):
                chk.true(f"{label} frozen {k} bit-unchanged", np.array_equal(fin[k], init[k]))
            else:  # AdamW turns fp32 rounding of a near-zero gradient into a step of up to lr: elements whose
                # gradient was ever below 1e-3 of its tensor's largest are held to that bound, the rest to rounding
                big = smallest[k] > 1e-3
                chk.close(f"{label} param after {STEPS} steps {k}", fin[k][big], ref[big], 1e-4, 3e-5)
                if not big.all():
                    chk.close(f"{label} param after {STEPS} steps {k} (near-zero gradients: within {STEPS} x lr)",
                              fin[k][~big], ref[~big], 0, STEPS * LR)
        if extra:
            continue
        # accounting: gradient shards and AdamW moments of the trainable segments only; bytes sent per step:
        # every parameter all-gathered (block units twice: forward and backward), trainable ones reduce-scattered
        mem = memory_line(r.stdout)
        lay = layout(globs, world)
        grad_shard = sum(gp for _, gp in lay) // world
        chk.true(f"{label} gradient bytes = 4 x trainable shard ({4 * grad_shard})", mem.get("gradients") == 4 * grad_shard,
                 f"accounted {mem.get('gradients')}")
        chk.true(f"{label} AdamW bytes = 8 x trainable shard", mem.get("optimizer") == 8 * grad_shard,
                 f"accounted {mem.get('optimizer')}")
        if world > 1:  # (runs without --save and --dump-grads, whose gathers would count too; a few bytes of
            # loss and norm reductions on top)
            frac = (world - 1) / world
            sent = frac * 4 * (sum(2 * p for p, _ in lay[:-1]) + lay[-1][0] + sum(gp for _, gp in lay))
            r1 = mpirun(world, [train] + model + ["--steps", "2", "--summary"] + freeze_flags(globs))
            chk.close(f"{label} bytes sent per step: all-gathers of all + reduce-scatters of the trainable",
                      [memory_line(r1.stdout).get("bytes_sent_per_step")], [sent], 0, 16)
            full = layout([], world)
            sent_full = frac * 4 * (sum(2 * p for p, _ in full[:-1]) + full[-1][0] + sum(gp for _, gp in full))
            r0 = mpirun(world, [train] + model + ["--steps", "2", "--summary"])
            chk.close(f"{label} unfrozen bytes sent per step (same model)", [memory_line(r0.stdout).get("bytes_sent_per_step")],
                      [sent_full], 0, 16)
            chk.true(f"{label} freezing sends less per step", sent < sent_full, f"{sent} vs {sent_full}")

    # bf16 mixed precision (parameters gathered in bf16, frozen ones too): frozen values bit-unchanged in the
    # fp32 master shards, losses within bf16's distance of the float64 reference
    bf16 = os.path.join(tmp, "bf16.safetensors")
    r = mpirun(2, [train] + model + ["--steps", str(STEPS), "--save", bf16, "--mixed-precision", "bf16"] +
               freeze_flags(FREEZES["mixed"]))
    chk.close("[mixed, 2 ranks, bf16] losses within 1e-2 of the float64 reference", parse_losses(r.stdout),
              refs["mixed"][0], 1e-2, 0)
    fin = st_load(bf16)
    chk.true("[mixed, 2 ranks, bf16] frozen parameters bit-unchanged, trainable ones moved",
             all(np.array_equal(fin[k], init[k]) == frozen(k, FREEZES["mixed"]) for k in init))

    # --deterministic: frozen parameters keep 1 and 2 ranks bit-identical
    det = {}
    for world in (1, 2):
        out = os.path.join(tmp, f"det{world}.safetensors")
        flags = ["--vocab", "256", "--layers", "2", "--d-model", "32", "--heads", "2", "--seq", "16", "--global-batch",
                 "4", "--threads", "1"]  # the built-in corpus, 4 chunks of one sequence
        mpirun(world, [train] + flags + ["--steps", "3", "--deterministic", "--save", out] + freeze_flags(FREEZES["mixed"]))
        det[world] = st_load(out)
    chk.identical("--deterministic with frozen parameters: 1 and 2 ranks bit-identical", det[2], det[1])

    # checkpoints: no moments for frozen parameters; resumed on another world size, the same end
    globs = FREEZES["mixed"]
    for ckpt_type, save_world, resume_world in (("sharded", 2, 3), ("full", 2, 1)):
        d = os.path.join(tmp, f"ck_{ckpt_type}")
        end = os.path.join(tmp, f"end_{ckpt_type}.safetensors")
        ref_end = finals[("mixed", save_world, ())]  # the 4-step run on save_world ranks above
        mpirun(save_world, [train] + model + ["--steps", "2", "--ckpt-dir", d, "--ckpt-type", ckpt_type] +
               freeze_flags(globs))
        step_dir = os.path.join(d, "step_00000002")
        files = [f for f in os.listdir(step_dir) if f.endswith(".safetensors") and f != "index.safetensors"]
        keys = set()
        for f in files:
            keys |= set(st_read(os.path.join(step_dir, f))[0])
        moments = sorted(k for k in keys if k.startswith("exp_avg"))
        want = sorted(f"{m}.{n}" for m in ("exp_avg", "exp_avg_sq") for unit in shapes() for n, _ in unit
                      if not frozen(n, globs))
        chk.true(f"[{ckpt_type} checkpoint] AdamW moments exactly for the trainable parameters", moments == want,
                 f"{len(moments)} vs {len(want)}: {sorted(set(moments) ^ set(want))[:4]}")
        mpirun(resume_world, [train] + model + ["--steps", str(STEPS), "--ckpt-dir", d, "--resume", "auto", "--save",
                                                end] + freeze_flags(globs))
        a, b = st_load(end), st_load(ref_end)
        chk.close(f"[{ckpt_type} checkpoint] saved on {save_world}, resumed on {resume_world}: final parameters",
                  np.concatenate([a[k].ravel() for k in sorted(b)]), np.concatenate([b[k].ravel() for k in sorted(b)]),
                  1e-5, 1e-6)
        chk.true(f"[{ckpt_type} checkpoint] frozen parameters still bit-unchanged after the resume",
                 all(np.array_equal(a[k], init[k]) for k in init if frozen(k, globs)))
        if ckpt_type != "sharded":
            continue
        # fsdp-ckpt carries a checkpoint without moments for frozen parameters: resharded for 4 ranks it
        # resumes to the same end; converted to bf16 it resumes (--allow-lowp-resume)
        ckpt_tool = os.path.join(args.bin, "fsdp-ckpt")
        r4, b16 = os.path.join(tmp, "ck_r4"), os.path.join(tmp, "ck_b16")
        proc([ckpt_tool, "reshard", step_dir, r4, "--world-size", "4"])
        r4_keys = set()
        for f in os.listdir(r4):
            if f.startswith("shard_"):
                r4_keys |= set(st_read(os.path.join(r4, f))[0])
        chk.true("[fsdp-ckpt reshard] moments still exactly for the trainable parameters",
                 sorted(k for k in r4_keys if k.startswith("exp_avg")) == want)
        end4 = os.path.join(tmp, "end_r4.safetensors")
        mpirun(4, [train] + model + ["--steps", str(STEPS), "--resume", r4, "--save", end4] + freeze_flags(globs))
        a4 = st_load(end4)
        chk.close("[fsdp-ckpt reshard] resharded for 4 ranks and resumed there: final parameters",
                  np.concatenate([a4[k].ravel() for k in sorted(b)]), np.concatenate([b[k].ravel() for k in sorted(b)]),
                  1e-5, 1e-6)
        proc([ckpt_tool, "convert", step_dir, b16, "--dtype", "bf16"])
        r = mpirun(2, [train] + model + ["--steps", str(STEPS), "--resume", b16, "--allow-lowp-resume"] + freeze_flags(globs))
        chk.close("[fsdp-ckpt convert --dtype bf16] resumes: losses within bf16 rounding of the fp32 run's",
                  parse_losses(r.stdout), refs["mixed"][0][2:], 1e-3, 0)

    # fsdp-minimal: the encoder stack with block 0 frozen
    minimal = [os.path.join(args.bin, "fsdp-minimal"), "--layers", "2", "--d-model", "32", "--heads", "2", "--ffn",
               "64", "--seq", "8", "--global-batch", "8", "--threads", "1", "--dropout", "0"]
    m_init, m_end = os.path.join(tmp, "m_init.safetensors"), {w: os.path.join(tmp, f"m_end{w}.safetensors") for w in (1, 2)}
    mpirun(1, minimal + ["--steps", "0", "--save", m_init])
    ml = {w: parse_losses(mpirun(w, minimal + ["--steps", "3", "--freeze", "0.*", "--save", m_end[w]]).stdout)
          for w in (1, 2)}
    unfrozen = parse_losses(mpirun(1, minimal + ["--steps", "3"]).stdout)
    chk.close("fsdp-minimal --freeze '0.*': 2 ranks = 1 rank", ml[2], ml[1], 1e-5, 0)
    chk.true("fsdp-minimal --freeze '0.*': the losses differ from the unfrozen run after the first step",
             len(ml[1]) == len(unfrozen) == 3 and ml[1][0] == unfrozen[0] and ml[1][2] != unfrozen[2],
             f"{ml[1]} vs {unfrozen}")
    m0, m1 = st_load(m_init), st_load(m_end[2])
    chk.true("fsdp-minimal --freeze '0.*': layer 0 bit-unchanged, layer 1 trained",
             len(m0) > 0 and all(np.array_equal(m1[k], m0[k]) == k.startswith("0.") for k in m0),
             f"{[k for k in m0 if np.array_equal(m1[k], m0[k]) != k.startswith('0.')][:5]}")

    # bad globs: one line, non-zero exit, naming the glob
    for bad, want in (("h.9.*", "matches no parameter"), ("nothing", "matches no parameter"), (",", "comma-separated"),
                      ("h.0.*,", "comma-separated")):
        r = proc([train] + model + ["--steps", "1", "--freeze", bad], expect_ok=False)
        lines = [x for x in r.stderr.strip().splitlines() if x]
        chk.true(f"--freeze '{bad}': a one-line error, exit 2", r.returncode == 2 and len(lines) == 1 and want in lines[0],
                 f"exit {r.returncode}: {r.stderr.strip()[:300]}")
    r = mpirun(2, [train] + model + ["--steps", "1", "--freeze", "h.9.*"], expect_ok=False)
    said = [x for x in r.stderr.splitlines() if "matches no parameter" in x]
    chk.true("--freeze 'h.9.*' on 2 ranks: one line (rank 0), exit 2", r.returncode == 2 and len(said) == 1,
             f"exit {r.returncode}, {len(said)} lines")
    # a --config file's --freeze values are replaced by the command line's, which add up among themselves;
    # the JSONL's config record holds the result as a string
    cfg, jsonl = os.path.join(tmp, "freeze.cfg"), os.path.join(tmp, "freeze.jsonl")
    with open(cfg, "w") as f:
        f.write("freeze h.0.*\nfreeze wpe.weight\n")
    for extra, want in (([], "h.0.*,wpe.weight"), (["--freeze", "h.1.*", "--freeze", "wte.weight"], "h.1.*,wte.weight")):
        proc([train] + model + ["--steps", "1", "--config", cfg, "--log-jsonl", jsonl] + extra)
        with open(jsonl) as f:
            got = json.loads(f.readline())["config"].get("freeze")
        chk.true(f"--config with --freeze, then {' '.join(extra) or 'nothing'} on the command line: {want}", got == want,
                 f"got {got!r}")
    chk.report()


if __name__ == "__main__":
    sys.exit(main())
