"""Interrupted multi-rank training: SIGTERM and SIGINT sent to mpirun (which forwards them to every rank)
and SIGTERM sent to one rank only, for fsdp-train and fsdp-minimal with --ckpt-dir: all ranks stop after
the same step, write a complete checkpoint (DONE) of the step reached, exit 130, and --resume auto
continues bitwise like the uninterrupted run. Then one rank killed half-way through writing its shard
(FSDP_TEST_TORN_SHARD), in a --new-run beside another run's complete checkpoint of the same step:
`fsdp-ckpt verify` fails naming the torn file, and --resume auto takes the previous checkpoint and
continues exactly."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import MPI_ENV, Checker, mpirun, parse_args, proc, tmpdir  # noqa: E402

# constant learning rate: the losses of a step do not depend on --steps. The models are large enough for a
# step to take tens of milliseconds: a signalled mpirun stops forwarding the ranks' output, and a rank that
# printed faster would fill the pseudo-terminal and block in its log write before the signal reaches it
# (the tools catch signals without SA_RESTART, which frees such a write, but not one cut half-way).
TRAIN = ["--layers", "4", "--d-model", "128", "--heads", "4", "--seq", "64", "--batch", "4", "--threads", "1",
         "--lr", "3e-3", "--lr-schedule", "constant", "--warmup", "2"]
MINIMAL = ["--layers", "4", "--d-model", "128", "--heads", "4", "--ffn", "512", "--seq", "16", "--threads", "1",
           "--global-batch", "8"]
# Open MPI 4.1's mpirun, signalled, sends the ranks SIGCONT at once, SIGTERM after odls_base_sigkill_timeout
# seconds (default 1) and SIGKILL after as many again: give them time to finish the step and save.
PATIENT = {"OMPI_MCA_odls_base_sigkill_timeout": "3"}


def jsonl(path):
    recs = [r for r in map(json.loads, open(path)) if "step" in r] if os.path.exists(path) else []
    return [r["step"] for r in recs], [r["loss"] for r in recs]


def rank_pids(mpirun_pid, binary):
    """{rank: pid} of the ranks mpirun started (children or grandchildren running binary)."""
    out = {}
    for pid in map(int, subprocess.run(["ps", "-e", "-o", "pid="], capture_output=True, text=True).stdout.split()):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode()
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        ranks = [e.split(b"=", 1)[1] for e in env if e.startswith(b"OMPI_COMM_WORLD_RANK=")]
        if cmd == binary and ranks and mpirun_pid in ancestors(pid):
            out[int(ranks[0])] = pid
    return out


def ancestors(pid):
    chain = []
    while pid > 1:
        try:
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
        chain.append(pid)
    return chain


def interrupt(binary, args, n, sig, to_rank, steps_seen=3):
    """Starts binary on n ranks, waits for steps_seen step lines, sends sig to mpirun (to_rank None) or to
    that rank only; returns (mpirun's exit status, stdout, stderr)."""
    env = {**os.environ, **MPI_ENV, **PATIENT}
    err = tempfile.TemporaryFile("w+")  # a file: nothing blocks on a full stderr pipe
    p = subprocess.Popen(["mpirun", "-np", str(n), "-x", "OMP_NUM_THREADS", "-x", "OMPI_MCA_odls_base_sigkill_timeout",
                          binary] + args, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    seen, lines = 0, []
    deadline = time.time() + 60
    while seen < steps_seen and time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        seen += line.startswith("step ")
    if to_rank is None:
        p.send_signal(sig)
    else:
        pids = rank_pids(p.pid, binary)
        if to_rank in pids:
            os.kill(pids[to_rank], sig)
        else:
            print(f"no rank {to_rank} among {pids}")
            p.kill()
    # The rest of stdout through the same buffered reader the lines above came from (communicate() reads
    # the pipe beneath it and would lose what that reader holds), with a deadline.
    rest = []
    reader = threading.Thread(target=lambda: rest.append(p.stdout.read()))
    reader.start()
    reader.join(120)
    if reader.is_alive():
        p.kill()
        reader.join()
    p.wait()
    err.seek(0)
    return p.returncode, "".join(lines) + "".join(rest), err.read()


def step_lines(stdout):
    """(steps, losses) of the complete `step K loss L` lines."""
    found = re.findall(r"^step (\d+) loss (\S+)$", stdout, re.M)
    return [int(k) for k, _ in found], [float(v) for _, v in found]


def checkpoints(ck):
    return sorted(d for d in os.listdir(ck) if d.startswith("step_")) if os.path.isdir(ck) else []


def main():
    args = parse_args()
    train = os.path.join(args.bin, "fsdp-train")
    minimal = os.path.join(args.bin, "fsdp-minimal")
    ckpt_tool = os.path.join(args.bin, "fsdp-ckpt")
    tmp = tmpdir()
    chk = Checker("interrupts")

    cases = [("fsdp-train", "SIGTERM to mpirun", signal.SIGTERM, None),
             ("fsdp-train", "SIGINT to mpirun", signal.SIGINT, None),
             ("fsdp-train", "SIGTERM to rank 1 only", signal.SIGTERM, 1),
             ("fsdp-minimal", "SIGINT to mpirun", signal.SIGINT, None),
             ("fsdp-minimal", "SIGTERM to rank 1 only", signal.SIGTERM, 1)]
    for i, (tool, how, sig, to_rank) in enumerate(cases):
        ck, log = f"{tmp}/sig{i}", f"{tmp}/sig{i}.jsonl"
        label = f"{tool}, {how}"
        binary, model = (train, TRAIN) if tool == "fsdp-train" else (minimal, MINIMAL)

        def steps_and_losses(out, log_path):  # fsdp-train: the JSONL log; fsdp-minimal: its step lines
            return jsonl(log_path) if tool == "fsdp-train" else step_lines(out)

        logged = ["--log-jsonl", log] if tool == "fsdp-train" else []
        rc, out, err = interrupt(binary, model + ["--steps", "100000", "--ckpt-dir", ck] + logged, 2, sig, to_rank)
        steps, losses = steps_and_losses(out, log)
        # mpirun itself exits 1 when it is signalled; when one rank is signalled the ranks' 130 comes through
        want_rc = 130 if to_rank is not None else 1
        stopped = [line for line in err.splitlines() if "interrupted after step" in line]
        chk.true(f"{label}: exit {want_rc} with 'interrupted after step' ({rc})", rc == want_rc and len(stopped) == 1,
                 err[-1500:])
        # steps done: as the ranks said on stderr ("interrupted after step K"). The step lines are the
        # log's (fsdp-train) or stdout's, which mpirun forwards: once it is signalled it may drop the last
        # lines a rank wrote before exiting (seen: 748 of 749 lines, on a machine that ran ~750 steps
        # before the signal took effect), so stdout's lines need only be a prefix of the steps done.
        said = [int(m) for m in re.findall(r"interrupted after step (\d+)", err)]
        k = said[0] + 1 if said else len(steps)
        reached = f"step_{k:08d}"
        whole = steps == list(range(len(steps))) and (len(steps) == k if tool == "fsdp-train" else len(steps) <= k)
        chk.true(f"{label}: one complete checkpoint, of the step reached ({reached})",
                 k >= 3 and len(steps) >= 3 and whole and checkpoints(ck) == [reached]
                 and os.path.exists(f"{ck}/{reached}/DONE"), f"{checkpoints(ck)}, steps {steps[-5:]} of {len(steps)}")
        if k < 3 or len(steps) < 3:
            continue
        # the uninterrupted run to k + 3 steps (the losses of a step do not depend on --steps)
        ref_log = ["--log-jsonl", f"{tmp}/ref{i}.jsonl"] if logged else []
        ref_out = mpirun(2, [binary] + model + ["--steps", str(k + 3)] + ref_log).stdout
        _, ref = steps_and_losses(ref_out, f"{tmp}/ref{i}.jsonl")
        chk.close(f"{label}: losses before the signal equal the uninterrupted run's", losses, ref[:len(losses)], 0, 0)
        res_out = mpirun(2, [binary] + model + ["--steps", str(k + 3), "--resume", "auto", "--ckpt-dir", ck]
                         + (["--log-jsonl", f"{tmp}/res{i}.jsonl"] if logged else [])).stdout
        rsteps, rlosses = steps_and_losses(res_out, f"{tmp}/res{i}.jsonl")
        chk.true(f"{label}: --resume auto runs steps {k}..{k + 2}", rsteps == [k, k + 1, k + 2], f"{rsteps}")
        chk.close(f"{label}: resumed losses equal the uninterrupted run's (bitwise)", rlosses, ref[k:k + 3], 0, 0)

    # a rank killed while writing its shard. First a complete step_00000004 from another run (seed 1); a
    # fresh run (seed 0) into the same directory is refused, and with --new-run it sets the other run's
    # checkpoints aside (archive/), then its rank 1 dies half-way through its step-4 shard: the other
    # run's DONE must not stand over the new, partial files.
    ck = f"{tmp}/torn"
    mpirun(2, [train] + TRAIN + ["--seed", "1", "--steps", "4", "--save-every", "2", "--ckpt-dir", ck])
    r = mpirun(2, [train] + TRAIN + ["--steps", "4", "--save-every", "2", "--ckpt-dir", ck], expect_ok=False)
    chk.true("torn shard: a fresh run into the other run's directory is refused",
             r.returncode != 0 and "--new-run" in r.stderr and os.path.exists(f"{ck}/step_00000004/DONE"), r.stderr)
    r = mpirun(2, [train] + TRAIN + ["--steps", "4", "--save-every", "2", "--ckpt-dir", ck, "--new-run"],
               env={"FSDP_TEST_TORN_SHARD": "4:1"}, expect_ok=False, timeout=120)
    torn_dir = f"{ck}/step_00000004"
    torn = [f for f in os.listdir(torn_dir) if f.startswith("shard_00001.safetensors.tmp.")] \
        if os.path.isdir(torn_dir) else []
    chk.true("torn shard: the job fails", r.returncode != 0, f"exit {r.returncode}")
    chk.true("torn shard: rank 1's half-written temporary file is there, and no DONE",
             len(torn) == 1 and not os.path.exists(f"{torn_dir}/DONE"), f"{os.listdir(torn_dir)}")
    v = proc([ckpt_tool, "verify", torn_dir], expect_ok=False)
    chk.true("torn shard: fsdp-ckpt verify fails naming DONE and the torn file",
             v.returncode != 0 and "DONE" in v.stderr and bool(torn) and torn[0] in v.stderr, v.stderr)
    v = proc([ckpt_tool, "verify", f"{ck}/step_00000002"], expect_ok=False)
    chk.true("torn shard: the previous checkpoint verifies", v.returncode == 0, v.stderr)
    mpirun(2, [train] + TRAIN + ["--steps", "6", "--log-jsonl", f"{tmp}/ref.jsonl"])
    _, ref = jsonl(f"{tmp}/ref.jsonl")
    r = mpirun(2, [train] + TRAIN + ["--steps", "6", "--resume", "auto", "--ckpt-dir", ck, "--log-jsonl",
                                     f"{tmp}/torn.jsonl"])
    steps, losses = jsonl(f"{tmp}/torn.jsonl")
    chk.true("torn shard: --resume auto picks step 2", "step_00000002" in r.stdout and steps == [2, 3, 4, 5],
             f"{steps}\n{r.stdout[-600:]}")
    chk.close("torn shard: ... and continues exactly (bitwise)", losses, ref[2:6], 0, 0)
    chk.report()


if __name__ == "__main__":
    main()
