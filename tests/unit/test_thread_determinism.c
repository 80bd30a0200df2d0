// test_thread_determinism.c: every entry of the CPU kernel tables (fsdp_kernels_cpu() and
// fsdp_kernels_cpu_bf16()) gives the same bits on 1, 2, 3 and 4 OpenMP threads: the reductions
// (LayerNorm's dweight/dbias, the cross-entropy and abs-mean losses, bias gradients, embedding
// scatter-adds, sums of squares, attention, every GEMM path in every transposition, on shapes the GEMM
// wrapper cuts by rows and by columns) and, for completeness, the elementwise and fixed-point kernels.
// The deterministic mode needs it: a rank's bits must not depend on how many threads it runs. The fp32
// GEMM runs both serial kernels (OpenBLAS, and our AVX-512 one where the CPU has it), the bf16 GEMM every
// path the CPU has (AMX, VDPBF16PS, emulated). OpenBLAS picks its kernels
// when it loads (OPENBLAS_CORETYPE, else the CPU it detects), and whether a product cut differently
// rounds differently depends on those kernels (Haswell's do, in a few percent of elements); so unless
// OPENBLAS_CORETYPE is set, the test then reruns its OpenBLAS cases in a child process under each other
// OpenBLAS kernel set this CPU can run (Haswell: AVX2 and FMA; SkylakeX: AVX-512).
//
// Each case regenerates its inputs from a fixed seed, runs its kernels on the current thread count and
// appends every output to a blob (labelled segments). Every case runs on 1 thread first, then all on 2,
// 3 and 4 (the team only grows: libgomp ends the surplus threads when a smaller team follows a larger
// one, and the GEMMs' per-thread packing buffers would show up as leaks under the sanitizers). Each
// output's hash on 2, 3 and 4 threads must equal its 1-thread hash (a hash that mixes in one 8-byte
// word at a time with a bijection, so outputs that differ in one word never collide); a mismatch names
// the kernel and the output, and at the end the failing cases run once more on 1 thread and on the
// failing count to print the first differing element.
// The kernels run through the CPU tables on host memory (the CPU device's memory; the entries ignore
// their stream, so it is NULL here).
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/status.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "test.h"

// ---- outputs -----------------------------------------------------------------------------------

typedef struct {
    const char *label;  // the output's name
    size_t offset;      // its first byte in the blob
    size_t elem;        // bytes per element (for the index in a mismatch report)
} segment;

typedef struct {
    unsigned char *bytes;  // (n,)
    size_t n, cap;
    segment seg[32];  // (nseg,)
    int nseg;
} blob;

// appends `count` elements of `elem` bytes at src (count * elem bytes) as output `label`
static void put(blob *b, const char *label, const void *src, size_t elem, size_t count) {
    size_t bytes = elem * count;
    if (b->n + bytes > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + bytes) cap *= 2;
        b->bytes = realloc(b->bytes, cap);
        FSDP_ASSERT(b->bytes != NULL);
        b->cap = cap;
    }
    FSDP_ASSERT(b->nseg < 32);
    b->seg[b->nseg++] = (segment){label, b->n, elem};
    memcpy(b->bytes + b->n, src, bytes);
    b->n += bytes;
}

static void blob_clear(blob *b) { b->n = 0, b->nseg = 0; }

// ---- inputs ------------------------------------------------------------------------------------

static uint64_t rng_state;
static void seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ull + 1; }
static uint32_t next_u32(void) {  // xorshift64*
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}
static float uniform(float lo, float hi) { return lo + (hi - lo) * (float)(next_u32() >> 8) * (1.0f / 16777216.0f); }

// x (n,) = uniform values in [lo, hi), every fourth one scaled down by 2^-1 .. 2^-12 (values of many
// binades, so that sums in double round too), a few exactly zero
static float *rand_floats(size_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    FSDP_ASSERT(x != NULL);
    for (size_t i = 0; i < n; i++) {
        x[i] = i % 1009 == 7 ? 0.0f : uniform(lo, hi);
        if (i % 4 == 3) x[i] = ldexpf(x[i], -1 - (int)(next_u32() % 12));
    }
    return x;
}

// idx (n,) = integers in [0, bound)
static int32_t *rand_ints(size_t n, int bound) {
    int32_t *x = malloc(sizeof(int32_t) * (n ? n : 1));
    FSDP_ASSERT(x != NULL);
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)(next_u32() % (uint32_t)bound);
    return x;
}

// (n,) bf16 values of uniform floats in [lo, hi)
static fsdp_bf16 *rand_bf16(size_t n, float lo, float hi) {
    fsdp_bf16 *x = malloc(sizeof(fsdp_bf16) * (n ? n : 1));
    FSDP_ASSERT(x != NULL);
    for (size_t i = 0; i < n; i++) x[i] = fsdp_f32_to_bf16(uniform(lo, hi));
    return x;
}

// ---- cases ---------------------------------------------------------------------------------------

static const fsdp_kernels *K32, *K16;  // the fp32 and bf16 CPU tables
#define ST NULL                          // the CPU entries ignore their stream

typedef struct {
    int a, b, c, d;  // shape parameters (meaning per case)
} shape;

// LayerNorm forward and backward: N rows of C (a = N, b = C); dweight/dbias start non-zero (they accumulate)
static void case_layernorm(blob *o, const shape *s) {
    int N = s->a, C = s->b;
    seed(1);
    float *inp = rand_floats((size_t)N * C, -2.0f, 3.0f);   // (N, C)
    float *dout = rand_floats((size_t)N * C, -1.0f, 1.0f);  // (N, C)
    float *w = rand_floats((size_t)C, 0.5f, 1.5f), *bias = rand_floats((size_t)C, -0.5f, 0.5f);  // (C,)
    float *dw = rand_floats((size_t)C, -0.1f, 0.1f), *db = rand_floats((size_t)C, -0.1f, 0.1f);  // (C,)
    float *out = malloc(sizeof(float) * (size_t)N * C), *dinp = malloc(sizeof(float) * (size_t)N * C);  // (N, C)
    float *mean = malloc(sizeof(float) * (size_t)N), *rstd = malloc(sizeof(float) * (size_t)N);          // (N,)
    K32->layernorm_forward(ST, out, NULL, mean, rstd, inp, w, bias, N, C, 1e-5f);
    put(o, "layernorm_forward out", out, 4, (size_t)N * C);
    put(o, "layernorm_forward mean", mean, 4, (size_t)N);
    put(o, "layernorm_forward rstd", rstd, 4, (size_t)N);
    K32->layernorm_backward(ST, dinp, dw, db, dout, NULL, inp, w, mean, rstd, N, C);
    put(o, "layernorm_backward dinp", dinp, 4, (size_t)N * C);
    put(o, "layernorm_backward dweight", dw, 4, (size_t)C);
    put(o, "layernorm_backward dbias", db, 4, (size_t)C);
    K32->layernorm_backward(ST, dinp, dw, db, dout, NULL, inp, w, mean, rstd, N, C);  // accumulates again
    put(o, "layernorm_backward dweight (2nd call)", dw, 4, (size_t)C);
    put(o, "layernorm_backward dbias (2nd call)", db, 4, (size_t)C);
    free(inp), free(dout), free(w), free(bias), free(dw), free(db), free(out), free(dinp), free(mean), free(rstd);
}

// RMSNorm forward, backward and fused with the residual add: N rows of C (a = N, b = C); dweight starts
// non-zero (it accumulates)
static void case_rmsnorm(blob *o, const shape *s) {
    int N = s->a, C = s->b;
    seed(11);
    float *inp = rand_floats((size_t)N * C, -2.0f, 3.0f);   // (N, C)
    float *dout = rand_floats((size_t)N * C, -1.0f, 1.0f);  // (N, C)
    float *w = rand_floats((size_t)C, 0.5f, 1.5f), *dw = rand_floats((size_t)C, -0.1f, 0.1f);  // (C,)
    float *out = malloc(sizeof(float) * (size_t)N * C), *dinp = malloc(sizeof(float) * (size_t)N * C);  // (N, C)
    float *rstd = malloc(sizeof(float) * (size_t)N);                                                     // (N,)
    K32->rmsnorm_forward(ST, out, NULL, rstd, inp, w, N, C, 1e-6f);
    put(o, "rmsnorm_forward out", out, 4, (size_t)N * C);
    put(o, "rmsnorm_forward rstd", rstd, 4, (size_t)N);
    K32->rmsnorm_backward(ST, dinp, dw, dout, NULL, inp, w, rstd, N, C);
    put(o, "rmsnorm_backward dinp", dinp, 4, (size_t)N * C);
    put(o, "rmsnorm_backward dweight", dw, 4, (size_t)C);
    K32->residual_rmsnorm_forward(ST, dinp, out, NULL, rstd, inp, dout, w, N, C, 1e-6f);
    put(o, "residual_rmsnorm_forward res", dinp, 4, (size_t)N * C);
    put(o, "residual_rmsnorm_forward out", out, 4, (size_t)N * C);
    put(o, "residual_rmsnorm_forward rstd", rstd, 4, (size_t)N);
    free(inp), free(dout), free(w), free(dw), free(out), free(dinp), free(rstd);
}

// rotary embedding forward and backward: B*T rows of `heads` heads of D (a = B, b = T, c = heads, d = D)
static void case_rope(blob *o, const shape *s) {
    int B = s->a, T = s->b, heads = s->c, D = s->d;
    size_t n = (size_t)B * T * heads * D, na = (size_t)T * (D / 2);
    seed(12);
    float *x = rand_floats(n, -2.0f, 2.0f), *dx = rand_floats(n, -1.0f, 1.0f);  // (B*T, heads*D)
    float *cos_t = rand_floats(na, -1.0f, 1.0f), *sin_t = rand_floats(na, -1.0f, 1.0f);  // (T, D/2)
    K32->rope_forward(ST, x, cos_t, sin_t, B, T, heads, D);
    put(o, "rope_forward", x, 4, n);
    K32->rope_backward(ST, dx, cos_t, sin_t, B, T, heads, D);
    put(o, "rope_backward", dx, 4, n);
    free(x), free(dx), free(cos_t), free(sin_t);
}

// softmax cross-entropy: N rows of V classes (a = N, b = V)
static void case_cross_entropy(blob *o, const shape *s) {
    int N = s->a, V = s->b;
    seed(2);
    float *logits = rand_floats((size_t)N * V, -4.0f, 4.0f);  // (N, V)
    int32_t *tgt = rand_ints((size_t)N, V);                   // (N,)
    float *stats = malloc(sizeof(float) * 2 * (size_t)N);                    // (N, 2)
    float *dlogits = malloc(sizeof(float) * (size_t)N * V);                  // (N, V)
    float *losses = malloc(sizeof(float) * (size_t)N);  // (N,)
    double loss = -1.0;
    K32->cross_entropy_forward(ST, &loss, losses, stats, logits, tgt, N, V);
    put(o, "cross_entropy_forward loss", &loss, 8, 1);
    put(o, "cross_entropy_forward losses", losses, 4, (size_t)N);
    put(o, "cross_entropy_forward stats", stats, 4, 2 * (size_t)N);
    K32->cross_entropy_backward(ST, dlogits, logits, stats, tgt, 1.0f / (float)N, N, V);
    put(o, "cross_entropy_backward dlogits", dlogits, 4, (size_t)N * V);
    free(logits), free(tgt), free(stats), free(dlogits), free(losses);
}

// abs-mean loss and sum of squares over n values (a = n); sum_squares adds into 0.25
static void case_reductions(blob *o, const shape *s) {
    size_t n = (size_t)s->a;
    seed(3);
    float *y = rand_floats(n, -3.0f, 2.0f), *dy = malloc(sizeof(float) * (n ? n : 1));  // (n,)
    double loss = -1.0, ss = 0.25;
    K32->abs_mean_forward(ST, &loss, y, n);
    put(o, "abs_mean_forward loss", &loss, 8, 1);
    K32->abs_mean_backward(ST, dy, y, n, 0.75f);
    put(o, "abs_mean_backward dy", dy, 4, n);
    K32->sum_squares(ST, &ss, y, n);
    put(o, "sum_squares acc", &ss, 8, 1);
    K32->sum_squares(ST, &ss, dy, n);
    put(o, "sum_squares acc (2nd buffer)", &ss, 8, 1);
    free(y), free(dy);
}

// bias gradient, bias add and row fill: N rows of C (a = N, b = C)
static void case_bias(blob *o, const shape *s) {
    int N = s->a, C = s->b;
    seed(4);
    float *dout = rand_floats((size_t)N * C, -1.0f, 1.0f);  // (N, C)
    float *db = rand_floats((size_t)C, -0.1f, 0.1f);        // (C,)
    float *bias = rand_floats((size_t)C, -1.0f, 1.0f);      // (C,)
    float *out = malloc(sizeof(float) * (size_t)N * C);     // (N, C)
    K32->bias_backward(ST, db, dout, N, C);
    put(o, "bias_backward dbias", db, 4, (size_t)C);
    K32->fill_rows(ST, out, bias, N, C);
    put(o, "fill_rows out", out, 4, (size_t)N * C);
    K32->bias_add(ST, out, dout, 1, C);  // a row of dout as the bias
    K32->bias_add(ST, out, bias, N, C);
    put(o, "bias_add out", out, 4, (size_t)N * C);
    free(dout), free(db), free(bias), free(out);
}

// embedding lookups and the scatter-add gradient: N tokens of C channels, vocabulary V (a = N, b = C,
// c = V); indices drawn from the first V/8 rows so most rows receive many rows of dout
static void case_embedding(blob *o, const shape *s) {
    int N = s->a, C = s->b, V = s->c;
    seed(5);
    float *table = rand_floats((size_t)V * C, -1.0f, 1.0f);        // (V, C)
    fsdp_bf16 *table16 = rand_bf16((size_t)V * C, -1.0f, 1.0f);     // (V, C)
    float *dtable = rand_floats((size_t)V * C, -0.01f, 0.01f);      // (V, C)
    float *dout = rand_floats((size_t)N * C, -1.0f, 1.0f);         // (N, C)
    int32_t *idx = rand_ints((size_t)N, V / 8 > 0 ? V / 8 : 1);    // (N,)
    float *out = malloc(sizeof(float) * (size_t)N * C);            // (N, C)
    K32->embedding_forward(ST, out, idx, table, N, C, 0);
    K32->embedding_forward(ST, out, idx, table, N, C, 1);
    put(o, "embedding_forward out", out, 4, (size_t)N * C);
    K32->embedding_forward_b16(ST, out, idx, table16, N, C, 1);
    put(o, "embedding_forward_b16 out (accumulate)", out, 4, (size_t)N * C);
    K32->embedding_forward_b16(ST, out, idx, table16, N, C, 0);
    put(o, "embedding_forward_b16 out", out, 4, (size_t)N * C);
    K32->embedding_backward(ST, dtable, dout, idx, N, C);
    put(o, "embedding_backward dtable", dtable, 4, (size_t)V * C);
    free(table), free(table16), free(dtable), free(dout), free(idx), free(out);
}

// attention forward and backward through table k: B, T, C, H = a, b, c, d; causal with dropout on
// batch-first rows, or neither on sequence-first rows (negative d: H = -d, sequence first); kv_heads
// key/value heads (0: H), qkv planar or interleaved
static void attention_case(const fsdp_kernels *k, blob *o, const shape *s, int kv_heads, int planar) {
    int seq_first = s->d < 0;
    fsdp_attention_dims d = {.B = s->a, .T = s->b, .C = s->c, .H = seq_first ? -s->d : s->d, .kv_heads = kv_heads,
                             .planar = planar};
    d.stride_b = seq_first ? 1 : d.T;
    d.stride_t = seq_first ? d.B : 1;
    d.causal = !seq_first;
    d.dropout_p = seq_first ? 0.0f : 0.1f;
    d.rng = (fsdp_rng){77, 5};
    size_t rows = (size_t)d.B * d.T, n3 = fsdp_attention_qkv_floats(&d);
    seed(6);
    float *qkv = rand_floats(n3, -1.5f, 1.5f);                            // (n3,): B*T tokens of q, k and v
    float *dout = rand_floats(rows * d.C, -1.0f, 1.0f);                   // (B*T, C)
    float *out = malloc(sizeof(float) * rows * d.C);                      // (B*T, C)
    float *att = malloc(sizeof(float) * (size_t)d.B * d.H * d.T);  // (B, H, T) row statistics
    float *dqkv = malloc(sizeof(float) * n3);                             // (n3,): qkv's layout
    k->attention_forward(ST, out, att, qkv, &d);
    put(o, "attention_forward out", out, 4, rows * d.C);
    put(o, "attention_forward att", att, 4, (size_t)d.B * d.H * d.T);
    k->attention_backward(ST, dqkv, dout, qkv, out, att, &d);
    put(o, "attention_backward dqkv", dqkv, 4, n3);
    free(qkv), free(dout), free(out), free(att), free(dqkv);
}
static void case_attention(blob *o, const shape *s) { attention_case(K32, o, s, 0, 0); }
static void case_attention_bf16(blob *o, const shape *s) { attention_case(K16, o, s, 0, 0); }
// grouped-query: a key/value head per two query heads, planar qkv (and one per four, interleaved)
static void case_attention_gqa(blob *o, const shape *s) {
    attention_case(K32, o, s, abs(s->d) / 2, 1);
    attention_case(K32, o, s, abs(s->d) / 4, 0);
}
static void case_attention_gqa_bf16(blob *o, const shape *s) {
    attention_case(K16, o, s, abs(s->d) / 2, 1);
    attention_case(K16, o, s, abs(s->d) / 4, 0);
}

// C = alpha op(A) op(B) + beta C for all four transpositions, M, N, K = a, b, c; beta 0 and 1 (the
// gradients' accumulation), leading dimensions wider than the rows. Through the fp32 table's gemm
// (fp32 = 1), or the bf16 table's gemm and gemm_b16.
static void gemm_case(blob *o, const shape *s, int fp32) {
    int M = s->a, N = s->b, Kd = s->c;
    static const char *labels[2][4][2] = {
        {{"gemm NN beta 0", "gemm NN beta 1"}, {"gemm NT beta 0", "gemm NT beta 1"},
         {"gemm TN beta 0", "gemm TN beta 1"}, {"gemm TT beta 0", "gemm TT beta 1"}},
        {{"gemm(bf16) NN / gemm_b16 NN", "gemm(bf16) NN / gemm_b16 NN beta 1"},
         {"gemm(bf16) NT / gemm_b16 NT", "gemm(bf16) NT / gemm_b16 NT beta 1"},
         {"gemm(bf16) TN / gemm_b16 TN", "gemm(bf16) TN / gemm_b16 TN beta 1"},
         {"gemm(bf16) TT / gemm_b16 TT", "gemm(bf16) TT / gemm_b16 TT beta 1"}}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : Kd) + 3, ldb = (tb ? Kd : N) + 1, ldc = N + 5;
            size_t asz = (size_t)(ta ? Kd : M) * lda, bsz = (size_t)(tb ? N : Kd) * ldb, csz = (size_t)M * ldc;
            seed(7 + (uint64_t)(2 * ta + tb));
            float *A = rand_floats(asz, -1.0f, 1.0f);   // op(A): (M, K); stored (M, lda) or (K, lda)
            float *B = rand_floats(bsz, -1.0f, 1.0f);   // op(B): (K, N); stored (K, ldb) or (N, ldb)
            float *C0 = rand_floats(csz, -1.0f, 1.0f);  // (M, ldc)
            float *C = malloc(sizeof(float) * csz);     // (M, ldc)
            fsdp_bf16 *B16 = malloc(sizeof(fsdp_bf16) * bsz);  // B in bf16, same layout
            for (size_t i = 0; i < bsz; i++) B16[i] = fsdp_f32_to_bf16(B[i]);
            for (int beta1 = 0; beta1 < 2; beta1++) {
                float alpha = beta1 ? 0.75f : 1.0f, beta = beta1 ? 1.0f : 0.0f;
                memcpy(C, C0, sizeof(float) * csz);
                if (fp32) {
                    K32->gemm(ST, ta, tb, M, N, Kd, alpha, A, lda, B, ldb, beta, C, ldc);
                    put(o, labels[0][2 * ta + tb][beta1], C, 4, csz);
                } else {
                    K16->gemm(ST, ta, tb, M, N, Kd, alpha, A, lda, B, ldb, beta, C, ldc);
                    K16->gemm_b16(ST, ta, tb, M, N, Kd, alpha, A, lda, B16, ldb, 1.0f, C, ldc);
                    put(o, labels[1][2 * ta + tb][beta1], C, 4, csz);
                }
            }
            free(A), free(B), free(C0), free(C), free(B16);
        }
}
static void case_gemm(blob *o, const shape *s) { gemm_case(o, s, 1); }
static void case_gemm_bf16(blob *o, const shape *s) { gemm_case(o, s, 0); }

// the elementwise kernels over n values (a = n)
static void case_elementwise(blob *o, const shape *s) {
    size_t n = (size_t)s->a;
    seed(8);
    float *x = rand_floats(n, -4.0f, 4.0f), *y = rand_floats(n, -1.0f, 1.0f);  // (n,)
    float *m = rand_floats(n, -0.1f, 0.1f), *v = rand_floats(n, 0.0f, 0.01f);   // (n,)
    float *out = malloc(sizeof(float) * n), *buf = malloc(sizeof(float) * n);   // (n,)
    fsdp_bf16 *h = malloc(sizeof(fsdp_bf16) * n);                               // (n,)
    fsdp_rng rng = {99, 3};
    K32->relu_forward(ST, out, x, n);
    put(o, "relu_forward", out, 4, n);
    K32->relu_backward(ST, out, y, x, n);
    put(o, "relu_backward", out, 4, n);
    for (int t = 0; t < 2; t++) {
        K32->gelu_forward(ST, out, x, n, t);
        put(o, t ? "gelu_forward tanh" : "gelu_forward erf", out, 4, n);
        K32->gelu_backward(ST, out, y, x, n, t);
        put(o, t ? "gelu_backward tanh" : "gelu_backward erf", out, 4, n);
    }
    K32->swiglu_forward(ST, out, NULL, x, y, n);
    put(o, "swiglu_forward", out, 4, n);
    K32->swiglu_forward(ST, out, h, x, y, n);
    put(o, "swiglu_forward bf16", h, 2, n);
    K32->swiglu_backward(ST, out, buf, m, x, y, n);
    put(o, "swiglu_backward dgate", out, 4, n);
    put(o, "swiglu_backward dup", buf, 4, n);
    K32->dropout_forward(ST, out, x, n, 0.3f, rng);
    put(o, "dropout_forward", out, 4, n);
    K32->dropout_backward(ST, out, y, n, 0.3f, rng);
    put(o, "dropout_backward", out, 4, n);
    K32->add(ST, out, x, y, n);
    K32->add_inplace(ST, out, y, n);
    K32->scale(ST, out, 0.37f, n);
    put(o, "add / add_inplace / scale", out, 4, n);
    K32->f32_to_bf16(ST, h, x, n);
    put(o, "f32_to_bf16", h, 2, n);
    K32->add_inplace_b16(ST, out, h, n);
    put(o, "add_inplace_b16", out, 4, n);
    K32->bf16_to_f32(ST, out, h, n);
    put(o, "bf16_to_f32", out, 4, n);
    memcpy(buf, x, sizeof(float) * n);
    K32->f32_to_bf16_in_place(ST, buf, n);
    put(o, "f32_to_bf16_in_place", buf, 2, n);
    memcpy(out, x, sizeof(float) * n);
    for (int step = 1; step <= 2; step++)
        K32->adamw_update(ST, out, y, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1e-3f / 0.1f, 0.03f * (float)step);
    put(o, "adamw_update param", out, 4, n);
    put(o, "adamw_update m", m, 4, n);
    put(o, "adamw_update v", v, 4, n);
    memcpy(out, x, sizeof(float) * n);
    K32->sgd_update(ST, out, y, buf, n, 0.1f, 0.9f, 0.1f, 0.01f, 1, 1);
    K32->sgd_update(ST, out, y, buf, n, 0.1f, 0.9f, 0.1f, 0.01f, 1, 0);
    put(o, "sgd_update param", out, 4, n);
    put(o, "sgd_update momentum", buf, 4, n);
    free(x), free(y), free(m), free(v), free(out), free(buf), free(h);
}

// the deterministic mode's fixed-point kernels over n values (a = n): digits in blocks of 4099 and in
// one block of n, the value back from the one-block digits, and the exact sum of squares
static void case_fixed_point(blob *o, const shape *s) {
    size_t n = (size_t)s->a, block = 4099, nblk = (n + block - 1) / block;
    const fsdp_fixed_format f = {.limbs = 4, .limb_bits = 22, .frac_bits = 64};
    seed(9);
    float *g = rand_floats(n, -3.0f, 3.0f);                                       // (n,)
    float *blocked = calloc(nblk * block * (size_t)f.limbs, sizeof(float));       // (nblk, limbs, block)
    float *digits = calloc(n * (size_t)f.limbs, sizeof(float));                   // (limbs, n)
    float *back = malloc(sizeof(float) * n);                                      // (n,)
    int64_t words[FSDP_XSUM_WORDS] = {0};                                         // (FSDP_XSUM_WORDS,)
    FSDP_ASSERT(blocked != NULL && digits != NULL && back != NULL);
    K32->fixed_quantize(ST, blocked, g, n, block, &f);
    put(o, "fixed_quantize (blocks of 4099)", blocked, 4, nblk * block * (size_t)f.limbs);
    K32->fixed_quantize(ST, digits, g, n, n, &f);
    put(o, "fixed_quantize (one block)", digits, 4, n * (size_t)f.limbs);
    K32->fixed_finalize(ST, back, digits, n, &f, 0.5);
    put(o, "fixed_finalize", back, 4, n);
    K32->sum_squares_exact(ST, words, g, n);
    K32->sum_squares_exact(ST, words, back, n);
    put(o, "sum_squares_exact words", words, 8, FSDP_XSUM_WORDS);
    free(g), free(blocked), free(digits), free(back);
}

typedef struct {
    const char *name;
    void (*fn)(blob *, const shape *);
    shape s;
    int gemm;  // 1: runs the fp32 GEMM (once per serial GEMM kernel); 2: the bf16 GEMM (once per bf16 path)
} kcase;

// Realistic shapes (GPT-2 small widths and a 2 x 256-token batch) and odd ones. The GEMM shapes are
// those of a linear layer's forward and backward (N x C by C x 4C, dW = dout^T x, dx = dout W, the
// LM head), shapes cut into pieces by rows and by columns, and M = 160 and M = 128 with wide N, which
// cpu_gemm once cut by rows on 2 threads and by columns on 3 and 4.
static const kcase cases[] = {
    {"layernorm N=512 C=128", case_layernorm, {512, 128, 0, 0}, 0},
    {"layernorm N=512 C=768", case_layernorm, {512, 768, 0, 0}, 0},
    {"layernorm N=333 C=77", case_layernorm, {333, 77, 0, 0}, 0},
    {"layernorm N=20000 C=64", case_layernorm, {20000, 64, 0, 0}, 0},
    {"rmsnorm N=512 C=128", case_rmsnorm, {512, 128, 0, 0}, 0},
    {"rmsnorm N=20000 C=64", case_rmsnorm, {20000, 64, 0, 0}, 0},
    {"rope B=2 T=67 heads=5 D=26", case_rope, {2, 67, 5, 26}, 0},
    {"rope B=4 T=256 heads=8 D=64", case_rope, {4, 256, 8, 64}, 0},
    {"cross_entropy N=512 V=512", case_cross_entropy, {512, 512, 0, 0}, 0},
    {"cross_entropy N=333 V=517", case_cross_entropy, {333, 517, 0, 0}, 0},
    {"cross_entropy N=5 V=7", case_cross_entropy, {5, 7, 0, 0}, 0},
    {"abs_mean / sum_squares n=262151", case_reductions, {262151, 0, 0, 0}, 0},
    {"abs_mean / sum_squares n=1000", case_reductions, {1000, 0, 0, 0}, 0},
    {"abs_mean / sum_squares n=5000011", case_reductions, {5000011, 0, 0, 0}, 0},
    {"bias N=512 C=512", case_bias, {512, 512, 0, 0}, 0},
    {"bias N=333 C=100", case_bias, {333, 100, 0, 0}, 0},
    {"embedding N=512 C=128 V=512", case_embedding, {512, 128, 512, 0}, 0},
    {"embedding N=512 C=768 V=512", case_embedding, {512, 768, 512, 0}, 0},
    {"embedding N=333 C=77 V=50", case_embedding, {333, 77, 50, 0}, 0},
    {"elementwise n=200003", case_elementwise, {200003, 0, 0, 0}, 0},
    {"fixed point n=200003", case_fixed_point, {200003, 0, 0, 0}, 0},
    {"attention B=2 T=256 C=128 H=4 causal dropout", case_attention, {2, 256, 128, 4}, 1},
    {"attention B=3 T=65 C=96 H=3 seq-first", case_attention, {3, 65, 96, -3}, 1},
    {"attention B=2 T=256 C=128 H=4 kv 2 and 1 causal dropout", case_attention_gqa, {2, 256, 128, 4}, 1},
    {"attention B=3 T=65 C=96 H=8 kv 4 and 2 seq-first", case_attention_gqa, {3, 65, 96, -8}, 1},
    {"gemm 512x512x128 (cut by rows)", case_gemm, {512, 512, 128, 0}, 1},
    {"gemm 256x768x512", case_gemm, {256, 768, 512, 0}, 1},
    {"gemm 160x768x512", case_gemm, {160, 768, 512, 0}, 1},
    {"gemm 128x1024x256", case_gemm, {128, 1024, 256, 0}, 1},
    {"gemm 64x3100x40 (cut by columns)", case_gemm, {64, 3100, 40, 0}, 1},
    {"gemm 128x512x512 (dW)", case_gemm, {128, 512, 512, 0}, 1},
    {"gemm 333x517x100", case_gemm, {333, 517, 100, 0}, 1},
    {"gemm 30x20x10 (serial)", case_gemm, {30, 20, 10, 0}, 1},
    {"attention(bf16) B=2 T=256 C=128 H=4 causal dropout", case_attention_bf16, {2, 256, 128, 4}, 2},
    {"attention(bf16) B=3 T=65 C=96 H=3 seq-first", case_attention_bf16, {3, 65, 96, -3}, 2},
    {"attention(bf16) B=2 T=256 C=128 H=4 kv 2 and 1", case_attention_gqa_bf16, {2, 256, 128, 4}, 2},
    {"gemm(bf16) 512x512x128", case_gemm_bf16, {512, 512, 128, 0}, 2},
    {"gemm(bf16) 160x768x512", case_gemm_bf16, {160, 768, 512, 0}, 2},
    {"gemm(bf16) 128x1024x256", case_gemm_bf16, {128, 1024, 256, 0}, 2},
    {"gemm(bf16) 333x517x100", case_gemm_bf16, {333, 517, 100, 0}, 2},
};

// where blobs a and b (same segments) first differ: prints the output and element
static void report(const char *name, const char *path, int threads, const blob *a, const blob *b) {
    if (a->n != b->n || a->nseg != b->nseg) {
        fprintf(stderr, "  %s [%s]: %d threads wrote %zu bytes in %d outputs, 1 thread %zu in %d\n", name, path,
                threads, b->n, b->nseg, a->n, a->nseg);
        return;
    }
    for (int i = 0; i < a->nseg; i++) {
        size_t end = i + 1 < a->nseg ? a->seg[i + 1].offset : a->n, off = a->seg[i].offset, elem = a->seg[i].elem;
        if (memcmp(a->bytes + off, b->bytes + off, end - off) == 0) continue;
        size_t e = 0, count = 0;
        for (size_t k = off; k < end; k += elem)
            if (memcmp(a->bytes + k, b->bytes + k, elem)) {
                if (!count) e = (k - off) / elem;
                count++;
            }
        double va = 0.0, vb = 0.0;  // the first differing element's values
        if (elem == 8) memcpy(&va, a->bytes + off + e * 8, 8), memcpy(&vb, b->bytes + off + e * 8, 8);
        if (elem == 4) {
            float fa, fb;
            memcpy(&fa, a->bytes + off + e * 4, 4), memcpy(&fb, b->bytes + off + e * 4, 4);
            va = fa, vb = fb;
        }
        fprintf(stderr, "  %s [%s]: %s on %d threads: %zu of %zu elements differ, first [%zu] %.17g (1 thread "
                        "%.17g)\n",
                name, path, a->seg[i].label, threads, count, (end - off) / elem, e, vb, va);
    }
}

// bytes p (n,) hashed 8 at a time: each step (h ^ word) * odd constant, then h ^= h >> 32, is a bijection
// of the word for a given h and of h for a given word, so blobs that differ in one word always differ
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    for (; i < n; i++) {
        h = (h ^ p[i]) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 32;
    }
    return h;
}

// A case on given GEMM paths: what one run of the thread-count loop executes.
typedef struct {
    const kcase *c;
    const char *gemm;       // cpu_gemm_select's name
    const char *bf16;       // cpu_gemm_bf16_select's name, or NULL for fp32 cases
    char path[64];          // both, for messages
    uint64_t hash[32];      // (nseg,) each output's hash on 1 thread
    size_t bytes;           // the blob's size on 1 thread
    int nseg;
    int failed_threads;     // the first thread count that differed, 0 if none
} krun;

static void execute(krun *r, blob *out) {
    cpu_gemm_select(r->gemm);
    if (r->bf16) cpu_gemm_bf16_select(r->bf16);
    blob_clear(out);
    r->c->fn(out, &r->c->s);
}

// hashes of each output of blob b into h (b->nseg,)
static void hash_outputs(const blob *b, uint64_t *h) {
    for (int i = 0; i < b->nseg; i++) {
        size_t end = i + 1 < b->nseg ? b->seg[i + 1].offset : b->n;
        h[i] = hash_bytes(b->bytes + b->seg[i].offset, end - b->seg[i].offset);
    }
}

// runs (nruns,) on 1, then 2, 3 and 4 threads; returns the number of runs that differed
static int run_all(krun *runs, int nruns) {
    blob out = {0}, again = {0};
    uint64_t h[32];
    for (int t = 1; t <= 4; t++) {
        omp_set_num_threads(t);
        for (int r = 0; r < nruns; r++) {
            krun *k = &runs[r];
            execute(k, &out);
            hash_outputs(&out, h);
            if (t == 1) {
                memcpy(k->hash, h, sizeof h);
                k->bytes = out.n, k->nseg = out.nseg;
                continue;
            }
            int same = out.n == k->bytes && out.nseg == k->nseg;
            for (int i = 0; same && i < out.nseg; i++) same = h[i] == k->hash[i];
            if (!same && !k->failed_threads) k->failed_threads = t;
            if (t == 4) printf("%s %s [%s]\n", k->failed_threads ? "FAIL" : "ok  ", k->c->name, k->path);
        }
    }
    int failed = 0;
    fflush(stdout);
    for (int r = 0; r < nruns; r++) {  // the details, once every thread count has run
        krun *k = &runs[r];
        if (!k->failed_threads) continue;
        failed++;
        omp_set_num_threads(1);
        execute(k, &out);
        omp_set_num_threads(k->failed_threads);
        execute(k, &again);
        fprintf(stderr, "FAIL %s [%s] depends on the thread count:\n", k->c->name, k->path);
        report(k->c->name, k->path, k->failed_threads, &out, &again);
    }
    free(out.bytes), free(again.bytes);
    return failed;
}

// Runs this program again with OPENBLAS_CORETYPE=core and FSDP_TEST_OPENBLAS_ONLY=1; 1 when it passes.
static int rerun_with_coretype(const char *core) {
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OPENBLAS_CORETYPE", core, 1);
        setenv("FSDP_TEST_OPENBLAS_ONLY", "1", 1);
        execl("/proc/self/exe", "test_thread_determinism", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(void) {
    K32 = fsdp_kernels_cpu();
    K16 = fsdp_kernels_cpu_bf16();
    int saved = omp_get_max_threads();
    // a child of rerun_with_coretype: only the cases that run OpenBLAS, only on the OpenBLAS paths
    int openblas_only = getenv("FSDP_TEST_OPENBLAS_ONLY") != NULL;
    if (openblas_only) printf("OpenBLAS kernels: OPENBLAS_CORETYPE=%s\n", getenv("OPENBLAS_CORETYPE"));
    // the serial fp32 GEMMs cpu_gemm can run (FSDP_GEMM=openblas|avx512)
    const char *gemm_paths[2] = {"openblas", "avx512"};
    int n_gemm_paths = cpu_sgemm_avx512_available() && !openblas_only ? 2 : 1;
    // the bf16 GEMM paths the CPU has (selecting one it lacks falls back, so duplicates are skipped)
    const char *bf16_req[3] = {NULL, "avx512bf16", "emulate"}, *bf16_paths[3];
    int n_bf16_paths = 0;
    for (int i = 0; i < 3; i++) {
        cpu_gemm_bf16_select(bf16_req[i]);
        const char *name = cpu_gemm_bf16_name();
        int dup = 0;
        for (int j = 0; j < n_bf16_paths; j++) dup |= strcmp(bf16_paths[j], name) == 0;
        if (openblas_only && strcmp(name, "emulate") != 0) dup = 1;  // no OpenBLAS inside
        if (!dup) bf16_paths[n_bf16_paths++] = name;
    }
    // every case on every GEMM path that matters to it: the fp32 GEMM to every case that multiplies (the
    // bf16 emulation runs it too), the bf16 path to the bf16 cases
    int ncases = (int)(sizeof cases / sizeof cases[0]), nruns = 0;
    krun *runs = calloc((size_t)ncases * 6, sizeof(krun));  // (ncases * 6,): at most 6 paths a case
    FSDP_ASSERT(runs != NULL);
    for (int i = 0; i < ncases; i++) {
        const kcase *c = &cases[i];
        if (openblas_only && !c->gemm) continue;
        for (int g = 0; g < (c->gemm ? n_gemm_paths : 1); g++) {
            int emulate_only = g > 0;  // the other bf16 paths run no fp32 GEMM: once is enough
            for (int p = 0; p < (c->gemm == 2 ? n_bf16_paths : 1); p++) {
                if (c->gemm == 2 && emulate_only && strcmp(bf16_paths[p], "emulate") != 0) continue;
                krun *r = &runs[nruns++];
                r->c = c;
                r->gemm = gemm_paths[g];
                r->bf16 = c->gemm == 2 ? bf16_paths[p] : NULL;
                if (c->gemm == 2 && strcmp(bf16_paths[p], "emulate") == 0)
                    snprintf(r->path, sizeof r->path, "bf16 emulate, gemm %s", gemm_paths[g]);
                else if (c->gemm == 2)
                    snprintf(r->path, sizeof r->path, "bf16 %s", bf16_paths[p]);
                else
                    snprintf(r->path, sizeof r->path, "gemm %s", c->gemm ? gemm_paths[g] : "-");
            }
        }
    }
    int failed = run_all(runs, nruns);
    free(runs);
    cpu_gemm_select(NULL);
    cpu_gemm_bf16_select(NULL);
    omp_set_num_threads(saved);
    if (failed) fprintf(stderr, "%d case(s) depend on the thread count\n", failed);
    test_failures += failed;
    // OpenBLAS's other kernel sets, where the environment leaves the choice to OpenBLAS
    if (!openblas_only && !getenv("OPENBLAS_CORETYPE")) {
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !rerun_with_coretype("Haswell")) {
            fprintf(stderr, "FAIL: the OpenBLAS cases under OPENBLAS_CORETYPE=Haswell\n");
            test_failures++;
        }
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512cd") && !rerun_with_coretype("SkylakeX")) {
            fprintf(stderr, "FAIL: the OpenBLAS cases under OPENBLAS_CORETYPE=SkylakeX\n");
            test_failures++;
        }
    }
    TEST_MAIN_END();
}
