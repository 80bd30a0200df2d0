// minimal_flags.c: fsdp-minimal's defaults and flags (minimal_flags.h).
#include "cli/minimal_flags.h"

#include <string.h>


int minimal_flags(minimal_options *o, cli_arg *args) {
    memset(o, 0, sizeof *o);
    o->layers = 4, o->d_model = 128, o->heads = 4, o->ffn = 2048, o->seq = 8, o->dropout = 0.1f;
    o->training.batch = 16, o->training.steps = 5, o->training.grad_accum = 1, o->training.lr = 1e-4f;
    o->training.weight_decay = 0.01f;
    cli_fsdp_defaults(&o->fsdp);
    cli_arg common[CLI_TRAINING_NFLAGS];  // the flags shared with fsdp-train, placed below in this tool's order
    cli_training_flags(&o->training, common);
    const cli_arg own[] = {
        {"--layers", ARG_INT, &o->layers, "number of TransformerEncoderLayers", 1, 1e6, NULL},
        {"--d-model", ARG_INT, &o->d_model, "model width (d_model)", 1, 1e6, NULL},
        {"--heads", ARG_INT, &o->heads, "attention heads (must divide d_model)", 1, 1e6, NULL},
        {"--ffn", ARG_INT, &o->ffn, "feed-forward width (dim_feedforward)", 1, 1e7, NULL},
        {"--dropout", ARG_FLOAT, &o->dropout, "dropout probability", 0, 0.999, NULL},
        {"--seq", ARG_INT, &o->seq, "sequence length", 1, 1e6, NULL},
        cli_training_flag(common, "--batch"),
        cli_training_flag(common, "--global-batch"),
        cli_training_flag(common, "--steps"),
        cli_training_flag(common, "--lr"),
        cli_training_flag(common, "--weight-decay"),
        cli_training_flag(common, "--seed"),
        cli_training_flag(common, "--init"),
        {"--input", ARG_STRING, &o->input_path, "global input (safetensors with tensor x [seq, global batch, d_model])", 1, 0, NULL},
        cli_training_flag(common, "--save"),
        cli_training_flag(common, "--grad-accum"),
        cli_training_flag(common, "--no-sync"),
        cli_training_flag(common, "--clip-grad-norm"),
        {"--norm-first", ARG_BOOL, &o->norm_first, "pre-LN layers (norm_first=True)", 1, 0, NULL},
        {"--activation", ARG_CHOICE, &o->activation, "FFN activation", 1, 0, "relu|gelu"},
        {"--batch-first", ARG_BOOL, &o->batch_first, "x is [batch, seq, d_model] (batch_first=True)", 1, 0, NULL},
        {"--causal", ARG_BOOL, &o->causal, "causal attention mask", 1, 0, NULL},
        cli_training_flag(common, "--dump-grads"),
        {"--dump-output", ARG_STRING, &o->dump_output_path, "write the first step's model output (tensor y) here", 1, 0, NULL},
        cli_training_flag(common, "--threads"),
        cli_training_flag(common, "--no-memory-check"),
        cli_training_flag(common, "--config"),
    };
    int n = (int)(sizeof own / sizeof *own);
    _Static_assert(sizeof own / sizeof *own + CLI_OPTIMIZER_NFLAGS + CLI_FSDP_NFLAGS <= MINIMAL_FLAGS_MAX, "MINIMAL_FLAGS_MAX too small");
    for (int i = 0; i < n; i++) args[i] = own[i];
    n = cli_training_add_optimizer_flags(common, args, n);
    return cli_fsdp_add_flags(args, n, &o->fsdp);
}
