// kernels.h: the per-device kernel table. nn/, optim/ and fsdp/ call kernels only through this
// table, so a CUDA table slots in beside the CPU one without a second implementation above it. The
// kernels themselves, their parameters and contracts, are listed once, in kernel_list.h.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "kernels/kernel_params.h"
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

// The table: a name, the device its pointers address, then one member per entry of kernel_list.h,
// `void (*name)(fsdp_stream *st, parameters...)`, in the list's order (the contracts are there).
typedef struct fsdp_kernels {
    const char *name;
    fsdp_device device;
#define FSDP_KERNEL(fn, ...) void (*fn)(fsdp_stream * st, FSDP_KPARAMS(__VA_ARGS__));
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL
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
