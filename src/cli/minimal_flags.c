// minimal_flags.c: fsdp-minimal's defaults and flags (minimal_flags.h).
#include "cli/minimal_flags.h"

#include <string.h>

#include "cli/cli_threads.h"  // CLI_THREADS_MAX

int minimal_flags(minimal_options *o, cli_arg *args) {
    memset(o, 0, sizeof *o);
    o->layers = 4, o->d_model = 128, o->heads = 4, o->ffn = 2048, o->seq = 8, o->batch = 16, o->steps = 5;
    o->seed = 0, o->threads = 0, o->grad_accum = 1, o->dropout = 0.1f, o->lr = 1e-4f, o->weight_decay = 0.01f;
    cli_fsdp_defaults(&o->fsdp);
    const cli_arg own[] = {
        {"--layers", ARG_INT, &o->layers, "number of TransformerEncoderLayers", 1, 1e6, NULL},
        {"--d-model", ARG_INT, &o->d_model, "model width (d_model)", 1, 1e6, NULL},
        {"--heads", ARG_INT, &o->heads, "attention heads (must divide d_model)", 1, 1e6, NULL},
        {"--ffn", ARG_INT, &o->ffn, "feed-forward width (dim_feedforward)", 1, 1e7, NULL},
        {"--dropout", ARG_FLOAT, &o->dropout, "dropout probability", 0, 0.999, NULL},
        {"--seq", ARG_INT, &o->seq, "sequence length", 1, 1e6, NULL},
        {"--batch", ARG_INT, &o->batch, "per-rank micro-batch (sequences); a step sees world x --grad-accum x --batch", 1, 1e6, NULL},
        {"--global-batch", ARG_INT, &o->global_batch, "sequences per optimizer step over all ranks (the global x's batch): sets --batch to N / (world x --grad-accum), which must divide it; not with --batch (0: use --batch)", 0, 1e9, NULL},
        {"--steps", ARG_INT, &o->steps, "optimizer steps in total (a --resume continues up to it)", 0, 1e9, NULL},
        {"--lr", ARG_FLOAT, &o->lr, "AdamW learning rate", 0, 1e3, NULL},
        {"--weight-decay", ARG_FLOAT, &o->weight_decay, "AdamW weight decay", 0, 1e3, NULL},
        {"--seed", ARG_INT, &o->seed, "seed for init, input and dropout", 0, 2147483647, NULL},
        {"--init", ARG_STRING, &o->init_path, "initial weights (safetensors, PyTorch names)", 1, 0, NULL},
        {"--input", ARG_STRING, &o->input_path, "global input (safetensors with tensor x [seq, global batch, d_model])", 1, 0, NULL},
        {"--save", ARG_STRING, &o->save_path, "write the full state dict here after the last step (rank 0, which prints what it wrote)", 1, 0, NULL},
        {"--grad-accum", ARG_INT, &o->grad_accum, "micro-steps per optimizer step", 1, 1e6, NULL},
        {"--no-sync", ARG_BOOL, &o->no_sync, "accumulate unsharded gradients locally and reduce once per step (no_sync on all but the last micro-step)", 1, 0, NULL},
        {"--clip-grad-norm", ARG_FLOAT, &o->clip, "clip gradients to this global L2 norm (0: off); the log shows the norm", 0, 1e9, NULL},
        {"--norm-first", ARG_BOOL, &o->norm_first, "pre-LN layers (norm_first=True)", 1, 0, NULL},
        {"--activation", ARG_CHOICE, &o->activation, "FFN activation", 1, 0, "relu|gelu"},
        {"--batch-first", ARG_BOOL, &o->batch_first, "x is [batch, seq, d_model] (batch_first=True)", 1, 0, NULL},
        {"--causal", ARG_BOOL, &o->causal, "causal attention mask", 1, 0, NULL},
        {"--dump-grads", ARG_STRING, &o->dump_grads_path, "write the first step's full parameter gradients (after clipping) here", 1, 0, NULL},
        {"--dump-output", ARG_STRING, &o->dump_output_path, "write the first step's model output (tensor y) here", 1, 0, NULL},
        {"--threads", ARG_INT, &o->threads, "OpenMP threads per rank (0: OMP_NUM_THREADS, else the affinity cores / ranks sharing them)", 0, CLI_THREADS_MAX, NULL},
        {"--no-memory-check", ARG_BOOL, &o->no_memory_check, "skip the check, made before anything is built, that fsdp-plan's per-rank memory prediction for this run times the ranks on this host fits in what the host has available (MemAvailable, or a lower cgroup limit); a run predicted not to fit is otherwise refused with the numbers (exit 2). Not made with --device cuda or --offload-dir", 1, 0, NULL},
        {"--config", ARG_STRING, &o->config_path, "read flags from this file, one 'flag value' a line (# comments); the command line overrides it", 1, 0, NULL},
    };
    int n = (int)(sizeof own / sizeof *own);
    _Static_assert(sizeof own / sizeof *own + CLI_FSDP_NFLAGS <= MINIMAL_FLAGS_MAX, "MINIMAL_FLAGS_MAX too small");
    for (int i = 0; i < n; i++) args[i] = own[i];
    return cli_fsdp_add_flags(args, n, &o->fsdp);
}

int minimal_resolve_batch(const char *prog, minimal_options *o, const cli_arg *args, int nargs, int argc,
                          char **argv, int world, int print) {
    if (o->fsdp.deterministic)
        return cli_det_resolve(prog, print, &o->fsdp, cli_given(args, nargs, argc, argv, "--batch"),
                               cli_given(args, nargs, argc, argv, "--grad-accum"), o->no_sync, &o->batch,
                               &o->global_batch, &o->grad_accum, world);
    return cli_batch_resolve(prog, print, cli_given(args, nargs, argc, argv, "--batch"), &o->batch, &o->global_batch,
                             o->grad_accum, world);
}
