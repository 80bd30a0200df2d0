"""Shared helpers for the PyTorch parity and bad-input tests: a minimal safetensors reader/writer
(numpy only; Debian has no python3-safetensors), running our binaries, and tensor comparison."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def st_save(path, tensors, metadata=None):
    """Writes {name: array} as safetensors (F32 for floats, I64/I32 for ints, BF16 via 'bf16:' arrays)."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        if hasattr(arr, "detach"):
            arr = arr.detach().cpu().numpy()
        arr = np.ascontiguousarray(arr)
        code = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
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


def st_load(path):
    """Reads a safetensors file into {name: float32/int numpy array}; BF16 is widened to float32."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
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


def run(cmd, expect_ok=True, env=None):
    """Runs a command; returns (returncode, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "2")
    if env:
        full_env.update(env)
    r = subprocess.run(cmd, capture_output=True, text=True, env=full_env)
    if expect_ok and r.returncode != 0:
        print("command failed:", " ".join(cmd), "\n", r.stdout, r.stderr, file=sys.stderr)
        sys.exit(1)
    return r.returncode, r.stdout, r.stderr


def parse_losses(stdout):
    return [float(line.split()[3]) for line in stdout.splitlines() if line.startswith("step ")]


class Checker:
    """Collects comparisons; report() prints a summary and exits non-zero on any failure."""

    def __init__(self, name):
        self.name, self.failures, self.count = name, 0, 0

    def close(self, label, ours, ref, rtol, atol):
        ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        self.count += 1
        if ours.shape != ref.shape:
            print(f"FAIL {self.name}: {label}: shape {ours.shape} vs {ref.shape}")
            self.failures += 1
            return
        err = np.abs(ours - ref)
        bound = atol + rtol * np.abs(ref)
        worst = float(np.max(err - bound)) if err.size else 0.0
        rel = float(np.max(err / (np.abs(ref) + 1e-12))) if err.size else 0.0
        if worst > 0:
            i = int(np.argmax(err - bound))
            print(f"FAIL {self.name}: {label}: max abs err {err.max():.3e} (at {i}: {ours.flat[i]!r} vs "
                  f"{ref.flat[i]!r}), rtol {rtol} atol {atol}")
            self.failures += 1
        else:
            print(f"ok   {self.name}: {label}: max abs err {err.max() if err.size else 0:.3e} max rel {rel:.3e}")

    def report(self):
        print(f"{self.name}: {self.count - self.failures} passed, {self.failures} failed")
        sys.exit(1 if self.failures else 0)


def tmpdir():
    return tempfile.mkdtemp(prefix="fsdp-test-")
