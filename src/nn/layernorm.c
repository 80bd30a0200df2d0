// layernorm.c: LayerNorm module over the kernel table.
#include "nn/layernorm.h"

void nn_layernorm_init(nn_layernorm *ln, nn_params *ps, const char *prefix, int C, float eps) {
    int64_t shape[1] = {C};
    ln->weight = nn_params_add(ps, prefix, "weight", 1, shape, (nn_init){NN_INIT_ONES, 0});
    ln->bias = nn_params_add(ps, prefix, "bias", 1, shape, (nn_init){NN_INIT_ZEROS, 0});
    ln->C = C;
    ln->eps = eps;
}

void nn_layernorm_forward(const fsdp_kernels *k, const nn_layernorm *ln, float *out, float *mean,
                          float *rstd, const float *inp, int N) {
    k->layernorm_forward(out, mean, rstd, inp, ln->weight->data, ln->bias->data, N, ln->C, ln->eps);
}

void nn_layernorm_backward(const fsdp_kernels *k, const nn_layernorm *ln, float *dinp, const float *dout,
                           const float *inp, const float *mean, const float *rstd, int N) {
    k->layernorm_backward(dinp, ln->weight->grad, ln->bias->grad, dout, inp, ln->weight->data, mean,
                          rstd, N, ln->C);
}
