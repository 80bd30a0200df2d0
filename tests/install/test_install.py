"""The installable library: `cmake --install` of this build into a fresh prefix gives libfsdp.a, the
public headers under include/fsdp/ (each compiles on its own with only -I<prefix>/include; no internal
header installed), fsdp.pc and the tools; examples/ (copied out of the tree, as a user would) builds
against the installed copy through pkg-config alone and trains under mpirun: the loss falls, and 2
ranks print the losses 1 rank prints."""
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, parse_args, tmpdir  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMP_NUM_THREADS": "1"}
STEPS = 30


def sh(cmd, env=None, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    if r.returncode:
        print(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r


def internal_headers():
    """Headers under src/ that must never be installed: the engine's and backends' internals, the
    CPU kernels' private helpers, and the layers only the tools use (checkpoint files, token data,
    tracing, the planner)."""
    out = []
    for root, _, files in os.walk(os.path.join(REPO, "src")):
        rel = os.path.relpath(root, os.path.join(REPO, "src"))
        for f in files:
            if f.endswith(".h") and (f.endswith("_internal.h") or f.endswith("_impl.h") or
                                     rel.startswith(("kernels/cpu", "cli", "ckpt", "data", "prof")) or
                                     (rel == "fsdp" and f != "fsdp.h")):
                out.append(f)
    return out


def losses(stdout):
    return [float(line.split()[3]) for line in stdout.splitlines() if line.startswith("step ")]


def main():
    args = parse_args()
    build = os.path.dirname(os.path.abspath(args.bin))
    tmp = tmpdir()
    prefix = os.path.join(tmp, "prefix")
    chk = Checker("install")

    r = sh(["cmake", "--install", build, "--prefix", prefix])
    chk.close("cmake --install exits 0", [r.returncode], [0], 0, 0)
    if r.returncode:
        chk.report()
    installed = [os.path.relpath(os.path.join(d, f), prefix) for d, _, fs in os.walk(prefix) for f in fs]
    for want in ("include/fsdp/fsdp.h", "bin/fsdp-train", "bin/fsdp-minimal", "bin/fsdp-ckpt", "bin/fsdp-plan"):
        chk.close(f"installed {want}", [int(want in installed)], [1], 0, 0)
    libs = [f for f in installed if f.endswith("/libfsdp.a")]
    pcs = [f for f in installed if f.endswith("/pkgconfig/fsdp.pc")]
    chk.close("installed lib*/libfsdp.a and lib*/pkgconfig/fsdp.pc", [len(libs), len(pcs)], [1, 1], 0, 0)
    if not pcs:
        chk.report()

    headers = sorted(f for f in installed if f.endswith(".h"))
    chk.close("every installed header lies under include/fsdp/",
              [sum(not h.startswith("include/fsdp/") for h in headers)], [0], 0, 0)
    leaked = [h for h in headers if os.path.basename(h) in internal_headers()]
    if leaked:
        print("internal headers installed:", leaked)
    chk.close("no internal header installed (of %d internal)" % len(internal_headers()), [len(leaked)], [0], 0, 0)

    # each public header on its own, with nothing but the installed include directory
    cc = os.environ.get("CC", "cc")
    alone = []
    for h in headers:
        name = h[len("include/"):]
        r = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fsyntax-only",
                            "-I", os.path.join(prefix, "include"), "-x", "c", "-"],
                           input=f"#include <{name}>\nint main(void) {{ return 0; }}\n", capture_output=True, text=True)
        if r.returncode:
            print(f"{name} does not compile alone:\n{r.stderr}")
        alone.append(r.returncode)
    chk.close(f"{len(headers)} installed headers each compile alone", alone, [0] * len(alone), 0, 0)

    pc_env = {"PKG_CONFIG_PATH": os.path.join(prefix, os.path.dirname(pcs[0]))}
    r = sh(["pkg-config", "--cflags", "--libs", "fsdp"], env=pc_env)
    flags = r.stdout
    chk.close("pkg-config --cflags --libs fsdp", [r.returncode], [0], 0, 0)
    chk.close("pkg-config points at the prefix, not the source or build tree",
              [int(f"-I{prefix}/include" in flags), int(REPO in flags)], [1, 0], 0, 0)

    # the example, copied out of the tree, built by its Makefile against the installed copy only
    ex = os.path.join(tmp, "examples")
    shutil.copytree(os.path.join(REPO, "examples"), ex)
    r = sh(["make", "-C", ex, "CFLAGS=-O2 -Wall -Wextra -Werror"], env=pc_env)
    chk.close("examples/Makefile builds custom_model through pkg-config", [r.returncode], [0], 0, 0)
    if r.returncode:
        chk.report()
    # and with mpicc and the --static form of the flags
    static = sh(["pkg-config", "--cflags", "--libs", "--static", "fsdp"], env=pc_env).stdout.split()
    r = sh(["mpicc", "-O2", os.path.join(ex, "custom_model.c"), "-o", os.path.join(ex, "custom_model_mpicc")] + static)
    chk.close("mpicc with pkg-config --static flags builds custom_model", [r.returncode], [0], 0, 0)

    runs = {}
    for n in (1, 2):
        r = sh(["mpirun", "-np", str(n), os.path.join(ex, "custom_model"), str(STEPS)], env=MPI_ENV)
        runs[n] = losses(r.stdout)
        ok = r.returncode == 0 and len(runs[n]) == STEPS and all(math.isfinite(v) for v in runs[n])
        if not ok:
            print(r.stdout, r.stderr)
        chk.close(f"{n} rank(s): exit 0 and {STEPS} finite losses", [int(ok)], [1], 0, 0)
    one, two = runs[1], runs[2]
    if len(one) == STEPS:
        print(f"1 rank: loss {one[0]:.4f} -> {one[-1]:.4f}")
        chk.close("the loss falls to under a fifth of its first value", [int(one[-1] < 0.2 * one[0])], [1], 0, 0)
    if len(one) == len(two) == STEPS:
        chk.close("2 ranks print the losses 1 rank prints", two, one, 1e-4, 1e-6)
    if chk.failures == 0:
        shutil.rmtree(tmp)  # a prefix with the tools is several MiB; kept when something failed
    chk.report()


if __name__ == "__main__":
    main()
