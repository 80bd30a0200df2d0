"""README.md, docs/*.md and the tools' --help agree:
- docs/flags.md is exactly what scripts/gen-flags-doc.sh prints for the built tools (fsdp-train, fsdp-minimal,
  fsdp-plan, fsdp-ckpt and each of its subcommands): a flag added, removed, renamed or re-described without
  rerunning `scripts/gen-flags-doc.sh build/bin > docs/flags.md` fails here;
- every `--flag` that README.md or docs/*.md name is a flag of one of those tools (the flag lines of their
  --help), or on the allow-list below of other programs' flags (mpirun, srun, cmake, ctest, pkg-config, ...),
  each with the reason it is there. The scan itself is checked on a text naming a flag no tool has."""
import difflib
import glob
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args  # noqa: E402

SCRIPT = os.path.join(ROOT, "scripts", "gen-flags-doc.sh")
# the tools the script documents, from its TOOLS list ("TOOL [SUBCOMMAND]" a line): one list to extend
TOOLS = [line.split() for line in re.search(r"^TOOLS='(.*?)'", open(SCRIPT).read(), re.M | re.S).group(1).splitlines()]

# Flags of other programs that the documents may name: flag -> whose
ALLOWED = {
    "--clip-grad": "the misspelling README shows being refused (did you mean --clip-grad-norm?)",
    # Open MPI's mpirun
    "--allow-run-as-root": "mpirun", "--oversubscribe": "mpirun", "--bind-to": "mpirun", "--map-by": "mpirun",
    "--mca": "mpirun", "--report-bindings": "mpirun", "--hostfile": "mpirun", "--host": "mpirun",
    # Slurm's srun / sbatch
    "--ntasks": "srun", "--ntasks-per-node": "srun", "--nodes": "srun", "--cpus-per-task": "srun",
    "--cpu-bind": "srun", "--mpi": "srun",
    # cmake, ctest, pkg-config
    "--build": "cmake", "--install": "cmake", "--prefix": "cmake", "--target": "cmake",
    "--output-on-failure": "ctest", "--cflags": "pkg-config", "--libs": "pkg-config",
    # the PyTorch reference of the benchmarks (docs/cuda.md names how gpu-check runs it)
    "--bf16": "bench/torch_gpt.py", "--attention": "bench/torch_gpt.py",
    # every tool's
    "--help": "every tool (cli_parse)",
    # named on purpose although no tool has them
    "--buffer-dtype": "docs/decisions.md: a flag deliberately not shipped",
    "--int": "fuzz/fuzz_cli_flags.c: the fuzz harness's own flag table",
}

FLAG_LINE = re.compile(r"^  (--[a-z][a-z0-9-]*)", re.M)  # a flag's line in --help
NAMED = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")      # a flag named in prose or in a command


def tool_help(bindir, tool):
    r = subprocess.run([os.path.join(bindir, tool[0])] + tool[1:] + ["--help"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"}, timeout=60)
    return r.returncode, r.stdout


def unknown_flags(paths_texts, known):
    """(path, line number, flag) of every flag named in the texts that is neither known nor allowed."""
    bad = []
    for path, text in paths_texts:
        for n, line in enumerate(text.splitlines(), 1):
            bad += [(path, n, m.group(1)) for m in NAMED.finditer(line)
                    if m.group(1) not in known and m.group(1) not in ALLOWED]
    return bad


def main():
    args = parse_args()
    chk = Checker("flags doc")
    known, helps_ok = set(), []
    for tool in TOOLS:
        rc, out = tool_help(args.bin, tool)
        helps_ok.append(rc == 0 and out.startswith("usage:"))
        known |= set(FLAG_LINE.findall(out))
    chk.true("every tool and fsdp-ckpt subcommand prints its --help (exit 0, a usage line)", all(helps_ok),
             str([" ".join(t) for t, ok in zip(TOOLS, helps_ok) if not ok]))
    chk.true("the tools' --help name flags (the scan below has something to hold the documents against)",
             {"--eval-only", "--max-new-tokens", "--world-size", "--dtype", "--ckpt-dir"} <= known,
             str(sorted(known)))

    chk.true("the script documents fsdp-train, fsdp-minimal, fsdp-plan, fsdp-ckpt and its 5 subcommands",
             len(TOOLS) >= 9 and {"fsdp-train", "fsdp-minimal", "fsdp-plan", "fsdp-ckpt"} <= {t[0] for t in TOOLS},
             str(TOOLS))
    r = subprocess.run([SCRIPT, args.bin], capture_output=True,
                       text=True, timeout=120)
    doc_path = os.path.join(ROOT, "docs", "flags.md")
    doc = open(doc_path).read() if os.path.exists(doc_path) else ""
    diff = list(difflib.unified_diff(doc.splitlines(), r.stdout.splitlines(), "docs/flags.md",
                                     "scripts/gen-flags-doc.sh " + args.bin, lineterm="", n=1))
    chk.true("docs/flags.md == scripts/gen-flags-doc.sh of the built tools", r.returncode == 0 and not diff
             and r.stdout.count("\n## `") == len(TOOLS),
             f"rc {r.returncode} {r.stderr.strip()}; regenerate with `scripts/gen-flags-doc.sh build/bin > "
             "docs/flags.md`:\n" + "\n".join(diff[:60]))

    docs = [os.path.join(ROOT, "README.md")] + sorted(p for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
                                                      if os.path.basename(p) != "flags.md")
    texts = [(os.path.relpath(p, ROOT), open(p, encoding="utf-8").read()) for p in docs]
    probe = unknown_flags([("probe", "run `fsdp-train --no-such-flag 3` with --eval-only, under mpirun "
                                     "--oversubscribe; an em dash -- is not a flag")], known)
    chk.true("the scan reports a flag no tool has, and only that one", probe == [("probe", 1, "--no-such-flag")],
             str(probe))
    bad = unknown_flags(texts, known)
    chk.true(f"README.md and docs/*.md ({len(texts)} files) name only flags the tools have (or allowed ones)",
             not bad, "\n".join(f"{p}:{n}: {f}" for p, n, f in bad))
    chk.report()


if __name__ == "__main__":
    main()
