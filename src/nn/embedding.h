// embedding.h: torch.nn.Embedding (weight (V, C)).
#pragma once
#include "nn/nn_ctx.h"
#include "nn/param.h"

typedef struct {
    nn_param *weight;  // (V, C)
    int V, C;
} nn_embedding;

void nn_embedding_init(nn_embedding *e, nn_params *ps, const char *name, int V, int C, float std);
// out (N, C) = weight[idx] (or += when accumulate); idx: (N,) device memory, each in [0, V) (the caller
// validated them on the host)
void nn_embedding_forward(const nn_ctx *ctx, const nn_embedding *e, float *out, const int32_t *idx,
                          int N, int accumulate);
// weight.grad += dout (N, C) scattered to the rows idx (N,) (device memory)
void nn_embedding_backward(const nn_ctx *ctx, const nn_embedding *e, const float *dout,
                           const int32_t *idx, int N);
