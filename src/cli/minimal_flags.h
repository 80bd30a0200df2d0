// minimal_flags.h: fsdp-minimal's options and its flag table, in one place for fsdp-minimal and for
// `fsdp-plan minimal` (which accepts exactly these flags, with the same defaults and help).
#pragma once
#include "cli/cli_args.h"
#include "cli/fsdp_flags.h"
#include "cli/model_config.h"

typedef struct {
    int layers, d_model, heads, ffn, seq, batch, global_batch, steps, seed, threads, grad_accum, no_sync;
    float dropout, lr, weight_decay, clip;
    const char *init_path, *input_path, *save_path, *dump_grads_path, *dump_output_path;
    const char *config_path;  // --config (cli_config_argv)
    int norm_first, activation, batch_first, causal;
    int no_memory_check;  // --no-memory-check: skip the up-front memory check (memory_check.h)
    cli_fsdp_options fsdp;  // the flags shared with fsdp-train
    cli_model_config config;  // what the files written record (model_config.h)
} minimal_options;

#define MINIMAL_FLAGS_MAX 64  // room minimal_flags needs in its table
#define MINIMAL_SUMMARY "Trains FSDP(nn.Sequential(TransformerEncoderLayer x L)) on loss mean(|model(x)|) with AdamW."

// Sets o to fsdp-minimal's defaults and writes its flags (targets in o) to args[0..MINIMAL_FLAGS_MAX);
// returns how many.
int minimal_flags(minimal_options *o, cli_arg *args);

// Resolves the batch for `world` ranks: --batch B is the per-rank micro-batch (a step sees
// world x --grad-accum x B sequences); --global-batch G sets B = G / (world x --grad-accum). Sets
// o->global_batch to the sequences per step either way. Both flags, or a G that does not divide,
// print one line naming the flags and values and return -1; otherwise 0.
int minimal_resolve_batch(const char *prog, minimal_options *o, const cli_arg *args, int nargs, int argc,
                          char **argv, int world, int print);
