// test_muon.c: Muon on one matrix (optim/muon.h) against muon.py's computation in double: Newton-Schulz
// (zeropower_via_newtonschulz5: normalized by the Frobenius norm + 1e-7, transposed when rows > cols,
// steps of X <- a X + (b A + c A A) X) on wide, tall and square matrices, the momentum and Nesterov
// lerps, the shape scale, the decoupled update, two steps in a row; through the guard device (device
// memory in its checked arena), the cpu device and, where a GPU is, the cuda device (its axpby and
// divide_by_norm kernels and cuBLAS products). And the NS FLOP count.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "optim/muon.h"
#include "test.h"

// x (rows, cols) overwritten with NS(x) in double, literally as muon.py: on the transpose when tall
static void reference_ns(double *x, int rows, int cols, int steps) {
    int tall = rows > cols, r = tall ? cols : rows, c = tall ? rows : cols;
    double *X = malloc(sizeof(double) * (size_t)r * c), *A = malloc(sizeof(double) * (size_t)r * r);
    double *B = malloc(sizeof(double) * (size_t)r * r), *Y = malloc(sizeof(double) * (size_t)r * c);
    for (int i = 0; i < rows; i++)  // X (r, c)
        for (int j = 0; j < cols; j++) X[tall ? (size_t)j * c + i : (size_t)i * c + j] = x[(size_t)i * cols + j];
    double ss = 0;
    for (size_t i = 0; i < (size_t)r * c; i++) ss += X[i] * X[i];
    double norm = sqrt(ss) + 1e-7;
    for (size_t i = 0; i < (size_t)r * c; i++) X[i] /= norm;
    const double a = 3.4445, b = -4.7750, cc = 2.0315;
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double acc = 0;
                for (int k = 0; k < c; k++) acc += X[(size_t)i * c + k] * X[(size_t)j * c + k];
                A[(size_t)i * r + j] = acc;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                double acc = 0;
                for (int k = 0; k < r; k++) acc += A[(size_t)i * r + k] * A[(size_t)k * r + j];
                B[(size_t)i * r + j] = b * A[(size_t)i * r + j] + cc * acc;
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                double acc = 0;
                for (int k = 0; k < r; k++) acc += B[(size_t)i * r + k] * X[(size_t)k * c + j];
                Y[(size_t)i * c + j] = a * X[(size_t)i * c + j] + acc;
            }
        memcpy(X, Y, sizeof(double) * (size_t)r * c);
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) x[(size_t)i * cols + j] = X[tall ? (size_t)j * c + i : (size_t)i * c + j];
    free(X), free(A), free(B), free(Y);
}

// max |got - want| / max |want| (NaN: infinite)
static double rel_err(const float *got, const double *want, size_t n) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    }
    return worst / scale;
}

static float *dev_floats(fsdp_dev *dev, fsdp_stream *st, const float *host, size_t n) {
    float *d = fsdp_dev_alloc(dev, sizeof(float) * n, FSDP_MEM_OTHER);
    CHECK(d != NULL);
    if (d && host) CHECK(fsdp_copy_h2d(st, d, host, sizeof(float) * n) == FSDP_OK);
    return d;
}

// Newton-Schulz alone on a rows x cols matrix
static void check_ns(fsdp_dev *dev, int rows, int cols, int steps) {
    size_t n = (size_t)rows * cols;
    fsdp_stream *st = fsdp_dev_stream(dev, FSDP_STREAM_COMPUTE);
    const fsdp_kernels *k = fsdp_dev_kernels(dev, 0);
    float *h = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n);
    fsdp_rng_uniform_range((fsdp_rng){47, (uint64_t)(rows * 1000 + cols)}, 0, h, n, -2.0f, 2.0f);
    for (size_t i = 0; i < n; i++) want[i] = h[i];
    reference_ns(want, rows, cols, steps);
    fsdp_muon_workspace ws;
    int side = rows < cols ? rows : cols;
    CHECK(fsdp_muon_workspace_create(&ws, dev, (int64_t)n, side) == FSDP_OK);
    float *x = dev_floats(dev, st, h, n);
    CHECK(fsdp_muon_orthogonalize(k, st, &ws, x, rows, cols, steps) == FSDP_OK);
    CHECK(fsdp_dev_read(st, got, x, sizeof(float) * n) == FSDP_OK);
    double e = rel_err(got, want, n);
    printf("newton-schulz %3d x %3d, %d steps (%s): rel err %.2e\n", rows, cols, steps, k->name, e);
    CHECK(e < 1e-5);
    // a matrix larger than the scratch is refused, not overrun
    if (side > 1) CHECK(fsdp_muon_orthogonalize(k, st, &ws, x, rows + 1, cols + 1, steps) != FSDP_OK);
    fsdp_dev_free(dev, x);
    fsdp_muon_workspace_free(&ws);
    free(h), free(got), free(want);
}

// Two Muon steps (momentum, Nesterov or not, scale, decoupled weight decay) on p (rows, cols)
static void check_update(fsdp_dev *dev, int rows, int cols, int nesterov, float scale) {
    size_t n = (size_t)rows * cols;
    fsdp_stream *st = fsdp_dev_stream(dev, FSDP_STREAM_COMPUTE);
    const fsdp_kernels *k = fsdp_dev_kernels(dev, 0);
    fsdp_muon_config cfg = fsdp_muon_defaults();
    cfg.nesterov = nesterov;
    cfg.weight_decay = 0.1f;
    cfg.momentum = 0.9f;
    const float lr = 0.05f;
    float *hp = malloc(sizeof(float) * n), *hg = malloc(sizeof(float) * 2 * n), *got = malloc(sizeof(float) * n);
    double *p = malloc(sizeof(double) * n), *m = calloc(n, sizeof(double)), *u = malloc(sizeof(double) * n);
    fsdp_rng_uniform_range((fsdp_rng){48, (uint64_t)n}, 0, hp, n, -1.0f, 1.0f);
    fsdp_rng_uniform_range((fsdp_rng){49, (uint64_t)n}, 0, hg, 2 * n, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i++) p[i] = hp[i];
    fsdp_muon_workspace ws;
    CHECK(fsdp_muon_workspace_create(&ws, dev, (int64_t)n, rows < cols ? rows : cols) == FSDP_OK);
    float *dp = dev_floats(dev, st, hp, n), *dm = dev_floats(dev, st, NULL, n), *dg = dev_floats(dev, st, NULL, n);
    CHECK(fsdp_dev_memset(st, dm, 0, sizeof(float) * n) == FSDP_OK);
    for (int step = 0; step < 2; step++) {
        const float *g = hg + (size_t)step * n;
        for (size_t i = 0; i < n; i++) {  // muon.py: m.lerp_(g, 1 - beta); u = g.lerp_(m, beta) or m
            m[i] += (1.0 - cfg.momentum) * ((double)g[i] - m[i]);
            u[i] = nesterov ? g[i] + cfg.momentum * (m[i] - g[i]) : m[i];
        }
        reference_ns(u, rows, cols, cfg.ns_steps);
        for (size_t i = 0; i < n; i++) p[i] = p[i] * (1.0 - (double)lr * cfg.weight_decay) - lr * scale * u[i];
        CHECK(fsdp_copy_h2d(st, dg, g, sizeof(float) * n) == FSDP_OK);
        CHECK(fsdp_muon_update(k, st, &ws, &cfg, dm, dg, rows, cols, scale) == FSDP_OK);
        fsdp_muon_apply(k, st, &cfg, lr, dp, dg, (int64_t)n);
    }
    CHECK(fsdp_dev_read(st, got, dp, sizeof(float) * n) == FSDP_OK);
    double e = rel_err(got, p, n);
    printf("muon update %3d x %3d nesterov %d scale %.3f (%s): rel err %.2e\n", rows, cols, nesterov, scale, k->name, e);
    CHECK(e < 1e-5);
    CHECK(fsdp_dev_read(st, got, dm, sizeof(float) * n) == FSDP_OK);
    CHECK(rel_err(got, m, n) < 1e-6);
    fsdp_dev_free(dev, dp), fsdp_dev_free(dev, dm), fsdp_dev_free(dev, dg);
    fsdp_muon_workspace_free(&ws);
    free(hp), free(hg), free(got), free(p), free(m), free(u);
}

int main(void) {
    // FLOPs: per step 4 r^2 c + 2 r^3 with r the shorter side
    CHECK_NEAR(fsdp_muon_ns_flops(7, 19, 5), 5.0 * (4.0 * 49 * 19 + 2.0 * 343), 0);
    CHECK_NEAR(fsdp_muon_ns_flops(19, 7, 5), fsdp_muon_ns_flops(7, 19, 5), 0);
    CHECK_NEAR(fsdp_muon_ns_flops(16, 16, 3), 3.0 * 6.0 * 4096, 0);
    CHECK_NEAR(fsdp_muon_shape_scale(12, 4), sqrt(3.0), 1e-6);
    CHECK_NEAR(fsdp_muon_shape_scale(4, 16), 1.0, 0);
    fsdp_muon_config d = fsdp_muon_defaults();
    CHECK(d.nesterov == 1 && d.ns_steps == 5 && d.momentum == 0.95f);
    const char *devices[] = {"guard", "cpu", "cuda"};  // cuda where a GPU is (else skipped, with a note)
    for (int i = 0; i < 3; i++) {
        fsdp_dev *dev = NULL;
        fsdp_status st = fsdp_dev_open(devices[i], &dev);
        if (i == 2 && st != FSDP_OK) {
            printf("cuda: skipped (%s)\n", fsdp_last_error());
            continue;
        }
        CHECK(st == FSDP_OK);
        if (!dev) continue;
        check_ns(dev, 7, 19, 5);    // wide
        check_ns(dev, 23, 5, 5);    // tall: the transposed iteration
        check_ns(dev, 16, 16, 5);   // square
        check_ns(dev, 1, 9, 5);     // a single row
        check_ns(dev, 48, 130, 3);  // larger, fewer steps
        check_update(dev, 9, 21, 1, 1.0f);
        check_update(dev, 30, 10, 1, fsdp_muon_shape_scale(30, 10));
        check_update(dev, 12, 12, 0, 1.0f);
        fsdp_dev_close(dev);
    }
    TEST_MAIN_END();
}
