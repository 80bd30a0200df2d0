// attention.c: multi-head self-attention module (projections around the attention kernel).
#include "nn/attention.h"

#include <math.h>

void nn_mha_init_torch(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, int causal, float dropout) {
    char p[NN_NAME_MAX + 16];
    nn_linear_init(&m->in_proj, ps, prefix, "in_proj_weight", "in_proj_bias", C, 3 * C, 0);
    m->in_proj.weight->init = (nn_init){NN_INIT_UNIFORM, sqrtf(6.0f / (float)(C + 3 * C))};
    m->in_proj.bias->init = (nn_init){NN_INIT_ZEROS, 0};
    snprintf(p, sizeof p, "%sout_proj.", prefix);
    nn_linear_init(&m->out_proj, ps, p, "weight", "bias", C, C, 0);
    m->out_proj.bias->init = (nn_init){NN_INIT_ZEROS, 0};
    m->C = C;
    m->H = H;
    m->causal = causal;
    m->dropout = dropout;
}

void nn_mha_init_gpt2(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, float dropout,
                      float init_std, float proj_std) {
    char p[NN_NAME_MAX + 16];
    snprintf(p, sizeof p, "%sc_attn.", prefix);
    nn_linear_init(&m->in_proj, ps, p, "weight", "bias", C, 3 * C, 1);
    snprintf(p, sizeof p, "%sc_proj.", prefix);
    nn_linear_init(&m->out_proj, ps, p, "weight", "bias", C, C, 1);
    m->in_proj.weight->init = (nn_init){NN_INIT_NORMAL, init_std};
    m->out_proj.weight->init = (nn_init){NN_INIT_NORMAL, proj_std};
    m->in_proj.bias->init = m->out_proj.bias->init = (nn_init){NN_INIT_ZEROS, 0};
    m->C = C;
    m->H = H;
    m->causal = 1;
    m->dropout = dropout;
}

fsdp_status nn_mha_forward(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims, float *out,
                           float *qkv, float *att, float *ctx_out, nn_input inp) {
    int N = dims->B * dims->T;
    FSDP_CHECK(nn_linear_forward_in(ctx, &m->in_proj, qkv, inp, N));
    ctx->k->attention_forward(ctx->stream, ctx_out, att, qkv, dims);
    return nn_linear_forward(ctx, &m->out_proj, out, ctx_out, N);
}

void nn_mha_backward(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims, float *dinp,
                     int accumulate_dinp, const float *dout, nn_input inp, const float *qkv,
                     const float *att, const float *ctx_out, float *scratch_c, float *scratch_3c) {
    int N = dims->B * dims->T;
    nn_linear_backward(ctx, &m->out_proj, scratch_c, 0, dout, ctx_out, N);
    ctx->k->attention_backward(ctx->stream, scratch_3c, scratch_c, qkv, ctx_out, att, dims);
    nn_linear_backward_in(ctx, &m->in_proj, dinp, accumulate_dinp, scratch_3c, inp, N);
}
