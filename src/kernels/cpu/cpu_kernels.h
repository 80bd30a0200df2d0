// cpu_kernels.h: the CPU implementations behind fsdp_kernels_cpu(). Every kernel of
// kernels/kernel_list.h (its contract is there) is cpu_<name> here, with the entry's parameters and no
// stream (on host memory a kernel runs when it is called; a scalar result goes where the entry's
// pointer says): the table (table.c) wraps each of them; tests and benches call them directly.
#pragma once
#include <omp.h>

#include "kernels/kernels.h"

static inline int omp_get_num_threads_safe(void) { return omp_get_num_threads(); }
static inline int omp_get_thread_num_safe(void) { return omp_get_thread_num(); }

#define FSDP_KERNEL(fn, ...) void cpu_##fn(FSDP_KPARAMS(__VA_ARGS__));
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL

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
// out[k] = inp[k] / (1 - p) if uniform(rng, offset + k) >= p, else 0, for k < n, on the calling thread
// (the dropout mask of kernels.h for elements offset..; out may be inp).  out, inp: (n,)
void cpu_dropout_range(float *out, const float *inp, size_t n, float p, fsdp_rng rng, uint64_t offset);
// Rows i0..i1-1 of C (N values each, leading dimension ldc) times beta, on the calling thread; beta 0
// writes zeros (NaN in C ignored, as BLAS). The GEMMs' C = beta * C.
void cpu_scale_rows(float *C, long ldc, int i0, int i1, int N, float beta);
// (cpu_f32_to_bf16_in_place, convert.c, is tensor.h's fsdp_f32_to_bf16_in_place: serial, since its
// chunks overlap the bytes of earlier ones; the GEMM kernels are declared in kernels.h too, and the
// fixed-point ones in cpu_fixed.h.)
