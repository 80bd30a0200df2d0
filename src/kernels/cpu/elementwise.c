// elementwise.c: residual adds, scaling, bias broadcast and its gradient, sum of squares.
#include <stdlib.h>

#include "kernels/cpu/cpu_kernels.h"

void cpu_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_add_inplace(float *acc, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) acc[i] += b[i];
}

void cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_bias_add(float *out, const float *bias, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) row[c] += bias[c];
    }
}

void cpu_bias_backward(float *dbias, const float *dout, int N, int C) {
    // split columns over threads so each dbias element has one writer and a fixed summation order
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        float acc[64] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
    }
}

double cpu_sum_squares(const float *x, size_t n) {
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (size_t i = 0; i < n; i++) total += (double)x[i] * x[i];
    return total;
}
