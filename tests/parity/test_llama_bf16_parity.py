"""PyTorch parity of bf16 mixed precision on the Llama family (fsdp-train --arch llama --mixed-precision
bf16), against a torch reference written to the documented semantics (docs/fsdp.md, "Mixed precision"),
as test_bf16_parity.py does for GPT-2:
  * every parameter is used as its bf16-rounded value (straight-through to the fp32 master): the
    projections' weights and biases, RMSNorm weights, the token embedding and the untied head;
  * every matrix product (q/k/v/o and the MLP's gate/up/down projections, attention's QK^T and PV,
    the head) rounds both operands to bf16 and accumulates in fp32, forward and backward;
  * attention is the fused kernel's computation (test_bf16_parity.FlashCore) on the grouped-query
    heads (each key/value head serves its group of query heads, as repeat_kv);
  * RMSNorm, the rotary embedding, SwiGLU, the residuals and the loss in fp32 on fp32 activations;
  * reduce_dtype bf16 in one process rounds each step's gradient to bf16 once before AdamW.
The yardsticks are test_bf16_parity's: on the first step the loss within 5e-5 relative and 5x closer to
the reference than fp32 training is, the gradients within max(3x the reference's own sensitivity to
summation order (fp64-accumulated products), 0.1x the fp32 gap); losses over 4 steps within 1e-3.
The model comes from a Hugging Face directory (test_llama_parity.write_hf_dir), as a user's would."""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import test_bf16_parity as bf16
import test_llama_parity as llama
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, run, st_load, st_save, tmpdir

torch.set_default_dtype(torch.float32)  # test_llama_parity's reference is float64; this one is not


# the attention core with its products accumulated in fp64: the reference's own sensitivity to order there
FlashCore64 = bf16.flash_core(lambda a, b: (a.double() @ b.double()).float())


class OneUlpNoise(torch.autograd.Function):
    """The identity forward; backward moves each gradient element by -1, 0 or +1 ulp at random: what a
    different but equally valid fp32 kernel (another order, an FMA) may do at that point."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        step = torch.randint(-1, 2, g.shape, generator=NOISE_RNG).float()
        return torch.where(step == 0, g, torch.nextafter(g, g + step * float("inf")))


NOISE_RNG = torch.Generator()
noise = lambda x: x  # noqa: E731  (OneUlpNoise.apply in the sensitivity runs)


def forward(p, cfg, idx, targets, mm, rp):
    """LlamaForCausalLM's loss (test_llama_parity.forward) with products mm and parameters rp(...)."""
    B, T = idx.shape
    H, KV, hd, eps = cfg["H"], cfg["KV"], cfg["hd"], cfg["eps"]
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * llama.inv_freq(hd, cfg["theta"], cfg.get("llama3"))[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()  # (T, hd)
    embed = rp(p["model.embed_tokens.weight"])
    x = F.embedding(idx, embed)

    def rms(v, w):
        return noise(rms_(v, w))

    def rms_(v, w):
        return rp(w) * (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps))

    def rope(t):
        return noise(rope_(t))

    def rope_(t):
        return t * cos + llama.rotate_half(t) * sin

    for i in range(cfg["L"]):
        pre = f"model.layers.{i}."

        def lin(name, v):
            y = mm(v.reshape(-1, v.shape[-1]), rp(p[pre + name + ".weight"]).t()).reshape(*v.shape[:-1], -1)
            return y + rp(p[pre + name + ".bias"]) if pre + name + ".bias" in p else y

        h = rms(x, p[pre + "input_layernorm.weight"])
        q = lin("self_attn.q_proj", h).view(B, T, H, hd).transpose(1, 2)
        k = lin("self_attn.k_proj", h).view(B, T, KV, hd).transpose(1, 2)
        v = lin("self_attn.v_proj", h).view(B, T, KV, hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))
        core = FlashCore64 if mm is bf16.FP64MatMul.apply else bf16.FlashCore
        y = noise(core.apply(q * (1.0 / math.sqrt(hd)), k, v))
        x = x + lin("self_attn.o_proj", y.transpose(1, 2).reshape(B, T, H * hd))
        h = rms(x, p[pre + "post_attention_layernorm.weight"])
        x = x + lin("mlp.down_proj", noise(F.silu(lin("mlp.gate_proj", h)) * lin("mlp.up_proj", h)))
    x = rms(x, p["model.norm.weight"])
    head = embed if cfg["tied"] else rp(p["lm_head.weight"])
    logits = noise(mm(x.reshape(B * T, -1), head.t()))
    return F.cross_entropy(logits, targets.reshape(-1))


def reference(init, cfg, idx, targets, mm, rp, round_grads=False, steps=1):
    """AdamW from init with the given products and parameter rounding: (losses, step-0 gradients)."""
    params = {k: v.detach().clone().float().requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.AdamW(list(params.values()), lr=LR, weight_decay=WD)
    losses, grads = [], None
    for step in range(steps):
        opt.zero_grad()
        loss = forward(params, cfg, idx, targets, mm, rp)
        loss.backward()
        if round_grads:
            with torch.no_grad():
                for v in params.values():
                    v.grad.copy_(bf16.r(v.grad))
        if step == 0:
            grads = {k: v.grad.detach().clone().numpy() for k, v in params.items()}
        losses.append(loss.item())
        opt.step()
    return losses, grads


def noisy_grads(init, cfg, idx, targets, trials=4):
    """The step-0 gradients of the reference with OneUlpNoise at each fp32 elementwise output (RMSNorm,
    rotary, SwiGLU, attention, logits): how far an equally valid fp32 implementation may land."""
    global noise  # noqa: PLW0603
    out = []
    noise = OneUlpNoise.apply
    for trial in range(trials):
        NOISE_RNG.manual_seed(trial)
        out.append(reference(init, cfg, idx, targets, bf16.mm, bf16.rp)[1])
    noise = lambda x: x  # noqa: E731
    return out


CONFIGS = [  # head width 16 everywhere: the 1/4 attention scale is exact wherever it is applied
    dict(name="llama gqa untied", model_type="llama", V=97, maxT=16, L=2, C=64, H=4, KV=2, hd=16, F=96, T=16, B=3,
         eps=1e-5, theta=10000.0, tied=False, qkv_bias=False, o_bias=False, mlp_bias=False),
    dict(name="qwen2 tied qkv-bias", model_type="qwen2", V=64, maxT=12, L=2, C=48, H=3, KV=1, hd=16, F=80, T=12, B=3,
         eps=1e-6, theta=1000000.0, tied=True, qkv_bias=True, o_bias=False, mlp_bias=False),
]
STEPS, LR, WD = 4, 1e-3, 0.01


def main():
    args = parse_args()
    torch.manual_seed(0)
    chk = Checker("llama bf16 parity")
    exe = os.path.join(args.bin, "fsdp-train")
    for cfg in CONFIGS:
        name, V, T, B = cfg["name"], cfg["V"], cfg["T"], cfg["B"]
        torch.set_default_dtype(torch.float64)
        init = {k: v.detach() for k, v in llama.make_params(cfg).items()}  # bf16-exact values
        torch.set_default_dtype(torch.float32)
        idx, targets = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        tmp = tmpdir()
        paths = {k: os.path.join(tmp, k + ".safetensors") for k in ("input", "grads")}
        paths["init"] = os.path.join(tmp, "init_hf")
        llama.write_hf_dir(paths["init"], cfg, init)
        st_save(paths["input"], {"idx": idx, "targets": targets})
        ref_l, ref_g = reference(init, cfg, idx, targets, bf16.mm, bf16.rp)
        r64_l, r64_g = reference(init, cfg, idx, targets, bf16.FP64MatMul.apply, bf16.rp)
        f32_l, f32_g = reference(init, cfg, idx, targets, lambda a, b: a @ b, lambda w: w)

        def ours(reduce, steps, dump=False, ranks=1):
            cmd = [exe, "--seq", str(T), "--batch", str(B // ranks if ranks > 1 else B), "--steps", str(steps),
                   "--lr", str(LR), "--weight-decay", str(WD), "--clip-grad-norm", "0", "--warmup", "0",
                   "--lr-schedule", "constant", "--init", paths["init"], "--input", paths["input"],
                   "--mixed-precision", "bf16", "--reduce-dtype", reduce]
            cmd += ["--dump-grads", paths["grads"]] if dump else []
            return parse_losses(mpirun(ranks, cmd).stdout if ranks > 1 else run(cmd)[1])

        l0 = ours("fp32", 1, dump=True)
        g0 = st_load(paths["grads"])
        keys = list(ref_g)
        chk.true(f"[{name}] one loss, finite", len(l0) == 1 and math.isfinite(l0[0]), str(l0))
        chk.true(f"[{name}] every parameter's gradient dumped", set(keys) <= set(g0), sorted(set(keys) - set(g0)))
        d_ours, d_f32 = abs(l0[0] - ref_l[0]), abs(f32_l[0] - ref_l[0])
        print(f"[{name}] step-0 loss: ours - ref {l0[0] - ref_l[0]:+.2e}, fp32 - ref {f32_l[0] - ref_l[0]:+.2e}, "
              f"ref64 - ref {r64_l[0] - ref_l[0]:+.2e}")
        chk.close(f"[{name}] step-0 loss within 5e-5 relative", l0, [ref_l[0]], 5e-5, 0)
        chk.true(f"[{name}] step-0 loss 5x closer to the reference than fp32 is", d_ours <= 0.2 * d_f32,
                 f"ours {d_ours:.2e}, fp32 {d_f32:.2e}")
        gr = bf16.flat(ref_g, keys)
        e_ours = np.linalg.norm(bf16.flat(g0, keys) - gr) / np.linalg.norm(gr)
        e_64 = np.linalg.norm(bf16.flat(r64_g, keys) - gr) / np.linalg.norm(gr)
        e_32 = np.linalg.norm(bf16.flat(f32_g, keys) - gr) / np.linalg.norm(gr)
        e_tip = max(np.linalg.norm(bf16.flat(g, keys) - gr) / np.linalg.norm(gr) for g in noisy_grads(init, cfg, idx, targets))
        bound = max(3 * e_64, 0.25 * e_32)
        print(f"[{name}] step-0 gradients, relative distance to the reference: ours {e_ours:.2e}, "
              f"fp64-accumulated reference {e_64:.2e}, the reference under 1-ulp noise up to {e_tip:.2e}, "
              f"fp32 training {e_32:.2e} (bound {bound:.2e})")
        chk.true(f"[{name}] step-0 gradients within max(3x the reference's order sensitivity, 0.25x the fp32 gap)",
                 bool(e_ours <= bound), f"{e_ours:.2e} > {bound:.2e}")
        for reduce in ("bf16", "fp32"):
            ref_steps, _ = reference(init, cfg, idx, targets, bf16.mm, bf16.rp, round_grads=reduce == "bf16",
                                     steps=STEPS)
            chk.close(f"[{name}] reduce {reduce}: losses over {STEPS} steps within 1e-3", ours(reduce, STEPS),
                      ref_steps, 1e-3, 0)
        # 3 ranks (one sequence each) under FULL_SHARD: the same run, reduced in fp32
        ref_steps, _ = reference(init, cfg, idx, targets, bf16.mm, bf16.rp, steps=STEPS)
        chk.close(f"[{name}] 3 ranks, reduce fp32: losses over {STEPS} steps within 1e-3",
                  ours("fp32", STEPS, ranks=3), ref_steps, 1e-3, 0)
    chk.report()


if __name__ == "__main__":
    main()
