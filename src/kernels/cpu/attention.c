// attention.c: scaled dot-product multi-head attention with optional causal mask and dropout on
// the probabilities, as torch.nn.MultiheadAttention computes it (q scaled by 1/sqrt(head_dim)).
// Each (b, h) pair is independent; threads take pairs, gather that head's q, k, v into contiguous
// (T, hd) scratch, and run small single-threaded GEMMs.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_math.h"

// row[j] = exp(row[j] - maxv) for j < n; returns the sum
static float softmax_exp_row(float *row, int n, float maxv) {
    int j = 0;
    float sum = 0.0f;
#if FSDP_HAVE_AVX512
    __m512 acc = _mm512_setzero_ps(), mv = _mm512_set1_ps(maxv);
    for (; j + 16 <= n; j += 16) {
        __m512 e = vexp512(_mm512_sub_ps(_mm512_loadu_ps(row + j), mv));
        _mm512_storeu_ps(row + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        __mmask16 m = (__mmask16)((1u << (n - j)) - 1);
        __m512 e = vexp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), mv));
        _mm512_mask_storeu_ps(row + j, m, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
        j = n;
    }
    sum = _mm512_reduce_add_ps(acc);
#endif
    for (; j < n; j++) {
        row[j] = expf(row[j] - maxv);
        sum += row[j];
    }
    return sum;
}

// copies head h of part `which` (0 q, 1 k, 2 v) of batch b out of qkv into dst (T, hd)
static void gather_head(float *dst, const float *qkv, const fsdp_attention_dims *d, int b, int h, int which) {
    int hd = d->C / d->H;
    for (int t = 0; t < d->T; t++) {
        const float *row = qkv + (size_t)(b * d->stride_b + t * d->stride_t) * 3 * d->C;
        memcpy(dst + (size_t)t * hd, row + which * d->C + h * hd, sizeof(float) * (size_t)hd);
    }
}

// src (T, hd) into rows of `rowlen` at column offset `col`
static void scatter_head(float *rows, size_t rowlen, size_t col, const float *src, const fsdp_attention_dims *d, int b) {
    int hd = d->C / d->H;
    for (int t = 0; t < d->T; t++) {
        float *row = rows + (size_t)(b * d->stride_b + t * d->stride_t) * rowlen;
        memcpy(row + col, src + (size_t)t * hd, sizeof(float) * (size_t)hd);
    }
}

static fsdp_rng head_rng(const fsdp_attention_dims *d) { return d->rng; }

// applies dropout in place to the (T, T) probability block of pair bh (mask index = bh*T*T + i)
static void dropout_block(float *p, const fsdp_attention_dims *d, int bh) {
    if (d->dropout_p <= 0.0f) return;
    int T = d->T;
    float scale = 1.0f / (1.0f - d->dropout_p);
    fsdp_rng rng = head_rng(d);
    uint64_t base = (uint64_t)bh * T * T;
    float u[256];
    for (int i0 = 0; i0 < T * T; i0 += 256) {
        int len = T * T - i0 < 256 ? T * T - i0 : 256;
        fsdp_rng_uniform(rng, base + (uint64_t)i0, u, (size_t)len);
        for (int j = 0; j < len; j++) p[i0 + j] = u[j] >= d->dropout_p ? p[i0 + j] * scale : 0.0f;
    }
}

typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

static void attention_forward(gemm_fn gemm, float *out, float *att, const float *qkv, const fsdp_attention_dims *d) {
    int T = d->T, H = d->H, hd = d->C / d->H;
    float scale = 1.0f / sqrtf((float)hd);
    cpu_gemm_init();
#pragma omp parallel
    {
        float *q = malloc(sizeof(float) * ((size_t)3 * T * hd + (size_t)T * T));
        float *k = q + (size_t)T * hd, *v = k + (size_t)T * hd, *pd = v + (size_t)T * hd;
#pragma omp for schedule(static)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            gather_head(q, qkv, d, b, h, 0);
            gather_head(k, qkv, d, b, h, 1);
            gather_head(v, qkv, d, b, h, 2);
            for (int i = 0; i < T * hd; i++) q[i] *= scale;
            float *p = att + (size_t)bh * T * T;  // (T, T)
            gemm(0, 1, T, T, hd, 1.0f, q, hd, k, hd, 0.0f, p, T);
            for (int i = 0; i < T; i++) {
                float *row = p + (size_t)i * T;
                int valid = d->causal ? i + 1 : T;
                float maxv = row[0];
                for (int j = 1; j < valid; j++) maxv = row[j] > maxv ? row[j] : maxv;
                float sum = softmax_exp_row(row, valid, maxv);
                float inv = 1.0f / sum;
                for (int j = 0; j < valid; j++) row[j] *= inv;
                for (int j = valid; j < T; j++) row[j] = 0.0f;
            }
            const float *probs = p;
            if (d->dropout_p > 0.0f) {
                memcpy(pd, p, sizeof(float) * (size_t)T * T);
                dropout_block(pd, d, bh);
                probs = pd;
            }
            gemm(0, 0, T, hd, T, 1.0f, probs, T, v, hd, 0.0f, q, hd);  // q reused as (T, hd) output
            scatter_head(out, (size_t)d->C, (size_t)h * hd, q, d, b);
        }
        free(q);
    }
}

static void attention_backward(gemm_fn gemm, float *dqkv, const float *dout, const float *qkv, const float *att,
                               const fsdp_attention_dims *d) {
    int T = d->T, H = d->H, hd = d->C / d->H, C = d->C;
    float scale = 1.0f / sqrtf((float)hd);
    cpu_gemm_init();
#pragma omp parallel
    {
        // q k v do dq dk dv: (T, hd) each; pd dp: (T, T)
        float *q = malloc(sizeof(float) * ((size_t)7 * T * hd + (size_t)2 * T * T));
        float *k = q + (size_t)T * hd, *v = k + (size_t)T * hd, *dO = v + (size_t)T * hd;
        float *dq = dO + (size_t)T * hd, *dk = dq + (size_t)T * hd, *dv = dk + (size_t)T * hd;
        float *pd = dv + (size_t)T * hd, *dp = pd + (size_t)T * T;
#pragma omp for schedule(static)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            gather_head(q, qkv, d, b, h, 0);
            gather_head(k, qkv, d, b, h, 1);
            gather_head(v, qkv, d, b, h, 2);
            for (int t = 0; t < T; t++) {
                const float *row = dout + (size_t)(b * d->stride_b + t * d->stride_t) * C;
                memcpy(dO + (size_t)t * hd, row + h * hd, sizeof(float) * (size_t)hd);
            }
            const float *p = att + (size_t)bh * T * T;
            const float *probs = p;
            if (d->dropout_p > 0.0f) {
                memcpy(pd, p, sizeof(float) * (size_t)T * T);
                dropout_block(pd, d, bh);
                probs = pd;
            }
            gemm(1, 0, T, hd, T, 1.0f, probs, T, dO, hd, 0.0f, dv, hd);  // dV = P'^T dO
            gemm(0, 1, T, T, hd, 1.0f, dO, hd, v, hd, 0.0f, dp, T);      // dP' = dO V^T
            if (d->dropout_p > 0.0f) dropout_block(dp, d, bh);               // through the dropout
            for (int i = 0; i < T; i++) {                                     // softmax backward
                const float *prow = p + (size_t)i * T;
                float *drow = dp + (size_t)i * T;
                int valid = d->causal ? i + 1 : T;
                float dot = 0.0f;
                for (int j = 0; j < valid; j++) dot += prow[j] * drow[j];
                for (int j = 0; j < valid; j++) drow[j] = prow[j] * (drow[j] - dot);
                for (int j = valid; j < T; j++) drow[j] = 0.0f;
            }
            for (int i = 0; i < T * hd; i++) q[i] *= scale;                    // q' = q * scale
            gemm(0, 0, T, hd, T, scale, dp, T, k, hd, 0.0f, dq, hd);     // dq = scale dS K
            gemm(1, 0, T, hd, T, 1.0f, dp, T, q, hd, 0.0f, dk, hd);      // dk = dS^T q'
            scatter_head(dqkv, (size_t)3 * C, (size_t)h * hd, dq, d, b);
            scatter_head(dqkv, (size_t)3 * C, (size_t)C + h * hd, dk, d, b);
            scatter_head(dqkv, (size_t)3 * C, (size_t)2 * C + h * hd, dv, d, b);
        }
        free(q);
    }
}

void cpu_attention_forward(float *out, float *att, const float *qkv, const fsdp_attention_dims *d) {
    attention_forward(cpu_gemm, out, att, qkv, d);
}

void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            const fsdp_attention_dims *d) {
    attention_backward(cpu_gemm, dqkv, dout, qkv, att, d);
}

// bf16 mixed precision: the four products per head with bf16 operands (softmax stays fp32)
void cpu_attention_forward_bf16(float *out, float *att, const float *qkv, const fsdp_attention_dims *d) {
    attention_forward(cpu_gemm_bf16, out, att, qkv, d);
}

void cpu_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *att,
                                 const fsdp_attention_dims *d) {
    attention_backward(cpu_gemm_bf16, dqkv, dout, qkv, att, d);
}
