// test_gradcheck.c: finite-difference checks of every module's backward: nn_linear, nn_layernorm,
// nn_mha, the attention kernel with grouped-query heads (interleaved and planar qkv), the elementwise
// kernels, nn_block, nn_sequential, nn_embedding, the cross-entropy kernel and nn_abs_mean (the whole models are in test_gradcheck_models.c). The method, the tolerances and the
// device-memory discipline (it passes under FSDP_DEVICE=guard) are described in gradcheck_fixture.h.
#include "gradcheck_fixture.h"
#include "nn/embedding.h"
#include "nn/encoder_stack.h"
#include "nn/loss.h"

// ---------------------------------------------------------------------------------------------
// nn_linear (torch and conv1d layouts); also a negative control: a doubled or negated gradient
// must fail the comparison.

typedef struct {
    nn_linear l;
    buf x, r;
    float *out;  // device
    int N;
} lin_t;

static double lin_fwd(void *s) {
    lin_t *t = s;
    nn_linear_forward(&CTX, &t->l, t->out, t->x.d, t->N);
    return dot_r(t->out, t->r.h, (size_t)t->N * t->l.out);
}

static void test_linear(int conv1d) {
    printf("nn_linear (%s layout)\n", conv1d ? "conv1d" : "torch");
    int N = 10, IN = 16, OUT = 24;
    lin_t t = {.N = N};
    nn_params ps;
    nn_params_create(&ps, 2);
    nn_linear_init(&t.l, &ps, "", "weight", "bias", IN, OUT, conv1d);
    pmem pm = bind_params(&ps);
    t.x = buf_new((size_t)N * IN), t.out = dalloc((size_t)N * OUT), t.r = buf_new((size_t)N * OUT);
    buf dx = buf_new((size_t)N * IN), dx2 = buf_new((size_t)N * IN);
    fill_normal(t.x.h, (size_t)N * IN, 1, 1.0f);
    fill_uniform(t.r.h, (size_t)N * OUT, 2, -1.0f, 1.0f);
    fill(dx.h, (size_t)N * IN, DINP_GARBAGE);
    buf_up(t.x), buf_up(t.r), buf_up(dx);
    lin_fwd(&t);
    nn_linear_backward(&CTX, &t.l, dx.d, 0, t.r.d, t.x.d, N);
    unprefill(&pm);
    buf_down(dx);
    fd_problem pb = {lin_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps, &pm);
    fd_check_buf(&pb, "input", t.x, dx.h);

    // negative control: the checker must reject 2x and -1x the right weight gradient
    int64_t nw = t.l.weight->numel, woff = param_offset(&pm, t.l.weight);
    const float *wgrad = pm.h + pm.n + woff;
    float *bad = falloc((size_t)nw);
    for (int64_t i = 0; i < nw; i++) bad[i] = 2.0f * wgrad[i];
    CHECK(fd_compare(&pb, pm.h + woff, pm.d + woff, bad, nw).worst > 0.3);
    for (int64_t i = 0; i < nw; i++) bad[i] = -wgrad[i];
    CHECK(fd_compare(&pb, pm.h + woff, pm.d + woff, bad, nw).worst > 0.3);

    // accumulate_dinp = 1 adds to what is there
    fill(dx2.h, (size_t)N * IN, 1.0f);
    buf_up(dx2);
    nn_linear_backward(&CTX, &t.l, dx2.d, 1, t.r.d, t.x.d, N);
    buf_down(dx2);
    double maxdiff = 0;
    for (int i = 0; i < N * IN; i++) maxdiff = fmax(maxdiff, fabs(dx2.h[i] - 1.0f - dx.h[i]));
    CHECK(maxdiff < 1e-5);
    free(bad), buf_free(dx), buf_free(dx2), buf_free(t.x), dfree(t.out), buf_free(t.r), pmem_free(&pm);
    nn_params_destroy(&ps);
}

// ---------------------------------------------------------------------------------------------
// nn_layernorm

typedef struct {
    nn_layernorm ln;
    buf x, r;
    float *out, *mean, *rstd;  // device
    int N;
} ln_t;

static double ln_fwd(void *s) {
    ln_t *t = s;
    nn_layernorm_forward(&CTX, &t->ln, t->out, NULL, t->mean, t->rstd, t->x.d, t->N);
    return dot_r(t->out, t->r.h, (size_t)t->N * t->ln.C);
}

static void test_layernorm(void) {
    printf("nn_layernorm\n");
    int N = 10, C = 16;
    ln_t t = {.N = N};
    nn_params ps;
    nn_params_create(&ps, 2);
    nn_layernorm_init(&t.ln, &ps, "", C, 1e-5f);
    pmem pm = bind_params(&ps);
    t.x = buf_new((size_t)N * C), t.out = dalloc((size_t)N * C), t.r = buf_new((size_t)N * C);
    t.mean = dalloc((size_t)N), t.rstd = dalloc((size_t)N);
    buf dx = buf_new((size_t)N * C);
    fill_normal(t.x.h, (size_t)N * C, 3, 1.0f);
    for (int i = 0; i < N * C; i++) t.x.h[i] += 0.3f * (float)(i / C);  // rows with different means
    fill_uniform(t.r.h, (size_t)N * C, 4, -1.0f, 1.0f);
    fill(dx.h, (size_t)N * C, DINP_GARBAGE);
    buf_up(t.x), buf_up(t.r), buf_up(dx);
    ln_fwd(&t);
    nn_layernorm_backward(&CTX, &t.ln, dx.d, t.r.d, NULL, t.x.d, t.mean, t.rstd, N);
    unprefill(&pm);
    buf_down(dx);
    fd_problem pb = {ln_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps, &pm);
    fd_check_buf(&pb, "input", t.x, dx.h);
    buf_free(dx), buf_free(t.x), dfree(t.out), buf_free(t.r), dfree(t.mean), dfree(t.rstd), pmem_free(&pm);
    nn_params_destroy(&ps);
}

// ---------------------------------------------------------------------------------------------
// attention kernel through nn_mha (torch packed in_proj)

typedef struct {
    nn_ctx ctx;
    nn_mha m;
    fsdp_attention_dims d;
    buf x, r;
    float *qkv, *att, *cx, *out;  // device
} mha_t;

static double mha_fwd(void *s) {
    mha_t *t = s;
    nn_mha_forward(&t->ctx, &t->m, &t->d, t->out, t->qkv, t->att, t->cx, nn_in_f32(t->x.d));
    return dot_r(t->out, t->r.h, (size_t)t->d.B * t->d.T * t->d.C);
}

static void test_mha(int causal, int batch_first, int H) {
    int B = 2, T = 5, C = 16, N = B * T;
    printf("nn_mha (%s, %s, H=%d)\n", causal ? "causal" : "non-causal", batch_first ? "batch_first" : "seq-first", H);
    mha_t t;
    memset(&t, 0, sizeof t);
    t.ctx = make_ctx();
    nn_params ps;
    nn_params_create(&ps, 4);
    nn_mha_init_torch(&t.m, &ps, "", C, H, causal, 0.0f);
    pmem pm = bind_params(&ps);
    t.d = (fsdp_attention_dims){B, T, C, H, batch_first ? T : 1, batch_first ? 1 : B, causal, 0.0f,
                                nn_dropout_rng(&t.ctx, 0, 1), 0, 0};
    t.x = buf_new((size_t)N * C), t.qkv = dalloc((size_t)N * 3 * C), t.att = dalloc((size_t)B * H * T * T);
    t.cx = dalloc((size_t)N * C), t.out = dalloc((size_t)N * C), t.r = buf_new((size_t)N * C);
    buf dx = buf_new((size_t)N * C);
    float *sc = dalloc((size_t)N * C), *s3c = dalloc((size_t)N * 3 * C);
    fill_normal(t.x.h, (size_t)N * C, 5, 1.0f);
    fill_uniform(t.r.h, (size_t)N * C, 6, -1.0f, 1.0f);
    fill(dx.h, (size_t)N * C, DINP_GARBAGE);
    buf_up(t.x), buf_up(t.r), buf_up(dx);
    mha_fwd(&t);
    nn_mha_backward(&t.ctx, &t.m, &t.d, dx.d, 0, t.r.d, nn_in_f32(t.x.d), t.qkv, t.att, t.cx, sc, s3c);
    unprefill(&pm);
    buf_down(dx);
    fd_problem pb = {mha_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps, &pm);
    fd_check_buf(&pb, "input", t.x, dx.h);
    buf_free(dx), dfree(sc), dfree(s3c), buf_free(t.x), dfree(t.qkv), dfree(t.att), dfree(t.cx), dfree(t.out);
    buf_free(t.r), pmem_free(&pm);
    nn_params_destroy(&ps);
}

// ---------------------------------------------------------------------------------------------
// the attention kernel alone with grouped-query heads (kv_heads < H), qkv interleaved or planar: the
// gradient of every element of qkv, dk and dv summing the query heads that read them

typedef struct {
    fsdp_attention_dims d;
    buf qkv, r;
    float *out, *stats;  // device: (B*T, C), (B, H, T)
} gqa_t;

static double gqa_fwd(void *s) {
    gqa_t *t = s;
    K->attention_forward(ST, t->out, t->stats, t->qkv.d, &t->d);
    return dot_r(t->out, t->r.h, (size_t)t->d.B * t->d.T * t->d.C);
}

static void test_attention_gqa(int kv_heads, int planar, int causal) {
    int B = 2, T = 5, H = 4, hd = 4, C = H * hd, N = B * T;
    printf("attention kernel (H=%d, kv_heads=%d, %s, %s)\n", H, kv_heads, planar ? "planar" : "interleaved",
           causal ? "causal" : "non-causal");
    gqa_t t = {.d = {.B = B, .T = T, .C = C, .H = H, .stride_b = T, .stride_t = 1, .causal = causal,
                     .kv_heads = kv_heads, .planar = planar}};
    size_t n3 = (size_t)N * (size_t)(H + 2 * kv_heads) * hd;
    t.qkv = buf_new(n3), t.r = buf_new((size_t)N * C);
    t.out = dalloc((size_t)N * C), t.stats = dalloc((size_t)B * H * T);
    fill_normal(t.qkv.h, n3, 17, 1.0f);
    fill_normal(t.r.h, (size_t)N * C, 18, 1.0f);
    buf_up(t.qkv), buf_up(t.r);
    buf dqkv = buf_new(n3);
    fill(dqkv.h, n3, DINP_GARBAGE);
    buf_up(dqkv);
    gqa_fwd(&t);
    K->attention_backward(ST, dqkv.d, t.r.d, t.qkv.d, t.out, t.stats, &t.d);
    buf_down(dqkv);
    fd_problem pb = {gqa_fwd, &t, {0}, {0}};
    if (!planar) {
        fd_check_buf(&pb, "qkv", t.qkv, dqkv.h);
    } else {  // plane by plane: samples in the keys and values of every call
        static const char *plane[] = {"q plane", "k plane", "v plane"};
        size_t at = 0;
        for (int i = 0; i < 3; i++) {
            size_t n = (size_t)N * (i ? kv_heads : H) * hd;
            fd_check(&pb, plane[i], t.qkv.h + at, t.qkv.d + at, dqkv.h + at, (int64_t)n);
            at += n;
        }
    }
    buf_free(t.qkv), buf_free(t.r), buf_free(dqkv), dfree(t.out), dfree(t.stats);
}

// ---------------------------------------------------------------------------------------------
// elementwise kernels: relu, gelu (exact), gelu (tanh), dropout

enum { ACT_RELU, ACT_GELU, ACT_GELU_TANH, ACT_DROPOUT };

typedef struct {
    int kind;
    buf x, r;
    float *out;  // device
    size_t n;
} act_t;

static const fsdp_rng act_rng = {11, 22};

static double act_fwd(void *s) {
    act_t *t = s;
    switch (t->kind) {
    case ACT_RELU: K->relu_forward(ST, t->out, t->x.d, t->n); break;
    case ACT_GELU: K->gelu_forward(ST, t->out, t->x.d, t->n, 0); break;
    case ACT_GELU_TANH: K->gelu_forward(ST, t->out, t->x.d, t->n, 1); break;
    default: K->dropout_forward(ST, t->out, t->x.d, t->n, 0.3f, act_rng); break;
    }
    return dot_r(t->out, t->r.h, t->n);
}

static void test_activation(int kind) {
    static const char *names[] = {"relu", "gelu (exact)", "gelu (tanh)", "dropout p=0.3"};
    printf("kernel %s\n", names[kind]);
    act_t t = {.kind = kind, .n = 80};
    t.x = buf_new(t.n), t.out = dalloc(t.n), t.r = buf_new(t.n);
    buf dx = buf_new(t.n);
    fill_uniform(t.x.h, t.n, 7, -3.0f, 3.0f);
    for (size_t i = 0; i < t.n; i++)  // keep away from relu's kink
        if (fabsf(t.x.h[i]) < 0.1f) t.x.h[i] = t.x.h[i] < 0 ? -0.1f : 0.1f;
    fill_uniform(t.r.h, t.n, 8, -1.0f, 1.0f);
    fill(dx.h, t.n, DINP_GARBAGE);
    buf_up(t.x), buf_up(t.r), buf_up(dx);
    act_fwd(&t);
    switch (kind) {
    case ACT_RELU: K->relu_backward(ST, dx.d, t.r.d, t.out, t.n); break;
    case ACT_GELU: K->gelu_backward(ST, dx.d, t.r.d, t.x.d, t.n, 0); break;
    case ACT_GELU_TANH: K->gelu_backward(ST, dx.d, t.r.d, t.x.d, t.n, 1); break;
    default: K->dropout_backward(ST, dx.d, t.r.d, t.n, 0.3f, act_rng); break;
    }
    buf_down(dx);
    fd_problem pb = {act_fwd, &t, {0}, {0}};
    fd_check_buf(&pb, "input", t.x, dx.h);
    buf_free(dx), buf_free(t.x), dfree(t.out), buf_free(t.r);
}

// ---------------------------------------------------------------------------------------------
// nn_block: TransformerEncoderLayer variants and the GPT-2 block

typedef struct {
    nn_ctx ctx;
    nn_block blk;
    buf x, r;
    int B, T;
} blk_t;

static double blk_fwd(void *s) {
    blk_t *t = s;
    CHECK(nn_block_forward(&t->ctx, &t->blk, t->x.d, t->B, t->T) == FSDP_OK);
    return dot_r(t->blk.out, t->r.h, (size_t)t->B * t->T * t->blk.cfg.d_model);
}

// zeros among x (n,) device
// how many of n values a (device) equals b (device) at, exactly
static size_t count_equal(const float *a, const float *b, size_t n) {
    float *ha = falloc(n), *hb = falloc(n);
    download(ha, a, n * sizeof(float)), download(hb, b, n * sizeof(float));
    size_t z = 0;
    for (size_t i = 0; i < n; i++) z += ha[i] == hb[i];
    free(ha), free(hb);
    return z;
}

static void test_block(const char *title, nn_block_config cfg, int gpt2) {
    printf("nn_block: %s\n", title);
    int B = 2, T = 5, C = cfg.d_model, N = B * T;
    blk_t t;
    memset(&t, 0, sizeof t);
    t.ctx = make_ctx();
    t.B = B, t.T = T;
    nn_params ps;
    nn_params_create(&ps, 12);
    if (gpt2) nn_block_init_gpt2(&t.blk, &ps, "h.0.", cfg, 0, 0.02f, 0.02f / sqrtf(2.0f * 2));
    else nn_block_init_encoder(&t.blk, &ps, "0.", cfg, 0);
    pmem pm = bind_params(&ps);
    t.x = buf_new((size_t)N * C), t.r = buf_new((size_t)N * C);
    buf dx = buf_new((size_t)N * C);
    float *scratch = dalloc(nn_block_scratch_floats(&cfg, B, T));
    fill_normal(t.x.h, (size_t)N * C, 9, 1.0f);
    fill_uniform(t.r.h, (size_t)N * C, 10, -1.0f, 1.0f);
    fill(dx.h, (size_t)N * C, DINP_GARBAGE);
    buf_up(t.x), buf_up(t.r), buf_up(dx);
    size_t act0 = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    double l0 = blk_fwd(&t);
    // what the block keeps for backward, exactly: per token ln1_out, q/k/v, attention's output, r1,
    // ln2_out (pre-LN) or r2 (post-LN), out (8 C), fc1's output and the activation (2 F), the norms'
    // mean and rstd (4); per (b, h, t) the log-sum-exp. out_proj's and fc2's outputs are not kept.
    size_t kept = sizeof(float) * ((size_t)N * (8 * C + 2 * cfg.d_ff + 4) + (size_t)N * cfg.n_heads);
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATIONS) - act0 == kept);
    nn_block_backward(&t.ctx, &t.blk, dx.d, t.r.d, t.x.d, scratch);
    unprefill(&pm);
    buf_down(dx);
    fd_problem pb = {blk_fwd, &t, {0}, {0}};
    if (cfg.activation == FSDP_ACT_RELU) pb.kink[0] = t.blk.f1, pb.nkink[0] = (size_t)N * cfg.d_ff;
    if (cfg.dropout > 0) {  // dropout really is active, and the masks change with the step
        // r1 = x + dropout(attn_out) (fused into the norm after it): a dropped element leaves x as it was
        CHECK(count_equal(t.blk.r1, t.x.d, (size_t)N * C) > 0);
        t.ctx.step++;
        CHECK(blk_fwd(&t) != l0);
        t.ctx.step--;
    }
    fd_check_params(&pb, &ps, &pm);
    fd_check_buf(&pb, "input", t.x, dx.h);
    buf_free(dx), dfree(scratch), buf_free(t.x), buf_free(t.r), pmem_free(&pm);
    nn_block_free(&t.blk);
    nn_params_destroy(&ps);
}

// the configuration nn_gpt2_create gives its blocks
static nn_block_config gpt2_cfg(int C, int H, float p) {
    nn_block_config c = {0};
    c.d_model = C, c.n_heads = H, c.d_ff = 4 * C;
    c.dropout = c.attn_dropout = p;
    c.activation = FSDP_ACT_GELU_TANH;
    c.norm_first = 1, c.causal = 1, c.batch_first = 1, c.ffn_dropout = 0;
    c.ln_eps = 1e-5f;
    return c;
}

// ---------------------------------------------------------------------------------------------
// nn_sequential of 2 encoder layers (built by nn_encoder_stack_create), input gradient too. GELU:
// with ReLU, perturbing block 0 moves some of block 1's 240 ReLU inputs across 0 almost always.

typedef struct {
    nn_ctx ctx;
    nn_encoder_stack m;
    buf x, r;
    int B, T;
} seq_t;

static double seq_fwd(void *s) {
    seq_t *t = s;
    const float *out = NULL;
    CHECK(nn_sequential_forward(&t->ctx, &t->m.seq, t->x.d, t->B, t->T, &out) == FSDP_OK);
    return dot_r(out, t->r.h, (size_t)t->B * t->T * t->m.layer.d_model);
}

static void test_sequential(void) {
    printf("nn_sequential: 2 TransformerEncoderLayers (post-LN, gelu, seq-first)\n");
    int B = 2, T = 5, C = 16, N = B * T;
    seq_t t;
    memset(&t, 0, sizeof t);
    t.ctx = make_ctx();
    t.B = B, t.T = T;
    CHECK(nn_encoder_stack_create(&t.m, small_cfg(4, FSDP_ACT_GELU, 0, 0, 0, 0.0f), 2) == FSDP_OK);
    pmem pm = bind_params(&t.m.params);
    t.x = buf_new((size_t)N * C), t.r = buf_new((size_t)N * C);
    buf dx = buf_new((size_t)N * C);
    fill_normal(t.x.h, (size_t)N * C, 12, 1.0f);
    fill_uniform(t.r.h, (size_t)N * C, 13, -1.0f, 1.0f);
    fill(dx.h, (size_t)N * C, DINP_GARBAGE);
    buf_up(t.x), buf_up(t.r), buf_up(dx);
    seq_fwd(&t);
    CHECK(nn_sequential_backward(&t.ctx, &t.m.seq, t.r.d, t.x.d, dx.d) == FSDP_OK);
    unprefill(&pm);
    buf_down(dx);
    fd_problem pb = {seq_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &t.m.params, &pm);
    fd_check_buf(&pb, "input", t.x, dx.h);
    buf_free(dx), buf_free(t.x), buf_free(t.r), pmem_free(&pm);
    nn_encoder_stack_free(&t.m);
}

// ---------------------------------------------------------------------------------------------
// nn_embedding (repeated indices: the scatter must add), cross-entropy kernel, nn_abs_mean

typedef struct {
    nn_embedding e;
    const int32_t *idx;  // device
    float *out;          // device
    buf r;
    int N;
} emb_t;

static double emb_fwd(void *s) {
    emb_t *t = s;
    nn_embedding_forward(&CTX, &t->e, t->out, t->idx, t->N, 0);
    return dot_r(t->out, t->r.h, (size_t)t->N * t->e.C);
}

static void test_embedding(void) {
    printf("nn_embedding\n");
    static const int32_t idx[10] = {3, 0, 6, 3, 3, 1, 6, 2, 5, 0};
    int N = 10, V = 7, C = 16;
    int32_t *idx_d = dalloc_bytes(sizeof idx);
    upload(idx_d, idx, sizeof idx);
    emb_t t = {.idx = idx_d, .N = N};
    nn_params ps;
    nn_params_create(&ps, 1);
    nn_embedding_init(&t.e, &ps, "weight", V, C, 0.5f);
    pmem pm = bind_params(&ps);
    t.out = dalloc((size_t)N * C), t.r = buf_new((size_t)N * C);
    fill_uniform(t.r.h, (size_t)N * C, 14, -1.0f, 1.0f);
    buf_up(t.r);
    emb_fwd(&t);
    nn_embedding_backward(&CTX, &t.e, t.r.d, idx_d, N);
    unprefill(&pm);
    fd_problem pb = {emb_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps, &pm);
    float *out = falloc((size_t)N * C);
    fill(out, (size_t)N * C, 1.0f);  // accumulate = 1 adds the rows
    upload(t.out, out, sizeof(float) * (size_t)N * C);
    nn_embedding_forward(&CTX, &t.e, t.out, idx_d, N, 1);
    download(out, t.out, sizeof(float) * (size_t)N * C);
    CHECK_NEAR(out[2 * C + 5], 1.0f + pm.h[param_offset(&pm, t.e.weight) + 6 * C + 5], 1e-6);
    free(out), dfree(t.out), buf_free(t.r), pmem_free(&pm), dfree(idx_d);
    nn_params_destroy(&ps);
}

typedef struct {
    buf logits;
    float *stats, *losses;  // device: (N, 2), (N,)
    double *loss;           // (1,) device
    const int32_t *tgt;     // device
    int N, V;
} ce_t;

#define CE_SCALE 25.0  // L = CE_SCALE * mean cross-entropy (gradients of order 1)

static double ce_fwd(void *s) {
    ce_t *t = s;
    K->cross_entropy_forward(ST, t->loss, t->losses, t->stats, t->logits.d, t->tgt, t->N, t->V);
    return CE_SCALE * read_double(t->loss);
}

static void test_cross_entropy(void) {
    printf("kernel cross_entropy (L = %.1f * mean)\n", CE_SCALE);
    static const int32_t tgt[10] = {0, 10, 4, 4, 7, 1, 2, 9, 3, 5};
    int N = 10, V = 11;
    int32_t *tgt_d = dalloc_bytes(sizeof tgt);
    upload(tgt_d, tgt, sizeof tgt);
    ce_t t = {buf_new((size_t)N * V), dalloc(2 * (size_t)N), dalloc((size_t)N), dalloc_bytes(sizeof(double)),
              tgt_d, N, V};
    buf dl = buf_new((size_t)N * V);
    fill_normal(t.logits.h, (size_t)N * V, 15, 2.0f);
    fill(dl.h, (size_t)N * V, DINP_GARBAGE);
    buf_up(t.logits), buf_up(dl);
    double mean = ce_fwd(&t) / CE_SCALE, sum = 0;
    float losses[10];
    download(losses, t.losses, sizeof losses);
    for (int n = 0; n < N; n++) sum += losses[n];
    CHECK_NEAR(sum / N, mean, 1e-5);
    K->cross_entropy_backward(ST, dl.d, t.logits.d, t.stats, tgt_d, (float)(CE_SCALE / N), N, V);
    buf_down(dl);
    fd_problem pb = {ce_fwd, &t, {0}, {0}};
    fd_check_buf(&pb, "logits", t.logits, dl.h);
    buf_free(t.logits), dfree(t.stats), dfree(t.losses), dfree(t.loss), buf_free(dl), dfree(tgt_d);
}

typedef struct {
    buf y;
    double *loss;  // (1,) device
} abs_t;

static double abs_fwd(void *s) {
    abs_t *t = s;
    nn_abs_mean_forward(&CTX, t->loss, t->y.d, t->y.n);
    return 40.0 * read_double(t->loss);  // L = 40 * mean|y|
}

static void test_abs_mean(void) {
    printf("nn_abs_mean (L = 40 * mean|y|)\n");
    abs_t t = {buf_new(40), dalloc_bytes(sizeof(double))};
    buf dy = buf_new(40);
    fill_uniform(t.y.h, t.y.n, 16, -2.0f, 2.0f);
    for (size_t i = 0; i < t.y.n; i++)
        if (fabsf(t.y.h[i]) < 0.1f) t.y.h[i] = t.y.h[i] < 0 ? -0.1f : 0.1f;
    fill(dy.h, dy.n, DINP_GARBAGE);
    buf_up(t.y), buf_up(dy);
    nn_abs_mean_backward(&CTX, dy.d, t.y.d, t.y.n, 40.0f);
    buf_down(dy);
    fd_problem pb = {abs_fwd, &t, {0}, {0}};
    fd_check_buf(&pb, "y", t.y, dy.h);
    t.y.h[0] = 0.0f;  // sign(0) = 0
    buf_up(t.y);
    nn_abs_mean_backward(&CTX, dy.d, t.y.d, t.y.n, 40.0f);
    buf_down(dy);
    CHECK(dy.h[0] == 0.0f);
    buf_free(t.y), buf_free(dy), dfree(t.loss);
}

int main(void) {
    gradcheck_setup();
    test_linear(0);
    test_linear(1);
    test_layernorm();
    test_mha(0, 0, 4);
    test_mha(1, 0, 4);
    test_mha(0, 1, 2);
    test_mha(1, 1, 2);
    test_attention_gqa(2, 0, 1);
    test_attention_gqa(1, 1, 0);
    test_attention_gqa(2, 1, 1);
    for (int a = ACT_RELU; a <= ACT_DROPOUT; a++) test_activation(a);
    test_block("encoder post-LN relu, seq-first, H=4", small_cfg(4, FSDP_ACT_RELU, 0, 0, 0, 0.0f), 0);
    test_block("encoder pre-LN gelu, seq-first, H=2", small_cfg(2, FSDP_ACT_GELU, 1, 0, 0, 0.0f), 0);
    test_block("encoder post-LN gelu, causal batch_first, H=4", small_cfg(4, FSDP_ACT_GELU, 0, 1, 1, 0.0f), 0);
    test_block("GPT-2 block (C 16, H 2)", gpt2_cfg(16, 2, 0.0f), 1);
    test_block("encoder pre-LN gelu with dropout 0.2 (all four sites)", small_cfg(4, FSDP_ACT_GELU, 1, 0, 0, 0.2f), 0);
    test_sequential();
    test_embedding();
    test_cross_entropy();
    test_abs_mean();
    TEST_MAIN_END();
}
