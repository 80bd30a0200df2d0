// cpu_kernels.h: the CPU implementations behind fsdp_kernels_cpu(); see kernels.h for contracts.
// These take no stream and return host scalars where the table's entries write device ones: the
// table (table.c) wraps each of them; tests and benches call them directly on host memory.
#pragma once
#include <omp.h>

#include "kernels/kernels.h"

static inline int omp_get_num_threads_safe(void) { return omp_get_num_threads(); }
static inline int omp_get_thread_num_safe(void) { return omp_get_thread_num(); }

void cpu_layernorm_forward(float *out, fsdp_bf16 *out_b16, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps);
void cpu_residual_layernorm_forward(float *res, float *out, fsdp_bf16 *out_b16, float *mean, float *rstd,
                                    const float *a, const float *b, float p, fsdp_rng rng, const float *weight,
                                    const float *bias, int N, int C, float eps);
void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *dres,
                            const float *inp, const float *weight, const float *mean, const float *rstd, int N,
                            int C);
void cpu_attention_forward(float *out, float *stats, const float *qkv, const fsdp_attention_dims *d);
void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *stats,
                            const fsdp_attention_dims *d);
void cpu_attention_forward_bf16(float *out, float *stats, const float *qkv, const fsdp_attention_dims *d);
void cpu_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *stats, const fsdp_attention_dims *d);
// 1 (the default): under the AMX and VDPBF16PS paths the bf16 attention packs each head's keys and
// values into bf16 tiles once (cpu_bf16_tiles_*); 0: through cpu_gemm_bf16 per block, which packs its
// operands on every call (the same bits; tests compare the two)
void cpu_attention_bf16_use_tiles(int on);

// bf16 operands packed once and multiplied many times (gemm_bf16.c; not on the emulated path, where
// cpu_bf16_tiles_available() is 0). op(A) (M, K) with element (m, k) at A[m*rs + k*cs], fp32, times
// alpha, rounded to bf16, is packed as tiles of 16 rows x 32 k: tile (mi, kj) at dst + (mi * KT + kj) *
// 512, KT = ceil(K / 32), mi < 2 ceil(M / 32) (zeros past M and K). op(B) (K, N), element (k, n) at
// B[k*rs + n*cs], likewise with 16 columns per group. Either takes cpu_bf16_tiles_elems(M or N, K)
// uint16 values, 64-byte aligned.
int cpu_bf16_tiles_available(void);
size_t cpu_bf16_tiles_elems(int lines, int K);
void cpu_bf16_tiles_pack_a(uint16_t *dst, const float *A, long rs, long cs, int M, int K, float alpha);
void cpu_bf16_tiles_pack_b(uint16_t *dst, const float *B, long rs, long cs, int N, int K);
// C (M, N, leading dimension ldc) = (accumulate: C +) the product over KT k-groups of packed A (a: its
// first tile; a_kt tiles from one row group to the next) and packed B (b, b_kt likewise); a and b may
// start inside a packing (at a later k-group or column group). The same sums as cpu_gemm_bf16.
void cpu_bf16_tiles_product(const uint16_t *a, int a_kt, const uint16_t *b, int b_kt, int KT, int M, int N,
                            float *C, int ldc, int accumulate);
void cpu_relu_forward(float *out, const float *inp, size_t n);
void cpu_relu_backward(float *dinp, const float *dout, const float *out, size_t n);
void cpu_gelu_forward(float *out, const float *inp, size_t n, int tanh_approx);
void cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int tanh_approx);
// out[k] = inp[k] / (1 - p) if uniform(rng, offset + k) >= p, else 0, for k < n, on the calling thread
// (the dropout mask of kernels.h for elements offset..; out may be inp).  out, inp: (n,)
void cpu_dropout_range(float *out, const float *inp, size_t n, float p, fsdp_rng rng, uint64_t offset);
void cpu_dropout_forward(float *out, const float *inp, size_t n, float p, fsdp_rng rng);
void cpu_dropout_backward(float *dinp, const float *dout, size_t n, float p, fsdp_rng rng);
void cpu_bias_act_dropout_forward(float *pre, float *act, fsdp_bf16 *act_b16, const float *bias, int N, int F,
                                  fsdp_activation a, float p, fsdp_rng rng);
void cpu_relu_dropout_backward(float *dpre, const float *dact, const float *act, size_t n, float p);
void cpu_act_dropout_backward(float *dpre, const float *dact, const float *pre, size_t n, fsdp_activation a, float p,
                              fsdp_rng rng);
void cpu_add(float *out, const float *a, const float *b, size_t n);
void cpu_add_inplace(float *acc, const float *b, size_t n);
void cpu_add_inplace_b16(float *acc, const fsdp_bf16 *b, size_t n);
void cpu_scale(float *x, float s, size_t n);
// Rows i0..i1-1 of C (N values each, leading dimension ldc) times beta, on the calling thread; beta 0
// writes zeros (NaN in C ignored, as BLAS). The GEMMs' C = beta * C.
void cpu_scale_rows(float *C, long ldc, int i0, int i1, int N, float beta);
void cpu_bias_add(float *out, const float *bias, int N, int C);
void cpu_fill_rows(float *out, const float *row, int N, int C);
void cpu_bias_backward(float *dbias, const float *dout, int N, int C);
// conversions (convert.c); the in-place one is tensor.h's fsdp_f32_to_bf16_in_place (serial: its
// chunks overlap the bytes of earlier ones, so they cannot be split over threads)
void cpu_f32_to_bf16(fsdp_bf16 *dst, const float *src, size_t n);
void cpu_bf16_to_f32(float *dst, const fsdp_bf16 *src, size_t n);
void cpu_embedding_forward(float *out, const int32_t *idx, const float *table, int N, int C, int accumulate);
void cpu_embedding_forward_b16(float *out, const int32_t *idx, const fsdp_bf16 *table, int N, int C, int accumulate);
void cpu_embedding_backward(float *dtable, const float *dout, const int32_t *idx, int N, int C);
// stats: (N, 2) per row: its maximum logit, then 1 / sum of exp(logit - maximum); dlogits may be logits
double cpu_cross_entropy_forward(float *losses, float *stats, const float *logits, const int32_t *targets, int N,
                                 int V);
void cpu_cross_entropy_backward(float *dlogits, const float *logits, const float *stats, const int32_t *targets,
                                float dloss, int N, int V);
// mean |y| over n values (summed in double), and dy = sign(y) * dloss / n
double cpu_abs_mean_forward(const float *y, size_t n);
void cpu_abs_mean_backward(float *dy, const float *y, size_t n, float dloss);
void cpu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float step_size,
                      float bias2_sqrt);
void cpu_sgd_update(float *param, const float *grad, float *momentum_buf, size_t n, float lr, float momentum,
                    float dampening, float weight_decay, int nesterov, int first);
double cpu_sum_squares(const float *x, size_t n);
