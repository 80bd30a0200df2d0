// fsdp_flags.c: the flags both tools share, and the fsdp_config they produce.
#include "cli/fsdp_flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "device/device_comm.h"

void cli_fsdp_defaults(cli_fsdp_options *o) {
    memset(o, 0, sizeof *o);
    o->wrap = "transformer";
    o->limit_all_gathers = 2;
    o->ckpt.type = -1;  // not given: sharded (lets cli_fsdp_check_flags tell a --ckpt-type without --ckpt-dir)
    o->comm = -1;       // not given: $FSDP_DEVICE_COMM, else auto
}

int cli_fsdp_add_flags(cli_arg *args, int n, cli_fsdp_options *o) {
    cli_arg shared[CLI_FSDP_NFLAGS] = {
        {"--strategy", ARG_CHOICE, &o->strategy, "FSDP sharding strategy", 1, 0,
         "full_shard|shard_grad_op|no_shard|hybrid_shard|ddp"},
        {"--wrap", ARG_STRING, &o->wrap, "auto-wrap policy: transformer (each block a unit), size:N (each block with >= N parameters), none (one root unit)", 1, 0, NULL},
        {"--shard-group-size", ARG_INT, &o->shard_group_size, "hybrid_shard: ranks per shard group (0: ranks sharing a node); an error with any other --strategy", 0, 1e6, NULL},
        {"--backward-prefetch", ARG_CHOICE, &o->backward_prefetch, "issue the next unit's all-gather before (pre) or after (post) the current unit's backward", 1, 0, "pre|post|none"},
        {"--forward-prefetch", ARG_BOOL, &o->forward_prefetch, "issue the next unit's all-gather before the current unit's forward (order recorded in the first step)", 1, 0, NULL},
        {"--limit-all-gathers", ARG_INT, &o->limit_all_gathers, "at most this many units unsharded at once, prefetches included (0: no limit)", 0, 1e6, NULL},
        {"--activation-checkpointing", ARG_BOOL, &o->activation_checkpointing, "keep only each block's output; recompute the block's forward in backward", 1, 0, NULL},
        {"--offload-dir", ARG_STRING, &o->offload_dir, "keep master shards, gradient shards and AdamW state in memory-mapped files in this directory (pageable; ZeRO-Infinity style)", 1, 0, NULL},
        {"--cpu-offload", ARG_BOOL, &o->cpu_offload, "CPUOffload(offload_params=True): a no-op on the CPU backend (it prints a note), where parameters, gradients and the optimizer already live in host memory; it will move them once the CUDA backend exists", 1, 0, NULL},
        {"--mixed-precision", ARG_CHOICE, &o->mixed_precision, "MixedPrecision param_dtype: bf16 all-gathers parameters in bf16 and runs every matrix product with bf16 operands (fp32 accumulation; AMX where the CPU has it); LayerNorm, softmax, loss and the fp32 master shards, gradients and optimizer stay fp32", 1, 0, "fp32|bf16"},
        {"--reduce-dtype", ARG_CHOICE, &o->reduce_dtype, "MixedPrecision reduce_dtype: gradient reduce-scatter/all-reduce dtype on the wire (summed in fp32); param follows --mixed-precision", 1, 0, "param|fp32|bf16"},
        {"--summary", ARG_BOOL, &o->summary, "print the sharding layout (units, numel, padding, shard sizes)", 1, 0, NULL},
        {"--init-nonstrict", ARG_BOOL, &o->init_nonstrict, "--init: report missing and unexpected tensors instead of failing", 1, 0, NULL},
        {"--ckpt-dir", ARG_STRING, &o->ckpt.dir, "checkpoint directory (step_NNNNNNNN, loadable on any world size); a checkpoint is always saved after the last step and when interrupted", 1, 0, NULL},
        {"--save-every", ARG_INT, &o->ckpt.save_every, "also save a checkpoint after every N completed steps (needs --ckpt-dir; 0: only at the end)", 0, 1e9, NULL},
        {"--ckpt-type", ARG_CHOICE, &o->ckpt.type, "sharded (a file per rank) or full (model + optimizer files from rank 0); needs --ckpt-dir", 1, 0, "sharded|full"},
        {"--keep-last", ARG_INT, &o->ckpt.keep_last, "keep only the K newest complete checkpoints (needs --ckpt-dir; 0: keep all)", 0, 1e6, NULL},
        {"--resume", ARG_STRING, &o->ckpt.resume, "resume from a checkpoint directory, or auto (the newest complete one under --ckpt-dir); --steps stays the total, so it must exceed the checkpoint's step count (equal: nothing to train)", 1, 0, NULL},
        {"--device", ARG_STRING, &o->device, "where shards, gathered units, gradients and activations live: cpu; cuda (the local rank's GPU) or cuda:N, in a build with CUDA; or guard (the CPU device with device memory unreadable from above the device layer: a test tool); default: $FSDP_DEVICE, else cpu", 1, 0, NULL},
        {"--comm", ARG_CHOICE, &o->comm, "the device's collectives: auto (NCCL on --device cuda between ranks that each have their own GPU, else the host's paths), nccl (NCCL on the GPUs' streams; an error where it cannot run: not --device cuda, no NCCL in the build, two ranks on one GPU without a NCCL_HOSTID each), host (MPI and shared memory; on cuda staged through pinned host memory); not given: $FSDP_DEVICE_COMM, else auto (docs/cuda.md)", 1, 0, "auto|nccl|host"},
        {"--deterministic", ARG_BOOL, &o->deterministic, "bit-identical losses, gradient norms and parameters on any world size that divides --det-chunks: the global batch (--global-batch, required) is cut into fixed chunks, each chunk's gradients are summed exactly in fixed point (docs/deterministic.md)", 1, 0, NULL},
        {"--det-chunks", ARG_INT, &o->det_chunks, "--deterministic: chunks per step (each one micro-step of one rank; must divide --global-batch and be divisible by the world size; default world x --grad-accum when --grad-accum is given, else --global-batch: one sequence per chunk)", 0, 65536, NULL},
        {"--freeze", ARG_LIST, &o->freeze, "freeze the parameters whose names match this glob (requires_grad=False; e.g. 'h.[0-3].*', 'wte.weight'; repeatable, or comma-separated): still sharded and gathered for compute, but no gradient, no reduction and no optimizer state; a glob that matches nothing is an error (docs/finetuning.md)", 1, 0, NULL},
        {"--new-run", ARG_BOOL, &o->ckpt.new_run, "start a new run (lineage) in a --ckpt-dir that holds another run's checkpoints: they move to DIR/archive/ first, kept whole (never deleted); without it such a directory is refused unless --resume continues it", 1, 0, NULL},
        {"--allow-lowp-resume", ARG_BOOL, &o->ckpt.allow_lowp, "--resume: accept a checkpoint stored in bf16 (fsdp-ckpt convert --dtype bf16), training on from its rounded weights and moments", 1, 0, NULL},
    };
    for (int i = 0; i < CLI_FSDP_NFLAGS; i++) args[n + i] = shared[i];
    return n + CLI_FSDP_NFLAGS;
}

int cli_fsdp_check_flags(const char *prog, const cli_fsdp_options *o, int rank) {
    const char *needs_dir = o->ckpt.dir                ? NULL
                            : o->ckpt.save_every > 0   ? "--save-every"
                            : o->ckpt.keep_last > 0    ? "--keep-last"
                            : o->ckpt.type >= 0        ? "--ckpt-type"
                            : o->ckpt.new_run          ? "--new-run"
                                                       : NULL;
    const char *error = NULL;
    char line[200];
    if (needs_dir) {
        snprintf(line, sizeof line, "%s needs --ckpt-dir (without it no checkpoint is written)", needs_dir);
        error = line;
    } else if (o->ckpt.new_run && o->ckpt.resume && !strcmp(o->ckpt.resume, "auto")) {
        snprintf(line, sizeof line, "--new-run starts a new run: --resume auto would continue the newest checkpoint "
                 "instead (give --resume DIR to start the new run from a checkpoint)");
        error = line;
    } else if (o->det_chunks > 0 && !o->deterministic) {
        snprintf(line, sizeof line, "--det-chunks %d needs --deterministic", o->det_chunks);
        error = line;
    } else if (o->deterministic && o->reduce_dtype == 2) {
        snprintf(line, sizeof line, "--reduce-dtype bf16 does not apply with --deterministic (gradients are summed "
                 "exactly in fixed point)");
        error = line;
    } else if (o->shard_group_size > 0 && o->strategy != FSDP_HYBRID_SHARD) {
        static const char *const strategy_flag[] = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "ddp"};
        snprintf(line, sizeof line, "--shard-group-size %d applies only to --strategy hybrid_shard (got --strategy %s)",
                 o->shard_group_size, strategy_flag[o->strategy]);
        error = line;
    }
    if (error) {
        if (rank == 0) fprintf(stderr, "%s: %s\n", prog, error);
        return -1;
    }
    if (o->cpu_offload && rank == 0)
        fprintf(stderr, "%s: note: --cpu-offload does nothing on the CPU backend (parameters, gradients and the "
                "optimizer already live in host memory)\n", prog);
    return 0;
}

int cli_fsdp_config(const char *prog, const cli_fsdp_options *o, fsdp_config *cfg) {
    *cfg = fsdp_config_default();
    if (o->device) {  // opened once here: a bad name or a missing GPU is a one-line error, not an abort at first use
        fsdp_dev *probe = NULL;
        if (fsdp_dev_open(o->device, &probe) != FSDP_OK) {
            fprintf(stderr, "%s: --device %s: %s\n", prog, o->device, fsdp_last_error());
            return -1;
        }
        fsdp_dev_caps caps;
        fsdp_dev_capabilities(probe, &caps);
        const char *name = fsdp_dev_name(probe);  // (the backend's: it outlives the device)
        fsdp_dev_close(probe);
        if (o->cpu_offload && !caps.host_memory) {  // not a silent no-op: nothing moves to the host there yet
            fprintf(stderr, "%s: --cpu-offload: not implemented on the %s device yet (docs/cuda.md)\n", prog, name);
            return -1;
        }
        setenv("FSDP_DEVICE", o->device, 1);  // read once, by the first fsdp_dev_default()
    }
    static const char *const comm_mode[] = {"auto", "nccl", "host"};
    if (o->comm >= 0) setenv("FSDP_DEVICE_COMM", comm_mode[o->comm], 1);  // read at the first collective
    cfg->device = fsdp_dev_default();
    if (o->comm > 0 && fsdp_dev_comm_check(cfg->device, comm_mode[o->comm]) != FSDP_OK) {
        fprintf(stderr, "%s: --comm %s: %s\n", prog, comm_mode[o->comm], fsdp_last_error());
        return -1;
    }
    cfg->strategy = (fsdp_strategy)o->strategy;
    cfg->shard_group_size = o->shard_group_size;
    cfg->backward_prefetch = o->backward_prefetch == 0   ? FSDP_PREFETCH_BACKWARD_PRE
                             : o->backward_prefetch == 1 ? FSDP_PREFETCH_BACKWARD_POST
                                                         : FSDP_PREFETCH_NONE;
    cfg->forward_prefetch = o->forward_prefetch;
    cfg->limit_all_gathers = o->limit_all_gathers;
    cfg->offload_dir = o->offload_dir;
    cfg->cpu_offload = o->cpu_offload;
    cfg->param_dtype = o->mixed_precision == 1 ? FSDP_BF16 : FSDP_F32;
    cfg->reduce_dtype = o->reduce_dtype == 0 ? cfg->param_dtype : o->reduce_dtype == 2 ? FSDP_BF16 : FSDP_F32;
    cfg->deterministic = o->deterministic;
    cfg->det_chunks = o->det_chunks;
    cfg->freeze = o->freeze;
    if (cfg->deterministic) cfg->reduce_dtype = FSDP_F32;  // the digits travel as fp32 (exact sums)
    const char *w = o->wrap;
    if (strcmp(w, "transformer") == 0) {
        cfg->wrap = FSDP_WRAP_TRANSFORMER;
    } else if (strcmp(w, "none") == 0) {
        cfg->wrap = FSDP_WRAP_NONE;
    } else {
        char *end = NULL;
        long long n = strncmp(w, "size:", 5) == 0 && w[5] ? strtoll(w + 5, &end, 10) : -1;
        if (n < 0 || (end && *end)) {
            fprintf(stderr, "%s: --wrap: expected transformer, size:N or none, got '%s'\n", prog, w);
            return -1;
        }
        cfg->wrap = FSDP_WRAP_SIZE;
        cfg->min_num_params = n;
    }
    return 0;
}

int cli_fsdp_build(const char *prog, const cli_fsdp_options *o, fsdp_model_desc desc, fsdp_config cfg,
                   fsdp_comm *world, uint64_t seed, const char *init_path, const char *alt_prefix,
                   fsdp_state **out) {
    int N = fsdp_comm_size(world);
    if (cfg.strategy == FSDP_HYBRID_SHARD && o->shard_group_size > 0 && N % o->shard_group_size) {
        if (fsdp_comm_rank(world) == 0)
            fprintf(stderr, "%s: --shard-group-size %d does not divide the world size %d (hybrid_shard needs equal "
                    "shard groups)\n", prog, o->shard_group_size, N);
        return 1;
    }
    if (fsdp_freeze_matching(desc.params, o->freeze) != FSDP_OK) {  // a bad --freeze: a flag error (every rank
        if (fsdp_comm_rank(world) == 0) fprintf(stderr, "%s: %s\n", prog, fsdp_last_error());  // finds it)
        return 2;
    }
    nn_sequential_set_checkpointing(desc.blocks, o->activation_checkpointing);
    char report[1200] = "";
    fsdp_status st = fsdp_wrap(out, desc, cfg, world), load = FSDP_OK;
    if (st == FSDP_OK) st = fsdp_init_params(*out, seed);
    if (st == FSDP_OK && init_path)
        st = load = fsdp_load_params(*out, init_path, alt_prefix, !o->init_nonstrict, report, sizeof report);
    if (st != FSDP_OK) {
        fprintf(stderr, "%s: %s\n", prog, fsdp_last_error());
        fsdp_free_state(*out);
        *out = NULL;
        // an --init that does not fit the model (a tensor missing, of another shape or dtype, a malformed
        // file) is bad input: exit 2, as the flags' errors
        return load == FSDP_ERR_MISSING || load == FSDP_ERR_SHAPE || load == FSDP_ERR_DTYPE ||
               load == FSDP_ERR_FORMAT || load == FSDP_ERR_INVALID_ARG ? 2 : 1;
    }
    if (report[0] && fsdp_comm_rank(world) == 0) fprintf(stderr, "%s: note: %s\n", prog, report);
    return 0;
}

int cli_batch_resolve(const char *prog, int print, int given_batch, int *batch, int *global, int grad_accum, int world) {
    if (*global <= 0) {
        *global = world * grad_accum * *batch;
        return 0;
    }
    if (given_batch) {
        if (print)
            fprintf(stderr, "%s: --batch %d and --global-batch %d: give one (--batch is per rank, --global-batch the "
                "sequences per step over all ranks)\n", prog, *batch, *global);
        return -1;
    }
    long long parts = (long long)world * grad_accum;
    if (*global % parts) {
        if (print)
            fprintf(stderr, "%s: --global-batch %d is not divisible by the world size %d x --grad-accum %d\n", prog,
                *global, world, grad_accum);
        return -1;
    }
    *batch = (int)(*global / parts);
    return 0;
}

int cli_det_resolve(const char *prog, int print, cli_fsdp_options *o, int given_batch, int given_accum, int no_sync,
                    int *batch, int *global, int *grad_accum, int world) {
    char line[320] = "";
    int C = o->det_chunks > 0 ? o->det_chunks : given_accum ? world * *grad_accum : *global;
    if (*global <= 0)
        snprintf(line, sizeof line, "--deterministic needs --global-batch (the sequences per step must not depend on "
                 "the world size)");
    else if (given_batch)
        snprintf(line, sizeof line, "--batch %d with --deterministic: give --global-batch (and --det-chunks) instead; "
                 "each chunk of --global-batch / --det-chunks sequences is one micro-batch", *batch);
    else if (no_sync)
        snprintf(line, sizeof line, "--no-sync does not apply with --deterministic (each chunk's gradients are reduced "
                 "exactly when its backward ends)");
    else if (C < 1 || *global % C)
        snprintf(line, sizeof line, "--det-chunks %d does not divide --global-batch %d", C, *global);
    else if (C % world)
        snprintf(line, sizeof line, "--det-chunks %d is not divisible by the world size %d (each rank takes "
                 "det-chunks / world chunks)", C, world);
    else if (given_accum && *grad_accum != C / world)
        snprintf(line, sizeof line, "--grad-accum %d with --deterministic: each rank runs --det-chunks %d / world %d = %d "
                 "micro-steps (one chunk each); drop --grad-accum or make them agree", *grad_accum, C, world, C / world);
    if (line[0]) {
        if (print) fprintf(stderr, "%s: %s\n", prog, line);
        return -1;
    }
    o->det_chunks = C;
    *batch = *global / C;
    *grad_accum = C / world;
    return 0;
}
