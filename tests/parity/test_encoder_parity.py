"""PyTorch parity of the seed model: nn.Sequential of TransformerEncoderLayers trained with AdamW on
mean(|model(x)|). For each configuration, the same weights and input go to torch and to
build/bin/fsdp-minimal; we compare the first forward's output, every parameter gradient, the loss
of each step, and every parameter after the last step. Dropout is 0 (our dropout masks come from a
counter-based RNG and cannot reproduce torch's generator)."""
import os

import numpy as np
import torch
import torch.nn as nn

from fsdp_testlib import Checker, parse_args, parse_losses, run, st_load, st_save, tmpdir

CONFIGS = [
    # name, layers, d_model, heads, ffn, seq, batch, norm_first, activation, batch_first, causal
    ("post-ln relu (seed)", 2, 128, 4, 256, 8, 16, False, "relu", False, False),
    ("pre-ln gelu", 2, 64, 4, 128, 12, 6, True, "gelu", False, False),
    ("uneven d80 h5 batch_first causal", 2, 80, 5, 96, 7, 3, False, "gelu", True, True),
    ("pre-ln relu d80 h5", 3, 80, 5, 200, 9, 5, True, "relu", False, False),
]
STEPS, LR, WD = 4, 1e-3, 0.01


def torch_run(cfg, x):
    _, layers, d, h, ffn, seq, batch, norm_first, act, batch_first, causal = cfg
    model = nn.Sequential(*[nn.TransformerEncoderLayer(d, h, ffn, 0.0, activation=act, norm_first=norm_first,
                                                       batch_first=batch_first) for _ in range(layers)])
    for p in model.parameters():  # non-trivial biases and norms so every path is exercised
        with torch.no_grad():
            p.add_(torch.randn_like(p) * 0.05)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    mask = None
    if causal:
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    losses, grads, out0 = [], None, None
    for step in range(STEPS):
        opt.zero_grad()
        y = x
        for layer in model:
            y = layer(y, src_mask=mask)
        loss = y.abs().mean()
        loss.backward()
        if step == 0:
            out0 = y.detach().clone()
            grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
        losses.append(loss.item())
        opt.step()
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return init, out0, grads, losses, final


def main():
    args = parse_args()
    torch.manual_seed(0)
    chk = Checker("encoder parity")
    for cfg in CONFIGS:
        name, layers, d, h, ffn, seq, batch, norm_first, act, batch_first, causal = cfg
        x = torch.randn((batch, seq, d) if batch_first else (seq, batch, d))
        init, out0, grads, losses, final = torch_run(cfg, x)
        tmp = tmpdir()
        paths = {k: os.path.join(tmp, k + ".safetensors") for k in ("init", "input", "grads", "out", "final")}
        st_save(paths["init"], init)
        st_save(paths["input"], {"x": x})
        cmd = [os.path.join(args.bin, "fsdp-minimal"), "--layers", str(layers), "--d-model", str(d), "--heads",
               str(h), "--ffn", str(ffn), "--dropout", "0", "--seq", str(seq), "--global-batch", str(batch), "--steps",
               str(STEPS), "--lr", str(LR), "--weight-decay", str(WD), "--init", paths["init"], "--input",
               paths["input"], "--dump-grads", paths["grads"], "--dump-output", paths["out"], "--save",
               paths["final"], "--activation", act]
        if norm_first:
            cmd.append("--norm-first")
        if batch_first:
            cmd.append("--batch-first")
        if causal:
            cmd.append("--causal")
        _, stdout, _ = run(cmd)
        ours = parse_losses(stdout)
        chk.close(f"[{name}] losses", ours, losses, 1e-5, 0)
        chk.close(f"[{name}] output", st_load(paths["out"])["y"], out0.numpy(), 1e-4, 1e-5)
        g = st_load(paths["grads"])
        for k, ref in grads.items():
            scale = float(np.abs(ref.numpy()).max()) + 1e-30
            chk.close(f"[{name}] grad {k}", g[k], ref.numpy(), 1e-3, 1e-4 * scale)
        fin = st_load(paths["final"])
        for k, ref in final.items():
            ours_k, ref_k = fin[k], ref.numpy()
            if k.endswith("in_proj_bias"):
                # The key bias has an exactly zero gradient (softmax is invariant to a constant added to
                # every score of a row), so both sides hold pure rounding noise there and AdamW's
                # normalisation turns that noise into steps of size ~lr. Check the gradient is ~0
                # instead, and compare only the query and value thirds.
                chk.close(f"[{name}] key-bias grad is zero {k}", g[k][d:2 * d], np.zeros(d), 0, 1e-6)
                keep = np.r_[0:d, 2 * d:3 * d]
                ours_k, ref_k = ours_k[keep], ref_k[keep]
            # AdamW's first steps move every element by ~lr whatever its gradient's size, so elements
            # whose gradient is near rounding noise can differ by a few percent of lr (documented in
            # docs/parity.md); 3e-5 is 3% of one step at lr 1e-3.
            chk.close(f"[{name}] param after {STEPS} steps {k}", ours_k, ref_k, 1e-5, 3e-5)
    chk.report()


if __name__ == "__main__":
    main()
