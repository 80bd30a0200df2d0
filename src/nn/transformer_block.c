// transformer_block.c: forward and backward of one transformer block (encoder layer or GPT-2 block).
#include "nn/transformer_block.h"

#include <string.h>

#include "nn/llama_block.h"


enum { SITE_ATTN_PROBS = 1, SITE_ATTN_OUT = 2, SITE_FFN_INNER = 3, SITE_FFN_OUT = 4 };

nn_block_config nn_encoder_layer_defaults(int d_model, int n_heads) {
    nn_block_config c = {0};
    c.d_model = d_model;
    c.n_heads = n_heads;
    c.d_ff = 2048;
    c.dropout = 0.1f;
    c.attn_dropout = 0.1f;
    c.activation = FSDP_ACT_RELU;
    c.ffn_dropout = 1;
    c.ln_eps = 1e-5f;
    return c;
}

void nn_block_init_encoder(nn_block *blk, nn_params *ps, const char *prefix, nn_block_config cfg, int index) {
    memset(blk, 0, sizeof *blk);
    blk->cfg = cfg;
    blk->index = index;
    char p[NN_NAME_MAX + 16];
    snprintf(p, sizeof p, "%sself_attn.", prefix);
    nn_mha_init_torch(&blk->attn, ps, p, cfg.d_model, cfg.n_heads, cfg.causal, cfg.attn_dropout);
    snprintf(p, sizeof p, "%slinear1.", prefix);
    nn_linear_init(&blk->fc1, ps, p, "weight", "bias", cfg.d_model, cfg.d_ff, 0);
    snprintf(p, sizeof p, "%slinear2.", prefix);
    nn_linear_init(&blk->fc2, ps, p, "weight", "bias", cfg.d_ff, cfg.d_model, 0);
    snprintf(p, sizeof p, "%snorm1.", prefix);
    nn_layernorm_init(&blk->norm1, ps, p, cfg.d_model, cfg.ln_eps);
    snprintf(p, sizeof p, "%snorm2.", prefix);
    nn_layernorm_init(&blk->norm2, ps, p, cfg.d_model, cfg.ln_eps);
}

void nn_block_init_gpt2(nn_block *blk, nn_params *ps, const char *prefix, nn_block_config cfg, int index,
                        float init_std, float proj_std) {
    memset(blk, 0, sizeof *blk);
    blk->cfg = cfg;
    blk->index = index;
    char p[NN_NAME_MAX + 16];
    snprintf(p, sizeof p, "%sln_1.", prefix);
    nn_layernorm_init(&blk->norm1, ps, p, cfg.d_model, cfg.ln_eps);
    snprintf(p, sizeof p, "%sattn.", prefix);
    nn_mha_init_gpt2(&blk->attn, ps, p, cfg.d_model, cfg.n_heads, cfg.attn_dropout, init_std, proj_std);
    snprintf(p, sizeof p, "%sln_2.", prefix);
    nn_layernorm_init(&blk->norm2, ps, p, cfg.d_model, cfg.ln_eps);
    snprintf(p, sizeof p, "%smlp.c_fc.", prefix);
    nn_linear_init(&blk->fc1, ps, p, "weight", "bias", cfg.d_model, cfg.d_ff, 1);
    snprintf(p, sizeof p, "%smlp.c_proj.", prefix);
    nn_linear_init(&blk->fc2, ps, p, "weight", "bias", cfg.d_ff, cfg.d_model, 1);
    blk->fc1.weight->init = (nn_init){NN_INIT_NORMAL, init_std};
    blk->fc2.weight->init = (nn_init){NN_INIT_NORMAL, proj_std};
    blk->fc1.bias->init = blk->fc2.bias->init = (nn_init){NN_INIT_ZEROS, 0};
}

void nn_block_free(nn_block *blk) {
    void **bufs[] = {(void **)&blk->ln1_out, (void **)&blk->ln1_mean, (void **)&blk->ln1_rstd, (void **)&blk->qkv,
                     (void **)&blk->att, (void **)&blk->attn_ctx, (void **)&blk->r1, (void **)&blk->ln2_out,
                     (void **)&blk->ln2_mean, (void **)&blk->ln2_rstd, (void **)&blk->f1, (void **)&blk->act,
                     (void **)&blk->r2, (void **)&blk->ln1_b16, (void **)&blk->ln2_b16, (void **)&blk->act_b16,
                     (void **)&blk->f3, (void **)&blk->out};
    int borrowed = blk->share && blk->share != blk;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if ((!borrowed || bufs[i] == (void **)&blk->out) && *bufs[i]) fsdp_dev_free(blk->dev, *bufs[i]);
        *bufs[i] = NULL;
    }
    blk->capacity_rows = 0;
    blk->capacity_att = 0;
}

// Whether ctx keeps this block's matrix-product-only activations in bf16: under act_bf16, unless an
// adapter (which reads its input in fp32) sits on one of the block's layers
static int block_b16(const nn_ctx *ctx, const nn_block *blk) {
    const nn_linear *layers[] = {&blk->attn.in_proj, &blk->attn.out_proj, &blk->attn.q_proj, &blk->attn.k_proj,
                                 &blk->attn.v_proj, &blk->fc1, &blk->fc2, &blk->fc3};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
        if (layers[i]->lora) return 0;
    return ctx->act_bf16;
}

// The activation buffers (device memory of dev), allocated at the first forward of a shape and kept
// while later shapes fit. Buffers of another device, or of the other storage (b16), are freed and
// allocated again.
static fsdp_status ensure_buffers(nn_block *blk, fsdp_dev *dev, int B, int T, int b16) {
    size_t N = (size_t)B * T, C = (size_t)blk->cfg.d_model, F = (size_t)blk->cfg.d_ff;
    size_t H = (size_t)blk->cfg.n_heads;
    int llama = blk->cfg.llama;
    // the attention's widths: Llama's planes q | k | v and its H hd context; C and 3C otherwise
    size_t A = llama ? H * (size_t)blk->cfg.head_dim : C;
    size_t QKV = llama ? (H + 2 * (size_t)blk->cfg.kv_heads) * (size_t)blk->cfg.head_dim : 3 * C;
    size_t att_floats = (size_t)B * H * T;  // the fused attention's row statistics
    if (blk->dev != dev || blk->b16_storage != b16) {
        nn_block_free(blk);
        blk->dev = dev;
        blk->b16_storage = b16;
    }
    if (blk->share && blk->share != blk) {  // borrow the intermediates, keep a private output
        nn_block *o = blk->share;
        FSDP_CHECK(ensure_buffers(o, dev, B, T, b16));
        if (N > blk->capacity_rows) {
            if (blk->out) fsdp_dev_free(dev, blk->out);
            blk->out = fsdp_dev_alloc(dev, N * C * sizeof(float), FSDP_MEM_ACTIVATIONS);
            if (!blk->out) return FSDP_ERR_NOMEM;
            blk->capacity_rows = N;
        }
        blk->ln1_out = o->ln1_out, blk->ln1_mean = o->ln1_mean, blk->ln1_rstd = o->ln1_rstd, blk->qkv = o->qkv;
        blk->att = o->att, blk->attn_ctx = o->attn_ctx, blk->r1 = o->r1;
        blk->ln2_out = o->ln2_out, blk->ln2_mean = o->ln2_mean, blk->ln2_rstd = o->ln2_rstd, blk->f1 = o->f1;
        blk->act = o->act, blk->r2 = o->r2, blk->f3 = o->f3;
        blk->ln1_b16 = o->ln1_b16, blk->ln2_b16 = o->ln2_b16, blk->act_b16 = o->act_b16;
        blk->B = B;
        blk->T = T;
        return FSDP_OK;
    }
    if (N <= blk->capacity_rows && att_floats <= blk->capacity_att) {
        blk->B = B;
        blk->T = T;
        return FSDP_OK;
    }
    nn_block_free(blk);
    int pre_ln = blk->cfg.norm_first;
    size_t f4 = sizeof(float), h2 = sizeof(fsdp_bf16);
    struct { void **p; size_t bytes; } want[] = {
        {(void **)&blk->ln1_out, b16 && pre_ln ? 0 : N * C * f4}, {(void **)&blk->ln1_b16, b16 && pre_ln ? N * C * h2 : 0},
        {(void **)&blk->ln1_mean, llama ? 0 : N * f4}, {(void **)&blk->ln1_rstd, N * f4}, {(void **)&blk->qkv, N * QKV * f4},
        {(void **)&blk->att, att_floats * f4}, {(void **)&blk->attn_ctx, N * A * f4}, {(void **)&blk->r1, N * C * f4},
        {(void **)&blk->ln2_out, pre_ln && !b16 ? N * C * f4 : 0}, {(void **)&blk->ln2_b16, b16 && pre_ln ? N * C * h2 : 0},
        {(void **)&blk->ln2_mean, llama ? 0 : N * f4}, {(void **)&blk->ln2_rstd, N * f4}, {(void **)&blk->f1, N * F * f4},
        {(void **)&blk->f3, llama ? N * F * f4 : 0},
        {(void **)&blk->act, b16 ? 0 : N * F * f4}, {(void **)&blk->act_b16, b16 ? N * F * h2 : 0},
        {(void **)&blk->r2, pre_ln ? 0 : N * C * f4}, {(void **)&blk->out, N * C * f4},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!want[i].bytes) continue;
        *want[i].p = fsdp_dev_alloc(dev, want[i].bytes, FSDP_MEM_ACTIVATIONS);
        if (!*want[i].p) return FSDP_ERR_NOMEM;
    }
    blk->capacity_rows = N;
    blk->capacity_att = att_floats;
    blk->B = B;
    blk->T = T;
    return FSDP_OK;
}

fsdp_status nn_block_reserve(const nn_ctx *ctx, nn_block *blk, int B, int T) {
    return ensure_buffers(blk, ctx->dev, B, T, block_b16(ctx, blk));
}

// the saved inputs of in_proj, fc1 and fc2, in whichever storage the buffers have

size_t nn_block_scratch_floats(const nn_block_config *cfg, int B, int T) {
    size_t N = (size_t)B * T, C = (size_t)cfg->d_model, F = (size_t)cfg->d_ff;
    if (cfg->llama) {  // llama_block.c's: three (N, C), the context's and the planes' gradients, (N, F)
        size_t H = (size_t)cfg->n_heads, hd = (size_t)cfg->head_dim;
        return N * (3 * C + H * hd + (H + 2 * (size_t)cfg->kv_heads) * hd + F);
    }
    return N * (4 * C + 3 * C + F);
}

static fsdp_attention_dims attention_dims(const nn_ctx *ctx, const nn_block *blk) {
    fsdp_attention_dims d = {0};
    d.B = blk->B;
    d.T = blk->T;
    d.C = blk->cfg.llama ? blk->cfg.n_heads * blk->cfg.head_dim : blk->cfg.d_model;
    d.H = blk->cfg.n_heads;
    d.kv_heads = blk->cfg.llama ? blk->cfg.kv_heads : 0;  // 0: as many key/value heads as query heads
    d.planar = blk->cfg.llama;  // Llama: the q, k, v planes; else qkv rows of 3C (q | k | v)
    d.stride_b = blk->cfg.batch_first ? blk->T : 1;
    d.stride_t = blk->cfg.batch_first ? 1 : blk->B;
    d.causal = blk->cfg.causal;
    d.dropout_p = ctx->training ? blk->cfg.attn_dropout : 0.0f;
    d.rng = nn_dropout_rng(ctx, blk->index, SITE_ATTN_PROBS);
    return d;
}

static float site_p(const nn_ctx *ctx, float p) { return ctx->training ? p : 0.0f; }

// the FFN's inner dropout (between activation and fc2), none where the block has no such site
static float inner_p(const nn_ctx *ctx, const nn_block *blk) {
    return blk->cfg.ffn_dropout ? site_p(ctx, blk->cfg.dropout) : 0.0f;
}

// fc1 (its bias, activation and inner dropout in one fused pass; the bias inside the product where it
// can go there) -> fc2; inp (N, C) -> out (N, C), before the output dropout (which the caller fuses
// into its residual add)
static fsdp_status ffn_forward(const nn_ctx *ctx, nn_block *blk, float *out, nn_input inp, int N) {
    const float *b1 = NULL;  // the bias the activation pass adds (NULL: the product added it)
    if (nn_linear_bias_in_product(&blk->fc1)) {  // f1 is then not written back by that pass: N x F floats
        FSDP_CHECK(nn_linear_forward_in(ctx, &blk->fc1, blk->f1, inp, N));
    } else {
        FSDP_CHECK(nn_linear_forward_no_bias(ctx, &blk->fc1, blk->f1, inp, N));
        b1 = nn_param_f32(ctx, blk->fc1.bias);
        FSDP_ASSERT(b1 != NULL);
    }
    ctx->k->bias_act_dropout_forward(ctx->stream, blk->f1, blk->act, blk->act_b16, b1, N, blk->cfg.d_ff, blk->cfg.activation,
                                     inner_p(ctx, blk), nn_dropout_rng(ctx, blk->index, SITE_FFN_INNER));
    return nn_linear_forward_in(ctx, &blk->fc2, out, nn_block_act_in(blk), N);
}

// d_ffn_out (N, C) -> dinp (N, C), accumulated into when accumulate (else overwritten); sf: (N, F)
// scratch; sc: (N, C) scratch
static void ffn_backward(const nn_ctx *ctx, nn_block *blk, float *dinp, int accumulate, const float *d_ffn_out,
                         nn_input inp, float *sf, float *sc, int N) {
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    size_t NF = (size_t)N * blk->cfg.d_ff, NC = (size_t)N * blk->cfg.d_model;
    float p = site_p(ctx, blk->cfg.dropout);
    if (p > 0.0f) k->dropout_backward(st, sc, d_ffn_out, NC, p, nn_dropout_rng(ctx, blk->index, SITE_FFN_OUT));
    nn_linear_backward_in(ctx, &blk->fc2, sf, 0, p > 0.0f ? sc : d_ffn_out, nn_block_act_in(blk), N);  // no dropout: no copy
    if (blk->cfg.activation == FSDP_ACT_RELU && !blk->act_b16)  // ReLU's output tells the mask
        k->relu_dropout_backward(st, sf, sf, blk->act, NF, inner_p(ctx, blk));
    else
        k->act_dropout_backward(st, sf, sf, blk->f1, NF, blk->cfg.activation, inner_p(ctx, blk),
                                nn_dropout_rng(ctx, blk->index, SITE_FFN_INNER));
    nn_linear_backward_in(ctx, &blk->fc1, dinp, accumulate, sf, inp, N);
}

// The residual adds are fused into the LayerNorm after them (with the dropout on the branch) where one
// follows: post-LN both, pre-LN the attention's; pre-LN's FFN residual ends the block. out_proj's output
// goes to out (free until the block's last step) and fc2's to out (pre-LN: out = r1 + dropout(out)) or
// to r2 (post-LN: r2 = ln1_out + dropout(r2), in place): neither is kept for backward.
fsdp_status nn_block_forward(const nn_ctx *ctx, nn_block *blk, const float *inp, int B, int T) {
    FSDP_CHECK(ensure_buffers(blk, ctx->dev, B, T, block_b16(ctx, blk)));
    fsdp_attention_dims dims = attention_dims(ctx, blk);
    if (blk->cfg.llama) return nn_block_forward_llama(ctx, blk, &dims, inp);
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    int N = B * T;
    size_t NC = (size_t)N * blk->cfg.d_model;
    float p = site_p(ctx, blk->cfg.dropout);
    fsdp_rng rng_attn_out = nn_dropout_rng(ctx, blk->index, SITE_ATTN_OUT);
    fsdp_rng rng_ffn_out = nn_dropout_rng(ctx, blk->index, SITE_FFN_OUT);
    if (blk->cfg.norm_first) {
        // r1 = x + dropout(attn(norm1(x))); out = r1 + dropout(ffn(norm2(r1)))
        nn_layernorm_forward(ctx, &blk->norm1, blk->ln1_out, blk->ln1_b16, blk->ln1_mean, blk->ln1_rstd, inp, N);
        FSDP_CHECK(nn_mha_forward(ctx, &blk->attn, &dims, blk->out, blk->qkv, blk->att, blk->attn_ctx,
                                  nn_block_ln1_in(blk)));
        nn_residual_layernorm_forward(ctx, &blk->norm2, blk->r1, blk->ln2_out, blk->ln2_b16, blk->ln2_mean,
                                      blk->ln2_rstd, inp, blk->out, p, rng_attn_out, N);
        FSDP_CHECK(ffn_forward(ctx, blk, blk->out, nn_block_ln2_in(blk), N));
        k->dropout_forward(st, blk->out, blk->out, NC, p, rng_ffn_out);
        k->add(st, blk->out, blk->r1, blk->out, NC);
    } else {
        // r1 = x + dropout(attn(x)); h1 = norm1(r1); r2 = h1 + dropout(ffn(h1)); out = norm2(r2)
        FSDP_CHECK(nn_mha_forward(ctx, &blk->attn, &dims, blk->out, blk->qkv, blk->att, blk->attn_ctx,
                                  nn_in_f32(inp)));
        nn_residual_layernorm_forward(ctx, &blk->norm1, blk->r1, blk->ln1_out, NULL, blk->ln1_mean, blk->ln1_rstd,
                                      inp, blk->out, p, rng_attn_out, N);
        FSDP_CHECK(ffn_forward(ctx, blk, blk->r2, nn_in_f32(blk->ln1_out), N));
        nn_residual_layernorm_forward(ctx, &blk->norm2, blk->r2, blk->out, NULL, blk->ln2_mean, blk->ln2_rstd,
                                      blk->ln1_out, blk->r2, p, rng_ffn_out, N);
    }
    return FSDP_OK;
}

void nn_block_backward(const nn_ctx *ctx, nn_block *blk, float *dinp, const float *dout, const float *inp,
                       float *scratch) {
    fsdp_attention_dims dims = attention_dims(ctx, blk);
    if (blk->cfg.llama) {
        nn_block_backward_llama(ctx, blk, &dims, dinp, dout, inp, scratch);
        return;
    }
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    int N = blk->B * blk->T;
    size_t NC = (size_t)N * blk->cfg.d_model;
    float *d1 = scratch, *s2 = d1 + NC, *s3 = s2 + NC, *s4 = s3 + NC;  // (N, C) each
    float *s3c = s4 + NC;                                                // (N, 3C)
    float *sf = s3c + 3 * NC;                                            // (N, F)
    float p_out = site_p(ctx, blk->cfg.dropout);
    fsdp_rng rng_out = nn_dropout_rng(ctx, blk->index, SITE_ATTN_OUT);
    if (blk->cfg.norm_first) {
        // out = r1 + ffn(norm2(r1)); r1 = x + attn(norm1(x)); the residuals' adds ride on the norms' backward
        ffn_backward(ctx, blk, s2, 0, dout, nn_block_ln2_in(blk), sf, s3, N);          // s2 = d ln2_out
        nn_layernorm_backward(ctx, &blk->norm2, d1, s2, dout, blk->r1, blk->ln2_mean, blk->ln2_rstd, N);  // d r1
        if (p_out > 0.0f) k->dropout_backward(st, s2, d1, NC, p_out, rng_out);  // s2 = d attn_out
        nn_mha_backward(ctx, &blk->attn, &dims, s4, 0, p_out > 0.0f ? s2 : d1, nn_block_ln1_in(blk), blk->qkv, blk->att,
                        blk->attn_ctx, s3, s3c);                              // s4 = d ln1_out
        nn_layernorm_backward(ctx, &blk->norm1, dinp, s4, d1, inp, blk->ln1_mean, blk->ln1_rstd, N);
    } else {
        // r1 = x + attn(x); h1 = norm1(r1); out = norm2(h1 + ffn(h1))
        nn_layernorm_backward(ctx, &blk->norm2, d1, dout, NULL, blk->r2, blk->ln2_mean, blk->ln2_rstd, N);
        ffn_backward(ctx, blk, d1, 1, d1, nn_in_f32(blk->ln1_out), sf, s2, N);  // d1 = d h1 (residual + ffn)
        nn_layernorm_backward(ctx, &blk->norm1, s2, d1, NULL, blk->r1, blk->ln1_mean, blk->ln1_rstd, N);  // d r1
        if (p_out > 0.0f) k->dropout_backward(st, s3, s2, NC, p_out, rng_out);  // s3 = d attn_out
        nn_mha_backward(ctx, &blk->attn, &dims, dinp, 0, p_out > 0.0f ? s3 : s2, nn_in_f32(inp), blk->qkv, blk->att,
                        blk->attn_ctx, s4, s3c);
        k->add_inplace(st, dinp, s2, NC);
    }
}
