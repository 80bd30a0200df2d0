// llama_attention.c: Hugging Face's LlamaAttention: q/k/v projections into the planes of one buffer, the
// rotary embedding on q and k, grouped-query fused attention (a query head reads key/value head
// h / (H / KV)), o_proj.
#include "nn/attention.h"

void nn_mha_init_llama(nn_mha *m, nn_params *ps, const char *prefix, int C, int H, int KV, int hd, int qkv_bias,
                       int o_bias, float dropout, float init_std) {
    char p[NN_NAME_MAX + 16];
    nn_linear *proj[4] = {&m->q_proj, &m->k_proj, &m->v_proj, &m->out_proj};
    const char *names[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    int ins[4] = {C, C, C, H * hd}, outs[4] = {H * hd, KV * hd, KV * hd, C};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s.", prefix, names[i]);
        nn_linear_init(proj[i], ps, p, "weight", (i < 3 ? qkv_bias : o_bias) ? "bias" : NULL, ins[i], outs[i], 0);
        proj[i]->weight->init = (nn_init){NN_INIT_NORMAL, init_std};
        if (proj[i]->bias) proj[i]->bias->init = (nn_init){NN_INIT_ZEROS, 0};
    }
    m->C = C;
    m->H = H;
    m->kv_heads = KV;
    m->head_dim = hd;
    m->causal = 1;
    m->dropout = dropout;
}

fsdp_status nn_mha_forward_llama(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims,
                                 const float *rope_cos, const float *rope_sin, float *out, float *qkv, float *att,
                                 float *ctx_out, nn_input inp) {
    int B = dims->B, T = dims->T, N = B * T, H = m->H, KV = m->kv_heads, hd = m->head_dim;
    float *q = qkv, *k = q + (size_t)N * H * hd, *v = k + (size_t)N * KV * hd;  // the planes
    FSDP_CHECK(nn_linear_forward_in(ctx, &m->q_proj, q, inp, N));
    FSDP_CHECK(nn_linear_forward_in(ctx, &m->k_proj, k, inp, N));
    FSDP_CHECK(nn_linear_forward_in(ctx, &m->v_proj, v, inp, N));
    ctx->k->rope_forward(ctx->stream, q, rope_cos, rope_sin, B, T, H, hd);
    ctx->k->rope_forward(ctx->stream, k, rope_cos, rope_sin, B, T, KV, hd);
    ctx->k->attention_forward(ctx->stream, ctx_out, att, qkv, dims);
    return nn_linear_forward(ctx, &m->out_proj, out, ctx_out, N);
}

void nn_mha_backward_llama(const nn_ctx *ctx, const nn_mha *m, const fsdp_attention_dims *dims,
                           const float *rope_cos, const float *rope_sin, float *dinp, const float *dout, nn_input inp,
                           const float *qkv, const float *att, const float *ctx_out, float *scratch_c,
                           float *scratch_qkv) {
    int B = dims->B, T = dims->T, N = B * T, H = m->H, KV = m->kv_heads, hd = m->head_dim;
    float *dq = scratch_qkv, *dk = dq + (size_t)N * H * hd, *dv = dk + (size_t)N * KV * hd;
    nn_linear_backward(ctx, &m->out_proj, scratch_c, 0, dout, ctx_out, N);
    ctx->k->attention_backward(ctx->stream, scratch_qkv, scratch_c, qkv, ctx_out, att, dims);
    ctx->k->rope_backward(ctx->stream, dq, rope_cos, rope_sin, B, T, H, hd);
    ctx->k->rope_backward(ctx->stream, dk, rope_cos, rope_sin, B, T, KV, hd);
    nn_linear_backward_in(ctx, &m->q_proj, dinp, 0, dq, inp, N);
    nn_linear_backward_in(ctx, &m->k_proj, dinp, 1, dk, inp, N);
    nn_linear_backward_in(ctx, &m->v_proj, dinp, 1, dv, inp, N);
}
