"""The FSDP_* environment registry (src/core/tunables.h): every FSDP_* variable the sources read is
registered and read only through it (no getenv("FSDP_...") anywhere else), `--env` lists each one, a
misspelt variable draws one warning naming the nearest registered one (once, from rank 0 under mpirun),
and a registered one draws none."""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, proc  # noqa: E402

RUN = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--batch", "2", "--steps", "1",
       "--threads", "1"]


def main():
    args = parse_args()
    chk = Checker("env registry")
    train = os.path.join(args.bin, "fsdp-train")
    registry = open(os.path.join(ROOT, "src", "core", "tunables.h")).read()
    names = ["FSDP_" + n for n in re.findall(r"^\s*X\(([A-Z0-9_]+),", registry, re.M)]
    chk.true("the registry lists the variables", len(names) >= 12 and "FSDP_COMM_ALGO" in names, str(names))

    readers, used = [], set()
    for d, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if not f.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(d, f)
            text = open(path).read()
            if re.search(r'getenv\(\s*"FSDP_', text) and not path.endswith("tunables.c"):
                readers.append(os.path.relpath(path, ROOT))
            used.update("FSDP_" + m for m in re.findall(r"\bFSDP_ENV_([A-Z0-9_]+)", text) if m != "COUNT")
    chk.true("no source reads an FSDP_* variable but through the registry", not readers, str(readers))
    chk.true("every variable the sources ask for is registered", used and used <= set(names), str(used - set(names)))

    listed = proc([train, "--env"]).stdout
    chk.true("--env lists every registered variable", all(f"`{n}`" in listed for n in names), listed[:500])

    r = proc([train] + RUN, env={"FSDP_COMM_ALOG": "p2p", "FSDP_COMM_ALGO": "auto"})
    warnings = [x for x in r.stderr.splitlines() if "warning" in x]
    chk.true("a misspelt variable: one warning naming it and the nearest one, the run goes on",
             len(warnings) == 1 and "FSDP_COMM_ALOG" in warnings[0] and "FSDP_COMM_ALGO" in warnings[0]
             and "step 0" in r.stdout, r.stderr)
    r = mpirun(2, [train] + RUN, env={"FSDP_NO_SUCH_KNOB": "1"})
    warnings = [x for x in r.stderr.splitlines() if "FSDP_NO_SUCH_KNOB" in x]
    chk.true("under mpirun: one warning, from rank 0", len(warnings) == 1, r.stderr)
    r = proc([train] + RUN, env={"FSDP_COMM_PROGRESS": "poll"})
    chk.true("a registered variable: no warning", "warning" not in r.stderr, r.stderr)
    chk.report()


if __name__ == "__main__":
    main()
