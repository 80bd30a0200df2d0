// embedding.h: torch.nn.Embedding (weight (V, C)).
#pragma once
#include "kernels/kernels.h"
#include "nn/param.h"

typedef struct {
    nn_param *weight;  // (V, C)
    int V, C;
} nn_embedding;

void nn_embedding_init(nn_embedding *e, nn_params *ps, const char *name, int V, int C, float std);
// out (N, C) = weight[idx] (or += when accumulate); idx: (N,), each in [0, V)
void nn_embedding_forward(const fsdp_kernels *k, const nn_embedding *e, float *out, const int32_t *idx,
                          int N, int accumulate);
void nn_embedding_backward(const fsdp_kernels *k, const nn_embedding *e, const float *dout,
                           const int32_t *idx, int N);
