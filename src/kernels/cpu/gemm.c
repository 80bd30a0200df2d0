// gemm.c: row-major SGEMM: our AVX-512 kernel (sgemm_avx512.c) where the CPU has AVX-512, else CBLAS
// (OpenBLAS); FSDP_GEMM=openblas|avx512 overrides. Both run single-threaded and this wrapper
// splits large products over OpenMP threads itself (by rows of C, or by columns when C is wide and
// short), so the same code is safe inside a parallel region (attention calls it per (b, h)).
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

void openblas_set_num_threads(int num_threads);

static int use_own_kernel = -1;  // -1: not decided yet

void cpu_gemm_init(void) {
    static int done;
    if (done) return;
    done = 1;
    openblas_set_num_threads(1);
    if (use_own_kernel < 0) cpu_gemm_select(getenv("FSDP_GEMM"));
}

void cpu_gemm_select(const char *name) {
    if (name && strcmp(name, "openblas") == 0) use_own_kernel = 0;
    else if (name && strcmp(name, "avx512") == 0) use_own_kernel = cpu_sgemm_avx512_available();
    else use_own_kernel = cpu_sgemm_avx512_available();
}

const char *cpu_gemm_name(void) {
    if (use_own_kernel < 0) cpu_gemm_select(getenv("FSDP_GEMM"));
    return use_own_kernel ? "avx512" : "openblas";
}

static void gemm_serial(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void cpu_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cpu_gemm_init();
    int nthreads = omp_in_parallel() ? 1 : omp_get_max_threads();
    double flops = 2.0 * M * N * (double)K;
    if (use_own_kernel) {  // threads share packed B and take A blocks dynamically
        cpu_sgemm_avx512(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                         flops < 4e6 ? 1 : nthreads);
        return;
    }
    if (nthreads <= 1 || flops < 4e6) {
        gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int split_rows = M >= N || M >= 64 * nthreads;
#pragma omp parallel num_threads(nthreads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int total = split_rows ? M : N;
        int unit = 16;  // keep chunks multiples of the microkernel tile
        int chunks = (total + unit - 1) / unit;
        int lo = (int)((long)chunks * t / nt) * unit, hi = (int)((long)chunks * (t + 1) / nt) * unit;
        if (hi > total) hi = total;
        if (lo < hi) {
            if (split_rows) {
                const float *A_part = trans_a ? A + lo : A + (long)lo * lda;
                gemm_serial(trans_a, trans_b, hi - lo, N, K, alpha, A_part, lda, B, ldb, beta,
                            C + (long)lo * ldc, ldc);
            } else {
                const float *B_part = trans_b ? B + (long)lo * ldb : B + lo;
                gemm_serial(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, B_part, ldb, beta, C + lo, ldc);
            }
        }
    }
}
