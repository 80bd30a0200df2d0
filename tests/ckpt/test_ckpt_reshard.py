"""fsdp-ckpt reshard and convert, checked against the files themselves and against resumed runs.

A 2-rank sharded checkpoint is read back in numpy (index pieces -> whole tensors, parameters and both
AdamW moments). `convert --dtype bf16`: every tensor of every shard is BF16 in the header and its bits
equal numpy's round-to-nearest-even of the fp32 original; converting back to f32 widens exactly; a run
resumed from the bf16 checkpoint equals one resumed from its f32 widening, bitwise. `reshard` to 1, 2,
3 and 4 ranks: each shard file holds exactly numpy's even re-split of the whole tensors (rank q keeps
[q*n/M, (q+1)*n/M) of each), the index's pieces say so, and resuming from it on M ranks equals resuming
from the original on M ranks: the same losses and final parameters, bitwise."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, bf16_rne, mpirun, parse_args, parse_losses, proc, st_load, st_read, tmpdir  # noqa: E402

MODEL = ["--layers", "2", "--d-model", "48", "--heads", "4", "--seq", "16", "--threads", "1"]
GLOBAL_BATCH = 12  # sequences per step; the saved data position carries over at any world size dividing it
KINDS = ("", "exp_avg.", "exp_avg_sq.")
RAW = {"F32": np.uint32, "BF16": np.uint16, "I64": np.int64, "I32": np.int32}


def st_raw(path):
    """{name: (dtype string, raw array of the stored bits)} of a safetensors file, and its metadata."""
    header, data = st_read(path)
    out = {}
    for name, e in header.items():
        if name != "__metadata__":
            b, end = e["data_offsets"]
            out[name] = (e["dtype"], np.frombuffer(data[b:end], dtype=RAW[e["dtype"]]).reshape(e["shape"]))
    return out, header.get("__metadata__", {})


def read_ckpt(d):
    """A sharded checkpoint as {kind + name: (dtype, whole flat tensor of raw bits)}, with the index's
    pieces {name: rows (rank, first, count)} and its metadata. Every element must be covered once."""
    index, meta = st_raw(f"{d}/index.safetensors")
    shards = {}
    names = [k[len("shape."):] for k in index if k.startswith("shape.")]
    pieces = {n: index[f"pieces.{n}"][1].reshape(-1, 3) for n in names}
    full = {}
    for n in names:
        numel = int(np.prod(index[f"shape.{n}"][1]))
        for kind in KINDS:
            covered, t, dt = np.zeros(numel, np.int32), None, None
            for rank, first, count in pieces[n]:
                if rank not in shards:
                    shards[rank] = st_raw(f"{d}/shard_{rank:05d}.safetensors")[0]
                dt, part = shards[rank][kind + n]
                t = np.zeros(numel, part.dtype) if t is None else t
                t[first:first + count] = part
                covered[first:first + count] += 1
            assert np.all(covered == 1), f"{d}: {kind}{n}: pieces do not cover the tensor exactly once"
            full[kind + n] = (dt, t)
    return full, pieces, meta


def main():
    args = parse_args()
    train, tool = os.path.join(args.bin, "fsdp-train"), os.path.join(args.bin, "fsdp-ckpt")
    tmp = tmpdir()
    chk = Checker("fsdp-ckpt reshard/convert")
    mpirun(2, [train] + MODEL + ["--batch", str(GLOBAL_BATCH // 2), "--steps", "3", "--save-every", "3",
                                 "--ckpt-dir", f"{tmp}/ck"])
    ck = f"{tmp}/ck/step_00000003"
    orig, _, ometa = read_ckpt(ck)
    chk.true("the original: fp32 parameters and both moments, non-zero", all(
        dt == "F32" for dt, _ in orig.values()) and len(orig) % 3 == 0 and all(
        np.any(t.view(np.float32) != 0) for k, (_, t) in orig.items() if k.startswith("exp_avg_sq.")), str(list(orig)))

    def resume(d, m, tag):
        """Resume from d on m ranks for 2 more steps: (losses, final parameters)."""
        save = f"{tmp}/final_{tag}_{m}.safetensors"
        lowp = ["--allow-lowp-resume"] if tag == "bf" else []  # (a bf16 export is refused without it)
        r = mpirun(m, [train] + MODEL + ["--batch", str(GLOBAL_BATCH // m), "--steps", "5", "--resume", d,
                                         "--save", save] + lowp)
        losses = parse_losses(r.stdout)
        chk.true(f"{tag} on {m} rank(s): resumed at step 3 (2 steps run)", len(losses) == 2, r.stdout[-1500:])
        return losses, st_load(save)

    # convert --dtype bf16: BF16 in every header, bits = round-to-nearest-even of the fp32 values
    proc([tool, "convert", ck, f"{tmp}/bf", "--dtype", "bf16"])
    bf, _, bmeta = read_ckpt(f"{tmp}/bf")
    chk.true("convert bf16: every tensor (parameters and moments) is BF16 in the shard headers",
             sorted(bf) == sorted(orig) and all(dt == "BF16" for dt, _ in bf.values()),
             str(sorted({dt for dt, _ in bf.values()})))
    bad = [k for k in orig if not np.array_equal(bf[k][1], bf16_rne(orig[k][1]))]
    chk.true("convert bf16: bits equal numpy's round-to-nearest-even of the fp32 originals", not bad, str(bad[:5]))
    changed = sum(int(np.any(bf[k][1].astype(np.uint32) << 16 != orig[k][1])) for k in orig)
    chk.true("convert bf16: the values really were rounded (most tensors change)", changed > len(orig) // 2,
             f"{changed} of {len(orig)}")
    chk.true("convert bf16: trainer state kept (step, seed, global batch, adam step)",
             all(bmeta.get(k) == ometa.get(k) for k in ("step", "seed", "global_batch", "adam_step")) and
             ometa.get("adam_step") == "3", f"{bmeta} vs {ometa}")
    proc([tool, "convert", f"{tmp}/bf", f"{tmp}/bf32", "--dtype", "fp32"])
    bf32, _, _ = read_ckpt(f"{tmp}/bf32")
    bad = [k for k in orig if bf32[k][0] != "F32" or not np.array_equal(bf32[k][1], bf[k][1].astype(np.uint32) << 16)]
    chk.true("convert bf16 -> f32: widened exactly", not bad, str(bad[:5]))
    la, pa = resume(f"{tmp}/bf", 2, "bf")
    lb, pb = resume(f"{tmp}/bf32", 2, "bf32")
    chk.close("resume from bf16 == resume from its f32 widening: losses", la, lb, 0, 0)
    chk.identical("resume from bf16 == resume from its f32 widening: final parameters", pa, pb)

    # reshard to 1..4 ranks: the files hold numpy's even re-split; resuming equals resuming from the original
    for m in (1, 2, 3, 4):
        out = f"{tmp}/rs{m}"
        proc([tool, "reshard", ck, out, "--world-size", str(m)])
        rs, pieces, rmeta = read_ckpt(out)
        chk.true(f"reshard {m}: index metadata (world size {m}, trainer state kept)", rmeta.get("world_size") == str(m)
                 and all(rmeta.get(k) == ometa.get(k) for k in ("step", "seed", "global_batch", "adam_step")), str(rmeta))
        want_rows = {n: [(q, len(orig[n][1]) * q // m, len(orig[n][1]) * (q + 1) // m - len(orig[n][1]) * q // m)
                         for q in range(m) if len(orig[n][1]) * (q + 1) // m > len(orig[n][1]) * q // m]
                     for n in pieces}
        chk.true(f"reshard {m}: pieces are the even split", all(
            [tuple(int(v) for v in row) for row in pieces[n]] == want_rows[n] for n in pieces))
        bad = []
        for q in range(m):  # each shard file, tensor by tensor, against numpy's split of the whole tensor
            tensors, _ = st_raw(f"{out}/shard_{q:05d}.safetensors")
            want = {k: orig[k][1][len(orig[k][1]) * q // m:len(orig[k][1]) * (q + 1) // m] for k in orig}
            want = {k: v for k, v in want.items() if len(v)}
            if sorted(tensors) != sorted(want):
                bad.append(f"shard {q}: names")
            bad += [f"shard {q}: {k}" for k in want if k in tensors and (
                tensors[k][0] != "F32" or not np.array_equal(tensors[k][1], want[k]))]
        chk.true(f"reshard {m}: every shard file holds numpy's re-split, bit for bit", not bad, str(bad[:5]))
        proc([tool, "verify", out])
        la, pa = resume(ck, m, "orig")
        lb, pb = resume(out, m, "rs")
        chk.close(f"reshard {m}: resume on {m} ranks == resume from the original: losses", lb, la, 0, 0)
        chk.identical(f"reshard {m}: resume on {m} ranks == resume from the original: final parameters", pb, pa)
    chk.report()


if __name__ == "__main__":
    main()
