// train_flags.h: fsdp-train's options and its flag table, in one place for fsdp-train and for
// `fsdp-plan train` (which accepts exactly these flags, with the same defaults and help), so the
// planner cannot drift from the tool.
#pragma once
#include <stdint.h>

#include "cli/cli_args.h"
#include "cli/fsdp_flags.h"
#include "cli/model_config.h"
#include "cli/train_lora.h"
#include "cli/train_sample.h"
#include "cli/training_flags.h"
#include "core/threads.h"

typedef struct {
    int layers, d_model, heads, vocab, seq, max_seq, warmup;
    int arch;                  // --arch: 0 GPT-2, 1 Llama (the model_type of config.json / the files)
    // the Llama family's shape (--arch llama): --kv-heads --head-dim --d-ff (0: their defaults),
    // --rope-theta --rms-eps --tie-embeddings --attention-bias --qkv-bias --mlp-bias --rope-scaling
    int kv_heads, head_dim, d_ff, tie_embeddings, attention_bias, qkv_bias, mlp_bias;
    float rope_theta, rms_eps;
    const char *rope_scaling;  // "llama3:FACTOR,LOW,HIGH,ORIGINAL" or NULL
    int schedule, eval_every, eval_batches, collective_timeout, skip_nonfinite;
    int eval_only;             // --eval-only: evaluate and/or generate from --init or --resume, no training
    train_sample_options gen;  // --prompt --temperature --top-k --max-new-tokens (train_sample.h)
    cli_training_options training;  // --steps --lr --batch ...: the training flags shared with fsdp-minimal
    cli_fsdp_options fsdp;  // the FSDP flags shared with fsdp-minimal
    train_lora_options lora;  // --lora-* (train_lora.h)
    float min_lr, dropout;
    const char *tokenizer_dir;  // --tokenizer: GPT-2 BPE files (data/tokenizer.h)
    const char *data_path, *val_path, *input_path;
    const char *jsonl_path, *plot_path, *trace_path;
    fsdp_threads_choice thread_choice;  // set after the world starts (cli_threads_setup)
    cli_model_config config;            // what the files written record (model_config.h)
    int save_dtype;                     // --save-dtype: 0 fp32, 1 bf16 (a directory --save: train_hf.h)
    const char *save_shard_size;        // --save-shard-size, as given ("5GB")
    uint64_t save_shard_bytes;          // ... parsed (train_hf_prepare)
} train_options;

#define TRAIN_FLAGS_MAX 96  // room train_flags needs in its table
#define TRAIN_SUMMARY "Trains a GPT-2 or Llama-family model with FSDP and AdamW (plain process or under mpirun)."

// Sets o to fsdp-train's defaults and writes its flags (targets in o) to args[0..TRAIN_FLAGS_MAX);
// returns how many.
int train_flags(train_options *o, cli_arg *args);
