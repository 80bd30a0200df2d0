"""LoRA (--lora-*, Hugging Face PEFT's LoraLayer on GPT-2's Conv1D projections) against PyTorch: a float64
GPT-2 (test_gpt2_parity.py's, Hugging Face names and the Conv1D (in, out) layout) whose targeted
projections get PEFT-style adapters written here by hand (y = x W + b + alpha/r (dropout(x) A^T) B^T,
A (r, in), B (out, r), as nn.Linear lora_A / lora_B), every base parameter requires_grad_(False), AdamW
(weight decay) and clip_grad_norm_ over the adapters only, the same base weights, adapters and tokens.

- c_attn + c_fc adapters (r 4, alpha 8, B non-zero from --lora-init so A trains from step 0) on 1, 2 and
  3 ranks full_shard, 2 ranks shard_grad_op, 4 ranks hybrid_shard (shard groups of 2) and 3 ranks with
  --activation-checkpointing: the loss of every step, the first step's adapter gradients (--dump-grads
  holds exactly the adapters), the adapters after the last step (--save's PEFT file), the base weights
  bit-unchanged and AdamW moments only for adapters (a full checkpoint);
- --lora-targets c_proj (both attn.c_proj and mlp.c_proj) on 2 ranks: the same parity, and the saved
  names; --lora-dropout 0.1: finite losses that differ from dropout 0, and with B = 0 the first loss is
  the base model's (dropout only on the adapters' input);
- PEFT's default init (no --lora-init, --steps 0 --save): B exactly zero, A uniform in +-1/sqrt(in)
  (extremes, spread, mean), distinct per adapter, the same on 1 and 2 ranks, and the first loss is the
  base model's;
- the PEFT file: tensor names and shapes exactly base_model.model.transformer.h.N.<target>.lora_A.weight
  [r, in] / lora_B.weight [out, r], adapter_config.json (r, lora_alpha, target_modules,
  fan_in_fan_out); read back with --lora-init and saved again (--steps 0): identical bytes; names
  without the base_model.model.transformer. prefix load too;
- --lora-merge-on-save: the merged file has no adapter and our base names, untargeted weights
  bit-unchanged, W + alpha/r (B A)^T for targeted ones (adapters from the same run's final full
  checkpoint), and the plain GPT-2 with it gives the logits of base + adapters;
- per-rank gradient and AdamW bytes are 4x and 8x the adapters' shard (two-segment padding), and the
  bytes sent per step are the all-gathers of everything plus reduce-scatters of the adapters only, less
  than without LoRA;
- a sharded checkpoint saved on 2 ranks after 2 steps (moments only for adapters) resumed on 3 ranks to
  step 4 ends where the uninterrupted 2-rank run ends;
- --mixed-precision bf16 on 2 ranks: base weights bit-unchanged, losses within 1e-2 of float64;
- bad input (--lora-rank 0, --lora-targets ln_1, --lora-alpha without --lora-rank,
  --lora-merge-on-save without --save, --lora-init of a missing file / a file missing an adapter / a
  wrongly shaped adapter / an extra tensor): a one-line error naming the problem, non-zero exit."""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

from fsdp_testlib import (Checker, memory_line, mpirun, parse_args, parse_losses, proc, st_load, st_read, st_save,
                          tmpdir)
from test_gpt2_parity import GPT2

V, MAXT, L, C, H, T, GB = 96, 16, 3, 64, 4, 16, 12  # vocab, positions, layers, width, heads, seq, global batch
R, ALPHA = 4, 8.0  # LoRA rank and alpha: scale 2
STEPS, LR, WD, CLIP = 4, 2e-3, 0.5, 0.2  # clipping active at every step (adapter gradient norms ~0.5)
PEFT = "base_model.model.transformer."
SITES = {"c_attn": ["attn.c_attn"], "c_fc": ["mlp.c_fc"], "c_proj": ["attn.c_proj", "mlp.c_proj"]}
DIMS = {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C), "mlp.c_proj": (4 * C, C)}  # in, out
MAIN = "c_attn,c_fc"
RUNS = [  # ranks, extra flags
    (1, []), (2, []), (3, []), (2, ["--strategy", "shard_grad_op"]),
    (4, ["--strategy", "hybrid_shard", "--shard-group-size", "2"]), (3, ["--activation-checkpointing"]),
]


def sites(targets):
    """"c_attn,c_fc" -> the layer names within a block, in the block's order."""
    want = {s for t in targets.split(",") for s in SITES[t]}
    return [s for s in DIMS if s in want]


def adapter_names(targets):
    """Our adapter names (h.N.<site>.lora_A/B.weight) in registration order, with their shapes."""
    return [(f"h.{i}.{s}.lora_{ab}.weight", [R, DIMS[s][0]] if ab == "A" else [DIMS[s][1], R])
            for i in range(L) for s in sites(targets) for ab in "AB"]


class LoRAConv1D(nn.Module):
    """PEFT's LoraLayer around Hugging Face's Conv1D (fan_in_fan_out): the base weight (in, out) and bias
    stay where they were (same names), lora_A (r, in) and lora_B (out, r) are nn.Linear weights."""

    def __init__(self, base, r, alpha, dropout=0.0):
        super().__init__()
        nin, nout = base.weight.shape
        self.weight, self.bias = base.weight, base.bias
        self.lora_A, self.lora_B = nn.Linear(nin, r, bias=False), nn.Linear(r, nout, bias=False)
        self.scale, self.drop = alpha / r, nn.Dropout(dropout)

    def forward(self, x):
        y = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)
        return y + self.scale * self.lora_B(self.lora_A(self.drop(x)))


def build(base, adapters, targets):
    """float64 GPT-2 with the base weights, LoRA on targets (adapters: our names; None: no LoRA)."""
    torch.manual_seed(0)
    model = GPT2(V, MAXT, L, C, H).double()
    model.load_state_dict({k: torch.from_numpy(np.array(v)).double() for k, v in base.items()})
    if adapters is not None:
        for i, blk in enumerate(model.h):
            for s in sites(targets):
                parent, leaf = s.split(".")
                mod = getattr(blk, parent)
                setattr(mod, leaf, LoRAConv1D(getattr(mod, leaf), R, ALPHA).double())
        with torch.no_grad():
            for k, p in model.named_parameters():
                if ".lora_" in k:
                    p.copy_(torch.from_numpy(np.array(adapters[k])).double())
    for k, p in model.named_parameters():  # PEFT: the base model is frozen
        p.requires_grad_(".lora_" in k)
    return model


def logits(model, idx):
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for blk in model.h:
        x = blk(x)
    return model.ln_f(x) @ model.wte.weight.t()


def reference(base, adapters, targets, idx, tgt):
    """Losses, first-step adapter gradients (after clipping), final adapters and each element's smallest
    |gradient| relative to its tensor's largest over the run."""
    model = build(base, adapters, targets)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=LR, weight_decay=WD)
    losses, grads, smallest, norms = [], None, {}, []
    for step in range(STEPS):
        opt.zero_grad()
        loss = model(idx, tgt)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, CLIP)))
        named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
        if step == 0:
            grads = {k: p.grad.clone().numpy() for k, p in named}
        for k, p in named:
            rel = (p.grad.abs() / (p.grad.abs().max() + 1e-30)).numpy()
            smallest[k] = np.minimum(smallest.get(k, rel), rel)
        losses.append(loss.item())
        opt.step()
    final = {k: p.detach().numpy().copy() for k, p in model.named_parameters() if ".lora_" in k}
    return {"losses": losses, "grads": grads, "final": final, "smallest": smallest, "norms": norms}


def layout(targets, group):
    """Per unit (padded, grad_padded): the adapters (trainable) and the base (frozen) segments, each padded
    to a multiple of 16 x the shard group; targets None: no LoRA, everything trainable."""
    q = 16 * group
    up = lambda n: (n + q - 1) // q * q  # noqa: E731
    block = 12 * C * C + 13 * C  # ln_1, c_attn, c_proj, ln_2, c_fc, mlp.c_proj: weights and biases
    lora = sum(int(np.prod(s)) for _, s in adapter_names(targets)) // L if targets else 0
    units = [(up(lora) + up(block), up(lora)) if targets else (up(block), up(block)) for _ in range(L)]
    root = V * C + MAXT * C + 2 * C
    units.append((up(root), 0) if targets else (up(root), up(root)))
    return units


def peft_file(adapters):
    return {PEFT + k: v for k, v in adapters.items()}


def ours(peft):
    """A PEFT adapter file's tensors under our names."""
    return {k[len(PEFT):] if k.startswith(PEFT) else k: v for k, v in peft.items()}


def main():
    args = parse_args()
    chk = Checker("lora parity")
    train = os.path.join(args.bin, "fsdp-train")
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    base = {k: v.detach().numpy().copy() for k, v in GPT2(V, MAXT, L, C, H).state_dict().items()}
    idx = torch.from_numpy(rng.integers(0, V, (GB, T))).long()
    tgt = torch.from_numpy(rng.integers(0, V, (GB, T))).long()
    tmp = tmpdir()
    path = lambda *p: os.path.join(tmp, *p)  # noqa: E731
    st_save(path("init.safetensors"), base)
    st_save(path("input.safetensors"), {"idx": idx.int(), "targets": tgt.int()})

    def start_adapters(targets):  # A as PEFT draws it, B non-zero so that A has a gradient from step 0
        out = {}
        for k, shape in adapter_names(targets):
            if ".lora_A." in k:
                bound = 1 / math.sqrt(shape[1])
                out[k] = rng.uniform(-bound, bound, shape).astype(np.float32)
            else:
                out[k] = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        return out

    starts = {t: start_adapters(t) for t in (MAIN, "c_proj")}
    for t, a in starts.items():
        st_save(path(f"start_{t.replace(',', '_')}.safetensors"), peft_file(a))
    start_path = {t: path(f"start_{t.replace(',', '_')}.safetensors") for t in starts}
    model = ["--vocab", str(V), "--max-seq", str(MAXT), "--layers", str(L), "--d-model", str(C), "--heads", str(H),
             "--seq", str(T), "--global-batch", str(GB), "--lr", str(LR), "--weight-decay", str(WD),
             "--clip-grad-norm", str(CLIP), "--warmup", "0", "--lr-schedule", "constant", "--threads", "1",
             "--init", path("init.safetensors"), "--input", path("input.safetensors")]

    def lora(targets, init=True, dropout=None):
        flags = ["--lora-rank", str(R), "--lora-alpha", f"{ALPHA:g}", "--lora-targets", targets]
        if dropout is not None:
            flags += ["--lora-dropout", str(dropout)]
        return flags + (["--lora-init", start_path[targets]] if init else [])

    refs = {t: reference(base, starts[t], t, idx, tgt) for t in starts}
    chk.true(f"(the reference clips at every step: norms {['%.3f' % n for n in refs[MAIN]['norms']]} > {CLIP})",
             min(refs[MAIN]["norms"]) > CLIP)
    base_loss = build(base, None, MAIN)(idx, tgt).item()

    def check_training(label, r, ref, dump, adapters_file):
        chk.close(f"{label} losses", parse_losses(r.stdout), ref["losses"], 2e-6, 0)
        g = st_load(dump)
        chk.true(f"{label} the gradient dump holds exactly the adapters", sorted(g) == sorted(ref["grads"]),
                 f"{sorted(set(g) ^ set(ref['grads']))[:6]}")
        for k in sorted(ref["grads"]):
            if k in g:
                scale = float(np.abs(ref["grads"][k]).max()) + 1e-30
                chk.close(f"{label} grad {k}", g[k], ref["grads"][k], 1e-3, 1e-5 * scale)
        fin = ours(st_load(adapters_file))
        chk.true(f"{label} the saved file holds exactly the adapters", sorted(fin) == sorted(ref["final"]),
                 f"{sorted(set(fin) ^ set(ref['final']))[:6]}")
        for k, want in sorted(ref["final"].items()):
            if k not in fin:
                continue
            # AdamW turns fp32 rounding of a near-zero gradient into a step of up to lr: elements whose
            # gradient was ever below 1e-3 of their tensor's largest are held to that bound, the rest to rounding
            big = ref["smallest"][k] > 1e-3
            chk.close(f"{label} adapter after {STEPS} steps {k}", fin[k][big], want[big], 1e-4, 3e-5)
            if not big.all():
                chk.close(f"{label} adapter after {STEPS} steps {k} (near-zero gradients: within {STEPS} x lr)",
                          fin[k][~big], want[~big], 0, STEPS * LR)

    def check_full_ckpt(label, d, step, adapters_only_moments=True):
        """The full checkpoint at step: base weights bit-unchanged, moments exactly for adapters; returns
        its model tensors."""
        sd = os.path.join(d, f"step_{step:08d}")
        m = st_load(os.path.join(sd, "model.safetensors"))
        chk.true(f"{label} base weights bit-unchanged (full checkpoint)",
                 all(k in m and np.array_equal(m[k], base[k]) for k in base),
                 f"changed or missing: {[k for k in base if k not in m or not np.array_equal(m[k], base[k])][:6]}")
        moments = sorted(k for k in st_read(os.path.join(sd, "optimizer.safetensors"))[0] if k.startswith("exp_avg"))
        want = sorted(f"{x}.{k}" for x in ("exp_avg", "exp_avg_sq") for k in m if ".lora_" in k)
        chk.true(f"{label} AdamW moments exactly for the adapters", len(want) > 0 and moments == want,
                 f"{len(moments)} vs {len(want)}: {sorted(set(moments) ^ set(want))[:4]}")
        return m

    # 1. parity on every strategy; 3. memory accounting of each
    finals, run_losses = {}, {}
    for ri, (world, extra) in enumerate(RUNS):
        label = f"[c_attn+c_fc, {world} rank(s) {' '.join(extra) or 'full_shard'}]"
        os.makedirs(path(f"run{ri}"))
        dump, ck = path(f"run{ri}", "grads.safetensors"), path(f"run{ri}", "ck")
        save = path(f"run{ri}", "adapter_model.safetensors")  # the name that brings adapter_config.json
        r = mpirun(world, [train] + model + lora(MAIN) + ["--steps", str(STEPS), "--dump-grads", dump, "--save", save,
                                                         "--ckpt-dir", ck, "--ckpt-type", "full", "--summary"] + extra)
        finals[(world, tuple(extra))] = save
        run_losses[(world, tuple(extra))] = parse_losses(r.stdout)
        check_training(label, r, refs[MAIN], dump, save)
        check_full_ckpt(label, ck, STEPS)
        group = 2 if "hybrid_shard" in extra else world
        grad_shard = sum(gp for _, gp in layout(MAIN, group)) // group
        mem = memory_line(r.stdout)
        chk.true(f"{label} gradient bytes = 4 x the adapters' shard ({4 * grad_shard})",
                 mem.get("gradients") == 4 * grad_shard, f"accounted {mem.get('gradients')}")
        chk.true(f"{label} AdamW bytes = 8 x the adapters' shard ({8 * grad_shard})",
                 mem.get("optimizer") == 8 * grad_shard, f"accounted {mem.get('optimizer')}")

    # 3. bytes sent per step (runs without --save and --dump-grads, whose gathers would count too; a few
    # bytes of loss and norm reductions on top): every unit all-gathered (blocks twice: forward and
    # backward), only the adapters reduce-scattered
    world = 3
    frac = (world - 1) / world
    sent = {}
    for name, targets in (("LoRA", MAIN), ("no LoRA", None)):
        lay = layout(targets, world)
        want = frac * 4 * (sum(2 * p for p, _ in lay[:-1]) + lay[-1][0] + sum(gp for _, gp in lay))
        r = mpirun(world, [train] + model + ["--steps", "2", "--summary"] + (lora(targets) if targets else []))
        sent[name] = memory_line(r.stdout).get("bytes_sent_per_step")
        chk.close(f"[{world} ranks, {name}] bytes sent per step: all-gathers of all, reduce-scatters of the trainable",
                  [sent[name]], [want], 0, 16)
    chk.true("LoRA sends less per step than training the whole model", sent["LoRA"] < sent["no LoRA"],
             f"{sent['LoRA']} vs {sent['no LoRA']}")

    # 5. the PEFT file and adapter_config.json (the 1-rank run's), read back and saved again
    saved_path = finals[(1, ())]
    header = {k: v for k, v in st_read(saved_path)[0].items() if k != "__metadata__"}
    want = {PEFT + k: s for k, s in adapter_names(MAIN)}
    chk.true("PEFT file: names and shapes exactly base_model.model.transformer.h.N.<target>.lora_A [r, in] / lora_B "
             "[out, r], F32", {k: v["shape"] for k, v in header.items()} == want and
             all(v["dtype"] == "F32" for v in header.values()),
             f"{sorted(set(header) ^ set(want))[:6]} "
             f"{[(k, v['shape']) for k, v in header.items() if want.get(k) != v['shape']][:4]}")
    cfg_path = os.path.join(os.path.dirname(saved_path), "adapter_config.json")
    try:
        with open(cfg_path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        cfg = {"error": str(e)}
    tm = cfg.get("target_modules")
    chk.true("adapter_config.json: r, lora_alpha, lora_dropout, fan_in_fan_out true, target_modules c_attn and c_fc",
             cfg.get("r") == R and cfg.get("lora_alpha") == ALPHA and cfg.get("lora_dropout") == 0 and
             cfg.get("fan_in_fan_out") is True and cfg.get("peft_type") == "LORA" and isinstance(tm, list) and
             sorted(t.split(".")[-1] for t in tm) == ["c_attn", "c_fc"], f"{cfg}")
    again = path("again.safetensors")
    proc([train] + model + ["--lora-rank", str(R), "--lora-alpha", f"{ALPHA:g}", "--lora-targets", MAIN,
                            "--lora-init", saved_path, "--steps", "0", "--save", again])
    h1, d1 = st_read(saved_path)
    h2, d2 = st_read(again)
    strip = lambda h: {k: v for k, v in h.items() if k != "__metadata__"}  # noqa: E731
    chk.true("a saved adapter file read back (--lora-init, --steps 0) and saved again: identical tensor bytes",
             len(d1) > 0 and d1 == d2 and strip(h1) == strip(h2), f"{len(d1)} vs {len(d2)} bytes")
    bare = path("bare.safetensors")  # our names, without the PEFT prefix
    st_save(bare, starts[MAIN])
    proc([train] + model + ["--lora-rank", str(R), "--lora-alpha", f"{ALPHA:g}", "--lora-targets", MAIN,
                            "--lora-init", bare, "--steps", "0", "--save", again])
    chk.identical("--lora-init with names without base_model.model.transformer.: the same adapters saved back",
                  ours(st_load(again)), starts[MAIN])

    # PEFT's default init (no --lora-init): B zero, A ~ U(+-1/sqrt(in)); the same on any world size
    inits = {}
    all_targets = "c_attn,c_proj,c_fc"
    for world in (1, 2):
        out = path(f"default{world}.safetensors")
        mpirun(world, [train] + model + ["--lora-rank", str(R), "--lora-targets", all_targets, "--steps", "0",
                                         "--save", out])
        inits[world] = ours(st_load(out))
    d = inits[1]
    chk.true("default init: every adapter of c_attn, attn.c_proj, c_fc, mlp.c_proj saved",
             sorted(d) == sorted(k for k, _ in adapter_names(all_targets)), f"{sorted(d)[:6]}")
    chk.true("default init: every lora_B exactly zero", all(not np.any(v) for k, v in d.items() if ".lora_B." in k))
    for fan_in in (C, 4 * C):
        bound = 1 / math.sqrt(fan_in)
        a = np.concatenate([v.ravel() for k, v in d.items() if ".lora_A." in k and v.shape[1] == fan_in])
        a = a.astype(np.float64)
        chk.true(f"default init: lora_A (in {fan_in}, {a.size} values) within +-1/sqrt(in) = {bound:.4f}, reaching "
                 f"0.9 of it", a.size > 0 and np.abs(a).max() <= bound and np.abs(a).max() > 0.9 * bound,
                 f"max |A| {np.abs(a).max() if a.size else None}")
        chk.close(f"default init: lora_A (in {fan_in}) std = bound / sqrt(3) within 10% (uniform)", [a.std()],
                  [bound / math.sqrt(3)], 0.1, 0)
        chk.close(f"default init: lora_A (in {fan_in}) mean ~ 0 (5 standard errors)", [a.mean()], [0.0], 0,
                  5 * bound / math.sqrt(3 * a.size))
    a_tensors = [v for k, v in sorted(d.items()) if ".lora_A." in k]
    chk.true("default init: every lora_A drawn separately (no two equal)",
             len({t.tobytes() for t in a_tensors}) == len(a_tensors) == 4 * L)
    chk.identical("default init: 2 ranks = 1 rank", inits[2], inits[1])
    # B = 0: the first step is the base model's, dropout or not (dropout only on the adapters' input)
    for drop in (None, 0.1):
        r = mpirun(2, [train] + model + lora(MAIN, init=False, dropout=drop) + ["--steps", "1"])
        chk.close(f"default init{' and --lora-dropout 0.1' if drop else ''}: the first loss is the base model's",
                  parse_losses(r.stdout), [base_loss], 2e-6, 0)

    # 2. merged save: the adapters of the same run (its full checkpoint, written before the merge)
    merged, ck = path("merged.safetensors"), path("ck_merged")
    r = mpirun(3, [train] + model + lora(MAIN) + ["--steps", str(STEPS), "--save", merged, "--lora-merge-on-save",
                                                 "--ckpt-dir", ck, "--ckpt-type", "full"])
    chk.close("[merge on save, 3 ranks] losses", parse_losses(r.stdout), refs[MAIN]["losses"], 2e-6, 0)
    m = st_load(merged)
    ckm = check_full_ckpt("[merge on save, 3 ranks]", ck, STEPS)
    trained = {k: v for k, v in ckm.items() if ".lora_" in k}
    chk.true("[merge on save] the merged file: exactly the base names, no adapter", sorted(m) == sorted(base),
             f"{sorted(set(m) ^ set(base))[:6]}")
    merged_targets = [f"h.{i}.{s}.weight" for i in range(L) for s in sites(MAIN)]
    chk.true("[merge on save] untargeted tensors bit-unchanged",
             all(k in m and np.array_equal(m[k], base[k]) for k in base if k not in merged_targets))
    for k in merged_targets:
        pre = k[:-len("weight")]
        delta = (ALPHA / R) * (trained[pre + "lora_B.weight"].astype(np.float64) @
                               trained[pre + "lora_A.weight"].astype(np.float64)).T
        chk.true(f"[merge on save] {k}: the delta is not negligible", np.abs(delta).max() > 1e-3,
                 f"max |delta| {np.abs(delta).max()}")
        chk.close(f"[merge on save] {k} = W + alpha/r (B A)^T", m.get(k, np.zeros(0)), base[k] + delta, 1e-6, 1e-7)
    with torch.no_grad():
        plain = build(m, None, MAIN)
        lora_model = build(base, trained, MAIN)
        lm, lr_ = logits(plain, idx).numpy(), logits(lora_model, idx).numpy()
        scale = float(np.abs(lr_).max())
        chk.close("[merge on save] plain GPT-2 with the merged file: the logits of base + the trained adapters",
                  lm, lr_, 1e-5, 1e-6 * scale)
        chk.close("[merge on save] ... and of the float64 reference after training",
                  lm, logits(build(base, refs[MAIN]["final"], MAIN), idx).numpy(), 1e-3, 1e-4 * scale)
        chk.true("[merge on save] the merge changed the logits",
                 np.abs(lm - logits(build(base, None, MAIN), idx).numpy()).max() > 1e-3 * scale)

    # 6. c_proj: both attn.c_proj and mlp.c_proj (parity and names); dropout 0.1
    os.makedirs(path("cproj"))
    dump, save = path("cproj", "grads.safetensors"), path("cproj", "adapter_model.safetensors")
    r = mpirun(2, [train] + model + lora("c_proj") + ["--steps", str(STEPS), "--dump-grads", dump, "--save", save])
    header = {k: v["shape"] for k, v in st_read(save)[0].items() if k != "__metadata__"}
    want = {PEFT + f"h.{i}.{s}.lora_{ab}.weight": [R, DIMS[s][0]] if ab == "A" else [DIMS[s][1], R]
            for i in range(L) for s in ("attn.c_proj", "mlp.c_proj") for ab in "AB"}
    chk.true("--lora-targets c_proj: adapters on both attn.c_proj [r, C]/[C, r] and mlp.c_proj [r, 4C]/[C, r]",
             header == want, f"{sorted(set(header) ^ set(want))[:6]}")
    with open(os.path.join(os.path.dirname(save), "adapter_config.json")) as f:
        tm = json.load(f).get("target_modules")
    chk.true("--lora-targets c_proj: adapter_config.json target_modules attn.c_proj and mlp.c_proj",
             sorted(tm or []) == ["attn.c_proj", "mlp.c_proj"], f"{tm}")
    check_training("[c_proj, 2 ranks]", r, refs["c_proj"], dump, save)
    drops = {}
    for drop in (0.1, 0.1, 0.0):
        r = mpirun(2, [train] + model + lora(MAIN, dropout=drop) + ["--steps", str(STEPS)])
        drops.setdefault(drop, []).append(parse_losses(r.stdout))
    d1 = drops[0.1][0]
    chk.true("--lora-dropout 0.1: finite losses on every step",
             len(d1) == STEPS and all(math.isfinite(x) for x in d1), f"{d1}")
    chk.true("--lora-dropout 0.1: losses differ from dropout 0 from the first step (B != 0)",
             len(d1) == STEPS and all(a != b for a, b in zip(d1, drops[0.0][0])), f"{d1} vs {drops[0.0][0]}")
    chk.close("--lora-dropout 0.1: a small perturbation of the dropout-0 losses", d1, refs[MAIN]["losses"], 5e-2, 0)
    chk.true("--lora-dropout 0.1: the same run twice gives the same losses", drops[0.1][0] == drops[0.1][1],
             f"{drops[0.1]}")
    chk.close("--lora-dropout 0 given explicitly: the reference losses", drops[0.0][0], refs[MAIN]["losses"], 2e-6, 0)

    # 4. sharded checkpoint on 2 ranks after 2 steps, resumed on 3 to step 4
    ck, end = path("ck_sharded"), path("resumed.safetensors")
    mpirun(2, [train] + model + lora(MAIN) + ["--steps", "2", "--ckpt-dir", ck, "--ckpt-type", "sharded"])
    step_dir = os.path.join(ck, "step_00000002")
    keys = set()
    for f in os.listdir(step_dir):
        if f.endswith(".safetensors") and f != "index.safetensors":
            keys |= set(st_read(os.path.join(step_dir, f))[0])
    moments = sorted(k for k in keys if k.startswith("exp_avg"))
    want = sorted(f"{x}.{k}" for x in ("exp_avg", "exp_avg_sq") for k, _ in adapter_names(MAIN))
    chk.true("[sharded checkpoint] AdamW moments exactly for the adapters", moments == want,
             f"{len(moments)} vs {len(want)}: {sorted(set(moments) ^ set(want))[:4]}")
    r = mpirun(3, [train] + model + lora(MAIN) + ["--steps", str(STEPS), "--ckpt-dir", ck, "--resume", "auto",
                                                 "--save", end])
    chk.close("[sharded checkpoint] saved on 2, resumed on 3: losses of steps 2..3", parse_losses(r.stdout),
              refs[MAIN]["losses"][2:], 2e-6, 0)
    a, b = ours(st_load(end)), ours(st_load(finals[(2, ())]))
    chk.true("[sharded checkpoint] the resumed run saves the adapters", sorted(a) == sorted(b) and len(a) > 0)
    if sorted(a) == sorted(b) and a:
        chk.close("[sharded checkpoint] saved on 2, resumed on 3: adapters = the uninterrupted 2-rank run's",
                  np.concatenate([a[k].ravel() for k in sorted(b)]), np.concatenate([b[k].ravel() for k in sorted(b)]),
                  1e-5, 1e-6)

    # 7. bf16: base weights (fp32 master shards) bit-unchanged, losses within bf16's distance of float64
    ck, save = path("ck_bf16"), path("bf16.safetensors")
    r = mpirun(2, [train] + model + lora(MAIN) + ["--steps", str(STEPS), "--mixed-precision", "bf16", "--save", save,
                                                 "--ckpt-dir", ck, "--ckpt-type", "full"])
    chk.close("[bf16, 2 ranks] losses within 1e-2 of the float64 reference", parse_losses(r.stdout),
              refs[MAIN]["losses"], 1e-2, 0)
    chk.true("[bf16, 2 ranks] losses differ from the fp32 run's (bf16 is in effect)",
             parse_losses(r.stdout) != run_losses[(2, ())], f"{parse_losses(r.stdout)}")
    check_full_ckpt("[bf16, 2 ranks]", ck, STEPS)
    fin = ours(st_load(save))
    chk.true("[bf16, 2 ranks] every adapter trained", sorted(fin) == sorted(starts[MAIN]) and
             all(not np.array_equal(fin[k], starts[MAIN][k]) for k in fin))

    # 8. bad input: one line on stderr, non-zero exit (a plain process: no mpirun noise)
    peft = peft_file(starts[MAIN])
    first = sorted(peft)[0]
    bad_files = {
        "missing": {k: v for k, v in peft.items() if k != first},
        "shape": {k: (np.ascontiguousarray(v.T) if ".lora_B." in k else v) for k, v in peft.items()},
        "extra": {**peft, PEFT + "h.0.attn.c_attn.weight": base["h.0.attn.c_attn.weight"]},
    }
    for name, tensors in bad_files.items():
        st_save(path(f"bad_{name}.safetensors"), tensors)
    lf = ["--lora-rank", str(R), "--lora-targets", MAIN]
    cases = [
        ("--lora-rank 0", ["--lora-rank", "0"], ["--lora-rank"]),
        ("--lora-targets ln_1", ["--lora-rank", str(R), "--lora-targets", "ln_1"], ["ln_1"]),
        ("--lora-alpha without --lora-rank", ["--lora-alpha", "4"], ["--lora-alpha", "--lora-rank"]),
        ("--lora-merge-on-save without --save", lf + ["--lora-merge-on-save"], ["--save"]),
        ("--lora-init of a missing file", lf + ["--lora-init", path("nope.safetensors")], [path("nope.safetensors")]),
        ("--lora-init missing an adapter", lf + ["--lora-init", path("bad_missing.safetensors")],
         [path("bad_missing.safetensors"), first[len(PEFT):]]),
        ("--lora-init with a wrongly shaped adapter", lf + ["--lora-init", path("bad_shape.safetensors")],
         [path("bad_shape.safetensors"), "lora_B"]),
        ("--lora-init with an extra tensor", lf + ["--lora-init", path("bad_extra.safetensors")],
         [path("bad_extra.safetensors"), "h.0.attn.c_attn.weight"]),
    ]
    for label, flags, words in cases:
        r = proc([train] + model + ["--steps", "1"] + flags, expect_ok=False)
        lines = [x for x in r.stderr.strip().splitlines() if x]
        chk.true(f"{label}: a one-line error naming {', '.join(os.path.basename(w) for w in words)}",
                 r.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words),
                 f"exit {r.returncode}: {r.stderr.strip()[:400]}")
    readme_path(chk, train, tmp)
    chk.report()


def readme_path(chk, train, tmp):
    """The README's fine-tuning command on a small scale: a Hugging Face GPT-2 file (transformer. prefix,
    attn.bias buffers, lm_head.weight), a GPT-2 byte-level BPE tokenizer directory and a text file, LoRA
    on every projection, on 2 ranks, a checkpoint directory and --save DIR/adapter_model.safetensors;
    then a resume from that checkpoint."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
    from test_tokenizer import train_bpe, training_text, write_tokenizer  # noqa: E402
    text = training_text()
    vocab, merges = train_bpe(text, 40)
    tok = write_tokenizer(os.path.join(tmp, "gpt2"), vocab, merges)
    data = os.path.join(tmp, "notes.txt")
    with open(data, "w", encoding="utf-8") as f:
        f.write(text * 4)
    nv, layers, c, maxt = len(vocab), 2, 32, 32
    torch.manual_seed(1)
    hf = {"transformer." + k: v.detach().clone() for k, v in GPT2(nv, maxt, layers, c, 2).state_dict().items()}
    for i in range(layers):
        hf[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(maxt, maxt)).view(1, 1, maxt, maxt)
    hf["lm_head.weight"] = hf["transformer.wte.weight"]
    hf_path = os.path.join(tmp, "gpt2", "model.safetensors")
    st_save(hf_path, hf, {"n_head": "2"})
    run_dir = os.path.join(tmp, "runs_notes")
    os.makedirs(run_dir)
    flags = ["--init", hf_path, "--tokenizer", tok, "--data", data, "--seq", "16", "--global-batch", "4", "--lr", "2e-4",
             "--warmup", "1", "--lora-rank", "4", "--lora-alpha", "16", "--lora-targets", "c_attn,c_proj,c_fc",
             "--ckpt-dir", os.path.join(run_dir, "ckpt"), "--threads", "1"]
    adapters = os.path.join(run_dir, "adapter_model.safetensors")
    r = mpirun(2, [train] + flags + ["--steps", "3", "--save", adapters])
    losses = parse_losses(r.stdout)
    chk.true("README path: HF weights + tokenizer + text + LoRA on 2 ranks trains (3 finite losses)",
             len(losses) == 3 and all(math.isfinite(x) for x in losses), f"{losses}")
    names = {k: tuple(v["shape"]) for k, v in st_read(adapters)[0].items() if k != "__metadata__"}
    want = {}
    for i in range(layers):
        for target, n_out, n_in in (("attn.c_attn", 3 * c, c), ("attn.c_proj", c, c), ("mlp.c_fc", 4 * c, c),
                                    ("mlp.c_proj", c, 4 * c)):
            want[f"{PEFT}h.{i}.{target}.lora_A.weight"] = (4, n_in)
            want[f"{PEFT}h.{i}.{target}.lora_B.weight"] = (n_out, 4)
    chk.true("README path: --save wrote the adapters alone, PEFT names and shapes", names == want,
             f"{sorted(set(names) ^ set(want))[:4]}")
    with open(os.path.join(run_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    chk.true("README path: adapter_config.json beside them", cfg.get("r") == 4 and cfg.get("lora_alpha") == 16 and
             sorted(cfg.get("target_modules", [])) == ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"],
             f"{cfg}")
    r = mpirun(2, [train] + flags + ["--steps", "5", "--resume", "auto"])
    more = parse_losses(r.stdout)
    chk.true("README path: --resume auto with the same flags continues (steps 3 and 4)",
             len(more) == 2 and all(math.isfinite(x) for x in more), f"{more}")


if __name__ == "__main__":
    sys.exit(main())
