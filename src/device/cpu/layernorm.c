// layernorm.c: LayerNorm over the last dimension, as torch.nn.LayerNorm (biased variance), alone or fused
// with the residual add before it (forward) and the residual gradient's add (backward). Every output
// has the same bits on any thread count.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "device/cpu/cpu_kernels.h"

#define LN_LANES 16           // row sums: element c goes to lane c % LN_LANES, the lanes added in order
#define LN_MIN_PARALLEL 16384  // values per call from which rows go to threads

// mean and 1 / sqrt(var + eps) of the row x (C,), both sums in double (each square exact)
static void row_stats(const float *x, int C, float eps, float *mean, float *rstd) {
    double lane[LN_LANES] = {0};
    int c = 0;
    for (; c + LN_LANES <= C; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++) lane[j] += x[c + j];
    for (; c < C; c++) lane[c % LN_LANES] += x[c];
    double sum = 0.0;
    for (int j = 0; j < LN_LANES; j++) sum += lane[j], lane[j] = 0.0;
    float m = (float)(sum / C);
    for (c = 0; c + LN_LANES <= C; c += LN_LANES)
        for (int j = 0; j < LN_LANES; j++) {
            float d = x[c + j] - m;
            lane[j] += (double)d * d;
        }
    for (; c < C; c++) {
        float d = x[c] - m;
        lane[c % LN_LANES] += (double)d * d;
    }
    double var = 0.0;
    for (int j = 0; j < LN_LANES; j++) var += lane[j];
    *mean = m;
    *rstd = (float)(1.0 / sqrt(var / C + eps));
}

// y (C,) = LayerNorm of x (C,) with its statistics written to *mean, *rstd; with y_b16 (C,) given, the
// output goes there in bf16 instead of y
static void row_layernorm(float *y, fsdp_bf16 *y_b16, float *mean, float *rstd, const float *x, const float *weight,
                          const float *bias, int C, float eps) {
    float m, s;
    row_stats(x, C, eps, &m, &s);
    if (y_b16)
        for (int c = 0; c < C; c++) y_b16[c] = fsdp_f32_to_bf16((x[c] - m) * s * weight[c] + bias[c]);
    else
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * weight[c] + bias[c];
    *mean = m;
    *rstd = s;
}

void cpu_layernorm_forward(float *out, fsdp_bf16 *out_b16, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= LN_MIN_PARALLEL)
    for (int n = 0; n < N; n++) {
        size_t at = (size_t)n * C;
        row_layernorm(out_b16 ? NULL : out + at, out_b16 ? out_b16 + at : NULL, mean + n, rstd + n, inp + at, weight,
                      bias, C, eps);
    }
}

// res = a + dropout(b) (the dropout mask of one call over all N*C values), then out = LayerNorm(res):
// the residual add and the norm after it in one pass over each row
void cpu_residual_layernorm_forward(float *res, float *out, fsdp_bf16 *out_b16, float *mean, float *rstd,
                                    const float *a, const float *b, float p, fsdp_rng rng, const float *weight,
                                    const float *bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C >= LN_MIN_PARALLEL)
    for (int n = 0; n < N; n++) {
        size_t at = (size_t)n * C;
        float *r = res + at;  // (C,)
        if (p > 0.0f) {
            cpu_dropout_range(r, b + at, (size_t)C, p, rng, at);
            for (int c = 0; c < C; c++) r[c] = a[at + c] + r[c];
        } else {
            for (int c = 0; c < C; c++) r[c] = a[at + c] + b[at + c];
        }
        row_layernorm(out_b16 ? NULL : out + at, out_b16 ? out_b16 + at : NULL, mean + n, rstd + n, r, weight, bias, C,
                      eps);
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
// not depend on the thread count; dinp is per row (plus dres, the residual branch's gradient, if given).
void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *dres,
                            const float *inp, const float *weight, const float *mean, const float *rstd, int N,
                            int C) {
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
#pragma omp parallel if ((size_t)N * C >= LN_MIN_PARALLEL)
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
                float lane_dnorm[LN_LANES] = {0}, lane_dnorm_xhat[LN_LANES] = {0};
                int c = 0;
                for (; c + LN_LANES <= C; c += LN_LANES)
                    for (int j = 0; j < LN_LANES; j++) {
                        float xhat = (x[c + j] - m) * s;
                        float dnorm = weight[c + j] * dy[c + j];
                        lane_dnorm[j] += dnorm;
                        lane_dnorm_xhat[j] += dnorm * xhat;
                        dw[c + j] += xhat * dy[c + j];
                        db[c + j] += dy[c + j];
                    }
                for (; c < C; c++) {
                    float xhat = (x[c] - m) * s;
                    float dnorm = weight[c] * dy[c];
                    lane_dnorm[c % LN_LANES] += dnorm;
                    lane_dnorm_xhat[c % LN_LANES] += dnorm * xhat;
                    dw[c] += xhat * dy[c];
                    db[c] += dy[c];
                }
                float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
                for (int j = 0; j < LN_LANES; j++) dnorm_mean += lane_dnorm[j], dnorm_xhat_mean += lane_dnorm_xhat[j];
                dnorm_mean /= C;
                dnorm_xhat_mean /= C;
                for (c = 0; c < C; c++) {
                    float xhat = (x[c] - m) * s;
                    float dnorm = weight[c] * dy[c];
                    dx[c] = s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
                }
                if (dres)
                    for (c = 0; c < C; c++) dx[c] += dres[(size_t)n * C + c];
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
