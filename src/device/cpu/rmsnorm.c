// rmsnorm.c: RMSNorm over the last dimension, as Hugging Face's LlamaRMSNorm computes it in fp32
// (x * rsqrt(mean(x^2) + eps), then times the weight), alone or fused with the residual add before it,
// and its backward. The row sums follow layernorm.c's lanes (the squares' sum in double, the backward's
// in float); the weight gradient is summed in fixed blocks of rows, so every output has the same bits on
// any thread count.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "device/cpu/cpu_kernels.h"

#define RMS_LANES 16            // row sums: element c goes to lane c % RMS_LANES, the lanes added in order
#define RMS_MIN_PARALLEL 16384  // values per call from which rows go to threads
#define RMS_BLOCK_ROWS 32       // rows per block of the weight gradient (more when N is large) ...
#define RMS_MAX_BLOCKS 256      // ... so that there are at most this many blocks (a function of N only)

// 1 / sqrt(mean(x^2) + eps) of the row x (C,), the squares summed in double (each one exact)
static float row_rstd(const float *x, int C, float eps) {
    double lane[RMS_LANES] = {0};
    int c = 0;
    for (; c + RMS_LANES <= C; c += RMS_LANES)
        for (int j = 0; j < RMS_LANES; j++) lane[j] += (double)x[c + j] * x[c + j];
    for (; c < C; c++) lane[c % RMS_LANES] += (double)x[c] * x[c];
    double sum = 0.0;
    for (int j = 0; j < RMS_LANES; j++) sum += lane[j];
    return (float)(1.0 / sqrt(sum / C + eps));
}

// y (C,) = RMSNorm of x (C,) with its 1 / rms written to *rstd; with y_b16 (C,) given, the output goes
// there in bf16 instead of y
static void row_rmsnorm(float *y, fsdp_bf16 *y_b16, float *rstd, const float *x, const float *weight, int C,
                        float eps) {
    float s = row_rstd(x, C, eps);
    *rstd = s;
    if (y_b16)
        for (int c = 0; c < C; c++) y_b16[c] = fsdp_f32_to_bf16(x[c] * s * weight[c]);
    else
        for (int c = 0; c < C; c++) y[c] = x[c] * s * weight[c];
}

void cpu_rmsnorm_forward(float *out, fsdp_bf16 *out_b16, float *rstd, const float *inp, const float *weight, int N,
                         int C, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= RMS_MIN_PARALLEL)
    for (int n = 0; n < N; n++) {
        size_t at = (size_t)n * C;
        row_rmsnorm(out_b16 ? NULL : out + at, out_b16 ? out_b16 + at : NULL, rstd + n, inp + at, weight, C, eps);
    }
}

// res = a + b, then out = RMSNorm(res): the residual add and the norm after it in one pass over each row
// (res may be a or b: each element is read before it is written)
void cpu_residual_rmsnorm_forward(float *res, float *out, fsdp_bf16 *out_b16, float *rstd, const float *a,
                                  const float *b, const float *weight, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= RMS_MIN_PARALLEL)
    for (int n = 0; n < N; n++) {
        size_t at = (size_t)n * C;
        float *r = res + at;  // (C,)
        for (int c = 0; c < C; c++) r[c] = a[at + c] + b[at + c];
        row_rmsnorm(out_b16 ? NULL : out + at, out_b16 ? out_b16 + at : NULL, rstd + n, r, weight, C, eps);
    }
}

// dinp (C,) of one row: with xhat = x * s and dnorm = weight * dout, dx = s * (dnorm - xhat * mean(dnorm *
// xhat)), the mean summed in float over the lanes (+ dres, when given)
static void row_backward(float *dx, const float *dy, const float *dres, const float *x, const float *weight, float s,
                         int C) {
    float lane[RMS_LANES] = {0};
    int c = 0;
    for (; c + RMS_LANES <= C; c += RMS_LANES)
        for (int j = 0; j < RMS_LANES; j++) lane[j] += weight[c + j] * dy[c + j] * (x[c + j] * s);
    for (; c < C; c++) lane[c % RMS_LANES] += weight[c] * dy[c] * (x[c] * s);
    float mean = 0.0f;
    for (int j = 0; j < RMS_LANES; j++) mean += lane[j];
    mean /= C;
    for (c = 0; c < C; c++) {
        float xhat = x[c] * s, dnorm = weight[c] * dy[c];
        dx[c] = s * (dnorm - xhat * mean);
        if (dres) dx[c] += dres[c];
    }
}

// The block sums' scratch, (blocks, C) floats: per calling thread, grown to the largest call and kept.
static _Thread_local float *rms_partial;
static _Thread_local size_t rms_partial_floats;

void cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *dres, const float *inp,
                          const float *weight, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int rows_per_block = (N + RMS_MAX_BLOCKS - 1) / RMS_MAX_BLOCKS;
    rows_per_block = rows_per_block > RMS_BLOCK_ROWS ? rows_per_block : RMS_BLOCK_ROWS;
    int nblocks = (N + rows_per_block - 1) / rows_per_block;
    size_t need = (size_t)nblocks * (size_t)C;
    if (dweight && rms_partial_floats < need) {
        free(rms_partial);
        rms_partial = malloc(sizeof(float) * need);
        FSDP_ASSERT(rms_partial != NULL);
        rms_partial_floats = need;
    }
    float *partial = rms_partial;  // (nblocks, C): block b's sums of xhat * dout
#pragma omp parallel if ((size_t)N * C >= RMS_MIN_PARALLEL)
    {
#pragma omp for schedule(static)
        for (int b = 0; b < nblocks; b++) {
            float *dw = dweight ? partial + (size_t)b * C : NULL;  // (C,)
            if (dw) memset(dw, 0, sizeof(float) * (size_t)C);
            int n1 = (b + 1) * rows_per_block < N ? (b + 1) * rows_per_block : N;
            for (int n = b * rows_per_block; n < n1; n++) {
                size_t at = (size_t)n * C;
                float s = rstd[n];
                if (dw)  // before dinp is written: dinp may be dout
                    for (int c = 0; c < C; c++) dw[c] += inp[at + c] * s * dout[at + c];
                row_backward(dinp + at, dout + at, dres ? dres + at : NULL, inp + at, weight, s, C);
            }
        }
        if (dweight) {  // the block sums in block order, 64 columns per piece of work
#pragma omp for schedule(static)
            for (int c0 = 0; c0 < C; c0 += 64) {
                int c1 = c0 + 64 < C ? c0 + 64 : C;
                for (int c = c0; c < c1; c++) {
                    float sw = 0.0f;
                    for (int b = 0; b < nblocks; b++) sw += partial[(size_t)b * C + c];
                    dweight[c] += sw;
                }
            }
        }
    }
}
