"""A full or too small disk stops a run at start-up, not at its save (src/cli/output_paths.c), on a
1 MiB tmpfs: with too little free space for what the saves will write (--save 4 B per parameter; a
--ckpt-dir checkpoint 4 B + 8 B per trainable parameter, twice with --save-every below --steps; summed
on one filesystem) fsdp-train and fsdp-minimal exit 2 before training with one line naming the flag,
the path, the bytes needed and free, and nothing left behind; a run that fits trains and saves there;
on a completely full filesystem the start-up probe (a real 64 KiB write, not an empty file) refuses
the output with "No space left on device". Needs root to mount the tmpfs: without it the test reports
itself skipped (exit 77), never passed."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, parse_args, proc, tmpdir  # noqa: E402

TRAIN = ["--heads", "2", "--seq", "8", "--batch", "2", "--threads", "1", "--layers", "1"]
MINIMAL = ["--heads", "2", "--seq", "4", "--batch", "2", "--threads", "1", "--layers", "1"]


def main():
    args = parse_args()
    train, minimal = os.path.join(args.bin, "fsdp-train"), os.path.join(args.bin, "fsdp-minimal")
    tmp = tmpdir()
    mnt = f"{tmp}/mnt"
    os.mkdir(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True, text=True)
    if m.returncode != 0:
        print(f"SKIP: cannot mount a 1 MiB tmpfs ({m.stderr.strip() or m.returncode}): the free-space and full-disk "
              "checks did not run")
        sys.exit(77)
    chk = Checker("disk space")
    try:
        def refused(label, cmd, flag, path, *needles):
            r = proc(cmd, expect_ok=False, timeout=60)
            lines = r.stderr.strip().splitlines()
            ok = (r.returncode == 2 and len(lines) == 1 and f"{flag} {path}" in lines[0]
                  and all(re.search(n, lines[0]) for n in needles) and "step " not in r.stdout)
            chk.true(f"{label}: exit 2 at start-up, one line naming {flag} and the path", ok,
                     f"rc {r.returncode}: {r.stderr} {r.stdout[-300:]}")
            return r

        space = r"need \d+ bytes .* only \d+ bytes are free"
        # ~0.5M parameters: --save needs ~2 MB of the 1 MiB
        refused("fsdp-train --save, too little space", [train] + TRAIN + ["--d-model", "192", "--steps", "2", "--save",
                f"{mnt}/w.safetensors"], "--save", f"{mnt}/w.safetensors", space, r"4 B x \d+ parameters")
        # ~67k parameters: one checkpoint (~800 KB) fits, two (--save-every 1 with --steps 2) do not
        refused("fsdp-train --ckpt-dir --save-every 1, too little space for two checkpoints",
                [train] + TRAIN + ["--d-model", "64", "--steps", "2", "--save-every", "1", "--ckpt-dir", f"{mnt}/ck"],
                "--ckpt-dir", f"{mnt}/ck", space, "two checkpoints")
        chk.true("... and the --ckpt-dir it created is removed", not os.path.exists(f"{mnt}/ck"), str(os.listdir(mnt)))
        # --save (~270 KB) and one checkpoint (~800 KB) each fit, together they do not
        refused("fsdp-train --save and --ckpt-dir on one filesystem: summed",
                [train] + TRAIN + ["--d-model", "64", "--steps", "2", "--ckpt-dir", f"{mnt}/ck", "--save",
                                   f"{mnt}/w.safetensors"], "--save", f"{mnt}/w.safetensors", space, "same filesystem")
        refused("fsdp-minimal --save, too little space", [minimal] + MINIMAL + ["--d-model", "256", "--ffn", "256",
                "--steps", "2", "--save", f"{mnt}/m.safetensors"], "--save", f"{mnt}/m.safetensors", space)
        r = proc([train] + TRAIN + ["--d-model", "64", "--steps", "2", "--ckpt-dir", f"{mnt}/ok"], expect_ok=False)
        chk.true("a run whose checkpoint fits trains and saves there",
                 r.returncode == 0 and os.path.exists(f"{mnt}/ok/step_00000002/DONE"), r.stderr)
        left = sorted(os.listdir(mnt))
        chk.true("nothing else was left on the filesystem", left == ["ok"], str(left))
        # completely full: the probe's real write fails (an empty probe file still fitted)
        fd = os.open(f"{mnt}/fill", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        for flag, path in (("--save", f"{mnt}/w.safetensors"), ("--ckpt-dir", f"{mnt}/ck2")):
            refused(f"a full filesystem, {flag}", [train] + TRAIN + ["--d-model", "8", "--steps", "1", flag, path],
                    flag, path, "No space left on device")
        chk.true("... and nothing is left behind", not os.path.exists(f"{mnt}/ck2")
                 and not [f for f in os.listdir(mnt) if f.startswith(".fsdp-write-probe")], str(os.listdir(mnt)))
    finally:
        subprocess.run(["umount", mnt])
    chk.report()


if __name__ == "__main__":
    main()
