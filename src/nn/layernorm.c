// layernorm.c: LayerNorm module over the kernel table.
#include "nn/layernorm.h"

void nn_layernorm_init(nn_layernorm *ln, nn_params *ps, const char *prefix, int C, float eps) {
    int64_t shape[1] = {C};
    ln->weight = nn_params_add(ps, prefix, "weight", 1, shape, (nn_init){NN_INIT_ONES, 0});
    ln->bias = nn_params_add(ps, prefix, "bias", 1, shape, (nn_init){NN_INIT_ZEROS, 0});
    ln->C = C;
    ln->eps = eps;
}

void nn_layernorm_forward(const nn_ctx *ctx, const nn_layernorm *ln, float *out, fsdp_bf16 *out_b16, float *mean,
                          float *rstd, const float *inp, int N) {
    // widened device copies when mixed precision bound bf16 views
    const float *w = nn_param_f32(ctx, ln->weight), *b = nn_param_f32(ctx, ln->bias);
    FSDP_ASSERT(w && b);
    ctx->k->layernorm_forward(ctx->stream, out, out_b16, mean, rstd, inp, w, b, N, ln->C, ln->eps);
}

void nn_residual_layernorm_forward(const nn_ctx *ctx, const nn_layernorm *ln, float *res, float *out,
                                   fsdp_bf16 *out_b16, float *mean, float *rstd, const float *a, const float *b,
                                   float p, fsdp_rng rng, int N) {
    const float *w = nn_param_f32(ctx, ln->weight), *bias = nn_param_f32(ctx, ln->bias);
    FSDP_ASSERT(w && bias);
    ctx->k->residual_layernorm_forward(ctx->stream, res, out, out_b16, mean, rstd, a, b, p, rng, w, bias, N, ln->C,
                                       ln->eps);
}

void nn_layernorm_backward(const nn_ctx *ctx, const nn_layernorm *ln, float *dinp, const float *dout,
                           const float *dres, const float *inp, const float *mean, const float *rstd, int N) {
    const float *w = nn_param_f32(ctx, ln->weight);
    FSDP_ASSERT(w != NULL);
    ctx->k->layernorm_backward(ctx->stream, dinp, ln->weight->grad, ln->bias->grad, dout, dres, inp, w, mean, rstd,
                               N, ln->C);
}
