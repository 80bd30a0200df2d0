// attention.h: torch.nn.MultiheadAttention (self-attention, packed in_proj) and Hugging Face
// GPT2Attention (c_attn/c_proj in Conv1D layout): input projection, scaled dot-product attention
// with an optional causal mask and dropout on the probabilities, output projection.
#pragma once
#include "nn/linear.h"
#include "nn/nn_ctx.h"

typedef struct {
    nn_linear in_proj;   // C -> 3C (q | k | v); unused in Llama's form
    nn_linear out_proj;  // C -> C (Llama's o_proj: H hd -> C)
    int C, H;
    int causal;
    float dropout;       // on attention probabilities
    // Llama's form (nn_mha_init_llama): grouped-query attention with separate projections writing the
    // planes of qkv (fsdp_attention_dims.planar) and the rotary embedding on q and k
    nn_linear q_proj, k_proj, v_proj;  // C -> H hd, C -> KV hd, C -> KV hd
    int kv_heads;                      // KV (0: not Llama's form)
    int head_dim;                      // hd
} nn_mha;

// torch names: <prefix>in_proj_weight, <prefix>in_proj_bias, <prefix>out_proj.weight/.bias,
// xavier-uniform in_proj_weight and zero biases as MultiheadAttention._reset_parameters.
void nn_mha_init_torch(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, int causal, float dropout);
// Hugging Face names: <prefix>c_attn.weight (C, 3C), c_attn.bias, c_proj.weight (C, C), c_proj.bias
void nn_mha_init_gpt2(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, float dropout,
                      float init_std, float proj_std);

// Hugging Face LlamaAttention names: <prefix>q_proj.weight (H hd, C), k_proj.weight (KV hd, C),
// v_proj.weight (KV hd, C), o_proj.weight (C, H hd); biases on q/k/v when qkv_bias (Qwen2, Llama's
// attention_bias) and on o_proj when o_bias; normal(0, init_std) weights and zero biases as HF's _init_weights
void nn_mha_init_llama(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, int KV, int hd, int qkv_bias,
                       int o_bias, float dropout, float init_std);

// Buffers (N = B*T rows, in the row order given by dims): inp, out: (N, C); qkv: (N, 3C);
// att: (B, H, T) the attention kernel's row statistics (log-sum-exp); ctx_out: (N, C), read again by backward
fsdp_status nn_mha_forward(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims, float *out,
                           float *qkv, float *att, float *ctx_out, nn_input inp);
// dinp (N, C): overwritten, or accumulated when accumulate_dinp. scratch_c: (N, C); scratch_3c: (N, 3C)
void nn_mha_backward(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims, float *dinp,
                     int accumulate_dinp, const float *dout, nn_input inp, const float *qkv,
                     const float *att, const float *ctx_out, float *scratch_c, float *scratch_3c);

// Llama's form (llama_attention.c). rope_cos, rope_sin: (>= T, hd/2) device, the rotary angles of
// positions 0..; qkv: the planes q (N, H hd), k (N, KV hd), v (N, KV hd), with q and k rotated; att:
// (B, H, T); ctx_out: (N, H hd); out: (N, C). dims: planar, kv_heads = KV, C = H hd.
fsdp_status nn_mha_forward_llama(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims,
                                 const float *rope_cos, const float *rope_sin, float *out, float *qkv, float *att,
                                 float *ctx_out, nn_input inp);
// dinp (N, C) overwritten; scratch_c: (N, H hd); scratch_qkv: (N, (H + 2 KV) hd)
void nn_mha_backward_llama(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims,
                           const float *rope_cos, const float *rope_sin, float *dinp, const float *dout, nn_input inp,
                           const float *qkv, const float *att, const float *ctx_out, float *scratch_c,
                           float *scratch_qkv);
