"""fsdp-ckpt never writes into its own source, nor where --resume would read what it wrote
(ckpt/ckpt_output.h): consolidate, convert and reshard refuse, with one line naming the subcommand,
the output and the source, exit 2 and nothing written (every file of the checkpoint keeps its bytes),
an output that is the source, lies inside it (its shard, index or DONE, however spelled: "..",
symlinks, relative paths), holds it (an ancestor), lies inside another checkpoint, is named DONE or
step_NNNNNNNN, or (reshard, convert) is a --ckpt-dir root or a non-empty directory; an empty directory
is accepted. verify and info name a missing path ("no such directory") and a regular file ("not a
directory"). reshard to 3000 ranks under `ulimit -n 64` works (the output files are written in
batches, the source's re-opened as needed) and equals the original once consolidated, bit for bit;
with too few descriptors it refuses in one line; a failing reshard leaves no output directory."""
import hashlib
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
from fsdp_testlib import SANITIZER_EXIT, Checker, parse_args, proc, tmpdir  # noqa: E402

MODEL = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq", "8", "--batch", "2", "--threads", "1"]


def digest(root):
    """{relative path: sha256} of every file under root (the checkpoint as it is on disk)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def limited(cmd, nofile):
    """A command run under RLIMIT_NOFILE nofile (soft and hard, so the tool cannot raise it), as proc()
    with expect_ok=False (a sanitizer report still fails the test)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
    if r.returncode == SANITIZER_EXIT:
        print(f"FAIL: sanitizer report: {' '.join(cmd)}\n{r.stderr}", file=sys.stderr)
        sys.exit(1)
    return r


def main():
    args = parse_args()
    bin_dir = os.path.abspath(args.bin)
    train, tool = os.path.join(bin_dir, "fsdp-train"), os.path.join(bin_dir, "fsdp-ckpt")
    tmp = tmpdir()
    chk = Checker("fsdp-ckpt outputs")
    os.chdir(tmp)  # relative spellings below
    proc([train] + MODEL + ["--steps", "2", "--ckpt-dir", "ck"])
    src = "ck/step_00000002"
    proc([train] + MODEL + ["--steps", "1", "--ckpt-dir", "other"])  # another checkpoint, another root
    os.symlink(src, "link")  # link -> the source
    before = digest("ck")

    def refused(label, cmd, out, expect=""):
        r = proc([tool, cmd, src, out] + (["--world-size", "2"] if cmd == "reshard" else [])
                 + (["--dtype", "bf16"] if cmd == "convert" else []), expect_ok=False)
        lines = r.stderr.strip().splitlines()
        ok = (r.returncode == 2 and len(lines) == 1 and f"fsdp-ckpt {cmd}:" in lines[0] and out in lines[0]
              and src in lines[0] and expect in lines[0] and "nothing written" in lines[0])
        chk.true(f"{cmd} {out}: {label}: exit 2, one line naming both paths", ok, f"rc {r.returncode}: {r.stderr}")
        chk.true(f"{cmd} {out}: the checkpoint is unchanged", digest("ck") == before,
                 f"{sorted(digest('ck'))} vs {sorted(before)}")

    for out in (f"{src}/shard_00000.safetensors", f"{src}/index.safetensors", f"{src}/DONE",
                f"{src}/../step_00000002/index.safetensors", f"./{src}//DONE", "link/shard_00000.safetensors"):
        refused("inside the source", "consolidate", out, "inside the source")
    refused("the source itself", "consolidate", src, "the source checkpoint itself")
    refused("an ancestor of the source", "consolidate", "ck", "holds the source")
    refused("DONE in a --ckpt-dir root", "consolidate", "ck/DONE", "named DONE")
    refused("a step_ name", "consolidate", "other/step_00000009", "step_NNNNNNNN")
    refused("inside another checkpoint", "consolidate", "other/step_00000001/model.safetensors",
            "inside the checkpoint")
    for cmd in ("convert", "reshard"):
        refused("the source itself", cmd, src, "the source checkpoint itself")
        refused("the source through a symlink", cmd, "link", "the source checkpoint itself")
        refused("inside the source", cmd, f"{src}/sub", "inside the source")
        refused("the --ckpt-dir root holding the source", cmd, "ck", "holds the source")
        refused("a step_ name", cmd, "other/step_00000005", "step_NNNNNNNN")
        refused("another --ckpt-dir root", cmd, "other", "checkpoint root")
        refused("inside another checkpoint", cmd, "other/step_00000001/x", "inside the checkpoint")
    os.mkdir("full")
    open("full/keep.txt", "w").write("mine\n")
    refused("a non-empty directory", "reshard", "full", "not empty")
    chk.true("the non-empty directory keeps its file", os.listdir("full") == ["keep.txt"], str(os.listdir("full")))
    os.mkdir("empty")
    r = proc([tool, "reshard", src, "empty", "--world-size", "2"], expect_ok=False)
    v = proc([tool, "verify", "empty"], expect_ok=False)
    chk.true("reshard into an empty directory: written and verified", r.returncode == 0 and v.returncode == 0,
             r.stderr + v.stderr)
    r = proc([tool, "consolidate", src, "ck/full.safetensors"], expect_ok=False)
    chk.true("consolidate to a new file beside the checkpoints of a root: allowed", r.returncode == 0, r.stderr)

    # verify / info of what is not a checkpoint directory
    open("plain", "w").write("x")
    for cmd in ("verify", "info"):
        r = proc([tool, cmd, f"{tmp}/nonexistent"], expect_ok=False)
        chk.true(f"{cmd} of a missing path: 'no such', not 'no completion marker'",
                 r.returncode != 0 and "no such" in r.stderr and "DONE" not in r.stderr
                 and len(r.stderr.strip().splitlines()) == 1, r.stderr)
    for cmd in ("verify", "consolidate"):
        r = proc([tool, cmd, "plain"] + (["x.safetensors"] if cmd == "consolidate" else []), expect_ok=False)
        chk.true(f"{cmd} of a regular file: 'not a directory'",
                 r.returncode != 0 and "not a directory" in r.stderr and "DONE" not in r.stderr, r.stderr)

    # reshard to many ranks with few descriptors: batches; the result consolidates to the original
    r = limited([tool, "reshard", src, "wide", "--world-size", "3000"], 64)
    n = len([f for f in os.listdir("wide") if f.startswith("shard_")]) if os.path.isdir("wide") else 0
    chk.true("reshard --world-size 3000 under ulimit -n 64: exit 0, 3000 shard files", r.returncode == 0 and n == 3000,
             f"rc {r.returncode}, {n} shards: {r.stderr[-500:]}")
    v = limited([tool, "verify", "wide"], 64)
    chk.true("the 3000-rank checkpoint verifies", v.returncode == 0, v.stderr[-500:])
    a = proc([tool, "consolidate", src, "a.safetensors"], expect_ok=False)
    b = limited([tool, "consolidate", "wide", "b.safetensors"], 64)
    same = a.returncode == 0 and b.returncode == 0 and open("a.safetensors", "rb").read() == open("b.safetensors",
                                                                                                     "rb").read()
    chk.true("consolidated, the 3000-rank checkpoint equals the original bit for bit", same, a.stderr + b.stderr)
    r = limited([tool, "reshard", src, "narrow", "--world-size", "30"], 8)
    chk.true("too few descriptors (ulimit -n 8): exit 2, one line naming RLIMIT_NOFILE, no output left",
             r.returncode == 2 and "RLIMIT_NOFILE" in r.stderr and len(r.stderr.strip().splitlines()) == 1
             and not [f for f in os.listdir(".") if f.startswith("narrow")], r.stderr)
    # a failure part-way (the source's shard is unreadable): nothing left behind
    os.makedirs("broken")
    proc(["cp", "-r", src, "broken/c"])
    with open("broken/c/shard_00000.safetensors", "r+b") as f:
        f.truncate(100)
    r = proc([tool, "reshard", "broken/c", "out_broken", "--world-size", "2"], expect_ok=False)
    chk.true("a reshard that fails part-way: exit 1, no output directory (nor its staging one) left",
             r.returncode == 1 and not [f for f in os.listdir(".") if f.startswith("out_broken")], r.stderr)
    chk.report()


if __name__ == "__main__":
    main()
