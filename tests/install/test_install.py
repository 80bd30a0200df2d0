"""The installable library: `cmake --install` of this build into a fresh prefix gives libfsdp.a, the
public headers under include/fsdp/ (each compiles on its own with only -I<prefix>/include; no internal
header installed), fsdp.pc and the tools; examples/ (copied out of the tree, as a user would) builds
against the installed copy through pkg-config alone and trains under mpirun: the loss falls, and 2
ranks print the losses 1 rank prints."""
import math
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, parse_losses, proc, tmpdir  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 30


def internal_headers():
    """Headers under src/ that must never be installed: the engine's and backends' internals, the
    backends' own folders (their kernels), and the layers only the tools use (checkpoint files, token data,
    tracing, the planner)."""
    out = []
    for root, _, files in os.walk(os.path.join(REPO, "src")):
        rel = os.path.relpath(root, os.path.join(REPO, "src"))
        for f in files:
            if f.endswith(".h") and (f.endswith("_internal.h") or f.endswith("_impl.h") or
                                     rel.startswith(("device/cpu", "device/guard", "device/cuda", "cli", "ckpt", "data", "prof")) or
                                     f == "block_sum.h" or
                                     (rel == "fsdp" and f != "fsdp.h")):
                out.append(f)
    return out


def main():
    args = parse_args()
    build = os.path.dirname(os.path.abspath(args.bin))
    tmp = tmpdir()
    prefix = os.path.join(tmp, "prefix")
    chk = Checker("install")

    proc(["cmake", "--install", build, "--prefix", prefix])
    installed = [os.path.relpath(os.path.join(d, f), prefix) for d, _, fs in os.walk(prefix) for f in fs]
    for want in ("include/fsdp/fsdp.h", "bin/fsdp-train", "bin/fsdp-minimal", "bin/fsdp-ckpt", "bin/fsdp-plan", "bin/fsdp-run"):
        chk.true(f"installed {want}", want in installed)
    libs = [f for f in installed if f.endswith("/libfsdp.a")]
    pcs = [f for f in installed if f.endswith("/pkgconfig/fsdp.pc")]
    chk.true("installed lib*/libfsdp.a and lib*/pkgconfig/fsdp.pc", len(libs) == 1 and len(pcs) == 1, str(installed))
    if not pcs:
        chk.report()

    headers = sorted(f for f in installed if f.endswith(".h"))
    chk.true("every installed header lies under include/fsdp/", all(h.startswith("include/fsdp/") for h in headers))
    internal = internal_headers()
    leaked = [h for h in headers if os.path.basename(h) in internal]
    chk.true(f"no internal header installed (of {len(internal)} internal)", not leaked, f"installed: {leaked}")

    # each public header on its own, with nothing but the installed include directory
    broken = []
    for h in headers:
        name = h[len("include/"):]
        src = os.path.join(tmp, "alone.c")
        with open(src, "w") as f:
            f.write(f"#include <{name}>\nint main(void) {{ return 0; }}\n")
        r = proc([os.environ.get("CC", "cc"), "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                  "-fsyntax-only", "-I", os.path.join(prefix, "include"), src], expect_ok=False)
        if r.returncode:
            broken.append(f"{name}:\n{r.stderr}")
    chk.true(f"{len(headers)} installed headers each compile alone", bool(headers) and not broken, "\n".join(broken))

    pc_env = {"PKG_CONFIG_PATH": os.path.join(prefix, os.path.dirname(pcs[0]))}
    flags = proc(["pkg-config", "--cflags", "--libs", "fsdp"], env=pc_env).stdout
    chk.true("pkg-config points at the prefix, not the source or build tree",
             f"-I{prefix}/include" in flags and REPO not in flags, flags)

    # the example, copied out of the tree, built by its Makefile against the installed copy only
    ex = os.path.join(tmp, "examples")
    shutil.copytree(os.path.join(REPO, "examples"), ex)
    proc(["make", "-C", ex, "CFLAGS=-O2 -Wall -Wextra -Werror"], env=pc_env)
    # and with mpicc and the --static form of the flags
    static = proc(["pkg-config", "--cflags", "--libs", "--static", "fsdp"], env=pc_env).stdout.split()
    proc(["mpicc", "-O2", os.path.join(ex, "custom_model.c"), "-o", os.path.join(ex, "custom_model_mpicc")] + static)

    one, two = (parse_losses(mpirun(n, [os.path.join(ex, "custom_model"), str(STEPS)]).stdout) for n in (1, 2))
    chk.true(f"1 rank prints {STEPS} finite losses", len(one) == STEPS and all(map(math.isfinite, one)), str(one))
    if len(one) == STEPS:
        print(f"1 rank: loss {one[0]:.4f} -> {one[-1]:.4f}")
        chk.true("the loss falls to under a fifth of its first value", one[-1] < 0.2 * one[0])
    chk.close("2 ranks print the losses 1 rank prints", two, one, 1e-4, 1e-6)
    if chk.failures == 0:
        shutil.rmtree(tmp)  # a prefix with the tools is several MiB; kept when something failed
    chk.report()


if __name__ == "__main__":
    main()
