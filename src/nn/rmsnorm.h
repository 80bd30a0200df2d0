// rmsnorm.h: RMSNorm over the last dimension with a weight (Hugging Face's LlamaRMSNorm, in fp32):
// out = inp * rsqrt(mean(inp^2) + eps) * weight.
#pragma once
#include "nn/nn_ctx.h"
#include "nn/param.h"

typedef struct {
    nn_param *weight;  // (C,)
    int C;
    float eps;
} nn_rmsnorm;

// Registers "<prefix>weight" (ones, as LlamaRMSNorm).
void nn_rmsnorm_init(nn_rmsnorm *n, nn_params *ps, const char *prefix, int C, float eps);
// out, inp: (N, C); rstd: (N,) saved for backward (device memory); out_b16 (N, C): when not NULL the
// output goes there in bf16 instead of out. A weight bound in bf16 is widened first (nn_param_f32).
void nn_rmsnorm_forward(const nn_ctx *ctx, const nn_rmsnorm *n, float *out, fsdp_bf16 *out_b16, float *rstd,
                        const float *inp, int N);
// The residual add before the norm, fused: res (N, C) = a + b (res may be a or b), out = RMSNorm(res);
// res is saved for backward as inp
void nn_residual_rmsnorm_forward(const nn_ctx *ctx, const nn_rmsnorm *n, float *res, float *out, fsdp_bf16 *out_b16,
                                 float *rstd, const float *a, const float *b, int N);
// dinp (N, C) overwritten with the input gradient plus dres (N, C) when not NULL (a residual branch's
// gradient, added in the same pass); the weight's gradient accumulated (skipped when frozen)
void nn_rmsnorm_backward(const nn_ctx *ctx, const nn_rmsnorm *n, float *dinp, const float *dout, const float *dres,
                         const float *inp, const float *rstd, int N);
