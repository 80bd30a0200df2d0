"""fsdp-plan's prediction (`fsdp-plan train` with the run's own flags) against measured runs of fsdp-train: per-rank peak memory by category, the
total, and the bytes sent per step, within 10%, across world sizes, strategies, wrap policies,
prefetch settings, gradient accumulation, activation checkpointing, bf16 mixed precision,
--deterministic, frozen parameters (--freeze: each unit's trainable and frozen segments padded and
sharded on their own; gradients, reductions and optimizer state for the trainable one only) and LoRA
(--lora-*: adapters in each block's unit, the base frozen, each adapter's own activations whatever the
checkpointing, and its GEMMs' packing scratch under bf16).
Then the accounting against the OS on the GPT benchmark model (6 layers, d_model 512, seq 256) at 1, 2
and 4 ranks: the accounted peak within 10% of the rank's data PSS (anonymous + proportional shared
memory, which is what the rank holds; peak RSS also counts the peers' shared pages it maps and library
code, so it is printed but not the yardstick). And both on a model with GPT-2's vocabulary (vocab 50257,
2 layers, d_model 256, seq 128) at 1 and 2 ranks, fp32 and bf16, where the LM head dominates: the root
unit's gradient through the shared-memory collectives' window, the bf16 GEMM's packed operands (K =
vocabulary) and the heap's reuse of the root gradient's block each step, which the accounting once
missed by 18% at 124M shapes. A missing number (an unprinted key) fails: close() rejects None.
The Llama family (--arch llama: grouped-query attention, untied head, SwiGLU, RMSNorm) on 1 and 2 ranks,
fp32 and bf16, with activation checkpointing, LoRA, --freeze, tied embeddings with biases, HYBRID_SHARD:
the same categories within the same tolerances; exactly: the parameter count, the activations in fp32,
and LoRA's gradient shards; fsdp-plan train --init FILE (the shape from the file's tensors, as
fsdp-train takes it) and --init DIR (a Hugging Face directory's config.json) = the flags' plan; fsdp-train's up-front memory check refuses a Llama run that
fsdp-plan predicts will not fit."""
import fnmatch
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from fsdp_testlib import Checker, mpirun, parse_args, proc, tmpdir  # noqa: E402

# Under the sanitizers (make test-asan sets SANITIZER_REPORTS_DIR) ASan's shadow memory, redzones and
# quarantine are part of what the OS sees, so the accounting-vs-OS checks only run in the plain build;
# plan == accounted is checked in both.
# Under the guard device (FSDP_DEVICE=guard) a freed block goes back to the OS at once (MADV_DONTNEED)
# where glibc keeps freed memory, so the data PSS read at the end of a run is below the peak by what was
# freed after it (~48 MB at GPT-2's vocabulary, at 1 and 2 ranks): those checks run on the CPU device.
SANITIZED = bool(os.environ.get("SANITIZER_REPORTS_DIR"))
GUARD = os.environ.get("FSDP_DEVICE") == "guard"
if SANITIZED:
    print("sanitized build: the accounted-vs-data-PSS checks are skipped (ASan's own memory is in the PSS)")
if GUARD:
    print("guard device: the accounted-vs-data-PSS checks are skipped (freed blocks leave the PSS before it is read)")
OS_CHECKS = not SANITIZED and not GUARD
MODEL = ["--layers", "3", "--d-model", "64", "--heads", "4", "--seq", "32", "--vocab", "256"]
KEYS = ["parameters", "gradients", "optimizer", "unsharded_peak", "activations_peak", "communication", "workspace",
        "total", "bytes_sent_per_step"]
CASES = [  # world, extra flags
    (1, []), (2, []), (4, []), (2, ["--strategy", "shard_grad_op"]), (2, ["--strategy", "no_shard"]),
    (4, ["--strategy", "hybrid_shard", "--shard-group-size", "2"]), (2, ["--strategy", "ddp"]),
    (2, ["--activation-checkpointing"]), (2, ["--grad-accum", "2"]), (2, ["--backward-prefetch", "none"]),
    (3, ["--wrap", "none"]), (2, ["--backward-prefetch", "post", "--forward-prefetch"]),
    (2, ["--backward-prefetch", "none", "--forward-prefetch"]), (2, ["--limit-all-gathers", "1"]),
    (2, ["--mixed-precision", "bf16"]), (2, ["--mixed-precision", "bf16", "--reduce-dtype", "fp32"]),
    (2, ["--strategy", "ddp", "--mixed-precision", "bf16"]),
    (4, ["--strategy", "hybrid_shard", "--shard-group-size", "2", "--mixed-precision", "bf16"]),
    (1, ["--mixed-precision", "bf16"]),
]


# --freeze cases (world, extra flags): non-uniform blocks (one block frozen), parameters frozen across
# units (every unit then has two segments), every block frozen (no block gradients, no staging), and
# the strategies, bf16 (all blocks' weight-gradient GEMMs skipped: less bf16 packing workspace), a
# repeated --freeze, the guard device (all-gathers of each segment through the window), no wrapping
FREEZE_CASES = [
    (2, ["--freeze", "h.0.*"]), (2, ["--freeze", "*.bias,h.1.ln_*,wte.weight"]), (2, ["--freeze", "h.*"]),
    (2, ["--freeze", "h.0.*", "--freeze", "wte.weight", "--strategy", "no_shard"]),
    (4, ["--freeze", "h.1.*,wpe.weight", "--strategy", "hybrid_shard", "--shard-group-size", "2"]),
    (2, ["--freeze", "h.*", "--mixed-precision", "bf16"]),
    (2, ["--freeze", "*.bias,wte.weight", "--strategy", "shard_grad_op", "--mixed-precision", "bf16"]),
    (2, ["--freeze", "h.0.*,wpe.weight", "--device", "guard"]),
    (3, ["--freeze", "h.2.*,ln_f.*", "--wrap", "none"]),
]

# LoRA cases (world, extra flags): adapters A (R, in), B (out, R) on the targeted projections of every
# block, the rest frozen; their activations u, du (N, R) and with dropout xd, dx (N, in) are kept per
# adapter in every block even under activation checkpointing; under bf16 their products (the dA of
# mlp.c_proj packs in x N) set the packing scratch the frozen base's skipped weight gradients no longer
# do, and a --freeze glob on top that freezes those A removes that product again
LORA_CASES = [
    (2, ["--lora-rank", "4"]), (2, ["--lora-rank", "8", "--lora-targets", "c_attn,c_proj,c_fc"]),
    (2, ["--lora-rank", "8", "--lora-targets", "c_attn,c_proj,c_fc", "--lora-dropout", "0.1"]),
    (2, ["--lora-rank", "4", "--mixed-precision", "bf16"]),
    (2, ["--lora-rank", "8", "--lora-targets", "c_attn,c_proj,c_fc", "--mixed-precision", "bf16"]),
    (2, ["--lora-rank", "8", "--lora-targets", "c_proj", "--freeze", "*.mlp.c_proj.lora_A.weight",
         "--mixed-precision", "bf16"]),
    (2, ["--lora-rank", "4", "--lora-dropout", "0.1", "--activation-checkpointing"]),
    (4, ["--lora-rank", "4", "--strategy", "hybrid_shard", "--shard-group-size", "2"]),
    (1, ["--lora-rank", "4"]),
]
LORA_SITES = {"c_attn": ["attn.c_attn"], "c_proj": ["attn.c_proj", "mlp.c_proj"], "c_fc": ["mlp.c_fc"],
              "attn.c_proj": ["attn.c_proj"], "mlp.c_proj": ["mlp.c_proj"]}


def lora_adapters(flags, C):
    """(rank, dropout, [(site, in, out)]) of a LoRA case's flags (fsdp-train's defaults: targets c_attn)."""
    def opt(name, default):
        return flags[flags.index(name) + 1] if name in flags else default
    io = {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C), "mlp.c_proj": (4 * C, C)}
    sites = {s for t in opt("--lora-targets", "c_attn").split(",") for s in LORA_SITES[t]}
    return int(opt("--lora-rank", "0")), float(opt("--lora-dropout", "0")), [(s, *io[s]) for s in io if s in sites]


def numbers(text, prefix):
    line = next((x for x in text.splitlines() if x.startswith(prefix)), "")
    return {k: float(v) for k, v in re.findall(r"([a-z_]+) ([0-9.]+)", line)}


def gpt2_units(layers, C, V, max_seq):
    """GPT-2's parameters (name, numel) by FSDP unit (transformer wrap): the blocks h.N, then the root."""
    block = [("ln_1.weight", C), ("ln_1.bias", C), ("attn.c_attn.weight", C * 3 * C), ("attn.c_attn.bias", 3 * C),
             ("attn.c_proj.weight", C * C), ("attn.c_proj.bias", C), ("ln_2.weight", C), ("ln_2.bias", C),
             ("mlp.c_fc.weight", C * 4 * C), ("mlp.c_fc.bias", 4 * C), ("mlp.c_proj.weight", 4 * C * C),
             ("mlp.c_proj.bias", C)]
    units = [[(f"h.{i}.{n}", k) for n, k in block] for i in range(layers)]
    return units + [[("wte.weight", V * C), ("wpe.weight", max_seq * C), ("ln_f.weight", C), ("ln_f.bias", C)]]


def with_lora(units, rank, adapters):
    """The units with each block's adapters (lora_A (rank, in), lora_B (out, rank)) added to it."""
    out = [list(u) for u in units]
    for i, unit in enumerate(out[:-1]):
        for site, n_in, n_out in adapters:
            unit += [(f"h.{i}.{site}.lora_A.weight", rank * n_in), (f"h.{i}.{site}.lora_B.weight", n_out * rank)]
    return out


def trainable_shard(units, globs, group, lora=False):
    """Elements of a rank's gradient shard: each unit's trainable segment padded to group x 16, / group.
    lora: only the adapters (".lora_" names) train, as fsdp-train freezes the base model."""
    q = group * 16
    total = 0
    for unit in units:
        train = sum(k for name, k in unit if not any(fnmatch.fnmatchcase(name, g) for g in globs) and
                    (not lora or ".lora_" in name))
        total += (train + q - 1) // q * q // group
    return total


def measure_and_plan(args, world, flags):
    """fsdp-train's measured numbers (rank 0) and fsdp-plan's prediction for the same flags."""
    r = mpirun(world, [os.path.join(args.bin, "fsdp-train")] + flags)
    measured = numbers(r.stdout, "memory rank 0:")
    measured["total"] = measured.pop("total_peak", None)
    p = proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", str(world)] + flags)
    return measured, numbers(p.stdout, "prediction:")


def main():
    args = parse_args()
    chk = Checker("fsdp-plan")
    runs = {}  # (world, flags) -> (measured, predicted)
    for world, extra in CASES:
        label = f"{world} rank(s) {' '.join(extra) or 'full_shard'}"
        r = mpirun(world, [os.path.join(args.bin, "fsdp-train")] + MODEL +
                   ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra)
        measured = numbers(r.stdout, "memory rank 0:")
        measured["total"] = measured.pop("total_peak", None)
        p = proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", str(world)] + MODEL +
                 ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra)  # the run's flags
        predicted = numbers(p.stdout, "prediction:")
        runs[(world, tuple(extra))] = (measured, predicted)
        for k in KEYS:
            chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 0.10, 64)
    # --freeze: the trainable segments' shards carry the gradients and AdamW moments, the all-gathers
    # still move both segments, the reductions the trainable one only
    for world, extra in FREEZE_CASES:
        label = f"{world} rank(s) {' '.join(extra)}"
        measured, predicted = measure_and_plan(
            args, world, MODEL + ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra)
        runs[(world, tuple(extra))] = (measured, predicted)
        for k in KEYS:
            chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 0.10, 64)
    # exactly: 4 and 8 bytes per trainable shard element (the model: 3 layers, d_model 64, vocab 256, seq 32)
    globs = ["*.bias", "h.1.ln_*", "wte.weight"]
    measured, predicted = runs[(2, ("--freeze", ",".join(globs)))]
    n = trainable_shard(gpt2_units(3, 64, 256, 32), globs, 2)
    everything = trainable_shard(gpt2_units(3, 64, 256, 32), [], 2)
    print(f"--freeze {','.join(globs)}, 2 ranks: {n} trainable shard elements per rank (of {everything})")
    chk.true("--freeze: fewer trainable shard elements than the model's", 0 < n < everything, f"{n} vs {everything}")
    for k, per in (("gradients", 4), ("optimizer", 8)):
        chk.close(f"--freeze {','.join(globs)}: predicted {k} = {per} x trainable shard elements",
                  [predicted.get(k)], [float(per * n)], 0, 0)
        chk.close(f"--freeze {','.join(globs)}: measured {k} = {per} x trainable shard elements",
                  [measured.get(k)], [float(per * n)], 0, 0)
    unfrozen_measured, unfrozen_predicted = runs[(2, ())]
    for which, frozen, unfrozen in (("measured", measured, unfrozen_measured),
                                    ("predicted", predicted, unfrozen_predicted)):
        chk.true(f"--freeze: {which} bytes_sent_per_step below the unfrozen run's",
                 frozen["bytes_sent_per_step"] < unfrozen["bytes_sent_per_step"],
                 f"{frozen['bytes_sent_per_step']} vs {unfrozen['bytes_sent_per_step']}")
    measured, predicted = runs[(2, ("--freeze", "h.*"))]  # every block frozen: only the root's gradients
    n = trainable_shard(gpt2_units(3, 64, 256, 32), ["h.*"], 2)
    for which, nums in (("predicted", predicted), ("measured", measured)):
        chk.close(f"--freeze h.*: {which} gradients = 4 x the root's gradient shard", [nums.get("gradients")],
                  [float(4 * n)], 0, 0)
    # a glob that matches no parameter: a one-line error naming it, exit 2, as fsdp-train's
    p = proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", "2"] + MODEL +
             ["--freeze", "h.0.*,h.9.*"], expect_ok=False)
    chk.true("fsdp-plan --freeze 'h.9.*' (no such parameter): exit 2 and one line naming the glob",
             p.returncode == 2 and "'h.9.*'" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
             f"exit {p.returncode}, stderr {p.stderr!r}")
    # LoRA: the adapters' segments carry the gradients and moments; the all-gathers still move the base
    for world, extra in LORA_CASES:
        label = f"{world} rank(s) {' '.join(extra)}"
        measured, predicted = measure_and_plan(
            args, world, MODEL + ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra)
        runs[(world, tuple(extra))] = (measured, predicted)
        for which, nums in (("measured", measured), ("planned ", predicted)):
            print(f"{label}: {which} " + " ".join(f"{k} {nums[k]:.0f}" for k in KEYS if nums.get(k) is not None))
        for k in KEYS:
            chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 0.10, 64)
    # exactly: 4 and 8 bytes per trainable shard element, the adapters' alone (padded to 2 x 16 per unit)
    for extra in (["--lora-rank", "4"], ["--lora-rank", "8", "--lora-targets", "c_attn,c_proj,c_fc"]):
        rank, _, adapters = lora_adapters(extra, 64)
        measured, predicted = runs[(2, tuple(extra))]
        n = trainable_shard(with_lora(gpt2_units(3, 64, 256, 32), rank, adapters), [], 2, lora=True)
        print(f"{' '.join(extra)}, 2 ranks: {n} trainable (adapter) shard elements per rank")
        chk.true(f"{' '.join(extra)}: some adapter shard elements", n > 0, str(n))
        for k, per in (("gradients", 4), ("optimizer", 8)):
            for which, nums in (("predicted", predicted), ("measured", measured)):
                chk.close(f"{' '.join(extra)}: {which} {k} = {per} x adapter shard elements", [nums.get(k)],
                          [float(per * n)], 0, 0)
    # exactly: each adapter's activations, 4 bytes x N x (2 R, plus 2 in with dropout), in every block,
    # with activation checkpointing as without (against the same run without adapters)
    N = 4 * 32
    for extra, base in ((["--lora-rank", "8", "--lora-targets", "c_attn,c_proj,c_fc", "--lora-dropout", "0.1"], ()),
                        (["--lora-rank", "4", "--lora-dropout", "0.1", "--activation-checkpointing"],
                         ("--activation-checkpointing",))):
        rank, dropout, adapters = lora_adapters(extra, 64)
        want = 3 * sum(4 * N * (2 * rank + (2 * n_in if dropout > 0 else 0)) for _, n_in, _ in adapters)
        for which, i in (("measured", 0), ("predicted", 1)):
            got = runs[(2, tuple(extra))][i].get("activations_peak", 0) - runs[(2, base)][i].get("activations_peak", 0)
            chk.close(f"{' '.join(extra)}: {which} activations = the run's without adapters + {want} B of adapters'",
                      [got], [float(want)], 0, 0)
    # bf16: the packing scratch exactly, set by the adapters' products once the base's weight gradients are gone
    for extra in (["--lora-rank", "8", "--lora-targets", "c_attn,c_proj,c_fc", "--mixed-precision", "bf16"],
                  ["--lora-rank", "8", "--lora-targets", "c_proj", "--freeze", "*.mlp.c_proj.lora_A.weight",
                   "--mixed-precision", "bf16"]):
        measured, predicted = runs[(2, tuple(extra))]
        chk.close(f"{' '.join(extra)}: predicted workspace = measured", [predicted.get("workspace")],
                  [measured.get("workspace")], 0, 0)
    # flags fsdp-train rejects: one line, exit 2
    for extra, needle in ((["--lora-alpha", "16"], "--lora-rank"),
                          (["--lora-rank", "4", "--lora-targets", "c_xx"], "'c_xx'")):
        p = proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", "2"] + MODEL + extra, expect_ok=False)
        chk.true(f"fsdp-plan {' '.join(extra)}: exit 2 and one line naming {needle}",
                 p.returncode == 2 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1,
                 f"exit {p.returncode}, stderr {p.stderr!r}")
    # --deterministic: fixed-point digits on the wire (4 bytes x limbs per element), a digit accumulator per
    # gradient shard, no gradient staging; --grad-accum is the chunks per rank
    # (and with --freeze: the digits, accumulators and gradient buffers of the trainable segments only)
    for world, extra in ((1, []), (2, []), (4, []), (2, ["--strategy", "ddp"]), (3, ["--wrap", "none"]),
                         (4, ["--strategy", "hybrid_shard", "--shard-group-size", "2"]),
                         (2, ["--mixed-precision", "bf16"]), (2, ["--strategy", "shard_grad_op", "--det-chunks", "4"]),
                         (2, ["--freeze", "h.0.*"]), (2, ["--freeze", "h.*", "--strategy", "ddp"])):
        label = f"--deterministic, {world} rank(s) {' '.join(extra) or 'full_shard'}"
        flags = MODEL + ["--global-batch", "12", "--deterministic", "--steps", "2", "--threads", "1", "--summary"] + extra
        r = mpirun(world, [os.path.join(args.bin, "fsdp-train")] + flags)
        measured = numbers(r.stdout, "memory rank 0:")
        measured["total"] = measured.pop("total_peak", None)
        predicted = numbers(proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", str(world)] + flags).stdout,
                            "prediction:")
        for k in KEYS:
            chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 0.10, 64)
    # without shared memory (ranks on different nodes): plain MPI collectives, no gradient staging, and
    # bf16 all-reduces as all-gathers; and a one-rank shard group (no shared memory inside it)
    for world, extra, env, plan_extra in (
            (2, ["--strategy", "ddp", "--mixed-precision", "bf16"], {"FSDP_COMM_NO_SHM": "1"}, ["--no-shared-memory"]),
            (4, ["--strategy", "hybrid_shard", "--shard-group-size", "2", "--mixed-precision", "bf16"],
             {"FSDP_COMM_NO_SHM": "1"}, ["--no-shared-memory"]),
            (2, ["--mixed-precision", "bf16"], {"FSDP_COMM_NO_SHM": "1"}, ["--no-shared-memory"]),
            (2, ["--strategy", "hybrid_shard", "--shard-group-size", "1", "--mixed-precision", "bf16"], {}, [])):
        label = f"{world} rank(s) {' '.join(extra)}{' no shm' if env else ''}"
        r = mpirun(world, [os.path.join(args.bin, "fsdp-train")] + MODEL +
                   ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra, env=env)
        measured = numbers(r.stdout, "memory rank 0:")
        measured["total"] = measured.pop("total_peak", None)
        p = proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", str(world)] + MODEL +
                 ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra + plan_extra)
        predicted = numbers(p.stdout, "prediction:")
        for k in KEYS:
            chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 0.10, 64)
    bench_model = ["--layers", "6", "--d-model", "512", "--heads", "8", "--seq", "256", "--vocab", "256"]
    for world in (1, 2, 4):
        for extra in ([], ["--mixed-precision", "bf16"]):
            r = mpirun(world, [os.path.join(args.bin, "fsdp-train")] + bench_model +
                       ["--batch", "2", "--steps", "2", "--threads", "1", "--summary"] + extra)
            acct = numbers(r.stdout, "memory rank 0:")["total_peak"]
            os_mem = numbers(r.stdout, "os memory rank 0:")
            print(f"benchmark model, {world} rank(s) {' '.join(extra)}: accounted {acct / 2**20:.1f} MiB, data PSS "
                  f"{os_mem['data_pss'] / 2**20:.1f} MiB, peak RSS {os_mem['peak_rss'] / 2**20:.1f} MiB")
            if OS_CHECKS:
                chk.close(f"benchmark model, {world} rank(s) {' '.join(extra)}: accounted peak vs the OS's data PSS",
                          [acct], [os_mem["data_pss"]], 0.10, 0)
    # GPT-2's vocabulary: the plan against the accounting, and the accounting against the OS
    vocab_model = ["--layers", "2", "--d-model", "256", "--heads", "4", "--seq", "128", "--vocab", "50257"]
    for world in (1, 2):
        for extra in ([], ["--mixed-precision", "bf16"]):
            label = f"vocab 50257, {world} rank(s) {' '.join(extra) or 'fp32'}"
            r = mpirun(world, [os.path.join(args.bin, "fsdp-train")] + vocab_model +
                       ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra)
            measured = numbers(r.stdout, "memory rank 0:")
            measured["total"] = measured.pop("total_peak", None)
            os_mem = numbers(r.stdout, "os memory rank 0:")
            p = proc([os.path.join(args.bin, "fsdp-plan"), "train", "--world-size", str(world)] + vocab_model +
                     ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"] + extra)
            predicted = numbers(p.stdout, "prediction:")
            for k in KEYS:
                chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 0.10, 64)
            print(f"{label}: planned {predicted.get('total')} B, accounted {measured.get('total')} B, data PSS "
                  f"{os_mem.get('data_pss')} B")
            if OS_CHECKS:
                chk.close(f"{label}: accounted peak vs the OS's data PSS", [measured.get("total")],
                          [os_mem.get("data_pss")], 0.10, 0)
    llama_checks(args, chk)
    chk.report()


# The Llama family: GQA (2 key/value heads for 4 query heads), an untied head, SwiGLU of width 160
LLAMA = ["--arch", "llama", "--layers", "3", "--d-model", "64", "--heads", "4", "--kv-heads", "2", "--d-ff", "160",
         "--seq", "32", "--vocab", "256"]
LLAMA_RUN = ["--batch", "4", "--steps", "2", "--threads", "1", "--summary"]
BF16 = ["--mixed-precision", "bf16"]
LLAMA_CASES = [  # world, extra flags
    (1, []), (2, []), (1, BF16), (2, BF16), (2, ["--activation-checkpointing"]),
    (2, ["--activation-checkpointing"] + BF16), (2, ["--lora-rank", "4"]),
    (2, ["--lora-rank", "8", "--lora-targets", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"] + BF16),
    (2, ["--lora-rank", "4", "--lora-dropout", "0.1", "--activation-checkpointing"]),
    (2, ["--freeze", "model.layers.0.*,lm_head.weight"] + BF16),
    (2, ["--tie-embeddings", "--attention-bias", "--mlp-bias"]),
    (4, ["--strategy", "hybrid_shard", "--shard-group-size", "2"]),
]
LLAMA_TARGETS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj"]


def llama_units(layers, C, H, KV, hd, F, V, tied=False, lora_rank=0, lora_targets=("q_proj", "v_proj")):
    """The Llama model's parameters (name, numel) by FSDP unit (transformer wrap): the decoder layers
    model.layers.N (with each targeted projection's lora_A (R, in) and lora_B (out, R)), then the root."""
    io = dict(zip(LLAMA_TARGETS, [(C, H * hd), (C, KV * hd), (C, KV * hd), (H * hd, C), (C, F), (C, F), (F, C)]))
    units = []
    for i in range(layers):
        unit = [(f"model.layers.{i}.input_layernorm.weight", C), (f"model.layers.{i}.post_attention_layernorm.weight", C)]
        unit += [(f"model.layers.{i}.{site}.weight", n_in * n_out) for site, (n_in, n_out) in io.items()]
        for site, (n_in, n_out) in io.items():
            if lora_rank and site.split(".")[1] in lora_targets:
                unit += [(f"model.layers.{i}.{site}.lora_A.weight", lora_rank * n_in),
                         (f"model.layers.{i}.{site}.lora_B.weight", n_out * lora_rank)]
        units.append(unit)
    root = [("model.embed_tokens.weight", V * C), ("model.norm.weight", C)] + ([] if tied else [("lm_head.weight", V * C)])
    return units + [root]


def plan_numel(stdout):
    """The model's parameters as fsdp-plan's first line names them ("fsdp-plan: Llama, N parameters")."""
    m = re.search(r"^fsdp-plan: [^,]*, ([0-9]+) parameters", stdout, re.M)
    return int(m.group(1)) if m else None


def llama_checks(args, chk):
    train, plan = os.path.join(args.bin, "fsdp-train"), os.path.join(args.bin, "fsdp-plan")
    tmp = tmpdir()
    saved = os.path.join(tmp, "llama.safetensors")
    saved_dir = os.path.join(tmp, "llama-hf")  # a Hugging Face directory: config.json + model.safetensors
    runs = {}
    for world, extra in LLAMA_CASES:
        label = f"Llama, {world} rank(s) {' '.join(extra) or 'full_shard fp32'}"
        save = {(1, ()): ["--save", saved], (2, ()): ["--save", saved_dir]}.get((world, tuple(extra)), [])
        r = mpirun(world, [train] + LLAMA + LLAMA_RUN + extra + save)
        measured = numbers(r.stdout, "memory rank 0:")
        measured["total"] = measured.pop("total_peak", None)
        p = proc([plan, "train", "--world-size", str(world)] + LLAMA + LLAMA_RUN + extra)
        predicted = numbers(p.stdout, "prediction:")
        runs[(world, tuple(extra))] = (measured, predicted, r.stdout, p.stdout)
        for which, nums in (("measured", measured), ("planned ", predicted)):
            print(f"{label}: {which} " + " ".join(f"{k} {nums[k]:.0f}" for k in KEYS if nums.get(k) is not None))
        for k in KEYS:
            chk.close(f"{label}: {k}", [predicted.get(k)], [measured.get(k)], 0.10, 64)
        if not extra or extra == ["--activation-checkpointing"]:  # fp32: every activation buffer (the loss's 8 B aside)
            chk.close(f"{label}: activations exactly", [predicted.get("activations_peak")],
                      [measured.get("activations_peak")], 0, 64)
    # the parameter count: the formula's, fsdp-train's and fsdp-plan's
    for extra, tied in (([], False), (["--tie-embeddings", "--attention-bias", "--mlp-bias"], True)):
        _, _, train_out, plan_out = runs[(2, tuple(extra))]
        units = llama_units(3, 64, 4, 2, 16, 160, 256, tied=tied)
        want = sum(k for u in units for _, k in u)
        if extra:  # q/k/v/o biases (4 x 16 x (4, 2, 2) and 64) and gate/up/down's (160, 160, 64), per layer
            want += 3 * (16 * (4 + 2 + 2) + 64 + 160 + 160 + 64)
        m = re.search(r"^total: ([0-9]+) parameters", train_out, re.M)
        got_train = int(m.group(1)) if m else None
        chk.true(f"Llama {' '.join(extra) or 'untied'}: {want} parameters, fsdp-train's and fsdp-plan's",
                 got_train == want and plan_numel(plan_out) == want, f"train {got_train}, plan {plan_numel(plan_out)}")
    # LoRA: gradients and moments of the adapters' shards exactly, the adapters in the layers' units
    for extra, targets in ((["--lora-rank", "4"], ("q_proj", "v_proj")),
                           (["--lora-rank", "8", "--lora-targets", ",".join(t.split(".")[1] for t in LLAMA_TARGETS)]
                            + BF16, tuple(t.split(".")[1] for t in LLAMA_TARGETS))):
        measured, predicted, _, _ = runs[(2, tuple(extra))]
        units = llama_units(3, 64, 4, 2, 16, 160, 256, lora_rank=int(extra[1]), lora_targets=targets)
        n = trainable_shard(units, [], 2, lora=True)
        chk.true(f"Llama {' '.join(extra)}: some adapter shard elements", n > 0, str(n))
        for k, per in (("gradients", 4), ("optimizer", 8)):
            for which, nums in (("predicted", predicted), ("measured", measured)):
                chk.close(f"Llama {' '.join(extra)}: {which} {k} = {per} x adapter shard elements", [nums.get(k)],
                          [float(per * n)], 0, 0)
    # --init FILE: the architecture and the shape from the file (its tensors and recorded configuration)
    by_flags = runs[(1, ())][1]
    p = proc([plan, "train", "--world-size", "1", "--init", saved, "--seq", "32"] + LLAMA_RUN)
    by_file = numbers(p.stdout, "prediction:")
    chk.true("fsdp-plan train --init llama.safetensors (no --arch, no shape flags): plans Llama",
             p.stdout.startswith("fsdp-plan: Llama,"), p.stdout[:200])
    for k in KEYS:
        chk.close(f"fsdp-plan --init llama.safetensors: {k} = the flags' plan", [by_file.get(k)], [by_flags.get(k)], 0, 0)
    # --init DIR: the architecture and the shape from the directory's config.json alone
    p = proc([plan, "train", "--world-size", "2", "--init", saved_dir, "--seq", "32"] + LLAMA_RUN)
    by_dir = numbers(p.stdout, "prediction:")
    chk.true("fsdp-plan train --init llama-hf/ (a Hugging Face directory): plans Llama",
             p.stdout.startswith("fsdp-plan: Llama,"), p.stdout[:200])
    for k in KEYS:
        chk.close(f"fsdp-plan --init llama-hf/: {k} = the flags' plan", [by_dir.get(k)], [runs[(2, ())][1].get(k)], 0, 0)
    # fsdp-train's up-front memory check holds a Llama run to the same prediction
    total = by_flags.get("total") or 0.0
    flags = LLAMA + ["--batch", "4", "--steps", "1", "--threads", "1"]
    r = proc([train] + flags, expect_ok=False, env={"FSDP_TEST_MEM_AVAILABLE": repr(total - 1.0)})
    chk.true("fsdp-train --arch llama, 1 byte less available than fsdp-plan predicts: refused (exit 2, one line)",
             r.returncode == 2 and "MiB per rank" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
             f"rc {r.returncode}: {r.stderr[-400:]}")
    r = proc([train] + flags, expect_ok=False, env={"FSDP_TEST_MEM_AVAILABLE": repr(total)})
    chk.true("fsdp-train --arch llama, exactly the prediction available: runs", r.returncode == 0 and "step 0" in r.stdout,
             f"rc {r.returncode}: {r.stderr[-400:]}")
    # a Llama shape fsdp-train refuses: the same one line from fsdp-plan
    p = proc([plan, "train"] + LLAMA + ["--kv-heads", "3"], expect_ok=False)
    chk.true("fsdp-plan train --arch llama --kv-heads 3: exit 2 and one line naming --kv-heads",
             p.returncode == 2 and "--kv-heads 3" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
             f"exit {p.returncode}, stderr {p.stderr!r}")


if __name__ == "__main__":
    main()
