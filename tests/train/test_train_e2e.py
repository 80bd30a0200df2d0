"""fsdp-train end to end: training on 1, 2 and 3 ranks on the built-in corpus (loss falls, the JSONL
log parses, the Chrome trace is valid JSON with a track per rank), on tinyshakespeare when present,
the data-order contract (one process with batch N*B == N ranks with batch B), PyTorch parity through
--init and an llm.c .bin file, and the failure paths: collective desync (FSDP_DEBUG=DETAIL), a rank
killed with SIGKILL, SIGTERM (stop, save, exit 130). Non-finite values: test_skip_nonfinite.py."""
import json
import math
import os
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import MPI_ENV, Checker, parse_args, parse_losses, st_save, tmpdir  # noqa: E402
from fsdp_testlib import mpirun as mpirun_cmd  # noqa: E402
from test_gpt2_parity import GPT2  # noqa: E402

SMALL = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "32", "--batch", "4", "--threads", "1"]
SHAKESPEARE = os.path.join(HERE, "..", "..", "..", "shared", "data", "tinyshakespeare.txt")


def mpirun(n, binary, args, env=None, timeout=600, expect_ok=True):
    """binary on n ranks; a failed run ends the test unless expect_ok is False."""
    return mpirun_cmd(n, [binary] + args, expect_ok=expect_ok, env=env, timeout=timeout)


losses_of = parse_losses


def main():
    args = parse_args()
    train = os.path.join(args.bin, "fsdp-train")
    tmp = tmpdir()
    chk = Checker("fsdp-train e2e")

    # 1. 1, 2, 3 ranks on the built-in corpus
    for n in (1, 2, 3):
        jl, tr = os.path.join(tmp, f"log{n}.jsonl"), os.path.join(tmp, f"trace{n}.json")
        r = mpirun(n, train, SMALL + ["--steps", "40", "--lr", "3e-3", "--log-jsonl", jl, "--trace", tr])
        loss = losses_of(r.stdout)
        chk.close(f"{n} ranks: loss falls (first {loss[0]:.3f}, last-5 mean {np.mean(loss[-5:]):.3f})",
                  [1.0 if np.mean(loss[-5:]) < loss[0] - 1.0 else 0.0], [1.0], 0, 0)
        recs = [r for r in map(json.loads, open(jl)) if "step" in r]  # (the first record is the config)
        keys = {"step", "loss", "lr", "tokens_per_s", "ms_step", "exposed_comm_pct", "peak_mem_bytes"}
        chk.close(f"{n} ranks: JSONL has 40 records with every key", [len(recs), int(all(keys <= set(x) for x in recs))],
                  [40, 1], 0, 0)
        trace = json.load(open(tr))
        pids = {e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        cats = {e["cat"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        chk.close(f"{n} ranks: trace has spans from every rank", [len(pids)], [n], 0, 0)
        chk.close(f"{n} ranks: trace has compute spans", [int("compute" in cats)], [1], 0, 0)
        if n > 1:
            chk.close(f"{n} ranks: trace has communication spans", [int("comm" in cats)], [1], 0, 0)

    # 2. tinyshakespeare (skipped when the shared data is absent)
    if os.path.exists(SHAKESPEARE):
        r = mpirun(2, train, SMALL + ["--steps", "40", "--lr", "3e-3", "--data", SHAKESPEARE])
        loss = losses_of(r.stdout)
        chk.true(f"tinyshakespeare, 2 ranks: loss falls ({loss[0]:.3f} -> {np.mean(loss[-5:]):.3f})",
                 len(loss) == 40 and np.mean(loss[-5:]) < loss[0] - 1.0)
    else:
        print("skip: tinyshakespeare not found at", SHAKESPEARE)

    # 3. the data-order contract: one process with batch N*B sees the global batch of N ranks with batch B
    base = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "16", "--steps", "4", "--threads", "1",
            "--grad-accum", "2"]
    ref = losses_of(mpirun(1, train, base + ["--batch", "6"]).stdout)
    for n in (2, 3):
        got = losses_of(mpirun(n, train, base + ["--batch", str(6 // n)]).stdout)
        chk.close(f"one process batch 6 == {n} ranks batch {6 // n} (grad-accum 2)", got, ref, 1e-5, 0)

    # 4. PyTorch parity through --init and an llm.c .bin token file
    torch.manual_seed(1)
    V, T, B, L, C, H, steps = 90, 16, 2, 2, 48, 4, 3
    tokens = np.random.RandomState(0).randint(0, V, size=5000).astype(np.uint16)
    tokens[0] = V - 1  # make the data's vocabulary exactly V
    binpath = os.path.join(tmp, "tokens.bin")
    with open(binpath, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(tokens.tobytes())
    model = GPT2(V, T, L, C, H)
    st_save(os.path.join(tmp, "init.safetensors"), {k: v for k, v in model.state_dict().items()})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    ref = []
    for s in range(steps):  # 1 rank, M = 1: window start s*B*T, row i at window + i*T (with wrap)
        idx = np.zeros((B, T), np.int64)
        tgt = np.zeros((B, T), np.int64)
        for i in range(B):
            pos = [(s * B * T + i * T + j) % len(tokens) for j in range(T + 1)]
            idx[i], tgt[i] = tokens[pos[:-1]], tokens[pos[1:]]
        opt.zero_grad()
        loss = model(torch.from_numpy(idx), torch.from_numpy(tgt))
        loss.backward()
        opt.step()
        ref.append(loss.item())
    r = mpirun(1, train, ["--init", os.path.join(tmp, "init.safetensors"), "--heads", str(H), "--seq", str(T),
                          "--batch", str(B), "--steps", str(steps), "--lr", "1e-3", "--clip-grad-norm", "0", "--warmup", "0",
                          "--lr-schedule", "constant", "--data", binpath, "--threads", "1"])
    chk.close("PyTorch parity through --init and a .bin file: losses", losses_of(r.stdout), ref, 1e-5, 0)

    # 5. a rank that issues a different collective (rank 1, a stray all_reduce before unit h.1's all_gather,
    # in step 2 only): FSDP_DEBUG=DETAIL stops every rank with a message naming rank, step, unit and both
    # collectives
    t0 = time.time()
    r = mpirun(2, train, SMALL + ["--steps", "5"], env={"FSDP_DEBUG": "DETAIL", "FSDP_TEST_DESYNC": "1:1:2"},
               timeout=120, expect_ok=False)
    msg = [line for line in r.stderr.splitlines() if "collective mismatch" in line]
    chk.true(f"desync: non-zero exit within 30 s ({time.time() - t0:.1f} s)", r.returncode != 0 and time.time() - t0 < 30,
             f"exit {r.returncode}")
    named = [m for m in msg if ("rank 1, step 2, unit h.1," in m or "rank 0, step 2, unit h.1," in m)
             and "all_gather" in m and "all_reduce" in m]
    chk.true("desync: the message names the rank, step 2, unit h.1, all_gather and all_reduce", bool(named),
             "\n".join(msg) or r.stderr[-800:])
    # ... and without DETAIL the watchdog turns the hang into an abort that names the collective
    t0 = time.time()
    r = mpirun(2, train, SMALL + ["--steps", "5", "--collective-timeout", "3"], env={"FSDP_TEST_DESYNC": "1:1"},
               timeout=120, expect_ok=False)
    chk.close(f"desync without DETAIL: the watchdog aborts ({time.time() - t0:.1f} s)",
              [int(r.returncode != 0 and "has not completed" in r.stderr and time.time() - t0 < 60)], [1], 0, 0)

    # 6. kill -9 of one rank: the others exit non-zero within 60 s
    full = dict(os.environ)
    full.update(MPI_ENV)
    p = subprocess.Popen(["mpirun", "-np", "2", train] + SMALL + ["--steps", "100000"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=full, text=True)
    for _ in range(100):  # wait for training to start
        line = p.stdout.readline()
        if line.startswith("step "):
            break
    kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    ranks = [q for k in kids for q in subprocess.run(["pgrep", "-P", k], capture_output=True, text=True).stdout.split()]
    ranks = ranks or kids
    t0 = time.time()
    os.kill(int(ranks[-1]), signal.SIGKILL)
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = None
    chk.close(f"kill -9 of a rank: the job ends non-zero within 60 s ({time.time() - t0:.1f} s)",
              [int(rc is not None and rc != 0)], [1], 0, 0)

    # 7. SIGTERM: finish the step, save, exit 130
    save = os.path.join(tmp, "interrupted.safetensors")
    p = subprocess.Popen([train] + SMALL + ["--steps", "100000", "--save", save], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    for _ in range(100):
        if p.stdout.readline().startswith("step "):
            break
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=60)
    chk.close("SIGTERM: exit 130 and the weights saved", [rc, int(os.path.exists(save))], [130, 1], 0, 0)

    chk.report()


if __name__ == "__main__":
    main()
