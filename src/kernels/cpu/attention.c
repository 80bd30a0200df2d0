// attention.c: scaled dot-product multi-head attention with optional causal mask and dropout on the
// probabilities, as torch.nn.MultiheadAttention computes it (q scaled by 1/sqrt(head_dim)), fused in
// the manner of FlashAttention-2: per (batch, head) pair, blocks of ATT_BR query rows sweep blocks of
// ATT_BC key columns with an online softmax (running row maximum m and sum l, the output rescaled as m
// grows). No T x T matrix is stored: forward keeps each row's log-sum-exp m + log(l), and backward
// recomputes each block's probabilities from it. Memory is linear in T.
//
// Dropout: probability (i, j) of pair bh is kept iff uniform(rng, bh*T*T + i*T + j) >= p, the mask the
// unfused kernel used; backward regenerates it. The softmax sum l is over the undropped probabilities.
// Backward's row term D_i = sum_j P_ij dP_ij equals dO_i . O_i with or without dropout (O = (P o Z) V),
// so it reads the forward output O.
//
// Each (b, h) pair is independent; threads take pairs and run small single-threaded GEMMs on the head's
// rows in place (qkv, out, dout, dqkv with the row stride of the layout), the same bits on any thread
// count.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vec_math.h"

#define ATT_BR 64   // query rows per block
#define ATT_BC 256  // key columns per block (T <= 256: one block, no rescaling)

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

// Offset of head column `col` of batch b's first token in a buffer of `rowlen` floats per token; row t of
// that head is t * (stride_t * rowlen) further, so the products read and write the heads in place.
static size_t head_offset(const fsdp_attention_dims *d, int b, size_t rowlen, size_t col) {
    return (size_t)b * (size_t)d->stride_b * rowlen + col;
}

// zeroes hd floats of each of the T rows at p (leading dimension ld)
static void zero_rows(float *p, long ld, int T, int hd) {
    for (int t = 0; t < T; t++) memset(p + (long)t * ld, 0, sizeof(float) * (size_t)hd);
}

// keys of block [j0, j0 + bc) that query row i sees
static int visible(const fsdp_attention_dims *d, int i, int j0, int bc) {
    if (!d->causal) return bc;
    int n = i + 1 - j0;
    return n < 0 ? 0 : n < bc ? n : bc;
}

// p (br, bc, leading dimension bc) *= dropout mask / (1 - p) for rows i0.. and columns j0.. of pair bh
static void dropout_tile(float *p, const fsdp_attention_dims *d, int bh, int i0, int br, int j0, int bc) {
    uint64_t T = (uint64_t)d->T;
    for (int r = 0; r < br; r++)
        cpu_dropout_range(p + (size_t)r * bc, p + (size_t)r * bc, (size_t)bc, d->dropout_p, d->rng,
                          ((uint64_t)bh * T + (uint64_t)(i0 + r)) * T + (uint64_t)j0);
}

// row[c] = exp(row[c] - shift) for the n visible keys, 0 for the rest of the bc; returns the sum
static float exp_visible(float *row, int n, int bc, float shift) {
    float sum = n > 0 ? softmax_exp_row(row, n, shift) : 0.0f;
    memset(row + n, 0, sizeof(float) * (size_t)(bc - n));
    return sum;
}

// floats of one (query block, key block) tile for sequences of T: small sequences get small scratch
static size_t tile_floats(int T) {
    return (size_t)(T < ATT_BR ? T : ATT_BR) * (size_t)(T < ATT_BC ? T : ATT_BC);
}

typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

// stats: (B, H, T) log-sum-exp of each row's scaled scores. q is scaled by the products' alpha (our fp32
// and bf16 kernels apply alpha to A elementwise before multiplying, as a scaled copy of q would; the
// OpenBLAS path scales the product instead).
static void attention_forward(gemm_fn gemm, float *out, float *stats, const float *qkv, const fsdp_attention_dims *d) {
    int T = d->T, H = d->H, C = d->C, hd = C / H;
    float scale = 1.0f / sqrtf((float)hd);
    long ldq = (long)d->stride_t * 3 * C, ldo = (long)d->stride_t * C;  // row strides of a head in qkv, out
    cpu_gemm_init();
#pragma omp parallel
    {
        // s: (br, bc) scores, then probabilities; m, l: (br,) running maximum and sum
        size_t tile = tile_floats(T);
        float *s = malloc(sizeof(float) * (tile + 2 * ATT_BR));
        FSDP_ASSERT(s != NULL);
        float *m = s + tile, *l = m + ATT_BR;
#pragma omp for schedule(static)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            const float *q = qkv + head_offset(d, b, (size_t)3 * C, (size_t)h * hd);  // (T, hd), ld ldq
            const float *k = q + C, *v = q + 2 * C;
            float *o = out + head_offset(d, b, (size_t)C, (size_t)h * hd);             // (T, hd), ld ldo
            float *lse = stats + (size_t)bh * T;
            for (int i0 = 0; i0 < T; i0 += ATT_BR) {
                int br = T - i0 < ATT_BR ? T - i0 : ATT_BR;
                int kv_end = d->causal ? i0 + br : T;
                float *ob = o + i0 * ldo;  // (br, hd) running output
                zero_rows(ob, ldo, br, hd);
                for (int r = 0; r < br; r++) m[r] = -INFINITY, l[r] = 0.0f;
                for (int j0 = 0; j0 < kv_end; j0 += ATT_BC) {
                    int bc = kv_end - j0 < ATT_BC ? kv_end - j0 : ATT_BC;
                    gemm(0, 1, br, bc, hd, scale, q + i0 * ldq, (int)ldq, k + j0 * ldq, (int)ldq, 0.0f, s, bc);
                    for (int r = 0; r < br; r++) {
                        float *row = s + (size_t)r * bc, *orow = ob + r * ldo;
                        int n = visible(d, i0 + r, j0, bc);
                        if (n == 0) {  // a causal row that sees none of these keys
                            exp_visible(row, 0, bc, 0.0f);
                            continue;
                        }
                        float mx = m[r];
                        for (int c = 0; c < n; c++) mx = row[c] > mx ? row[c] : mx;
                        float sum = exp_visible(row, n, bc, mx);
                        if (m[r] != -INFINITY && mx != m[r]) {  // rescale what earlier blocks summed
                            float corr = expf(m[r] - mx);
                            l[r] *= corr;
                            for (int c = 0; c < hd; c++) orow[c] *= corr;
                        }
                        l[r] += sum;
                        m[r] = mx;
                    }
                    if (d->dropout_p > 0.0f) dropout_tile(s, d, bh, i0, br, j0, bc);
                    gemm(0, 0, br, hd, bc, 1.0f, s, bc, v + j0 * ldq, (int)ldq, 1.0f, ob, (int)ldo);
                }
                for (int r = 0; r < br; r++) {
                    float inv = 1.0f / l[r], *orow = ob + r * ldo;
                    for (int c = 0; c < hd; c++) orow[c] *= inv;
                    lse[i0 + r] = m[r] + logf(l[r]);
                }
            }
        }
        free(s);
    }
}

static void attention_backward(gemm_fn gemm, float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *stats, const fsdp_attention_dims *d) {
    int T = d->T, H = d->H, hd = d->C / d->H, C = d->C;
    float scale = 1.0f / sqrtf((float)hd);
    long ldq = (long)d->stride_t * 3 * C, ldo = (long)d->stride_t * C;
    cpu_gemm_init();
#pragma omp parallel
    {
        // p pd ds: (br, bc) tiles; dd: (T,) row terms dO . O
        size_t tile = tile_floats(T);
        float *p = malloc(sizeof(float) * (3 * tile + (size_t)T));
        FSDP_ASSERT(p != NULL);
        float *pd = p + tile, *ds = pd + tile, *dd = ds + tile;
#pragma omp for schedule(static)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            size_t at3 = head_offset(d, b, (size_t)3 * C, (size_t)h * hd), at1 = head_offset(d, b, (size_t)C, (size_t)h * hd);
            const float *q = qkv + at3, *k = q + C, *v = q + 2 * C;  // (T, hd) each, ld ldq
            float *dq = dqkv + at3, *dk = dq + C, *dv = dq + 2 * C;   // (T, hd) each, ld ldq
            const float *dO = dout + at1, *o = out + at1;             // (T, hd), ld ldo
            for (int t = 0; t < T; t++) {
                float acc = 0.0f;
                for (int c = 0; c < hd; c++) acc += dO[t * ldo + c] * o[t * ldo + c];
                dd[t] = acc;
            }
            zero_rows(dq, ldq, T, hd), zero_rows(dk, ldq, T, hd), zero_rows(dv, ldq, T, hd);
            const float *lse = stats + (size_t)bh * T;
            for (int i0 = 0; i0 < T; i0 += ATT_BR) {
                int br = T - i0 < ATT_BR ? T - i0 : ATT_BR;
                int kv_end = d->causal ? i0 + br : T;
                for (int j0 = 0; j0 < kv_end; j0 += ATT_BC) {
                    int bc = kv_end - j0 < ATT_BC ? kv_end - j0 : ATT_BC;
                    gemm(0, 1, br, bc, hd, scale, q + i0 * ldq, (int)ldq, k + j0 * ldq, (int)ldq, 0.0f, p, bc);
                    for (int r = 0; r < br; r++)  // P = exp(S - lse), zero where masked
                        exp_visible(p + (size_t)r * bc, visible(d, i0 + r, j0, bc), bc, lse[i0 + r]);
                    const float *pv = p;  // the probabilities that multiplied V
                    if (d->dropout_p > 0.0f) {
                        memcpy(pd, p, sizeof(float) * (size_t)br * bc);
                        dropout_tile(pd, d, bh, i0, br, j0, bc);
                        pv = pd;
                    }
                    // dV += P'^T dO;  dP' = dO V^T (through the dropout: dP = dP' o Z)
                    gemm(1, 0, bc, hd, br, 1.0f, pv, bc, dO + i0 * ldo, (int)ldo, 1.0f, dv + j0 * ldq, (int)ldq);
                    gemm(0, 1, br, bc, hd, 1.0f, dO + i0 * ldo, (int)ldo, v + j0 * ldq, (int)ldq, 0.0f, ds, bc);
                    if (d->dropout_p > 0.0f) dropout_tile(ds, d, bh, i0, br, j0, bc);
                    for (int r = 0; r < br; r++) {  // dS = P o (dP - D)
                        const float *prow = p + (size_t)r * bc;
                        float *drow = ds + (size_t)r * bc, di = dd[i0 + r];
                        for (int c = 0; c < bc; c++) drow[c] = prow[c] * (drow[c] - di);
                    }
                    // dq += scale dS K;  dk += scale dS^T q (= dS^T q' with q' = scale q)
                    gemm(0, 0, br, hd, bc, scale, ds, bc, k + j0 * ldq, (int)ldq, 1.0f, dq + i0 * ldq, (int)ldq);
                    gemm(1, 0, bc, hd, br, scale, ds, bc, q + i0 * ldq, (int)ldq, 1.0f, dk + j0 * ldq, (int)ldq);
                }
            }
        }
        free(p);
    }
}

void cpu_attention_forward(float *out, float *stats, const float *qkv, const fsdp_attention_dims *d) {
    attention_forward(cpu_gemm, out, stats, qkv, d);
}

void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *stats,
                            const fsdp_attention_dims *d) {
    attention_backward(cpu_gemm, dqkv, dout, qkv, out, stats, d);
}

// bf16 mixed precision: the products per block with bf16 operands (softmax stays fp32)
void cpu_attention_forward_bf16(float *out, float *stats, const float *qkv, const fsdp_attention_dims *d) {
    attention_forward(cpu_gemm_bf16, out, stats, qkv, d);
}

void cpu_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *stats, const fsdp_attention_dims *d) {
    attention_backward(cpu_gemm_bf16, dqkv, dout, qkv, out, stats, d);
}
