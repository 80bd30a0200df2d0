// loss.c: mean absolute value loss (the seed's `model(x).abs().mean()`), through the kernel table
// (the kernels live in device/cpu/abs_mean.c).
#include "nn/loss.h"

void nn_abs_mean_forward(const nn_ctx *ctx, double *loss, const float *y, size_t n) {
    ctx->k->abs_mean_forward(ctx->stream, loss, y, n);
}

void nn_abs_mean_backward(const nn_ctx *ctx, float *dy, const float *y, size_t n, float dloss) {
    ctx->k->abs_mean_backward(ctx->stream, dy, y, n, dloss);
}
