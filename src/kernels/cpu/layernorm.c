// layernorm.c: LayerNorm over the last dimension, as torch.nn.LayerNorm (biased variance).
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C) {
    int nthreads = 1;
#pragma omp parallel
    {
#pragma omp single
        nthreads = omp_get_num_threads_safe();
    }
    // per-thread partial sums of dweight/dbias, reduced at the end (deterministic order)
    float *partial = calloc((size_t)nthreads * 2 * C, sizeof(float));
#pragma omp parallel num_threads(nthreads)
    {
        int t = omp_get_thread_num_safe();
        float *dw = partial + (size_t)t * 2 * C, *db = dw + C;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
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
    for (int t = 0; t < nthreads; t++) {
        const float *dw = partial + (size_t)t * 2 * C, *db = dw + C;
        for (int c = 0; c < C; c++) {
            dweight[c] += dw[c];
            dbias[c] += db[c];
        }
    }
    free(partial);
}
