"""Models too big for the host are refused before anything is built (src/cli/memory_check.c):
- a 100,000-layer tiny model whose activations cannot fit (--batch 4096) is refused by fsdp-train and
  fsdp-minimal within 2 s (wrapping 100,000 blocks used to take hours before anything was said): exit 2,
  one line naming the MiB per rank and what is available, and neither --ckpt-dir nor --save written;
  under mpirun with 2 ranks, one line (rank 0's) naming the 2 ranks on this host, every rank exit 2;
- the number refused is fsdp-plan's prediction for the same flags: with FSDP_TEST_MEM_AVAILABLE (the
  host's available bytes, for tests) just below the prediction the run is refused with fsdp-plan's total
  per rank; at exactly the prediction it runs (only a prediction above what is available is refused);
- --no-memory-check and --offload-dir (which the plan does not model) skip the check."""
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, proc, tmpdir  # noqa: E402

HUGE = ["--layers", "100000", "--d-model", "16", "--heads", "2", "--seq", "8", "--batch", "4096", "--threads", "1"]
TINY_TRAIN = ["--layers", "2", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--steps", "1",
              "--threads", "1"]
TINY_MINIMAL = ["--layers", "2", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq", "4", "--batch", "2",
                "--steps", "1", "--threads", "1"]
NEEDS = re.compile(r"the run needs ([0-9,]+\.[0-9]) MiB per rank .* but only ([0-9,]+\.[0-9]) MiB is available \(([^)]*)\)")


def tool_lines(stderr, tool):
    return [line for line in stderr.splitlines() if line.startswith(tool + ":")]


def refused(chk, label, r, tool, seconds, limit, needles):
    """Exit 2 within `limit` seconds, exactly one line from the tool naming every needle, nothing trained."""
    lines = tool_lines(r.stderr, tool)
    chk.true(f"{label}: exit 2 in {seconds:.2f} s (< {limit} s), one line naming {', '.join(needles)}",
             r.returncode == 2 and seconds < limit and len(lines) == 1 and all(n in lines[0] for n in needles)
             and NEEDS.search(lines[0]) is not None and "step " not in r.stdout,
             f"rc {r.returncode}, {seconds:.2f} s: {r.stderr[-1200:]}")
    return lines[0] if lines else ""


def timed(fn, *a, **kw):
    t0 = time.monotonic()
    r = fn(*a, **kw)
    return r, time.monotonic() - t0


def plan_total(bindir, sub, flags):
    """fsdp-plan's predicted total per rank (bytes) for the tool's flags."""
    out = proc([os.path.join(bindir, "fsdp-plan"), sub] + flags).stdout
    return float(re.search(r"^prediction: .* total ([0-9]+) ", out, re.M).group(1))


def main():
    args = parse_args()
    tmp = tmpdir()
    chk = Checker("big models")
    tools = {"fsdp-train": HUGE + ["--vocab", "256"], "fsdp-minimal": HUGE + ["--ffn", "32"]}
    for tool, flags in tools.items():
        ck, save = f"{tmp}/{tool}_ck", f"{tmp}/{tool}.safetensors"
        r, s = timed(proc, [os.path.join(args.bin, tool)] + flags + ["--ckpt-dir", ck, "--save", save],
                     expect_ok=False)
        refused(chk, f"{tool}: 100,000 layers that cannot fit", r, tool, s, 2.0,
                ["MiB per rank", "fsdp-plan", "x 1 rank on this host", "available", "--activation-checkpointing"])
        chk.true(f"{tool}: ... nothing written (--ckpt-dir and --save absent)",
                 not os.path.exists(ck) and not os.path.exists(save), str(os.listdir(tmp)))

    ck, save = f"{tmp}/np2_ck", f"{tmp}/np2.safetensors"
    r, s = timed(mpirun, 2, [os.path.join(args.bin, "fsdp-minimal")] + tools["fsdp-minimal"] +
                 ["--ckpt-dir", ck, "--save", save], expect_ok=False)
    refused(chk, "fsdp-minimal on 2 ranks: 100,000 layers that cannot fit", r, "fsdp-minimal", s, 30.0,
            ["MiB per rank", "x 2 ranks on this host"])
    chk.true("fsdp-minimal on 2 ranks: ... nothing written", not os.path.exists(ck) and not os.path.exists(save),
             str(os.listdir(tmp)))

    # the prediction refused is fsdp-plan's, and a run predicted to fit exactly is not refused
    for tool, sub, flags in (("fsdp-train", "train", TINY_TRAIN), ("fsdp-minimal", "minimal", TINY_MINIMAL)):
        binary = os.path.join(args.bin, tool)
        total = plan_total(args.bin, sub, flags)
        r = proc([binary] + flags, expect_ok=False, env={"FSDP_TEST_MEM_AVAILABLE": repr(total - 1.0)})
        line = refused(chk, f"{tool}: 1 byte less available than fsdp-plan predicts", r, tool, 0.0, 1.0,
                       ["FSDP_TEST_MEM_AVAILABLE"])
        m = NEEDS.search(line)
        needs = float(m.group(1).replace(",", "")) if m else -1.0
        chk.true(f"{tool}: ... the line names fsdp-plan's total per rank ({total / 1048576:.1f} MiB)",
                 abs(needs - total / 1048576) < 0.051, line)
        r = proc([binary] + flags, expect_ok=False, env={"FSDP_TEST_MEM_AVAILABLE": repr(total)})
        chk.true(f"{tool}: exactly the prediction available: runs", r.returncode == 0 and "step 0" in r.stdout,
                 f"rc {r.returncode}: {r.stderr[-600:]}")
        r = proc([binary] + flags + ["--no-memory-check"], expect_ok=False, env={"FSDP_TEST_MEM_AVAILABLE": "1"})
        chk.true(f"{tool}: --no-memory-check: runs with 1 byte available", r.returncode == 0 and "step 0" in r.stdout,
                 f"rc {r.returncode}: {r.stderr[-600:]}")
        off = f"{tmp}/{tool}_offload"
        os.makedirs(off)
        r = proc([binary] + flags + ["--offload-dir", off], expect_ok=False, env={"FSDP_TEST_MEM_AVAILABLE": "1"})
        chk.true(f"{tool}: --offload-dir (not modelled): not checked", r.returncode == 0 and "step 0" in r.stdout,
                 f"rc {r.returncode}: {r.stderr[-600:]}")
    chk.report()


if __name__ == "__main__":
    main()
