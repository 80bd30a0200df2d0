// activation.c: ReLU, GELU (exact erf form and tanh form, as torch.nn.functional.gelu) and dropout.
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_math.h"

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

// tanh form via 1 + tanh(u) = 2 sigmoid(2u): gelu(x) = x / (1 + exp(-2u)), u = sqrt(2/pi)(x + 0.044715 x^3)
static inline float gelu_tanh_sigmoid(float x) {
    float u = SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

void cpu_gelu_forward(float *out, const float *inp, size_t n, int tanh_approx) {
    if (tanh_approx) {
#pragma omp parallel for schedule(static)
        for (size_t i0 = 0; i0 < n; i0 += 1024) {
            size_t i1 = i0 + 1024 < n ? i0 + 1024 : n, i = i0;
#if FSDP_HAVE_AVX512
            for (; i + 16 <= i1; i += 16) {
                __m512 x = _mm512_loadu_ps(inp + i);
                __m512 u = _mm512_mul_ps(_mm512_set1_ps(SQRT_2_OVER_PI),
                                         _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_TANH_COEF), x),
                                                         _mm512_mul_ps(x, x), x));
                __m512 e = vexp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
                _mm512_storeu_ps(out + i, _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
            }
#endif
            for (; i < i1; i++) out[i] = inp[i] * gelu_tanh_sigmoid(inp[i]);
        }
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) out[i] = 0.5f * inp[i] * (1.0f + erff(inp[i] * INV_SQRT2));
    }
}

void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int tanh_approx) {
    if (tanh_approx) {
        // d/dx [x s(2u)] = s + 2 x s (1 - s) u'(x), u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2)
#pragma omp parallel for schedule(static)
        for (size_t i0 = 0; i0 < n; i0 += 1024) {
            size_t i1 = i0 + 1024 < n ? i0 + 1024 : n, i = i0;
#if FSDP_HAVE_AVX512
            const __m512 one = _mm512_set1_ps(1.0f), k0 = _mm512_set1_ps(SQRT_2_OVER_PI);
            const __m512 k1 = _mm512_set1_ps(GELU_TANH_COEF), k3 = _mm512_set1_ps(3.0f * GELU_TANH_COEF);
            for (; i + 16 <= i1; i += 16) {
                __m512 x = _mm512_loadu_ps(inp + i), x2 = _mm512_mul_ps(x, x);
                __m512 u = _mm512_mul_ps(k0, _mm512_fmadd_ps(_mm512_mul_ps(k1, x), x2, x));
                __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, vexp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u))));
                __m512 du = _mm512_mul_ps(k0, _mm512_fmadd_ps(k3, x2, one));
                __m512 ds = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), _mm512_mul_ps(s, _mm512_sub_ps(one, s))), du);
                _mm512_storeu_ps(dinp + i, _mm512_mul_ps(_mm512_loadu_ps(dout + i), _mm512_add_ps(s, ds)));
            }
#endif
            for (; i < i1; i++) {
                float x = inp[i], s = gelu_tanh_sigmoid(x);
                float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_COEF * x * x);
                dinp[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
            }
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

#define DROPOUT_CHUNK 256

void cpu_dropout_range(float *out, const float *inp, size_t n, float p, fsdp_rng rng, uint64_t offset) {
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f, u[DROPOUT_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += DROPOUT_CHUNK) {
        size_t len = n - i0 < DROPOUT_CHUNK ? n - i0 : DROPOUT_CHUNK;
        fsdp_rng_uniform(rng, offset + i0, u, len);
#pragma omp simd
        for (size_t j = 0; j < len; j++) out[i0 + j] = u[j] >= p ? inp[i0 + j] * scale : 0.0f;
    }
}

// element i is kept iff uniform(rng, i) >= p; chunks of DROPOUT_CHUNK over threads (none under 8 chunks)
static void dropout_apply(float *out, const float *inp, size_t n, float p, fsdp_rng rng) {
    if (p <= 0.0f) {
        if (out != inp)
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++) out[i] = inp[i];
        return;
    }
    size_t nchunks = (n + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
#pragma omp parallel for schedule(static) if (n >= 8 * DROPOUT_CHUNK)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * DROPOUT_CHUNK, len = n - i0 < DROPOUT_CHUNK ? n - i0 : DROPOUT_CHUNK;
        cpu_dropout_range(out + i0, inp + i0, len, p, rng, i0);
    }
}

void cpu_dropout_forward(float *out, const float *inp, size_t n, float p, fsdp_rng rng) {
    dropout_apply(out, inp, n, p, rng);
}

void cpu_dropout_backward(float *dinp, const float *dout, size_t n, float p, fsdp_rng rng) {
    dropout_apply(dinp, dout, n, p, rng);
}
