// adamw.c: one torch.optim.AdamW step (decoupled weight decay, bias correction), elementwise.
// The AVX-512 loop does the same IEEE operations in the same order as the scalar one (no fused
// multiply-adds: the build is ISO C, which does not contract), so both give the same bits. The plain
// loop does not vectorize by itself: sqrtf may set errno.
#include <math.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "device/cpu/cpu_kernels.h"

// elements [i0, i1) of the update; see cpu_adamw_update
static void adamw_range(float *param, const float *grad, float *m, float *v, size_t i0, size_t i1, float decay,
                        float beta1, float beta2, float eps, float step_size, float bias2_sqrt) {
    size_t i = i0;
#ifdef __AVX512F__
    const __m512 vdecay = _mm512_set1_ps(decay), vb1 = _mm512_set1_ps(beta1), vb2 = _mm512_set1_ps(beta2);
    const __m512 vc1 = _mm512_set1_ps(1.0f - beta1), vc2 = _mm512_set1_ps(1.0f - beta2);
    const __m512 veps = _mm512_set1_ps(eps), vstep = _mm512_set1_ps(step_size), vb2s = _mm512_set1_ps(bias2_sqrt);
    for (; i + 16 <= i1; i += 16) {
        __m512 g = _mm512_loadu_ps(grad + i);
        __m512 p = _mm512_mul_ps(_mm512_loadu_ps(param + i), vdecay);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), vb1), _mm512_mul_ps(vc1, g));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), vb2), _mm512_mul_ps(_mm512_mul_ps(vc2, g), g));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vb2s), veps);
        _mm512_storeu_ps(param + i, _mm512_sub_ps(p, _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom))));
    }
#endif
    for (; i < i1; i++) {
        float g = grad[i];
        float p = param[i] * decay;
        float mi = m[i] * beta1 + (1.0f - beta1) * g;
        float vi = v[i] * beta2 + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bias2_sqrt + eps;
        param[i] = p - step_size * (mi / denom);
    }
}

#define ADAMW_CHUNK 4096

void cpu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float step_size,
                      float bias2_sqrt) {
    float decay = 1.0f - lr * weight_decay;
    size_t nchunks = (n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
#pragma omp parallel for schedule(static) if (nchunks >= 4)
    for (size_t c = 0; c < nchunks; c++) {
        size_t i0 = c * ADAMW_CHUNK, i1 = n - i0 < ADAMW_CHUNK ? n : i0 + ADAMW_CHUNK;
        adamw_range(param, grad, m, v, i0, i1, decay, beta1, beta2, eps, step_size, bias2_sqrt);
    }
}
