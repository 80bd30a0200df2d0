#!/usr/bin/python3
"""PyTorch reference for the GPT-2 and Llama training benchmarks (bench/run.sh, bench/llama.sh).

Same architecture as fsdp-train's GPT-2: token + position embedding, pre-LN
blocks (ln_1, causal self-attention with a packed qkv Linear C->3C and an
output Linear C->C, ln_2, MLP Linear C->4C, tanh-GELU, Linear 4C->C), final
LayerNorm, LM head tied to the token embedding, cross-entropy; dropout 0.
AdamW(lr 3e-4, weight_decay 0.01) on all parameters. Random token data.

--arch llama: Hugging Face's LlamaForCausalLM computed as modeling_llama does (RMSNorm, q/k/v/o
projections without bias, rotate_half rotary embeddings, grouped-query attention through repeat_kv,
SwiGLU MLP down(silu(gate(x)) * up(x)), final RMSNorm, untied LM head), as fsdp-train --arch llama.

Attention is written out (QK^T over the full T x T square, causal mask,
softmax, PV), which is what fsdp-train computes too (torch 1.13 has no fused
scaled_dot_product_attention).

  /usr/bin/python3 bench/torch_gpt.py --threads 2 --steps 3
  /usr/bin/python3 bench/torch_gpt.py --ddp --steps 3     # 2 gloo ranks, 1 thread each
  python3 bench/torch_gpt.py --device cuda --bf16 --attention sdpa ...   # one GPU (scripts/gpu-check.sh)

Prints `ms_per_step X` and `tokens_per_s Y` (global tokens per second), timed
over --steps steps after --warmup warm-up steps.

Run it with Debian's /usr/bin/python3 (python3-torch 1.13). Thread counts must
be fixed before torch (and its OpenBLAS) load, so torch is imported lazily,
after the environment has been set from the flags.
"""
import argparse
import math
import os
import socket
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default="gpt2", choices=("gpt2", "llama"))
    p.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: --heads)")
    p.add_argument("--d-ff", type=int, default=0, help="llama: the MLP's width (0: 4 x d_model)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    p.add_argument("--steps", type=int, default=3, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (single process)")
    p.add_argument("--ddp", action="store_true",
                   help="2 processes, gloo DDP, batch/2 per rank, 1 thread per rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true",
                   help="torch.autocast(device, dtype=torch.bfloat16) around the forward (bf16 matmuls)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cuda: one GPU, the model and data on it, timed between torch.cuda.synchronize() calls")
    p.add_argument("--attention", default="math", choices=("math", "sdpa"),
                   help="math: written out (QK^T, mask, softmax, PV); sdpa: F.scaled_dot_product_attention "
                        "(flash attention where the build has it; torch 2.x)")
    return p.parse_args(argv)


def set_thread_env(n):
    # OpenBLAS (pthread build) and OpenMP read these when the library loads.
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[k] = str(n)


def build_llama(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    C, H, T, V, L = args.d_model, args.heads, args.seq, args.vocab, args.layers
    KV, hd, FF = args.kv_heads or H, C // H, args.d_ff or 4 * C

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

    def rotate_half(x):
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
    freqs = torch.arange(T).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos_t, sin_t = emb.cos(), emb.sin()

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
            self.q_proj, self.k_proj = nn.Linear(C, H * hd, bias=False), nn.Linear(C, KV * hd, bias=False)
            self.v_proj, self.o_proj = nn.Linear(C, KV * hd, bias=False), nn.Linear(H * hd, C, bias=False)
            self.gate_proj, self.up_proj = nn.Linear(C, FF, bias=False), nn.Linear(C, FF, bias=False)
            self.down_proj = nn.Linear(FF, C, bias=False)
            self.mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)

        def forward(self, x):
            B, Tt, _ = x.shape
            cos, sin = cos_t[:Tt].to(x.device), sin_t[:Tt].to(x.device)
            h = self.input_layernorm(x)
            q = self.q_proj(h).view(B, Tt, H, hd).transpose(1, 2)
            k = self.k_proj(h).view(B, Tt, KV, hd).transpose(1, 2)
            v = self.v_proj(h).view(B, Tt, KV, hd).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            if args.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                att = att.masked_fill(~self.mask[:, :, :Tt, :Tt].to(att.device), float("-inf"))
                y = F.softmax(att, dim=-1) @ v
            x = x + self.o_proj(y.transpose(1, 2).reshape(B, Tt, H * hd))
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, C)
            self.layers = nn.ModuleList([Layer() for _ in range(L)])
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(C, V, bias=False)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            for layer in self.layers:
                x = layer(x)
            logits = self.lm_head(self.norm(x))
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    return Llama()


def build_model(args):
    if args.arch == "llama":
        return build_llama(args)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    C, H, T, V, L = args.d_model, args.heads, args.seq, args.vocab, args.layers

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            # A plain attribute, not a buffer: gloo cannot broadcast bool buffers (DDP syncs buffers).
            self.mask = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)

        def forward(self, x):
            B, Tt, _ = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(B, Tt, H, C // H).transpose(1, 2)
            k = k.view(B, Tt, H, C // H).transpose(1, 2)
            v = v.view(B, Tt, H, C // H).transpose(1, 2)
            if args.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.c_proj(y.transpose(1, 2).contiguous().view(B, Tt, C))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~self.mask[:, :, :Tt, :Tt].to(att.device), float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, Tt, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(C, 4 * C)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(C)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            B, Tt = idx.shape
            pos = torch.arange(Tt, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.h:
                x = blk(x)
            x = self.ln_f(x)
            logits = x @ self.wte.weight.t()  # LM head tied to the token embedding
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    return GPT()


def train(args, rank=0, world=1):
    """Runs warm-up + timed steps; returns (seconds per timed step, n_params)."""
    import torch
    torch.manual_seed(args.seed)  # same init on every rank
    model = build_model(args).to(args.device)
    n_params = sum(p.numel() for p in model.parameters())
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    B = args.batch // world
    g = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)

    def step():
        data = torch.randint(0, args.vocab, (B, args.seq + 1), generator=g).to(args.device)
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(data[:, :-1], data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    if world > 1:
        torch.distributed.barrier()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    if world > 1:
        torch.distributed.barrier()
    dt = (time.perf_counter() - t0) / args.steps
    return dt, n_params


def ddp_worker(rank, world, port, args, q):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dt, n_params = train(args, rank, world)
    # Report the slowest rank's time (they are synchronized by the gradient all-reduce anyway).
    t = torch.tensor([dt], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        q.put((t.item(), n_params))
    dist.destroy_process_group()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = parse_args()
    if args.ddp:
        world = 2
        if args.batch % world:
            sys.exit("torch_gpt.py: --batch must be divisible by 2 with --ddp")
        set_thread_env(1)
    else:
        world = 1
        set_thread_env(args.threads)
    import torch
    import torch.multiprocessing as mp

    if args.ddp:
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        mp.spawn(ddp_worker, args=(world, free_port(), args, q), nprocs=world, join=True)
        dt, n_params = q.get()
        cfg = "ddp 2 ranks x 1 thread (gloo)"
    else:
        torch.set_num_threads(args.threads)
        dt, n_params = train(args)
        cfg = f"{args.threads} thread(s)" if args.device == "cpu" else f"1 GPU ({torch.cuda.get_device_name()})"
        cfg += f", attention {args.attention}" + (", bf16 autocast" if args.bf16 else "")
    tokens = args.batch * args.seq
    shape = f"KV{args.kv_heads or args.heads} F{args.d_ff or 4 * args.d_model} " if args.arch == "llama" else ""
    print(f"config torch {torch.__version__} {args.arch} L{args.layers} C{args.d_model} H{args.heads} {shape}"
          f"V{args.vocab} T{args.seq} B{args.batch}, {cfg}, {n_params} parameters")
    print(f"ms_per_step {dt * 1e3:.1f}")
    print(f"tokens_per_s {tokens / dt:.1f}")


if __name__ == "__main__":
    main()
