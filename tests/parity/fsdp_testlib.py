"""Shared helpers for the PyTorch parity and bad-input tests: a minimal safetensors reader/writer
(numpy only; Debian has no python3-safetensors), running our binaries, and tensor comparison."""
import argparse
import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def bf16_rne(u32):
    """numpy's round-to-nearest-even of fp32 bits to bf16 bits (no NaN in a checkpoint)."""
    u = u32.astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def st_save(path, tensors, metadata=None):
    """Writes {name: array} as safetensors (F32 for floats, I64/I32 for ints); a value ("BF16", array) is
    written as BF16, rounded to nearest even from float32 (an array of uint16 is taken as the bits)."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        bf16 = isinstance(arr, tuple) and arr[0] == "BF16"
        if bf16:
            arr = arr[1] if arr[1].dtype == np.uint16 else bf16_rne(np.asarray(arr[1], np.float32).view(np.uint32))
        if hasattr(arr, "detach"):
            arr = arr.detach().cpu().numpy()
        arr = np.ascontiguousarray(arr)
        code = "BF16" if bf16 else {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
                                    np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}[arr.dtype]
        data = arr.tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def st_read(path):
    """A safetensors file's header (a dict, "__metadata__" included when present) and data bytes."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        return header, f.read()


def st_load(path):
    """Reads a safetensors file into {name: float32/int numpy array}; BF16 is widened to float32."""
    header, data = st_read(path)
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        if e["dtype"] == "BF16":
            u16 = np.frombuffer(data[b:end], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = u16.view(np.float32).reshape(e["shape"])
        else:
            out[name] = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
    return out


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True, help="directory with our binaries")
    return p.parse_args()


# The exit status of a process stopped by AddressSanitizer, LeakSanitizer or UBSan in the sanitized
# build (exitcode=66 in tests/sanitizers/run-sanitized.sh).
SANITIZER_EXIT = 66


MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1"}


def proc(cmd, expect_ok=True, env=None, timeout=600):
    """Runs a command and returns its subprocess.CompletedProcess. With expect_ok (the default) a non-zero
    exit, a time-out or a signal ends the test at once as a failure, printing the command and its output:
    no comparison is ever made on the output of a failed run. Pass expect_ok=False only where the test
    itself checks the exit status."""
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "2")
    if env:
        full_env.update(env)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        print(f"FAIL: command timed out after {timeout} s: {' '.join(cmd)}\n{e.stdout}\n{e.stderr}", file=sys.stderr)
        sys.exit(1)
    if r.returncode == SANITIZER_EXIT:  # never an expected failure: see tests/sanitizers/run-sanitized.sh
        print(f"FAIL: sanitizer report (exit status 66): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}", file=sys.stderr)
        sys.exit(1)
    if expect_ok and r.returncode != 0:
        print(f"FAIL: command exited with {r.returncode}: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}", file=sys.stderr)
        sys.exit(1)
    return r


def run(cmd, expect_ok=True, env=None, timeout=600):
    """proc(), returned as (returncode, stdout, stderr)."""
    r = proc(cmd, expect_ok=expect_ok, env=env, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def mpirun(n, cmd, expect_ok=True, env=None, timeout=600):
    """proc() under `mpirun -np n` with the root/oversubscribe settings (MPI_ENV) and one OpenMP thread per
    rank unless env says otherwise; every variable of env is forwarded to the ranks (-x)."""
    xs = [x for k in ["OMP_NUM_THREADS"] + list(env or {}) for x in ("-x", k)]
    env = {**MPI_ENV, **(env or {})}
    return proc(["mpirun", "-np", str(n)] + xs + list(cmd), expect_ok=expect_ok, env=env, timeout=timeout)


def memory_line(stdout):
    """fsdp-train --summary's `memory rank 0: key value ...` line as {key: number} ({} when missing)."""
    line = next((x for x in stdout.splitlines() if x.startswith("memory rank 0:")), "")
    words = line.split()[3:]
    return {words[i]: float(words[i + 1]) for i in range(0, len(words) - 1, 2)}


def parse_losses(stdout):
    """The losses of `step K loss L ...` lines, in order (fsdp-minimal and fsdp-train print these)."""
    return [float(line.split()[3]) for line in stdout.splitlines() if line.startswith("step ")]


class Checker:
    """Collects comparisons; report() prints a summary and exits non-zero on any failure."""

    def __init__(self, name):
        self.name, self.failures, self.count = name, 0, 0
        if name != "probe":
            self.selftest()

    def fail(self, label, why):
        print(f"FAIL {self.name}: {label}: {why}")
        self.failures += 1

    def close(self, label, ours, ref, rtol, atol):
        """|ours - ref| <= atol + rtol |ref| elementwise. Fails on a shape or length mismatch, on empty
        arrays (a run that printed nothing) and on any NaN or Inf on either side."""
        self.count += 1
        try:
            ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        except (TypeError, ValueError) as e:
            return self.fail(label, f"not numeric: {e}")
        if ours.shape != ref.shape:
            return self.fail(label, f"shape {ours.shape} vs {ref.shape}")
        if ours.size == 0:
            return self.fail(label, "nothing to compare (empty output)")
        for side, arr in (("ours", ours), ("reference", ref)):
            if not np.all(np.isfinite(arr)):
                i = int(np.argmin(np.isfinite(arr).ravel()))
                return self.fail(label, f"{side} holds a non-finite value ({arr.flat[i]!r} at {i})")
        err = np.abs(ours - ref)
        bound = atol + rtol * np.abs(ref)
        worst = float(np.max(err - bound))
        rel = float(np.max(err / (np.abs(ref) + 1e-12)))
        if worst > 0:
            i = int(np.argmax(err - bound))
            self.fail(label, f"max abs err {err.max():.3e} (at {i}: {ours.flat[i]!r} vs {ref.flat[i]!r}), "
                             f"rtol {rtol} atol {atol}")
        else:
            print(f"ok   {self.name}: {label}: max abs err {err.max():.3e} max rel {rel:.3e}")

    def true(self, label, cond, detail=""):
        """A yes/no check; detail is printed on failure."""
        self.count += 1
        if cond:
            print(f"ok   {self.name}: {label}")
        else:
            self.fail(label, detail or "condition is false")

    def identical(self, label, ours, ref):
        """Two {name: array} dicts (e.g. st_load of two --save files) hold the same names and bitwise equal,
        finite values; an empty dict fails."""
        bad = [k for k in ours if k not in ref or not np.array_equal(ours[k], ref[k])]
        finite = all(np.all(np.isfinite(v)) for v in ours.values())
        self.true(label, len(ours) > 0 and sorted(ours) == sorted(ref) and not bad and finite,
                  f"{len(ours)} vs {len(ref)} tensors, finite {finite}, differ: {', '.join(bad)[:300]}")

    def selftest(self):
        """The comparison itself must reject NaN, Inf, empty and mismatched inputs (checked on every run)."""
        probe = Checker("probe")
        probe_cases = (([float("nan")], [1.0]), ([1.0], [float("nan")]), ([float("inf")], [float("inf")]),
                       ([], []), ([1.0, 2.0], [1.0]), ([1.0], [1.0, 1.0]), (["x"], [1.0]))
        with contextlib.redirect_stdout(io.StringIO()):
            for a, b in probe_cases:
                probe.close("probe", a, b, 1.0, 1.0)
            probe.close("probe", [1.0], [1.0], 0, 0)
        assert probe.failures == len(probe_cases) and probe.count == len(probe_cases) + 1, \
            "Checker.close accepts NaN, Inf, empty or mismatched arrays"

    def report(self):
        if self.count == 0:
            self.fail("report", "no check ran")
        print(f"{self.name}: {self.count - self.failures} passed, {self.failures} failed")
        sys.exit(1 if self.failures else 0)


def tmpdir():
    return tempfile.mkdtemp(prefix="fsdp-test-")
