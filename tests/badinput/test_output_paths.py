"""Output paths are checked before anything is built or trained, on both tools: a path under a regular
file, under /proc, or a file flag naming a directory exits non-zero within seconds with one stderr line
naming the flag and the path, and nothing printed on stdout (no banner, no layout, no step). Nothing is
left behind: no probe file, no --ckpt-dir created by a run that then refused to start, an existing --save
file untouched. Under mpirun every rank stops and the message appears once. A good --ckpt-dir that does
not exist yet is created and used. (Tests run as root, so read-only modes would not stop anything.)"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, run, tmpdir  # noqa: E402

TOOLS = {  # tool: (small run, {flag: "dir" | "file"})
    "fsdp-train": (["--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "16", "--batch", "2", "--steps", "2",
                    "--threads", "1"],
                   {"--ckpt-dir": "dir", "--offload-dir": "dir", "--save": "file", "--dump-grads": "file",
                    "--log-jsonl": "file", "--trace": "file", "--plot": "file"}),
    "fsdp-minimal": (["--layers", "1", "--d-model", "32", "--heads", "2", "--ffn", "64", "--seq", "4", "--global-batch", "2",
                      "--steps", "2", "--threads", "1", "--summary"],
                     {"--ckpt-dir": "dir", "--offload-dir": "dir", "--save": "file", "--dump-grads": "file",
                      "--dump-output": "file"}),
}


def all_files(root):
    return sorted(os.path.join(d, f) for d, dirs, files in os.walk(root) for f in files + dirs)


def refused(chk, label, cmd, flag, path, ranks=1):
    """The run must stop at the check: non-zero, quick, one line naming flag and path, nothing on stdout."""
    t0 = time.time()
    if ranks == 1:
        rc, out, err = run(cmd, expect_ok=False, timeout=120)
    else:
        r = mpirun(ranks, cmd, expect_ok=False, timeout=120)
        rc, out, err = r.returncode, r.stdout, r.stderr
    dt = time.time() - t0
    tool = os.path.basename(cmd[0])
    ours = [x for x in err.splitlines() if x.startswith(tool + ":") and not x.startswith(tool + ": note:")]
    lines = err.strip().splitlines() if ranks == 1 else ours  # mpirun adds its own report to stderr
    ok = (rc != 0 and dt < 20 and len(lines) == 1 and len(ours) == 1 and flag in ours[0] and path in ours[0]
          and not out.strip())
    chk.true(f"{label}: refused at start-up ({dt:.1f} s): {ours[0] if ours else '(no message)'}", ok,
             f"rc {rc}\nstdout: {out[:500]}\nstderr: {err[:1000]}")


def main():
    args = parse_args()
    chk = Checker("output paths")
    tmp = tmpdir()
    regular = os.path.join(tmp, "regular-file")
    open(regular, "w").write("not a directory\n")
    for tool, (base, flags) in TOOLS.items():
        cmd0 = [os.path.join(args.bin, tool)] + base
        for flag, kind in flags.items():
            extra = ["--save-every", "1"] if flag == "--ckpt-dir" else []
            leaf = "sub" if kind == "dir" else "out.bin"
            bad = {"under a regular file": os.path.join(regular, "sub", leaf),
                   "under /proc": os.path.join("/proc", "fsdp-no-such-dir", leaf) if kind == "dir"
                   else os.path.join("/proc", "fsdp-test-" + leaf)}
            if kind == "file":
                bad["naming a directory"] = tmp
            else:
                bad["naming a regular file"] = regular
            for what, path in bad.items():
                refused(chk, f"{tool} {flag} {what}", cmd0 + [flag, path] + extra, flag, path)

        # an existing --save target is not touched when another output is refused
        save = os.path.join(tmp, f"{tool}-existing.safetensors")
        open(save, "wb").write(b"keep me")
        other = "--dump-grads"
        bad = os.path.join(regular, "x", "grads.safetensors")
        refused(chk, f"{tool}: --save exists, {other} bad", cmd0 + ["--save", save, other, bad], other, bad)
        chk.true(f"{tool}: the existing --save file is untouched", open(save, "rb").read() == b"keep me")
        # a --ckpt-dir created by the check is removed again when another output is refused
        ckpt = os.path.join(tmp, f"{tool}-new-ckpt")
        refused(chk, f"{tool}: new --ckpt-dir, --save bad", cmd0 + ["--ckpt-dir", ckpt, "--save-every", "1", "--save",
                                                                    bad], "--save", bad)
        chk.true(f"{tool}: the --ckpt-dir created by the refused run is gone", not os.path.exists(ckpt))
        # a good run: the missing --ckpt-dir is created and used; no probe file anywhere
        _, out, _ = run(cmd0 + ["--ckpt-dir", ckpt, "--save-every", "1", "--save", save])
        chk.true(f"{tool}: a missing --ckpt-dir is created and holds the checkpoints",
                 sorted(f for f in os.listdir(ckpt) if f != ".lock") == ["step_00000001", "step_00000002"]
                 and "step 1" in out,
                 str(os.listdir(ckpt)))
        chk.true(f"{tool}: --save written by the good run", open(save, "rb").read(7) != b"keep me")
        # two ranks: every rank stops, one message
        bad_dir = os.path.join(regular, "ckpt")
        refused(chk, f"{tool} on 2 ranks: bad --ckpt-dir", cmd0 + ["--ckpt-dir", bad_dir, "--save-every", "1"],
                "--ckpt-dir", bad_dir, ranks=2)
        missing = os.path.join(tmp, "no-such-offload-dir")
        refused(chk, f"{tool} on 2 ranks: missing --offload-dir (checked on every rank)",
                cmd0 + ["--offload-dir", missing], "--offload-dir", missing, ranks=2)
    probes = [f for f in all_files(tmp) if ".fsdp-write-probe" in f]
    chk.true("no probe file left behind", not probes, str(probes))
    chk.report()


if __name__ == "__main__":
    main()
