// cross_entropy.c: softmax cross-entropy over V classes, mean over N rows (torch.nn.functional.cross_entropy),
// fused with the LM head's softmax: the (N, V) probabilities are never stored. Forward keeps two floats
// per row (the row's maximum logit and the reciprocal of its sum of exponentials); backward recomputes
// each probability from them and turns the logits into their gradient in place.
// Threads take rows; the rows' losses (double) are then added in row order on one thread, so the mean
// has the serial loop's bits on any thread count.
#include <math.h>
#include <stdlib.h>

#include "core/status.h"
#include "device/cpu/cpu_kernels.h"
#include "device/cpu/vec_math.h"

#define CE_STACK_ROWS 1024  // row losses kept on the stack up to this many rows (more: one malloc)

static float row_max(const float *z, int V) {  // z: (V,)
    int v = 0;
    float m = z[0];
#if FSDP_HAVE_AVX512
    if (V >= 16) {
        __m512 acc = _mm512_loadu_ps(z);
        for (v = 16; v + 16 <= V; v += 16) acc = _mm512_max_ps(acc, _mm512_loadu_ps(z + v));
        m = _mm512_reduce_max_ps(acc);
    }
#endif
    for (; v < V; v++) m = z[v] > m ? z[v] : m;
    return m;
}

// sum over v of exp(z[v] - maxv), each exponential rounded to float and added in double: element v into
// double lane v % 16 (the AVX-512 loop's lanes), the lanes then added in a fixed order
static double row_sum_exp(const float *z, int V, float maxv) {  // z: (V,)
    double lane[16] = {0};
    int v = 0;
#if FSDP_HAVE_AVX512
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    __m512 m = _mm512_set1_ps(maxv);
    for (; v + 16 <= V; v += 16) {
        __m512 e = vexp512(_mm512_sub_ps(_mm512_loadu_ps(z + v), m));
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    _mm512_storeu_pd(lane, lo);
    _mm512_storeu_pd(lane + 8, hi);
#endif
    for (; v < V; v++) lane[v % 16] += expf(z[v] - maxv);
    double sum = 0.0;
    for (int j = 0; j < 16; j++) sum += lane[j];
    return sum;
}

void cpu_cross_entropy_forward(double *loss, float *losses, float *stats, const float *logits, const int32_t *targets,
                               int N, int V) {
    double stack_rows[CE_STACK_ROWS];  // (N,) row losses when N <= CE_STACK_ROWS
    double *row_loss = N <= CE_STACK_ROWS ? stack_rows : malloc(sizeof(double) * (size_t)N);  // (N,)
    FSDP_ASSERT(row_loss != NULL);
#pragma omp parallel for schedule(static) if (N > 1 && (size_t)N * V > 16384)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;  // (V,)
        float maxv = row_max(z, V);
        double sum = row_sum_exp(z, V, maxv);
        double row = log(sum) - (double)(z[targets[n]] - maxv);
        stats[2 * n] = maxv;
        stats[2 * n + 1] = (float)(1.0 / sum);
        losses[n] = (float)row;
        row_loss[n] = row;
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    if (row_loss != stack_rows) free(row_loss);
    *loss = total / N;
}

void cpu_cross_entropy_backward(float *dlogits, const float *logits, const float *stats, const int32_t *targets,
                                float dloss, int N, int V) {
#pragma omp parallel for schedule(static) if (N > 1 && (size_t)N * V > 16384)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;  // (V,)
        float *d = dlogits + (size_t)n * V;       // (V,), may be z
        float maxv = stats[2 * n], inv = stats[2 * n + 1];
        int v = 0;
#if FSDP_HAVE_AVX512
        __m512 m = _mm512_set1_ps(maxv), s = _mm512_set1_ps(inv), g = _mm512_set1_ps(dloss);
        for (; v + 16 <= V; v += 16) {
            __m512 p = _mm512_mul_ps(vexp512(_mm512_sub_ps(_mm512_loadu_ps(z + v), m)), s);
            _mm512_storeu_ps(d + v, _mm512_mul_ps(p, g));
        }
#endif
        for (; v < V; v++) d[v] = expf(z[v] - maxv) * inv * dloss;
        d[targets[n]] -= dloss;
    }
}
