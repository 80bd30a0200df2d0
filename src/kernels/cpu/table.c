// table.c: the CPU kernel tables. Each entry is a thin wrapper that drops the stream (on a host-memory
// device a kernel runs when it is called) and calls the plain cpu_* kernel; the kernels that produce a
// scalar write it into the caller's (device) double instead of returning it.
#include "kernels/cpu/cpu_fixed.h"
#include "kernels/cpu/cpu_kernels.h"

// WRAP(entry, kernel, (fsdp_stream *st, parameters...), (arguments...)): static void entry(...) that
// calls kernel(arguments...) and ignores st.
#define WRAP(entry, kernel, params, args) \
    static void entry params {            \
        (void)st;                         \
        kernel args;                      \
    }

WRAP(t_gemm, cpu_gemm,
     (fsdp_stream *st, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
      int ldb, float beta, float *C, int ldc),
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
WRAP(t_gemm_bf16, cpu_gemm_bf16,
     (fsdp_stream *st, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
      int ldb, float beta, float *C, int ldc),
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
WRAP(t_gemm_b16, cpu_gemm_bf16_b16,
     (fsdp_stream *st, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
      const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc),
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
WRAP(t_gemm_a16, cpu_gemm_bf16_a16,
     (fsdp_stream *st, int ta, int tb, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
      const float *B, int ldb, float beta, float *C, int ldc),
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
WRAP(t_gemm_a16_b16, cpu_gemm_bf16_a16_b16,
     (fsdp_stream *st, int ta, int tb, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
      const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc),
     (ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
WRAP(t_gemm_b16_bias, cpu_gemm_bf16_b16_bias,
     (fsdp_stream *st, int tb, int M, int N, int K, const float *A, int lda, const fsdp_bf16 *B, int ldb,
      const float *bias, float *C, int ldc),
     (tb, M, N, K, A, lda, B, ldb, bias, C, ldc))
WRAP(t_gemm_a16_b16_bias, cpu_gemm_bf16_a16_b16_bias,
     (fsdp_stream *st, int tb, int M, int N, int K, const fsdp_bf16 *A, int lda, const fsdp_bf16 *B, int ldb,
      const float *bias, float *C, int ldc),
     (tb, M, N, K, A, lda, B, ldb, bias, C, ldc))
WRAP(t_gemm_b16_dbias, cpu_gemm_bf16_b16_dbias,
     (fsdp_stream *st, int M, int N, int K, const float *dout, const fsdp_bf16 *B, int ldb, float beta, float *C,
      int ldc, float *dbias),
     (M, N, K, dout, B, ldb, beta, C, ldc, dbias))
WRAP(t_gemm_a16_dbias, cpu_gemm_bf16_a16_dbias,
     (fsdp_stream *st, int M, int N, int K, const fsdp_bf16 *A, int lda, const float *dout, float beta, float *C,
      int ldc, float *dbias),
     (M, N, K, A, lda, dout, beta, C, ldc, dbias))
WRAP(t_layernorm_forward, cpu_layernorm_forward,
     (fsdp_stream *st, float *out, fsdp_bf16 *out_b16, float *mean, float *rstd, const float *inp,
      const float *weight, const float *bias, int N, int C, float eps),
     (out, out_b16, mean, rstd, inp, weight, bias, N, C, eps))
WRAP(t_residual_layernorm_forward, cpu_residual_layernorm_forward,
     (fsdp_stream *st, float *res, float *out, fsdp_bf16 *out_b16, float *mean, float *rstd, const float *a,
      const float *b, float p, fsdp_rng rng, const float *weight, const float *bias, int N, int C, float eps),
     (res, out, out_b16, mean, rstd, a, b, p, rng, weight, bias, N, C, eps))
WRAP(t_layernorm_backward, cpu_layernorm_backward,
     (fsdp_stream *st, float *dinp, float *dweight, float *dbias, const float *dout, const float *dres,
      const float *inp, const float *weight, const float *mean, const float *rstd, int N, int C),
     (dinp, dweight, dbias, dout, dres, inp, weight, mean, rstd, N, C))
WRAP(t_attention_forward, cpu_attention_forward,
     (fsdp_stream *st, float *out, float *stats, const float *qkv, const fsdp_attention_dims *d), (out, stats, qkv, d))
WRAP(t_attention_backward, cpu_attention_backward,
     (fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *out, const float *stats,
      const fsdp_attention_dims *d),
     (dqkv, dout, qkv, out, stats, d))
WRAP(t_attention_forward_bf16, cpu_attention_forward_bf16,
     (fsdp_stream *st, float *out, float *stats, const float *qkv, const fsdp_attention_dims *d), (out, stats, qkv, d))
WRAP(t_attention_backward_bf16, cpu_attention_backward_bf16,
     (fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *out, const float *stats,
      const fsdp_attention_dims *d),
     (dqkv, dout, qkv, out, stats, d))
WRAP(t_relu_forward, cpu_relu_forward, (fsdp_stream *st, float *out, const float *inp, size_t n), (out, inp, n))
WRAP(t_relu_backward, cpu_relu_backward, (fsdp_stream *st, float *dinp, const float *dout, const float *out, size_t n),
     (dinp, dout, out, n))
WRAP(t_gelu_forward, cpu_gelu_forward, (fsdp_stream *st, float *out, const float *inp, size_t n, int tanh_approx),
     (out, inp, n, tanh_approx))
WRAP(t_gelu_backward, cpu_gelu_backward,
     (fsdp_stream *st, float *dinp, const float *dout, const float *inp, size_t n, int tanh_approx),
     (dinp, dout, inp, n, tanh_approx))
WRAP(t_dropout_forward, cpu_dropout_forward,
     (fsdp_stream *st, float *out, const float *inp, size_t n, float p, fsdp_rng rng), (out, inp, n, p, rng))
WRAP(t_dropout_backward, cpu_dropout_backward,
     (fsdp_stream *st, float *dinp, const float *dout, size_t n, float p, fsdp_rng rng), (dinp, dout, n, p, rng))
WRAP(t_bias_act_dropout_forward, cpu_bias_act_dropout_forward,
     (fsdp_stream *st, float *pre, float *act, fsdp_bf16 *act_b16, const float *bias, int N, int F, fsdp_activation a,
      float p, fsdp_rng rng),
     (pre, act, act_b16, bias, N, F, a, p, rng))
WRAP(t_act_dropout_backward, cpu_act_dropout_backward,
     (fsdp_stream *st, float *dpre, const float *dact, const float *pre, size_t n, fsdp_activation a, float p,
      fsdp_rng rng),
     (dpre, dact, pre, n, a, p, rng))
WRAP(t_relu_dropout_backward, cpu_relu_dropout_backward,
     (fsdp_stream *st, float *dpre, const float *dact, const float *act, size_t n, float p), (dpre, dact, act, n, p))
WRAP(t_add, cpu_add, (fsdp_stream *st, float *out, const float *a, const float *b, size_t n), (out, a, b, n))
WRAP(t_add_inplace, cpu_add_inplace, (fsdp_stream *st, float *acc, const float *b, size_t n), (acc, b, n))
WRAP(t_add_inplace_b16, cpu_add_inplace_b16, (fsdp_stream *st, float *acc, const fsdp_bf16 *b, size_t n),
     (acc, b, n))
WRAP(t_scale, cpu_scale, (fsdp_stream *st, float *x, float s, size_t n), (x, s, n))
WRAP(t_bias_add, cpu_bias_add, (fsdp_stream *st, float *out, const float *bias, int N, int C), (out, bias, N, C))
WRAP(t_fill_rows, cpu_fill_rows, (fsdp_stream *st, float *out, const float *row, int N, int C), (out, row, N, C))
WRAP(t_bias_backward, cpu_bias_backward, (fsdp_stream *st, float *dbias, const float *dout, int N, int C),
     (dbias, dout, N, C))
WRAP(t_f32_to_bf16, cpu_f32_to_bf16, (fsdp_stream *st, fsdp_bf16 *dst, const float *src, size_t n), (dst, src, n))
WRAP(t_bf16_to_f32, cpu_bf16_to_f32, (fsdp_stream *st, float *dst, const fsdp_bf16 *src, size_t n), (dst, src, n))
WRAP(t_f32_to_bf16_in_place, fsdp_f32_to_bf16_in_place, (fsdp_stream *st, void *buf, size_t n), (buf, n))
WRAP(t_embedding_forward, cpu_embedding_forward,
     (fsdp_stream *st, float *out, const int32_t *idx, const float *table, int N, int C, int accumulate),
     (out, idx, table, N, C, accumulate))
WRAP(t_embedding_forward_b16, cpu_embedding_forward_b16,
     (fsdp_stream *st, float *out, const int32_t *idx, const fsdp_bf16 *table, int N, int C, int accumulate),
     (out, idx, table, N, C, accumulate))
WRAP(t_embedding_backward, cpu_embedding_backward,
     (fsdp_stream *st, float *dtable, const float *dout, const int32_t *idx, int N, int C),
     (dtable, dout, idx, N, C))
WRAP(t_cross_entropy_backward, cpu_cross_entropy_backward,
     (fsdp_stream *st, float *dlogits, const float *logits, const float *stats, const int32_t *targets, float dloss,
      int N, int V),
     (dlogits, logits, stats, targets, dloss, N, V))
WRAP(t_abs_mean_backward, cpu_abs_mean_backward, (fsdp_stream *st, float *dy, const float *y, size_t n, float dloss),
     (dy, y, n, dloss))
WRAP(t_adamw_update, cpu_adamw_update,
     (fsdp_stream *st, float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
      float beta2, float eps, float weight_decay, float step_size, float bias2_sqrt),
     (param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step_size, bias2_sqrt))
WRAP(t_sgd_update, cpu_sgd_update,
     (fsdp_stream *st, float *param, const float *grad, float *momentum_buf, size_t n, float lr, float momentum,
      float dampening, float weight_decay, int nesterov, int first),
     (param, grad, momentum_buf, n, lr, momentum, dampening, weight_decay, nesterov, first))

// the scalar kernels: the value the host-returning kernel computes, stored (or added) on the device
static void t_cross_entropy_forward(fsdp_stream *st, double *loss, float *losses, float *stats, const float *logits,
                                    const int32_t *targets, int N, int V) {
    (void)st;
    *loss = cpu_cross_entropy_forward(losses, stats, logits, targets, N, V);
}

static void t_abs_mean_forward(fsdp_stream *st, double *loss, const float *y, size_t n) {
    (void)st;
    *loss = cpu_abs_mean_forward(y, n);
}

// *acc += the buffer's sum: a caller that sums several buffers into one double adds the same partial
// sums in the same order as `total += cpu_sum_squares(...)` did
static void t_sum_squares(fsdp_stream *st, double *acc, const float *x, size_t n) {
    (void)st;
    *acc += cpu_sum_squares(x, n);
}

WRAP(t_fixed_quantize, cpu_fixed_quantize,
     (fsdp_stream *st, float *limbs, const float *g, size_t n, size_t block, const fsdp_fixed_format *f),
     (limbs, g, n, block, f))
WRAP(t_fixed_finalize, cpu_fixed_finalize,
     (fsdp_stream *st, float *out, const float *acc, size_t n, const fsdp_fixed_format *f, double scale),
     (out, acc, n, f, scale))
WRAP(t_sum_squares_exact, cpu_sum_squares_exact, (fsdp_stream *st, int64_t *words, const float *x, size_t n),
     (words, x, n))

// the entries both tables share (everything but the matrix products)
#define CPU_COMMON_ENTRIES                                                                                   \
    .device = FSDP_DEV_CPU, .gemm_b16 = t_gemm_b16, .gemm_a16 = t_gemm_a16, .gemm_a16_b16 = t_gemm_a16_b16,     \
    .gemm_b16_bias = t_gemm_b16_bias, .gemm_a16_b16_bias = t_gemm_a16_b16_bias,                                \
    .gemm_b16_dbias = t_gemm_b16_dbias, .gemm_a16_dbias = t_gemm_a16_dbias,                                    \
    .layernorm_forward = t_layernorm_forward,                                                                \
    .residual_layernorm_forward = t_residual_layernorm_forward, .layernorm_backward = t_layernorm_backward,  \
    .bias_act_dropout_forward = t_bias_act_dropout_forward, .act_dropout_backward = t_act_dropout_backward,  \
    .relu_dropout_backward = t_relu_dropout_backward,                                                        \
    .relu_forward = t_relu_forward,                                                                          \
    .relu_backward = t_relu_backward, .gelu_forward = t_gelu_forward, .gelu_backward = t_gelu_backward,      \
    .dropout_forward = t_dropout_forward, .dropout_backward = t_dropout_backward, .add = t_add,              \
    .add_inplace = t_add_inplace, .add_inplace_b16 = t_add_inplace_b16, .scale = t_scale,                    \
    .bias_add = t_bias_add, .fill_rows = t_fill_rows, .bias_backward = t_bias_backward,                      \
    .f32_to_bf16 = t_f32_to_bf16, .bf16_to_f32 = t_bf16_to_f32, .f32_to_bf16_in_place = t_f32_to_bf16_in_place, \
    .embedding_forward = t_embedding_forward, .embedding_forward_b16 = t_embedding_forward_b16,              \
    .embedding_backward = t_embedding_backward, .cross_entropy_forward = t_cross_entropy_forward,            \
    .cross_entropy_backward = t_cross_entropy_backward, .abs_mean_forward = t_abs_mean_forward,              \
    .abs_mean_backward = t_abs_mean_backward, .adamw_update = t_adamw_update, .sgd_update = t_sgd_update,    \
    .sum_squares = t_sum_squares, .fixed_quantize = t_fixed_quantize, .fixed_finalize = t_fixed_finalize,     \
    .sum_squares_exact = t_sum_squares_exact

static const fsdp_kernels cpu_table = {
    .name = "cpu",
    .gemm = t_gemm,
    .attention_forward = t_attention_forward,
    .attention_backward = t_attention_backward,
    CPU_COMMON_ENTRIES,
};

// bf16 mixed precision: every matrix product takes bf16 operands and accumulates in fp32; LayerNorm,
// softmax, the loss and every elementwise kernel stay fp32 (autocast's split).
static const fsdp_kernels cpu_bf16_table = {
    .name = "cpu-bf16",
    .gemm = t_gemm_bf16,
    .attention_forward = t_attention_forward_bf16,
    .attention_backward = t_attention_backward_bf16,
    CPU_COMMON_ENTRIES,
};

const fsdp_kernels *fsdp_kernels_cpu(void) { return &cpu_table; }

const fsdp_kernels *fsdp_kernels_cpu_bf16(void) { return &cpu_bf16_table; }
