// training_flags.c: the training flags fsdp-train and fsdp-minimal share (training_flags.h).
#include "cli/training_flags.h"

#include <string.h>

#include "cli/cli_threads.h"  // CLI_THREADS_MAX
#include "core/status.h"

void cli_training_flags(cli_training_options *t, cli_arg *table) {
    const cli_arg shared[CLI_TRAINING_NFLAGS] = {
        {"--batch", ARG_INT, &t->batch, "per-rank micro-batch (sequences); a step sees world x --grad-accum x --batch", 1, 1e6, NULL},
        {"--global-batch", ARG_INT, &t->global_batch, "sequences per optimizer step over all ranks: sets --batch to N / (world x --grad-accum), which must divide it; not with --batch (0: use --batch)", 0, 1e9, NULL},
        {"--grad-accum", ARG_INT, &t->grad_accum, "micro-steps per optimizer step", 1, 1e6, NULL},
        {"--no-sync", ARG_BOOL, &t->no_sync, "accumulate unsharded gradients locally and reduce once per step (no_sync on all but the last micro-step)", 1, 0, NULL},
        {"--steps", ARG_INT, &t->steps, "optimizer steps in total (a --resume continues up to it)", 0, 1e9, NULL},
        {"--lr", ARG_FLOAT, &t->lr, "AdamW learning rate (the peak, under a warmup/decay schedule)", 0, 1e3, NULL},
        {"--weight-decay", ARG_FLOAT, &t->weight_decay, "AdamW weight decay", 0, 1e3, NULL},
        {"--clip-grad-norm", ARG_FLOAT, &t->clip, "clip gradients to this global L2 norm (0: off); the log shows the norm", 0, 1e9, NULL},
        {"--seed", ARG_INT, &t->seed, "seed for init, dropout and the random draws (a generated input, sampling)", 0, 2147483647, NULL},
        {"--init", ARG_STRING, &t->init_path, "initial weights: a safetensors file (PyTorch names, Hugging Face's for GPT-2) or a Hugging Face model directory (config.json with model.safetensors, or the shards of model.safetensors.index.json); the model's sizes are read from it", 1, 0, NULL},
        {"--save", ARG_STRING, &t->save_path, "write the weights here after the last step (rank 0, which prints what it wrote); fsdp-train: a path not ending in .safetensors is a Hugging Face model directory (config.json + model.safetensors, or shards + index: --save-shard-size, --save-dtype)", 1, 0, NULL},
        {"--dump-grads", ARG_STRING, &t->dump_grads_path, "write the first step's full parameter gradients (after clipping) here", 1, 0, NULL},
        {"--threads", ARG_INT, &t->threads, "OpenMP threads per rank (0: OMP_NUM_THREADS, else the affinity cores / ranks sharing them)", 0, CLI_THREADS_MAX, NULL},
        {"--no-memory-check", ARG_BOOL, &t->no_memory_check, "skip the check, made before anything is built, that fsdp-plan's per-rank memory prediction for this run times the ranks on this host fits in what the host has available (MemAvailable, or a lower cgroup limit); a run predicted not to fit is otherwise refused with the numbers (exit 2). Not made with --device cuda, --offload-dir or fsdp-train's --eval-only", 1, 0, NULL},
        {"--config", ARG_STRING, &t->config_path, "read flags from this file, one 'flag value' a line (# comments); the command line overrides it", 1, 0, NULL},
    };
    memcpy(table, shared, sizeof shared);
}

cli_arg cli_training_flag(const cli_arg *table, const char *name) {
    for (int i = 0; i < CLI_TRAINING_NFLAGS; i++)
        if (strcmp(table[i].name, name) == 0) return table[i];
    FSDP_ASSERT(!"cli_training_flag: not a shared training flag");
    return table[0];
}

int cli_training_resolve_batch(const char *prog, cli_training_options *t, cli_fsdp_options *f, const cli_arg *args,
                               int nargs, int argc, char **argv, int world, int print) {
    int given_batch = cli_given(args, nargs, argc, argv, "--batch");
    if (f->deterministic)
        return cli_det_resolve(prog, print, f, given_batch, cli_given(args, nargs, argc, argv, "--grad-accum"),
                               t->no_sync, &t->batch, &t->global_batch, &t->grad_accum, world);
    return cli_batch_resolve(prog, print, given_batch, &t->batch, &t->global_batch, t->grad_accum, world);
}
