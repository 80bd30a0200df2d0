// attention.h: torch.nn.MultiheadAttention (self-attention, packed in_proj) and Hugging Face
// GPT2Attention (c_attn/c_proj in Conv1D layout): input projection, scaled dot-product attention
// with an optional causal mask and dropout on the probabilities, output projection.
#pragma once
#include "nn/linear.h"
#include "nn/nn_ctx.h"

typedef struct {
    nn_linear in_proj;   // C -> 3C (q | k | v)
    nn_linear out_proj;  // C -> C
    int C, H;
    int causal;
    float dropout;       // on attention probabilities
} nn_mha;

// torch names: <prefix>in_proj_weight, <prefix>in_proj_bias, <prefix>out_proj.weight/.bias,
// xavier-uniform in_proj_weight and zero biases as MultiheadAttention._reset_parameters.
void nn_mha_init_torch(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, int causal, float dropout);
// Hugging Face names: <prefix>c_attn.weight (C, 3C), c_attn.bias, c_proj.weight (C, C), c_proj.bias
void nn_mha_init_gpt2(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, float dropout,
                      float init_std, float proj_std);

// Buffers (N = B*T rows, in the row order given by dims): inp, out: (N, C); qkv: (N, 3C);
// att: (B, H, T) the attention kernel's row statistics (log-sum-exp); ctx_out: (N, C), read again by backward
fsdp_status nn_mha_forward(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims, float *out,
                           float *qkv, float *att, float *ctx_out, nn_input inp);
// dinp (N, C): overwritten, or accumulated when accumulate_dinp. scratch_c: (N, C); scratch_3c: (N, 3C)
void nn_mha_backward(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims, float *dinp,
                     int accumulate_dinp, const float *dout, nn_input inp, const float *qkv,
                     const float *att, const float *ctx_out, float *scratch_c, float *scratch_3c);
