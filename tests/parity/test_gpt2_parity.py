"""PyTorch parity of the GPT-2 model: a torch implementation with Hugging Face GPT-2's parameter
names and Conv1D layouts (weights stored (in, out)), the same weights and tokens given to
build/bin/fsdp-train; we compare the loss of every step, every parameter gradient of the first step
and every parameter after the last AdamW step. Also checks that a file with the `transformer.`
prefix and HF's extra attn.bias / lm_head.weight entries loads."""
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fsdp_testlib import Checker, parse_args, parse_losses, run, st_load, st_save, tmpdir


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: y = x @ W + b with W stored (in, out)."""

    def __init__(self, nin, nout):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nin, nout) * 0.02)
        self.bias = nn.Parameter(torch.randn(nout) * 0.02)

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.c_attn, self.c_proj, self.H = Conv1D(C, 3 * C), Conv1D(C, C), H

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(C, 4 * C), Conv1D(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(C), Attention(C, H), nn.LayerNorm(C), MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """block, norm: the block and LayerNorm classes (test_bf16_parity.py passes its bf16 ones)."""

    def __init__(self, V, maxT, L, C, H, block=None, norm=nn.LayerNorm):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.h = nn.ModuleList([(block or Block)(C, H) for _ in range(L)])
        self.ln_f = norm(C)
        with torch.no_grad():
            self.wte.weight.mul_(0.1)
            self.wpe.weight.mul_(0.05)
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.add_(torch.randn_like(m.weight) * 0.05)
                    m.bias.add_(torch.randn_like(m.bias) * 0.05)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


CONFIGS = [  # name, vocab, max_seq, layers, d_model, heads, seq, batch
    ("gpt2 small", 96, 16, 2, 64, 4, 16, 4),
    ("gpt2 uneven d80 h5", 75, 13, 3, 80, 5, 11, 3),
]
STEPS, LR, WD = 4, 1e-3, 0.01


def main():
    args = parse_args()
    torch.manual_seed(0)
    chk = Checker("gpt2 parity")
    for ci, (name, V, maxT, L, C, H, T, B) in enumerate(CONFIGS):
        model = GPT2(V, maxT, L, C, H)
        init = {k: v.detach().clone() for k, v in model.state_dict().items()}
        idx, targets = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
        losses, grads = [], None
        for step in range(STEPS):
            opt.zero_grad()
            loss = model(idx, targets)
            loss.backward()
            if step == 0:
                grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
            losses.append(loss.item())
            opt.step()
        tmp = tmpdir()
        paths = {k: os.path.join(tmp, k + ".safetensors") for k in ("init", "input", "grads", "final")}
        if ci == 1:  # the Hugging Face file shape: transformer. prefix, attn.bias buffers, lm_head
            hf = {"transformer." + k: v for k, v in init.items()}
            for i in range(L):
                hf[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(maxT, maxT)).view(1, 1, maxT, maxT)
            hf["lm_head.weight"] = init["wte.weight"]
            st_save(paths["init"], hf)
        else:
            st_save(paths["init"], init)
        st_save(paths["input"], {"idx": idx, "targets": targets})
        cmd = [os.path.join(args.bin, "fsdp-train"), "--vocab", str(V), "--max-seq", str(maxT), "--layers", str(L),
               "--d-model", str(C), "--heads", str(H), "--seq", str(T), "--batch", str(B), "--steps", str(STEPS),
               "--lr", str(LR), "--weight-decay", str(WD), "--clip-grad-norm", "0", "--warmup", "0",
               "--lr-schedule", "constant", "--init", paths["init"], "--input", paths["input"],
               "--dump-grads", paths["grads"], "--save", paths["final"]]
        _, stdout, _ = run(cmd)
        chk.close(f"[{name}] losses", parse_losses(stdout), losses, 1e-5, 0)
        g = st_load(paths["grads"])
        for k, ref in grads.items():
            scale = float(np.abs(ref.numpy()).max()) + 1e-30
            chk.close(f"[{name}] grad {k}", g[k], ref.numpy(), 1e-3, 1e-4 * scale)
        fin = st_load(paths["final"])
        for k, ref in model.state_dict().items():
            ours_k, ref_k = fin[k], ref.numpy()
            if k.endswith("attn.c_attn.bias"):  # key bias: zero gradient, Adam-amplified noise (see encoder test)
                chk.close(f"[{name}] key-bias grad is zero {k}", g[k][C:2 * C], np.zeros(C), 0, 1e-6)
                keep = np.r_[0:C, 2 * C:3 * C]
                ours_k, ref_k = ours_k[keep], ref_k[keep]
            chk.close(f"[{name}] param after {STEPS} steps {k}", ours_k, ref_k, 1e-5, 3e-5)
    chk.report()


if __name__ == "__main__":
    main()
