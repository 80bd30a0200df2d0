"""PyTorch parity of gradient clipping: torch.nn.utils.clip_grad_norm_ + AdamW against ours, with a max
norm well below the real norm, so the clip coefficient is < 1 at every step (asserted on the torch side),
on 1, 2 and 3 ranks (the norm is summed over shards). The seed model through fsdp-minimal
--clip-grad-norm (its log's pre-clip grad_norm against torch's, every step) and GPT-2 through fsdp-train
--clip-grad-norm. Both dump the first step's gradients after clipping (what the optimizer sees), compared
with torch's clipped .grad; then every step's loss and every parameter after the last step."""
import copy
import os
import re

import numpy as np
import torch
import torch.nn as nn

from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, st_load, st_save, tmpdir
from test_gpt2_parity import GPT2

STEPS, LR, WD = 4, 1e-3, 0.01
CLIP_FRACTION = 0.3  # max norm = this fraction of the first step's norm (3 significant digits)


def torch_train(model, loss_fn, max_norm=None):
    """AdamW with clip_grad_norm_(max_norm): (losses, pre-clip norms, clip coefficients, first step's
    clipped gradients, final state). Without max_norm: the first step's norm only."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    losses, norms, coefs, grads = [], [], [], None
    for step in range(STEPS if max_norm else 1):
        opt.zero_grad()
        loss = loss_fn(model)
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm or float("inf")))
        if not max_norm:
            return norm
        norms.append(norm)
        coefs.append(max_norm / (norm + 1e-6))
        if step == 0:
            grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
        losses.append(loss.item())
        opt.step()
    return losses, norms, coefs, grads, {k: v.detach().clone() for k, v in model.state_dict().items()}


def compare(chk, name, ours_grads, grads, ours_final, final, key_bias, width):
    for k, ref in grads.items():
        scale = float(np.abs(ref.numpy()).max()) + 1e-30
        chk.close(f"[{name}] clipped grad {k}", ours_grads[k], ref.numpy(), 1e-3, 1e-4 * scale)
    for k, ref in final.items():
        ours_k, ref_k, g = ours_final[k].ravel(), ref.numpy().ravel(), grads[k].numpy().ravel()
        if k.endswith(key_bias):  # the key bias: zero gradient, Adam-amplified noise (test_encoder_parity.py)
            keep = np.r_[0:width, 2 * width:3 * width]
            ours_k, ref_k, g = ours_k[keep], ref_k[keep], g[keep]
        # AdamW moves an element by ~lr whatever its gradient's size, so where the gradient is rounding
        # noise (below 1e-5 of the tensor's largest; clipping makes gradients smaller, so more elements
        # sit near Adam's eps) the two sides may differ by a few percent of lr more than elsewhere: those
        # few elements are held to half a step, the rest to 3% of one (as the other parity tests).
        noise = np.abs(g) < 1e-5 * np.abs(g).max()
        chk.close(f"[{name}] param after {STEPS} steps {k}", ours_k[~noise], ref_k[~noise], 1e-5, 3e-5)
        if noise.any():
            chk.close(f"[{name}] param after {STEPS} steps {k}: {int(noise.sum())} element(s) with a rounding-noise "
                      "gradient", ours_k[noise], ref_k[noise], 0, 0.5 * LR)


def main():
    args = parse_args()
    torch.manual_seed(0)
    chk = Checker("clip parity")

    # the seed model: nn.Sequential of post-LN TransformerEncoderLayers, loss mean(|model(x)|)
    L, D, H, F, S, B = 2, 64, 4, 128, 8, 6
    model = nn.Sequential(*[nn.TransformerEncoderLayer(D, H, F, 0.0) for _ in range(L)])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    x = torch.randn(S, B, D)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    loss_fn = lambda m: m(x).abs().mean()  # noqa: E731
    max_norm = float(f"{CLIP_FRACTION * torch_train(copy.deepcopy(model), loss_fn):.3g}")
    losses, norms, coefs, grads, final = torch_train(model, loss_fn, max_norm)
    chk.true(f"[encoder] torch clips at every step (max norm {max_norm})", all(c < 0.9 for c in coefs),
             f"coefficients {coefs}")
    tmp = tmpdir()
    st_save(f"{tmp}/enc_init.safetensors", init)
    st_save(f"{tmp}/enc_x.safetensors", {"x": x})
    for n in (1, 2, 3):
        name = f"encoder, {n} rank(s)"
        g, fin = f"{tmp}/enc_grads{n}.safetensors", f"{tmp}/enc_final{n}.safetensors"
        r = mpirun(n, [os.path.join(args.bin, "fsdp-minimal"), "--layers", str(L), "--d-model", str(D), "--heads",
                       str(H), "--ffn", str(F), "--dropout", "0", "--seq", str(S), "--global-batch", str(B), "--steps",
                       str(STEPS), "--lr", str(LR), "--weight-decay", str(WD), "--clip-grad-norm", str(max_norm),
                       "--init", f"{tmp}/enc_init.safetensors", "--input", f"{tmp}/enc_x.safetensors",
                       "--dump-grads", g, "--save", fin, "--threads", "1"])
        chk.close(f"[{name}] losses", parse_losses(r.stdout), losses, 1e-5, 0)
        ours_norms = [float(v) for v in re.findall(r"^step \d+ loss \S+ grad_norm (\S+)", r.stdout, re.M)]
        chk.close(f"[{name}] pre-clip gradient norm of every step", ours_norms, norms, 1e-5, 0)
        compare(chk, name, st_load(g), grads, st_load(fin), final, "in_proj_bias", D)

    # GPT-2 through fsdp-train --clip-grad-norm, one fixed global batch of 6 sequences split over the ranks
    V, maxT, L, C, H, T, B = 96, 16, 2, 64, 4, 16, 6
    model = GPT2(V, maxT, L, C, H)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    idx, targets = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
    loss_fn = lambda m: m(idx, targets)  # noqa: E731
    max_norm = float(f"{CLIP_FRACTION * torch_train(copy.deepcopy(model), loss_fn):.3g}")
    losses, norms, coefs, grads, final = torch_train(model, loss_fn, max_norm)
    chk.true(f"[gpt2] torch clips at every step (max norm {max_norm})", all(c < 0.9 for c in coefs),
             f"coefficients {coefs}")
    st_save(f"{tmp}/gpt_init.safetensors", init)
    st_save(f"{tmp}/gpt_input.safetensors", {"idx": idx, "targets": targets})
    for n in (1, 2, 3):
        name = f"gpt2, {n} rank(s)"
        g, fin = f"{tmp}/gpt_grads{n}.safetensors", f"{tmp}/gpt_final{n}.safetensors"
        r = mpirun(n, [os.path.join(args.bin, "fsdp-train"), "--vocab", str(V), "--max-seq", str(maxT), "--layers",
                       str(L), "--d-model", str(C), "--heads", str(H), "--seq", str(T), "--batch", str(B // n),
                       "--steps", str(STEPS), "--lr", str(LR), "--weight-decay", str(WD), "--clip-grad-norm",
                       str(max_norm), "--warmup", "0", "--lr-schedule", "constant", "--init",
                       f"{tmp}/gpt_init.safetensors", "--input", f"{tmp}/gpt_input.safetensors", "--dump-grads", g,
                       "--save", fin, "--threads", "1"])
        chk.close(f"[{name}] losses", parse_losses(r.stdout), losses, 1e-5, 0)
        compare(chk, name, st_load(g), grads, st_load(fin), final, "attn.c_attn.bias", C)
    chk.report()


if __name__ == "__main__":
    main()
