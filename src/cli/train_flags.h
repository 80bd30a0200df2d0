// train_flags.h: fsdp-train's options and its flag table, in one place for fsdp-train and for
// `fsdp-plan train` (which accepts exactly these flags, with the same defaults and help), so the
// planner cannot drift from the tool.
#pragma once
#include "cli/cli_args.h"
#include "cli/fsdp_flags.h"
#include "cli/model_config.h"
#include "cli/train_lora.h"
#include "cli/train_sample.h"
#include "core/threads.h"

typedef struct {
    int layers, d_model, heads, vocab, seq, max_seq, batch, global_batch, grad_accum, steps, seed, threads, warmup;
    int schedule, eval_every, eval_batches, collective_timeout, skip_nonfinite, no_sync;
    int eval_only;             // --eval-only: evaluate and/or generate from --init or --resume, no training
    int no_memory_check;       // --no-memory-check: skip the up-front memory check (memory_check.h)
    train_sample_options gen;  // --prompt --temperature --top-k --max-new-tokens (train_sample.h)
    cli_fsdp_options fsdp;  // the flags shared with fsdp-minimal
    train_lora_options lora;  // --lora-* (train_lora.h)
    float lr, min_lr, weight_decay, dropout, clip;
    const char *tokenizer_dir;  // --tokenizer: GPT-2 BPE files (data/tokenizer.h)
    const char *data_path, *val_path, *input_path, *init_path, *save_path, *dump_grads_path;
    const char *jsonl_path, *plot_path, *trace_path, *config_path;  // config_path: --config (cli_config_argv)
    fsdp_threads_choice thread_choice;  // set after the world starts (cli_threads_setup)
    cli_model_config config;            // what the files written record (model_config.h)
} train_options;

#define TRAIN_FLAGS_MAX 80  // room train_flags needs in its table
#define TRAIN_SUMMARY "Trains a GPT-2 model with FSDP and AdamW (plain process or under mpirun)."

// Sets o to fsdp-train's defaults and writes its flags (targets in o) to args[0..TRAIN_FLAGS_MAX);
// returns how many.
int train_flags(train_options *o, cli_arg *args);

// --global-batch G (sequences per optimizer step) sets --batch to G / (world x --grad-accum). Given
// with --batch, or not divisible, it prints one line naming the flags and values and returns -1;
// otherwise 0 (o->batch is then the per-rank micro-batch either way).
int train_resolve_batch(const char *prog, train_options *o, const cli_arg *args, int nargs, int argc, char **argv,
                        int world, int print);
