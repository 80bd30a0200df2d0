"""HYBRID_SHARD and failures across hosts, on 2 hosts x 2 ranks (tests/multihost/mhbed.sh):

1. groups and traffic: with the default groups HYBRID_SHARD shards inside each host and replicates
   across hosts (the summary's groups line says so, naming host 0); only the replica group's
   all-reduces cross the link: the bytes both hosts put on their links (eth0's tx counters) per
   training step, measured as the difference of a 10-step and a 2-step run (startup cancels), are
   within [0.9x, 1.5x] of what the four ranks' replica groups send (the run's
   replica_group_bytes_per_step, the same on every rank); a whole run is within that plus a fixed
   startup allowance; FULL_SHARD, whose one group is the world, puts at least twice as much on the link.
2. checkpoint: a sharded checkpoint saved on 2 hosts x 2 ranks resumes on 1 host x 3 ranks and
   continues to the losses of an uninterrupted one-process run (fp32 reduction tolerance, as in
   tests/ckpt/test_checkpoint.py); resharded with fsdp-ckpt to 3 ranks it resumes to the same losses and
   final parameters bit for bit (as in tests/ckpt/test_ckpt_reshard.py).
3. a rank killed (kill -9) on host 1 ends the job on both hosts within 60 s: mpirun exits non-zero and
   no fsdp process is left in either host's namespace.
4. the desync check (FSDP_DEBUG=DETAIL, FSDP_TEST_DESYNC) names the host and rank: rank 3's message
   says "rank 3 (host <host 1>)", rank 0's "rank 0 (host <host 0>)"."""
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
sys.path.insert(0, os.path.join(HERE, "..", "multirank"))
sys.path.insert(0, HERE)
from fsdp_testlib import Checker, mpirun, parse_args, proc, st_load, tmpdir  # noqa: E402
from mhlib import Bed, require_bed  # noqa: E402
from test_fsdp_equivalence import MODEL  # noqa: E402

STARTUP_ALLOWANCE = 200_000  # link bytes of Open MPI's wire-up, the launch and I/O forwarding (~35 kB seen)
# tests/ckpt/test_checkpoint.py's model and global batch
CK_MODEL = ["--layers", "2", "--d-model", "48", "--heads", "4", "--seq", "16", "--threads", "1", "--lr", "3e-3"]
CK_BATCH = 12


def numbers(stdout, prefix):
    """{key: value} of the `key value` pairs on the line starting with prefix."""
    line = next((x for x in stdout.splitlines() if x.startswith(prefix)), "")
    toks = line[len(prefix):].split()
    out = {}
    for k, v in zip(toks[::2], toks[1::2]):
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def link_run(bed, binary, strategy, steps, env=None):
    """(bytes both hosts put on their links, the run's stdout) of a training run."""
    before = [bed.link_tx_bytes(i) for i in range(2)]
    r = bed.mpirun(2, [binary] + MODEL + ["--strategy", strategy, "--steps", str(steps), "--summary"], env=env)
    after = [bed.link_tx_bytes(i) for i in range(2)]
    return sum(after) - sum(before), r.stdout


def groups_and_traffic(chk, bed, binary):
    h0 = bed.hostname(0)
    d2, out2 = link_run(bed, binary, "hybrid_shard", 2)
    d10, out10 = link_run(bed, binary, "hybrid_shard", 10)
    line = next((x for x in out10.splitlines() if x.startswith("groups:")), "")
    chk.true(f"hybrid_shard default groups: {line!r}",
             "world 4 ranks on 2 nodes" in line and f"shard group of 2 ranks within one node (node {h0})" in line
             and "replica group of 2 across nodes" in line, out10[-2000:])
    chk.true("hybrid_shard: the summary counts 2 ranks per shard group",
             "strategy HYBRID_SHARD, world 4, shard group 2 (replicated across groups)" in out10, out10[-2000:])
    stats = numbers(out10, "memory rank 0:")
    replica = stats.get("replica_group_bytes_per_step", float("nan"))
    shard = stats.get("shard_group_bytes_per_step", float("nan"))
    chk.close("per-group bytes add up to bytes_sent_per_step", [shard + replica],
              [stats.get("bytes_sent_per_step", float("nan"))], 0, 1)
    chk.true(f"the replica group sends bytes ({replica:.0f} per step per rank)", replica > 0, str(stats))
    expect = 4 * replica  # every rank sends the same (equal shards)
    per_step = (d10 - d2) / 8
    ratio = per_step / expect if expect > 0 else float("nan")
    chk.true(f"hybrid_shard: link bytes per step {per_step:.0f} = {ratio:.3f} x the replica groups' {expect:.0f} "
             "(within [0.9, 1.5])", 0.9 <= ratio <= 1.5, f"link {d2} (2 steps), {d10} (10 steps)")
    chk.true(f"hybrid_shard: a whole 10-step run's link bytes {d10} within [0.9, 1.5] x {10 * expect:.0f} "
             f"+ {STARTUP_ALLOWANCE} of startup", 0.9 * 10 * expect <= d10 <= 1.5 * 10 * expect + STARTUP_ALLOWANCE)
    f2, _ = link_run(bed, binary, "full_shard", 2)
    f10, fout = link_run(bed, binary, "full_shard", 10)
    fstats = numbers(fout, "memory rank 0:")
    f_step = (f10 - f2) / 8
    # per unit of U elements: hybrid_shard all-reduces its U/2 shard across the 2 hosts (U/2 per rank,
    # 2U in all); full_shard's hierarchical all-gathers (2) and reduce-scatter send a U/4 block off each
    # host per rank (3U in all): 3/2
    chk.true(f"full_shard (one group: the world) puts {f_step:.0f} bytes per step on the link, "
             f">= 1.4 x hybrid_shard's {per_step:.0f} (3/2 expected)", f_step >= 1.4 * per_step, f"{f2} {f10}")
    fline = next((x for x in fout.splitlines() if x.startswith("groups:")), "")
    chk.true(f"full_shard: the groups line names the hierarchical reduce-scatters: {fline!r}",
             "one shard group: the world (all-gathers and reduce-scatters hierarchical" in fline, fout[-2000:])
    chk.true("full_shard: no replica group bytes, all in the world's group",
             fstats.get("replica_group_bytes_per_step") == 0 and fstats.get("shard_group_bytes_per_step", 0) > 0,
             str(fstats))
    # the world's reduce-scatters and all-gathers run hierarchically by default (comm_hier.c): each block
    # crosses the link once per host; flat (FSDP_COMM_ALGO=p2p) once per rank of the host: 2x the bytes.
    p2, _ = link_run(bed, binary, "full_shard", 2, env={"FSDP_COMM_ALGO": "p2p"})
    p10, _ = link_run(bed, binary, "full_shard", 10, env={"FSDP_COMM_ALGO": "p2p"})
    p_step = (p10 - p2) / 8
    ratio = p_step / f_step if f_step > 0 else float("nan")
    chk.true(f"full_shard: flat collectives put {p_step:.0f} bytes per step on the link, {ratio:.3f} x the "
             f"hierarchical ones' {f_step:.0f} (2 expected; within [1.85, 2.15])", 1.85 <= ratio <= 2.15,
             f"{p2} {p10}")


def jsonl_losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if "step" in r]


def checkpoint(chk, bed, bindir, tmp):
    train, tool = os.path.join(bindir, "fsdp-train"), os.path.join(bindir, "fsdp-ckpt")
    proc([train] + CK_MODEL + ["--batch", str(CK_BATCH), "--steps", "6", "--log-jsonl", f"{tmp}/ref.jsonl"])
    ref = jsonl_losses(f"{tmp}/ref.jsonl")
    ck = f"{tmp}/ck"
    bed.mpirun(2, [train] + CK_MODEL + ["--batch", str(CK_BATCH // 4), "--steps", "3", "--save-every", "3",
                                        "--ckpt-dir", ck, "--log-jsonl", f"{tmp}/bed.jsonl"])
    chk.close("2 hosts x 2 ranks fsdp-train: steps 0..2 == one process", jsonl_losses(f"{tmp}/bed.jsonl"),
              ref[:3], 2e-5, 0)
    shards = sorted(x for x in os.listdir(f"{ck}/step_00000003") if x.startswith("shard_"))
    chk.true(f"the checkpoint holds 4 shards, 2 written on each host ({shards})", len(shards) == 4, str(shards))

    def resume(d, tag):
        save = f"{tmp}/final_{tag}.safetensors"
        mpirun(3, [train] + CK_MODEL + ["--batch", str(CK_BATCH // 3), "--steps", "6", "--resume", d,
                                        "--log-jsonl", f"{tmp}/{tag}.jsonl", "--save", save])
        return jsonl_losses(f"{tmp}/{tag}.jsonl"), st_load(save)

    la, pa = resume(f"{ck}/step_00000003", "resumed")
    chk.close("saved on 2 hosts x 2 ranks, resumed on 1 host x 3 ranks: steps 3..5 == one uninterrupted process",
              la, ref[3:], 2e-5, 0)
    proc([tool, "reshard", f"{ck}/step_00000003", f"{tmp}/rs3", "--world-size", "3"])
    lb, pb = resume(f"{tmp}/rs3", "resharded")
    chk.close("resharded to 3 (fsdp-ckpt): resumed losses == resumed from the original, bitwise", lb, la, 0, 0)
    chk.identical("resharded to 3: final parameters == resumed from the original, bitwise", pb, pa)


def killed_rank(chk, bed, binary):
    cmd, env = bed.mpirun_args(2, [binary] + MODEL + ["--steps", "1000000"])
    p = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        victims, t0 = {}, time.time()
        while time.time() - t0 < 60 and p.poll() is None:  # until both ranks run on host 1
            victims = bed.pids(1)
            if len(victims) == 2 and len(bed.pids(0)) == 2:
                break
            time.sleep(0.2)
        chk.true(f"the job runs 2 ranks on each host ({bed.pids(0)} / {victims})", len(victims) == 2 and p.poll() is None)
        time.sleep(1.0)  # well into training: the ranks are in collectives
        victim = max(victims) if victims else None
        t_kill = time.time()
        if victim:
            os.kill(victim, signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            out, err = "", "(mpirun still running after 60 s)"
        dt = time.time() - t_kill
        chk.true(f"kill -9 of rank pid {victim} on host 1: mpirun exits non-zero ({p.returncode}) within 60 s "
                 f"({dt:.1f} s)", p.returncode not in (None, 0) and dt < 60, err[-1500:])
        left = {}
        while time.time() - t_kill < 60:
            left = {h: bed.pids(h) for h in range(2)}
            if not left[0] and not left[1]:
                break
            time.sleep(0.2)
        chk.true(f"... and no fsdp process is left on either host ({time.time() - t_kill:.1f} s after the kill)",
                 not left[0] and not left[1], str(left))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for h in range(2):  # never leave ranks behind, whatever failed
            for pid in bed.pids(h):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def desync(chk, bed, binary):
    t0 = time.time()
    r = bed.mpirun(2, [binary] + MODEL + ["--steps", "3"], env={"FSDP_DEBUG": "DETAIL", "FSDP_TEST_DESYNC": "3:1:1"},
                   expect_ok=False, timeout=120)
    msgs = [x for x in r.stderr.splitlines() if "collective mismatch" in x]
    chk.true(f"desync on 2 hosts: non-zero exit ({r.returncode}) within 60 s ({time.time() - t0:.1f} s)",
             r.returncode != 0 and time.time() - t0 < 60, r.stderr[-1500:])
    for rank, host in ((3, 1), (0, 0)):
        want = f"rank {rank} (host {bed.hostname(host)})"
        chk.true(f"desync: a message names {want!r}", any(want in m for m in msgs), "\n".join(msgs) or r.stderr[-1500:])


def main():
    args = parse_args()
    require_bed()
    binary = os.path.join(args.bin, "fsdp-minimal")
    tmp = tmpdir()
    chk = Checker("multi-host hybrid, checkpoint, failures")
    with Bed(hosts=2) as bed:
        for name, section in (("groups and traffic", lambda: groups_and_traffic(chk, bed, binary)),
                              ("checkpoint", lambda: checkpoint(chk, bed, args.bin, tmp)),
                              ("killed rank", lambda: killed_rank(chk, bed, binary)),
                              ("desync", lambda: desync(chk, bed, binary))):
            t0 = time.time()
            section()
            print(f"-- {name}: {time.time() - t0:.1f} s")
    chk.report()


if __name__ == "__main__":
    main()
