"""The multi-host test bed for Python tests: `with Bed(hosts=2) as bed:` creates network namespaces that
behave as hosts (tests/multihost/mhbed.sh) and removes them when the block ends, also on a failure,
an exception, SIGTERM (ctest's time-out) or sys.exit. `bed.mpirun(ranks_per_host, cmd)` runs cmd across
them. Where the machine cannot build a bed (not root, no network namespaces) `require_bed()` exits with
77, which ctest reports as skipped."""
import atexit
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import MPI_ENV, proc  # noqa: E402

MHBED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mhbed.sh")
SKIP = 77


def require_bed():
    """Exits 77 (skipped) with the reason when this machine cannot build a bed."""
    r = subprocess.run([MHBED, "check"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"SKIP: {r.stderr.strip() or 'no multi-host bed here'}")
        sys.exit(SKIP)


class Bed:
    """hosts: namespaces (hosts 10.77.0.1 .. 10.77.0.N, named mhNNN-h0 ..); rate: tc rate of every link
    (e.g. "1gbit"), None for an unshaped veth."""

    def __init__(self, hosts=2, rate=None, name=None):
        self.hosts = hosts
        self.rate = rate
        self.name = name or f"t{os.getpid() % 100000}"
        self._up = False

    def __enter__(self):
        subprocess.run([MHBED, "sweep"], capture_output=True)  # beds left by killed tests
        args = [MHBED, "up", self.name, str(self.hosts)] + ([self.rate] if self.rate else [])
        r = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "MHBED_OWNER": str(os.getpid())})
        if r.returncode != 0:
            print(f"FAIL: could not build the bed: {r.stderr.strip()}", file=sys.stderr)
            sys.exit(1)
        self._up = True
        atexit.register(self.down)
        self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum, frame):
        self.down()
        sys.exit(128 + signum)

    def down(self):
        if self._up:
            subprocess.run([MHBED, "down", self.name], capture_output=True)
            self._up = False

    def __exit__(self, *exc):
        self.down()
        signal.signal(signal.SIGTERM, self._old_term)
        return False

    def hostname(self, i):
        return f"{self.name}-h{i}"

    def host_arg(self, ranks_per_host):
        """--host's value: every host with ranks_per_host slots (a list: one count per host)."""
        per = ranks_per_host if isinstance(ranks_per_host, list) else [ranks_per_host] * self.hosts
        return ",".join(f"10.77.0.{i + 1}:{n}" for i, n in enumerate(per) if n > 0)

    def mpirun_args(self, ranks_per_host, cmd, env=None, mpi_args=()):
        """(argv, environment additions) of the mpirun that mpirun() runs, for a caller that starts it
        itself (subprocess.Popen, e.g. to act on the job while it runs)."""
        per = ranks_per_host if isinstance(ranks_per_host, list) else [ranks_per_host] * self.hosts
        xs = [x for k in ["OMP_NUM_THREADS"] + list(env or {}) for x in ("-x", k)]
        full = [MHBED, "mpirun", self.name, "--host", self.host_arg(per), "-np", str(sum(per)),
                "--map-by", "slot"] + xs + list(mpi_args) + list(cmd)
        return full, {**MPI_ENV, **(env or {})}

    def mpirun(self, ranks_per_host, cmd, expect_ok=True, env=None, timeout=600, mpi_args=()):
        """proc() of `mpirun -np N --host ... cmd` from host 0: ranks fill host 0 first, then host 1, ...
        (rank r on host r // ranks_per_host). env's variables are set and forwarded to every rank."""
        full, full_env = self.mpirun_args(ranks_per_host, cmd, env=env, mpi_args=mpi_args)
        return proc(full, expect_ok=expect_ok, env=full_env, timeout=timeout)

    def link_tx_bytes(self, host):
        """Bytes host has sent on its link so far (eth0's tx_bytes counter inside its namespace: every
        frame, headers included; traffic between ranks of one host never reaches it)."""
        r = self.exec(host, ["cat", "/sys/class/net/eth0/statistics/tx_bytes"])
        return int(r.stdout.strip())

    def pids(self, host, prefix="fsdp-"):
        """Processes in host's namespace whose command name starts with prefix (our binaries by default),
        as {pid: name}. The machine's PID namespace is shared: processes are told apart by network namespace."""
        r = subprocess.run(["ip", "netns", "pids", f"fsdpmh-{self.name}-h{host}"], capture_output=True, text=True)
        out = {}
        for tok in r.stdout.split():
            try:
                with open(f"/proc/{tok}/comm") as f:
                    name = f.read().strip()
            except OSError:  # gone meanwhile
                continue
            if name.startswith(prefix):
                out[int(tok)] = name
        return out

    def exec(self, host, cmd, expect_ok=True, env=None, timeout=600):
        """proc() of cmd inside one host (its namespace and hostname)."""
        return proc([MHBED, "exec", self.name, str(host)] + list(cmd), expect_ok=expect_ok, env=env, timeout=timeout)
