// gemm.c: row-major SGEMM: our AVX-512 kernel (sgemm_avx512.c) where the CPU has AVX-512, else CBLAS
// (OpenBLAS); FSDP_GEMM=openblas|avx512 overrides. Both run single-threaded and this wrapper
// splits large products over OpenMP threads itself (by rows of C, or by columns when C is wider than
// tall), so the same code is safe inside a parallel region (attention calls it per (b, h)). Both give
// the same bits on any thread count.
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "device/cpu/cpu_kernels.h"
#include "core/tunables.h"

void openblas_set_num_threads(int num_threads);

static int use_own_kernel = -1;  // -1: not decided yet

void cpu_gemm_init(void) {
    static int done;
    if (done) return;
    done = 1;
    openblas_set_num_threads(1);
    if (use_own_kernel < 0) cpu_gemm_select(fsdp_tunable(FSDP_ENV_GEMM));
}

void cpu_gemm_select(const char *name) {
    if (name && strcmp(name, "openblas") == 0) use_own_kernel = 0;
    else if (name && strcmp(name, "avx512") == 0) use_own_kernel = cpu_sgemm_avx512_available();
    else use_own_kernel = cpu_sgemm_avx512_available();
}

const char *cpu_gemm_name(void) {
    if (use_own_kernel < 0) cpu_gemm_select(fsdp_tunable(FSDP_ENV_GEMM));
    return use_own_kernel ? "avx512" : "openblas";
}

static void gemm_serial(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Large products on the OpenBLAS path are cut into pieces along the rows of C (M >= N) or its columns:
// at most GEMM_MAX_PIECES pieces, each a multiple of 16 rows (columns) and at least GEMM_MIN_PIECE. The
// cut is a function of the shape alone, never of the thread count, and threads take whole pieces: each
// piece is then the same OpenBLAS call on any number of threads, which matters because OpenBLAS's
// kernels round an element differently depending on where it falls in the call's register tiles (with
// the Haswell kernels a product cut in two halves differs from the whole in a few percent of elements).
// Each piece packs the other operand again: pieces of 128 rows or more keep that within about 10% on
// one thread (less on more), and 8 pieces let up to 8 threads share a product.
#define GEMM_MIN_PIECE 128
#define GEMM_MAX_PIECES 8

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
    // one call for small products, and inside a parallel region, active or not (attention's per-head
    // products: omp_get_level counts a team of one too, so the choice holds on any thread count)
    if (flops < 4e6 || omp_get_level() > 0) {
        gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int split_rows = M >= N;
    int total = split_rows ? M : N;
    int piece = (total + GEMM_MAX_PIECES - 1) / GEMM_MAX_PIECES;
    piece = (piece + 15) / 16 * 16;
    piece = piece > GEMM_MIN_PIECE ? piece : GEMM_MIN_PIECE;
    int npieces = (total + piece - 1) / piece;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads) if (nthreads > 1 && npieces > 1)
    for (int p = 0; p < npieces; p++) {
        int lo = p * piece, hi = lo + piece < total ? lo + piece : total;
        if (split_rows) {
            const float *A_part = trans_a ? A + lo : A + (long)lo * lda;  // rows lo..hi of op(A)
            gemm_serial(trans_a, trans_b, hi - lo, N, K, alpha, A_part, lda, B, ldb, beta, C + (long)lo * ldc, ldc);
        } else {
            const float *B_part = trans_b ? B + (long)lo * ldb : B + lo;  // columns lo..hi of op(B)
            gemm_serial(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, B_part, ldb, beta, C + lo, ldc);
        }
    }
}
