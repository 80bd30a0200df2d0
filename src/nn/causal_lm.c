// causal_lm.c: one interface over GPT-2 and the Llama family (the dispatch on the architecture).
#include "nn/causal_lm.h"

#include <string.h>

fsdp_status nn_lm_create_gpt2(nn_lm *m, nn_gpt2_config cfg) {
    memset(m, 0, sizeof *m);
    m->arch = NN_LM_GPT2;
    return nn_gpt2_create(&m->gpt2, cfg);
}

fsdp_status nn_lm_create_llama(nn_lm *m, nn_llama_config cfg) {
    memset(m, 0, sizeof *m);
    m->arch = NN_LM_LLAMA;
    return nn_llama_create(&m->llama, cfg);
}

void nn_lm_free(nn_lm *m) {
    if (m->arch == NN_LM_LLAMA) nn_llama_free(&m->llama);
    else nn_gpt2_free(&m->gpt2);
}

#define IS_LLAMA(m) ((m)->arch == NN_LM_LLAMA)

nn_params *nn_lm_params(nn_lm *m) { return IS_LLAMA(m) ? &m->llama.params : &m->gpt2.params; }
const nn_params *nn_lm_params_const(const nn_lm *m) { return IS_LLAMA(m) ? &m->llama.params : &m->gpt2.params; }
nn_sequential *nn_lm_blocks(nn_lm *m) { return IS_LLAMA(m) ? &m->llama.blocks : &m->gpt2.blocks; }
const char *nn_lm_block_type(const nn_lm *m) { return IS_LLAMA(m) ? "LlamaDecoderLayer" : "GPT2Block"; }
const char *nn_lm_block_prefix(const nn_lm *m) { return IS_LLAMA(m) ? "model.layers.%d." : "h.%d."; }
const char *nn_lm_model_type(const nn_lm *m) { return IS_LLAMA(m) ? "llama" : "gpt2"; }
const char *nn_lm_name(const nn_lm *m) { return IS_LLAMA(m) ? "Llama" : "GPT-2"; }
int nn_lm_vocab(const nn_lm *m) { return IS_LLAMA(m) ? m->llama.cfg.vocab_size : m->gpt2.cfg.vocab_size; }
int nn_lm_layers(const nn_lm *m) { return IS_LLAMA(m) ? m->llama.cfg.n_layer : m->gpt2.cfg.n_layer; }
const char *nn_lm_hf_prefix(const nn_lm *m) { return IS_LLAMA(m) ? "" : "transformer."; }
int nn_lm_conv1d(const nn_lm *m) { return !IS_LLAMA(m); }
nn_param *nn_lm_embedding(nn_lm *m) { return IS_LLAMA(m) ? m->llama.embed.weight : m->gpt2.wte.weight; }
nn_param *nn_lm_head(nn_lm *m) { return IS_LLAMA(m) ? m->llama.lm_head : m->gpt2.wte.weight; }

const nn_lora *nn_lm_adapters(const nn_lm *m, int *n) {
    *n = IS_LLAMA(m) ? m->llama.n_lora : m->gpt2.n_lora;
    return IS_LLAMA(m) ? m->llama.lora : m->gpt2.lora;
}

fsdp_status nn_lm_lora_targets(const nn_lm *m, const char *list, unsigned *mask) {
    return IS_LLAMA(m) ? nn_llama_lora_targets(list, mask) : nn_gpt2_lora_targets(list, mask);
}

const char *nn_lm_lora_target_name(const nn_lm *m, int i) {
    return IS_LLAMA(m) ? nn_llama_lora_target_name(i) : nn_gpt2_lora_target_name(i);
}

fsdp_status nn_lm_add_lora(nn_lm *m, unsigned targets, int r, float alpha, float dropout) {
    return IS_LLAMA(m) ? nn_llama_add_lora(&m->llama, targets, r, alpha, dropout)
                       : nn_gpt2_add_lora(&m->gpt2, targets, r, alpha, dropout);
}

fsdp_status nn_lm_reserve(const nn_ctx *ctx, nn_lm *m, int B, int T) {
    return IS_LLAMA(m) ? nn_llama_reserve(ctx, &m->llama, B, T) : nn_gpt2_reserve(ctx, &m->gpt2, B, T);
}

fsdp_status nn_lm_forward(const nn_ctx *ctx, nn_lm *m, const int32_t *idx, const int32_t *targets, int B, int T) {
    return IS_LLAMA(m) ? nn_llama_forward(ctx, &m->llama, idx, targets, B, T)
                       : nn_gpt2_forward(ctx, &m->gpt2, idx, targets, B, T);
}

fsdp_status nn_lm_backward(const nn_ctx *ctx, nn_lm *m, float dloss) {
    return IS_LLAMA(m) ? nn_llama_backward(ctx, &m->llama, dloss) : nn_gpt2_backward(ctx, &m->gpt2, dloss);
}

const double *nn_lm_loss(const nn_lm *m) { return IS_LLAMA(m) ? m->llama.loss : m->gpt2.loss; }
const float *nn_lm_logits(const nn_lm *m) { return IS_LLAMA(m) ? m->llama.logits : m->gpt2.logits; }
