// llama.h: the Llama family's causal language model as Hugging Face's LlamaForCausalLM computes it
// (also Mistral without sliding windows and Qwen2: the same architecture with other biases), with its
// state_dict names: model.embed_tokens.weight (V, C), model.layers.<i>.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}.*, model.norm.weight,
// lm_head.weight (V, C) unless tied to the embedding (tie_word_embeddings).
#pragma once
#include "nn/embedding.h"
#include "nn/lora.h"
#include "nn/rmsnorm.h"
#include "nn/sequential.h"

// LoRA targets: PEFT's target_modules names for Llama, bit i = llama_lora_sites[i]
enum {
    LLAMA_LORA_Q = 1, LLAMA_LORA_K = 2, LLAMA_LORA_V = 4, LLAMA_LORA_O = 8,
    LLAMA_LORA_GATE = 16, LLAMA_LORA_UP = 32, LLAMA_LORA_DOWN = 64,
};

typedef struct {
    int vocab_size;      // V
    int max_seq;         // max_position_embeddings: the rotary table's positions
    int n_layer;         // num_hidden_layers
    int n_embd;          // hidden_size C
    int n_head;          // num_attention_heads H
    int n_kv_head;       // num_key_value_heads KV (dividing H)
    int head_dim;        // hd (Hugging Face: head_dim, default C / H)
    int d_ff;            // intermediate_size F
    float rms_eps;       // rms_norm_eps
    double rope_theta;   // rope_theta (10000)
    // rope_scaling {"rope_type": "llama3", ...} (Llama 3.1+); rope_llama3 0: none
    int rope_llama3;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_seq;  // original_max_position_embeddings
    int tie_embeddings;         // tie_word_embeddings: lm_head is embed_tokens
    int qkv_bias, o_bias, mlp_bias;  // attention_bias sets both of the first two; Qwen2: qkv only
    float attn_dropout;         // attention_dropout
    float init_std;             // initializer_range (0.02)
} nn_llama_config;

typedef struct {
    nn_llama_config cfg;
    nn_params params;
    nn_embedding embed;      // model.embed_tokens
    nn_sequential blocks;    // model.layers
    nn_rmsnorm norm;         // model.norm
    nn_param *lm_head;       // (V, C) lm_head.weight, or embed.weight when tied
    nn_lora *lora;           // (n_lora,) adapters attached by nn_llama_add_lora, or NULL
    int n_lora;
    float *rope_cos_host, *rope_sin_host;  // (max_seq, hd/2) the rotary angles' cos and sin, host
    // activations of the last forward (N = B*T), device memory of `dev`
    int B, T;
    size_t capacity_rows;
    fsdp_dev *dev;
    float *rope_cos, *rope_sin;  // (max_seq, hd/2) device copies of the tables
    int32_t *idx, *targets;  // (N,)
    float *emb;              // (N, C)
    float *norm_out;         // (N, C)
    float *norm_rstd;        // (N,)
    float *logits;           // (N, V); then dlogits in backward
    float *ce_stats;         // (N, 2)
    float *losses;           // (N,)
    float *dx, *demb;        // (N, C)
    double *loss;            // (1,) device: the mean cross-entropy of the last forward
} nn_llama;

// The rotary angles' inverse frequencies: inv_freq (hd/2,) as Hugging Face's default rope
// (1 / theta^(2i / hd)), with the llama3 rope_scaling applied when cfg->rope_llama3; in double
void nn_llama_inv_freq(const nn_llama_config *cfg, double *inv_freq);
fsdp_status nn_llama_create(nn_llama *m, nn_llama_config cfg);
void nn_llama_free(nn_llama *m);
// The target mask of a comma-separated list of PEFT target names (q_proj, k_proj, v_proj, o_proj,
// gate_proj, up_proj, down_proj); FSDP_ERR_INVALID_ARG naming the first name that is not one
fsdp_status nn_llama_lora_targets(const char *list, unsigned *mask);
const char *nn_llama_lora_target_name(int i);  // "self_attn.q_proj" for bit 0, ..., NULL past the last
// Attaches rank-r adapters to every targeted projection of every layer, registering
// model.layers.<i>.<target>.lora_A.weight / lora_B.weight. Once, before fsdp_wrap.
fsdp_status nn_llama_add_lora(nn_llama *m, unsigned targets, int r, float alpha, float dropout);
fsdp_status nn_llama_reserve(const nn_ctx *ctx, nn_llama *m, int B, int T);
// idx, targets: (B, T) host token ids in [0, V); the mean cross-entropy goes to the device double m->loss
fsdp_status nn_llama_forward(const nn_ctx *ctx, nn_llama *m, const int32_t *idx, const int32_t *targets, int B, int T);
fsdp_status nn_llama_backward(const nn_ctx *ctx, nn_llama *m, float dloss);
