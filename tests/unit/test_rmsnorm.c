// test_rmsnorm.c: the rmsnorm_forward / rmsnorm_backward kernels (kernels/kernel_list.h) against
// RMSNorm computed in double (Hugging Face's LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight), their
// gradients against central finite differences of a loss in double, the bf16 output, the residual
// gradient's add, a frozen weight (dweight NULL), dinp written over dout, and the same bits on 1 and 3
// threads and through the cpu and guard devices' tables.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "device/cpu/cpu_kernels.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "test.h"

static float *floats(size_t n, uint64_t stream, float lo, float hi) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    fsdp_rng_uniform_range((fsdp_rng){91, stream}, 0, x, n, lo, hi);
    return x;
}

// out (N, C) of RMSNorm in double
static void reference(double *out, const float *x, const float *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[n * C + c] * x[n * C + c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[n * C + c] = x[n * C + c] * r * w[c];
    }
}

// L = sum(out * g) in double for RMSNorm(x; w)
static double loss(const float *x, const float *w, const float *g, int N, int C, double eps) {
    double *out = malloc(sizeof(double) * (size_t)N * C), L = 0;
    reference(out, x, w, N, C, eps);
    for (size_t i = 0; i < (size_t)N * C; i++) L += out[i] * g[i];
    free(out);
    return L;
}

// dL/dv[i] by a central difference of step 1e-3 (v is x or w; the step as the floats store it)
static double central_difference(float *v, size_t i, const float *x, const float *w, const float *g, int N, int C,
                                 double eps) {
    const double h = 1e-3;
    float keep = v[i];
    v[i] = (float)(keep + h);
    double up = loss(x, w, g, N, C, eps);
    v[i] = (float)(keep - h);
    double down = loss(x, w, g, N, C, eps);
    double step = (double)(float)(keep + h) - (double)(float)(keep - h);
    v[i] = keep;
    return (up - down) / step;
}

// max |got - want| / max |want| (NaN: infinite)
static double rel_err(const float *got, const double *want, size_t n) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = isnan(got[i]) ? INFINITY : fabs((double)got[i] - want[i]);
        worst = fmax(worst, e);
        scale = fmax(scale, fabs(want[i]));
    }
    return worst / scale;
}

static void check_values(int N, int C) {
    const float eps = 1e-6f;
    size_t n = (size_t)N * C;
    float *x = floats(n, 1, -2.0f, 2.0f), *w = floats((size_t)C, 2, 0.5f, 1.5f), *g = floats(n, 3, -1.0f, 1.0f);
    float *out = malloc(sizeof(float) * n), *rstd = malloc(sizeof(float) * N), *dx = malloc(sizeof(float) * n);
    float *dw = calloc((size_t)C, sizeof(float));
    double *want = malloc(sizeof(double) * n);
    cpu_rmsnorm_forward(out, NULL, rstd, x, w, N, C, eps);
    reference(want, x, w, N, C, eps);
    double e_out = rel_err(out, want, n);
    CHECK(e_out < 1e-6);
    cpu_rmsnorm_backward(dx, dw, g, NULL, x, w, rstd, N, C);
    // finite differences of L in double, step h relative to the value's scale
    double *fd_x = malloc(sizeof(double) * n), *fd_w = malloc(sizeof(double) * C);
    for (size_t i = 0; i < n; i++) fd_x[i] = central_difference(x, i, x, w, g, N, C, eps);
    for (int c = 0; c < C; c++) fd_w[c] = central_difference(w, (size_t)c, x, w, g, N, C, eps);
    double e_dx = rel_err(dx, fd_x, n), e_dw = rel_err(dw, fd_w, (size_t)C);
    printf("rmsnorm N%d C%d: rel err out %.2e, dinp %.2e, dweight %.2e (finite differences)\n", N, C, e_out, e_dx, e_dw);
    CHECK(e_dx < 2e-5);
    CHECK(e_dw < 2e-5);

    // bf16 output: the fp32 output rounded, out untouched
    fsdp_bf16 *o16 = malloc(sizeof(fsdp_bf16) * n);
    float *sent = floats(n, 4, 7.0f, 8.0f), *out2 = malloc(sizeof(float) * n);
    memcpy(out2, sent, sizeof(float) * n);
    cpu_rmsnorm_forward(out2, o16, rstd, x, w, N, C, eps);
    int b16_ok = 1;
    for (size_t i = 0; i < n; i++) b16_ok &= o16[i] == fsdp_f32_to_bf16(out[i]);
    CHECK(b16_ok);
    CHECK(memcmp(out2, sent, sizeof(float) * n) == 0);

    // dres added; dweight accumulates; NULL dweight leaves dinp the same; dinp over dout
    float *dres = floats(n, 5, -1.0f, 1.0f), *dx2 = malloc(sizeof(float) * n), *dw2 = malloc(sizeof(float) * C);
    for (int c = 0; c < C; c++) dw2[c] = 0.25f;
    cpu_rmsnorm_backward(dx2, dw2, g, dres, x, w, rstd, N, C);
    int add_ok = 1, acc_ok = 1;
    for (size_t i = 0; i < n; i++) add_ok &= dx2[i] == dx[i] + dres[i];
    for (int c = 0; c < C; c++) acc_ok &= dw2[c] == 0.25f + dw[c];
    CHECK(add_ok);
    CHECK(acc_ok);
    cpu_rmsnorm_backward(dx2, NULL, g, NULL, x, w, rstd, N, C);
    CHECK(memcmp(dx2, dx, sizeof(float) * n) == 0);
    float *inplace = malloc(sizeof(float) * n), *dw3 = calloc((size_t)C, sizeof(float));
    memcpy(inplace, g, sizeof(float) * n);
    cpu_rmsnorm_backward(inplace, dw3, inplace, NULL, x, w, rstd, N, C);
    CHECK(memcmp(inplace, dx, sizeof(float) * n) == 0);
    CHECK(memcmp(dw3, dw, sizeof(float) * C) == 0);

    free(x), free(w), free(g), free(out), free(rstd), free(dx), free(dw), free(want), free(fd_x), free(fd_w);
    free(o16), free(sent), free(out2), free(dres), free(dx2), free(dw2), free(inplace), free(dw3);
}

// forward and backward outputs with `threads` OpenMP threads, through table k on stream st
static void run(const fsdp_kernels *k, fsdp_stream *st, int threads, int N, int C, float *out, float *rstd, float *dx,
                float *dw) {
    omp_set_num_threads(threads);
    float *x = floats((size_t)N * C, 6, -3.0f, 3.0f), *w = floats((size_t)C, 7, 0.5f, 1.5f);
    float *g = floats((size_t)N * C, 8, -1.0f, 1.0f);
    memset(dw, 0, sizeof(float) * C);
    k->rmsnorm_forward(st, out, NULL, rstd, x, w, N, C, 1e-5f);
    k->rmsnorm_backward(st, dx, dw, g, NULL, x, w, rstd, N, C);
    free(x), free(w), free(g);
}

// The same bits on 1 and 3 threads, from the CPU table and from the cpu and guard devices' tables
// (device memory for the guard: its kernels open the arena).
static void check_bits(int N, int C) {
    size_t n = (size_t)N * C;
    float *o[4], *r[4], *dx[4], *dw[4];
    for (int i = 0; i < 4; i++)
        o[i] = malloc(sizeof(float) * n), r[i] = malloc(sizeof(float) * N), dx[i] = malloc(sizeof(float) * n),
        dw[i] = malloc(sizeof(float) * C);
    run(fsdp_kernels_cpu(), NULL, 1, N, C, o[0], r[0], dx[0], dw[0]);
    run(fsdp_kernels_cpu(), NULL, 3, N, C, o[1], r[1], dx[1], dw[1]);
    fsdp_dev *cpu = NULL;
    CHECK(fsdp_dev_open("cpu", &cpu) == FSDP_OK);
    if (cpu) run(fsdp_dev_kernels(cpu, 1), fsdp_dev_stream(cpu, FSDP_STREAM_COMPUTE), 2, N, C, o[2], r[2], dx[2], dw[2]);
    fsdp_dev *guard = NULL;
    CHECK(fsdp_dev_open("guard", &guard) == FSDP_OK);
    if (guard) {  // inputs and outputs in the guard's memory, copied in and out through the layer
        fsdp_stream *s = fsdp_dev_stream(guard, FSDP_STREAM_COMPUTE);
        float *hx = floats(n, 6, -3.0f, 3.0f), *hw = floats((size_t)C, 7, 0.5f, 1.5f), *hg = floats(n, 8, -1.0f, 1.0f);
        float *x = fsdp_dev_alloc(guard, sizeof(float) * n, FSDP_MEM_OTHER);
        float *w = fsdp_dev_alloc(guard, sizeof(float) * C, FSDP_MEM_OTHER);
        float *g = fsdp_dev_alloc(guard, sizeof(float) * n, FSDP_MEM_OTHER);
        float *out = fsdp_dev_alloc(guard, sizeof(float) * n, FSDP_MEM_OTHER);
        float *rs = fsdp_dev_alloc(guard, sizeof(float) * N, FSDP_MEM_OTHER);
        float *d = fsdp_dev_alloc(guard, sizeof(float) * n, FSDP_MEM_OTHER);
        float *dwd = fsdp_dev_alloc(guard, sizeof(float) * C, FSDP_MEM_OTHER);  // zero-filled
        CHECK(fsdp_copy_h2d(s, x, hx, sizeof(float) * n) == FSDP_OK);
        CHECK(fsdp_copy_h2d(s, w, hw, sizeof(float) * C) == FSDP_OK);
        CHECK(fsdp_copy_h2d(s, g, hg, sizeof(float) * n) == FSDP_OK);
        const fsdp_kernels *k = fsdp_dev_kernels(guard, 0);
        CHECK(strcmp(k->name, "guard") == 0);
        k->rmsnorm_forward(s, out, NULL, rs, x, w, N, C, 1e-5f);
        k->rmsnorm_backward(s, d, dwd, g, NULL, x, w, rs, N, C);
        CHECK(fsdp_dev_read(s, o[3], out, sizeof(float) * n) == FSDP_OK);
        CHECK(fsdp_dev_read(s, r[3], rs, sizeof(float) * N) == FSDP_OK);
        CHECK(fsdp_dev_read(s, dx[3], d, sizeof(float) * n) == FSDP_OK);
        CHECK(fsdp_dev_read(s, dw[3], dwd, sizeof(float) * C) == FSDP_OK);
        float *bufs[] = {x, w, g, out, rs, d, dwd};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) fsdp_dev_free(guard, bufs[i]);
        free(hx), free(hw), free(hg);
    }
    for (int i = 1; i < 4; i++) {
        if ((i == 2 && !cpu) || (i == 3 && !guard)) continue;
        int same = memcmp(o[i], o[0], sizeof(float) * n) == 0 && memcmp(r[i], r[0], sizeof(float) * N) == 0 &&
                   memcmp(dx[i], dx[0], sizeof(float) * n) == 0 && memcmp(dw[i], dw[0], sizeof(float) * C) == 0;
        printf("rmsnorm N%d C%d: %s: %s\n", N, C,
               i == 1 ? "3 threads" : i == 2 ? "cpu device (bf16 table)" : "guard device", same ? "same bits" : "DIFFERENT");
        CHECK(same);
    }
    fsdp_dev_close(cpu);
    fsdp_dev_close(guard);
    for (int i = 0; i < 4; i++) free(o[i]), free(r[i]), free(dx[i]), free(dw[i]);
}

int main(void) {
    check_values(1, 8);
    check_values(3, 7);    // under the lanes
    check_values(5, 37);   // lanes and a tail
    check_values(4, 128);
    check_bits(40, 96);
    check_bits(700, 160);  // enough values for threads, several blocks of rows
    TEST_MAIN_END();
}
