"""Muon (--optimizer muon) on the GPT-2 model against a float64 PyTorch reference of the same optimizer,
written here as Keller Jordan's muon.py computes it: for every 2-D weight of the blocks, taken as the
[out, in] matrix of its linear map (the transpose of HF's Conv1D layout; c_attn as one matrix), the
momentum lerp, Nesterov's lerp, quintic Newton-Schulz after dividing by the Frobenius norm + 1e-7
(transposed when rows > cols), the scale max(1, rows/cols)^0.5 and decoupled weight decay; AdamW for
every other parameter. Losses and parameters over 4 steps at 1, 2 and 3 ranks under FULL_SHARD and
SHARD_GRAD_OP (and HYBRID_SHARD, shard groups of 1 and 2) within 1e-4 relative, the N-rank runs against
the 1-rank one, and each matrix orthogonalized exactly once per step per shard group (the per-rank
Newton-Schulz counts of --summary). Also the one-line errors for what Muon does not do yet."""
import os
import re

import numpy as np
import torch

from fsdp_testlib import Checker, memory_line, mpirun, parse_args, parse_losses, run, st_load, st_save, tmpdir
from test_gpt2_parity import GPT2

NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315


def zeropower_via_newtonschulz5(G, steps):
    """muon.py's, in the dtype of G (float64 here)."""
    X = G.clone()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = NS_B * A + NS_C * A @ A
        X = NS_A * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_update(grad, momentum, beta, ns_steps, nesterov):
    """muon.py's muon_update on an [out, in] matrix (grad is modified, as there)."""
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    update = zeropower_via_newtonschulz5(update, steps=ns_steps)
    return update * max(1, grad.size(-2) / grad.size(-1)) ** 0.5


def is_matrix(name, p):
    return name.startswith("h.") and p.ndim == 2


def reference(model, idx, targets, steps, lr, wd, mu):
    """Float64 training: Muon on the block matrices ([out, in] = Conv1D weight transposed), AdamW elsewhere,
    with mu's "freeze" prefix (no gradient, no update) and "clip" (the global norm before either
    optimizer). Returns the losses and the final state dict."""
    model = model.double()
    for n, p in model.named_parameters():
        p.requires_grad_(not (mu.get("freeze") and n.startswith(mu["freeze"])))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    adam = torch.optim.AdamW([p for n, p in named if not is_matrix(n, p)], lr=lr, weight_decay=wd)
    momentum = {n: torch.zeros_like(p.t()) for n, p in named if is_matrix(n, p)}
    losses = []
    for _ in range(steps):
        adam.zero_grad()
        for n, p in named:
            p.grad = None
        loss = model(idx, targets)
        loss.backward()
        losses.append(loss.item())
        if mu.get("clip"):
            torch.nn.utils.clip_grad_norm_([p for _, p in named], mu["clip"])
        adam.step()
        with torch.no_grad():
            for n, p in named:
                if not is_matrix(n, p):
                    continue
                u = muon_update(p.grad.t().clone(), momentum[n], mu["momentum"], mu["ns_steps"], mu["nesterov"])
                p.mul_(1 - mu["lr"] * mu["wd"])
                p.add_(u.t(), alpha=-mu["lr"])
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


MUON_LINE = re.compile(r"^muon rank (\d+): matrices (\d+) owned (\d+) ns_calls (\d+) ns_flops (\S+) "
                       r"momentum_floats (\d+) exchange_bytes_per_step (\S+)")


def muon_lines(stdout):
    """{rank: (matrices, owned, ns_calls, ns_flops, momentum_floats, exchange_bytes_per_step)} from --summary's
    per-rank lines."""
    out = {}
    for line in stdout.splitlines():
        m = MUON_LINE.match(line)
        if m:
            out[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)), float(m.group(5)),
                                    int(m.group(6)), float(m.group(7)))
    return out


def ns_flops(rows, cols, steps):
    r, c = min(rows, cols), max(rows, cols)
    return steps * (4.0 * r * r * c + 2.0 * r ** 3)


CONFIGS = [  # name, vocab, max_seq, layers, d_model, heads, seq, global batch, muon settings
    ("gpt2 d48", 64, 12, 2, 48, 4, 12, 12, {"lr": 0.02, "momentum": 0.95, "nesterov": True, "ns_steps": 5, "wd": 0.1}),
    ("gpt2 d40 no-nesterov ns3", 50, 9, 3, 40, 5, 9, 12,
     {"lr": 0.03, "momentum": 0.9, "nesterov": False, "ns_steps": 3, "wd": 0.0}),
    ("gpt2 d32 clipped, block 0's MLP frozen, checkpointed", 40, 8, 2, 32, 4, 8, 12,
     {"lr": 0.02, "momentum": 0.95, "nesterov": True, "ns_steps": 5, "wd": 0.05, "clip": 0.05, "freeze": "h.0.mlp.",
      "extra": ["--activation-checkpointing"]}),
]
STEPS, LR, WD = 4, 1e-3, 0.01
RUNS = [("full_shard", 1, 0), ("full_shard", 2, 0), ("full_shard", 3, 0), ("shard_grad_op", 1, 0),
        ("shard_grad_op", 2, 0), ("shard_grad_op", 3, 0), ("hybrid_shard", 2, 1), ("hybrid_shard", 4, 2)]


def main():
    args = parse_args()
    torch.manual_seed(0)
    chk = Checker("muon parity")
    train = os.path.join(args.bin, "fsdp-train")
    for name, V, maxT, L, C, H, T, GB, mu in CONFIGS:
        model = GPT2(V, maxT, L, C, H)
        init = {k: v.detach().clone() for k, v in model.state_dict().items()}
        idx, targets = torch.randint(0, V, (GB, T)), torch.randint(0, V, (GB, T))
        losses, final = reference(model, idx, targets, STEPS, LR, WD, mu)
        frozen = mu.get("freeze")
        shapes = [tuple(v.shape) for k, v in init.items() if k.startswith("h.") and v.ndim == 2 and
                  not (frozen and k.startswith(frozen))]
        tmp = tmpdir()
        p_init, p_input = os.path.join(tmp, "init.safetensors"), os.path.join(tmp, "input.safetensors")
        st_save(p_init, init)
        st_save(p_input, {"idx": idx, "targets": targets})
        base = [train, "--vocab", str(V), "--max-seq", str(maxT), "--layers", str(L), "--d-model", str(C),
                "--heads", str(H), "--seq", str(T), "--global-batch", str(GB), "--steps", str(STEPS), "--lr", str(LR),
                "--weight-decay", str(WD), "--clip-grad-norm", "0", "--warmup", "0", "--lr-schedule", "constant",
                "--init", p_init, "--input", p_input, "--summary", "--no-memory-check",
                "--optimizer", "muon", "--muon-lr", str(mu["lr"]), "--muon-momentum", str(mu["momentum"]),
                "--muon-ns-steps", str(mu["ns_steps"]), "--muon-weight-decay", str(mu["wd"])]
        if not mu["nesterov"]:
            base.append("--no-muon-nesterov")
        if "clip" in mu:  # the global norm, clipped before Muon and AdamW
            base[base.index("--clip-grad-norm") + 1] = str(mu["clip"])
        if frozen:
            base += ["--freeze", frozen + "*"]
        base += mu.get("extra", [])
        one = None
        for strategy, n, group in RUNS:
            tag = f"[{name}] {strategy} np{n}" + (f" groups of {group}" if group else "")
            out = os.path.join(tmp, f"final_{strategy}_{n}.safetensors")
            cmd = base + ["--strategy", strategy, "--save", out] + (["--shard-group-size", str(group)] if group else [])
            stdout = mpirun(n, cmd).stdout if n > 1 else run(cmd)[1]
            chk.close(f"{tag} losses vs float64", parse_losses(stdout), losses, 1e-4, 0)
            fin = st_load(out)
            for k, ref in final.items():
                ours_k, ref_k = fin[k], ref.numpy()
                if k.endswith("attn.c_attn.bias"):  # the key bias: zero gradient, Adam-amplified noise
                    keep = np.r_[0:C, 2 * C:3 * C]
                    ours_k, ref_k = ours_k[keep], ref_k[keep]
                scale = float(np.abs(ref_k).max()) + 1e-30
                chk.close(f"{tag} {k} after {STEPS} steps vs float64", ours_k, ref_k, 1e-4, 1e-4 * scale)
                if one is not None and k.startswith("h.") and fin[k].ndim == 2:
                    # N ranks against 1 rank on Muon's matrices: float reduction order only
                    chk.close(f"{tag} {k} vs the 1-rank run", fin[k], one[k], 1e-5, 1e-5 * scale)
            if n == 1 and strategy == "full_shard":
                one = fin
            # each matrix orthogonalized exactly once per step in each shard group
            ranks = muon_lines(stdout)
            groups = n // (group or n)
            matrices = len(shapes)
            chk.true(f"{tag} every rank printed its Newton-Schulz count", sorted(ranks) == list(range(n)),
                     f"ranks {sorted(ranks)}")
            calls = sum(v[2] for v in ranks.values())
            owned = sum(v[1] for v in ranks.values())
            flops = sum(v[3] for v in ranks.values())
            want_flops = groups * STEPS * sum(ns_flops(r, c, mu["ns_steps"]) for r, c in shapes)
            chk.true(f"{tag} NS calls sum to matrices x steps x groups", calls == matrices * STEPS * groups and
                     owned == matrices * groups and all(v[0] == matrices for v in ranks.values()) and
                     all(v[2] == v[1] * STEPS for v in ranks.values()),
                     f"calls {calls}, owned {owned}, lines {ranks}")
            chk.true(f"{tag} NS FLOPs sum to one pass over every matrix per step and group",
                     abs(flops - want_flops) <= 1e-9 * want_flops, f"{flops} vs {want_flops}")
            momentum = sum(v[4] for v in ranks.values())
            want_momentum = groups * sum(r * c for r, c in shapes)
            chk.true(f"{tag} each matrix's momentum kept whole on one rank per group", momentum == want_momentum,
                     f"{momentum} vs {want_momentum} floats")
            if name == CONFIGS[0][0] and strategy == "full_shard" and n > 1:
                # the exchange's bytes: what rank 0 sends beyond the same run under AdamW, measured by the
                # comm layer, equals the all-gather + reduce-scatter model --summary reports
                plain = [x for x in cmd if x != "--no-muon-nesterov"]
                i = plain.index("--optimizer")
                plain = plain[:i] + ["--optimizer", "adamw"] + plain[i + 10:]  # the five --muon-* settings gone
                extra = memory_line(stdout)["bytes_sent_per_step"] - memory_line(
                    mpirun(n, plain).stdout)["bytes_sent_per_step"]
                chk.true(f"{tag} Muon's measured extra bytes sent = the exchange's model", ranks[0][5] > 0 and
                         abs(extra - ranks[0][5]) <= 1.0, f"measured {extra} vs {ranks[0][5]}")
            if n == 2 and not group:  # shared between the two ranks, not all on one
                chk.true(f"{tag} both ranks own matrices", all(v[1] > 0 for v in ranks.values()), f"{ranks}")

    # the Llama family (fsdp-train --arch llama: q/k/v/o and the MLP's three projections, Linear's [out, in])
    # and the seed's TransformerEncoder stack (fsdp-minimal: in_proj, out_proj, linear1,
    # linear2; two micro-steps per step): 3 ranks against 1
    models = [("llama", [train, "--arch", "llama", "--layers", "2", "--d-model", "32", "--heads", "4", "--kv-heads", "2",
                         "--seq", "16", "--global-batch", "6", "--steps", "3", "--warmup", "0", "--lr-schedule",
                         "constant"], 7 * 2),
              ("seed encoder", [os.path.join(args.bin, "fsdp-minimal"), "--layers", "2", "--d-model", "32", "--heads",
                                "4", "--ffn", "48", "--dropout", "0", "--global-batch", "6", "--grad-accum", "2", "--steps", "3"],
               4 * 2)]
    for tag, cmd, matrices in models:
        tmp = tmpdir()
        runs = {}
        for n in (1, 3):
            out = os.path.join(tmp, f"final_{n}.safetensors")
            full = cmd + ["--optimizer", "muon", "--summary", "--no-memory-check", "--save", out]
            stdout = mpirun(n, full).stdout if n > 1 else run(full)[1]
            runs[n] = (parse_losses(stdout), st_load(out), muon_lines(stdout))
            ranks = runs[n][2]
            chk.true(f"[{tag}] np{n}: {matrices} matrices, each orthogonalized once per step",
                     sorted(ranks) == list(range(n)) and all(v[0] == matrices for v in ranks.values()) and
                     sum(v[2] for v in ranks.values()) == 3 * matrices, f"{ranks}")
        chk.close(f"[{tag}] losses at 3 ranks vs 1", runs[3][0], runs[1][0], 1e-5, 0)
        if tag == "llama":  # bf16 mixed precision (parameters gathered and multiplied in bf16): near fp32's
            stdout = mpirun(2, cmd + ["--optimizer", "muon", "--no-memory-check", "--mixed-precision", "bf16"]).stdout
            chk.close(f"[{tag}] bf16 mixed precision at 2 ranks: losses near fp32's", parse_losses(stdout),
                      runs[1][0], 2e-2, 0)
        for k, ref in runs[1][1].items():
            if ref.ndim != 2:  # AdamW's 1-D parameters: zero-gradient elements amplify reduction-order noise
                continue
            scale = float(np.abs(ref).max()) + 1e-30
            chk.close(f"[{tag}] {k} at 3 ranks vs 1", runs[3][1][k], ref, 1e-5, 1e-5 * scale)

    # what Muon does not do yet: one line naming the flags, exit 2, nothing trained
    tiny = [train, "--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--batch", "2", "--steps", "1",
            "--no-memory-check"]
    tmp = tmpdir()
    cases = [(["--optimizer", "muon", "--ckpt-dir", os.path.join(tmp, "ck")], "--ckpt-dir"),
             (["--optimizer", "muon", "--deterministic", "--global-batch", "2"], "--deterministic"),
             (["--optimizer", "muon", "--cpu-offload"], "--cpu-offload"),
             (["--optimizer", "muon", "--muon-ns-dtype", "bf16"], "--muon-ns-dtype bf16"),
             (["--optimizer", "muon", "--strategy", "ddp"], "--strategy ddp"),
             (["--optimizer", "muon", "--strategy", "no_shard"], "--strategy no_shard"),
             (["--muon-lr", "0.1"], "--muon-lr applies only to --optimizer muon"),
             (["--optimizer", "muon", "--lora-rank", "2"], "no trainable 2-D weight in its blocks"),
             (["--no-muon-nesterov"], "--no-muon-nesterov applies only to --optimizer muon")]
    for extra, want in cases:
        rc, stdout, stderr = run(tiny + extra, expect_ok=False)
        lines = [x for x in stderr.splitlines() if x.strip() and "note:" not in x]
        # rc 2: refused with the flags; 1: by fsdp_optimizer_create, once the model is built (no matrix)
        chk.true(f"refused: {' '.join(extra)}", rc in ((1, 2) if "--lora-rank" in extra else (2,)) and len(lines) == 1 and want in lines[0] and
                 "step 0" not in stdout, f"rc {rc}, stderr {stderr[-300:]!r}")
    chk.report()


if __name__ == "__main__":
    main()
