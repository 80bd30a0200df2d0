"""Hugging Face model directories in and out of fsdp-train (issue 46 items 2 and 6, GPT-2 today).

- --init DIR: a GPT-2 directory (config.json, random BF16 weights in 3 shards, model.safetensors.index.json)
  trains at 1 and 3 ranks with exactly the losses of the same run from one fp32 .safetensors file holding
  the same (bf16-exact) values; the sizes come from config.json alone (no size flags); at 3 ranks the
  ranks' reads (strace of pread64) cover every file's data once, each rank about a third.
- --save DIR: config.json's keys and values (what GPT2LMHeadModel.from_pretrained reads), the tensors'
  names (no lm_head.weight: tied), shapes, dtypes and order; fp32 values equal to a --save FILE of the same
  run, bf16 values its round-to-nearest-even; above --save-shard-size, save_pretrained's shard split and
  names, the index consistent with the shards (weight_map, total_size); at 3 ranks the same; the saved
  directory loads again (--init) as the file of its values does; a directory fsdp.c wrote is replaced,
  any other refused.
- fsdp-ckpt consolidate CHECKPOINT DIR writes the same directory from a sharded checkpoint; --lora-init
  takes a PEFT adapter directory.
- Bad input: each a one-line error, exit 2, no step trained, the --save directory not created and no
  temporary left: a missing shard, a tensor the index lists in a shard without it, a tensor in two shards,
  a shard tensor the index does not list, malformed indexes, a missing / malformed config.json, an
  unknown model_type, heads not dividing n_embd, n_inner other than 4 n_embd, untied embeddings, a flag
  contradicting config.json, a tensor whose shape disagrees with config.json, a directory without weights,
  --save into a directory holding other files, --save-dtype / --save-shard-size without a directory --save
  or with a bad size.

Run as: /usr/bin/python3 tests/ckpt/test_hf_dir.py --bin build/bin"""
import json
import os
import re
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
sys.path.insert(0, os.path.join(HERE, "..", "badinput"))
from test_bad_input import gpt2_weights as bad_input_gpt2_weights  # noqa: E402
from fsdp_testlib import Checker, bf16_rne, mpirun, parse_args, parse_losses, proc, st_load, st_read, st_save, tmpdir  # noqa: E402,E501

L, D, H, V, P = 2, 32, 2, 256, 16
RUN = ["--seq", "8", "--global-batch", "6", "--steps", "3", "--threads", "1", "--warmup", "0", "--lr-schedule",
       "constant", "--lr", "3e-3"]
SHARD_BYTES = 20000  # --save-shard-size for the split tests (the bf16 model is ~68 KB)


def gpt2_weights(rng):
    """Random GPT-2 weights (test_bad_input's fixture at this test's sizes) rounded to bf16: float32 arrays
    whose values both the BF16 shards and the fp32 file hold exactly."""
    w = bad_input_gpt2_weights(rng, layers=L, d=D, vocab=V, seq=P)
    return {k: (bf16_rne(v.view(np.uint32)).astype(np.uint32) << 16).view(np.float32) for k, v in w.items()}


CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": D, "n_layer": L, "n_head": H,
          "vocab_size": V, "n_positions": P, "n_inner": None, "activation_function": "gelu_new",
          "layer_norm_epsilon": 1e-5, "bos_token_id": 50256, "eos_token_id": 50256, "torch_dtype": "bfloat16"}


def write_hf_dir(d, weights, config=CONFIG, n_shards=3, dtype="BF16", index_edit=None):
    """An HF directory: config.json, the weights in n_shards shards (BF16 or F32) and the index."""
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/config.json", "w") as f:
        json.dump(config, f, indent=2)
    names = list(weights)
    parts = [names[i::n_shards] for i in range(n_shards)]
    weight_map, total = {}, 0
    for k, part in enumerate(parts):
        fname = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        st_save(f"{d}/{fname}", {n: (("BF16", weights[n]) if dtype == "BF16" else weights[n]) for n in part},
                {"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += weights[n].size * (2 if dtype == "BF16" else 4)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    if index_edit:
        index_edit(index)
    with open(f"{d}/model.safetensors.index.json", "w") as f:
        json.dump(index, f, indent=2)


def header(path):
    """A safetensors file's tensors, in header order: [(name, dtype, shape)]."""
    h, _ = st_read(path)
    return [(n, e["dtype"], e["shape"]) for n, e in h.items() if n != "__metadata__"]


def hf_split(sizes, limit):
    """save_pretrained's split of [(name, bytes)] in order: a new shard when the next would pass limit."""
    shards, current, used = [], [], 0
    for name, b in sizes:
        if current and used + b > limit:
            shards.append(current)
            current, used = [], 0
        current.append(name)
        used += b
    return shards + [current]


def check_saved_dir(chk, label, d, ref_file, dtype, order, limit=None):
    """A --save DIR against a --save FILE of the same run: config, names, shapes, dtypes, split, values; the
    tensors in `order` (Hugging Face's state_dict order: wte, wpe, h.0..., ln_f)."""
    files = sorted(os.listdir(d)) if os.path.isdir(d) else []
    shape_of = {n: s for n, _, s in header(ref_file)}
    ref_hdr = [(n, "F32", shape_of.get(n)) for n in (order or shape_of)]  # (no order: the file's)
    ref = st_load(ref_file)
    cfg = json.load(open(f"{d}/config.json")) if "config.json" in files else {}
    want = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": D, "n_layer": L, "n_head": H,
            "vocab_size": V, "n_positions": P, "n_inner": None, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "bos_token_id": 50256,
            "eos_token_id": 50256, "torch_dtype": "bfloat16" if dtype == "BF16" else "float32"}
    if order is None:  # a checkpoint records the sizes, not the --init directory's token ids
        want["bos_token_id"] = want["eos_token_id"] = "<absent>"
    bad = {k: (cfg.get(k, "<absent>"), v) for k, v in want.items() if cfg.get(k, "<absent>") != v}
    chk.true(f"{label}: config.json has GPT2LMHeadModel's keys and the model's values", cfg and not bad, str(bad))
    esize = 2 if dtype == "BF16" else 4
    sizes = [(n, int(np.prod(s)) * esize) for n, _, s in ref_hdr]
    expect = hf_split(sizes, limit) if limit else [[n for n, _ in sizes]]
    n = len(expect)
    names = ["model.safetensors"] if n == 1 else [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    want_files = sorted(["config.json"] + names + ([] if n == 1 else ["model.safetensors.index.json"]))
    chk.true(f"{label}: files {want_files} ({n} shard(s)) and nothing else", files == want_files, str(files))
    if files != want_files:
        return
    got_hdr = [e for f in names for e in header(f"{d}/{f}")]
    chk.true(f"{label}: tensors in Hugging Face's order, shards split as save_pretrained splits them",
             [[e[0] for e in header(f"{d}/{f}")] for f in names] == expect, str([header(f"{d}/{f}") for f in names]))
    chk.true(f"{label}: names and shapes of the file save, dtype {dtype}, no lm_head.weight",
             [(a, s) for a, _, s in got_hdr] == [(a, s) for a, _, s in ref_hdr] and
             all(t == dtype for _, t, _ in got_hdr) and "lm_head.weight" not in [a for a, _, _ in got_hdr],
             str(got_hdr))
    if limit:
        fits = all(sum(b for nm, b in sizes if nm in shard) <= limit or len(shard) == 1 for shard in expect)
        chk.true(f"{label}: every shard within --save-shard-size {limit} (or a single larger tensor)", fits)
    for f in names:
        meta = st_read(f"{d}/{f}")[0].get("__metadata__", {})
        chk.true(f"{label}: {f} carries format pt (from_pretrained's check)", meta.get("format") == "pt", str(meta))
    if n > 1:
        idx = json.load(open(f"{d}/model.safetensors.index.json"))
        wm = idx.get("weight_map", {})
        where = {e[0]: f for f in names for e in header(f"{d}/{f}")}
        chk.true(f"{label}: the index's weight_map names each tensor's shard, total_size its bytes",
                 wm == where and idx.get("metadata", {}).get("total_size") == sum(b for _, b in sizes)
                 and list(wm) == sorted(wm), f"{idx.get('metadata')} {len(wm)} vs {len(where)}")
    for f in names:
        h, data = st_read(f"{d}/{f}")
        for name, e in h.items():
            if name == "__metadata__":
                continue
            raw = data[e["data_offsets"][0]:e["data_offsets"][1]]
            ref_bits = ref[name].astype(np.float32).view(np.uint32).ravel()
            if dtype == "BF16":
                same = np.array_equal(np.frombuffer(raw, np.uint16), bf16_rne(ref_bits))
            else:
                same = np.array_equal(np.frombuffer(raw, np.uint32), ref_bits)
            if not same or not np.all(np.isfinite(ref[name])):
                chk.fail(f"{label}: {name}", "values differ from the file save's" +
                         (" rounded to nearest even" if dtype == "BF16" else ""))
                return
    chk.true(f"{label}: every value is the file save's" + (" rounded to nearest even" if dtype == "BF16" else
                                                          " bit for bit"), True)


def main():
    args = parse_args()
    train = os.path.join(args.bin, "fsdp-train")
    tmp = tmpdir()
    os.chdir(tmp)
    chk = Checker("hf directories")
    w = gpt2_weights(np.random.default_rng(46))
    write_hf_dir("in", w)
    st_save("in.safetensors", w)
    chk.true("the fixture: 3 BF16 shards and an index", sorted(os.listdir("in")) == sorted(
        ["config.json", "model.safetensors.index.json"] + [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]))

    # --init DIR trains as --init FILE of the same values, at 1 and 3 ranks
    losses = {}
    for n in (1, 3):
        a = parse_losses(mpirun(n, [train, "--init", "in"] + RUN).stdout)
        b = parse_losses(mpirun(n, [train, "--init", "in.safetensors", "--heads", str(H)] + RUN).stdout)
        chk.true(f"{n} rank(s): 3 steps logged from --init DIR", len(a) == 3, str(a))
        chk.close(f"{n} rank(s): --init DIR (bf16 shards) = --init FILE (fp32, same values), bitwise", a, b, 0, 0)
        losses[n] = a
    chk.close("3 ranks = 1 rank (--init DIR)", losses[3], losses[1], 1e-5, 0)
    # as save_pretrained writes GPT2LMHeadModel: "transformer."-prefixed names, attention-mask buffers
    prefixed = {"transformer." + k: v for k, v in w.items()}
    prefixed.update({f"transformer.h.{i}.attn.bias": np.tril(np.ones((P, P), np.float32)) for i in range(L)})
    write_hf_dir("in_prefixed", prefixed, n_shards=2)
    a = parse_losses(proc([train, "--init", "in_prefixed"] + RUN).stdout)
    chk.close("--init DIR with transformer.-prefixed names and attn.bias buffers: the same losses", a, losses[1], 0, 0)
    check_reads(chk, train)

    # --save DIR: fp32 one file, bf16 in shards, against --save FILE of the same run
    proc([train, "--init", "in", "--save", "ref.safetensors"] + RUN)
    proc([train, "--init", "in", "--save", "out32"] + RUN)
    check_saved_dir(chk, "--save DIR (fp32)", "out32", "ref.safetensors", "F32", list(w))
    proc([train, "--init", "in", "--save", "out16", "--save-dtype", "bf16", "--save-shard-size", "20KB"] + RUN)
    check_saved_dir(chk, "--save DIR --save-dtype bf16 --save-shard-size 20KB", "out16", "ref.safetensors", "BF16",
                    list(w), SHARD_BYTES)
    mpirun(3, [train, "--init", "in", "--save", "ref3.safetensors"] + RUN)
    r = mpirun(3, [train, "--init", "in", "--save", "out3", "--save-shard-size", str(SHARD_BYTES)] + RUN)
    check_saved_dir(chk, "3 ranks: --save DIR --save-shard-size 20000 (fp32)", "out3", "ref3.safetensors", "F32",
                    list(w), SHARD_BYTES)
    said = [x for x in r.stdout.splitlines() if x.startswith("fsdp-train: saved")]
    chk.true("3 ranks: rank 0 says once what it wrote (tensors, dtype, files)",
             len(said) == 1 and "fp32" in said[0] and "file(s)" in said[0] and "out3" in said[0], str(said))

    # the saved directory loads again: as a file holding its (bf16) values
    st_save("out16.safetensors", st_load_dir("out16"))
    for n in (1, 3):
        a = parse_losses(mpirun(n, [train, "--init", "out16"] + RUN).stdout)
        b = parse_losses(mpirun(n, [train, "--init", "out16.safetensors", "--heads", str(H)] + RUN).stdout)
        chk.close(f"{n} rank(s): --init of the saved bf16 shards = --init FILE of their values", a, b, 0, 0)

    # a directory fsdp.c wrote is replaced; one holding anything else is refused, untouched
    proc([train, "--init", "in", "--save", "out32/", "--steps", "1"] + RUN[:-2] + ["--lr", "1e-2"])
    chk.true("--save DIR/ over a directory fsdp.c wrote replaces it (new values, no leftover beside it)",
             not np.array_equal(st_load("out32/model.safetensors")["wte.weight"], st_load("ref.safetensors")["wte.weight"])
             and not [f for f in os.listdir(".") if ".tmp." in f or ".old." in f], str(os.listdir(".")))

    # --lora-init DIR: a PEFT adapter directory (adapter_model.safetensors beside adapter_config.json)
    os.makedirs("peft", exist_ok=True)
    proc([train, "--init", "in", "--lora-rank", "2", "--save", "peft/adapter_model.safetensors"] + RUN)
    steps0 = RUN[:RUN.index("--steps")] + ["--steps", "0"] + RUN[RUN.index("--steps") + 2:]
    proc([train, "--init", "in", "--lora-rank", "2", "--lora-init", "peft", "--save", "again.safetensors"] + steps0)
    chk.identical("--lora-init of a PEFT adapter directory reads its adapter_model.safetensors",
                  st_load("again.safetensors"), st_load("peft/adapter_model.safetensors"))

    # fsdp-ckpt consolidate CHECKPOINT DIR: the checkpoint as a Hugging Face directory (its config from the
    # checkpoint's metadata), equal to a --save FILE of the same run; a checkpoint of a model that no
    # config.json describes (fsdp-minimal's encoder stack) refused
    tool = os.path.join(os.path.dirname(train), "fsdp-ckpt")
    proc([train, "--init", "in", "--ckpt-dir", "ck", "--save", "ref_ck.safetensors"] + RUN)
    r = proc([tool, "consolidate", "ck/step_00000003", "cons"])
    check_saved_dir(chk, "fsdp-ckpt consolidate CKPT DIR", "cons", "ref_ck.safetensors", "F32", None)
    chk.true("fsdp-ckpt consolidate CKPT DIR says what it wrote", "into 1 file(s) + config.json" in r.stdout, r.stdout)
    minimal = os.path.join(os.path.dirname(train), "fsdp-minimal")
    proc([minimal, "--layers", "1", "--d-model", "16", "--heads", "2", "--ffn", "32", "--steps", "1", "--threads",
          "1", "--ckpt-dir", "ck_min"])
    r = proc([tool, "consolidate", "ck_min/step_00000001", "cons_min"], expect_ok=False)
    chk.true("fsdp-ckpt consolidate of an encoder-stack checkpoint into a directory: exit 2, one line, nothing "
             "written", r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "model_type" in r.stderr
             and not [f for f in os.listdir(".") if f.startswith("cons_min")], r.stderr)

    bad_input_cases(chk, train, w)
    chk.report()


def data_bytes_read(trace, data_start):
    """From one process's strace of openat/pread64/close: the bytes it read past each shard's header."""
    fds, got = {}, {}
    pat_open = re.compile(r'^openat\(AT_FDCWD, "([^"]+)", .*\) = (\d+)$')
    pat_read = re.compile(r'^pread64\((\d+), .*, (\d+), (\d+)\) = (\d+)$')
    for line in open(trace):
        line = line.strip()
        m = pat_open.match(line)
        if m:
            fds[int(m.group(2))] = os.path.basename(m.group(1))
            continue
        m = pat_read.match(line)
        name = fds.get(int(m.group(1))) if m else None
        if m and name in data_start:
            first, end = int(m.group(3)), int(m.group(3)) + int(m.group(4))
            got[name] = got.get(name, 0) + max(0, end - max(first, data_start[name]))
        elif line.startswith("close(") and "= 0" in line:
            fds.pop(int(line[6:line.index(")")]), None)
    return got


def check_reads(chk, train):
    """At 3 ranks each rank reads only its own shard of the weights: the ranks' reads add up to each shard
    file's data section exactly once, and each rank's to about a third of the whole."""
    shards = sorted(f for f in os.listdir("in") if f.endswith(".safetensors"))
    start, size = {}, {}
    for f in shards:
        with open(f"in/{f}", "rb") as fh:
            start[f] = 8 + struct.unpack("<Q", fh.read(8))[0]
        size[f] = os.path.getsize(f"in/{f}") - start[f]
    # (LeakSanitizer cannot run under ptrace: in the sanitized build this run checks without it)
    wrap = ["sh", "-c", 'ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" exec strace -qq -e trace=openat,pread64,close '
            '-o "reads.$OMPI_COMM_WORLD_RANK" "$@"', "sh"]
    mpirun(3, wrap + [train, "--init", "in"] + RUN)
    per_rank = [data_bytes_read(f"reads.{r}", start) for r in range(3)]
    total = {f: sum(p.get(f, 0) for p in per_rank) for f in shards}
    chk.true("3 ranks: the ranks' reads cover each shard's data exactly once", total == size, f"{total} vs {size}")
    share = [sum(p.values()) / sum(size.values()) for p in per_rank]
    chk.true(f"3 ranks: each rank reads about its third of the weights' bytes ({', '.join(f'{x:.2f}' for x in share)})",
             all(0.2 < x < 0.45 for x in share), str(per_rank))


def st_load_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(st_load(f"{d}/{f}"))
    return out


def refused(chk, label, train, cmd_args, needles, save="never"):
    """The run fails before training: exit 2, exactly one line naming every needle, no step, nothing written."""
    before = set(os.listdir("."))
    r = proc([train] + cmd_args + ["--save", save] + RUN, expect_ok=False)
    lines = r.stderr.strip().splitlines()
    after = set(os.listdir("."))
    ok = (r.returncode == 2 and len(lines) == 1 and all(n in lines[0] for n in needles)
          and not any(x.startswith("step ") for x in r.stdout.splitlines()) and after == before)
    chk.true(f"{label}: exit 2, one line naming {needles}, nothing written", ok,
             f"rc {r.returncode}, new files {sorted(after - before)}: {r.stderr[-600:]}")


def bad_input_cases(chk, train, w):
    def variant(name, **kw):
        shutil.rmtree(name, ignore_errors=True)
        write_hf_dir(name, w, **kw)
        return name

    d = variant("missing_shard")
    os.remove(f"{d}/model-00002-of-00003.safetensors")
    refused(chk, "an index naming a missing shard", train, ["--init", d],
            ["model.safetensors.index.json", "model-00002-of-00003.safetensors", "does not exist"])
    d = variant("listed_absent", index_edit=lambda i: i["weight_map"].update(
        {"h.0.attn.extra": "model-00001-of-00003.safetensors"}))
    refused(chk, "a tensor the index lists in a shard that lacks it", train, ["--init", d],
            ["model.safetensors.index.json", "h.0.attn.extra", "model-00001-of-00003.safetensors"])
    d = variant("twice")
    first = list(w)[0]  # in shard 1; a copy goes into shard 2 as well
    part2 = list(w)[1::3]
    st_save(f"{d}/model-00002-of-00003.safetensors", {n: w[n] for n in part2 + [first]}, {"format": "pt"})
    refused(chk, "a tensor present in two shards", train, ["--init", d], [first, "two shards"])
    d = variant("unlisted", index_edit=lambda i: i["weight_map"].pop("ln_f.bias"))
    refused(chk, "a shard tensor the index does not list", train, ["--init", d], ["ln_f.bias", "not listed"])
    d = variant("bad_index_json")
    open(f"{d}/model.safetensors.index.json", "w").write('{"weight_map": {"wte.weight": ')
    refused(chk, "a truncated index", train, ["--init", d], ["model.safetensors.index.json", "invalid JSON"])
    d = variant("no_weight_map", index_edit=lambda i: i.pop("weight_map"))
    refused(chk, "an index without weight_map", train, ["--init", d], ["model.safetensors.index.json", "weight_map"])
    d = variant("shard_path", index_edit=lambda i: i["weight_map"].update({"ln_f.bias": "../in.safetensors"}))
    refused(chk, "an index naming a file outside the directory", train, ["--init", d], ["ln_f.bias", "shard file name"])
    d = variant("no_config")
    os.remove(f"{d}/config.json")
    refused(chk, "a missing config.json", train, ["--init", d], [f"{d}/config.json", "cannot open"])
    d = variant("bad_config")
    open(f"{d}/config.json", "w").write('{"model_type": "gpt2", "n_embd": 32,,}')
    refused(chk, "a malformed config.json", train, ["--init", d], [f"{d}/config.json", "invalid JSON"])
    for label, edit, needles in (
            ("an unknown model_type", {"model_type": "bert"}, ["model_type", "bert"]),
            ("n_head not dividing n_embd", {"n_head": 3}, ["n_head", "n_embd"]),
            ("a missing size", {"n_layer": None}, ["n_layer", "missing"]),
            ("a size of the wrong type", {"n_embd": "32"}, ["n_embd", "integer"]),
            ("a negative size", {"vocab_size": -4}, ["vocab_size", "positive"]),
            ("n_inner other than 4 n_embd", {"n_inner": 64}, ["n_inner", "4 x n_embd"]),
            ("untied embeddings", {"tie_word_embeddings": False}, ["tie_word_embeddings"]),
            ("another activation", {"activation_function": "relu"}, ["activation_function", "relu"]),
            ("a config shape the weights disagree with", {"n_positions": 32}, ["wpe.weight", "[16, 32]", "[32, 32]"])):
        d = variant("cfg_" + label.replace(" ", "_"), config={**CONFIG, **edit})
        refused(chk, label, train, ["--init", d], needles)
    refused(chk, "a flag contradicting config.json", train, ["--init", "in", "--layers", "3"],
            ["--layers 3", "contradicts", "n_layer 2"])
    os.makedirs("no_weights", exist_ok=True)
    shutil.copy("in/config.json", "no_weights/config.json")
    refused(chk, "a directory without weights", train, ["--init", "no_weights"], ["no_weights", "no model.safetensors"])
    os.makedirs("foreign", exist_ok=True)
    open("foreign/tokenizer.json", "w").write("{}")
    refused(chk, "--save into a directory holding other files", train, ["--init", "in"],
            ["--save", "foreign", "tokenizer.json"], save="foreign")
    chk.true("... which keeps its files", os.listdir("foreign") == ["tokenizer.json"], str(os.listdir("foreign")))
    refused(chk, "--save-dtype with a .safetensors --save", train, ["--init", "in", "--save-dtype", "bf16"],
            ["--save-dtype", "never.safetensors"], save="never.safetensors")
    refused(chk, "a directory --save with --lora-rank (its adapters are one file)", train,
            ["--init", "in", "--lora-rank", "2"], ["--save", "--lora-rank", ".safetensors"])
    refused(chk, "a malformed --save-shard-size", train, ["--init", "in", "--save-shard-size", "5XB"],
            ["--save-shard-size", "5XB"])
    r = proc([train, "--init", "in", "--save-shard-size", "1MB"] + RUN, expect_ok=False)
    chk.true("--save-shard-size without --save: exit 2, one line", r.returncode == 2 and
             len(r.stderr.strip().splitlines()) == 1 and "--save-shard-size" in r.stderr, r.stderr[-400:])


if __name__ == "__main__":
    main()
