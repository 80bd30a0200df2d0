// test_gradcheck.c: finite-difference checks of every module's backward.
// The scalar loss is L = sum_i out_i * r_i with fixed random weights r (accumulated in double), so
// the analytic gradients come from backward(dout = r). For ~20 sampled elements of every parameter
// tensor and of the input, the central difference (L(p+e) - L(p-e)) / (2e) is compared with the
// analytic gradient by |fd - an| / max(|fd|, |an|, FLOOR). Parameter grads are pre-filled with
// GRAD_PREFILL (they must be accumulated) and dinp with garbage (it must be overwritten).
// Samples whose perturbation moves a ReLU input across 0 are skipped (the loss has a kink there).
// Every buffer a module or kernel sees is device memory of the default device ($FSDP_DEVICE): the test
// keeps host mirrors, writes them with fsdp_copy_h2d and reads results back with d2h copies, so it
// passes on the guard device too (FSDP_DEVICE=guard), which faults on any host access to device memory.
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "device/device.h"
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
    const float *kink[MAX_KINKS];  // ReLU inputs (device, valid after a forward); NULL when unused
    size_t nkink[MAX_KINKS];
} fd_problem;

static fsdp_dev *DEV;
static fsdp_stream *ST;   // the device's compute stream: every kernel and copy of the test
static const fsdp_kernels *K;
static nn_ctx CTX;        // for the modules whose calls take no dropout coordinates

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// device memory (zero-filled)
static void *dalloc_bytes(size_t bytes) {
    void *p = fsdp_dev_alloc(DEV, bytes ? bytes : 1, FSDP_MEM_ACTIVATIONS);
    FSDP_ASSERT(p != NULL);
    return p;
}
static float *dalloc(size_t n) { return dalloc_bytes(n * sizeof(float)); }
static void dfree(void *p) { fsdp_dev_free(DEV, p); }

static void upload(void *dev_dst, const void *host_src, size_t bytes) {
    CHECK(fsdp_copy_h2d(ST, dev_dst, host_src, bytes) == FSDP_OK);
}
static void download(void *host_dst, const void *dev_src, size_t bytes) {
    CHECK(fsdp_copy_d2h(ST, host_dst, dev_src, bytes) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(ST) == FSDP_OK);
}
static double read_double(const double *dev_src) {
    double v = 0.0;
    CHECK(fsdp_dev_read(ST, &v, dev_src, sizeof v) == FSDP_OK);
    return v;
}

// a host array and its device twin
typedef struct {
    float *h, *d;
    size_t n;
} buf;

static buf buf_new(size_t n) {
    buf b = {falloc(n), dalloc(n), n};
    return b;
}
static void buf_up(buf b) { upload(b.d, b.h, b.n * sizeof(float)); }
static void buf_down(buf b) { download(b.h, b.d, b.n * sizeof(float)); }
static void buf_free(buf b) {
    free(b.h);
    dfree(b.d);
}

static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

static void fill_uniform(float *x, size_t n, uint64_t stream, float lo, float hi) {
    fsdp_rng_uniform_range((fsdp_rng){42, stream}, 0, x, n, lo, hi);
}

static void fill_normal(float *x, size_t n, uint64_t stream, float std) {
    fsdp_rng_normal((fsdp_rng){42, stream}, 0, x, n, 0.0f, std);
}

// sum_i out_i * r_i in double; out: (n,) device, r: (n,) host
static double dot_r(const float *out, const float *r, size_t n) {
    float *h = falloc(n);
    download(h, out, n * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)h[i] * r[i];
    free(h);
    return s;
}

// The parameters' memory: one device block holding every parameter's data then grad, bound to the
// parameters, and its host mirror h (data then grad, the same layout).
typedef struct {
    float *h, *d;
    int64_t n;  // parameters in all
} pmem;

static int64_t param_offset(const pmem *pm, const nn_param *p) { return (int64_t)(p->data - pm->d); }

// Values: the module's own init plus U(-0.25, 0.25), so LayerNorm weights are not all 1 and biases are
// not 0; grads: GRAD_PREFILL. Written on the host, copied to the device.
static pmem bind_params(nn_params *ps) {
    int64_t n = nn_params_numel(ps);
    pmem pm = {falloc(2 * (size_t)n), dalloc(2 * (size_t)n), n};
    nn_params_bind_flat(ps, pm.d, pm.d + n);
    for (int i = 0; i < ps->count; i++) {
        nn_param *p = &ps->items[i];
        float *h = pm.h + param_offset(&pm, p);
        nn_param_init_slice(p, 7, 0, p->numel, h);
        fsdp_rng rng = {99, fsdp_hash_name(p->name)};
        for (int64_t j = 0; j < p->numel; j++) h[j] += 0.5f * (fsdp_rng_uniform_at(rng, (uint64_t)j) - 0.5f);
    }
    fill(pm.h + n, (size_t)n, GRAD_PREFILL);
    upload(pm.d, pm.h, 2 * (size_t)n * sizeof(float));
    return pm;
}

static void pmem_free(pmem *pm) {
    free(pm->h);
    dfree(pm->d);
}

// After backward: the grads copied to the host mirror, analytic = grad - GRAD_PREFILL (checks that
// grads were accumulated).
static void unprefill(pmem *pm) {
    float *g = pm->h + pm->n;
    download(g, pm->d + pm->n, (size_t)pm->n * sizeof(float));
    for (int64_t i = 0; i < pm->n; i++) g[i] -= GRAD_PREFILL;
}

static unsigned char *kink_signs(const fd_problem *pb) {
    size_t total = 0;
    for (int k = 0; k < MAX_KINKS; k++) total += pb->kink[k] ? pb->nkink[k] : 0;
    unsigned char *s = malloc(total + 1);
    size_t o = 0;
    for (int k = 0; k < MAX_KINKS; k++) {
        if (!pb->kink[k]) continue;
        float *h = falloc(pb->nkink[k]);
        download(h, pb->kink[k], pb->nkink[k] * sizeof(float));
        for (size_t i = 0; i < pb->nkink[k]; i++) s[o++] = h[i] > 0.0f;
        free(h);
    }
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
// restored bit-exactly after each sample. x: host mirror of xd (device), whose element i is written
// with each perturbation; analytic: host.
static fd_result fd_compare(fd_problem *pb, float *x, float *xd, const float *analytic, int64_t n) {
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
        upload(xd + i, &x[i], sizeof(float));
        double lp = pb->fwd(pb->self);
        int kinked = kink_changed(pb, base);
        x[i] = xm;
        upload(xd + i, &x[i], sizeof(float));
        double lm = pb->fwd(pb->self);
        kinked |= kink_changed(pb, base);
        x[i] = x0;
        upload(xd + i, &x[i], sizeof(float));
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
static void fd_check(fd_problem *pb, const char *name, float *x, float *xd, const float *analytic, int64_t n) {
    fd_result r = fd_compare(pb, x, xd, analytic, n);
    printf("  %-34s worst rel err %.2e  (%d checked, %d skipped at relu kinks, max|g| %.2e)\n", name,
           r.worst, r.checked, r.skipped, r.max_an);
    CHECK(r.worst <= FD_TOL);
    CHECK(r.checked >= (n < FD_SAMPLES ? n : FD_SAMPLES) / 2);
    CHECK(r.max_an >= 10 * FD_FLOOR);
}

// an input buffer: the host mirror, its device twin, the analytic gradient (host)
static void fd_check_buf(fd_problem *pb, const char *name, buf x, const float *analytic) {
    fd_check(pb, name, x.h, x.d, analytic, (int64_t)x.n);
}

static void fd_check_params(fd_problem *pb, nn_params *ps, const pmem *pm) {
    for (int i = 0; i < ps->count; i++) {
        nn_param *p = &ps->items[i];
        int64_t off = param_offset(pm, p);
        fd_check(pb, p->name, pm->h + off, pm->d + off, pm->h + pm->n + off, p->numel);
    }
}

static nn_ctx make_ctx(void) {
    nn_ctx c = {.k = K, .dev = DEV, .stream = ST, .training = 1, .seed = 1234, .step = 3, .sample_offset = 0};
    return c;
}

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
                                nn_dropout_rng(&t.ctx, 0, 1)};
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
    double l0 = blk_fwd(&t);
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
    return read_double(t->m.loss) * (t->B * t->T);
}

static void test_gpt2(float dropout) {
    printf("nn_gpt2 (vocab 11, max_seq 8, 2 layers, C 16, 2 heads, dropout %.1f)\n", dropout);
    gpt_t t;
    memset(&t, 0, sizeof t);
    t.ctx = make_ctx();
    t.B = 2, t.T = 5;
    nn_gpt2_config cfg = {11, 8, 2, 2, 16, dropout, 1e-5f};
    CHECK(nn_gpt2_create(&t.m, cfg) == FSDP_OK);
    pmem pm = bind_params(&t.m.params);
    for (int i = 0; i < 10; i++) {
        t.idx[i] = (int32_t)(fsdp_rng_uniform_at((fsdp_rng){3, 1}, (uint64_t)i) * 11);
        t.tgt[i] = (int32_t)(fsdp_rng_uniform_at((fsdp_rng){3, 2}, (uint64_t)i) * 11);
    }
    // reserved ahead (what fsdp-train does before its first step): the step allocates no activations
    CHECK(nn_gpt2_reserve(&t.ctx, &t.m, t.B, t.T) == FSDP_OK);
    size_t reserved = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    CHECK(reserved > 0);
    double l0 = gpt_fwd(&t);
    CHECK(nn_gpt2_backward(&t.ctx, &t.m, (float)(t.B * t.T)) == FSDP_OK);
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATIONS) == reserved);
    unprefill(&pm);
    if (dropout > 0) {
        t.ctx.step++;
        CHECK(gpt_fwd(&t) != l0);
        t.ctx.step--;
    }
    fd_problem pb = {gpt_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &t.m.params, &pm);
    pmem_free(&pm);
    nn_gpt2_free(&t.m);
}

// Mixed precision: the model with every parameter bound as a bf16 view (data NULL), through the bf16
// table, against the same model with fp32 parameters holding the bf16-rounded values. The 1-D parameters
// the fp32 kernels take (LayerNorm weights and biases, Linear biases) are widened on the device into
// their own scratch, which nn_params_destroy frees; the matrices and wpe are read as bf16 directly.
static void test_gpt2_bf16_views(void) {
    printf("nn_gpt2 with bf16 parameter views\n");
    size_t act0 = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    nn_gpt2 m;
    nn_gpt2_config cfg = {11, 8, 2, 2, 16, 0.0f, 1e-5f};
    CHECK(nn_gpt2_create(&m, cfg) == FSDP_OK);
    pmem pm = bind_params(&m.params);
    int64_t n = pm.n;
    fsdp_bf16 *hb = malloc(sizeof(fsdp_bf16) * (size_t)n);
    fsdp_f32_to_bf16_array(hb, pm.h, (size_t)n);
    fsdp_bf16 *b16 = dalloc_bytes(sizeof(fsdp_bf16) * (size_t)n);
    upload(b16, hb, sizeof(fsdp_bf16) * (size_t)n);
    fsdp_bf16_to_f32_array(pm.h, hb, (size_t)n);  // the fp32 run gets the rounded values
    upload(pm.d, pm.h, sizeof(float) * (size_t)n);
    int32_t idx[10], tgt[10];
    for (int i = 0; i < 10; i++) idx[i] = (i * 7 + 2) % 11, tgt[i] = (i * 5 + 1) % 11;
    nn_ctx c = make_ctx();
    c.k = fsdp_dev_kernels(DEV, 1);
    CHECK(nn_gpt2_forward(&c, &m, idx, tgt, 2, 5) == FSDP_OK);
    double l32 = read_double(m.loss);
    int64_t lnf_off = param_offset(&pm, m.ln_f.weight);
    for (int i = 0; i < m.params.count; i++) {  // now bf16 views only
        nn_param *p = &m.params.items[i];
        p->data_b16 = b16 + param_offset(&pm, p);
        p->data = NULL;
    }
    CHECK(nn_gpt2_forward(&c, &m, idx, tgt, 2, 5) == FSDP_OK);
    double l16 = read_double(m.loss);
    CHECK(nn_gpt2_backward(&c, &m, 1.0f) == FSDP_OK);
    printf("  loss fp32 (bf16-rounded values) %.9f, bf16 views %.9f\n", l32, l16);
    CHECK_NEAR(l16, l32, 1e-5 * fabs(l32));
    CHECK(m.ln_f.weight->widened != NULL && m.blocks.blocks[0].fc1.bias->widened != NULL);
    CHECK(m.wte.weight->widened == NULL && m.wpe.weight->widened == NULL);
    CHECK(m.blocks.blocks[0].fc1.weight->widened == NULL);
    float w[16];
    download(w, m.ln_f.weight->widened, sizeof w);  // the widened copy holds the bf16 values exactly
    CHECK(memcmp(w, pm.h + lnf_off, sizeof w) == 0);
    nn_gpt2_free(&m);  // activations and widened copies
    dfree(b16), free(hb), pmem_free(&pm);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_ACTIVATIONS), act0);
}

// ---------------------------------------------------------------------------------------------
// bf16 activations (nn_ctx.act_bf16): keeping the activations that only feed matrix products in bf16
// gives the same bits as keeping them in fp32 under the bf16 table (its products round them to the same
// values), in less memory. The GPT-2 model (pre-LN: ln_1, ln_2 outputs and the MLP activation in bf16)
// with fp32 parameters (gemm_a16) and with bf16 parameter views (gemm_a16_b16, as FSDP's bf16 gathers
// bind them); an encoder stack (post-LN, ReLU, dropout on: the FFN activation in bf16).

typedef struct {
    double loss;
    float *grads;      // (n,) host: every parameter gradient
    size_t act_bytes;  // activations held after the step
} act_run;

// the bf16 table's context with act_bf16 as given; the gradients reset to GRAD_PREFILL
static nn_ctx act_step_ctx(pmem *pm, int act_bf16) {
    nn_ctx c = make_ctx();
    c.k = fsdp_dev_kernels(DEV, 1);
    c.act_bf16 = act_bf16;
    fill(pm->h + pm->n, (size_t)pm->n, GRAD_PREFILL);
    upload(pm->d + pm->n, pm->h + pm->n, sizeof(float) * (size_t)pm->n);
    return c;
}

static act_run gpt2_step(nn_gpt2 *m, pmem *pm, int act_bf16) {
    int32_t idx[10], tgt[10];
    for (int i = 0; i < 10; i++) idx[i] = (i * 7 + 2) % 11, tgt[i] = (i * 5 + 1) % 11;
    nn_ctx c = act_step_ctx(pm, act_bf16);
    act_run r = {0, falloc((size_t)pm->n), 0};
    CHECK(nn_gpt2_forward(&c, m, idx, tgt, 2, 5) == FSDP_OK);
    CHECK(nn_gpt2_backward(&c, m, 1.0f) == FSDP_OK);
    r.loss = read_double(m->loss);
    download(r.grads, pm->d + pm->n, sizeof(float) * (size_t)pm->n);
    r.act_bytes = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    return r;
}

static act_run encoder_step(nn_encoder_stack *m, pmem *pm, buf x, buf r, int act_bf16) {
    nn_ctx c = act_step_ctx(pm, act_bf16);
    act_run run = {0, falloc((size_t)pm->n), 0};
    const float *out = NULL;
    CHECK(nn_sequential_forward(&c, &m->seq, x.d, 2, 5, &out) == FSDP_OK);
    run.loss = dot_r(out, r.h, x.n);
    CHECK(nn_sequential_backward(&c, &m->seq, r.d, x.d, NULL) == FSDP_OK);
    download(run.grads, pm->d + pm->n, sizeof(float) * (size_t)pm->n);
    run.act_bytes = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    return run;
}

static void check_same_bits(const char *what, act_run a, act_run b, int64_t n) {
    int same = memcmp(&a.loss, &b.loss, sizeof a.loss) == 0 && memcmp(a.grads, b.grads, sizeof(float) * (size_t)n) == 0;
    printf("  %s: loss %.9f / %.9f, gradients %s, activations %zu -> %zu bytes\n", what, a.loss, b.loss,
           same ? "bit-identical" : "DIFFER", a.act_bytes, b.act_bytes);
    CHECK(isfinite(a.loss) && same);
    CHECK(b.act_bytes < a.act_bytes);
    free(a.grads), free(b.grads);
}

static void test_act_bf16(void) {
    printf("bf16 activations against fp32 activations (bf16 table)\n");
    for (int views = 0; views <= 1; views++) {
        nn_gpt2 m;
        nn_gpt2_config cfg = {11, 8, 2, 2, 16, 0.1f, 1e-5f};
        CHECK(nn_gpt2_create(&m, cfg) == FSDP_OK);
        pmem pm = bind_params(&m.params);
        fsdp_bf16 *b16 = NULL;
        if (views) {  // every parameter a bf16 view of its values
            fsdp_bf16 *hb = malloc(sizeof(fsdp_bf16) * (size_t)pm.n);
            fsdp_f32_to_bf16_array(hb, pm.h, (size_t)pm.n);
            b16 = dalloc_bytes(sizeof(fsdp_bf16) * (size_t)pm.n);
            upload(b16, hb, sizeof(fsdp_bf16) * (size_t)pm.n);
            free(hb);
            for (int i = 0; i < m.params.count; i++) {
                nn_param *p = &m.params.items[i];
                p->data_b16 = b16 + param_offset(&pm, p);
                p->data = NULL;
            }
        }
        act_run f32 = gpt2_step(&m, &pm, 0), a16 = gpt2_step(&m, &pm, 1);
        CHECK(m.blocks.blocks[0].act_b16 != NULL && m.blocks.blocks[0].ln1_b16 != NULL && m.blocks.blocks[0].act == NULL);
        check_same_bits(views ? "GPT-2, bf16 parameter views" : "GPT-2, fp32 parameters", f32, a16, pm.n);
        nn_gpt2_free(&m);
        if (b16) dfree(b16);
        pmem_free(&pm);
    }
    nn_encoder_stack m;
    CHECK(nn_encoder_stack_create(&m, small_cfg(4, FSDP_ACT_RELU, 0, 0, 0, 0.2f), 2) == FSDP_OK);
    pmem pm = bind_params(&m.params);
    buf x = buf_new(2 * 5 * 16), r = buf_new(2 * 5 * 16);
    fill_normal(x.h, x.n, 12, 1.0f);
    fill_uniform(r.h, r.n, 13, -1.0f, 1.0f);
    buf_up(x), buf_up(r);
    act_run f32 = encoder_step(&m, &pm, x, r, 0), a16 = encoder_step(&m, &pm, x, r, 1);
    CHECK(m.seq.blocks[0].act_b16 != NULL && m.seq.blocks[0].ln1_out != NULL && m.seq.blocks[0].ln1_b16 == NULL);
    check_same_bits("encoder stack (post-LN, ReLU, dropout 0.2)", f32, a16, pm.n);
    buf_free(x), buf_free(r), pmem_free(&pm);
    nn_encoder_stack_free(&m);
}

int main(void) {
    DEV = fsdp_dev_default();
    ST = fsdp_dev_stream(DEV, FSDP_STREAM_COMPUTE);
    K = fsdp_dev_kernels(DEV, 0);
    CTX = make_ctx();
    printf("device %s, kernels %s\n", fsdp_dev_name(DEV), K->name);
    test_linear(0);
    test_linear(1);
    test_layernorm();
    test_mha(0, 0, 4);
    test_mha(1, 0, 4);
    test_mha(0, 1, 2);
    test_mha(1, 1, 2);
    for (int a = ACT_RELU; a <= ACT_DROPOUT; a++) test_activation(a);
    test_block("encoder post-LN relu, seq-first, H=4", small_cfg(4, FSDP_ACT_RELU, 0, 0, 0, 0.0f), 0);
    test_block("encoder pre-LN gelu, seq-first, H=2", small_cfg(2, FSDP_ACT_GELU, 1, 0, 0, 0.0f), 0);
    test_block("encoder post-LN gelu, causal batch_first, H=4", small_cfg(4, FSDP_ACT_GELU, 0, 1, 1, 0.0f), 0);
    test_block("GPT-2 block (C 16, H 2)", gpt2_cfg(16, 2, 0.0f), 1);
    test_block("encoder pre-LN gelu with dropout 0.2 (all four sites)", small_cfg(4, FSDP_ACT_GELU, 1, 0, 0, 0.2f), 0);
    test_sequential();
    test_embedding();
    test_cross_entropy();
    test_act_bf16();
    test_abs_mean();
    test_gpt2(0.0f);
    test_gpt2(0.1f);
    test_gpt2_bf16_views();
    TEST_MAIN_END();
}
