// causal_lm.h: the language models fsdp-train trains, behind one interface: GPT-2 (gpt2.h) and the Llama
// family (llama.h). The tools hold an nn_lm and never test its architecture beyond choosing it.
#pragma once
#include "nn/gpt2.h"
#include "nn/llama.h"

typedef enum { NN_LM_GPT2, NN_LM_LLAMA } nn_lm_arch;

typedef struct {
    nn_lm_arch arch;
    nn_gpt2 gpt2;    // arch NN_LM_GPT2
    nn_llama llama;  // arch NN_LM_LLAMA
} nn_lm;

fsdp_status nn_lm_create_gpt2(nn_lm *m, nn_gpt2_config cfg);
fsdp_status nn_lm_create_llama(nn_lm *m, nn_llama_config cfg);
void nn_lm_free(nn_lm *m);

nn_params *nn_lm_params(nn_lm *m);
const nn_params *nn_lm_params_const(const nn_lm *m);
nn_sequential *nn_lm_blocks(nn_lm *m);
const char *nn_lm_block_type(const nn_lm *m);    // "GPT2Block", "LlamaDecoderLayer" (auto-wrap's class name)
const char *nn_lm_block_prefix(const nn_lm *m);  // "h.%d.", "model.layers.%d."
const char *nn_lm_model_type(const nn_lm *m);    // "gpt2", "llama" (config.json's model_type)
const char *nn_lm_name(const nn_lm *m);          // "GPT-2", "Llama"
int nn_lm_vocab(const nn_lm *m);
int nn_lm_layers(const nn_lm *m);
// The adapters attached (nn_lora, n of them) and the input embedding's weight
const nn_lora *nn_lm_adapters(const nn_lm *m, int *n);
nn_param *nn_lm_embedding(nn_lm *m);
// The LM head's weight (V, C): GPT-2's tied wte.weight, Llama's lm_head.weight (embed_tokens when tied)
nn_param *nn_lm_head(nn_lm *m);
// The prefix of the model's names in its Hugging Face *ForCausalLM state_dict: "transformer." for
// GPT2LMHeadModel (its files may carry it), "" for the Llama family (its names are already whole)
const char *nn_lm_hf_prefix(const nn_lm *m);
// Whether the blocks' projections store their weights (in, out) (GPT-2's Conv1D) instead of Linear's
int nn_lm_conv1d(const nn_lm *m);

// LoRA: the target mask of a comma-separated list of the architecture's target names; the name of
// target bit i ("attn.c_attn", "self_attn.q_proj", ..., NULL past the last); attaching adapters
fsdp_status nn_lm_lora_targets(const nn_lm *m, const char *list, unsigned *mask);
const char *nn_lm_lora_target_name(const nn_lm *m, int i);
fsdp_status nn_lm_add_lora(nn_lm *m, unsigned targets, int r, float alpha, float dropout);

fsdp_status nn_lm_reserve(const nn_ctx *ctx, nn_lm *m, int B, int T);
// idx, targets: (B, T) host token ids; the mean cross-entropy goes to nn_lm_loss's device double
fsdp_status nn_lm_forward(const nn_ctx *ctx, nn_lm *m, const int32_t *idx, const int32_t *targets, int B, int T);
fsdp_status nn_lm_backward(const nn_ctx *ctx, nn_lm *m, float dloss);
const double *nn_lm_loss(const nn_lm *m);   // (1,) device
const float *nn_lm_logits(const nn_lm *m);  // (B*T, V) device: the last forward's logits
