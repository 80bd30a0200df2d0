"""--config files are text (src/cli/cli_args.c): a NUL byte or another control byte is a one-line error
naming the file and the line (not the silent loss of the rest of the file), /dev/zero, a FIFO and a
directory are one-line errors naming the file (not an empty config), a file over 1 MiB is refused; both
tools, exit 2, before anything is built. A good file still works, with tabs and CRLF line ends."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc, tmpdir  # noqa: E402

MODEL = {"fsdp-train": "layers 1\nd-model 16\nheads 2\nseq 8\nbatch 2\nthreads 1\n",
         "fsdp-minimal": "layers 1\nd-model 16\nheads 2\nffn 32\nseq 4\nbatch 2\nthreads 1\n"}


def main():
    args = parse_args()
    tmp = tmpdir()
    chk = Checker("--config text")
    fifo = f"{tmp}/fifo"
    os.mkfifo(fifo)
    for tool in ("fsdp-train", "fsdp-minimal"):
        binary = os.path.join(args.bin, tool)
        good = f"{tmp}/{tool}.cfg"
        open(good, "w").write(MODEL[tool].replace("\n", "\r\n").replace(" ", "\t", 1) + "steps 1\n")
        r = proc([binary, "--config", good], expect_ok=False, timeout=60)
        chk.true(f"{tool}: a text config (tabs, CRLF) trains", r.returncode == 0, r.stderr)

        def refused(label, path, *needles):
            r = proc([binary, "--config", path, "--steps", "1"], expect_ok=False, timeout=30)
            lines = r.stderr.strip().splitlines()
            chk.true(f"{tool}: {label}: exit 2, one line naming the file{' and ' if needles else ''}"
                     f"{', '.join(needles)}",
                     r.returncode == 2 and len(lines) == 1 and path in lines[0] and all(n in lines[0] for n in needles)
                     and not r.stdout, f"rc {r.returncode}: {r.stderr}{r.stdout[:300]}")

        # a NUL on line 3: before the fix the line was cut there and lines 4.. silently dropped
        nul = f"{tmp}/{tool}-nul.cfg"
        text = MODEL[tool].splitlines()
        with open(nul, "wb") as f:
            f.write(("\n".join(text[:2]) + "\n").encode() + text[2].encode() + b"\0 # rest\n" +
                    ("\n".join(text[3:]) + "\nsteps 100000\n").encode())
        refused("a NUL byte", nul, "line 3", "NUL")
        ctl = f"{tmp}/{tool}-ctl.cfg"
        open(ctl, "wb").write(MODEL[tool].encode() + b"steps 1\x01\n")
        refused("a control byte", ctl, f"line {len(text) + 1}", "0x01")
        binary_file = f"{tmp}/{tool}-binary.cfg"
        open(binary_file, "wb").write(bytes(range(256)) * 4)
        refused("a binary file", binary_file, "line 1")
        refused("/dev/zero", "/dev/zero", "not a regular file")
        refused("a FIFO (no writer: must not wait)", fifo, "not a regular file")
        refused("a directory", tmp, "directory")
        big = f"{tmp}/{tool}-big.cfg"
        with open(big, "w") as f:
            f.write(("# " + "x" * 1000 + "\n") * 1100)
        refused("a 1.1 MB file", big, "1 MiB")
    chk.report()


if __name__ == "__main__":
    main()
