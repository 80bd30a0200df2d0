// test_gemm.c: both GEMM paths (our AVX-512 kernel on 1 and 2 threads, CBLAS) against a naive
// double-precision reference, for every transposition, edge sizes around the tile and block sizes,
// leading dimensions larger than the width, and alpha/beta in {0, 1, other}.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "test.h"

static float value(long i, int salt) { return (float)((i * 2654435761u + (unsigned)salt * 40503u) % 2001) / 1000.0f - 1.0f; }

// C (M, N, ldc) = alpha op(A) op(B) + beta C, in double; bound (M, N, ldc) = the float rounding-error
// bound (K + 2) * eps * (|alpha| sum |a b| + |beta c|), which a lost or doubled term exceeds
static void reference(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                      int ldb, float beta, const float *C0, float *C, double *bound, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(long)k * lda + i] : A[(long)i * lda + k];
                double b = tb ? B[(long)j * ldb + k] : B[(long)k * ldb + j];
                acc += a * b;
                mag += fabs(a * b);
            }
            double c0 = beta == 0.0f ? 0.0 : beta * C0[(long)i * ldc + j];
            C[(long)i * ldc + j] = (float)(alpha * acc + c0);
            bound[(long)i * ldc + j] = (K + 2) * 1.2e-7 * (fabs(alpha) * mag + fabs(c0)) + 1e-30;
        }
}

// Every C element within its rounding bound (*worst: the largest error as a fraction of it) and the
// padding columns N..ldc untouched. C, R (reference), C0 (before), bound: (M, ldc).
static int check_result(const float *C, const float *R, const float *C0, const double *bound, int M, int N, int ldc,
                        double *worst, int *untouched_ok) {
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double err = fabs((double)C[(long)i * ldc + j] - R[(long)i * ldc + j]) / bound[(long)i * ldc + j];
            *worst = err > *worst ? err : *worst;
        }
        for (int j = N; j < ldc; j++)
            if (memcmp(&C[(long)i * ldc + j], &C0[(long)i * ldc + j], sizeof(float))) *untouched_ok = 0;
    }
    return *worst <= 1.0 && *untouched_ok;
}

static int exact_ld;  // leading dimensions exactly the operands' widths (else padded by 3, 5 and 7)

static int run_case(const char *path, int threads, int ta, int tb, int M, int N, int K, float alpha, float beta) {
    int pad = !exact_ld;
    int lda = (ta ? M : K) + 3 * pad, ldb = (tb ? K : N) + 5 * pad, ldc = N + 7 * pad;
    long asz = (long)(ta ? K : M) * lda, bsz = (long)(tb ? N : K) * ldb, csz = (long)M * ldc;
    float *A = malloc(sizeof(float) * asz), *B = malloc(sizeof(float) * bsz);
    float *C0 = malloc(sizeof(float) * csz), *C = malloc(sizeof(float) * csz), *R = malloc(sizeof(float) * csz);
    double *bound = malloc(sizeof(double) * csz);
    for (long i = 0; i < asz; i++) A[i] = value(i, 1);
    for (long i = 0; i < bsz; i++) B[i] = value(i, 2);
    for (long i = 0; i < csz; i++) C0[i] = value(i, 3);
    if (beta == 0.0f)  // beta = 0 must ignore NaN in C, as BLAS does
        for (long i = 0; i < csz; i += 97) C0[i] = NAN;
    memcpy(C, C0, sizeof(float) * csz);
    memcpy(R, C0, sizeof(float) * csz);
    reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, R, bound, ldc);
    if (strcmp(path, "avx512") == 0) cpu_sgemm_avx512(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads);
    else cpu_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    double worst = 0.0;
    int untouched_ok = 1;
    int ok = check_result(C, R, C0, bound, M, N, ldc, &worst, &untouched_ok);
    if (!ok)
        fprintf(stderr, "%s threads %d ta %d tb %d M %d N %d K %d alpha %g beta %g: worst %g untouched %d\n", path,
                threads, ta, tb, M, N, K, (double)alpha, (double)beta, worst, untouched_ok);
    free(A);
    free(B);
    free(C0);
    free(C);
    free(R);
    free(bound);
    return ok;
}

static float bf16_round(float x) { return fsdp_bf16_to_f32(fsdp_f32_to_bf16(x)); }

// The bf16 GEMM against the double reference on bf16-rounded operands (alpha joins A before
// rounding): only fp32 accumulation error remains, so the same bound holds. b16: B is passed in bf16
// (cpu_gemm_b16, how layers multiply by parameters gathered in bf16).
static int run_case_bf16(const char *path, int b16, int ta, int tb, int M, int N, int K, float alpha, float beta) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
    long asz = (long)(ta ? K : M) * lda, bsz = (long)(tb ? N : K) * ldb, csz = (long)M * ldc;
    float *A = malloc(sizeof(float) * asz), *B = malloc(sizeof(float) * bsz), *Ar = malloc(sizeof(float) * asz);
    float *Br = malloc(sizeof(float) * bsz), *C0 = malloc(sizeof(float) * csz), *C = malloc(sizeof(float) * csz);
    float *R = malloc(sizeof(float) * csz);
    double *bound = malloc(sizeof(double) * csz);
    for (long i = 0; i < asz; i++) A[i] = value(i, 1) * 1.0009765625f + 1e-4f;  // not bf16-exact
    for (long i = 0; i < bsz; i++) B[i] = value(i, 2) * 0.9990234375f - 1e-4f;
    for (long i = 0; i < asz; i++) Ar[i] = bf16_round(alpha * A[i]);
    for (long i = 0; i < bsz; i++) Br[i] = bf16_round(B[i]);
    for (long i = 0; i < csz; i++) C0[i] = value(i, 3);
    if (beta == 0.0f)
        for (long i = 0; i < csz; i += 97) C0[i] = NAN;
    memcpy(C, C0, sizeof(float) * csz);
    memcpy(R, C0, sizeof(float) * csz);
    reference(ta, tb, M, N, K, 1.0f, Ar, lda, Br, ldb, beta, C0, R, bound, ldc);
    cpu_gemm_bf16_select(path);
    if (b16) {
        fsdp_bf16 *Bh = malloc(sizeof(fsdp_bf16) * bsz);
        fsdp_f32_to_bf16_array(Bh, B, (size_t)bsz);
        cpu_gemm_b16(ta, tb, M, N, K, alpha, A, lda, Bh, ldb, beta, C, ldc);
        free(Bh);
    } else {
        cpu_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    double worst = 0.0;
    int untouched_ok = 1;
    int ok = check_result(C, R, C0, bound, M, N, ldc, &worst, &untouched_ok);
    if (!ok)
        fprintf(stderr, "bf16/%s%s ta %d tb %d M %d N %d K %d alpha %g beta %g: worst %g untouched %d\n",
                cpu_gemm_bf16_name(), b16 ? " (B in bf16)" : "", ta, tb, M, N, K, (double)alpha, (double)beta, worst,
                untouched_ok);
    free(A);
    free(B);
    free(Ar);
    free(Br);
    free(C0);
    free(C);
    free(R);
    free(bound);
    return ok;
}

// A bf16 product must differ from the fp32 one (the operands really are rounded): a guard against a
// "bf16" path that silently computes in fp32.
static int bf16_rounds_operands(void) {
    float a[32], b[32], c = 0.0f;
    for (int i = 0; i < 32; i++) a[i] = b[i] = 1.0f + 1.0f / 512.0f;  // halfway: rounds to 1.0 in bf16
    cpu_gemm_bf16(0, 0, 1, 1, 32, 1.0f, a, 32, b, 1, 0.0f, &c, 1);
    return c == 32.0f;
}

// The device's tables run the same products as the direct calls: gemm (fp32 table: cpu_gemm; bf16
// table: cpu_gemm_bf16) and gemm_b16 (cpu_gemm_b16), bit for bit, on device buffers written and
// read with copies (so this passes on the guard device too).
static int table_matches_direct(int bf16, int b16, int ta, int tb, int M, int N, int K, float alpha, float beta) {
    fsdp_dev *dev = fsdp_dev_default();
    fsdp_stream *st = fsdp_dev_stream(dev, FSDP_STREAM_COMPUTE);
    const fsdp_kernels *k = fsdp_dev_kernels(dev, bf16);
    int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
    size_t asz = (size_t)(ta ? K : M) * lda, bsz = (size_t)(tb ? N : K) * ldb, csz = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * asz), *B = malloc(sizeof(float) * bsz), *C = malloc(sizeof(float) * csz);
    float *R = malloc(sizeof(float) * csz);
    fsdp_bf16 *Bh = malloc(sizeof(fsdp_bf16) * bsz);
    for (size_t i = 0; i < asz; i++) A[i] = value((long)i, 4);
    for (size_t i = 0; i < bsz; i++) B[i] = value((long)i, 5);
    for (size_t i = 0; i < csz; i++) C[i] = R[i] = value((long)i, 6);
    fsdp_f32_to_bf16_array(Bh, B, bsz);
    float *Ad = fsdp_dev_alloc(dev, sizeof(float) * asz, FSDP_MEM_ACTIVATIONS);
    float *Bd = fsdp_dev_alloc(dev, sizeof(float) * bsz, FSDP_MEM_ACTIVATIONS);
    float *Cd = fsdp_dev_alloc(dev, sizeof(float) * csz, FSDP_MEM_ACTIVATIONS);
    fsdp_bf16 *Bhd = fsdp_dev_alloc(dev, sizeof(fsdp_bf16) * bsz, FSDP_MEM_ACTIVATIONS);
    int ok = Ad && Bd && Cd && Bhd;
    ok &= fsdp_copy_h2d(st, Ad, A, sizeof(float) * asz) == FSDP_OK;
    ok &= fsdp_copy_h2d(st, Bd, B, sizeof(float) * bsz) == FSDP_OK;
    ok &= fsdp_copy_h2d(st, Cd, C, sizeof(float) * csz) == FSDP_OK;
    ok &= fsdp_copy_h2d(st, Bhd, Bh, sizeof(fsdp_bf16) * bsz) == FSDP_OK;
    if (b16) {
        k->gemm_b16(st, ta, tb, M, N, K, alpha, Ad, lda, Bhd, ldb, beta, Cd, ldc);
        cpu_gemm_b16(ta, tb, M, N, K, alpha, A, lda, Bh, ldb, beta, R, ldc);
    } else {
        k->gemm(st, ta, tb, M, N, K, alpha, Ad, lda, Bd, ldb, beta, Cd, ldc);
        if (bf16) cpu_gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
        else cpu_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    }
    ok &= fsdp_copy_d2h(st, C, Cd, sizeof(float) * csz) == FSDP_OK;
    ok &= fsdp_stream_synchronize(st) == FSDP_OK;
    ok &= memcmp(C, R, sizeof(float) * csz) == 0;
    if (!ok)
        fprintf(stderr, "table %s%s ta %d tb %d M %d N %d K %d differs from the direct call\n", k->name,
                b16 ? " gemm_b16" : " gemm", ta, tb, M, N, K);
    fsdp_dev_free(dev, Ad);
    fsdp_dev_free(dev, Bd);
    fsdp_dev_free(dev, Cd);
    fsdp_dev_free(dev, Bhd);
    free(A), free(B), free(C), free(R), free(Bh);
    return ok;
}

// A stored in bf16 (cpu_gemm_a16, _a16_b16: activations kept in bf16) gives the bits of the same
// product with A in fp32, since the fp32 A is rounded to those bf16 values while it is packed; B in fp32
// and in bf16, every transpose, tails in M, N and K.
static int a16_matches_f32(const char *path, int b16, int ta, int tb, int M, int N, int K, float beta) {
    int lda = ta ? M + 3 : K + 2, ldb = tb ? K + 1 : N + 4, ldc = N + 5;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb);
    float *C1 = malloc(sizeof(float) * nc), *C2 = malloc(sizeof(float) * nc);
    fsdp_bf16 *Ah = malloc(sizeof(fsdp_bf16) * na), *Bh = malloc(sizeof(fsdp_bf16) * nb);
    for (size_t i = 0; i < na; i++) A[i] = value((long)i, 11) * 3.0f;
    for (size_t i = 0; i < nb; i++) B[i] = value((long)i, 12);
    for (size_t i = 0; i < nc; i++) C1[i] = C2[i] = value((long)i, 13);
    fsdp_f32_to_bf16_array(Ah, A, na);
    fsdp_f32_to_bf16_array(Bh, B, nb);
    cpu_gemm_bf16_select(path);
    if (b16) {
        cpu_gemm_b16(ta, tb, M, N, K, 1.0f, A, lda, Bh, ldb, beta, C1, ldc);
        cpu_gemm_a16_b16(ta, tb, M, N, K, 1.0f, Ah, lda, Bh, ldb, beta, C2, ldc);
    } else {
        cpu_gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C1, ldc);
        cpu_gemm_a16(ta, tb, M, N, K, 1.0f, Ah, lda, B, ldb, beta, C2, ldc);
    }
    cpu_gemm_bf16_select(NULL);
    int ok = memcmp(C1, C2, sizeof(float) * nc) == 0;
    if (!ok) fprintf(stderr, "a16 path %s b16 %d ta %d tb %d M %d N %d K %d: differs from fp32 A\n", path ? path : "best",
                     b16, ta, tb, M, N, K);
    free(A), free(B), free(C1), free(C2), free(Ah), free(Bh);
    return ok;
}

// The table's weight-and-bias entries (gemm_a16_dbias: Conv1D's layout, gemm_b16_dbias: Linear's) give
// the bits of the separate calls, gemm_a16 / gemm_b16 and then bias_backward: the product unchanged and
// the bias's sums in bias_backward's order, whether they ride on dout's packing (one thread) or are taken
// after the product (a team of `threads`, the emulated path). dbias starts non-zero (it accumulates).
static int dbias_matches_separate(const char *path, int conv1d, int threads, int M, int N, int K, float beta) {
    const fsdp_kernels *k = fsdp_kernels_cpu_bf16();  // host buffers: the CPU table (its stream unused)
    int width = conv1d ? M : N, C_out = conv1d ? N : M, ld = width + 3, ldc = N + 2;  // ld: the bf16 input's
    size_t nx = (size_t)K * ld, nd = (size_t)K * C_out, nc = (size_t)M * ldc;
    float *dout = malloc(sizeof(float) * nd), *x = malloc(sizeof(float) * nx);
    float *C1 = malloc(sizeof(float) * nc), *C2 = malloc(sizeof(float) * nc);
    float *db1 = malloc(sizeof(float) * C_out), *db2 = malloc(sizeof(float) * C_out);
    fsdp_bf16 *xh = malloc(sizeof(fsdp_bf16) * nx);
    for (size_t i = 0; i < nd; i++) dout[i] = value((long)i, 21) * (1.0f + (float)(i % 7) / 3.0f);
    for (size_t i = 0; i < nx; i++) x[i] = value((long)i, 22);
    for (size_t i = 0; i < nc; i++) C1[i] = C2[i] = value((long)i, 23);
    for (int i = 0; i < C_out; i++) db1[i] = db2[i] = value(i, 24);
    fsdp_f32_to_bf16_array(xh, x, nx);
    cpu_gemm_bf16_select(path);
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    if (conv1d) {
        cpu_gemm_a16(1, 0, M, N, K, 1.0f, xh, ld, dout, N, beta, C1, ldc);
        k->gemm_a16_dbias(NULL, M, N, K, xh, ld, dout, beta, C2, ldc, db2);
    } else {
        cpu_gemm_b16(1, 0, M, N, K, 1.0f, dout, M, xh, ld, beta, C1, ldc);
        k->gemm_b16_dbias(NULL, M, N, K, dout, xh, ld, beta, C2, ldc, db2);
    }
    cpu_bias_backward(db1, dout, K, C_out);
    omp_set_num_threads(saved);
    cpu_gemm_bf16_select(NULL);
    int ok = memcmp(C1, C2, sizeof(float) * nc) == 0 && memcmp(db1, db2, sizeof(float) * C_out) == 0;
    if (!ok)
        fprintf(stderr, "%s path %s threads %d M %d N %d K %d: differs from gemm + bias_backward\n",
                conv1d ? "gemm_a16_dbias" : "gemm_b16_dbias", path ? path : "best", threads, M, N, K);
    free(dout), free(x), free(C1), free(C2), free(db1), free(db2), free(xh);
    return ok;
}

// The bias-fused forward (gemm_b16_bias, gemm_a16_b16_bias) against fill_rows + gemm_b16 / gemm_a16_b16
// with beta 1, bit for bit; C starts as garbage (NaN) that must not leak through.
static int bias_matches_fill(const char *path, int a16, int trans_b, int threads, int M, int N, int K) {
    const fsdp_kernels *k = fsdp_kernels_cpu_bf16();
    int lda = K + 1, ldb = (trans_b ? K : N) + 2, ldc = N + 3;
    size_t na = (size_t)M * lda, nb = (size_t)(trans_b ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * na), *Bf = malloc(sizeof(float) * nb), *bias = malloc(sizeof(float) * N);
    float *C1 = malloc(sizeof(float) * nc), *C2 = malloc(sizeof(float) * nc);
    fsdp_bf16 *Ah = malloc(sizeof(fsdp_bf16) * na), *Bh = malloc(sizeof(fsdp_bf16) * nb);
    for (size_t i = 0; i < na; i++) A[i] = value((long)i, 31);
    for (size_t i = 0; i < nb; i++) Bf[i] = value((long)i, 32);
    for (int i = 0; i < N; i++) bias[i] = value(i, 33) * 4.0f;
    for (size_t i = 0; i < nc; i++) C1[i] = C2[i] = NAN;
    fsdp_f32_to_bf16_array(Ah, A, na);
    fsdp_f32_to_bf16_array(Bh, Bf, nb);
    cpu_gemm_bf16_select(path);
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    for (int m = 0; m < M; m++) memcpy(C1 + (size_t)m * ldc, bias, sizeof(float) * N);
    if (a16) {
        cpu_gemm_a16_b16(0, trans_b, M, N, K, 1.0f, Ah, lda, Bh, ldb, 1.0f, C1, ldc);
        k->gemm_a16_b16_bias(NULL, trans_b, M, N, K, Ah, lda, Bh, ldb, bias, C2, ldc);
    } else {
        cpu_gemm_b16(0, trans_b, M, N, K, 1.0f, A, lda, Bh, ldb, 1.0f, C1, ldc);
        k->gemm_b16_bias(NULL, trans_b, M, N, K, A, lda, Bh, ldb, bias, C2, ldc);
    }
    omp_set_num_threads(saved);
    cpu_gemm_bf16_select(NULL);
    int ok = 1;
    for (int m = 0; m < M; m++)  // the rows' N values (past N, C keeps its NaN in both)
        ok &= memcmp(C1 + (size_t)m * ldc, C2 + (size_t)m * ldc, sizeof(float) * N) == 0 && !isnan(C2[(size_t)m * ldc]);
    if (!ok)
        fprintf(stderr, "%s path %s threads %d trans_b %d M %d N %d K %d: differs from fill_rows + gemm\n",
                a16 ? "gemm_a16_b16_bias" : "gemm_b16_bias", path ? path : "best", threads, trans_b, M, N, K);
    free(A), free(Bf), free(bias), free(C1), free(C2), free(Ah), free(Bh);
    return ok;
}

int main(void) {
    // M mod 14 (the fp32 kernel's panel rows) covers each of its row-count variants: 1-2, 3-4, 5-6, ... 13-14
    int sizes[][3] = {{1, 1, 1},    {14, 32, 16},  {15, 33, 17},  {13, 31, 300}, {29, 65, 257}, {100, 17, 5},
                      {345, 70, 40}, {700, 96, 33}, {64, 3100, 9}, {3, 5, 520},  {19, 40, 30}, {26, 34, 270},
                      {39, 20, 7},   {30, 40, 1100}};  // K > the k block (1024): A read in place from k 1024 on
    float alphas[] = {1.0f, 0.5f, 0.0f}, betas[] = {0.0f, 1.0f, -0.75f};
    int cases = 0;
    for (int s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int ab = 0; ab < 3; ab++) {
                    int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                    float alpha = alphas[ab], beta = betas[(ab + s) % 3];
                    if (cpu_sgemm_avx512_available()) {
                        CHECK(run_case("avx512", 1, ta, tb, M, N, K, alpha, beta));
                        CHECK(run_case("avx512", 2, ta, tb, M, N, K, alpha, beta));
                    }
                    cpu_gemm_select("openblas");
                    CHECK(run_case("cpu_gemm/openblas", 2, ta, tb, M, N, K, alpha, beta));
                    cpu_gemm_select(NULL);
                    CHECK(run_case("cpu_gemm/default", 2, ta, tb, M, N, K, alpha, beta));
                    cases++;
                }
    // rows of exactly 1024 floats: A packed where its rows would share one L1 set (N >= 256), and (trans_b,
    // M 260 < N 270) x W^T computed as W x^T, whose W with 1024-float rows must still be read in place
    exact_ld = 1;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int b = 0; b < 2; b++) {
                CHECK(run_case("avx512", 1, ta, tb, 260, 270, 1024, 1.0f, (float)b));
                cases++;
            }
    exact_ld = 0;
    int bf16_cases = 0;
    // NULL: the best available (AMX where present); avx512bf16 falls back to the best below it
    const char *bf16_paths[] = {NULL, "avx512bf16", "emulate"};
    for (int p = 0; p < 3; p++)
        for (int s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int ab = 0; ab < 3; ab++) {
                        int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                        CHECK(run_case_bf16(bf16_paths[p], 0, ta, tb, M, N, K, alphas[ab], betas[(ab + s) % 3]));
                        CHECK(run_case_bf16(bf16_paths[p], 1, ta, tb, M, N, K, alphas[ab], betas[(ab + s) % 3]));
                        bf16_cases++;
                    }
    int big[][3] = {{512, 1536, 512}, {300, 520, 1100}, {64, 64, 64}};
    for (int p = 0; p < 2; p++)
        for (int s = 0; s < 3; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    CHECK(run_case_bf16(bf16_paths[p], s == 1, ta, tb, big[s][0], big[s][1], big[s][2], 1.0f,
                                        (float)(s % 2)));
    char used[64] = "";
    for (int p = 0; p < 3; p++) {
        cpu_gemm_bf16_select(bf16_paths[p]);
        CHECK(bf16_rounds_operands());
        strcat(used, cpu_gemm_bf16_name());
        strcat(used, p < 2 ? ", " : "");
    }
    cpu_gemm_bf16_select(NULL);
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int b16 = 0; b16 < 2; b16++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) CHECK(table_matches_direct(bf16, b16, ta, tb, 37, 70, 45, 0.5f, 1.0f));
    int a16_sizes[][3] = {{1, 1, 1}, {15, 33, 17}, {29, 65, 257}, {100, 17, 40}, {64, 96, 520}};
    for (int p = 0; p < 3; p++)
        for (int s = 0; s < 5; s++)
            for (int t = 0; t < 8; t++)
                CHECK(a16_matches_f32(bf16_paths[p], t & 1, t >> 1 & 1, t >> 2 & 1, a16_sizes[s][0], a16_sizes[s][1],
                                      a16_sizes[s][2], (float)(s % 2)));
    // tails in every dimension; K over 32 tiles; the last shape is big enough for a team of two
    int dbias_sizes[][3] = {{1, 1, 1}, {15, 33, 17}, {40, 17, 100}, {64, 96, 520}, {200, 300, 70}};
    for (int p = 0; p < 3; p++)
        for (int s = 0; s < 5; s++)
            for (int conv1d = 0; conv1d < 2; conv1d++)
                for (int threads = 1; threads <= 2; threads++)
                    CHECK(dbias_matches_separate(bf16_paths[p], conv1d, threads, dbias_sizes[s][0], dbias_sizes[s][1],
                                                 dbias_sizes[s][2], (float)(s % 2)));
    // tails; K 0 (C = the bias); the last shape is big enough for a team of two
    int bias_sizes[][3] = {{1, 1, 1}, {15, 33, 17}, {40, 17, 0}, {64, 96, 520}, {200, 300, 70}};
    for (int p = 0; p < 3; p++)
        for (int s = 0; s < 5; s++)
            for (int t = 0; t < 8; t++)
                CHECK(bias_matches_fill(bf16_paths[p], t & 1, t >> 1 & 1, 1 + (t >> 2), bias_sizes[s][0],
                                        bias_sizes[s][1], bias_sizes[s][2]));
    printf("bf16 GEMM: %d cases (B in fp32 and in bf16) on each of the paths %s\n", bf16_cases / 3, used);
    printf("%d shapes x paths checked (avx512 kernel %s)\n", cases,
           cpu_sgemm_avx512_available() ? "available" : "not available on this CPU");
    TEST_MAIN_END();
}
