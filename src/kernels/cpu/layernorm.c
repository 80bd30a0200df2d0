// layernorm.c: LayerNorm over the last dimension, as torch.nn.LayerNorm (biased variance). Every
// output has the same bits on any thread count.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += x[c];
        float m = (float)(sum / C);
        double var = 0.0;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            var += (double)d * d;
        }
        float s = (float)(1.0 / sqrt(var / C + eps));
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// Rows per block of the parameter gradients: LN_BLOCK_ROWS, or more when N is so large that the block
// sums would exceed LN_MAX_BLOCKS (a function of N only, never of the thread count).
#define LN_BLOCK_ROWS 32
#define LN_MAX_BLOCKS 256

// The block sums' scratch, (blocks, 2, C) floats: per calling thread, grown to the largest call and kept
// (no allocation per call in steady state).
static _Thread_local float *ln_partial;
static _Thread_local size_t ln_partial_floats;

// dweight/dbias: each block of rows sums its rows' terms in row order into its own slot (threads take
// whole blocks), then the block sums are added in block order (threads take columns), so the bits do
// not depend on the thread count; dinp is per row.
void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int rows_per_block = (N + LN_MAX_BLOCKS - 1) / LN_MAX_BLOCKS;
    rows_per_block = rows_per_block > LN_BLOCK_ROWS ? rows_per_block : LN_BLOCK_ROWS;
    int nblocks = (N + rows_per_block - 1) / rows_per_block;
    size_t need = (size_t)nblocks * 2 * (size_t)C;
    if (ln_partial_floats < need) {
        free(ln_partial);
        ln_partial = malloc(sizeof(float) * need);
        FSDP_ASSERT(ln_partial != NULL);
        ln_partial_floats = need;
    }
    float *partial = ln_partial;  // (nblocks, 2, C): block b's dweight sums, then its dbias sums
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int b = 0; b < nblocks; b++) {
            float *dw = partial + (size_t)b * 2 * C, *db = dw + C;  // (C,) each
            memset(dw, 0, sizeof(float) * 2 * (size_t)C);
            int n1 = (b + 1) * rows_per_block < N ? (b + 1) * rows_per_block : N;
            for (int n = b * rows_per_block; n < n1; n++) {
                const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;  // (C,) each
                float *dx = dinp + (size_t)n * C;                                   // (C,)
                float m = mean[n], s = rstd[n];
                float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
                for (int c = 0; c < C; c++) {
                    float xhat = (x[c] - m) * s;
                    float dnorm = weight[c] * dy[c];
                    dnorm_mean += dnorm;
                    dnorm_xhat_mean += dnorm * xhat;
                    dw[c] += xhat * dy[c];
                    db[c] += dy[c];
                }
                dnorm_mean /= C;
                dnorm_xhat_mean /= C;
                for (int c = 0; c < C; c++) {
                    float xhat = (x[c] - m) * s;
                    float dnorm = weight[c] * dy[c];
                    dx[c] = s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
                }
            }
        }
        // the block sums in block order, 64 columns per piece of work
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += 64) {
            int c1 = c0 + 64 < C ? c0 + 64 : C;
            float sw[64] = {0}, sb[64] = {0};  // (c1 - c0,) each
            for (int b = 0; b < nblocks; b++) {
                const float *dw = partial + (size_t)b * 2 * C, *db = dw + C;  // (C,) each
                for (int c = c0; c < c1; c++) {
                    sw[c - c0] += dw[c];
                    sb[c - c0] += db[c];
                }
            }
            for (int c = c0; c < c1; c++) {  // a frozen weight or bias has no gradient (NULL)
                if (dweight) dweight[c] += sw[c - c0];
                if (dbias) dbias[c] += sb[c - c0];
            }
        }
    }
}
