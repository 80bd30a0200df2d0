// embedding.c: embedding lookup module.
#include "nn/embedding.h"

void nn_embedding_init(nn_embedding *e, nn_params *ps, const char *name, int V, int C, float std) {
    int64_t shape[2] = {V, C};
    e->weight = nn_params_add(ps, "", name, 2, shape, (nn_init){NN_INIT_NORMAL, std});
    e->V = V;
    e->C = C;
}

void nn_embedding_forward(const nn_ctx *ctx, const nn_embedding *e, float *out, const int32_t *idx,
                          int N, int accumulate) {
    const fsdp_kernels *k = ctx->k;
    if (e->weight->data_b16)
        k->embedding_forward_b16(ctx->stream, out, idx, e->weight->data_b16, N, e->C, accumulate);
    else k->embedding_forward(ctx->stream, out, idx, e->weight->data, N, e->C, accumulate);
}

void nn_embedding_backward(const nn_ctx *ctx, const nn_embedding *e, const float *dout,
                           const int32_t *idx, int N) {
    if (e->weight->grad) ctx->k->embedding_backward(ctx->stream, e->weight->grad, dout, idx, N, e->C);  // not when frozen
}
