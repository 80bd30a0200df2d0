// activation.c: ReLU, GELU (exact erf form and tanh form, as torch.nn.functional.gelu) and dropout, alone
// or fused (a linear layer's bias, its activation and the dropout after it in one pass; their backward
// in one pass).
#include <math.h>

#include "device/cpu/cpu_kernels.h"
#include "device/cpu/vec_math.h"

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f
#define SQRT_2_OVER_PI 0.79788456080286535588f
#define GELU_TANH_COEF 0.044715f

#define ACT_CHUNK 1024  // values per piece of work of the elementwise kernels

static inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * INV_SQRT2)); }

static inline float gelu_erf_grad(float x) {
    float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
    float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

// tanh form via 1 + tanh(u) = 2 sigmoid(2u): gelu(x) = x / (1 + exp(-2u)), u = sqrt(2/pi)(x + 0.044715 x^3)
static inline float gelu_tanh_sigmoid(float x) {
    float u = SQRT_2_OVER_PI * (x + GELU_TANH_COEF * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

// d/dx [x s(2u)] = s + 2 x s (1 - s) u'(x), u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2)
static inline float gelu_tanh_grad(float x) {
    float s = gelu_tanh_sigmoid(x);
    float du = SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_COEF * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du;
}

// out (n,) = a(inp (n,)) on the calling thread; out may be inp
static void act_range(float *out, const float *inp, size_t n, fsdp_activation a) {
    size_t i = 0;
    if (a == FSDP_ACT_RELU) {
#pragma omp simd
        for (i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
    } else if (a == FSDP_ACT_GELU) {
        for (i = 0; i < n; i++) out[i] = gelu_erf(inp[i]);
    } else {
#if FSDP_HAVE_AVX512
        for (; i + 16 <= n; i += 16) {
            __m512 x = _mm512_loadu_ps(inp + i);
            __m512 u = _mm512_mul_ps(_mm512_set1_ps(SQRT_2_OVER_PI),
                                     _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_TANH_COEF), x),
                                                     _mm512_mul_ps(x, x), x));
            __m512 e = vexp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
            _mm512_storeu_ps(out + i, _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
        }
#endif
        for (; i < n; i++) out[i] = inp[i] * gelu_tanh_sigmoid(inp[i]);
    }
}

// dinp (n,) = dout (n,) * a'(inp (n,)) on the calling thread (ReLU: inp > 0; inp may be its output);
// dinp may be dout
static void act_grad_range(float *dinp, const float *dout, const float *inp, size_t n, fsdp_activation a) {
    size_t i = 0;
    if (a == FSDP_ACT_RELU) {
#pragma omp simd
        for (i = 0; i < n; i++) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
    } else if (a == FSDP_ACT_GELU) {
        for (i = 0; i < n; i++) dinp[i] = dout[i] * gelu_erf_grad(inp[i]);
    } else {
#if FSDP_HAVE_AVX512
        const __m512 one = _mm512_set1_ps(1.0f), k0 = _mm512_set1_ps(SQRT_2_OVER_PI);
        const __m512 k1 = _mm512_set1_ps(GELU_TANH_COEF), k3 = _mm512_set1_ps(3.0f * GELU_TANH_COEF);
        for (; i + 16 <= n; i += 16) {
            __m512 x = _mm512_loadu_ps(inp + i), x2 = _mm512_mul_ps(x, x);
            __m512 u = _mm512_mul_ps(k0, _mm512_fmadd_ps(_mm512_mul_ps(k1, x), x2, x));
            __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, vexp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u))));
            __m512 du = _mm512_mul_ps(k0, _mm512_fmadd_ps(k3, x2, one));
            __m512 ds = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), _mm512_mul_ps(s, _mm512_sub_ps(one, s))), du);
            _mm512_storeu_ps(dinp + i, _mm512_mul_ps(_mm512_loadu_ps(dout + i), _mm512_add_ps(s, ds)));
        }
#endif
        for (; i < n; i++) dinp[i] = dout[i] * gelu_tanh_grad(inp[i]);
    }
}

// act_range over chunks of ACT_CHUNK on threads (one chunk: no OpenMP region)
static void act_apply(float *out, const float *inp, size_t n, fsdp_activation a) {
#pragma omp parallel for schedule(static) if (n > ACT_CHUNK)
    for (size_t i0 = 0; i0 < n; i0 += ACT_CHUNK) act_range(out + i0, inp + i0, n - i0 < ACT_CHUNK ? n - i0 : ACT_CHUNK, a);
}

static void act_grad_apply(float *dinp, const float *dout, const float *inp, size_t n, fsdp_activation a) {
#pragma omp parallel for schedule(static) if (n > ACT_CHUNK)
    for (size_t i0 = 0; i0 < n; i0 += ACT_CHUNK)
        act_grad_range(dinp + i0, dout + i0, inp + i0, n - i0 < ACT_CHUNK ? n - i0 : ACT_CHUNK, a);
}

void cpu_relu_forward(float *out, const float *inp, size_t n) { act_apply(out, inp, n, FSDP_ACT_RELU); }

void cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n) {
    act_grad_apply(dinp, dout, out, n, FSDP_ACT_RELU);
}

void cpu_gelu_forward(float *out, const float *inp, size_t n, int tanh_approx) {
    act_apply(out, inp, n, tanh_approx ? FSDP_ACT_GELU_TANH : FSDP_ACT_GELU);
}

void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int tanh_approx) {
    act_grad_apply(dinp, dout, inp, n, tanh_approx ? FSDP_ACT_GELU_TANH : FSDP_ACT_GELU);
}

#define DROPOUT_CHUNK 256

// Element i is kept iff uniform(i) >= p, i.e. (word(i) >> 8) * 2^-24 >= p: compared as integers,
// (word(i) >> 8) >= ceil(p * 2^24), the same mask without making the floats.
void cpu_dropout_range(float *out, const float *inp, size_t n, float p, fsdp_rng rng, uint64_t offset) {
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    uint32_t keep_from = p < 1.0f ? (uint32_t)ceil((double)p * 16777216.0) : 16777216u, words[DROPOUT_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += DROPOUT_CHUNK) {
        size_t len = n - i0 < DROPOUT_CHUNK ? n - i0 : DROPOUT_CHUNK;
        fsdp_rng_words(rng, offset + i0, words, len);
#pragma omp simd
        for (size_t j = 0; j < len; j++) out[i0 + j] = (words[j] >> 8) >= keep_from ? inp[i0 + j] * scale : 0.0f;
    }
}

// element i is kept iff uniform(rng, i) >= p; chunks of DROPOUT_CHUNK over threads (none under 8 chunks).
// With pre (n,) given, each chunk then goes through the backward of activation a at pre (out = a'(pre) *
// dropout's backward of inp): the fused backward of activation and dropout.
static void dropout_apply(float *out, const float *inp, size_t n, float p, fsdp_rng rng, const float *pre,
                          fsdp_activation a) {
    if (p <= 0.0f) {
        if (pre) act_grad_apply(out, inp, pre, n, a);
        else if (out != inp)
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < n; i++) out[i] = inp[i];
        return;
    }
    size_t nchunks = (n + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
#pragma omp parallel for schedule(static) if (n >= 8 * DROPOUT_CHUNK)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * DROPOUT_CHUNK, len = n - i0 < DROPOUT_CHUNK ? n - i0 : DROPOUT_CHUNK;
        cpu_dropout_range(out + i0, inp + i0, len, p, rng, i0);
        if (pre) act_grad_range(out + i0, out + i0, pre + i0, len, a);
    }
}

void cpu_dropout_forward(float *out, const float *inp, size_t n, float p, fsdp_rng rng) {
    dropout_apply(out, inp, n, p, rng, NULL, FSDP_ACT_RELU);
}

void cpu_dropout_backward(float *dinp, const float *dout, size_t n, float p, fsdp_rng rng) {
    dropout_apply(dinp, dout, n, p, rng, NULL, FSDP_ACT_RELU);
}

// Rows go to threads (one OpenMP region, none for a single chunk's worth): each row gets its bias (none
// when bias is NULL: pre is then only read), its activation, then its part of the dropout mask (elements
// n*F.., as one call over N*F values would). A bf16 output is made in pieces of ACT_CHUNK values on the
// stack, then rounded.
void cpu_bias_act_dropout_forward(float *pre, float *act, fsdp_bf16 *act_b16, const float *bias, int N, int F,
                                  fsdp_activation a, float p, fsdp_rng rng) {
#pragma omp parallel for schedule(static) if ((size_t)N * F > 8 * ACT_CHUNK)
    for (int n = 0; n < N; n++) {
        size_t at = (size_t)n * F;
        float *x = pre + at;  // (F,)
        if (bias) {
#pragma omp simd
            for (int f = 0; f < F; f++) x[f] += bias[f];
        }
        if (!act_b16) {
            float *y = act + at;  // (F,)
            act_range(y, x, (size_t)F, a);
            if (p > 0.0f) cpu_dropout_range(y, y, (size_t)F, p, rng, at);
            continue;
        }
        float piece[ACT_CHUNK];  // (len,) fp32 values of act_b16[at + f0 ..]
        for (int f0 = 0; f0 < F; f0 += ACT_CHUNK) {
            size_t len = F - f0 < ACT_CHUNK ? (size_t)(F - f0) : ACT_CHUNK;
            act_range(piece, x + f0, len, a);
            if (p > 0.0f) cpu_dropout_range(piece, piece, len, p, rng, at + (size_t)f0);
            fsdp_f32_to_bf16_array(act_b16 + at + f0, piece, len);
        }
    }
}

// act != 0 iff the element was kept and pre > 0 (act = pre * scale there, scale >= 1; ReLU of NaN is 0)
void cpu_relu_dropout_backward(float *dpre, const float *dact, const float *act, size_t n, float p) {
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
#pragma omp parallel for simd schedule(static) if (n >= 8 * DROPOUT_CHUNK)
    for (size_t i = 0; i < n; i++) dpre[i] = act[i] != 0.0f ? dact[i] * scale : 0.0f;
}

void cpu_act_dropout_backward(float *dpre, const float *dact, const float *pre, size_t n, fsdp_activation a, float p,
                              fsdp_rng rng) {
    dropout_apply(dpre, dact, n, p, rng, pre, a);
}
