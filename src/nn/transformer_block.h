// transformer_block.h: one transformer block, in the three forms we ship:
//  - torch.nn.TransformerEncoderLayer (post-LN by default or norm_first; relu or gelu; dropout after
//    attention, inside the FFN and after it; optional causal mask; seq-first or batch_first), and
//  - the Hugging Face GPT-2 block (pre-LN, causal, tanh-GELU, Conv1D weights, no dropout inside the MLP),
//  - the Hugging Face Llama decoder layer (LlamaDecoderLayer: pre-RMSNorm, grouped-query causal attention
//    with rotary embeddings, SwiGLU MLP down(silu(gate(x)) * up(x)); llama_block.c).
// The block owns its activation buffers for the (B, T) of the last forward; the caller owns scratch.
#pragma once
#include "nn/attention.h"
#include "nn/layernorm.h"
#include "nn/rmsnorm.h"

typedef fsdp_activation nn_activation;  // kernels.h: FSDP_ACT_RELU, FSDP_ACT_GELU (erf), FSDP_ACT_GELU_TANH

typedef struct {
    int d_model, n_heads, d_ff;
    float dropout;       // residual-branch dropouts (and the FFN's inner one when ffn_dropout)
    float attn_dropout;  // on attention probabilities
    nn_activation activation;
    int norm_first;      // pre-LN
    int causal;
    int batch_first;     // rows are (b, t) when set, (t, b) otherwise
    int ffn_dropout;     // dropout between activation and the second linear (torch: yes, GPT-2: no)
    float ln_eps;        // LayerNorm's eps; RMSNorm's (rms_norm_eps) in Llama's form
    // Llama's form (nn_block_init_llama; then norm_first, causal and batch_first are set, dropout 0)
    int llama;
    int kv_heads, head_dim;          // key/value heads (dividing n_heads), per-head width (hd)
    int qkv_bias, o_bias, mlp_bias;  // biases on q/k/v, on o_proj, on the MLP's three projections
} nn_block_config;

typedef struct nn_block_s {
    nn_block_config cfg;
    int index;  // position in the model: dropout streams and debug names
    nn_layernorm norm1, norm2;
    nn_mha attn;
    nn_linear fc1, fc2;    // Llama: gate_proj, down_proj
    nn_linear fc3;         // Llama: up_proj
    nn_rmsnorm rms1, rms2; // Llama: input_layernorm, post_attention_layernorm (norm1/norm2 unused)
    const float *rope_cos, *rope_sin;  // Llama: (>= T, head_dim/2) device, set by the model (not owned)
    // activations for the last forward (device memory); N = B*T rows
    struct nn_block_s *share;  // activation checkpointing: use this block's intermediate buffers (only
                               // `out` stays this block's own); NULL: own buffers
    int B, T;
    size_t capacity_rows, capacity_att;  // allocated sizes of the row buffers and of att
    fsdp_dev *dev;         // the device the buffers below were allocated from (nn_ctx.dev of the forward)
    int b16_storage;       // the buffers were made for nn_ctx.act_bf16 (block_b16): these three in bf16:
    fsdp_bf16 *ln1_b16, *ln2_b16, *act_b16;  // pre-LN ln1_out, ln2_out and act in bf16, those fp32
                                             // buffers then NULL (post-LN: act only; ln1_out is a residual)
    float *ln1_out;        // (N, C) norm1 output (post-LN: of r1; pre-LN: of x)
    float *ln1_mean, *ln1_rstd;  // (N,)
    float *qkv;            // (N, 3C); Llama: the planes q (N, H hd), k (N, KV hd), v (N, KV hd)
    float *att;            // (B, H, T) attention row statistics (log-sum-exp)
    float *attn_ctx;       // (N, C) attention output before out_proj (Llama: (N, H hd))
    float *r1;             // (N, C) x + dropout(out_proj's output)
    float *ln2_out;        // (N, C) pre-LN only (NULL post-LN): norm2(r1)
    float *ln2_mean, *ln2_rstd;  // (N,)
    float *f1;             // (N, F) fc1 output (Llama: gate_proj's)
    float *f3;             // (N, F) Llama: up_proj's output (NULL otherwise)
    float *act;            // (N, F) activation output after dropout
    float *r2;             // (N, C) post-LN only (NULL pre-LN): ln1_out + dropout(fc2's output)
    float *out;            // (N, C) block output
    // out_proj's and fc2's outputs, which backward does not read, are not kept: forward writes them
    // where a buffer is free until later in the same forward (out_proj's into out, which the block's
    // last step overwrites; fc2's into out pre-LN, into r2 post-LN, the residual add reading it in place)
} nn_block;

// The saved inputs of the layers after norm1 (in_proj; Llama: q/k/v_proj), norm2 (fc1; Llama: gate and
// up) and the activation (fc2), in whichever storage the block's buffers have
static inline nn_input nn_block_ln1_in(const nn_block *blk) {
    return blk->ln1_b16 ? nn_in_b16(blk->ln1_b16) : nn_in_f32(blk->ln1_out);
}
static inline nn_input nn_block_ln2_in(const nn_block *blk) {
    return blk->ln2_b16 ? nn_in_b16(blk->ln2_b16) : nn_in_f32(blk->ln2_out);
}
static inline nn_input nn_block_act_in(const nn_block *blk) {
    return blk->act_b16 ? nn_in_b16(blk->act_b16) : nn_in_f32(blk->act);
}

nn_block_config nn_encoder_layer_defaults(int d_model, int n_heads);  // torch defaults

// Registers parameters with TransformerEncoderLayer names under prefix ("0." ...).
void nn_block_init_encoder(nn_block *blk, nn_params *ps, const char *prefix, nn_block_config cfg, int index);
// Registers parameters with GPT-2 names under prefix ("h.0." ...); proj_std scales c_proj inits.
void nn_block_init_gpt2(nn_block *blk, nn_params *ps, const char *prefix, nn_block_config cfg, int index,
                        float init_std, float proj_std);
// Registers parameters with Hugging Face Llama names under prefix ("model.layers.0." ...):
// input_layernorm.weight, self_attn.{q,k,v,o}_proj.*, post_attention_layernorm.weight,
// mlp.{gate,up,down}_proj.*; cfg.llama set by the caller. Weights normal(0, init_std).
void nn_block_init_llama(nn_block *blk, nn_params *ps, const char *prefix, nn_block_config cfg, int index,
                         float init_std);
void nn_block_free(nn_block *blk);

// Floats of caller-provided scratch that backward needs for B*T rows.
size_t nn_block_scratch_floats(const nn_block_config *cfg, int B, int T);
// Allocates (and so first touches) the activation buffers a forward of (B, T) in ctx uses, ahead of it
fsdp_status nn_block_reserve(const nn_ctx *ctx, nn_block *blk, int B, int T);

// inp: (N, C); result in blk->out (N, C). inp must stay unchanged until backward.
fsdp_status nn_block_forward(const nn_ctx *ctx, nn_block *blk, const float *inp, int B, int T);
// dinp: (N, C) overwritten (must not alias dout); scratch: nn_block_scratch_floats()
void nn_block_backward(const nn_ctx *ctx, nn_block *blk, float *dinp, const float *dout, const float *inp,
                       float *scratch);
