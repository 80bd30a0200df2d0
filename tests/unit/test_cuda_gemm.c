// test_cuda_gemm.c: the CUDA tables' GEMM entries (gemm, gemm_b16, gemm_a16, gemm_a16_b16, gemm_b16_bias,
// gemm_a16_b16_bias, gemm_b16_dbias, gemm_a16_dbias; fp32 and bf16 tables) against the CPU tables' on the
// same inputs: odd shapes, every transposition an entry takes, leading dimensions above the minimum,
// alpha != 1 where allowed (and alpha 0), beta 0 (C filled with NaN, which must be ignored), 1 and 0.5,
// K = 0, and empty products. The whole of C is compared, padding columns included (NaN or the old
// values on both sides: neither may write there). Exit 77 (skipped) without a CUDA build or a GPU.
//
// Tolerances. Both sides multiply the same operands (fp32, or the same bf16 roundings, whose products
// are exact in fp32) and accumulate in fp32: they differ only in summation order (and FMA use), an error
// proportional to S, the largest sum over an element's terms of |alpha a b| (+ |beta c| + |bias|). The
// worst case is about K * 2^-24 * S per side, the typical one sqrt(K) * 2^-24 * S (< 1e-6 S at K = 190).
// fp32 gemm: atol = 1e-5 S, rtol 1e-5 (TF32, with about 2^-11 per product, exceeds it at the larger K).
// bf16 entries: atol = 3e-5 S, rtol 3e-5: room for the tensor cores' accumulation (block sums, possibly
// truncated), still well below what one wrongly rounded operand gives (alpha joining A after rounding
// instead of before: about 2^-9 per product, some 1e-3 S at K = 190 with alpha 0.7). The bias sums of the
// dbias entries add the same values in the same order on both devices: compared exactly.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "tensor/tensor.h"

enum { E_GEMM, E_B16, E_A16, E_A16_B16, E_B16_BIAS, E_A16_B16_BIAS, E_B16_DBIAS, E_A16_DBIAS, E_COUNT };
static const char *const entry_names[E_COUNT] = {"gemm",          "gemm_b16",          "gemm_a16",
                                                 "gemm_a16_b16",  "gemm_b16_bias",     "gemm_a16_b16_bias",
                                                 "gemm_b16_dbias", "gemm_a16_dbias"};

typedef struct {
    int M, N, K;
} shape;

typedef struct {
    float alpha, beta;
} scalars;

static unsigned next_seed = 1;  // a fresh fill per buffer

static size_t at_least_1(size_t n) { return n ? n : 1; }

// max over C's elements (i, j) of |alpha| sum_k |op(A)[i,k] op(B)[k,j]| + |beta C0[i,j]| (beta != 0) +
// |bias[j]| (bias not NULL), in double. A: (M, K) or, with ta, (K, M), leading dimension lda; B: (K, N) or,
// with tb, (N, K), ldb; C0: (M, ldc); bias: (N,) or NULL
static double term_scale(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                         int ldb, float beta, const float *C0, int ldc, const float *bias) {
    double worst = 0.0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double mag = 0.0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                mag += fabs(a * b);
            }
            mag *= fabs((double)alpha);
            if (beta != 0.0f) mag += fabs((double)beta * C0[(size_t)i * ldc + j]);
            if (bias) mag += fabs((double)bias[j]);
            worst = mag > worst ? mag : worst;
        }
    return worst;
}

// Calls entry e of table k on stream st. A: fp32 or bf16 as the entry takes it (M, K) / (K, M) with lda;
// B: likewise (K, N) / (N, K) with ldb; C: (M, ldc); bias: (N,) (the bias entries); dbias: (M,)
// (gemm_b16_dbias) or (N,) (gemm_a16_dbias). All host memory for the CPU table, device memory for CUDA.
static void call_entry(const fsdp_kernels *k, fsdp_stream *st, int e, int ta, int tb, int M, int N, int K,
                       float alpha, const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc,
                       const float *bias, float *dbias) {
    switch (e) {
    case E_GEMM: k->gemm(st, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    case E_B16: k->gemm_b16(st, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    case E_A16: k->gemm_a16(st, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    case E_A16_B16: k->gemm_a16_b16(st, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    case E_B16_BIAS: k->gemm_b16_bias(st, tb, M, N, K, A, lda, B, ldb, bias, C, ldc); break;
    case E_A16_B16_BIAS: k->gemm_a16_b16_bias(st, tb, M, N, K, A, lda, B, ldb, bias, C, ldc); break;
    case E_B16_DBIAS: k->gemm_b16_dbias(st, M, N, K, A, B, ldb, beta, C, ldc, dbias); break;
    case E_A16_DBIAS: k->gemm_a16_dbias(st, M, N, K, A, lda, B, beta, C, ldc, dbias); break;
    default: break;
    }
}

// One comparison of entry e of table `table` (0 fp32, 1 bf16) on shape s. The bias entries ignore ta,
// alpha and beta (no transposed A, alpha 1, C NaN-filled: it must be overwritten); the dbias entries use
// ta = 1, tb = 0, alpha 1 and a dense dout.
static void run_case(cuda_test *t, int table, int e, int ta, int tb, shape s, float alpha, float beta) {
    const int M = s.M, N = s.N, K = s.K;
    const int a16 = e == E_A16 || e == E_A16_B16 || e == E_A16_B16_BIAS || e == E_A16_DBIAS;
    const int b16 = e == E_B16 || e == E_A16_B16 || e == E_B16_BIAS || e == E_A16_B16_BIAS || e == E_B16_DBIAS;
    const int has_bias = e == E_B16_BIAS || e == E_A16_B16_BIAS;
    const int has_dbias = e == E_B16_DBIAS || e == E_A16_DBIAS;
    if (has_bias) ta = 0, alpha = 1.0f, beta = 0.0f;
    if (has_dbias) ta = 1, tb = 0, alpha = 1.0f;
    const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;  // stored shapes of A and B
    const int lda = e == E_B16_DBIAS ? M : ac + 3;  // gemm_b16_dbias: A is dout, dense
    const int ldb = e == E_A16_DBIAS ? N : bc + 5;  // gemm_a16_dbias: B is dout, dense
    const int ldc = N + 2;
    const size_t na = (size_t)ar * lda, nb = (size_t)br * ldb, nc = (size_t)M * ldc;
    const size_t nd = has_dbias ? (size_t)(e == E_B16_DBIAS ? M : N) : 0;  // dbias length

    float *a32 = calloc(at_least_1(na), sizeof(float));  // (ar, lda): A's values (widened when bf16)
    float *b32 = calloc(at_least_1(nb), sizeof(float));  // (br, ldb)
    fsdp_bf16 *a16h = calloc(at_least_1(na), sizeof(fsdp_bf16));  // (ar, lda): A in bf16 (a16)
    fsdp_bf16 *b16h = calloc(at_least_1(nb), sizeof(fsdp_bf16));  // (br, ldb): B in bf16 (b16)
    float *c0 = calloc(at_least_1(nc), sizeof(float));  // (M, ldc): C before the call
    float *c_cpu = calloc(at_least_1(nc), sizeof(float));  // (M, ldc): C after the CPU's call
    float *bias = calloc(at_least_1((size_t)N), sizeof(float));  // (N,)
    float *db0 = calloc(at_least_1(nd), sizeof(float));  // (nd,): dbias before the call
    float *db_cpu = calloc(at_least_1(nd), sizeof(float));  // (nd,): dbias after the CPU's call
    cuda_test_fill(a32, na, next_seed++, -1.0f, 1.0f);
    cuda_test_fill(b32, nb, next_seed++, -1.0f, 1.0f);
    for (size_t i = 0; i < na; i++) {
        a16h[i] = fsdp_f32_to_bf16(a32[i]);
        if (a16) a32[i] = fsdp_bf16_to_f32(a16h[i]);
    }
    for (size_t i = 0; i < nb; i++) {
        b16h[i] = fsdp_f32_to_bf16(b32[i]);
        if (b16) b32[i] = fsdp_bf16_to_f32(b16h[i]);
    }
    if (beta == 0.0f)
        for (size_t i = 0; i < nc; i++) c0[i] = NAN;
    else
        cuda_test_fill(c0, nc, next_seed++, -1.0f, 1.0f);
    cuda_test_fill(bias, (size_t)N, next_seed++, -1.0f, 1.0f);
    cuda_test_fill(db0, nd, next_seed++, -1.0f, 1.0f);
    if (nc) memcpy(c_cpu, c0, sizeof(float) * nc);
    if (nd) memcpy(db_cpu, db0, sizeof(float) * nd);

    const void *a_host = a16 ? (const void *)a16h : (const void *)a32;  // A as the entry takes it
    const void *b_host = b16 ? (const void *)b16h : (const void *)b32;  // B as the entry takes it
    const size_t a_esize = a16 ? sizeof(fsdp_bf16) : sizeof(float), b_esize = b16 ? sizeof(fsdp_bf16) : sizeof(float);
    call_entry(t->kc[table], t->cs, e, ta, tb, M, N, K, alpha, a_host, lda, b_host, ldb, beta, c_cpu, ldc, bias,
               has_dbias ? db_cpu : NULL);

    void *a_dev = cuda_test_upload(t, a_host, a_esize * at_least_1(na));  // A on the GPU
    void *b_dev = cuda_test_upload(t, b_host, b_esize * at_least_1(nb));  // B on the GPU
    float *c_dev = cuda_test_upload(t, c0, sizeof(float) * at_least_1(nc));  // (M, ldc)
    float *bias_dev = cuda_test_upload(t, bias, sizeof(float) * at_least_1((size_t)N));  // (N,)
    float *db_dev = cuda_test_upload(t, db0, sizeof(float) * at_least_1(nd));  // (nd,)
    call_entry(t->kg[table], t->gs, e, ta, tb, M, N, K, alpha, a_dev, lda, b_dev, ldb, beta, c_dev, ldc, bias_dev,
               has_dbias ? db_dev : NULL);
    float *c_gpu = cuda_test_download(t, c_dev, sizeof(float) * at_least_1(nc));  // (M, ldc), after a sync
    float *db_gpu = cuda_test_download(t, db_dev, sizeof(float) * at_least_1(nd));  // (nd,)
    CHECK(fsdp_stream_synchronize(t->gs) == FSDP_OK);  // no failure noted on the stream

    char what[200];
    snprintf(what, sizeof what, "%s %s ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g", t->kg[table]->name,
             entry_names[e], ta, tb, M, N, K, (double)alpha, (double)beta);
    if (nc) {
        double S = term_scale(ta, tb, M, N, K, alpha, a32, lda, b32, ldb, beta, c0, ldc, has_bias ? bias : NULL);
        double rel = (e == E_GEMM && table == 0) ? 1e-5 : 3e-5;
        cuda_test_compare(what, c_gpu, c_cpu, nc, rel * S + 1e-30, rel);
    }
    if (nd) {
        char what_d[240];
        snprintf(what_d, sizeof what_d, "%s (dbias)", what);
        cuda_test_compare(what_d, db_gpu, db_cpu, nd, 0.0, 0.0);
    }

    fsdp_dev_free(t->gpu, a_dev);
    fsdp_dev_free(t->gpu, b_dev);
    fsdp_dev_free(t->gpu, c_dev);
    fsdp_dev_free(t->gpu, bias_dev);
    fsdp_dev_free(t->gpu, db_dev);
    free(c_gpu), free(db_gpu);
    free(a32), free(b32), free(a16h), free(b16h), free(c0), free(c_cpu), free(bias), free(db0), free(db_cpu);
}

int main(void) {
    cuda_test t;
    cuda_test_open(&t);
    // sizes 1, 7, 33, 130 in every position, one larger product, K = 0 (C = beta * C, or the bias)
    static const shape shapes[] = {{1, 1, 1},   {7, 33, 130}, {130, 7, 33}, {33, 130, 7},   {130, 1, 33},
                                   {1, 130, 7}, {33, 7, 1},   {7, 33, 0},   {257, 300, 190}};
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    // alpha/beta: alpha 0 makes C = beta * C without the product
    static const scalars any_alpha[] = {{1.0f, 0.0f}, {0.7f, 1.0f}, {-1.3f, 0.5f}, {0.0f, 0.5f}};
    static const scalars alpha_1[] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {1.0f, 0.5f}};  // the a16 and dbias entries
    static const scalars bias_only[] = {{1.0f, 0.0f}};  // the bias entries take neither
    for (int table = 0; table < 2; table++)
        for (int e = 0; e < E_COUNT; e++) {
            const int has_bias = e == E_B16_BIAS || e == E_A16_B16_BIAS;
            const int has_dbias = e == E_B16_DBIAS || e == E_A16_DBIAS;
            const int n_ta = has_bias || has_dbias ? 1 : 2, n_tb = has_dbias ? 1 : 2;
            const scalars *sc = e == E_GEMM || e == E_B16 ? any_alpha : has_bias ? bias_only : alpha_1;
            const int n_sc = e == E_GEMM || e == E_B16 ? 4 : has_bias ? 1 : 3;
            for (int si = 0; si < n_shapes; si++)
                for (int ta = 0; ta < n_ta; ta++)
                    for (int tb = 0; tb < n_tb; tb++)
                        for (int c = 0; c < n_sc; c++)
                            run_case(&t, table, e, ta, tb, shapes[si], sc[c].alpha, sc[c].beta);
            // empty products: nothing to do (and no failure noted); the dbias entries still add the sums
            // of dout's columns (dbias (M,) with N = 0, dbias (N,) with M = 0)
            static const shape empty[] = {{0, 7, 33}, {7, 0, 33}, {0, 0, 5}};
            for (int si = 0; si < 3; si++) run_case(&t, table, e, 0, 0, empty[si], 1.0f, 0.0f);
        }
    // a large product with odd N and unaligned rows of C (ldc = N + 2 = 3503, as a vocabulary of 50257
    // makes the logits; 70 MB of C): the rounded copies' padded rows, C read (beta != 0) or not, the bias
    // form, A transposed or not
    static const shape big = {5000, 3501, 24};
    for (int table = 0; table < 2; table++) {
        run_case(&t, table, E_B16, 1, 1, big, 0.7f, 0.5f);
        run_case(&t, table, E_A16, 0, 0, big, 1.0f, 0.0f);
        run_case(&t, table, E_A16_B16_BIAS, 0, 1, big, 1.0f, 0.0f);
    }
    cuda_test_close(&t);
    if (test_failures) fprintf(stderr, "test_cuda_gemm: %d check(s) failed\n", test_failures);
    else printf("test_cuda_gemm: all checks passed\n");
    return test_failures ? 1 : 0;
}
