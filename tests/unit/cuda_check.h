// cuda_check.h: what the CUDA kernel tests (test_cuda_*.c) share. Each test runs a kernel of the CPU
// table (fsdp_kernels_cpu / _cpu_bf16, on host buffers) and the same kernel of the CUDA device's table
// on the same inputs, and compares. Without a CUDA build or a GPU the test exits 77 (ctest: skipped).
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "test.h"

#define CUDA_TEST_SKIP 77

typedef struct {
    fsdp_dev *cpu, *gpu;
    fsdp_stream *cs, *gs;  // compute streams of cpu and gpu
    const fsdp_kernels *kc[2], *kg[2];  // [bf16]
} cuda_test;

// Opens "cuda" (or exits 77 saying why) and the CPU device.
static inline void cuda_test_open(cuda_test *t) {
    memset(t, 0, sizeof *t);
    if (fsdp_dev_open("cuda", &t->gpu) != FSDP_OK) {
        printf("SKIPPED: no CUDA device: %s\n", fsdp_last_error());
        exit(CUDA_TEST_SKIP);
    }
    if (fsdp_dev_open("cpu", &t->cpu) != FSDP_OK) {
        fprintf(stderr, "cannot open the cpu device: %s\n", fsdp_last_error());
        exit(1);
    }
    t->cs = fsdp_dev_stream(t->cpu, FSDP_STREAM_COMPUTE);
    t->gs = fsdp_dev_stream(t->gpu, FSDP_STREAM_COMPUTE);
    for (int b = 0; b < 2; b++) t->kc[b] = fsdp_dev_kernels(t->cpu, b), t->kg[b] = fsdp_dev_kernels(t->gpu, b);
}

static inline void cuda_test_close(cuda_test *t) {
    fsdp_dev_close(t->gpu);
    fsdp_dev_close(t->cpu);
}

// Device copy of host bytes src (bytes,).
static inline void *cuda_test_upload(cuda_test *t, const void *src, size_t bytes) {
    void *p = fsdp_dev_alloc(t->gpu, bytes, FSDP_MEM_OTHER);
    if (!p || fsdp_copy_h2d(t->gs, p, src, bytes) != FSDP_OK) {
        fprintf(stderr, "upload of %zu bytes failed: %s\n", bytes, fsdp_last_error());
        exit(1);
    }
    return p;
}

// Host copy (malloc'd) of device bytes src (bytes,), after the stream's work so far.
static inline void *cuda_test_download(cuda_test *t, const void *src, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    if (!h || fsdp_copy_d2h(t->gs, h, src, bytes) != FSDP_OK || fsdp_stream_synchronize(t->gs) != FSDP_OK) {
        fprintf(stderr, "download of %zu bytes failed: %s\n", bytes, fsdp_last_error());
        exit(1);
    }
    return h;
}

// Compares got (n,) with want (n,): |got - want| <= atol + rtol * |want| everywhere, NaN where and only
// where want is NaN. Prints the worst element under `what`; a failure counts in test_failures.
static inline int cuda_test_compare(const char *what, const float *got, const float *want, size_t n, double atol,
                                    double rtol) {
    size_t worst = 0, bad = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (isnan(w) || isnan(g)) {
            if (!(isnan(w) && isnan(g))) bad++, worst = i, worst_excess = INFINITY;
            continue;
        }
        double excess = fabs(g - w) - (atol + rtol * fabs(w));
        if (excess > 0) bad++;
        if (excess > worst_excess) worst_excess = excess, worst = i;
    }
    if (bad || n == 0) {
        fprintf(stderr, "FAIL %s: %zu of %zu differ; worst [%zu] %.9g vs %.9g (atol %g, rtol %g)\n", what, bad, n,
                worst, n ? got[worst] : 0.0, n ? want[worst] : 0.0, atol, rtol);
        test_failures++;
        return 0;
    }
    printf("ok %s (%zu values)\n", what, n);
    return 1;
}

// Random values in [lo, hi) from a fixed LCG (reproducible across machines). out: (n,)
static inline void cuda_test_fill(float *out, size_t n, unsigned seed, float lo, float hi) {
    unsigned long long s = 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = lo + (hi - lo) * (float)((s >> 40) & 0xffffff) / 16777216.0f;
    }
}

// A label "[fp32] ..." or "[bf16] ..." (bf16: the table under test) and the case, for the compare lines:
// a static buffer, valid to the next call.
static inline const char *cuda_test_label(int bf16, const char *fmt, ...) {
    static char buf[256];
    int k = snprintf(buf, sizeof buf, "[%s] ", bf16 ? "bf16" : "fp32");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + k, sizeof buf - (size_t)k, fmt, ap);
    va_end(ap);
    return buf;
}

// Host floats (n,) in [lo, hi) (cuda_test_fill's), malloc'd.
static inline float *cuda_test_rand(size_t n, unsigned seed, float lo, float hi) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    cuda_test_fill(h, n, seed, lo, hi);
    return h;
}

// A malloc'd copy (n,) of host floats h (n,).
static inline float *cuda_test_dup(const float *h, size_t n) {
    float *d = malloc(sizeof(float) * (n ? n : 1));
    memcpy(d, h, sizeof(float) * n);
    return d;
}

// The same bytes in got and want (bytes,); a difference counts in test_failures.
static inline void cuda_test_bytes(const char *what, const void *got, const void *want, size_t bytes) {
    const unsigned char *g = got, *w = want;
    for (size_t i = 0; i < bytes; i++)
        if (g[i] != w[i]) {
            fprintf(stderr, "FAIL %s: bytes differ from byte %zu of %zu (0x%02x vs 0x%02x)\n", what, i, bytes, g[i],
                    w[i]);
            test_failures++;
            return;
        }
    if (bytes) printf("ok %s (%zu bytes, exact)\n", what, bytes);
}
