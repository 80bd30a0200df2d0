// embedding.c: table lookup and its scatter-add gradient.
#include <string.h>

#include "device/cpu/cpu_kernels.h"

void cpu_embedding_forward(float *out, const int32_t *idx, const float *table, int N, int C, int accumulate) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *row = table + (size_t)idx[n] * C;
        float *dst = out + (size_t)n * C;
        if (accumulate)
            for (int c = 0; c < C; c++) dst[c] += row[c];
        else
            memcpy(dst, row, sizeof(float) * (size_t)C);
    }
}

void cpu_embedding_forward_b16(float *out, const int32_t *idx, const fsdp_bf16 *table, int N, int C, int accumulate) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const fsdp_bf16 *row = table + (size_t)idx[n] * C;
        float *dst = out + (size_t)n * C;
        for (int c = 0; c < C; c++) dst[c] = (accumulate ? dst[c] : 0.0f) + fsdp_bf16_to_f32(row[c]);
    }
}

void cpu_embedding_backward(float *dtable, const float *dout, const int32_t *idx, int N, int C) {
    // split channels over threads: each thread owns a column slice of every table row, so there are
    // no races and the summation order over n is fixed
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 32) {
        int c1 = c0 + 32 < C ? c0 + 32 : C;
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)idx[n] * C;
            const float *src = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
