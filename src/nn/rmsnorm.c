// rmsnorm.c: the RMSNorm module over the kernel table.
#include "nn/rmsnorm.h"

void nn_rmsnorm_init(nn_rmsnorm *n, nn_params *ps, const char *prefix, int C, float eps) {
    int64_t shape[1] = {C};
    n->weight = nn_params_add(ps, prefix, "weight", 1, shape, (nn_init){NN_INIT_ONES, 0});
    n->C = C;
    n->eps = eps;
}

void nn_rmsnorm_forward(const nn_ctx *ctx, const nn_rmsnorm *n, float *out, fsdp_bf16 *out_b16, float *rstd,
                        const float *inp, int N) {
    const float *w = nn_param_f32(ctx, n->weight);
    FSDP_ASSERT(w != NULL);
    ctx->k->rmsnorm_forward(ctx->stream, out, out_b16, rstd, inp, w, N, n->C, n->eps);
}

void nn_residual_rmsnorm_forward(const nn_ctx *ctx, const nn_rmsnorm *n, float *res, float *out, fsdp_bf16 *out_b16,
                                 float *rstd, const float *a, const float *b, int N) {
    const float *w = nn_param_f32(ctx, n->weight);
    FSDP_ASSERT(w != NULL);
    ctx->k->residual_rmsnorm_forward(ctx->stream, res, out, out_b16, rstd, a, b, w, N, n->C, n->eps);
}

void nn_rmsnorm_backward(const nn_ctx *ctx, const nn_rmsnorm *n, float *dinp, const float *dout, const float *dres,
                         const float *inp, const float *rstd, int N) {
    const float *w = nn_param_f32(ctx, n->weight);
    FSDP_ASSERT(w != NULL);
    ctx->k->rmsnorm_backward(ctx->stream, dinp, n->weight->grad, dout, dres, inp, w, rstd, N, n->C);
}
