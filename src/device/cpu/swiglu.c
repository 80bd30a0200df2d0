// swiglu.c: SwiGLU, Llama's MLP nonlinearity: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)), and its
// backward, each one pass over the values. AVX-512 runs 16 values at a time with vec_math.h's exp (within
// ~2 ulp of expf), the plain loop the rest; the work is split in fixed chunks, so an element's path (and
// its bits) depends on its index only, never on the thread count.
#include <math.h>

#include "device/cpu/cpu_kernels.h"
#include "device/cpu/vec_math.h"

#define SWIGLU_CHUNK 1024  // values per piece of work (and per bf16 piece on the stack)

// silu(g) = g / (1 + exp(-g))
static inline float silu(float g) { return g / (1.0f + expf(-g)); }

// out (n,) = silu(gate) * up on the calling thread (gate, up: (n,))
static void swiglu_range(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
#if FSDP_HAVE_AVX512
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 e = vexp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
    }
#endif
    for (; i < n; i++) out[i] = silu(gate[i]) * up[i];
}

// dgate (n,) = dout * up * silu'(gate), dup (n,) = dout * silu(gate) on the calling thread, with
// sigma = 1 / (1 + e), e = exp(-g), and silu'(g) = sigma (1 + g (1 - sigma)); silu(g) is forward's
// g / (1 + e). 1 - sigma is e sigma where g >= 0 (1 - sigma would cancel there: sigma is near 1 and g
// large), 1 - sigma below (no cancellation; e sigma would be inf * 0 where e overflows).
// Every element's gate and up are read before either output is written (dgate may be gate, dup up).
static void swiglu_grad_range(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                              size_t n) {
    size_t i = 0;
#if FSDP_HAVE_AVX512
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i), u = _mm512_loadu_ps(up + i), dy = _mm512_loadu_ps(dout + i);
        __m512 e = vexp512(_mm512_sub_ps(_mm512_setzero_ps(), g)), den = _mm512_add_ps(one, e);
        __m512 sig = _mm512_div_ps(one, den), act = _mm512_div_ps(g, den);
        __mmask16 nonneg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GE_OQ);
        __m512 one_minus = _mm512_mask_blend_ps(nonneg, _mm512_sub_ps(one, sig), _mm512_mul_ps(e, sig));
        __m512 dact = _mm512_mul_ps(sig, _mm512_add_ps(one, _mm512_mul_ps(g, one_minus)));
        _mm512_storeu_ps(dgate + i, _mm512_mul_ps(_mm512_mul_ps(dy, u), dact));
        _mm512_storeu_ps(dup + i, _mm512_mul_ps(dy, act));
    }
#endif
    for (; i < n; i++) {
        float g = gate[i], u = up[i], dy = dout[i];
        float e = expf(-g), den = 1.0f + e, sig = 1.0f / den, act = g / den;
        float one_minus = g >= 0.0f ? e * sig : 1.0f - sig;
        dgate[i] = dy * u * (sig * (1.0f + g * one_minus));
        dup[i] = dy * act;
    }
}

void cpu_swiglu_forward(float *out, fsdp_bf16 *out_b16, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) if (n > SWIGLU_CHUNK)
    for (size_t i0 = 0; i0 < n; i0 += SWIGLU_CHUNK) {
        size_t len = n - i0 < SWIGLU_CHUNK ? n - i0 : SWIGLU_CHUNK;
        if (!out_b16) {
            swiglu_range(out + i0, gate + i0, up + i0, len);
            continue;
        }
        float piece[SWIGLU_CHUNK];  // (len,) fp32 values of out_b16[i0 ..]
        swiglu_range(piece, gate + i0, up + i0, len);
        fsdp_f32_to_bf16_array(out_b16 + i0, piece, len);
    }
}

void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, size_t n) {
#pragma omp parallel for schedule(static) if (n > SWIGLU_CHUNK)
    for (size_t i0 = 0; i0 < n; i0 += SWIGLU_CHUNK) {
        size_t len = n - i0 < SWIGLU_CHUNK ? n - i0 : SWIGLU_CHUNK;
        swiglu_grad_range(dgate + i0, dup + i0, dout + i0, gate + i0, up + i0, len);
    }
}
