// gemm_cuda.cu: the CUDA device's GEMM entries (gemm, gemm_b16, gemm_a16, gemm_a16_b16, the fused-bias
// forwards gemm_b16_bias / gemm_a16_b16_bias, the weight-and-bias gradients gemm_b16_dbias /
// gemm_a16_dbias), through cuBLAS (cublasGemmEx on the stream's handle).
//
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: every product calls cuBLAS with the
// operands swapped (B first, A second, m = N, n = M), the leading dimensions as given.
//
// The fp32 table's gemm: fp32 operands, CUBLAS_COMPUTE_32F (TF32 only where the device's math mode
// allows it). Everything else (the bf16 table's gemm, and the _b16/_a16 entries of both tables, as on the
// CPU, device/cpu/gemm_bf16.c): bf16 operands (CUDA_R_16BF), fp32 C and accumulation. An fp32 operand
// is first rounded to bf16 (nearest even, cu_f32_to_bf16) into a copy in the stream's scratch (rows padded
// to 16 bytes: cuBLAS's aligned kernels, whatever the shape), A
// as alpha * A (alpha joins A before rounding, as the CPU's packing does; cuBLAS then gets alpha 1). The
// products of two bf16 values are exact in fp32, so the results differ from the CPU's only in summation
// order.
//
// As the CPU: M or N <= 0 computes nothing; K <= 0 or alpha == 0 makes C = beta * C (beta 0 writes
// zeros, whatever C held; the operands are not read); the bias forms fill C's rows with the bias and
// multiply with beta 1; the dbias forms add dout's column sums (each summed in row order from zero, then
// added: cpu_bias_backward's bits; cu_col_sums_in_order) whenever K > 0, even where the product is empty.
#include <cublas_v2.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "device/cuda/cuda_blas.h"

namespace {

constexpr unsigned kThreads = 256;  // threads per block of the helper kernels
constexpr size_t kScratchAlign = 256;  // alignment of each piece of a split scratch buffer

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ---- helper kernels ----

// dst (rows, cols) with leading dimension dld = bf16 of scale * src (rows, cols) with leading dimension ld
// (gemm_bf16.c's round_copy: one fp32 multiply, then round to nearest even)
__global__ void k_round_bf16(uint16_t *dst, int dld, const float *src, int rows, int cols, int ld, float scale) {
    size_t n = (size_t)rows * (size_t)cols;
    GRID_STRIDE(i, n) {
        size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[r * (size_t)dld + c] = cu_f32_to_bf16(__fmul_rn(scale, src[r * (size_t)ld + c]));
    }
}

// k_round_bf16 four columns at a time: cols, ld and dld multiples of 4, src 16-byte and dst 8-byte
// aligned, rows * cols / 4 under 2^32 (32-bit index arithmetic). dst: (rows, dld); src: (rows, ld).
__global__ void k_round_bf16_x4(uint16_t *dst, int dld, const float *src, int rows, int cols, int ld, float scale) {
    const unsigned q = (unsigned)cols / 4u, n = (unsigned)rows * q;  // float4s per row, in all
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned r = i / q, c = (i - r * q) * 4u;
        const float4 v = *reinterpret_cast<const float4 *>(src + (size_t)r * (size_t)ld + c);
        const uint2 w = {(uint32_t)cu_f32_to_bf16(__fmul_rn(scale, v.x)) | (uint32_t)cu_f32_to_bf16(__fmul_rn(scale, v.y)) << 16,
                         (uint32_t)cu_f32_to_bf16(__fmul_rn(scale, v.z)) | (uint32_t)cu_f32_to_bf16(__fmul_rn(scale, v.w)) << 16};
        *reinterpret_cast<uint2 *>(dst + (size_t)r * (size_t)dld + c) = w;
    }
}

// C (M, N) with leading dimension ldc = beta * C; beta 0 writes zeros (NaN in C ignored: cpu_scale_rows)
__global__ void k_scale_rows(float *C, int M, int N, int ldc, float beta) {
    size_t n = (size_t)M * (size_t)N;
    GRID_STRIDE(i, n) {
        size_t r = i / (size_t)N, c = i % (size_t)N;
        float *p = C + r * (size_t)ldc + c;
        *p = beta == 0.0f ? 0.0f : __fmul_rn(*p, beta);
    }
}

// C (M, N) with leading dimension ldc: every row = bias (N,)
__global__ void k_fill_rows(float *C, const float *bias, int M, int N, int ldc) {
    size_t n = (size_t)M * (size_t)N;
    GRID_STRIDE(i, n) {
        size_t r = i / (size_t)N, c = i % (size_t)N;
        C[r * (size_t)ldc + c] = bias[c];
    }
}

#undef GRID_STRIDE

// ---- launch helpers ----

inline size_t round_up(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// C (M, N) ldc = beta * C (nothing to do for beta 1: the CPU's multiply by 1 keeps every value)
void scale_rows(fsdp_stream *st, float *C, int M, int N, int ldc, float beta) {
    if (beta == 1.0f) return;
    size_t n = (size_t)M * (size_t)N;
    k_scale_rows<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(C, M, N, ldc, beta);
    CU_LAUNCHED(st, "gemm (C = beta * C)");
}

// dbias (cols,) += column sums of x (rows, cols) dense; nothing when rows <= 0 (the CPU adds the sums
// only when K > 0), cols <= 0 or dbias is NULL
void col_sums(fsdp_stream *st, float *dbias, const float *x, int rows, int cols, const char *what) {
    if (!dbias || rows <= 0 || cols <= 0) return;
    cu_col_sums_in_order(st, dbias, x, rows, cols, what);
}

// the row length of a rounded copy of `cols` columns: a multiple of 8 (16-byte rows, so cuBLAS can take
// its aligned kernels whatever cols is, e.g. a vocabulary of 50257)
inline int padded_ld(int cols) { return (cols + 7) & ~7; }

// dst (rows, padded_ld(cols)) = bf16 of scale * src (rows, cols) with leading dimension ld (the padding
// columns are not written)
void round_bf16(fsdp_stream *st, const char *what, uint16_t *dst, const float *src, int rows, int cols, int ld,
                float scale) {
    const size_t n = (size_t)rows * (size_t)cols;
    const int dld = padded_ld(cols);
    if (cols % 4 == 0 && ld % 4 == 0 && ((uintptr_t)src & 15u) == 0 && n / 4 < 0xffffffffu)
        k_round_bf16_x4<<<cu_blocks(n / 4, kThreads), kThreads, 0, cu_stream(st)>>>(dst, dld, src, rows, cols, ld,
                                                                                    scale);
    else
        k_round_bf16<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(dst, dld, src, rows, cols, ld, scale);
    CU_LAUNCHED(st, what);
}

// Row-major C (M, N) ldc = alpha * op(A) @ op(B) + beta * C through cuBLAS (column-major: C^T = op(B)^T
// op(A)^T). A: (M, K), or (K, M) with trans_a, leading dimension lda; B: (K, N), or (N, K) with trans_b,
// ldb; both of cuBLAS type `type` (CUDA_R_32F or CUDA_R_16BF); C fp32; fp32 accumulation. M, N, K > 0.
void cublas_gemm(fsdp_stream *st, const char *what, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const void *A, int lda, const void *B, int ldb, cudaDataType_t type, float beta, float *C, int ldc) {
    cublasHandle_t h = (cublasHandle_t)fsdp_cuda_cublas_handle(st);  // made after cuBLAS was loaded
    cublasStatus_t s = fsdp_cublas_loaded()->gemm_ex(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, type, ldb,
                                                     A, type, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                                     CUBLAS_GEMM_DEFAULT);
    fsdp_cuda_check(st, what, (int)s);
}

// The bf16 product of every entry but the fp32 table's gemm (gemm_bf16.c's gemm_bf16_any): C (M, N) ldc
// = alpha * op(A) @ op(B) + beta * C with bf16 operands and fp32 accumulation. A: (M, K), or (K, M) with
// trans_a, leading dimension lda, bf16 when a_bf16 (then alpha must be 1, as on the CPU; cuBLAS gets it
// as given) else fp32, rounded to bf16 as alpha * A; B: (K, N), or (N, K) with trans_b, ldb, bf16 when
// b_bf16 else fp32, rounded. bias: NULL, or (N,) that every row of C starts as (then beta is replaced by
// 1: the caller passes 0).
void gemm_bf16_any(fsdp_stream *st, const char *what, int trans_a, int trans_b, int M, int N, int K, float alpha,
                   const void *A, int a_bf16, int lda, const void *B, int b_bf16, int ldb, float beta, float *C,
                   int ldc, const float *bias) {
    if (M <= 0 || N <= 0) return;
    if (bias) {
        size_t n = (size_t)M * (size_t)N;
        k_fill_rows<<<cu_blocks(n, kThreads), kThreads, 0, cu_stream(st)>>>(C, bias, M, N, ldc);
        CU_LAUNCHED(st, what);
        beta = 1.0f;
    }
    if (K <= 0 || alpha == 0.0f) {  // C = beta * C; A and B are not read
        scale_rows(st, C, M, N, ldc, beta);
        return;
    }
    // the stored shapes of A and B: (ar, ac) and (br, bc)
    int ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
    size_t a_bytes = a_bf16 ? 0 : round_up(sizeof(uint16_t) * (size_t)ar * (size_t)padded_ld(ac));
    size_t b_bytes = b_bf16 ? 0 : round_up(sizeof(uint16_t) * (size_t)br * (size_t)padded_ld(bc));
    char *scratch = NULL;  // (a_bytes + b_bytes,) device: the rounded copies of A, then B
    if (a_bytes + b_bytes) {
        scratch = (char *)fsdp_cuda_scratch(st, a_bytes + b_bytes);
        if (!scratch) return;  // the failure is noted on st
    }
    const void *a16 = A;  // (ar, ac) bf16 with leading dimension a_ld
    const void *b16 = B;  // (br, bc) bf16 with leading dimension b_ld
    int a_ld = lda, b_ld = ldb;
    if (!a_bf16) {
        uint16_t *dst = (uint16_t *)scratch;  // (ar, padded_ld(ac))
        round_bf16(st, what, dst, (const float *)A, ar, ac, lda, alpha);
        a16 = dst, a_ld = padded_ld(ac), alpha = 1.0f;
    }
    if (!b_bf16) {
        uint16_t *dst = (uint16_t *)(scratch + a_bytes);  // (br, padded_ld(bc))
        round_bf16(st, what, dst, (const float *)B, br, bc, ldb, 1.0f);
        b16 = dst, b_ld = padded_ld(bc);
    }
    cublas_gemm(st, what, trans_a, trans_b, M, N, K, alpha, a16, a_ld, b16, b_ld, CUDA_R_16BF, beta, C, ldc);
}

// ---- the table's entries ----

// fp32 table: C (M, N) ldc = alpha * op(A) @ op(B) + beta * C, all fp32 (cpu_gemm)
void t_gemm_f32(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {  // as BLAS: C = beta * C, A and B not read
        scale_rows(st, C, M, N, ldc, beta);
        return;
    }
    cublas_gemm(st, "gemm", trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, CUDA_R_32F, beta, C, ldc);
}

// bf16 table: the same with alpha * A and B rounded to bf16 (cpu_gemm_bf16)
void t_gemm_bf16(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(st, "gemm (bf16)", trans_a, trans_b, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, C, ldc, NULL);
}

// A (M, K) / (K, M) fp32 rounded as alpha * A; B (K, N) / (N, K) bf16 (cpu_gemm_b16)
void t_gemm_b16(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(st, "gemm_b16", trans_a, trans_b, M, N, K, alpha, A, 0, lda, B, 1, ldb, beta, C, ldc, NULL);
}

// A bf16; B fp32 rounded (cpu_gemm_a16); alpha must be 1
void t_gemm_a16(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A,
                int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(st, "gemm_a16", trans_a, trans_b, M, N, K, alpha, A, 1, lda, B, 0, ldb, beta, C, ldc, NULL);
}

// A and B bf16 (cpu_gemm_a16_b16); alpha must be 1
void t_gemm_a16_b16(fsdp_stream *st, int trans_a, int trans_b, int M, int N, int K, float alpha, const fsdp_bf16 *A,
                    int lda, const fsdp_bf16 *B, int ldb, float beta, float *C, int ldc) {
    gemm_bf16_any(st, "gemm_a16_b16", trans_a, trans_b, M, N, K, alpha, A, 1, lda, B, 1, ldb, beta, C, ldc, NULL);
}

// C (M, N) ldc = A @ op(B) + bias: A (M, K) fp32 with lda, rounded; B bf16 (K, N) / (N, K) with ldb; bias (N,)
void t_gemm_b16_bias(fsdp_stream *st, int trans_b, int M, int N, int K, const float *A, int lda, const fsdp_bf16 *B,
                     int ldb, const float *bias, float *C, int ldc) {
    gemm_bf16_any(st, "gemm_b16_bias", 0, trans_b, M, N, K, 1.0f, A, 0, lda, B, 1, ldb, 0.0f, C, ldc, bias);
}

// The same with A (M, K) bf16
void t_gemm_a16_b16_bias(fsdp_stream *st, int trans_b, int M, int N, int K, const fsdp_bf16 *A, int lda,
                         const fsdp_bf16 *B, int ldb, const float *bias, float *C, int ldc) {
    gemm_bf16_any(st, "gemm_a16_b16_bias", 0, trans_b, M, N, K, 1.0f, A, 1, lda, B, 1, ldb, 0.0f, C, ldc, bias);
}

// C (M, N) ldc = dout^T @ B + beta * C, dout (K, M) fp32 dense (rounded), B (K, N) bf16 with ldb;
// dbias (M,) += column sums of dout (cpu_gemm_b16_dbias)
void t_gemm_b16_dbias(fsdp_stream *st, int M, int N, int K, const float *dout, const fsdp_bf16 *B, int ldb,
                      float beta, float *C, int ldc, float *dbias) {
    gemm_bf16_any(st, "gemm_b16_dbias", 1, 0, M, N, K, 1.0f, dout, 0, M, B, 1, ldb, beta, C, ldc, NULL);
    col_sums(st, dbias, dout, K, M, "gemm_b16_dbias (bias sums)");
}

// C (M, N) ldc = A^T @ dout + beta * C, A (K, M) bf16 with lda, dout (K, N) fp32 dense (rounded);
// dbias (N,) += column sums of dout (cpu_gemm_a16_dbias)
void t_gemm_a16_dbias(fsdp_stream *st, int M, int N, int K, const fsdp_bf16 *A, int lda, const float *dout,
                      float beta, float *C, int ldc, float *dbias) {
    gemm_bf16_any(st, "gemm_a16_dbias", 1, 0, M, N, K, 1.0f, A, 1, lda, dout, 0, N, beta, C, ldc, NULL);
    col_sums(st, dbias, dout, K, N, "gemm_a16_dbias (bias sums)");
}

}  // namespace

// The fp32 table multiplies gemm in fp32, the bf16 table with bf16 operands; the _b16/_a16 entries take
// bf16 operands in both (as the CPU tables, device/cpu/table.c).
extern "C" void fsdp_cuda_fill_gemm(struct fsdp_kernels *t, int bf16) {
    t->gemm = bf16 ? t_gemm_bf16 : t_gemm_f32;
    t->gemm_b16 = t_gemm_b16;
    t->gemm_a16 = t_gemm_a16;
    t->gemm_a16_b16 = t_gemm_a16_b16;
    t->gemm_b16_bias = t_gemm_b16_bias;
    t->gemm_a16_b16_bias = t_gemm_a16_b16_bias;
    t->gemm_b16_dbias = t_gemm_b16_dbias;
    t->gemm_a16_dbias = t_gemm_a16_dbias;
}

// ---- column sums in row order (also the pointwise table's bias_backward) ----

namespace {

constexpr int kColWarps = 16;                       // warps per block: 1 adds, the others load
constexpr int kColLoadRows = 16;                    // rows each loading lane fetches per chunk (in flight at once)
constexpr int kColRows = (kColWarps - 1) * kColLoadRows;  // rows per chunk (240)
constexpr size_t kColShared = sizeof(float) * 2 * kColRows * 32;  // two chunks of 32 columns (61,440 bytes)

// A chunk of rows r0 .. r0 + n (n <= kColRows) of columns c0 .. c0 + 31 of x (rows, cols) into buf
// (kColRows, 32): loading warp w (1 ..) takes rows (w - 1) * kColLoadRows .., issuing all its loads
// before storing any (the latency paid once per chunk, not per row).
__device__ __forceinline__ void load_col_chunk(float *buf, const float *x, int r0, int n, int c, int cols, int warp,
                                               int lane) {
    const int first = (warp - 1) * kColLoadRows;
    float v[kColLoadRows];
#pragma unroll
    for (int k = 0; k < kColLoadRows; k++) {
        const int r = first + k;
        v[k] = r < n && c < cols ? x[(size_t)(r0 + r) * (size_t)cols + c] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kColLoadRows; k++) buf[(first + k) * 32 + lane] = v[k];
}

// dbias (cols,) = dbias + the column sums of x (rows, cols) dense, each summed from zero in row order (the
// bits of one thread's serial loop, cpu_bias_backward's). One block of kColWarps warps per 32 columns,
// chunks of kColRows rows in two shared buffers: while warp 0 adds one chunk in order (lane l: column
// l), the other warps load the next. Shared memory: kColShared bytes, dynamic.
__global__ void __launch_bounds__(32 * kColWarps) k_col_sums_in_order(float *dbias, const float *x, int rows,
                                                                       int cols) {
    extern __shared__ float col_chunks[];  // (2, kColRows, 32)
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int c = (int)blockIdx.x * 32 + lane;
    if (warp > 0) load_col_chunk(col_chunks, x, 0, rows < kColRows ? rows : kColRows, c, cols, warp, lane);
    __syncthreads();
    float acc = 0.0f;
    for (int k = 0, r0 = 0; r0 < rows; k++, r0 += kColRows) {
        const int n = rows - r0 < kColRows ? rows - r0 : kColRows, r1 = r0 + kColRows;
        if (warp == 0) {
            const float *ch = col_chunks + (k & 1) * kColRows * 32 + lane;  // (kColRows,) column `lane`, stride 32
#pragma unroll 16
            for (int r = 0; r < n; r++) acc = __fadd_rn(acc, ch[r * 32]);
        } else if (r1 < rows) {
            load_col_chunk(col_chunks + ((k + 1) & 1) * kColRows * 32, x, r1,
                           rows - r1 < kColRows ? rows - r1 : kColRows, c, cols, warp, lane);
        }
        __syncthreads();
    }
    if (warp == 0 && c < cols) dbias[c] = __fadd_rn(dbias[c], acc);
}

}  // namespace

void cu_col_sums_in_order(fsdp_stream *st, float *dbias, const float *x, int rows, int cols, const char *what) {
    if (cols <= 0) return;
    if (cudaFuncSetAttribute(k_col_sums_in_order, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kColShared) !=
        cudaSuccess) {
        fsdp_cuda_check(st, what, 0);  // the attribute's failure, from cudaGetLastError
        return;
    }
    k_col_sums_in_order<<<(unsigned)((cols + 31) / 32), 32 * kColWarps, kColShared, cu_stream(st)>>>(
        dbias, x, rows < 0 ? 0 : rows, cols);
    CU_LAUNCHED(st, what);
}
