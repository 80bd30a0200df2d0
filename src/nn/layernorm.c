// layernorm.c: LayerNorm module over the kernel table.
#include "nn/layernorm.h"

#include <stdlib.h>

void nn_layernorm_init(nn_layernorm *ln, nn_params *ps, const char *prefix, int C, float eps) {
    int64_t shape[1] = {C};
    ln->weight = nn_params_add(ps, prefix, "weight", 1, shape, (nn_init){NN_INIT_ONES, 0});
    ln->bias = nn_params_add(ps, prefix, "bias", 1, shape, (nn_init){NN_INIT_ZEROS, 0});
    ln->C = C;
    ln->eps = eps;
}

void nn_layernorm_forward(const fsdp_kernels *k, const nn_layernorm *ln, float *out, float *mean,
                          float *rstd, const float *inp, int N) {
    float *owned_w, *owned_b;  // widened copies when mixed precision bound bf16 views
    const float *w = nn_param_f32(ln->weight, &owned_w), *b = nn_param_f32(ln->bias, &owned_b);
    FSDP_ASSERT(w && b);
    k->layernorm_forward(out, mean, rstd, inp, w, b, N, ln->C, ln->eps);
    free(owned_w);
    free(owned_b);
}

void nn_layernorm_backward(const fsdp_kernels *k, const nn_layernorm *ln, float *dinp, const float *dout,
                           const float *inp, const float *mean, const float *rstd, int N) {
    float *owned;
    const float *w = nn_param_f32(ln->weight, &owned);
    FSDP_ASSERT(w != NULL);
    k->layernorm_backward(dinp, ln->weight->grad, ln->bias->grad, dout, inp, w, mean, rstd, N, ln->C);
    free(owned);
}
