// llama.c: LlamaForCausalLM forward (embedding, decoder layers, final RMSNorm, LM head, cross-entropy)
// and backward; the rotary tables; LoRA on the projections with PEFT's names.
#include "nn/llama.h"
#include "nn/lora_sites.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nn_llama_inv_freq(const nn_llama_config *cfg, double *inv_freq) {
    int hd = cfg->head_dim;
    for (int i = 0; i < hd / 2; i++) {
        double f = 1.0 / pow(cfg->rope_theta, (double)(2 * i) / (double)hd);
        if (cfg->rope_llama3) {  // transformers' _compute_llama3_parameters
            double old = (double)cfg->rope_original_max_seq, factor = cfg->rope_factor;
            double low = old / cfg->rope_low_freq_factor, high = old / cfg->rope_high_freq_factor;
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > low) {
                f = f / factor;
            } else if (!(wavelen < high)) {  // between the two: interpolated
                double smooth = (old / wavelen - cfg->rope_low_freq_factor) /
                                (cfg->rope_high_freq_factor - cfg->rope_low_freq_factor);
                f = (1.0 - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

static fsdp_status make_rope_tables(nn_llama *m) {
    int P = m->cfg.max_seq, half = m->cfg.head_dim / 2;
    double *inv_freq = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
    m->rope_cos_host = malloc(sizeof(float) * (size_t)P * half);
    m->rope_sin_host = malloc(sizeof(float) * (size_t)P * half);
    if (!inv_freq || !m->rope_cos_host || !m->rope_sin_host) {
        free(inv_freq);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory for the rotary tables (%d x %d)", P, half);
    }
    nn_llama_inv_freq(&m->cfg, inv_freq);
    for (int t = 0; t < P; t++)
        for (int i = 0; i < half; i++) {  // angles in double, rounded once
            double a = (double)t * inv_freq[i];
            m->rope_cos_host[(size_t)t * half + i] = (float)cos(a);
            m->rope_sin_host[(size_t)t * half + i] = (float)sin(a);
        }
    free(inv_freq);
    return FSDP_OK;
}

fsdp_status nn_llama_create(nn_llama *m, nn_llama_config cfg) {
    memset(m, 0, sizeof *m);
    if (cfg.n_head < 1 || cfg.n_kv_head < 1 || cfg.n_head % cfg.n_kv_head)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "key/value heads %d do not divide attention heads %d", cfg.n_kv_head,
                          cfg.n_head);
    if (cfg.head_dim < 2 || cfg.head_dim % 2)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "head_dim %d: expected an even number (rotary embedding)", cfg.head_dim);
    if (cfg.vocab_size < 1 || cfg.n_embd < 1 || cfg.d_ff < 1 || cfg.n_layer < 0 || cfg.max_seq < 1)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "model sizes must be positive");
    m->cfg = cfg;
    int C = cfg.n_embd;
    FSDP_CHECK(nn_params_create(&m->params, 30 * cfg.n_layer + 4));  // 16 per layer, 14 more for adapters
    nn_embedding_init(&m->embed, &m->params, "model.embed_tokens.weight", cfg.vocab_size, C, cfg.init_std);
    FSDP_CHECK(nn_sequential_create(&m->blocks, cfg.n_layer));
    nn_block_config bc = {0};
    bc.d_model = C;
    bc.n_heads = cfg.n_head;
    bc.kv_heads = cfg.n_kv_head;
    bc.head_dim = cfg.head_dim;
    bc.d_ff = cfg.d_ff;
    bc.attn_dropout = cfg.attn_dropout;
    bc.ln_eps = cfg.rms_eps;
    bc.qkv_bias = cfg.qkv_bias;
    bc.o_bias = cfg.o_bias;
    bc.mlp_bias = cfg.mlp_bias;
    for (int i = 0; i < cfg.n_layer; i++) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "model.layers.%d.", i);
        nn_block_init_llama(&m->blocks.blocks[i], &m->params, prefix, bc, i, cfg.init_std);
    }
    nn_rmsnorm_init(&m->norm, &m->params, "model.norm.", C, cfg.rms_eps);
    if (cfg.tie_embeddings) {
        m->lm_head = m->embed.weight;
    } else {
        int64_t shape[2] = {cfg.vocab_size, C};
        m->lm_head = nn_params_add(&m->params, "", "lm_head.weight", 2, shape, (nn_init){NN_INIT_NORMAL, cfg.init_std});
    }
    return make_rope_tables(m);
}

static void free_activations(nn_llama *m) {
    void *bufs[] = {m->idx, m->targets, m->emb, m->norm_out, m->norm_rstd, m->logits, m->ce_stats, m->losses,
                    m->dx, m->demb, m->loss, m->rope_cos, m->rope_sin};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) fsdp_dev_free(m->dev, bufs[i]);
    m->idx = m->targets = NULL;
    m->emb = m->norm_out = m->norm_rstd = m->logits = m->ce_stats = m->losses = m->dx = m->demb = NULL;
    m->rope_cos = m->rope_sin = NULL;
    m->loss = NULL;
    m->capacity_rows = 0;
}

static const nn_lora_site lora_sites[] = {{LLAMA_LORA_Q, "self_attn.q_proj"},  {LLAMA_LORA_K, "self_attn.k_proj"},
                                          {LLAMA_LORA_V, "self_attn.v_proj"},  {LLAMA_LORA_O, "self_attn.o_proj"},
                                          {LLAMA_LORA_GATE, "mlp.gate_proj"},  {LLAMA_LORA_UP, "mlp.up_proj"},
                                          {LLAMA_LORA_DOWN, "mlp.down_proj"}};
#define N_LORA_SITES (int)(sizeof lora_sites / sizeof lora_sites[0])

const char *nn_llama_lora_target_name(int i) { return i >= 0 && i < N_LORA_SITES ? lora_sites[i].name : NULL; }

fsdp_status nn_llama_lora_targets(const char *list, unsigned *mask) {
    return nn_lora_parse_targets(lora_sites, N_LORA_SITES, list, "a Llama layer",
                                 "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj", mask);
}

fsdp_status nn_llama_add_lora(nn_llama *m, unsigned targets, int r, float alpha, float dropout) {
    nn_linear **layers = malloc((size_t)m->cfg.n_layer * N_LORA_SITES * sizeof *layers);  // (n_layer, sites)
    if (!layers) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for the adapters");
    for (int b = 0; b < m->cfg.n_layer; b++) {
        nn_block *blk = &m->blocks.blocks[b];
        nn_linear *of_block[N_LORA_SITES] = {&blk->attn.q_proj, &blk->attn.k_proj, &blk->attn.v_proj,
                                             &blk->attn.out_proj, &blk->fc1, &blk->fc3, &blk->fc2};
        memcpy(layers + (size_t)b * N_LORA_SITES, of_block, sizeof of_block);
    }
    fsdp_status st = nn_lora_attach(&m->lora, &m->n_lora, &m->params, lora_sites, N_LORA_SITES, layers,
                                    m->cfg.n_layer, "model.layers.%d.", targets, r, alpha, dropout);
    free(layers);
    return st;
}

void nn_llama_free(nn_llama *m) {
    for (int i = 0; i < m->n_lora; i++) nn_lora_free(&m->lora[i]);
    free(m->lora);
    free_activations(m);
    nn_sequential_free(&m->blocks);
    nn_params_destroy(&m->params);
    free(m->rope_cos_host);
    free(m->rope_sin_host);
    memset(m, 0, sizeof *m);
}

// The activations and the rotary tables (device memory of dev), allocated at the first forward of a
// shape and kept while later shapes fit; the tables copied once per device.
static fsdp_status ensure_activations(nn_llama *m, fsdp_stream *st, fsdp_dev *dev, int B, int T) {
    size_t N = (size_t)B * T;
    m->B = B;
    m->T = T;
    if (m->dev != dev) {
        free_activations(m);
        m->dev = dev;
    }
    if (!m->rope_cos) {
        size_t bytes = sizeof(float) * (size_t)m->cfg.max_seq * (size_t)(m->cfg.head_dim / 2);
        m->rope_cos = fsdp_dev_alloc(dev, bytes, FSDP_MEM_ACTIVATIONS);
        m->rope_sin = fsdp_dev_alloc(dev, bytes, FSDP_MEM_ACTIVATIONS);
        if (!m->rope_cos || !m->rope_sin) return FSDP_ERR_NOMEM;
        FSDP_CHECK(fsdp_copy_h2d(st, m->rope_cos, m->rope_cos_host, bytes));
        FSDP_CHECK(fsdp_copy_h2d(st, m->rope_sin, m->rope_sin_host, bytes));
        for (int i = 0; i < m->blocks.count; i++) {
            m->blocks.blocks[i].rope_cos = m->rope_cos;
            m->blocks.blocks[i].rope_sin = m->rope_sin;
        }
    }
    if (N <= m->capacity_rows) return FSDP_OK;
    size_t C = (size_t)m->cfg.n_embd, V = (size_t)m->cfg.vocab_size;
    void *bufs[] = {m->idx, m->targets, m->emb, m->norm_out, m->norm_rstd, m->logits, m->ce_stats, m->losses,
                    m->dx, m->demb, m->loss};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) fsdp_dev_free(dev, bufs[i]);
    m->idx = fsdp_dev_alloc(dev, N * sizeof(int32_t), FSDP_MEM_ACTIVATIONS);
    m->targets = fsdp_dev_alloc(dev, N * sizeof(int32_t), FSDP_MEM_ACTIVATIONS);
    m->loss = fsdp_dev_alloc(dev, sizeof(double), FSDP_MEM_ACTIVATIONS);
    struct { float **p; size_t n; } want[] = {
        {&m->emb, N * C}, {&m->norm_out, N * C}, {&m->norm_rstd, N}, {&m->logits, N * V},
        {&m->ce_stats, N * 2}, {&m->losses, N}, {&m->dx, N * C}, {&m->demb, N * C},
    };
    m->capacity_rows = 0;
    if (!m->idx || !m->targets || !m->loss) return FSDP_ERR_NOMEM;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        *want[i].p = fsdp_dev_alloc(dev, want[i].n * sizeof(float), FSDP_MEM_ACTIVATIONS);
        if (!*want[i].p) return FSDP_ERR_NOMEM;
    }
    m->capacity_rows = N;
    return FSDP_OK;
}

fsdp_status nn_llama_reserve(const nn_ctx *ctx, nn_llama *m, int B, int T) {
    FSDP_CHECK(ensure_activations(m, ctx->stream, ctx->dev, B, T));
    return nn_sequential_reserve(ctx, &m->blocks, B, T);
}

fsdp_status nn_llama_forward(const nn_ctx *ctx, nn_llama *m, const int32_t *idx, const int32_t *targets, int B,
                             int T) {
    if (T > m->cfg.max_seq)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "sequence length %d exceeds the model's %d positions", T, m->cfg.max_seq);
    int N = B * T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
    for (int n = 0; n < N; n++) {
        if (idx[n] < 0 || idx[n] >= V)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "idx[%d][%d] = %d is outside the vocabulary [0, %d)", n / T, n % T,
                              idx[n], V);
        if (targets[n] < 0 || targets[n] >= V)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "targets[%d][%d] = %d is outside the vocabulary [0, %d)", n / T,
                              n % T, targets[n], V);
    }
    FSDP_CHECK(ensure_activations(m, ctx->stream, ctx->dev, B, T));
    fsdp_stream *st = ctx->stream;
    FSDP_CHECK(fsdp_copy_h2d(st, m->idx, idx, sizeof(int32_t) * (size_t)N));
    FSDP_CHECK(fsdp_copy_h2d(st, m->targets, targets, sizeof(int32_t) * (size_t)N));
    nn_embedding_forward(ctx, &m->embed, m->emb, m->idx, N, 0);
    const float *x = NULL;
    FSDP_CHECK(nn_sequential_forward(ctx, &m->blocks, m->emb, B, T, &x));
    nn_rmsnorm_forward(ctx, &m->norm, m->norm_out, NULL, m->norm_rstd, x, N);
    nn_gemm_param(ctx, 0, 1, N, V, C, m->norm_out, C, m->lm_head, C, 0.0f, m->logits, V);
    ctx->k->cross_entropy_forward(st, m->loss, m->losses, m->ce_stats, m->logits, m->targets, N, V);
    return FSDP_OK;
}

fsdp_status nn_llama_backward(const nn_ctx *ctx, nn_llama *m, float dloss) {
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    int N = m->B * m->T, C = m->cfg.n_embd, V = m->cfg.vocab_size;
    float *dlogits = m->logits;  // (N, V): the logits are not needed any more
    k->cross_entropy_backward(st, dlogits, m->logits, m->ce_stats, m->targets, dloss / (float)N, N, V);
    nn_gemm_param(ctx, 0, 0, N, C, V, dlogits, V, m->lm_head, C, 0.0f, m->dx, C);  // d norm_out
    if (m->lm_head->grad)  // not when frozen
        k->gemm(st, 1, 0, V, C, N, 1.0f, dlogits, V, m->norm_out, C, 1.0f, m->lm_head->grad, C);
    const float *x_last = m->blocks.count ? m->blocks.blocks[m->blocks.count - 1].out : m->emb;
    nn_rmsnorm_backward(ctx, &m->norm, m->demb, m->dx, NULL, x_last, m->norm_rstd, N);
    FSDP_CHECK(nn_sequential_backward(ctx, &m->blocks, m->demb, m->emb, m->dx));  // dx = d emb
    nn_embedding_backward(ctx, &m->embed, m->dx, m->idx, N);
    return FSDP_OK;
}
