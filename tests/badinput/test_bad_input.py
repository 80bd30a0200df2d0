"""Bad-input tests for build/bin/fsdp-minimal and build/bin/fsdp-train.

Every bad input must make the binary fail cleanly: non-zero exit status, exactly one line on stderr
that names the problem (the offending file / tensor / flag, and a word about what was expected), no
`step` lines on stdout for failures caught before training, and nothing written: the --save,
--dump-grads (and --dump-output) targets are not created when absent, keep their content when they
already exist, and no `*.tmp.*` files are left behind. Each case runs twice: once with the targets
absent, once with them already present. Positive controls (valid --init/--input) must exit 0 and
write the targets, so the test cannot pass vacuously.

Run as: /usr/bin/python3 tests/badinput/test_bad_input.py --bin build/bin"""
import os
import re
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import parse_args, run, st_load, st_save, tmpdir  # noqa: E402

# Small configurations keep every run fast.
MIN_L, MIN_D, MIN_H, MIN_FFN, MIN_SEQ, MIN_BATCH = 1, 32, 2, 64, 4, 2
MIN_FLAGS = ["--layers", str(MIN_L), "--d-model", str(MIN_D), "--heads", str(MIN_H), "--ffn", str(MIN_FFN),
             "--seq", str(MIN_SEQ), "--global-batch", str(MIN_BATCH), "--steps", "1", "--threads", "2"]
TR_L, TR_D, TR_H, TR_V, TR_SEQ, TR_BATCH = 1, 32, 2, 64, 8, 2
TR_FLAGS = ["--layers", str(TR_L), "--d-model", str(TR_D), "--heads", str(TR_H), "--vocab", str(TR_V),
            "--seq", str(TR_SEQ), "--batch", str(TR_BATCH), "--steps", "1", "--threads", "2"]

SENTINEL = b"sentinel content that must survive a failed run\n"


# ----------------------------------------------------------------------------------------------------
# Fixtures


def minimal_weights(rng, layers=MIN_L, d=MIN_D, ffn=MIN_FFN):
    w = {}
    for i in range(layers):
        p = f"{i}."
        w[p + "self_attn.in_proj_weight"] = rng.standard_normal((3 * d, d)) * 0.05
        w[p + "self_attn.in_proj_bias"] = rng.standard_normal(3 * d) * 0.05
        w[p + "self_attn.out_proj.weight"] = rng.standard_normal((d, d)) * 0.05
        w[p + "self_attn.out_proj.bias"] = rng.standard_normal(d) * 0.05
        w[p + "linear1.weight"] = rng.standard_normal((ffn, d)) * 0.05
        w[p + "linear1.bias"] = rng.standard_normal(ffn) * 0.05
        w[p + "linear2.weight"] = rng.standard_normal((d, ffn)) * 0.05
        w[p + "linear2.bias"] = rng.standard_normal(d) * 0.05
        w[p + "norm1.weight"] = 1 + rng.standard_normal(d) * 0.05
        w[p + "norm1.bias"] = rng.standard_normal(d) * 0.05
        w[p + "norm2.weight"] = 1 + rng.standard_normal(d) * 0.05
        w[p + "norm2.bias"] = rng.standard_normal(d) * 0.05
    return {k: v.astype(np.float32) for k, v in w.items()}


def gpt2_weights(rng, layers=TR_L, d=TR_D, vocab=TR_V, seq=TR_SEQ):
    w = {"wte.weight": rng.standard_normal((vocab, d)) * 0.02, "wpe.weight": rng.standard_normal((seq, d)) * 0.02}
    for i in range(layers):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = 1 + rng.standard_normal(d) * 0.05
        w[p + "ln_1.bias"] = rng.standard_normal(d) * 0.05
        w[p + "attn.c_attn.weight"] = rng.standard_normal((d, 3 * d)) * 0.02
        w[p + "attn.c_attn.bias"] = rng.standard_normal(3 * d) * 0.02
        w[p + "attn.c_proj.weight"] = rng.standard_normal((d, d)) * 0.02
        w[p + "attn.c_proj.bias"] = rng.standard_normal(d) * 0.02
        w[p + "ln_2.weight"] = 1 + rng.standard_normal(d) * 0.05
        w[p + "ln_2.bias"] = rng.standard_normal(d) * 0.05
        w[p + "mlp.c_fc.weight"] = rng.standard_normal((d, 4 * d)) * 0.02
        w[p + "mlp.c_fc.bias"] = rng.standard_normal(4 * d) * 0.02
        w[p + "mlp.c_proj.weight"] = rng.standard_normal((4 * d, d)) * 0.02
        w[p + "mlp.c_proj.bias"] = rng.standard_normal(d) * 0.02
    w["ln_f.weight"] = 1 + rng.standard_normal(d) * 0.05
    w["ln_f.bias"] = rng.standard_normal(d) * 0.05
    return {k: v.astype(np.float32) for k, v in w.items()}


def header_len(path):
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


def write_truncated_data(src, dst):
    """Cuts a valid file in the middle of its tensor data."""
    n = header_len(src)
    size = os.path.getsize(src)
    data_start = 8 + n
    cut = data_start + (size - data_start) // 2
    with open(src, "rb") as f:
        raw = f.read(cut)
    with open(dst, "wb") as f:
        f.write(raw)


def write_truncated_header(src, dst):
    """Cuts a valid file in the middle of its JSON header."""
    n = header_len(src)
    with open(src, "rb") as f:
        raw = f.read(8 + n // 2)
    with open(dst, "wb") as f:
        f.write(raw)


def write_header_too_long(src, dst):
    """Keeps the file but claims a header longer than the whole file."""
    size = os.path.getsize(src)
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    raw[0:8] = struct.pack("<Q", size + 4096)
    with open(dst, "wb") as f:
        f.write(bytes(raw))


def write_garbage_json(src, dst):
    """A header of the right length that is not JSON, followed by the original data."""
    n = header_len(src)
    with open(src, "rb") as f:
        raw = f.read()
    garbage = b"{this is not json: [1, 2,, }}}"
    garbage = (garbage * (n // len(garbage) + 1))[:n]
    with open(dst, "wb") as f:
        f.write(raw[:8] + garbage + raw[8 + n:])


def with_dtype(tensors, name, dtype):
    t = dict(tensors)
    t[name] = np.asarray(tensors[name]).astype(dtype)
    return t


def without(tensors, name):
    return {k: v for k, v in tensors.items() if k != name}


def with_shape(tensors, name, shape):
    t = dict(tensors)
    t[name] = np.zeros(shape, dtype=tensors[name].dtype)
    return t


# ----------------------------------------------------------------------------------------------------
# Checking one run


def snapshot(d):
    """{name: bytes} of every plain file directly in d."""
    out = {}
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out[name] = f.read()
        else:
            out[name] = None
    return out


def tmp_leftovers(dirs):
    found = []
    for d in dirs:
        for name in os.listdir(d):
            if ".tmp." in name:
                found.append(os.path.join(d, name))
    return found


def has_all(text, needles):
    """Every needle (str, or tuple meaning any-of) occurs in text; strings starting with 're:' are regexes.
    Plain strings match case-insensitively."""
    for n in needles:
        alts = n if isinstance(n, tuple) else (n,)
        if not any(_match(text, a) for a in alts):
            return False, alts
    return True, None


def _match(text, needle):
    if needle.startswith("re:"):
        return re.search(needle[3:], text) is not None
    return needle.lower() in text.lower()


class Suite:
    def __init__(self, bindir, work):
        self.bindir, self.work = bindir, work
        self.passed, self.failed = 0, 0
        self.failures = []
        self.fixdir = os.path.join(work, "fixtures")
        os.makedirs(self.fixdir)
        self.counter = 0

    def fix(self, name):
        return os.path.join(self.fixdir, name)

    def _report(self, name, problems, details):
        if problems:
            self.failed += 1
            print(f"FAIL {name}")
            for p in problems:
                print(f"     - {p}")
            for line in details:
                print(f"       {line}")
            self.failures.append(name)
        else:
            self.passed += 1
            print(f"ok   {name}")

    def _outdir(self):
        self.counter += 1
        d = os.path.join(self.work, f"out{self.counter:03d}")
        os.makedirs(d)
        return d

    def bad(self, name, binary, args, needles, preflight=True, targets=("--save", "--dump-grads")):
        """A run that must fail cleanly. needles: what stderr must mention (see has_all).
        Runs twice: targets absent, then targets present with sentinel content."""
        problems, details = [], []
        for variant in ("absent", "existing"):
            out = self._outdir()
            target_args = []
            for flag in targets:
                p = os.path.join(out, flag.strip("-").replace("-", "_") + ".safetensors")
                if variant == "existing":
                    with open(p, "wb") as f:
                        f.write(SENTINEL)
                target_args += [flag, p]
            before = snapshot(out)
            # The bad flag(s) come last so cases like "--steps at the end" stay at the end.
            cmd = [os.path.join(self.bindir, binary)] + target_args + args
            rc, stdout, stderr = run(cmd, expect_ok=False)
            after = snapshot(out)
            tag = f"[{variant} targets]"
            lines = stderr[:-1].split("\n") if stderr.endswith("\n") else stderr.split("\n")
            local = []
            if rc == 0:
                local.append(f"{tag} exit status 0, expected non-zero")
            if rc < 0:
                local.append(f"{tag} killed by signal {-rc}")
            if stderr.strip() == "":
                local.append(f"{tag} stderr is empty, expected one line naming the problem")
            elif len(lines) != 1:
                local.append(f"{tag} stderr has {len(lines)} lines, expected exactly 1")
            else:
                ok, missing = has_all(stderr, needles)
                if not ok:
                    local.append(f"{tag} stderr does not mention any of {list(missing)}")
            if preflight:
                steps = [l for l in stdout.splitlines() if l.startswith("step")]
                if steps:
                    local.append(f"{tag} stdout has {len(steps)} 'step' line(s) for a pre-flight failure")
            if after != before:
                created = sorted(set(after) - set(before))
                changed = sorted(k for k in before if k in after and after[k] != before[k])
                removed = sorted(set(before) - set(after))
                if created:
                    local.append(f"{tag} files created: {created}")
                if changed:
                    local.append(f"{tag} existing files changed: {changed}")
                if removed:
                    local.append(f"{tag} existing files removed: {removed}")
            left = tmp_leftovers([out, self.fixdir])
            if left:
                local.append(f"{tag} *.tmp.* files left: {left}")
            if os.environ.get("BADINPUT_VERBOSE"):
                print(f"     {tag} exit {rc}; stderr: {stderr!r}")
            if local:
                problems += local
                details.append(f"{tag} cmd: {' '.join(cmd)}")
                details.append(f"{tag} exit {rc}; stderr: {stderr!r}")
                if stdout:
                    details.append(f"{tag} stdout: {stdout!r}")
            shutil.rmtree(out)
        self._report(name, problems, details)

    def good(self, name, binary, args, targets, expect_names):
        """Positive control: exit 0 and the targets are written (created when absent, replaced when present)."""
        problems, details = [], []
        for variant in ("absent", "existing"):
            out = self._outdir()
            target_args, paths = [], []
            for flag in targets:
                p = os.path.join(out, flag.strip("-").replace("-", "_") + ".safetensors")
                if variant == "existing":
                    with open(p, "wb") as f:
                        f.write(SENTINEL)
                target_args += [flag, p]
                paths.append((flag, p))
            cmd = [os.path.join(self.bindir, binary)] + target_args + args
            rc, stdout, stderr = run(cmd, expect_ok=False)
            tag = f"[{variant} targets]"
            local = []
            if rc != 0:
                local.append(f"{tag} exit status {rc}, expected 0")
            if not any(l.startswith("step") for l in stdout.splitlines()):
                local.append(f"{tag} no 'step' line on stdout")
            for flag, p in paths:
                if not os.path.isfile(p):
                    local.append(f"{tag} {flag} target {p} not created")
                    continue
                with open(p, "rb") as f:
                    if f.read() == SENTINEL:
                        local.append(f"{tag} {flag} target {p} not replaced")
                        continue
                try:
                    names = set(st_load(p))
                except Exception as e:  # noqa: BLE001
                    local.append(f"{tag} {flag} target is not readable safetensors: {e}")
                    continue
                if flag == "--save" and not expect_names <= names:
                    local.append(f"{tag} --save lacks tensors {sorted(expect_names - names)[:5]}")
            left = tmp_leftovers([out, self.fixdir])
            if left:
                local.append(f"{tag} *.tmp.* files left: {left}")
            if local:
                problems += local
                details.append(f"{tag} cmd: {' '.join(cmd)}")
                details.append(f"{tag} exit {rc}; stderr: {stderr!r}")
            shutil.rmtree(out)
        self._report(name, problems, details)

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


# ----------------------------------------------------------------------------------------------------
# Cases

# Words that say what was expected, per kind of problem (any one of them must appear).
W_MISSING_FILE = ("no such", "not found", "cannot open", "can't open", "could not open", "does not exist",
                  "failed to open", "open")
W_TRUNCATED = ("truncat", "short", "end of file", "eof", "size", "bytes", "past the end", "beyond", "exceeds",
               "larger than", "out of bounds", "expected")
W_HEADER = ("header", "json", "parse", "invalid", "malformed")
W_MISSING_TENSOR = ("missing", "not found", "no tensor", "absent", "lacks", "does not contain", "required")
W_SHAPE = ("shape", "expected [", "expected (", "dimension", "dims")
W_DTYPE = ("dtype", "f32", "i64", "i32", "float", "integer", "type")
W_RANGE = ("range", "vocab", "outside", ">=", "< ", "out of", "exceed", "invalid")
W_NUMBER = ("integer", "number", "numeric", "invalid", "not a", "expected")
W_POSITIVE = ("in [1,", "positive", ">= 1", ">=1", "> 0", ">0", "at least", "must be", "out of range", "invalid")
W_NONNEG_LR = ("in [0,", "in (0,", "positive", "> 0", ">0", ">= 0", ">=0", "non-negative", "nonnegative", "negative", "must be",
               "out of range", "invalid")
W_PROB = ("in [0,", "[0, 1)", "[0,1)", "between", "< 1", "<1", "probability", "range", "must be", "invalid")
W_DIVIDE = ("divis", "divide", "multiple")
W_CHOICE = ("relu", "gelu", "one of", "choice")
W_UNKNOWN = ("unknown", "unrecognized", "unrecognised", "invalid", "unsupported", "no such")
W_NEEDS_VALUE = ("value", "argument", "missing", "requires", "expects", "needs")
W_TOO_SHORT = ("short", "bytes", "at least", "too small", "seq", "need")


def file_format_cases(s, binary, base_args, flag, good_path, stem, extra_args=()):
    """Missing file, truncated data, truncated header, header length > file, garbage JSON for one file flag."""
    missing = s.fix(f"{stem}_does_not_exist.safetensors")
    s.bad(f"{binary}: {flag} file missing", binary, base_args + list(extra_args) + [flag, missing],
          [missing, W_MISSING_FILE])
    for label, writer in (("truncated in data", write_truncated_data),
                          ("truncated in header", write_truncated_header),
                          ("header length > file size", write_header_too_long),
                          ("garbage JSON header", write_garbage_json)):
        p = s.fix(f"{stem}_{label.replace(' ', '_').replace('>', 'gt')}.safetensors")
        writer(good_path, p)
        words = W_HEADER if "JSON" in label else (W_TRUNCATED + W_HEADER if "header" in label else W_TRUNCATED)
        s.bad(f"{binary}: {flag} {label}", binary, base_args + list(extra_args) + [flag, p], [p, words])


def minimal_cases(s, rng):
    b = "fsdp-minimal"
    w = minimal_weights(rng)
    x = rng.standard_normal((MIN_SEQ, MIN_BATCH, MIN_D)).astype(np.float32)
    init, inp = s.fix("min_init.safetensors"), s.fix("min_input.safetensors")
    st_save(init, w)
    st_save(inp, {"x": x})
    targets = ("--save", "--dump-grads", "--dump-output")
    good_args = MIN_FLAGS + ["--init", init, "--input", inp]

    s.good(f"{b}: positive control (valid --init/--input)", b, good_args, targets, set(w))

    # --init file format problems (with a valid --input), and --input file format problems.
    file_format_cases(s, b, MIN_FLAGS + ["--input", inp], "--init", init, "min_init")
    file_format_cases(s, b, MIN_FLAGS + ["--init", init], "--input", inp, "min_input")

    # --init content problems.
    name = "0.linear1.bias"
    p = s.fix("min_init_missing_tensor.safetensors")
    st_save(p, without(w, name))
    s.bad(f"{b}: --init missing tensor {name}", b, MIN_FLAGS + ["--input", inp, "--init", p],
          [name, W_MISSING_TENSOR])
    name = "0.linear1.weight"
    p = s.fix("min_init_wrong_shape.safetensors")
    st_save(p, with_shape(w, name, (MIN_D, MIN_FFN)))  # transposed: [d, ffn] instead of [ffn, d]
    s.bad(f"{b}: --init tensor {name} wrong shape", b, MIN_FLAGS + ["--input", inp, "--init", p],
          [name, W_SHAPE])
    name = "0.self_attn.in_proj_weight"
    p = s.fix("min_init_wrong_dtype.safetensors")
    st_save(p, with_dtype(w, name, np.int64))
    s.bad(f"{b}: --init tensor {name} I64 instead of F32", b, MIN_FLAGS + ["--input", inp, "--init", p],
          [name, W_DTYPE])

    # --input content problems.
    X = ("re:\\bx\\b",)
    p = s.fix("min_input_wrong_shape.safetensors")
    st_save(p, {"x": np.zeros((MIN_SEQ + 1, MIN_BATCH, MIN_D), np.float32)})
    s.bad(f"{b}: --input x wrong shape", b, MIN_FLAGS + ["--init", init, "--input", p], [X, W_SHAPE])
    p = s.fix("min_input_x_wrong_width.safetensors")
    st_save(p, {"x": np.zeros((MIN_SEQ, MIN_BATCH, MIN_D // 2), np.float32)})
    s.bad(f"{b}: --input x wrong d_model", b, MIN_FLAGS + ["--init", init, "--input", p], [X, W_SHAPE])
    p = s.fix("min_input_no_x.safetensors")
    st_save(p, {"y": x})
    s.bad(f"{b}: --input missing x", b, MIN_FLAGS + ["--init", init, "--input", p], [X, W_MISSING_TENSOR])
    p = s.fix("min_input_x_i64.safetensors")
    st_save(p, {"x": np.zeros((MIN_SEQ, MIN_BATCH, MIN_D), np.int64)})
    s.bad(f"{b}: --input x I64 instead of F32", b, MIN_FLAGS + ["--init", init, "--input", p], [X, W_DTYPE])

    flag_cases(s, b, MIN_FLAGS, targets, minimal=True)


def train_cases(s, rng):
    b = "fsdp-train"
    w = gpt2_weights(rng)
    idx = rng.integers(0, TR_V, (TR_BATCH, TR_SEQ)).astype(np.int64)
    tgt = rng.integers(0, TR_V, (TR_BATCH, TR_SEQ)).astype(np.int64)
    init, inp = s.fix("tr_init.safetensors"), s.fix("tr_input.safetensors")
    st_save(init, w)
    st_save(inp, {"idx": idx, "targets": tgt})
    targets = ("--save", "--dump-grads")
    good_args = TR_FLAGS + ["--init", init, "--input", inp]

    s.good(f"{b}: positive control (valid --init/--input)", b, good_args, targets, set(w))
    # --device: a name that is no device, a CUDA ordinal that is no number or no GPU here (no GPU in CI;
    # with CUDA in the build and a GPU, cuda:999 is still out of range), each a one-line error
    s.bad(f"{b}: --device gpu", b, good_args + ["--device", "gpu"], ["--device", "gpu", "cuda:N"])
    s.bad(f"{b}: --device cuda:x", b, good_args + ["--device", "cuda:x"], ["--device", "cuda:x", "unknown device"])
    s.bad(f"{b}: --device cuda:999", b, good_args + ["--device", "cuda:999"],
          ["--device cuda:999", ("no gpu", "no cuda", "only")])
    # --comm nccl where it cannot run: the cpu device has no NCCL transport (the device's own words)
    s.bad(f"{b}: --comm nccl on the cpu device", b, good_args + ["--comm", "nccl"],
          ["--comm nccl", "cpu device has no nccl transport"])
    s.bad(f"{b}: --comm mpi", b, good_args + ["--comm", "mpi"], ["--comm", "mpi", "auto|nccl|host"])
    p = s.fix("tr_init_prefixed.safetensors")
    st_save(p, {"transformer." + k: v for k, v in w.items()})
    s.good(f"{b}: positive control (transformer. prefix)", b, TR_FLAGS + ["--init", p, "--input", inp],
           ("--save",), set())

    file_format_cases(s, b, TR_FLAGS + ["--input", inp], "--init", init, "tr_init")
    file_format_cases(s, b, TR_FLAGS + ["--init", init], "--input", inp, "tr_input")

    # --init content problems.
    name = "h.0.mlp.c_fc.bias"
    p = s.fix("tr_init_missing_tensor.safetensors")
    st_save(p, without(w, name))
    s.bad(f"{b}: --init missing tensor {name}", b, TR_FLAGS + ["--input", inp, "--init", p],
          [name, W_MISSING_TENSOR])
    name = "h.0.attn.c_attn.weight"
    p = s.fix("tr_init_wrong_shape.safetensors")
    st_save(p, with_shape(w, name, (3 * TR_D, TR_D)))  # [3C, C] instead of HF's [C, 3C]
    s.bad(f"{b}: --init tensor {name} wrong shape", b, TR_FLAGS + ["--input", inp, "--init", p],
          [name, W_SHAPE])
    name = "wte.weight"
    p = s.fix("tr_init_wrong_dtype.safetensors")
    st_save(p, with_dtype(w, name, np.int64))
    s.bad(f"{b}: --init tensor {name} I64 instead of F32", b, TR_FLAGS + ["--input", inp, "--init", p],
          [name, W_DTYPE])

    # --input content problems.
    IDX, TGT = ("re:\\bidx\\b",), ("re:\\btargets\\b",)
    p = s.fix("tr_input_idx_f32.safetensors")
    st_save(p, {"idx": idx.astype(np.float32), "targets": tgt})
    s.bad(f"{b}: --input idx F32 instead of int", b, TR_FLAGS + ["--init", init, "--input", p], [IDX, W_DTYPE])
    p = s.fix("tr_input_idx_wrong_shape.safetensors")
    st_save(p, {"idx": idx[:, : TR_SEQ // 2].copy(), "targets": tgt})
    s.bad(f"{b}: --input idx wrong shape", b, TR_FLAGS + ["--init", init, "--input", p], [IDX, W_SHAPE])
    p = s.fix("tr_input_targets_wrong_shape.safetensors")
    st_save(p, {"idx": idx, "targets": np.concatenate([tgt, tgt])})
    s.bad(f"{b}: --input targets wrong shape", b, TR_FLAGS + ["--init", init, "--input", p], [TGT, W_SHAPE])
    p = s.fix("tr_input_no_idx.safetensors")
    st_save(p, {"targets": tgt})
    s.bad(f"{b}: --input missing idx", b, TR_FLAGS + ["--init", init, "--input", p], [IDX, W_MISSING_TENSOR])
    p = s.fix("tr_input_no_targets.safetensors")
    st_save(p, {"idx": idx})
    s.bad(f"{b}: --input missing targets", b, TR_FLAGS + ["--init", init, "--input", p],
          [TGT, W_MISSING_TENSOR])

    # Token ids out of range: may be detected at the first forward, so no 'step'-line requirement.
    TOKEN = ("re:\\bidx\\b", "token", "id")
    bad_idx = idx.copy()
    bad_idx[1, 3] = TR_V
    p = s.fix("tr_input_idx_eq_vocab.safetensors")
    st_save(p, {"idx": bad_idx, "targets": tgt})
    s.bad(f"{b}: --input idx token id == vocab", b, TR_FLAGS + ["--init", init, "--input", p],
          [TOKEN, W_RANGE], preflight=False)
    bad_idx = idx.copy()
    bad_idx[0, 0] = TR_V + 1000
    p = s.fix("tr_input_idx_gt_vocab.safetensors")
    st_save(p, {"idx": bad_idx, "targets": tgt})
    s.bad(f"{b}: --input idx token id > vocab", b, TR_FLAGS + ["--init", init, "--input", p],
          [TOKEN, W_RANGE], preflight=False)
    bad_tgt = tgt.copy()
    bad_tgt[1, 2] = TR_V
    p = s.fix("tr_input_targets_eq_vocab.safetensors")
    st_save(p, {"idx": idx, "targets": bad_tgt})
    s.bad(f"{b}: --input targets token id == vocab", b, TR_FLAGS + ["--init", init, "--input", p],
          [("re:\\btargets?\\b", "token", "id"), W_RANGE], preflight=False)

    # --data problems (byte-level data needs --vocab >= 256).
    data_flags = [a if a != str(TR_V) else "256" for a in TR_FLAGS]
    missing = s.fix("does_not_exist.txt")
    s.bad(f"{b}: --data file missing", b, data_flags + ["--data", missing], [missing, W_MISSING_FILE])
    short = s.fix("short.txt")
    with open(short, "wb") as f:
        f.write(b"abc")
    s.bad(f"{b}: --data file too short for --seq {TR_SEQ}", b, data_flags + ["--data", short],
          [short, W_TOO_SHORT])
    # llm.c's uint32 token file (magic 20240801, version 7) with an id past --vocab
    wide = s.fix("wide_tokens.bin")
    toks = [1, 2, 3, 70000] + list(range(40))
    with open(wide, "wb") as f:
        f.write(struct.pack("<256i", 20240801, 7, len(toks), *([0] * 253)) + struct.pack(f"<{len(toks)}I", *toks))
    s.bad(f"{b}: --data uint32 token id 70000 >= --vocab 256", b, data_flags + ["--data", wide],
          [wide, "--vocab", "70001"])

    # --tokenizer with a bad tokenizer.json (a directory holding it, or the file itself)
    bad_tokenizers = {
        "malformed": ('{"model": {"type": "BPE", "vocab": {"a": 0', "invalid JSON"),
        "an unknown model type": ('{"model": {"type": "Unigram", "vocab": []}}', "model type is not supported"),
        "an unsupported regex": ('{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\\\p{Lu}+"}, "behavior": "Isolated"}, '
                  '"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}', "unsupported regex"),
    }
    for i, (what, (text, needle)) in enumerate(bad_tokenizers.items()):
        d = s.fix(f"bad_tokenizer_{i}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w") as f:
            f.write(text)
        s.bad(f"{b}: --tokenizer DIR, its tokenizer.json: {what}", b, data_flags + ["--tokenizer", d],
              [path, needle])
        s.bad(f"{b}: --tokenizer FILE, a tokenizer.json: {what}", b, data_flags + ["--tokenizer", path],
              [path, needle])

    flag_cases(s, b, TR_FLAGS, targets, minimal=False)


def replace_flag(flags, flag, value):
    out = list(flags)
    i = out.index(flag)
    out[i + 1] = value
    return out


def flag_cases(s, b, flags, targets, minimal):
    s.bad(f"{b}: --layers 0", b, replace_flag(flags, "--layers", "0"), ["--layers", W_POSITIVE], targets=targets)
    s.bad(f"{b}: --layers abc", b, replace_flag(flags, "--layers", "abc"), ["--layers", W_NUMBER],
          targets=targets)
    s.bad(f"{b}: --lr -1", b, flags + ["--lr", "-1"], ["--lr", W_NONNEG_LR], targets=targets)
    s.bad(f"{b}: --dropout 1.5", b, flags + ["--dropout", "1.5"], ["--dropout", W_PROB], targets=targets)
    heads3 = replace_flag(replace_flag(flags, "--d-model", "128"), "--heads", "3")
    s.bad(f"{b}: --heads 3 with --d-model 128", b, heads3, [("--heads", "--d-model"), W_DIVIDE], targets=targets)
    if minimal:
        s.bad(f"{b}: --activation tanh", b, flags + ["--activation", "tanh"], ["--activation", W_CHOICE],
              targets=targets)
    s.bad(f"{b}: --mixed-precision fp16", b, flags + ["--mixed-precision", "fp16"],
          ["--mixed-precision", ("fp32|bf16", "one of", "choice")], targets=targets)
    s.bad(f"{b}: --reduce-dtype f64", b, flags + ["--reduce-dtype", "f64"],
          ["--reduce-dtype", ("param|fp32|bf16", "one of", "choice")], targets=targets)
    s.bad(f"{b}: unknown flag --bogus", b, flags + ["--bogus"], ["--bogus", W_UNKNOWN], targets=targets)
    s.bad(f"{b}: --steps without a value (at the end)", b, flags + ["--steps"], ["--steps", W_NEEDS_VALUE],
          targets=targets)


def main():
    args = parse_args()
    bindir = os.path.abspath(args.bin)
    for exe in ("fsdp-minimal", "fsdp-train"):
        if not os.access(os.path.join(bindir, exe), os.X_OK):
            print(f"FAIL missing binary {os.path.join(bindir, exe)}")
            print("0 passed, 1 failed")
            return 1
    work = tmpdir()
    try:
        s = Suite(bindir, work)
        rng = np.random.default_rng(0)
        minimal_cases(s, rng)
        train_cases(s, rng)
        return s.finish()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
