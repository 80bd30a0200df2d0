// cpu_kernels.h: the CPU implementations behind fsdp_kernels_cpu(). Every kernel of
// kernels/kernel_list.h (its contract is there) is cpu_<name> here, with the entry's parameters and no
// stream (on host memory a kernel runs when it is called; a scalar result goes where the entry's
// pointer says): the table (table.c) wraps each of them; tests and benches call them directly.
#pragma once
#include <omp.h>

#include "kernels/kernels.h"

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
void cpu_gemm_b16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                       const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc);
// The same with A already in bf16 (activations stored in bf16 under mixed precision; alpha must be 1),
// B fp32 or bf16.
void cpu_gemm_a16(int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc);
void cpu_gemm_a16_b16(int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A, int lda,
                           const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc);
// Weight and bias gradients in one call (the table's gemm_b16_dbias, gemm_a16_dbias): C = A^T @ B +
// beta * C with A (K, M) and B (K, N), one of them dout in fp32 (dense), the other bf16; dbias += the
// column sums of dout, summed as cpu_bias_backward sums (the same bits), while dout is packed.
void cpu_gemm_b16_dbias(int M, int N, int K, const float *A, const fsdp_bf16 *B, int ldb, float beta, float *C,
                             int ldc, float *dbias);
void cpu_gemm_a16_dbias(int M, int N, int K, const fsdp_bf16 *A, int lda, const float *B, float beta, float *C,
                             int ldc, float *dbias);
// A Linear's forward with its bias (the table's gemm_b16_bias, gemm_a16_b16_bias): C = A @ op(B) + bias
void cpu_gemm_b16_bias(int trans_b, int M, int N, int K, const float *A, int lda, const fsdp_bf16 *B, int ldb,
                            const float *bias, float *C, int ldc);
void cpu_gemm_a16_b16_bias(int trans_b, int M, int N, int K, const fsdp_bf16 *A, int lda, const fsdp_bf16 *B,
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
