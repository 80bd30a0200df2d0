// gpt2.h: the GPT-2 language model with Hugging Face names and layouts: wte.weight (V, C),
// wpe.weight (maxT, C), h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.*
// (Conv1D weights stored (in, out)), ln_f.*; the LM head is tied to wte.
#pragma once
#include "nn/embedding.h"
#include "nn/lora.h"
#include "nn/sequential.h"

// LoRA targets: the block's projections (PEFT's target_modules for GPT-2; "c_proj" names both)
enum {
    GPT2_LORA_C_ATTN = 1,       // attn.c_attn
    GPT2_LORA_ATTN_C_PROJ = 2,  // attn.c_proj
    GPT2_LORA_C_FC = 4,         // mlp.c_fc
    GPT2_LORA_MLP_C_PROJ = 8,   // mlp.c_proj
};

typedef struct {
    int vocab_size;   // V
    int max_seq;      // n_positions
    int n_layer, n_head, n_embd;
    float dropout;    // embedding, residual and attention dropout (HF: embd_pdrop = resid_pdrop = attn_pdrop)
    float ln_eps;     // 1e-5
} nn_gpt2_config;

typedef struct {
    nn_gpt2_config cfg;
    nn_params params;
    nn_embedding wte, wpe;
    nn_sequential blocks;
    nn_layernorm ln_f;
    nn_lora *lora;           // (n_lora,) adapters attached by nn_gpt2_add_lora, or NULL
    int n_lora;
    // activations of the last forward (N = B*T), device memory of `dev`
    int B, T;
    size_t capacity_rows;
    fsdp_dev *dev;           // the device the buffers below were allocated from (nn_ctx.dev of the forward)
    int32_t *idx, *targets;  // (N,) device copies of the caller's arrays
    float *emb;              // (N, C) wte + wpe (after dropout)
    float *lnf_out;          // (N, C)
    float *lnf_mean, *lnf_rstd;  // (N,)
    float *logits;           // (N, V); then overwritten by dlogits in backward
    float *ce_stats;         // (N, 2) the cross-entropy's row statistics (kernels.h)
    float *losses;           // (N,)
    float *dx;               // (N, C)
    float *demb;             // (N, C)
    double *loss;            // (1,) device: the mean cross-entropy of the last forward (fsdp_dev_read it)
} nn_gpt2;

fsdp_status nn_gpt2_create(nn_gpt2 *m, nn_gpt2_config cfg);
// The target mask of a comma-separated list of target names (c_attn, c_proj, c_fc, attn.c_proj,
// mlp.c_proj); FSDP_ERR_INVALID_ARG naming the first name that is not a projection.
fsdp_status nn_gpt2_lora_targets(const char *list, unsigned *mask);
// The layer name of target bit i ("attn.c_attn" for GPT2_LORA_C_ATTN = 1 << 0, ...), NULL past the last.
const char *nn_gpt2_lora_target_name(int i);
// Attaches a rank-r adapter (lora.h) to every targeted projection of every block, registering
// h.<i>.<target>.lora_A.weight / lora_B.weight (block order, then target order). Once, before fsdp_wrap.
fsdp_status nn_gpt2_add_lora(nn_gpt2 *m, unsigned targets, int r, float alpha, float dropout);
void nn_gpt2_free(nn_gpt2 *m);
// Allocates (and first touches) the activations a forward and backward of (B, T) in ctx use, ahead of
// the first step: the model's own buffers and its blocks' (nn_sequential_reserve)
fsdp_status nn_gpt2_reserve(const nn_ctx *ctx, nn_gpt2 *m, int B, int T);
// idx, targets: (B, T) token ids in [0, V), host memory (validated here, then copied to m->idx and
// m->targets on ctx->stream); the mean cross-entropy goes to the device double m->loss
fsdp_status nn_gpt2_forward(const nn_ctx *ctx, nn_gpt2 *m, const int32_t *idx, const int32_t *targets,
                            int B, int T);
// gradients of m->loss * dloss accumulated into the parameters' grads
fsdp_status nn_gpt2_backward(const nn_ctx *ctx, nn_gpt2 *m, float dloss);
