// minimal_flags.h: fsdp-minimal's options and its flag table, in one place for fsdp-minimal and for
// `fsdp-plan minimal` (which accepts exactly these flags, with the same defaults and help).
#pragma once
#include "cli/cli_args.h"
#include "cli/fsdp_flags.h"
#include "cli/model_config.h"
#include "cli/training_flags.h"

typedef struct {
    int layers, d_model, heads, ffn, seq;
    float dropout;
    const char *input_path, *dump_output_path;
    int norm_first, activation, batch_first, causal;
    cli_training_options training;  // --steps --lr --batch ...: the training flags shared with fsdp-train
    cli_fsdp_options fsdp;  // the FSDP flags shared with fsdp-train
    cli_model_config config;  // what the files written record (model_config.h)
} minimal_options;

#define MINIMAL_FLAGS_MAX 64  // room minimal_flags needs in its table
#define MINIMAL_SUMMARY "Trains FSDP(nn.Sequential(TransformerEncoderLayer x L)) on loss mean(|model(x)|) with AdamW."

// Sets o to fsdp-minimal's defaults and writes its flags (targets in o) to args[0..MINIMAL_FLAGS_MAX);
// returns how many.
int minimal_flags(minimal_options *o, cli_arg *args);
