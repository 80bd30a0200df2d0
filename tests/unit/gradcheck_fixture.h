// gradcheck_fixture.h: the finite-difference fixture shared by test_gradcheck.c and test_gradcheck_models.c.
// The scalar loss is L = sum_i out_i * r_i with fixed random weights r (accumulated in double), so
// the analytic gradients come from backward(dout = r). For ~20 sampled elements of every parameter
// tensor and of the input, the central difference (L(p+e) - L(p-e)) / (2e) is compared with the
// analytic gradient by |fd - an| / max(|fd|, |an|, FLOOR). Parameter grads are pre-filled with
// GRAD_PREFILL (they must be accumulated) and dinp with garbage (it must be overwritten).
// Samples whose perturbation moves a ReLU input across 0 are skipped (the loss has a kink there).
// Every buffer a module or kernel sees is device memory of the default device ($FSDP_DEVICE): the tests
// keep host mirrors, write them with fsdp_copy_h2d and read results back with d2h copies, so they
// pass on the guard device too (FSDP_DEVICE=guard), which faults on any host access to device memory.
// Included once by each test executable: the globals below are that executable's own; every helper is
// static inline, so one a test does not use draws no warning.
#pragma once
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "nn/param.h"
#include "nn/transformer_block.h"
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

static inline float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// device memory (zero-filled)
static inline void *dalloc_bytes(size_t bytes) {
    void *p = fsdp_dev_alloc(DEV, bytes ? bytes : 1, FSDP_MEM_ACTIVATIONS);
    FSDP_ASSERT(p != NULL);
    return p;
}
static inline float *dalloc(size_t n) { return dalloc_bytes(n * sizeof(float)); }
static inline void dfree(void *p) { fsdp_dev_free(DEV, p); }

static inline void upload(void *dev_dst, const void *host_src, size_t bytes) {
    CHECK(fsdp_copy_h2d(ST, dev_dst, host_src, bytes) == FSDP_OK);
}
static inline void download(void *host_dst, const void *dev_src, size_t bytes) {
    CHECK(fsdp_copy_d2h(ST, host_dst, dev_src, bytes) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(ST) == FSDP_OK);
}
static inline double read_double(const double *dev_src) {
    double v = 0.0;
    CHECK(fsdp_dev_read(ST, &v, dev_src, sizeof v) == FSDP_OK);
    return v;
}

// a host array and its device twin
typedef struct {
    float *h, *d;
    size_t n;
} buf;

static inline buf buf_new(size_t n) {
    buf b = {falloc(n), dalloc(n), n};
    return b;
}
static inline void buf_up(buf b) { upload(b.d, b.h, b.n * sizeof(float)); }
static inline void buf_down(buf b) { download(b.h, b.d, b.n * sizeof(float)); }
static inline void buf_free(buf b) {
    free(b.h);
    dfree(b.d);
}

static inline void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++) x[i] = v;
}

static inline void fill_uniform(float *x, size_t n, uint64_t stream, float lo, float hi) {
    fsdp_rng_uniform_range((fsdp_rng){42, stream}, 0, x, n, lo, hi);
}

static inline void fill_normal(float *x, size_t n, uint64_t stream, float std) {
    fsdp_rng_normal((fsdp_rng){42, stream}, 0, x, n, 0.0f, std);
}

// sum_i out_i * r_i in double; out: (n,) device, r: (n,) host
static inline double dot_r(const float *out, const float *r, size_t n) {
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

static inline int64_t param_offset(const pmem *pm, const nn_param *p) { return (int64_t)(p->data - pm->d); }

// Values: the module's own init plus U(-0.25, 0.25), so LayerNorm weights are not all 1 and biases are
// not 0; grads: GRAD_PREFILL. Written on the host, copied to the device.
static inline pmem bind_params(nn_params *ps) {
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

static inline void pmem_free(pmem *pm) {
    free(pm->h);
    dfree(pm->d);
}

// After backward: the grads copied to the host mirror, analytic = grad - GRAD_PREFILL (checks that
// grads were accumulated).
static inline void unprefill(pmem *pm) {
    float *g = pm->h + pm->n;
    download(g, pm->d + pm->n, (size_t)pm->n * sizeof(float));
    for (int64_t i = 0; i < pm->n; i++) g[i] -= GRAD_PREFILL;
}

static inline unsigned char *kink_signs(const fd_problem *pb) {
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

static inline int kink_changed(const fd_problem *pb, const unsigned char *base) {
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
static inline fd_result fd_compare(fd_problem *pb, float *x, float *xd, const float *analytic, int64_t n) {
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
static inline void fd_check(fd_problem *pb, const char *name, float *x, float *xd, const float *analytic, int64_t n) {
    fd_result r = fd_compare(pb, x, xd, analytic, n);
    printf("  %-34s worst rel err %.2e  (%d checked, %d skipped at relu kinks, max|g| %.2e)\n", name,
           r.worst, r.checked, r.skipped, r.max_an);
    CHECK(r.worst <= FD_TOL);
    CHECK(r.checked >= (n < FD_SAMPLES ? n : FD_SAMPLES) / 2);
    CHECK(r.max_an >= 10 * FD_FLOOR);
}

// an input buffer: the host mirror, its device twin, the analytic gradient (host)
static inline void fd_check_buf(fd_problem *pb, const char *name, buf x, const float *analytic) {
    fd_check(pb, name, x.h, x.d, analytic, (int64_t)x.n);
}

static inline void fd_check_params(fd_problem *pb, nn_params *ps, const pmem *pm) {
    for (int i = 0; i < ps->count; i++) {
        nn_param *p = &ps->items[i];
        int64_t off = param_offset(pm, p);
        fd_check(pb, p->name, pm->h + off, pm->d + off, pm->h + pm->n + off, p->numel);
    }
}

static inline nn_ctx make_ctx(void) {
    nn_ctx c = {.k = K, .dev = DEV, .stream = ST, .training = 1, .seed = 1234, .step = 3, .sample_offset = 0};
    return c;
}

// The device, its compute stream and kernels, and CTX; prints which device the checks run on
static inline void gradcheck_setup(void) {
    DEV = fsdp_dev_default();
    ST = fsdp_dev_stream(DEV, FSDP_STREAM_COMPUTE);
    K = fsdp_dev_kernels(DEV, 0);
    CTX = make_ctx();
    printf("device %s, kernels %s\n", fsdp_dev_name(DEV), K->name);
}

// a small encoder layer (d_model 16, d_ff 24) with the given heads, activation, layout and dropout
static inline nn_block_config small_cfg(int H, nn_activation act, int norm_first, int causal, int batch_first, float p) {
    nn_block_config c = nn_encoder_layer_defaults(16, H);
    c.d_ff = 24;
    c.dropout = c.attn_dropout = p;
    c.activation = act;
    c.norm_first = norm_first;
    c.causal = causal;
    c.batch_first = batch_first;
    return c;
}
