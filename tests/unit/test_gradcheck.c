// test_gradcheck.c: finite-difference checks of every module's backward.
// The scalar loss is L = sum_i out_i * r_i with fixed random weights r (accumulated in double), so
// the analytic gradients come from backward(dout = r). For ~20 sampled elements of every parameter
// tensor and of the input, the central difference (L(p+e) - L(p-e)) / (2e) is compared with the
// analytic gradient by |fd - an| / max(|fd|, |an|, FLOOR). Parameter grads are pre-filled with
// GRAD_PREFILL (they must be accumulated) and dinp with garbage (it must be overwritten).
// Samples whose perturbation moves a ReLU input across 0 are skipped (the loss has a kink there).
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "nn/encoder_stack.h"
#include "nn/gpt2.h"
#include "nn/loss.h"
#include "test.h"

#define FD_EPS 1e-2
#define FD_TOL 2e-2
#define FD_FLOOR 1e-2
#define FD_SAMPLES 20
#define GRAD_PREFILL 0.5f
#define DINP_GARBAGE 777.0f
#define MAX_KINKS 4

// ---------------------------------------------------------------------------------------------
// shared helpers

typedef double (*fwd_fn)(void *self);  // runs the forward at the current values, returns L

typedef struct {
    fwd_fn fwd;
    void *self;
    const float *kink[MAX_KINKS];  // ReLU inputs (valid after a forward); NULL when unused
    size_t nkink[MAX_KINKS];
} fd_problem;

static const fsdp_kernels *K;

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

static void fill_uniform(float *x, size_t n, uint64_t stream, float lo, float hi) {
    fsdp_rng_uniform_range((fsdp_rng){42, stream}, 0, x, n, lo, hi);
}

static void fill_normal(float *x, size_t n, uint64_t stream, float std) {
    fsdp_rng_normal((fsdp_rng){42, stream}, 0, x, n, 0.0f, std);
}

static double dot_r(const float *out, const float *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)out[i] * r[i];
    return s;
}

// One block holding every parameter's data then grad, bound to ps. Values: the module's own init
// plus U(-0.25, 0.25), so LayerNorm weights are not all 1 and biases are not 0.
static float *bind_params(nn_params *ps) {
    int64_t n = nn_params_numel(ps);
    float *mem = falloc(2 * (size_t)n);
    nn_params_bind_flat(ps, mem, mem + n);
    for (int i = 0; i < ps->count; i++) {
        nn_param *p = &ps->items[i];
        nn_param_init_slice(p, 7, 0, p->numel, p->data);
        fsdp_rng rng = {99, fsdp_hash_name(p->name)};
        for (int64_t j = 0; j < p->numel; j++) p->data[j] += 0.5f * (fsdp_rng_uniform_at(rng, (uint64_t)j) - 0.5f);
    }
    fill(mem + n, (size_t)n, GRAD_PREFILL);
    return mem;
}

// After backward: analytic = grad - GRAD_PREFILL (checks that grads were accumulated).
static void unprefill(nn_params *ps) {
    float *g = ps->items[0].grad;
    int64_t n = nn_params_numel(ps);
    for (int64_t i = 0; i < n; i++) g[i] -= GRAD_PREFILL;
}

static unsigned char *kink_signs(const fd_problem *pb) {
    size_t total = 0;
    for (int k = 0; k < MAX_KINKS; k++) total += pb->kink[k] ? pb->nkink[k] : 0;
    unsigned char *s = malloc(total + 1);
    size_t o = 0;
    for (int k = 0; k < MAX_KINKS; k++)
        for (size_t i = 0; pb->kink[k] && i < pb->nkink[k]; i++) s[o++] = pb->kink[k][i] > 0.0f;
    s[o] = 0;
    return s;
}

static int kink_changed(const fd_problem *pb, const unsigned char *base) {
    unsigned char *now = kink_signs(pb);
    size_t o = 0;
    int changed = 0;
    for (int k = 0; k < MAX_KINKS; k++)
        for (size_t i = 0; pb->kink[k] && i < pb->nkink[k]; i++, o++) changed |= now[o] != base[o];
    free(now);
    return changed;
}

typedef struct {
    double worst;  // worst relative error over the checked samples
    double max_an; // largest |analytic| among them
    int checked, skipped;
} fd_result;

// Compares analytic[i] with central differences of pb's loss w.r.t. x[i] for sampled i; x is
// restored bit-exactly after each sample.
static fd_result fd_compare(fd_problem *pb, float *x, const float *analytic, int64_t n) {
    fd_result res = {0, 0, 0, 0};
    pb->fwd(pb->self);
    unsigned char *base = kink_signs(pb);
    int ns = n < FD_SAMPLES ? (int)n : FD_SAMPLES;
    for (int s = 0; s < ns; s++) {
        int64_t stride = n / ns;
        int64_t i = (int64_t)s * stride + (int64_t)(fsdp_rng_uniform_at((fsdp_rng){5, (uint64_t)n}, (uint64_t)s) * (float)stride);
        float x0 = x[i];
        float xp = (float)(x0 + FD_EPS), xm = (float)(x0 - FD_EPS);
        x[i] = xp;
        double lp = pb->fwd(pb->self);
        int kinked = kink_changed(pb, base);
        x[i] = xm;
        double lm = pb->fwd(pb->self);
        kinked |= kink_changed(pb, base);
        x[i] = x0;
        if (kinked) {
            res.skipped++;
            continue;
        }
        double fd = (lp - lm) / ((double)xp - (double)xm), an = analytic[i];
        double denom = fmax(fmax(fabs(fd), fabs(an)), FD_FLOOR);
        double err = fabs(fd - an) / denom;
        if (err > res.worst) res.worst = err;
        if (fabs(an) > res.max_an) res.max_an = fabs(an);
        res.checked++;
    }
    free(base);
    pb->fwd(pb->self);  // leave the forward state of the unperturbed values behind
    return res;
}

// Checks one tensor, prints one line, and fails the test when the worst error exceeds FD_TOL or
// the sampled gradients are all too small for the comparison to mean anything.
static void fd_check(fd_problem *pb, const char *name, float *x, const float *analytic, int64_t n) {
    fd_result r = fd_compare(pb, x, analytic, n);
    printf("  %-34s worst rel err %.2e  (%d checked, %d skipped at relu kinks, max|g| %.2e)\n", name,
           r.worst, r.checked, r.skipped, r.max_an);
    CHECK(r.worst <= FD_TOL);
    CHECK(r.checked >= (n < FD_SAMPLES ? n : FD_SAMPLES) / 2);
    CHECK(r.max_an >= 10 * FD_FLOOR);
}

static void fd_check_params(fd_problem *pb, nn_params *ps) {
    for (int i = 0; i < ps->count; i++)
        fd_check(pb, ps->items[i].name, ps->items[i].data, ps->items[i].grad, ps->items[i].numel);
}

static nn_ctx make_ctx(void) {
    nn_ctx c = {K, 1, 1234, 3, 0};
    return c;
}

// ---------------------------------------------------------------------------------------------
// nn_linear (torch and conv1d layouts); also a negative control: a doubled or negated gradient
// must fail the comparison.

typedef struct {
    nn_linear l;
    float *x, *out, *r;
    int N;
} lin_t;

static double lin_fwd(void *s) {
    lin_t *t = s;
    nn_linear_forward(K, &t->l, t->out, t->x, t->N);
    return dot_r(t->out, t->r, (size_t)t->N * t->l.out);
}

static void test_linear(int conv1d) {
    printf("nn_linear (%s layout)\n", conv1d ? "conv1d" : "torch");
    int N = 10, IN = 16, OUT = 24;
    lin_t t = {.N = N};
    nn_params ps;
    nn_params_create(&ps, 2);
    nn_linear_init(&t.l, &ps, "", "weight", "bias", IN, OUT, conv1d);
    float *mem = bind_params(&ps);
    t.x = falloc((size_t)N * IN), t.out = falloc((size_t)N * OUT), t.r = falloc((size_t)N * OUT);
    float *dx = falloc((size_t)N * IN), *dx2 = falloc((size_t)N * IN);
    fill_normal(t.x, (size_t)N * IN, 1, 1.0f);
    fill_uniform(t.r, (size_t)N * OUT, 2, -1.0f, 1.0f);
    fill(dx, (size_t)N * IN, DINP_GARBAGE);
    lin_fwd(&t);
    nn_linear_backward(K, &t.l, dx, 0, t.r, t.x, N);
    unprefill(&ps);
    fd_problem pb = {lin_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps);
    fd_check(&pb, "input", t.x, dx, (int64_t)N * IN);

    // negative control: the checker must reject 2x and -1x the right weight gradient
    int64_t nw = t.l.weight->numel;
    float *bad = falloc((size_t)nw);
    for (int64_t i = 0; i < nw; i++) bad[i] = 2.0f * t.l.weight->grad[i];
    CHECK(fd_compare(&pb, t.l.weight->data, bad, nw).worst > 0.3);
    for (int64_t i = 0; i < nw; i++) bad[i] = -t.l.weight->grad[i];
    CHECK(fd_compare(&pb, t.l.weight->data, bad, nw).worst > 0.3);

    // accumulate_dinp = 1 adds to what is there
    fill(dx2, (size_t)N * IN, 1.0f);
    nn_linear_backward(K, &t.l, dx2, 1, t.r, t.x, N);
    double maxdiff = 0;
    for (int i = 0; i < N * IN; i++) maxdiff = fmax(maxdiff, fabs(dx2[i] - 1.0f - dx[i]));
    CHECK(maxdiff < 1e-5);
    free(bad), free(dx), free(dx2), free(t.x), free(t.out), free(t.r), free(mem);
    nn_params_destroy(&ps);
}

// ---------------------------------------------------------------------------------------------
// nn_layernorm

typedef struct {
    nn_layernorm ln;
    float *x, *out, *mean, *rstd, *r;
    int N;
} ln_t;

static double ln_fwd(void *s) {
    ln_t *t = s;
    nn_layernorm_forward(K, &t->ln, t->out, t->mean, t->rstd, t->x, t->N);
    return dot_r(t->out, t->r, (size_t)t->N * t->ln.C);
}

static void test_layernorm(void) {
    printf("nn_layernorm\n");
    int N = 10, C = 16;
    ln_t t = {.N = N};
    nn_params ps;
    nn_params_create(&ps, 2);
    nn_layernorm_init(&t.ln, &ps, "", C, 1e-5f);
    float *mem = bind_params(&ps);
    t.x = falloc((size_t)N * C), t.out = falloc((size_t)N * C), t.r = falloc((size_t)N * C);
    t.mean = falloc((size_t)N), t.rstd = falloc((size_t)N);
    float *dx = falloc((size_t)N * C);
    fill_normal(t.x, (size_t)N * C, 3, 1.0f);
    for (int i = 0; i < N * C; i++) t.x[i] += 0.3f * (float)(i / C);  // rows with different means
    fill_uniform(t.r, (size_t)N * C, 4, -1.0f, 1.0f);
    fill(dx, (size_t)N * C, DINP_GARBAGE);
    ln_fwd(&t);
    nn_layernorm_backward(K, &t.ln, dx, t.r, t.x, t.mean, t.rstd, N);
    unprefill(&ps);
    fd_problem pb = {ln_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps);
    fd_check(&pb, "input", t.x, dx, (int64_t)N * C);
    free(dx), free(t.x), free(t.out), free(t.r), free(t.mean), free(t.rstd), free(mem);
    nn_params_destroy(&ps);
}

// ---------------------------------------------------------------------------------------------
// attention kernel through nn_mha (torch packed in_proj)

typedef struct {
    nn_ctx ctx;
    nn_mha m;
    fsdp_attention_dims d;
    float *x, *qkv, *att, *cx, *out, *r;
} mha_t;

static double mha_fwd(void *s) {
    mha_t *t = s;
    nn_mha_forward(&t->ctx, &t->m, &t->d, t->out, t->qkv, t->att, t->cx, t->x);
    return dot_r(t->out, t->r, (size_t)t->d.B * t->d.T * t->d.C);
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
    float *mem = bind_params(&ps);
    t.d = (fsdp_attention_dims){B, T, C, H, batch_first ? T : 1, batch_first ? 1 : B, causal, 0.0f,
                                nn_dropout_rng(&t.ctx, 0, 1)};
    t.x = falloc((size_t)N * C), t.qkv = falloc((size_t)N * 3 * C), t.att = falloc((size_t)B * H * T * T);
    t.cx = falloc((size_t)N * C), t.out = falloc((size_t)N * C), t.r = falloc((size_t)N * C);
    float *dx = falloc((size_t)N * C), *sc = falloc((size_t)N * C), *s3c = falloc((size_t)N * 3 * C);
    fill_normal(t.x, (size_t)N * C, 5, 1.0f);
    fill_uniform(t.r, (size_t)N * C, 6, -1.0f, 1.0f);
    fill(dx, (size_t)N * C, DINP_GARBAGE);
    mha_fwd(&t);
    nn_mha_backward(&t.ctx, &t.m, &t.d, dx, 0, t.r, t.x, t.qkv, t.att, t.cx, sc, s3c);
    unprefill(&ps);
    fd_problem pb = {mha_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps);
    fd_check(&pb, "input", t.x, dx, (int64_t)N * C);
    free(dx), free(sc), free(s3c), free(t.x), free(t.qkv), free(t.att), free(t.cx), free(t.out), free(t.r);
    free(mem);
    nn_params_destroy(&ps);
}

// ---------------------------------------------------------------------------------------------
// elementwise kernels: relu, gelu (exact), gelu (tanh), dropout

enum { ACT_RELU, ACT_GELU, ACT_GELU_TANH, ACT_DROPOUT };

typedef struct {
    int kind;
    float *x, *out, *r;
    size_t n;
} act_t;

static const fsdp_rng act_rng = {11, 22};

static double act_fwd(void *s) {
    act_t *t = s;
    switch (t->kind) {
    case ACT_RELU: K->relu_forward(t->out, t->x, t->n); break;
    case ACT_GELU: K->gelu_forward(t->out, t->x, t->n, 0); break;
    case ACT_GELU_TANH: K->gelu_forward(t->out, t->x, t->n, 1); break;
    default: K->dropout_forward(t->out, t->x, t->n, 0.3f, act_rng); break;
    }
    return dot_r(t->out, t->r, t->n);
}

static void test_activation(int kind) {
    static const char *names[] = {"relu", "gelu (exact)", "gelu (tanh)", "dropout p=0.3"};
    printf("kernel %s\n", names[kind]);
    act_t t = {kind, NULL, NULL, NULL, 80};
    t.x = falloc(t.n), t.out = falloc(t.n), t.r = falloc(t.n);
    float *dx = falloc(t.n);
    fill_uniform(t.x, t.n, 7, -3.0f, 3.0f);
    for (size_t i = 0; i < t.n; i++)  // keep away from relu's kink
        if (fabsf(t.x[i]) < 0.1f) t.x[i] = t.x[i] < 0 ? -0.1f : 0.1f;
    fill_uniform(t.r, t.n, 8, -1.0f, 1.0f);
    fill(dx, t.n, DINP_GARBAGE);
    act_fwd(&t);
    switch (kind) {
    case ACT_RELU: K->relu_backward(dx, t.r, t.out, t.n); break;
    case ACT_GELU: K->gelu_backward(dx, t.r, t.x, t.n, 0); break;
    case ACT_GELU_TANH: K->gelu_backward(dx, t.r, t.x, t.n, 1); break;
    default: K->dropout_backward(dx, t.r, t.n, 0.3f, act_rng); break;
    }
    fd_problem pb = {act_fwd, &t, {0}, {0}};
    fd_check(&pb, "input", t.x, dx, (int64_t)t.n);
    free(dx), free(t.x), free(t.out), free(t.r);
}

// ---------------------------------------------------------------------------------------------
// nn_block: TransformerEncoderLayer variants and the GPT-2 block

typedef struct {
    nn_ctx ctx;
    nn_block blk;
    float *x, *r;
    int B, T;
} blk_t;

static double blk_fwd(void *s) {
    blk_t *t = s;
    CHECK(nn_block_forward(&t->ctx, &t->blk, t->x, t->B, t->T) == FSDP_OK);
    return dot_r(t->blk.out, t->r, (size_t)t->B * t->T * t->blk.cfg.d_model);
}

static size_t count_zeros(const float *x, size_t n) {
    size_t z = 0;
    for (size_t i = 0; i < n; i++) z += x[i] == 0.0f;
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
    float *mem = bind_params(&ps);
    t.x = falloc((size_t)N * C), t.r = falloc((size_t)N * C);
    float *dx = falloc((size_t)N * C), *scratch = falloc(nn_block_scratch_floats(&cfg, B, T));
    fill_normal(t.x, (size_t)N * C, 9, 1.0f);
    fill_uniform(t.r, (size_t)N * C, 10, -1.0f, 1.0f);
    fill(dx, (size_t)N * C, DINP_GARBAGE);
    double l0 = blk_fwd(&t);
    nn_block_backward(&t.ctx, &t.blk, dx, t.r, t.x, scratch);
    unprefill(&ps);
    fd_problem pb = {blk_fwd, &t, {0}, {0}};
    if (cfg.activation == NN_ACT_RELU) pb.kink[0] = t.blk.f1, pb.nkink[0] = (size_t)N * cfg.d_ff;
    if (cfg.dropout > 0) {  // dropout really is active, and the masks change with the step
        CHECK(count_zeros(t.blk.attn_out, (size_t)N * C) > 0);
        t.ctx.step++;
        CHECK(blk_fwd(&t) != l0);
        t.ctx.step--;
    }
    fd_check_params(&pb, &ps);
    fd_check(&pb, "input", t.x, dx, (int64_t)N * C);
    free(dx), free(scratch), free(t.x), free(t.r), free(mem);
    nn_block_free(&t.blk);
    nn_params_destroy(&ps);
}

static nn_block_config small_cfg(int H, nn_activation act, int norm_first, int causal, int batch_first, float p) {
    nn_block_config c = nn_encoder_layer_defaults(16, H);
    c.d_ff = 24;
    c.dropout = c.attn_dropout = p;
    c.activation = act;
    c.norm_first = norm_first;
    c.causal = causal;
    c.batch_first = batch_first;
    return c;
}

// the configuration nn_gpt2_create gives its blocks
static nn_block_config gpt2_cfg(int C, int H, float p) {
    nn_block_config c = {0};
    c.d_model = C, c.n_heads = H, c.d_ff = 4 * C;
    c.dropout = c.attn_dropout = p;
    c.activation = NN_ACT_GELU_TANH;
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
    float *x, *r;
    int B, T;
} seq_t;

static double seq_fwd(void *s) {
    seq_t *t = s;
    const float *out = NULL;
    CHECK(nn_sequential_forward(&t->ctx, &t->m.seq, t->x, t->B, t->T, &out) == FSDP_OK);
    return dot_r(out, t->r, (size_t)t->B * t->T * t->m.layer.d_model);
}

static void test_sequential(void) {
    printf("nn_sequential: 2 TransformerEncoderLayers (post-LN, gelu, seq-first)\n");
    int B = 2, T = 5, C = 16, N = B * T;
    seq_t t;
    memset(&t, 0, sizeof t);
    t.ctx = make_ctx();
    t.B = B, t.T = T;
    CHECK(nn_encoder_stack_create(&t.m, small_cfg(4, NN_ACT_GELU, 0, 0, 0, 0.0f), 2) == FSDP_OK);
    float *mem = bind_params(&t.m.params);
    t.x = falloc((size_t)N * C), t.r = falloc((size_t)N * C);
    float *dx = falloc((size_t)N * C);
    fill_normal(t.x, (size_t)N * C, 12, 1.0f);
    fill_uniform(t.r, (size_t)N * C, 13, -1.0f, 1.0f);
    fill(dx, (size_t)N * C, DINP_GARBAGE);
    seq_fwd(&t);
    CHECK(nn_sequential_backward(&t.ctx, &t.m.seq, t.r, t.x, dx) == FSDP_OK);
    unprefill(&t.m.params);
    fd_problem pb = {seq_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &t.m.params);
    fd_check(&pb, "input", t.x, dx, (int64_t)N * C);
    free(dx), free(t.x), free(t.r), free(mem);
    nn_encoder_stack_free(&t.m);
}

// ---------------------------------------------------------------------------------------------
// nn_embedding (repeated indices: the scatter must add), cross-entropy kernel, nn_abs_mean

typedef struct {
    nn_embedding e;
    const int32_t *idx;
    float *out, *r;
    int N;
} emb_t;

static double emb_fwd(void *s) {
    emb_t *t = s;
    nn_embedding_forward(K, &t->e, t->out, t->idx, t->N, 0);
    return dot_r(t->out, t->r, (size_t)t->N * t->e.C);
}

static void test_embedding(void) {
    printf("nn_embedding\n");
    static const int32_t idx[10] = {3, 0, 6, 3, 3, 1, 6, 2, 5, 0};
    int N = 10, V = 7, C = 16;
    emb_t t = {.idx = idx, .N = N};
    nn_params ps;
    nn_params_create(&ps, 1);
    nn_embedding_init(&t.e, &ps, "weight", V, C, 0.5f);
    float *mem = bind_params(&ps);
    t.out = falloc((size_t)N * C), t.r = falloc((size_t)N * C);
    fill_uniform(t.r, (size_t)N * C, 14, -1.0f, 1.0f);
    emb_fwd(&t);
    nn_embedding_backward(K, &t.e, t.r, idx, N);
    unprefill(&ps);
    fd_problem pb = {emb_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &ps);
    fill(t.out, (size_t)N * C, 1.0f);  // accumulate = 1 adds the rows
    nn_embedding_forward(K, &t.e, t.out, idx, N, 1);
    CHECK_NEAR(t.out[2 * C + 5], 1.0f + t.e.weight->data[6 * C + 5], 1e-6);
    free(t.out), free(t.r), free(mem);
    nn_params_destroy(&ps);
}

typedef struct {
    float *logits, *probs, *losses;
    const int32_t *tgt;
    int N, V;
} ce_t;

#define CE_SCALE 25.0  // L = CE_SCALE * mean cross-entropy (gradients of order 1)

static double ce_fwd(void *s) {
    ce_t *t = s;
    return CE_SCALE * K->cross_entropy_forward(t->losses, t->probs, t->logits, t->tgt, t->N, t->V);
}

static void test_cross_entropy(void) {
    printf("kernel cross_entropy (L = %.1f * mean)\n", CE_SCALE);
    static const int32_t tgt[10] = {0, 10, 4, 4, 7, 1, 2, 9, 3, 5};
    int N = 10, V = 11;
    ce_t t = {falloc((size_t)N * V), falloc((size_t)N * V), falloc((size_t)N), tgt, N, V};
    float *dl = falloc((size_t)N * V);
    fill_normal(t.logits, (size_t)N * V, 15, 2.0f);
    fill(dl, (size_t)N * V, DINP_GARBAGE);
    double mean = ce_fwd(&t) / CE_SCALE, sum = 0;
    for (int n = 0; n < N; n++) sum += t.losses[n];
    CHECK_NEAR(sum / N, mean, 1e-5);
    K->cross_entropy_backward(dl, t.probs, tgt, (float)(CE_SCALE / N), N, V);
    fd_problem pb = {ce_fwd, &t, {0}, {0}};
    fd_check(&pb, "logits", t.logits, dl, (int64_t)N * V);
    free(t.logits), free(t.probs), free(t.losses), free(dl);
}

typedef struct {
    float *y;
    size_t n;
} abs_t;

static double abs_fwd(void *s) {
    abs_t *t = s;
    return 40.0 * nn_abs_mean_forward(t->y, t->n);  // L = 40 * mean|y|
}

static void test_abs_mean(void) {
    printf("nn_abs_mean (L = 40 * mean|y|)\n");
    abs_t t = {falloc(40), 40};
    float *dy = falloc(40);
    fill_uniform(t.y, t.n, 16, -2.0f, 2.0f);
    for (size_t i = 0; i < t.n; i++)
        if (fabsf(t.y[i]) < 0.1f) t.y[i] = t.y[i] < 0 ? -0.1f : 0.1f;
    fill(dy, t.n, DINP_GARBAGE);
    nn_abs_mean_backward(dy, t.y, t.n, 40.0f);
    fd_problem pb = {abs_fwd, &t, {0}, {0}};
    fd_check(&pb, "y", t.y, dy, (int64_t)t.n);
    t.y[0] = 0.0f;  // sign(0) = 0
    nn_abs_mean_backward(dy, t.y, t.n, 40.0f);
    CHECK(dy[0] == 0.0f);
    free(t.y), free(dy);
}

// ---------------------------------------------------------------------------------------------
// the whole GPT-2 model (tied head): L = B*T * mean cross-entropy, backward(dloss = B*T)

typedef struct {
    nn_ctx ctx;
    nn_gpt2 m;
    int32_t idx[10], tgt[10];
    int B, T;
} gpt_t;

static double gpt_fwd(void *s) {
    gpt_t *t = s;
    CHECK(nn_gpt2_forward(&t->ctx, &t->m, t->idx, t->tgt, t->B, t->T) == FSDP_OK);
    return t->m.loss * (t->B * t->T);
}

static void test_gpt2(float dropout) {
    printf("nn_gpt2 (vocab 11, max_seq 8, 2 layers, C 16, 2 heads, dropout %.1f)\n", dropout);
    gpt_t t;
    memset(&t, 0, sizeof t);
    t.ctx = make_ctx();
    t.B = 2, t.T = 5;
    nn_gpt2_config cfg = {11, 8, 2, 2, 16, dropout, 1e-5f};
    CHECK(nn_gpt2_create(&t.m, cfg) == FSDP_OK);
    float *mem = bind_params(&t.m.params);
    for (int i = 0; i < 10; i++) {
        t.idx[i] = (int32_t)(fsdp_rng_uniform_at((fsdp_rng){3, 1}, (uint64_t)i) * 11);
        t.tgt[i] = (int32_t)(fsdp_rng_uniform_at((fsdp_rng){3, 2}, (uint64_t)i) * 11);
    }
    double l0 = gpt_fwd(&t);
    CHECK(nn_gpt2_backward(&t.ctx, &t.m, (float)(t.B * t.T)) == FSDP_OK);
    unprefill(&t.m.params);
    if (dropout > 0) {
        t.ctx.step++;
        CHECK(gpt_fwd(&t) != l0);
        t.ctx.step--;
    }
    fd_problem pb = {gpt_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &t.m.params);
    free(mem);
    nn_gpt2_free(&t.m);
}

int main(void) {
    K = fsdp_kernels_cpu();
    test_linear(0);
    test_linear(1);
    test_layernorm();
    test_mha(0, 0, 4);
    test_mha(1, 0, 4);
    test_mha(0, 1, 2);
    test_mha(1, 1, 2);
    for (int a = ACT_RELU; a <= ACT_DROPOUT; a++) test_activation(a);
    test_block("encoder post-LN relu, seq-first, H=4", small_cfg(4, NN_ACT_RELU, 0, 0, 0, 0.0f), 0);
    test_block("encoder pre-LN gelu, seq-first, H=2", small_cfg(2, NN_ACT_GELU, 1, 0, 0, 0.0f), 0);
    test_block("encoder post-LN gelu, causal batch_first, H=4", small_cfg(4, NN_ACT_GELU, 0, 1, 1, 0.0f), 0);
    test_block("GPT-2 block (C 16, H 2)", gpt2_cfg(16, 2, 0.0f), 1);
    test_block("encoder pre-LN gelu with dropout 0.2 (all four sites)", small_cfg(4, NN_ACT_GELU, 1, 0, 0, 0.2f), 0);
    test_sequential();
    test_embedding();
    test_cross_entropy();
    test_abs_mean();
    test_gpt2(0.0f);
    test_gpt2(0.1f);
    TEST_MAIN_END();
}
