// layernorm.h: torch.nn.LayerNorm over the last dimension (elementwise affine).
#pragma once
#include "nn/nn_ctx.h"
#include "nn/param.h"

typedef struct {
    nn_param *weight;  // (C,)
    nn_param *bias;    // (C,)
    int C;
    float eps;
} nn_layernorm;

void nn_layernorm_init(nn_layernorm *ln, nn_params *ps, const char *prefix, int C, float eps);
// out, inp: (N, C); mean, rstd: (N,) saved for backward (device memory); out_b16 (N, C): when not NULL
// the output goes there in bf16 instead of out. Parameters bound in bf16 are widened into their device
// scratch first (nn_param_f32).
void nn_layernorm_forward(const nn_ctx *ctx, const nn_layernorm *ln, float *out, fsdp_bf16 *out_b16, float *mean,
                          float *rstd, const float *inp, int N);
// The residual add before the norm, fused: res (N, C) = a + dropout(b) (p, rng: the dropout of one
// call over N*C values), out = LayerNorm(res); res is saved for backward as inp
void nn_residual_layernorm_forward(const nn_ctx *ctx, const nn_layernorm *ln, float *res, float *out,
                                   fsdp_bf16 *out_b16, float *mean, float *rstd, const float *a, const float *b,
                                   float p, fsdp_rng rng, int N);
// dinp (N, C) overwritten with the input gradient plus dres (N, C) when not NULL (a residual branch's
// gradient, added in the same pass); parameter grads accumulated
void nn_layernorm_backward(const nn_ctx *ctx, const nn_layernorm *ln, float *dinp, const float *dout,
                           const float *dres, const float *inp, const float *mean, const float *rstd, int N);
