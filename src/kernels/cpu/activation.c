// activation.c: ReLU, GELU (exact erf form and tanh form, as torch.nn.functional.gelu) and dropout.
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define SQRT_2_OVER_PI 0.79788456080286535588f
#define GELU_TANH_COEF 0.044715f

void cpu_relu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

void cpu_gelu_forward(float *out, const float *inp, size_t n, int tanh_approx) {
    if (tanh_approx) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x * x * x);
            out[i] = 0.5f * x * (1.0f + tanhf(u));
        }
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * INV_SQRT2));
    }
}

void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int tanh_approx) {
    if (tanh_approx) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float u = SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x * x * x);
            float th = tanhf(u);
            float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_COEF * x * x);
            dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
        }
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float x = inp[i];
            float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
            float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
            dinp[i] = dout[i] * (cdf + x * pdf);
        }
    }
}

// element i is kept iff uniform(rng, i) >= p; kept values are scaled by 1/(1-p)
static void dropout_apply(float *out, const float *inp, size_t n, float p, fsdp_rng rng) {
    if (p <= 0.0f) {
        if (out != inp)
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++) out[i] = inp[i];
        return;
    }
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    size_t nblocks = (n + 3) / 4;
#pragma omp parallel for schedule(static)
    for (size_t blk = 0; blk < nblocks; blk++) {
        uint32_t w[4];
        fsdp_philox4x32(rng.seed, rng.stream, blk, w);
        for (size_t j = 0; j < 4 && blk * 4 + j < n; j++) {
            size_t i = blk * 4 + j;
            float u = (float)(w[j] >> 8) * (1.0f / 16777216.0f);
            out[i] = u >= p ? inp[i] * scale : 0.0f;
        }
    }
}

void cpu_dropout_forward(float *out, const float *inp, size_t n, float p, fsdp_rng rng) {
    dropout_apply(out, inp, n, p, rng);
}

void cpu_dropout_backward(float *dinp, const float *dout, size_t n, float p, fsdp_rng rng) {
    dropout_apply(dinp, dout, n, p, rng);
}
