"""fsdp-run and interrupts (src/cli/fsdp_run.c): SIGINT sent to fsdp-run (kill), and a terminal's Ctrl-C
(a pseudo-terminal, so the kernel signals the foreground process group), reach the ranks, not mpirun:
the 2-rank fsdp-train stops after the same step, saves, and fsdp-run exits 130 with the ranks' whole
output delivered (the `checkpoint: DIR/step_K` line on stdout); the checkpoint verifies. Two SIGINTs in
a row end the job at once through mpirun: exit 1 (not 130, which says the run saved)."""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc, tmpdir  # noqa: E402

MODEL = ["--layers", "2", "--d-model", "64", "--heads", "2", "--seq", "32", "--batch", "2", "--threads", "1",
         "--steps", "100000"]

SLOW = ["--layers", "4", "--d-model", "128", "--heads", "4", "--seq", "64", "--batch", "4", "--threads", "1",
        "--steps", "100000"]


def clean_env():
    """No Open MPI settings (fsdp-run supplies its own), one thread per rank."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def by_kill(bin_dir, ck, signals, model=MODEL):
    """fsdp-run -n 2 fsdp-train; after 3 step lines, each of signals sent to fsdp-run, 20 ms apart (signals
    of one kind sent closer could merge into one). Returns (exit status, stdout, stderr)."""
    err = tempfile.TemporaryFile("w+")
    p = subprocess.Popen([os.path.join(bin_dir, "fsdp-run"), "-n", "2", "fsdp-train"] + model + ["--ckpt-dir", ck],
                         stdout=subprocess.PIPE, stderr=err, text=True, env=clean_env())
    lines, seen, deadline = [], 0, time.time() + 60
    while seen < 3 and time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        seen += line.startswith("step ")
    for k, sig in enumerate(signals):
        if k:
            time.sleep(0.02)
        p.send_signal(sig)
    rest = []
    reader = threading.Thread(target=lambda: rest.append(p.stdout.read()))
    reader.start()
    reader.join(60)
    if reader.is_alive():
        p.kill()
        reader.join()
    p.wait()
    err.seek(0)
    return p.returncode, "".join(lines + rest), err.read()


def by_terminal(bin_dir, ck):
    """The same run on a pseudo-terminal, stopped by typing Ctrl-C after 3 step lines. Returns (exit
    status, the terminal's output)."""
    tool = os.path.join(bin_dir, "fsdp-run")
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(tool, [tool, "-n", "2", "fsdp-train"] + MODEL + ["--ckpt-dir", ck], clean_env())
    out, sent, deadline = b"", False, time.time() + 90
    while time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not data:
                break
            out += data
        if not sent and out.count(b"\nstep ") >= 3:
            os.write(fd, b"\x03")  # ^C: the line discipline sends SIGINT to the foreground group
            sent = True
    waited, status = os.waitpid(pid, os.WNOHANG)
    if waited == 0:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def saved(chk, label, bin_dir, out, text):
    """The checkpoint line is in out, names the step the ranks said they stopped after, and verifies."""
    said = re.findall(r"interrupted after step (\d+)", text)
    ck_lines = re.findall(r"^checkpoint: (\S+) ", out, re.M)
    want = f"step_{int(said[0]) + 1:08d}" if said else "?"
    chk.true(f"{label}: the 'checkpoint:' line of the step reached is delivered",
             len(said) == 1 and len(ck_lines) == 1 and ck_lines[0].endswith(want), f"{said} {ck_lines}")
    if ck_lines:
        v = proc([os.path.join(bin_dir, "fsdp-ckpt"), "verify", ck_lines[0]], expect_ok=False)
        chk.true(f"{label}: the checkpoint verifies", v.returncode == 0, v.stderr)


def main():
    args = parse_args()
    tmp = tmpdir()
    chk = Checker("fsdp-run signals")
    rc, out, err = by_kill(args.bin, f"{tmp}/kill", [signal.SIGINT])
    chk.true("SIGINT to fsdp-run: exit 130", rc == 130, f"rc {rc}: {err[-800:]}")
    saved(chk, "SIGINT to fsdp-run", args.bin, out, err)
    rc, text = by_terminal(args.bin, f"{tmp}/tty")
    chk.true("Ctrl-C on a terminal: exit 130", rc == 130, f"rc {rc}: {text[-800:]}")
    saved(chk, "Ctrl-C on a terminal", args.bin, text, text)
    # steps of tens of milliseconds: the second SIGINT arrives while the ranks still finish theirs
    rc, out, err = by_kill(args.bin, f"{tmp}/twice", [signal.SIGINT, signal.SIGINT], SLOW)
    chk.true("two SIGINTs: the job ends through mpirun, exit 1", rc == 1, f"rc {rc}: {err[-800:]}")
    chk.report()


if __name__ == "__main__":
    main()
