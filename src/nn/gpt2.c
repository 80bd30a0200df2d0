// gpt2.c: GPT-2 forward (embeddings, pre-LN causal blocks, final LN, tied head, cross-entropy) and backward.
#include "nn/gpt2.h"
#include "nn/lora_sites.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GPT2_SITE_EMBD = 1 };

fsdp_status nn_gpt2_create(nn_gpt2 *m, nn_gpt2_config cfg) {
    memset(m, 0, sizeof *m);
    if (cfg.n_embd % cfg.n_head)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "d_model %d is not divisible by heads %d", cfg.n_embd, cfg.n_head);
    m->cfg = cfg;
    int C = cfg.n_embd;
    FSDP_CHECK(nn_params_create(&m->params, 20 * cfg.n_layer + 4));  // 12 per block, 8 more for adapters
    nn_embedding_init(&m->wte, &m->params, "wte.weight", cfg.vocab_size, C, 0.02f);
    nn_embedding_init(&m->wpe, &m->params, "wpe.weight", cfg.max_seq, C, 0.01f);
    FSDP_CHECK(nn_sequential_create(&m->blocks, cfg.n_layer));
    nn_block_config bc = {0};
    bc.d_model = C;
    bc.n_heads = cfg.n_head;
    bc.d_ff = 4 * C;
    bc.dropout = cfg.dropout;
    bc.attn_dropout = cfg.dropout;
    bc.activation = FSDP_ACT_GELU_TANH;
    bc.norm_first = 1;
    bc.causal = 1;
    bc.batch_first = 1;
    bc.ffn_dropout = 0;
    bc.ln_eps = cfg.ln_eps;
    float proj_std = 0.02f / sqrtf(2.0f * (float)cfg.n_layer);
    for (int i = 0; i < cfg.n_layer; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "h.%d.", i);
        nn_block_init_gpt2(&m->blocks.blocks[i], &m->params, prefix, bc, i, 0.02f, proj_std);
    }
    nn_layernorm_init(&m->ln_f, &m->params, "ln_f.", C, cfg.ln_eps);
    return FSDP_OK;
}

static void free_activations(nn_gpt2 *m) {
    void *bufs[] = {m->idx, m->targets, m->emb, m->lnf_out, m->lnf_mean, m->lnf_rstd, m->logits,
                    m->ce_stats, m->losses, m->dx, m->demb, m->loss};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) fsdp_dev_free(m->dev, bufs[i]);
    m->idx = m->targets = NULL;
    m->emb = m->lnf_out = m->lnf_mean = m->lnf_rstd = m->logits = m->ce_stats = m->losses = NULL;
    m->dx = m->demb = NULL;
    m->loss = NULL;
    m->capacity_rows = 0;
}

static const nn_lora_site lora_sites[] = {{GPT2_LORA_C_ATTN, "attn.c_attn"},
                                          {GPT2_LORA_ATTN_C_PROJ, "attn.c_proj"},
                                          {GPT2_LORA_C_FC, "mlp.c_fc"},
                                          {GPT2_LORA_MLP_C_PROJ, "mlp.c_proj"}};
#define N_LORA_SITES (int)(sizeof lora_sites / sizeof lora_sites[0])

const char *nn_gpt2_lora_target_name(int i) { return i >= 0 && i < N_LORA_SITES ? lora_sites[i].name : NULL; }

fsdp_status nn_gpt2_lora_targets(const char *list, unsigned *mask) {
    return nn_lora_parse_targets(lora_sites, N_LORA_SITES, list, "a GPT-2 block",
                                 "c_attn, c_proj, c_fc, attn.c_proj or mlp.c_proj", mask);
}

fsdp_status nn_gpt2_add_lora(nn_gpt2 *m, unsigned targets, int r, float alpha, float dropout) {
    nn_linear **layers = malloc((size_t)m->cfg.n_layer * N_LORA_SITES * sizeof *layers);  // (n_layer, sites)
    if (!layers) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for the adapters");
    for (int b = 0; b < m->cfg.n_layer; b++) {
        nn_block *blk = &m->blocks.blocks[b];
        nn_linear *of_block[N_LORA_SITES] = {&blk->attn.in_proj, &blk->attn.out_proj, &blk->fc1, &blk->fc2};
        memcpy(layers + (size_t)b * N_LORA_SITES, of_block, sizeof of_block);
    }
    fsdp_status st = nn_lora_attach(&m->lora, &m->n_lora, &m->params, lora_sites, N_LORA_SITES, layers,
                                    m->cfg.n_layer, "h.%d.", targets, r, alpha, dropout);
    free(layers);
    return st;
}

void nn_gpt2_free(nn_gpt2 *m) {
    for (int i = 0; i < m->n_lora; i++) nn_lora_free(&m->lora[i]);
    free(m->lora);
    m->lora = NULL;
    m->n_lora = 0;
    free_activations(m);
    nn_sequential_free(&m->blocks);
    nn_params_destroy(&m->params);
}

// The activations (device memory of dev), allocated at the first forward of a shape and kept while
// later shapes fit; buffers of another device are allocated again on dev.
static fsdp_status ensure_activations(nn_gpt2 *m, fsdp_dev *dev, int B, int T) {
    size_t N = (size_t)B * T;
    m->B = B;
    m->T = T;
    if (m->dev != dev) {
        free_activations(m);
        m->dev = dev;
    }
    if (N <= m->capacity_rows) return FSDP_OK;
    free_activations(m);
    size_t C = (size_t)m->cfg.n_embd, V = (size_t)m->cfg.vocab_size;
    m->idx = fsdp_dev_alloc(dev, N * sizeof(int32_t), FSDP_MEM_ACTIVATIONS);
    m->targets = fsdp_dev_alloc(dev, N * sizeof(int32_t), FSDP_MEM_ACTIVATIONS);
    m->loss = fsdp_dev_alloc(dev, sizeof(double), FSDP_MEM_ACTIVATIONS);
    struct { float **p; size_t n; } want[] = {
        {&m->emb, N * C}, {&m->lnf_out, N * C}, {&m->lnf_mean, N}, {&m->lnf_rstd, N},
        {&m->logits, N * V}, {&m->ce_stats, N * 2}, {&m->losses, N}, {&m->dx, N * C}, {&m->demb, N * C},
    };
    if (!m->idx || !m->targets || !m->loss) return FSDP_ERR_NOMEM;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        *want[i].p = fsdp_dev_alloc(dev, want[i].n * sizeof(float), FSDP_MEM_ACTIVATIONS);
        if (!*want[i].p) return FSDP_ERR_NOMEM;
    }
    m->capacity_rows = N;
    return FSDP_OK;
}

fsdp_status nn_gpt2_reserve(const nn_ctx *ctx, nn_gpt2 *m, int B, int T) {
    FSDP_CHECK(ensure_activations(m, ctx->dev, B, T));
    return nn_sequential_reserve(ctx, &m->blocks, B, T);
}

fsdp_status nn_gpt2_forward(const nn_ctx *ctx, nn_gpt2 *m, const int32_t *idx, const int32_t *targets,
                            int B, int T) {
    if (T > m->cfg.max_seq)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "sequence length %d exceeds the model's %d positions", T, m->cfg.max_seq);
    int N = B * T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
    for (int n = 0; n < N; n++) {
        if (idx[n] < 0 || idx[n] >= V)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "idx[%d][%d] = %d is outside the vocabulary [0, %d)",
                              n / T, n % T, idx[n], V);
        if (targets[n] < 0 || targets[n] >= V)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "targets[%d][%d] = %d is outside the vocabulary [0, %d)",
                              n / T, n % T, targets[n], V);
    }
    FSDP_CHECK(ensure_activations(m, ctx->dev, B, T));
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    // from here on only the device copies are used
    FSDP_CHECK(fsdp_copy_h2d(st, m->idx, idx, sizeof(int32_t) * (size_t)N));
    FSDP_CHECK(fsdp_copy_h2d(st, m->targets, targets, sizeof(int32_t) * (size_t)N));
    nn_embedding_forward(ctx, &m->wte, m->emb, m->idx, N, 0);
    const nn_param *wpe = m->wpe.weight;
    // positions 0..T-1 for every sequence; a wpe bound only as a bf16 view is added from it directly
    // (each value widened as it is added: the same sums as adding a widened copy)
    for (int b = 0; b < B; b++) {
        float *row = m->emb + (size_t)b * T * C;
        if (wpe->data || !wpe->data_b16) k->add_inplace(st, row, wpe->data, (size_t)T * C);
        else k->add_inplace_b16(st, row, wpe->data_b16, (size_t)T * C);
    }
    k->dropout_forward(st, m->emb, m->emb, (size_t)N * C, ctx->training ? m->cfg.dropout : 0.0f,
                       nn_dropout_rng(ctx, m->cfg.n_layer, GPT2_SITE_EMBD));
    const float *x = NULL;
    FSDP_CHECK(nn_sequential_forward(ctx, &m->blocks, m->emb, B, T, &x));
    nn_layernorm_forward(ctx, &m->ln_f, m->lnf_out, NULL, m->lnf_mean, m->lnf_rstd, x, N);
    nn_gemm_param(ctx, 0, 1, N, V, C, m->lnf_out, C, m->wte.weight, C, 0.0f, m->logits, V);
    k->cross_entropy_forward(st, m->loss, m->losses, m->ce_stats, m->logits, m->targets, N, V);
    return FSDP_OK;
}

fsdp_status nn_gpt2_backward(const nn_ctx *ctx, nn_gpt2 *m, float dloss) {
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    int B = m->B, T = m->T, N = B * T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
    float *dlogits = m->logits;  // (N, V): logits are not needed any more
    k->cross_entropy_backward(st, dlogits, m->logits, m->ce_stats, m->targets, dloss / (float)N, N, V);
    nn_gemm_param(ctx, 0, 0, N, C, V, dlogits, V, m->wte.weight, C, 0.0f, m->dx, C);  // d lnf_out
    if (m->wte.weight->grad)  // not when frozen
        k->gemm(st, 1, 0, V, C, N, 1.0f, dlogits, V, m->lnf_out, C, 1.0f, m->wte.weight->grad, C);
    const float *x_last = m->blocks.count ? m->blocks.blocks[m->blocks.count - 1].out : m->emb;
    nn_layernorm_backward(ctx, &m->ln_f, m->demb, m->dx, NULL, x_last, m->lnf_mean, m->lnf_rstd, N);
    FSDP_CHECK(nn_sequential_backward(ctx, &m->blocks, m->demb, m->emb, m->dx));  // dx = d emb
    k->dropout_backward(st, m->dx, m->dx, (size_t)N * C, ctx->training ? m->cfg.dropout : 0.0f,
                        nn_dropout_rng(ctx, m->cfg.n_layer, GPT2_SITE_EMBD));
    nn_embedding_backward(ctx, &m->wte, m->dx, m->idx, N);
    for (int b = 0; m->wpe.weight->grad && b < B; b++)
        k->add_inplace(st, m->wpe.weight->grad, m->dx + (size_t)b * T * C, (size_t)T * C);
    return FSDP_OK;
}
