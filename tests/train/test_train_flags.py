"""fsdp-train flags that change what a run computes or reports, each held against an exact reference so
the test fails if the flag is ignored: --eval-every/--val-data (validation losses equal a PyTorch
evaluation of the same weights on the validation windows, or without --val-data on the held-out last 10%
of --data, at exactly the documented steps), --max-new-tokens
(the bytes equal a PyTorch decode with the same Philox stream, before and after training), --plot (a
PNG), FSDP_DEBUG=INFO (the sharding layout on rank 0 only, matching the model), --min-lr and the
schedule (the lr of every step equals the documented formula; the last step is at --min-lr), and the
n_head metadata of an --init file (an 8-head file trains with 8 heads; bad values are one-line errors)."""
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, run, st_load, st_save, tmpdir  # noqa: E402
from test_gpt2_parity import GPT2  # noqa: E402

V, MAXT, L, C, H = 90, 16, 2, 48, 4  # the --init model of the eval and sample checks
EXACT = ["--clip-grad-norm", "0", "--warmup", "0", "--lr-schedule", "constant", "--threads", "1"]


def write_bin(path, tokens):
    """An llm.c token file: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(np.asarray(tokens, np.uint16).tobytes())


def windows(tokens, start, B, T):
    """B rows of T (+1 shifted) tokens from token `start` (row i at start + i*T), as fsdp_data_batch."""
    pos = np.array([[(start + i * T + j) % len(tokens) for j in range(T + 1)] for i in range(B)])
    return torch.from_numpy(tokens[pos[:, :-1]].astype(np.int64)), torch.from_numpy(tokens[pos[:, 1:]].astype(np.int64))


def logits_of(model, idx):
    """GPT2's logits (test_gpt2_parity's forward without the loss). idx: (B, T)"""
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for block in model.h:
        x = block(x)
    return model.ln_f(x) @ model.wte.weight.t()


# --- Philox4x32-10 and the sampler of fsdp-train (src/core/rng.c, next_token in src/cli/train_sample.c)
MASK = 0xFFFFFFFF


def philox(seed, stream, block):
    c = [block & MASK, block >> 32 & MASK, stream & MASK, stream >> 32 & MASK]
    k0, k1 = seed & MASK, seed >> 32 & MASK
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK]
        k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
    return c


def fnv1a(name):
    h = 1469598103934665603
    for ch in name.encode():
        h = ((h ^ ch) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def torch_sample(model, n, seed, T):
    """n tokens sampled at temperature 1 after a newline, the context sliding at T tokens; token i draws
    uniform i of the Philox stream (seed, hash("sample")) and takes the first token whose running sum of
    exp(logit - max) reaches u * sum. Returns the bytes fsdp-train prints."""
    stream, ctx, out = fnv1a("sample"), [10 % V], bytearray()
    with torch.no_grad():
        for i in range(n):
            lg = logits_of(model, torch.tensor([ctx]))[0, -1].numpy().astype(np.float32)
            e = [math.exp(float(np.float32(x - lg.max()))) for x in lg]
            total = 0.0
            for ev in e:  # summed in order, as the C loop does
                total += ev
            u = ((philox(seed, stream, i >> 2)[i & 3] >> 8) / 16777216.0) * total
            acc, tok = 0.0, V - 1
            for v, ev in enumerate(e):
                acc += ev
                if acc >= u:
                    tok = v
                    break
            out.append(tok if 0 < tok < 256 else ord("?"))
            ctx = (ctx + [tok])[-T:]
    return bytes(out)


def sample_of(stdout, n):
    """The bytes between fsdp-train's sample markers (None when they are missing)."""
    head = b"--- sample (%d tokens) ---\n" % n
    tail = b"\n--- end of sample ---\n"
    a = stdout.find(head)
    b = stdout.find(tail, a + len(head)) if a >= 0 else -1
    return stdout[a + len(head):b] if a >= 0 and b >= 0 else None


def run_bytes(cmd):
    """cmd with stdout as bytes (the sample holds any byte); a failed run ends the test."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    r = subprocess.run(cmd, capture_output=True, env=env, timeout=300)
    if r.returncode != 0:
        print(f"FAIL: command exited with {r.returncode}: {' '.join(cmd)}\n{r.stderr.decode(errors='replace')}")
        sys.exit(1)
    return r.stdout


def check_eval(chk, train, tmp, init, model_state, train_tok, train_bin):
    B, T, steps, every, nb = 2, 16, 5, 2, 3
    val_tok = np.random.RandomState(5).randint(0, V, size=3000).astype(np.uint16)
    val_bin = os.path.join(tmp, "val.bin")
    write_bin(val_bin, val_tok)
    model = GPT2(V, MAXT, L, C, H)
    model.load_state_dict(model_state)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    ref_val, ref_held_out = {}, {}
    held_out = train_tok[len(train_tok) - len(train_tok) // 10:]  # no --val-data: the last 10%, never trained on
    assert steps * B * T <= len(train_tok) - len(held_out)  # so training reads the same windows either way
    for s in range(steps):
        idx, tgt = windows(train_tok, s * B * T, B, T)
        opt.zero_grad()
        model(idx, tgt).backward()
        opt.step()
        if (s + 1) % every == 0 or s == steps - 1:
            with torch.no_grad():
                ref_val[s] = np.mean([model(*windows(val_tok, b * B * T, B, T)).item() for b in range(nb)])
                ref_held_out[s] = np.mean([model(*windows(held_out, b * B * T, B, T)).item() for b in range(nb)])
    want_steps = sorted(ref_val)  # 1, 3 and the last, 4
    base = ["--init", init, "--seq", str(T), "--batch", str(B), "--steps", str(steps), "--lr", "3e-3",
            "--data", train_bin, "--eval-every", str(every), "--eval-batches", str(nb)] + EXACT
    for label, extra, ref in (("--val-data", ["--val-data", val_bin], ref_val),
                              ("no --val-data (the last 10% of --data held out)", [], ref_held_out)):
        jl = os.path.join(tmp, "eval.jsonl")
        _, out, _ = run([train] + base + extra + ["--log-jsonl", jl])
        recs = [json.loads(line) for line in open(jl)]
        got = {r["step"]: r["val_loss"] for r in recs if "val_loss" in r}
        printed = [int(line.split()[1]) for line in out.splitlines() if line.startswith("step ") and " val " in line]
        chk.true(f"eval {label}: validation at steps {want_steps} exactly (log and progress line)",
                 sorted(got) == want_steps and printed == want_steps, f"log {sorted(got)}, printed {printed}")
        chk.close(f"eval {label}: val loss == PyTorch evaluation of the same weights",
                  [got.get(s, float("nan")) for s in want_steps], [ref[s] for s in want_steps], 1e-5, 0)
    # two ranks with half the batch see the same validation windows: the same mean
    jl2 = os.path.join(tmp, "eval2.jsonl")
    base2 = [a if a != str(B) else str(B // 2) for a in base]
    mpirun(2, [train] + base2 + ["--val-data", val_bin, "--log-jsonl", jl2])
    got2 = {r["step"]: r["val_loss"] for r in map(json.loads, open(jl2)) if "val_loss" in r}
    chk.close("eval on 2 ranks x batch 1 == PyTorch (mean over ranks)",
              [got2.get(s, float("nan")) for s in want_steps], [ref_val[s] for s in want_steps], 1e-5, 0)
    # validation data with token ids beyond the model's vocabulary: refused before training
    big = os.path.join(tmp, "bigvocab.bin")
    write_bin(big, np.arange(200) % 200)
    rc, out, err = run([train] + base + ["--val-data", big], expect_ok=False)
    chk.true("eval: --val-data with ids >= vocab is a one-line error naming the file",
             rc != 0 and "step " not in out and big in err and len(err.strip().splitlines()) == 1, err)
    # --input has no training stream: --eval-every needs --val-data; with it, the fixed batch stays fixed
    inp = os.path.join(tmp, "evalinput.safetensors")
    idx, tgt = windows(train_tok, 0, B, T)
    st_save(inp, {"idx": idx.numpy().astype(np.int32), "targets": tgt.numpy().astype(np.int32)})
    fixed = ["--init", init, "--seq", str(T), "--batch", str(B), "--steps", "3", "--lr", "3e-3", "--input", inp] + EXACT
    rc, out, err = run([train] + fixed + ["--eval-every", "1"], expect_ok=False)
    chk.true("eval: --input with --eval-every and no --val-data is refused (not a crash)",
             rc > 0 and "--val-data" in err and "step " not in out, f"rc {rc}: {err}")
    plain = parse_losses(run([train] + fixed)[1])
    evald = parse_losses(run([train] + fixed + ["--eval-every", "1", "--val-data", val_bin])[1])
    chk.close("eval: with --input, evaluation leaves the training batch alone (same losses)", evald, plain, 0, 0)


def check_sample(chk, train, tmp, init, model_state, train_bin):
    n, T = 40, 8  # T < n: the context slides
    model = GPT2(V, MAXT, L, C, H)
    model.load_state_dict(model_state)
    outs = {}
    for seed in (7, 8):
        got = sample_of(run_bytes([train, "--init", init, "--seq", str(T), "--batch", "1", "--steps", "0",
                                   "--max-new-tokens", str(n), "--seed", str(seed), "--data", train_bin, "--threads", "1"]), n)
        want = torch_sample(model, n, seed, T)
        outs[seed] = got
        chk.true(f"sample seed {seed}: exactly {n} bytes, equal to a PyTorch decode with the same Philox stream",
                 got == want, f"ours {got!r}\nwant {want!r}")
    chk.true("sample: another seed gives other text", outs[7] is not None and outs[7] != outs[8])
    final = os.path.join(tmp, "sampled_final.safetensors")
    got = sample_of(run_bytes([train, "--init", init, "--seq", str(T), "--batch", "2", "--steps", "3", "--lr", "3e-2",
                               "--data", train_bin, "--save", final, "--max-new-tokens", str(n), "--seed", "7"] + EXACT), n)
    trained = GPT2(V, MAXT, L, C, H)
    trained.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in st_load(final).items()})
    want = torch_sample(trained, n, 7, T)
    chk.true("sample after training: decodes the trained weights (PyTorch decode of the saved file)", got == want,
             f"ours {got!r}\nwant {want!r}")
    chk.true("sample after training differs from before", got is not None and got != outs[7])


def png_size(path):
    """(width, height) from a PNG's IHDR, or None when path is not a PNG."""
    head = open(path, "rb").read(24) if os.path.exists(path) else b""
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def check_plot(chk, train, tmp):
    small = [train, "--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--steps", "6",
             "--eval-every", "2", "--threads", "1"]
    for name in ("loss.png", "it's a \"plot\" $(x).png"):  # quotes and shell characters in the name are safe
        png = os.path.join(tmp, name)
        run(small + ["--plot", png])
        size = png_size(png)
        chk.true(f"--plot {name!r} writes a PNG there ({size})", size is not None and min(size) > 0)
    left = [f for f in os.listdir(tmp) if ".png.tmp" in f or f.startswith("it")]
    chk.true("--plot leaves no temporary or stray file", sorted(left) == ["it's a \"plot\" $(x).png"], str(left))
    nognuplot = os.path.join(tmp, "empty-bin")
    os.makedirs(nognuplot, exist_ok=True)
    png = os.path.join(tmp, "nognuplot.png")
    rc, out, err = run(small + ["--plot", png], expect_ok=False, env={"PATH": nognuplot})
    chk.true("--plot without gnuplot: non-zero exit, one line naming --plot, nothing of gnuplot's on stdout",
             rc > 0 and len(err.strip().splitlines()) == 1 and "--plot" in err and not os.path.exists(png)
             and all(x.startswith(("fsdp-train", " ", "step ", "mean ", "trace ")) for x in out.splitlines()),
             f"rc {rc}\nstderr {err}\nstdout {out[-500:]}")


def check_debug_info(chk, train):
    args = [train, "--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "32", "--batch", "2", "--steps", "1"]
    r = mpirun(2, args, env={"FSDP_DEBUG": "INFO"})
    lines = r.stderr.splitlines()
    heads = [x for x in lines if x.startswith("FSDP summary:")]
    chk.true("FSDP_DEBUG=INFO: one layout (rank 0 only), world 2, 3 units",
             len(heads) == 1 and "world 2" in heads[0] and "3 units" in heads[0], "\n".join(heads) or r.stderr)
    # the unit rows and the parameters under each: names and shapes of the model, numel, shard = half
    ref = {k: tuple(v.shape) for k, v in GPT2(256, 32, 2, 64, 4).state_dict().items()}
    units, cur = {}, None
    for x in lines:
        f = x.split()
        if len(f) == 6 and (f[0].startswith("h.") or f[0] == "(root)") and f[1].isdigit():
            cur = units[f[0]] = {"row": [int(v) for v in f[1:]], "params": {}}
        elif x.startswith("    ") and cur is not None and len(f) >= 2:
            cur["params"][f[0]] = tuple(int(v) for v in " ".join(f[1:]).strip("[]").split(","))
    seen = {k: s for u in units.values() for k, s in u["params"].items()}
    chk.true("FSDP_DEBUG=INFO: units h.0, h.1, (root) list every parameter with its shape",
             sorted(units) == ["(root)", "h.0", "h.1"] and seen == ref, f"{sorted(units)}; {seen}")
    for name, u in sorted(units.items()):
        n_params, numel, pad, shard, _ = u["row"]
        want = sum(int(np.prod(s)) for s in u["params"].values())
        chk.true(f"FSDP_DEBUG=INFO: unit {name}: {n_params} params, numel {numel}, shard {shard} = (numel+padding)/2",
                 n_params == len(u["params"]) and numel == want and 2 * shard == numel + pad, str(u["row"]))
    r = mpirun(2, args)
    chk.true("without FSDP_DEBUG: no layout printed", "FSDP summary" not in r.stderr + r.stdout)


def check_schedule(chk, train, tmp):
    steps, warmup, lr, min_lr = 12, 3, 1e-2, 2.5e-3
    for sched in ("cosine", "constant"):
        jl = os.path.join(tmp, f"lr_{sched}.jsonl")
        run([train, "--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--steps",
             str(steps), "--warmup", str(warmup), "--lr", str(lr), "--min-lr", str(min_lr), "--lr-schedule", sched,
             "--log-jsonl", jl, "--threads", "1"])
        got = [r["lr"] for r in map(json.loads, open(jl)) if "step" in r]
        want = []
        for s in range(steps):  # README: warmup lr*(s+1)/W, then cosine to --min-lr at the last step
            if s < warmup:
                want.append(lr * (s + 1) / warmup)
            elif sched == "constant":
                want.append(lr)
            else:
                want.append(min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - 1 - warmup))))
        chk.close(f"--lr-schedule {sched}: lr of every step == the documented formula", got, want, 1e-6, 0)
        if sched == "cosine":
            chk.close("--min-lr: the last step of the cosine schedule runs at --min-lr", got[-1:], [min_lr], 1e-6, 0)


def check_n_head(chk, train, tmp):
    Vn, T, B, Cn = 64, 16, 2, 64
    torch.manual_seed(3)
    m8 = GPT2(Vn, T, 1, Cn, 8)
    with torch.no_grad():  # large q/k weights: the attention pattern, so the head count, matters
        m8.h[0].attn.c_attn.weight.mul_(25)
    m4 = GPT2(Vn, T, 1, Cn, 4)
    m4.load_state_dict(m8.state_dict())
    idx, tgt = torch.randint(0, Vn, (B, T)), torch.randint(0, Vn, (B, T))
    with torch.no_grad():
        l8, l4 = m8(idx, tgt).item(), m4(idx, tgt).item()
    chk.true(f"n_head: the check can tell heads apart (8 heads {l8:.5f}, 4 heads {l4:.5f})", abs(l8 - l4) > 1e-3)
    inp = os.path.join(tmp, "nh_input.safetensors")
    st_save(inp, {"idx": idx.numpy().astype(np.int32), "targets": tgt.numpy().astype(np.int32)})
    cmd = ["--seq", str(T), "--batch", str(B), "--steps", "1", "--input", inp] + EXACT
    path = os.path.join(tmp, "nh8.safetensors")
    st_save(path, m8.state_dict(), metadata={"n_head": "8"})
    _, out, _ = run([train, "--init", path] + cmd)  # --heads defaults to 4: the file's 8 must win
    chk.true("n_head 8 metadata: the banner says 8 heads", ", 8 heads," in out, out[:300])
    chk.close("n_head 8 metadata: step-0 loss == PyTorch 8-head GPT-2", parse_losses(out), [l8], 1e-5, 0)
    for bad in ("abc", "0", "-8", "3", "8x"):
        p = os.path.join(tmp, "nh_bad.safetensors")
        st_save(p, m8.state_dict(), metadata={"n_head": bad})
        rc, out, err = run([train, "--init", p] + cmd, expect_ok=False)
        chk.true(f"n_head '{bad}': one-line error naming the file and n_head, no step, no crash",
                 rc > 0 and "step " not in out and p in err and "n_head" in err and len(err.strip().splitlines()) == 1,
                 f"rc {rc}: {err}")


def main():
    args = parse_args()
    train = os.path.join(args.bin, "fsdp-train")
    tmp = tmpdir()
    chk = Checker("fsdp-train flags")
    torch.manual_seed(1)
    state = GPT2(V, MAXT, L, C, H).state_dict()
    init = os.path.join(tmp, "init.safetensors")
    st_save(init, state)
    train_tok = np.random.RandomState(0).randint(0, V, size=5000).astype(np.uint16)
    train_tok[0] = V - 1
    train_bin = os.path.join(tmp, "train.bin")
    write_bin(train_bin, train_tok)
    check_eval(chk, train, tmp, init, state, train_tok, train_bin)
    check_sample(chk, train, tmp, init, state, train_bin)
    check_plot(chk, train, tmp)
    check_debug_info(chk, train)
    check_schedule(chk, train, tmp)
    check_n_head(chk, train, tmp)
    chk.report()


if __name__ == "__main__":
    main()
