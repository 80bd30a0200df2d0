"""Launch defaults: the OpenMP threads each rank chooses, read from fsdp-minimal --summary's line
"threads per rank N (affinity M cores, K ranks on node, S sharing these cores)".
Default N = max(1, M // S) with OMP_NUM_THREADS unset (S = K when the ranks are unbound, 1 when each is
bound to its own cores); --threads and OMP_NUM_THREADS override it; taskset's mask is honoured; when
ranks x threads exceed the cores they share, rank 0 prints one note, and with threads > 1 the ranks
run with OMP_WAIT_POLICY=passive (the note then has no advice to set it). fsdp-train prints the same line."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, parse_args, parse_losses  # noqa: E402

MPI = ["mpirun", "--oversubscribe"]
MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--ffn", "64", "--seq", "4", "--global-batch", "12",
         "--steps", "2", "--summary"]
LINE = re.compile(r"threads per rank (\d+) \(affinity (\d+) cores, (\d+) ranks on node, (\d+) sharing these cores"
                  r"(, from (--threads|OMP_NUM_THREADS))?\)")
NOTE = "note: oversubscribed"


def child_env(omp_threads=None):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    env.pop("OMPI_MCA_mpi_yield_when_idle", None)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    return env


def launch(chk, label, cmd, env):
    """Runs cmd; returns (threads, affinity, ranks, sharing, source, stderr) or None (failure recorded)."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    found = LINE.findall(r.stdout + r.stderr)
    losses = parse_losses(r.stdout)
    ok = r.returncode == 0 and len(found) == 1 and len(losses) == 2 and all(x == x for x in losses)
    chk.count += 1
    if not ok:
        chk.failures += 1
        print(f"FAIL launch_threads: {label}: rc {r.returncode}, {len(found)} thread lines, losses {losses}\n"
              f"{r.stdout}{r.stderr}")
        return None
    n, m, k, s, _, src = found[0]
    print(f"ok   launch_threads: {label}: ran; threads {n}, affinity {m}, ranks {k}, sharing {s} {src}")
    return int(n), int(m), int(k), int(s), src, r.stderr


def expect(chk, label, cond, detail):
    chk.count += 1
    if cond:
        print(f"ok   launch_threads: {label}: {detail}")
    else:
        chk.failures += 1
        print(f"FAIL launch_threads: {label}: {detail}")


def check_default(chk, label, got, ranks, cores=None):
    if got is None:
        return
    n, m, k, s, src, err = got
    expect(chk, label, k == ranks and 1 <= s <= k and src == "", f"{k} ranks on node (want {ranks}), {s} sharing, "
           f"source '{src}' (want default)")
    if cores is not None:
        expect(chk, label, m == cores, f"affinity {m} cores (want {cores})")
    expect(chk, label, n == max(1, m // s), f"threads {n} == max(1, {m} // {s})")
    check_note(chk, label, got)


def check_note(chk, label, got):
    n, m, _, s, _, err = got
    over = n * s > m
    expect(chk, label, err.count(NOTE) == (1 if over else 0),
           f"{err.count(NOTE)} oversubscription notes (want {1 if over else 0}: {s} x {n} threads on {m} cores)")
    if over and n > 1:  # re-executed with OMP_WAIT_POLICY=passive: no advice to set it
        expect(chk, label, "set OMP_WAIT_POLICY" not in err, "OpenMP waits are passive")


def main():
    args = parse_args()
    chk = Checker("launch_threads")
    minimal = os.path.join(args.bin, "fsdp-minimal")
    cores = len(os.sched_getaffinity(0))
    one = str(sorted(os.sched_getaffinity(0))[0])

    check_default(chk, "plain process", launch(chk, "plain process", [minimal] + MODEL, child_env()), 1, cores)
    check_default(chk, "taskset one core", launch(chk, "taskset one core", ["taskset", "-c", one, minimal] + MODEL,
                                                  child_env()), 1, 1)
    for np_ in (1, 2, 3):
        label = f"-np {np_} unbound"
        got = launch(chk, label, MPI + ["--bind-to", "none", "-np", str(np_), minimal] + MODEL, child_env())
        check_default(chk, label, got, np_, cores)
        if got:
            expect(chk, label, got[3] == np_, f"{got[3]} ranks share the cores (want all {np_})")
    # mpirun's own binding (to a core each, when the ranks fit)
    got = launch(chk, "-np 2 bound", MPI + ["-np", "2", minimal] + MODEL, child_env())
    check_default(chk, "-np 2 bound", got, 2)
    if got and 2 * got[1] <= cores:  # each rank bound to its own cores: its threads use them all
        expect(chk, "-np 2 bound", got[3] == 1 and got[0] == got[1], f"{got[3]} sharing (want 1), threads {got[0]}")
    check_default(chk, "-np 3 default binding",
                  launch(chk, "-np 3", MPI + ["-np", "3", minimal] + MODEL, child_env()), 3)
    label = "taskset one core, -np 2"
    got = launch(chk, label, ["taskset", "-c", one] + MPI + ["--bind-to", "none", "-np", "2", minimal] + MODEL,
                 child_env())
    check_default(chk, label, got, 2, 1)
    if got:
        expect(chk, label, got[0] == 1 and NOTE in got[5], "one thread each, oversubscription noted")

    # overrides
    label = "--threads 2, -np 2 on one core"  # oversubscribed on any machine: note and passive waits
    got = launch(chk, label, ["taskset", "-c", one] + MPI + ["--bind-to", "none", "-np", "2", minimal] + MODEL +
                 ["--threads", "2"], child_env())
    if got:
        expect(chk, label, got[0] == 2 and got[4] == "--threads" and NOTE in got[5], f"threads {got[0]} from "
               f"'{got[4]}', noted")
        check_note(chk, label, got)
    label = "OMP_NUM_THREADS=3, -np 3"
    got = launch(chk, label, MPI + ["--bind-to", "none", "-np", "3", minimal] + MODEL, child_env(3))
    if got:
        expect(chk, label, got[0] == 3 and got[4] == "OMP_NUM_THREADS", f"threads {got[0]} from '{got[4]}'")
        check_note(chk, label, got)
    label = "--threads beats OMP_NUM_THREADS"
    got = launch(chk, label, [minimal] + MODEL + ["--threads", "1"], child_env(2))
    if got:
        expect(chk, label, got[0] == 1 and got[4] == "--threads", f"threads {got[0]} from '{got[4]}'")

    # fsdp-train shows the same line in its banner
    label = "fsdp-train -np 2 unbound"
    train = [os.path.join(args.bin, "fsdp-train"), "--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "8",
             "--batch", "2", "--steps", "2"]
    r = subprocess.run(MPI + ["--bind-to", "none", "-np", "2"] + train, capture_output=True, text=True,
                       env=child_env(), timeout=300)
    found = LINE.findall(r.stdout)
    expect(chk, label, r.returncode == 0 and len(found) == 1 and int(found[0][0]) == max(1, cores // 2),
           f"rc {r.returncode}, banner line {found} (want threads {max(1, cores // 2)})")
    chk.report()


if __name__ == "__main__":
    main()
