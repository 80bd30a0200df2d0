"""fsdp-train --eval-only and the sampling flags, each held against a PyTorch reference:
- greedy decoding (--temperature 0) after --prompt of a small byte-level GPT-2 (weights from --init) equals
  a float64 PyTorch greedy decode of the same weights; another prompt gives its own decode;
- --temperature and --top-k: every sampled token is inside torch.topk of the PyTorch logits at its position,
  and the tokens equal a PyTorch sampler given the same Philox uniforms (uniform i for token i of the
  stream (--seed, "sample")); 2 ranks print what 1 rank prints;
- --eval-only's val_loss of a checkpoint equals the training run's logged val_loss of the same step, with
  --val-data and with the held-out last 10% of --data, equals a float64 PyTorch evaluation of the saved
  weights within 2e-4, and is the same on 1 rank x batch 4 and 2 ranks x batch 2; --ckpt-dir is only read;
- a model made to emit 0xFF, valid 2-, 3- and 4-byte sequences, a lone lead byte, a surrogate and a truncated
  sequence prints "\\xFF", the sequences unchanged, "\\xC3", "\\xED\\xA0\\x80" and "\\xE2\\x82":
  the output always decodes as UTF-8;
- the error cases: training flags with --eval-only, no weights, --ckpt-dir without --resume auto, --resume
  auto of an empty directory, --prompt/--top-k/--temperature without --max-new-tokens, a prompt byte outside
  the vocabulary, --top-k above it: one line naming the flag, exit 2, nothing trained."""
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
sys.path.insert(0, HERE)
from fsdp_testlib import Checker, mpirun, parse_args, proc, st_load, st_read, st_save, tmpdir  # noqa: E402
from test_gpt2_parity import GPT2  # noqa: E402
from test_train_flags import fnv1a, logits_of, philox, write_bin  # noqa: E402

V, MAXT, L, C, H = 256, 32, 2, 48, 4  # a byte-level model
SEQ = 16


def run_bytes(cmd, n_ranks=1):
    """stdout as bytes (a sample holds any byte), stderr as text; a failed run ends the test."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    if n_ranks > 1:
        env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "OMPI_MCA_rmaps_base_oversubscribe": "1"})
        cmd = ["mpirun", "-np", str(n_ranks), "-x", "OMP_NUM_THREADS"] + cmd
    r = subprocess.run(cmd, capture_output=True, env=env, timeout=300)
    if r.returncode != 0:
        print(f"FAIL: command exited with {r.returncode}: {' '.join(cmd)}\n{r.stderr.decode(errors='replace')}")
        sys.exit(1)
    return r.stdout


def sample_of(stdout, n):
    """The bytes between fsdp-train's sample markers (None when they are missing)."""
    m = re.search(rb"--- sample \(%d tokens\) ---\n(.*?)\n--- end of sample ---\n" % n, stdout, re.S)
    return m.group(1) if m else None


def printed(tokens):
    """What fsdp-train prints for tokens: token 0 and ids >= 256 as '?', then valid UTF-8 sequences as they
    are and every other byte as \\xHH (Python's strict decoder: no overlongs, surrogates or > U+10FFFF)."""
    b = bytes(t if 0 < t < 256 else ord("?") for t in tokens)
    out, i = [], 0
    while i < len(b):
        for n in (1, 2, 3, 4):
            try:
                if len(b[i:i + n]) == n and len(b[i:i + n].decode("utf-8")) == 1:
                    out.append(b[i:i + n])
                    break
            except UnicodeDecodeError:
                continue
        else:
            out.append(b"\\x%02X" % b[i])
            n = 1
        i += n
    return b"".join(out)


def unprint(text):
    """The bytes behind printed() text (an escape is \\xHH; the samples here hold no literal backslash-x)."""
    return re.sub(rb"\\x([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), text)


def torch_model(state):
    m = GPT2(V, MAXT, L, C, H)
    m.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in state.items()})
    return m.double().eval()


def last_logits(model, ctx):
    with torch.no_grad():
        return logits_of(model, torch.tensor([ctx[-SEQ:]]))[0, -1]


def torch_greedy(model, prompt, n):
    ctx, out = list(prompt), []
    for _ in range(n):
        tok = int(torch.argmax(last_logits(model, ctx)))
        out.append(tok)
        ctx.append(tok)
    return out


def torch_sample(model, prompt, n, seed, temperature, top_k):
    """fsdp-train's sampler: the top_k largest logits (all when 0) kept, u_i = uniform i of the Philox stream
    (seed, hash("sample")); the first kept token in id order whose running sum of exp((logit - max) / T)
    reaches u_i * sum."""
    stream, ctx, out = fnv1a("sample"), list(prompt), []
    for i in range(n):
        lg = last_logits(model, ctx).numpy()
        kept = sorted(np.argsort(-lg, kind="stable")[:top_k].tolist()) if top_k else list(range(V))
        mx = max(lg[v] for v in kept)
        e = [math.exp((lg[v] - mx) / temperature) for v in kept]
        u = ((philox(seed, stream, i >> 2)[i & 3] >> 8) / 16777216.0) * sum(e)
        acc, tok = 0.0, kept[-1]
        for v, ev in zip(kept, e):
            acc += ev
            if acc >= u:
                tok = v
                break
        out.append(tok)
        ctx.append(tok)
    return out


def eval_only_loss(stdout):
    m = re.search(r"^eval: val_loss (\S+)", stdout, re.M)
    return float(m.group(1)) if m else float("nan")


def tool_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("fsdp-train:")]


def refused(chk, label, r, needles):
    lines = tool_lines(r.stderr)
    chk.true(f"{label}: exit 2, one line naming {', '.join(needles)}, nothing run",
             r.returncode == 2 and len(lines) == 1 and all(n in lines[0] for n in needles)
             and "step " not in r.stdout and "--- sample" not in r.stdout and "eval:" not in r.stdout,
             f"rc {r.returncode}: {r.stderr[-600:]}")


def check_generate(chk, train, tmp):
    # the parity init: flat logits, so that a sampler would not pick the argmax (gaps still >> fp32 error)
    torch.manual_seed(3)
    state = {k: v.detach().clone() for k, v in GPT2(V, MAXT, L, C, H).state_dict().items()}
    init = os.path.join(tmp, "gen.safetensors")
    st_save(init, state)
    ref = torch_model(state)
    base = [train, "--eval-only", "--init", init, "--seq", str(SEQ), "--eval-batches", "0", "--threads", "1"]
    n = 10
    outs = {}
    for prompt in ("Hello", "Zq", "a prompt longer than --seq 16"):  # the last: only its last 16 bytes
        got = sample_of(run_bytes(base + ["--prompt", prompt, "--temperature", "0", "--max-new-tokens", str(n)]), n)
        want = printed(torch_greedy(ref, prompt.encode(), n))
        outs[prompt] = got
        chk.true(f"greedy (--temperature 0) after --prompt {prompt!r}: {n} tokens == float64 PyTorch greedy decode",
                 got == want, f"ours {got!r}\nwant {want!r}")
    chk.true("greedy: the prompt matters (another prompt, another decode)", outs["Hello"] != outs["Zq"])
    sampled = printed(torch_sample(ref, b"Hello", n, 0, 1.0, 0))
    chk.true("greedy differs from temperature-1 sampling of the same model", sampled != outs["Hello"])

    # sampling: the parity init (flat logits), so that the draws spread over the top k and beyond it
    torch.manual_seed(6)
    flat = {k: v.detach().clone() for k, v in GPT2(V, MAXT, L, C, H).state_dict().items()}
    flat_init = os.path.join(tmp, "flat.safetensors")
    st_save(flat_init, flat)
    ref = torch_model(flat)
    base = [train, "--eval-only", "--init", flat_init, "--seq", str(SEQ), "--eval-batches", "0", "--threads", "1"]
    n, seed, temp, k = 14, 5, 2.0, 4
    cmd = base + ["--prompt", "ab", "--temperature", str(temp), "--top-k", str(k), "--max-new-tokens", str(n),
                  "--seed", str(seed)]
    got = sample_of(run_bytes(cmd), n)
    toks = list(unprint(got)) if got is not None else []
    ctx, inside = list(b"ab"), []
    for t in toks:
        top = torch.topk(last_logits(ref, ctx), k).indices.tolist()
        inside.append(t in top)
        ctx.append(t)
    chk.true(f"--top-k {k} --temperature {temp}: {n} tokens, each inside torch.topk of the PyTorch logits",
             len(toks) == n and all(inside), f"{toks} inside {inside}")
    want = torch_sample(ref, b"ab", n, seed, temp, k)
    chk.true("--top-k --temperature: the tokens equal a PyTorch sampler given the same Philox uniforms",
             toks == want, f"ours {toks}\nwant {want}")
    want_t1 = torch_sample(ref, b"ab", n, seed, 0.25, k)
    chk.true("--temperature matters (the PyTorch sampler at T 0.25 draws other tokens)", toks != want_t1)
    got2 = sample_of(run_bytes(cmd, n_ranks=2), n)
    chk.true("2 ranks print the sample 1 rank prints (same forwards, same draws)", got2 == got and got is not None,
             f"2 ranks {got2!r}\n1 rank {got!r}")
    # the prompt is recorded in every file's settings: one that is not UTF-8 still makes a readable file
    saved = os.path.join(tmp, "prompted.safetensors")
    bad_prompt = b'\xff"q\\'
    got = sample_of(run_bytes([train, "--init", flat_init, "--seq", str(SEQ), "--steps", "1", "--batch", "1",
                               "--threads", "1", "--prompt", bad_prompt, "--max-new-tokens", "3", "--save", saved]), 3)
    meta = st_read(saved)[0].get("__metadata__", {}) if got is not None and os.path.exists(saved) else {}
    chk.true("a --prompt that is not UTF-8: the --save file's header is valid JSON/UTF-8 and records it escaped",
             meta.get("setting.prompt") == '\u00ff"q\\' and proc([os.path.join(os.path.dirname(train), "fsdp-ckpt"),
                                                                  "info", saved], expect_ok=False).returncode == 0,
             str(meta.get("setting.prompt")))
    r = proc(cmd + ["--sample", str(n)], expect_ok=False)
    chk.true("--sample N is an alias of --max-new-tokens", r.returncode == 0 and "--- sample (%d tokens)" % n in r.stdout,
             r.stderr[-300:])


def check_utf8(chk, train, tmp):
    """Blocks zeroed (residual = wte[tok] + wpe[pos]), wpe[p] = 1000 e_{d(p)}, wte[t_d] = 3 e_d: position p's
    logits pick the token of dimension d(p), whatever the context."""
    seq = [0xC3, 0xA9, 0xFF, 0xE2, 0x82, 0xAC, 0xC3, 0xF0, 0x9F, 0x98, 0x80, 0xED, 0xA0, 0x80, 0xE2, 0x82]
    want = ("é".encode() + b"\\xFF" + "€".encode() + b"\\xC3" + "\U0001F600".encode() + b"\\xED\\xA0\\x80" +
            b"\\xE2\\x82")  # the surrogate U+D800 (ED A0 80) is not UTF-8 either
    torch.manual_seed(4)
    m = GPT2(V, MAXT, L, C, H)
    dims = {t: d for d, t in enumerate(dict.fromkeys(seq))}
    with torch.no_grad():
        for blk in m.h:
            for lin in (blk.attn.c_proj, blk.mlp.c_proj):
                lin.weight.zero_()
                lin.bias.zero_()
        m.ln_f.weight.fill_(1.0)
        m.ln_f.bias.zero_()
        m.wte.weight.normal_(0, 0.01)
        m.wpe.weight.zero_()
        for t, d in dims.items():
            m.wte.weight[t].zero_()
            m.wte.weight[t, d] = 3.0
        for p, t in enumerate(seq):  # the token after position p (the prompt is one newline at position 0)
            m.wpe.weight[p, dims[t]] = 1000.0
    init = os.path.join(tmp, "utf8.safetensors")
    st_save(init, m.state_dict())
    out = run_bytes([train, "--eval-only", "--init", init, "--seq", str(SEQ), "--eval-batches", "0", "--threads", "1",
                     "--temperature", "0", "--max-new-tokens", str(len(seq))])
    got = sample_of(out, len(seq))
    chk.true("the reference decode of the crafted model is the crafted sequence",
             torch_greedy(torch_model(m.state_dict()), b"\n", len(seq)) == seq)
    chk.true("0xFF prints \\xFF, a lone lead byte, a surrogate and a truncated sequence escaped, é € 😀 unchanged",
             got == want and printed(seq) == want, f"ours {got!r}\nwant {want!r}")
    try:
        out.decode("utf-8")
        ok = True
    except UnicodeDecodeError as e:
        ok, out = False, str(e)
    chk.true("the whole output decodes as UTF-8", ok, str(out)[:300])


def check_eval(chk, train, tmp):
    B, nb = 4, 3
    rng = np.random.RandomState(0)
    data_bin, val_bin = os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin")
    write_bin(data_bin, rng.randint(0, V, size=3000))
    val_tok = rng.randint(0, V, size=1500)
    write_bin(val_bin, val_tok)
    model = ["--layers", str(L), "--d-model", str(C), "--heads", str(H), "--seq", str(SEQ), "--max-seq", str(MAXT),
             "--threads", "1"]
    common = model + ["--data", data_bin, "--eval-batches", str(nb)]
    for label, extra in (("--val-data", ["--val-data", val_bin]), ("held-out last 10% of --data", [])):
        ck, jl = os.path.join(tmp, f"ck{len(extra)}"), os.path.join(tmp, f"log{len(extra)}.jsonl")
        proc([train] + common + extra + ["--batch", str(B), "--steps", "2", "--lr", "1e-2", "--warmup", "0",
                                         "--eval-every", "2", "--ckpt-dir", ck, "--log-jsonl", jl] +
             (["--ckpt-type", "full"] if extra else []))  # full (model.safetensors for PyTorch), and sharded
        logged = [r["val_loss"] for r in map(json.loads, open(jl)) if "val_loss" in r]
        step_dir = os.path.join(ck, "step_00000002")
        before = sorted(os.listdir(ck))
        ev = [train, "--eval-only", "--resume", step_dir] + common + extra
        one = eval_only_loss(proc(ev + ["--batch", str(B)]).stdout)
        two = eval_only_loss(mpirun(2, ev + ["--batch", str(B // 2)]).stdout)
        auto = eval_only_loss(proc([train, "--eval-only", "--resume", "auto", "--ckpt-dir", ck] + common + extra +
                                   ["--batch", str(B)]).stdout)
        chk.close(f"eval-only ({label}): val_loss == the training run's logged val_loss at step 2", [one],
                  logged[-1:], 0, 2e-7)
        chk.close(f"eval-only ({label}): 2 ranks x batch {B // 2} == 1 rank x batch {B}", [two], [one], 0, 1e-6)
        chk.close(f"eval-only ({label}): --resume auto --ckpt-dir picks the same checkpoint", [auto], [one], 0, 0)
        chk.true(f"eval-only ({label}): --ckpt-dir is only read (nothing saved)", sorted(os.listdir(ck)) == before,
                 f"{before} -> {sorted(os.listdir(ck))}")
        if not extra:  # a bf16 export (fsdp-ckpt convert) of the sharded checkpoint evaluates without --allow-lowp-resume, to within bf16
            bf16 = os.path.join(tmp, "bf16_export")
            proc([os.path.join(os.path.dirname(train), "fsdp-ckpt"), "convert", step_dir, bf16, "--dtype", "bf16"])
            low = eval_only_loss(proc([train, "--eval-only", "--resume", bf16, "--batch", str(B)] + common +
                                      extra).stdout)
            chk.close("eval-only of a bf16 export: accepted, val_loss within 2e-2 of fp32's", [low], [one], 0, 2e-2)
        if extra:  # PyTorch on the saved weights, the windows of batch b at b*B*SEQ of the validation file
            ref = torch_model(st_load(os.path.join(step_dir, "model.safetensors")))
            losses = []
            with torch.no_grad():
                for b in range(nb):
                    pos = np.array([[(b * B * SEQ + i * SEQ + j) % len(val_tok) for j in range(SEQ + 1)]
                                    for i in range(B)])
                    idx, tgt = torch.from_numpy(val_tok[pos[:, :-1]]), torch.from_numpy(val_tok[pos[:, 1:]])
                    losses.append(ref(idx, tgt).item())
            chk.close("eval-only (--val-data): val_loss == float64 PyTorch of the checkpoint's weights", [one],
                      [float(np.mean(losses))], 0, 2e-4)
            init_only = eval_only_loss(proc([train, "--eval-only", "--init", os.path.join(step_dir, "model.safetensors"),
                                             "--batch", str(B)] + common + extra).stdout)
            chk.close("eval-only --init of the checkpoint's model.safetensors: the same val_loss", [init_only], [one],
                      0, 2e-7)
            untrained = eval_only_loss(proc([train, "--eval-only", "--init", os.path.join(tmp, "gen.safetensors"),
                                             "--batch", str(B)] + common + extra).stdout)
            chk.true("eval-only really loads the checkpoint (its loss differs from another model's)",
                     abs(one - untrained) > 1e-3, f"{one} vs {untrained}")
    return data_bin, model


def check_errors(chk, train, tmp, data_bin, model):
    init = os.path.join(tmp, "gen.safetensors")
    ev = [train, "--eval-only", "--init", init, "--seq", str(SEQ), "--threads", "1", "--data", data_bin]
    # README's list of the flags that --eval-only refuses: each one is refused
    readme = open(os.path.join(HERE, "..", "..", "README.md")).read()
    m = re.search(r"Flags that only\s+training uses are one-line errors with it:(.*?)and `--grad-accum` other than 1",
                  readme, re.S)
    listed = re.findall(r"`(--[a-z-]+)`", m.group(1)) if m else []
    values = {"--lr-schedule": "constant", "--ckpt-type": "full", "--save": os.path.join(tmp, "x.safetensors"),
              "--dump-grads": os.path.join(tmp, "g.safetensors"), "--input": os.path.join(tmp, "in.safetensors"),
              "--log-jsonl": os.path.join(tmp, "x.jsonl"), "--plot": os.path.join(tmp, "x.png"), "--dropout": "0.1",
              "--skip-nonfinite": None}
    chk.true("README lists the flags --eval-only refuses", len(listed) >= 15, str(listed))
    for f in listed:
        flag = [f] + ([] if f in values and values[f] is None else [values.get(f, "2")])
        refused(chk, f"--eval-only {' '.join(flag)}", proc(ev + flag, expect_ok=False), [f, "--eval-only"])
    ck = os.path.join(tmp, "ck_save_every")
    refused(chk, "--eval-only --save-every 1 --ckpt-dir", proc(ev + ["--save-every", "1", "--ckpt-dir", ck],
                                                               expect_ok=False), ["--save-every", "--eval-only"])
    refused(chk, "--eval-only --grad-accum 2", proc(ev + ["--grad-accum", "2"], expect_ok=False),
            ["--grad-accum", "--eval-only"])
    r = mpirun(2, ev + ["--steps", "3"], expect_ok=False)
    refused(chk, "--eval-only --steps on 2 ranks (printed once)", r, ["--steps", "--eval-only"])
    r = proc([train, "--steps", "1", "--eval-every", "1", "--eval-batches", "0", "--threads", "1"] + model,
             expect_ok=False)
    refused(chk, "--eval-batches 0 with --eval-every", r, ["--eval-batches 0", "--eval-every"])
    r = proc(ev + ["--grad-accum", "1"], expect_ok=False)
    chk.true("--eval-only --grad-accum 1 is accepted", r.returncode == 0 and "eval: val_loss" in r.stdout,
             r.stderr[-300:])
    refused(chk, "--eval-only without --init or --resume",
            proc([train, "--eval-only", "--threads", "1"] + model, expect_ok=False), ["--eval-only", "--init", "--resume"])
    ck = os.path.join(tmp, "never_created")
    r = proc(ev + ["--ckpt-dir", ck], expect_ok=False)
    refused(chk, "--eval-only --ckpt-dir without --resume auto", r, ["--ckpt-dir", "--resume auto"])
    chk.true("... and the --ckpt-dir is not created", not os.path.exists(ck))
    empty = os.path.join(tmp, "empty_ck")
    os.mkdir(empty)
    r = proc([train, "--eval-only", "--resume", "auto", "--ckpt-dir", empty, "--data", data_bin] + model,
             expect_ok=False)
    lines = tool_lines(r.stderr)
    chk.true("--eval-only --resume auto of an empty --ckpt-dir: an error, not an untrained model's loss",
             r.returncode != 0 and len(lines) == 1 and "no complete checkpoint" in lines[0] and "eval:" not in r.stdout,
             f"rc {r.returncode}: {r.stderr[-400:]}")
    missing = os.path.join(tmp, "missing_ck")
    r = proc([train, "--eval-only", "--resume", "auto", "--ckpt-dir", missing, "--data", data_bin] + model,
             expect_ok=False)
    chk.true("--eval-only --resume auto of a missing --ckpt-dir: an error, and the directory is not created",
             r.returncode != 0 and len(tool_lines(r.stderr)) == 1 and f"{missing}: no such directory" in r.stderr
             and not os.path.exists(missing),
             f"rc {r.returncode}: {r.stderr[-400:]}")
    for flag in (["--prompt", "hi"], ["--top-k", "3"], ["--temperature", "0"]):
        refused(chk, f"{flag[0]} without --max-new-tokens", proc(ev + flag, expect_ok=False),
                [flag[0], "--max-new-tokens"])
    small = [train, "--vocab", "64", "--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--steps", "0",
             "--threads", "1", "--max-new-tokens", "2"]
    small_bin = os.path.join(tmp, "small.bin")
    write_bin(small_bin, np.arange(300) % 64)
    refused(chk, "--prompt with a byte outside a 64-token vocabulary",
            proc(small + ["--data", small_bin, "--prompt", "z"], expect_ok=False), ["--prompt", "0x7A"])
    refused(chk, "--top-k above the vocabulary", proc(ev + ["--max-new-tokens", "2", "--top-k", "300"],
                                                      expect_ok=False), ["--top-k 300", "256"])
    r = proc([train, "--help"])
    chk.true("--help lists --eval-only, --prompt, --temperature, --top-k, --max-new-tokens",
             all(f"  {f}" in r.stdout for f in ("--eval-only", "--prompt", "--temperature", "--top-k",
                                                 "--max-new-tokens")))


def main():
    args = parse_args()
    train = os.path.join(args.bin, "fsdp-train")
    tmp = tmpdir()
    chk = Checker("eval and generate")
    check_utf8(chk, train, tmp)
    check_generate(chk, train, tmp)
    data_bin, model = check_eval(chk, train, tmp)
    check_errors(chk, train, tmp, data_bin, model)
    chk.report()


if __name__ == "__main__":
    main()
