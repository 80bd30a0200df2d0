// train_lora.h: fsdp-train's LoRA flags (Hugging Face PEFT's LoraConfig on GPT-2 and Llama): attaching the
// adapters and freezing the base model, loading given adapters, and saving them alone (PEFT's
// adapter_model.safetensors layout) or merged into the base weights.
#pragma once
#include <stdio.h>

#include "fsdp/fsdp.h"
#include "nn/causal_lm.h"

typedef struct {
    int rank;             // --lora-rank (0: no adapters)
    float alpha;          // --lora-alpha (scale alpha / rank)
    float dropout;        // --lora-dropout
    const char *targets;  // --lora-targets, comma-separated projections
    const char *init;     // --lora-init FILE (PEFT layout)
    int merge_on_save;    // --lora-merge-on-save
} train_lora_options;

// PEFT's prefix of the adapter names in adapter_model.safetensors: "base_model.model." and the model's
// prefix in its *ForCausalLM (GPT-2: base_model.model.transformer.h.N..., Llama:
// base_model.model.model.layers.N...). prefix: (cap,)
void train_lora_prefix(const nn_lm *m, char *prefix, size_t cap);

// Checks the flags: the other LoRA flags need --lora-rank (given_*: whether the flag was on the command
// line), --lora-merge-on-save needs --save. Returns 0, or 2 after a one-line error on rank 0.
int train_lora_check(const char *prog, const train_lora_options *o, int given_alpha, int given_dropout,
                     int given_targets, const char *save_path, int rank);
// With --lora-rank: attaches the adapters to the model and freezes every other parameter (before
// fsdp_wrap); *targets (may be NULL) gets the architecture's target mask. Returns 0, or 2 after a one-line error on
// rank 0.
int train_lora_attach(const char *prog, const train_lora_options *o, nn_lm *m, unsigned *targets, int rank);
// --lora-init: the adapters' values from a PEFT-layout file (names with or without train_lora_prefix).
fsdp_status train_lora_load(const train_lora_options *o, const nn_lm *m, fsdp_state *fs);
// --save with adapters: the adapters alone as PEFT names (and, for a file named
// adapter_model.safetensors, PEFT's adapter_config.json beside it), or with --lora-merge-on-save the
// base weights with every adapter merged in (then the model's B are zero). Rank 0 prints what it wrote.
fsdp_status train_lora_save(const char *prog, const train_lora_options *o, fsdp_state *fs, const nn_lm *m,
                            const char *path, int rank);
