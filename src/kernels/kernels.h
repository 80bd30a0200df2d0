// kernels.h: the per-device kernel table. nn/, optim/ and fsdp/ call kernels only through this
// table, so a CUDA table slots in beside the CPU one without a second implementation above it.
//
// Conventions (llm.c's): outputs first, then saved buffers, inputs, parameters, sizes.
// Row-major everywhere. N = number of rows (tokens), C = channels. Parameter gradients are
// ACCUMULATED (+=); activation gradients named `dinp` are OVERWRITTEN (=) unless the name says
// `_acc`. Dropout masks are never stored: element i of a dropout call keeps its value iff
// uniform(rng, i) >= p, so backward recomputes the same mask from the same rng.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "tensor/tensor.h"

typedef struct fsdp_stream fsdp_stream;  // device/device.h

// The feed-forward activations: ReLU, exact GELU, and GELU with PyTorch's approximate='tanh'
typedef enum { FSDP_ACT_RELU, FSDP_ACT_GELU, FSDP_ACT_GELU_TANH } fsdp_activation;

typedef struct {
    int B, T, C, H;        // batch, sequence, channels, heads (C % H == 0)
    int64_t stride_b;      // row of token (b, t) is b*stride_b + t*stride_t
    int64_t stride_t;      // batch_first: (T, 1); seq-first (PyTorch default): (1, B)
    int causal;            // mask future positions
    float dropout_p;       // dropout on attention probabilities
    fsdp_rng rng;          // dropout stream
} fsdp_attention_dims;

// Fixed point for exact sums in any order (the deterministic mode, fsdp/deterministic.c): a value g is
// the integer v = rint(g * 2^frac_bits), stored as `limbs` balanced digits of limb_bits bits each
// (v = sum_k d_k 2^(k limb_bits), |d_k| <= 2^(limb_bits-1)), every digit a float. fp32 sums of up to
// 2^(25 - limb_bits) such digit vectors are exact, hence the same whatever their order.
typedef struct {
    int limbs;      // digits per value
    int limb_bits;  // bits per digit (<= 24)
    int frac_bits;  // fraction bits: the grid is 2^-frac_bits
} fsdp_fixed_format;

// Words of an exact sum of squares (sum_squares_exact): word w holds bits [32 w, 32 w + 32) of the sum
// counted from 2^-298 (the square of the smallest fp32 subnormal), carried; the last word is -1 when a
// square was NaN or Inf.
#define FSDP_XSUM_WORDS 20
#define FSDP_XSUM_LOW (-298)

typedef struct fsdp_kernels {
    const char *name;
    fsdp_device device;

    // Every kernel takes the stream it is enqueued on first (device/device.h): on the CPU device it
    // runs at once, after whatever the stream still has in flight; its pointers are device memory.

    // C[M,N] = alpha * op(A) @ op(B) + beta * C; op(X) = X or X^T; leading dims in elements.
    void (*gemm)(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

    // As gemm, with B stored as bf16 and A rounded to bf16, fp32 accumulation: how a layer multiplies
    // by parameters that mixed precision gathered in bf16. Same in every CPU table.
    void (*gemm_b16)(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc);

    // As gemm with A stored in bf16 (an activation kept in bf16: the values the bf16 products round it
    // to), B fp32 (gemm_a16) or bf16 (gemm_a16_b16); alpha must be 1. bf16 operands, fp32 accumulation
    // in every table.
    void (*gemm_a16)(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc);
    void (*gemm_a16_b16)(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha,
                         const fsdp_bf16 *A, int lda, const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc);

    // A Linear's forward with its bias under bf16 weights: C (M, N) = op(A) @ op(B) + bias, every row of C
    // starting as bias (N,), B bf16 ((K, N), or (N, K) with trans_b, leading dimension ldb), A fp32
    // (gemm_b16_bias: rounded to bf16 as gemm_b16 rounds it) or bf16 (gemm_a16_b16_bias), (M, K) with
    // leading dimension lda. The bits of fill_rows(C, bias) followed by gemm_b16 / gemm_a16_b16 with beta
    // 1 (the CPU adds the bias where the product's rows are stored: no pass over C before it).
    void (*gemm_b16_bias)(fsdp_stream *st, int trans_b, int M, int N, int K, const float *A, int lda,
                          const fsdp_bf16 *B, int ldb, const float *bias, float *C, int ldc);
    void (*gemm_a16_b16_bias)(fsdp_stream *st, int trans_b, int M, int N, int K, const fsdp_bf16 *A, int lda,
                              const fsdp_bf16 *B, int ldb, const float *bias, float *C, int ldc);

    // A weight gradient and its bias's gradient in one call, from an input kept in bf16 and the output's
    // gradient dout in fp32 (dense: K rows, one per token). gemm_b16_dbias (Linear's layout):
    // C (M, N) = dout^T @ B + beta * C with dout (K, M), B (K, N) bf16 with leading dimension ldb, and
    // dbias (M,) += the column sums of dout. gemm_a16_dbias (Conv1D's layout): C (M, N) = A^T @ dout +
    // beta * C with A (K, M) bf16 with leading dimension lda, dout (K, N), and dbias (N,) += the column
    // sums of dout. The products are gemm_b16's and gemm_a16's; the sums are bias_backward's, bit for bit
    // (the CPU sums while it packs dout).
    void (*gemm_b16_dbias)(fsdp_stream *st, int M, int N, int K, const float *dout, const fsdp_bf16 *B, int ldb,
                           float beta, float *C, int ldc, float *dbias);
    void (*gemm_a16_dbias)(fsdp_stream *st, int M, int N, int K, const fsdp_bf16 *A, int lda, const float *dout,
                           float beta, float *C, int ldc, float *dbias);

    // out, inp: (N, C); mean, rstd: (N,); weight, bias: (C,). out_b16 (N, C): when not NULL the output
    // goes there in bf16 (rounded to nearest even) and out is not written.
    void (*layernorm_forward)(fsdp_stream *st, float *out, fsdp_bf16 *out_b16, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N, int C, float eps);
    // Fused with the residual add before it: res = a + dropout(b), out = LayerNorm(res), one pass per row.
    // res, out, a, b: (N, C) (res may be a or b); p, rng: the dropout on b (one call over N*C values)
    // out_b16: as layernorm_forward's
    void (*residual_layernorm_forward)(fsdp_stream *st, float *res, float *out, fsdp_bf16 *out_b16, float *mean,
                                       float *rstd, const float *a, const float *b, float p, fsdp_rng rng,
                                       const float *weight, const float *bias, int N, int C, float eps);
    // dinp: (N, C) overwritten with LayerNorm's input gradient plus dres (N, C), the gradient a residual
    // branch adds (NULL: none); dweight, dbias: (C,) accumulated, each may be NULL (a frozen parameter)
    void (*layernorm_backward)(fsdp_stream *st, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *dres, const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

    // Fused (FlashAttention-2 style: no T x T matrix is stored). qkv: rows of 3C (q | k | v); out: rows
    // of C; stats: (B, H, T) saved for backward, each query row's log-sum-exp of its scaled scores.
    void (*attention_forward)(fsdp_stream *st, float *out, float *stats, const float *qkv, const fsdp_attention_dims *d);
    // dqkv: rows of 3C, overwritten; dout, out (forward's output): rows of C; stats: as forward wrote it
    void (*attention_backward)(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *stats, const fsdp_attention_dims *d);

    // elementwise over n values; gelu: tanh_approx selects PyTorch's approximate='tanh'
    void (*relu_forward)(fsdp_stream *st, float *out, const float *inp, size_t n);
    void (*relu_backward)(fsdp_stream *st, float *dinp, const float *dout, const float *out, size_t n);
    void (*gelu_forward)(fsdp_stream *st, float *out, const float *inp, size_t n, int tanh_approx);
    void (*gelu_backward)(fsdp_stream *st, float *dinp, const float *dout, const float *inp, size_t n, int tanh_approx);
    void (*dropout_forward)(fsdp_stream *st, float *out, const float *inp, size_t n, float p, fsdp_rng rng);
    void (*dropout_backward)(fsdp_stream *st, float *dinp, const float *dout, size_t n, float p, fsdp_rng rng);
    // Fused: pre (N, F) += bias (F,) (a GEMM's product becomes the layer's output), then act (N, F) =
    // dropout(activation(pre)) (the dropout of one call over N*F values; p = 0: none); act_b16 (N, F):
    // when not NULL, act goes there in bf16 instead. bias NULL: pre already holds the layer's output (its
    // product added the bias) and is only read.
    void (*bias_act_dropout_forward)(fsdp_stream *st, float *pre, float *act, fsdp_bf16 *act_b16, const float *bias,
                                     int N, int F, fsdp_activation a, float p, fsdp_rng rng);
    // dpre (n,) = activation'(pre) * the dropout's backward of dact (n,); dpre may be dact
    void (*act_dropout_backward)(fsdp_stream *st, float *dpre, const float *dact, const float *pre, size_t n,
                                 fsdp_activation a, float p, fsdp_rng rng);
    // The same for ReLU, read from that forward's fp32 output act (n,) instead of pre: act is nonzero
    // exactly where the element was kept and pre > 0, so the mask is not drawn again (bit-identical to
    // act_dropout_backward with FSDP_ACT_RELU); dpre may be dact
    void (*relu_dropout_backward)(fsdp_stream *st, float *dpre, const float *dact, const float *act, size_t n, float p);

    void (*add)(fsdp_stream *st, float *out, const float *a, const float *b, size_t n);  // out = a + b
    void (*add_inplace)(fsdp_stream *st, float *acc, const float *b, size_t n);         // acc += b
    void (*add_inplace_b16)(fsdp_stream *st, float *acc, const fsdp_bf16 *b, size_t n); // acc += widen(b)
    void (*scale)(fsdp_stream *st, float *x, float s, size_t n);                        // x *= s
    // out: (N, C) += bias (C,) broadcast over rows
    void (*bias_add)(fsdp_stream *st, float *out, const float *bias, int N, int C);
    // out: (N, C) = row (C,) in every row (torch.addmm's starting value)
    void (*fill_rows)(fsdp_stream *st, float *out, const float *row, int N, int C);
    // dbias: (C,) += column sums of dout (N, C)
    void (*bias_backward)(fsdp_stream *st, float *dbias, const float *dout, int N, int C);

    // Conversions. dst, src: (n,). f32_to_bf16 rounds to nearest even (NaN stays NaN).
    void (*f32_to_bf16)(fsdp_stream *st, fsdp_bf16 *dst, const float *src, size_t n);
    void (*bf16_to_f32)(fsdp_stream *st, float *dst, const fsdp_bf16 *src, size_t n);
    // In place, in a buffer of 4n bytes: n fp32 values become n bf16 values in its first 2n bytes.
    void (*f32_to_bf16_in_place)(fsdp_stream *st, void *buf, size_t n);

    // out: (N, C) = table[idx[n]] (+= if accumulate); table: (V, C); idx: (N,) device memory
    void (*embedding_forward)(fsdp_stream *st, float *out, const int32_t *idx, const float *table, int N, int C,
                              int accumulate);
    // the same lookup from a bf16 table (V, C)
    void (*embedding_forward_b16)(fsdp_stream *st, float *out, const int32_t *idx, const fsdp_bf16 *table, int N,
                                  int C, int accumulate);
    // dtable: (V, C) += scattered dout (N, C)
    void (*embedding_backward)(fsdp_stream *st, float *dtable, const float *dout, const int32_t *idx, int N, int C);

    // Fused with the softmax: the probabilities are never stored. logits: (N, V); losses: (N,); loss: (1,)
    // device, the mean loss over N rows; stats: (N, 2) saved for backward, each row's maximum logit and
    // the reciprocal of its sum of exp(logit - maximum)
    void (*cross_entropy_forward)(fsdp_stream *st, double *loss, float *losses, float *stats, const float *logits,
                                  const int32_t *targets, int N, int V);
    // dlogits: (N, V) overwritten with (softmax(logits) - onehot) * dloss, the softmax recomputed from
    // stats; dlogits may be logits (in place)
    void (*cross_entropy_backward)(fsdp_stream *st, float *dlogits, const float *logits, const float *stats,
                                   const int32_t *targets, float dloss, int N, int V);
    // The seed's model(x).abs().mean(): loss (1,) device = mean |y| over y (n,), accumulated in double;
    // dy (n,) overwritten with sign(y) * dloss / n.
    void (*abs_mean_forward)(fsdp_stream *st, double *loss, const float *y, size_t n);
    void (*abs_mean_backward)(fsdp_stream *st, float *dy, const float *y, size_t n, float dloss);

    // One torch.optim.AdamW step on n contiguous values. param, grad, m, v: (n,).
    // step_size = lr / (1 - beta1^t), bias2_sqrt = sqrt(1 - beta2^t) (computed by the caller in double).
    void (*adamw_update)(fsdp_stream *st, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float step_size,
                         float bias2_sqrt);
    // One torch.optim.SGD step on n contiguous values. param, grad: (n,); momentum_buf: (n,) or NULL
    // (momentum 0); first: the buffer starts as the gradient (step 1).
    void (*sgd_update)(fsdp_stream *st, float *param, const float *grad, float *momentum_buf, size_t n, float lr,
                       float momentum, float dampening, float weight_decay, int nesterov, int first);
    // acc (1,) device += sum of squares of x (n,), accumulated in double (the partial sums in the
    // order the host-returning form used, so norms stay bit-identical)
    void (*sum_squares)(fsdp_stream *st, double *acc, const float *x, size_t n);

    // Fixed point (fsdp_fixed_format above). fixed_quantize: limbs gets the digits of g (n,), laid out
    // in blocks of `block` elements: digit k of element i at limbs[((i / block) * limbs + k) * block +
    // i % block] (so a reduce-scatter of block*limbs per rank hands each rank its elements' digits);
    // NaN, Inf or |g| >= 2^(limbs*limb_bits - 1 - frac_bits) makes digit 0 NaN. limbs: (limbs * n,)
    void (*fixed_quantize)(fsdp_stream *st, float *limbs, const float *g, size_t n, size_t block,
                           const fsdp_fixed_format *f);
    // out (n,) = scale * the value of the digit sums acc (limbs, n) (digit k of element i at acc[k*n+i]),
    // each element computed in double from the top digit down, rounded once to fp32. Overwrites out.
    void (*fixed_finalize)(fsdp_stream *st, float *out, const float *acc, size_t n, const fsdp_fixed_format *f,
                           double scale);
    // words (FSDP_XSUM_WORDS,) device += the exact sum of squares of x (n,), carried.
    void (*sum_squares_exact)(fsdp_stream *st, int64_t *words, const float *x, size_t n);
} fsdp_kernels;

// The CPU tables the host-memory devices (device/) bind to their streams. Code above the device
// layer takes its table from fsdp_dev_kernels(), never from these.
const fsdp_kernels *fsdp_kernels_cpu(void);
// The CPU table for bf16 mixed precision: gemm and attention's products with bf16 operands and fp32
// accumulation (cpu_gemm_bf16); everything else as fsdp_kernels_cpu().
const fsdp_kernels *fsdp_kernels_cpu_bf16(void);

// The CPU kernels, also callable directly (tests, the table).
void cpu_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
void cpu_gemm_init(void);  // pins OpenBLAS to one thread: the wrapper splits work over OpenMP itself
// Chooses the serial GEMM: "openblas", "avx512" (falls back to OpenBLAS without AVX-512), or NULL for
// the default (avx512 where available). The environment variable FSDP_GEMM sets it at first use.
void cpu_gemm_select(const char *name);
const char *cpu_gemm_name(void);
int cpu_sgemm_avx512_available(void);
// C = op(alpha * A) @ op(B) + beta * C with alpha * A and B rounded to bf16 (nearest even) and fp32
// accumulation: Intel AMX tiles where the CPU and kernel allow them, else the AVX-512 VDPBF16PS
// instruction, else bf16-rounded copies through the fp32 GEMM (same products, other summation
// order). FSDP_GEMM_BF16=amx|avx512bf16|emulate sets the path at first use; cpu_gemm_bf16_select does
// so explicitly (a path the CPU lacks falls back to the best below it; NULL: the best available).
void cpu_gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc);
// The same with B already in bf16 (parameters gathered in bf16 under mixed precision). B: (K, N) or,
// with trans_b, (N, K), leading dimension ldb.
void cpu_gemm_bf16_b16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                       const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc);
// The same with A already in bf16 (activations stored in bf16 under mixed precision; alpha must be 1),
// B fp32 or bf16.
void cpu_gemm_bf16_a16(int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc);
void cpu_gemm_bf16_a16_b16(int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
                           const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc);
// Weight and bias gradients in one call (the table's gemm_b16_dbias, gemm_a16_dbias): C = A^T @ B +
// beta * C with A (K, M) and B (K, N), one of them dout in fp32 (dense), the other bf16; dbias += the
// column sums of dout, summed as cpu_bias_backward sums (the same bits), while dout is packed.
void cpu_gemm_bf16_b16_dbias(int M, int N, int K, const float *A, const fsdp_bf16 *B, int ldb, float beta, float *C,
                             int ldc, float *dbias);
void cpu_gemm_bf16_a16_dbias(int M, int N, int K, const fsdp_bf16 *A, int lda, const float *B, float beta, float *C,
                             int ldc, float *dbias);
// A Linear's forward with its bias (the table's gemm_b16_bias, gemm_a16_b16_bias): C = A @ op(B) + bias
void cpu_gemm_bf16_b16_bias(int trans_b, int M, int N, int K, const float *A, int lda, const fsdp_bf16 *B, int ldb,
                            const float *bias, float *C, int ldc);
void cpu_gemm_bf16_a16_b16_bias(int trans_b, int M, int N, int K, const fsdp_bf16 *A, int lda, const fsdp_bf16 *B,
                                int ldb, const float *bias, float *C, int ldc);
void cpu_gemm_bf16_select(const char *name);
const char *cpu_gemm_bf16_name(void);  // "amx", "avx512bf16" or "emulate"
// Our AVX-512 SGEMM on `nthreads` OpenMP threads (1 inside a parallel region). Its blocking: register
// tiles of MR x NR, and fixed scratch per thread of an A block (MC x KC floats) and a B block (KC x NC),
// plus one shared B block for team calls (fsdp/plan.c predicts the scratch from these).
#define CPU_SGEMM_MR 14
#define CPU_SGEMM_NR 32
#define CPU_SGEMM_KC 1024
#define CPU_SGEMM_MC (CPU_SGEMM_MR * 24)
#define CPU_SGEMM_NC 1536
void cpu_sgemm_avx512(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc, int nthreads);
