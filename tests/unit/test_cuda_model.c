// test_cuda_model.c: the CUDA table's model-level kernels (device/cuda/model_cuda.cu) against the CPU
// table's, on the same inputs, in both tables (fp32 and bf16 mixed precision):
//  - embedding_forward / embedding_forward_b16 (accumulate 0 and 1; bf16 -0 rows): exactly;
//    embedding_backward (into nonzero dtable, token ids repeating): as the same fp32 additions (1 ulp);
//  - cross_entropy_forward: the mean loss (a device double) to 1e-6, the row losses and the reciprocal
//    sums to 1e-5, the row maxima exactly; cross_entropy_backward from the same stats, out of place and
//    in place (dlogits = logits), to 1e-5; a target outside [0, V) (GPU only: the CPU does not check)
//    makes the row's loss NaN;
//  - abs_mean forward (double) and backward; sum_squares (accumulated into a nonzero double, twice):
//    the CPU's block sums in the CPU's order (1e-12, expected the same bits), sizes spanning one block,
//    hundreds, and the CPU's widened blocks (over 1024 x 4096 values);
//  - adamw_update (weight decay 0 and 0.1) and sgd_update (every combination of momentum / NULL buffer,
//    dampening, weight decay, nesterov) over three steps: 1e-6 (AdamW), 1 ulp (SGD);
//  - fixed_quantize: the digits' bytes exactly (NaN, Inf, out of range, ties, the range's edge, blocks
//    that leave the last one partial) in the deterministic mode's formats and a small one; fixed_finalize
//    exactly (NaN where the CPU's is, whatever its bits); sum_squares_exact: the words exactly (int64),
//    from zero, accumulated, from uncarried words, with NaN and Inf inputs (the marker) and after it;
//  - every entry with size 0 (nothing written; the scalar ones as the CPU: NaN means, acc += 0, words
//    carried), sizes 1, odd sizes (N = 37, C = 129, V = 1001) and a large one (fp32 table only).
// Tolerances: exact where the GPU does the CPU's operations on the same values in the same order (the
// CPU is ISO C, no FMA; the kernels use the _rn intrinsics); 1e-5 where expf differs.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "tensor/tensor.h"

static cuda_test T;
static int B;  // the table pair under test: 0 fp32, 1 bf16

#define EXACT_RTOL 2e-7   // one fp32 ulp: the same fp32 operations (expected: the same bits)
#define ADAM_RTOL 1e-6    // AdamW (sqrt, divisions)
#define CE_RTOL 1e-5      // expf / log
#define LOSS_RTOL 1e-6    // the mean loss
#define SUM_RTOL 1e-12    // double sums of squares / absolute values

// ---- helpers ----

#define label(...) cuda_test_label(B, __VA_ARGS__)  // "[fp32] ..." or "[bf16] ..." for the table under test
#define host_rand cuda_test_rand
#define host_dup cuda_test_dup

// a reproducible 32-bit random number (state *s)
static uint32_t next_u32(unsigned long long *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

// host int32 (n,) uniform in [0, V), malloc'd
static int32_t *host_ids(size_t n, int V, unsigned seed) {
    int32_t *h = malloc(sizeof(int32_t) * (n ? n : 1));
    unsigned long long s = 0x51ED270B27A1B0C5ull ^ seed;
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(next_u32(&s) % (uint32_t)V);
    return h;
}

// device copy (n,) of host floats h (n,); at least one element is allocated
static float *dev_floats(const float *h, size_t n) {
    float one = 0.0f;
    return cuda_test_upload(&T, n ? (const void *)h : &one, sizeof(float) * (n ? n : 1));
}
// device copy (n,) of host int32 h (n,)
static int32_t *dev_ids(const int32_t *h, size_t n) {
    int32_t one = 0;
    return cuda_test_upload(&T, n ? (const void *)h : &one, sizeof(int32_t) * (n ? n : 1));
}
// device double (1,) holding v
static double *dev_double(double v) { return cuda_test_upload(&T, &v, sizeof v); }
// host copy (n,) of device floats d (n,)
static float *get_floats(const float *d, size_t n) { return cuda_test_download(&T, d, sizeof(float) * n); }
// the device double d (1,)
static double get_double(const double *d) {
    double *h = cuda_test_download(&T, d, sizeof(double));
    double v = *h;
    free(h);
    return v;
}
static void dev_free(void *p) { fsdp_dev_free(T.gpu, p); }

// cuda_test_compare, except that n == 0 has nothing to compare (cuda_test_compare counts it a failure)
static void check_close(const char *what, const float *got, const float *want, size_t n, double atol, double rtol) {
    if (n) cuda_test_compare(what, got, want, n, atol, rtol);
}

// two doubles within atol + rtol |want|, or both NaN
static void check_double(const char *what, double got, double want, double atol, double rtol) {
    int ok = isnan(want) || isnan(got) ? isnan(want) && isnan(got) : fabs(got - want) <= atol + rtol * fabs(want);
    if (!ok) {
        fprintf(stderr, "FAIL %s: %.17g vs %.17g (atol %g, rtol %g)\n", what, got, want, atol, rtol);
        test_failures++;
    } else {
        printf("ok %s (%.17g)\n", what, got);
    }
}

#define check_bytes cuda_test_bytes

// the device floats d (n,) still hold the host values h (n,) (an output that must not be written)
static void check_untouched(const char *what, const float *d, const float *h, size_t n) {
    float *g = get_floats(d, n);
    check_bytes(what, g, h, sizeof(float) * n);
    free(g);
}

// words got (FSDP_XSUM_WORDS,) == want (FSDP_XSUM_WORDS,) exactly
static void check_words(const char *what, const int64_t *got, const int64_t *want) {
    for (int k = 0; k < FSDP_XSUM_WORDS; k++)
        if (got[k] != want[k]) {
            fprintf(stderr, "FAIL %s: word %d is %lld, want %lld\n", what, k, (long long)got[k], (long long)want[k]);
            test_failures++;
            return;
        }
    printf("ok %s (%d words, exact)\n", what, FSDP_XSUM_WORDS);
}

// ---- size 0: every entry writes nothing (the scalar ones: as the CPU) ----

static void test_zero_sizes(void) {
    const fsdp_kernels *k = T.kg[B];
    float sent[64];  // a sentinel for every pointer
    cuda_test_fill(sent, 64, 99, 1.0f, 2.0f);
    float *d = dev_floats(sent, 64);  // (64,)
    fsdp_bf16 *h = (fsdp_bf16 *)d;    // (128,) bf16 view of the same bytes
    int32_t ids[4] = {0, 1, 2, 3};
    int32_t *gid = dev_ids(ids, 4);
    fsdp_fixed_format f = {5, 24, 64};
    for (int acc = 0; acc < 2; acc++) {
        k->embedding_forward(T.gs, d, gid, d + 8, 0, 3, acc);
        k->embedding_forward(T.gs, d, gid, d + 8, 3, 0, acc);
        k->embedding_forward_b16(T.gs, d, gid, h + 16, 0, 3, acc);
        k->embedding_forward_b16(T.gs, d, gid, h + 16, 3, 0, acc);
    }
    k->embedding_backward(T.gs, d, d + 8, gid, 0, 3);
    k->embedding_backward(T.gs, d, d + 8, gid, 3, 0);
    k->cross_entropy_backward(T.gs, d, d + 8, d + 16, gid, 1.0f, 0, 5);
    k->abs_mean_backward(T.gs, d, d + 8, 0, 1.0f);
    k->adamw_update(T.gs, d, d + 8, d + 16, d + 24, 0, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1e-2f, 0.5f);
    k->sgd_update(T.gs, d, d + 8, d + 16, 0, 0.1f, 0.9f, 0.0f, 0.01f, 1, 1);
    k->sgd_update(T.gs, d, d + 8, NULL, 0, 0.1f, 0.0f, 0.0f, 0.0f, 0, 0);
    k->fixed_quantize(T.gs, d, d + 8, 0, 4, &f);
    k->fixed_finalize(T.gs, d, d + 8, 0, &f, 1.0);
    check_untouched(label("size 0: nothing written"), d, sent, 64);

    // the scalar kernels over nothing: the CPU's 0 / 0 means, acc += 0
    double closs = 7.0;
    T.kc[B]->cross_entropy_forward(T.cs, &closs, sent, sent, sent, ids, 0, 5);
    double *gl = dev_double(7.0);
    k->cross_entropy_forward(T.gs, gl, d, d + 8, d + 16, gid, 0, 5);
    check_double(label("cross_entropy_forward N=0: loss"), get_double(gl), closs, 0.0, 0.0);
    check_untouched(label("cross_entropy_forward N=0: nothing else written"), d, sent, 64);
    double cmean = 7.0;
    T.kc[B]->abs_mean_forward(T.cs, &cmean, sent, 0);
    double *gm = dev_double(7.0);
    k->abs_mean_forward(T.gs, gm, d, 0);
    check_double(label("abs_mean_forward n=0"), get_double(gm), cmean, 0.0, 0.0);
    double cacc = 1.5;
    T.kc[B]->sum_squares(T.cs, &cacc, sent, 0);
    double *ga = dev_double(1.5);
    k->sum_squares(T.gs, ga, d, 0);
    check_double(label("sum_squares n=0"), get_double(ga), cacc, 0.0, 0.0);

    // sum_squares_exact over nothing still carries the words
    int64_t w0[FSDP_XSUM_WORDS] = {0}, cw[FSDP_XSUM_WORDS];
    w0[0] = (5ll << 32) + 7, w0[3] = -(3ll << 32) + 11, w0[7] = 0x1ffffffffll, w0[FSDP_XSUM_WORDS - 1] = 9;
    memcpy(cw, w0, sizeof cw);
    T.kc[B]->sum_squares_exact(T.cs, cw, sent, 0);
    int64_t *gw = cuda_test_upload(&T, w0, sizeof w0);
    k->sum_squares_exact(T.gs, gw, d, 0);
    int64_t *hw = cuda_test_download(&T, gw, sizeof w0);
    check_words(label("sum_squares_exact n=0: carried"), hw, cw);
    free(hw);
    dev_free(d), dev_free(gid), dev_free(gl), dev_free(gm), dev_free(ga), dev_free(gw);
}

// ---- embedding ----

static void embedding_case(int N, int C, int V) {
    size_t nout = (size_t)N * C, ntab = (size_t)V * C;
    int32_t *idx = host_ids((size_t)N, V, 10 + (unsigned)N);  // (N,) repeats when V < N
    float *table = host_rand(ntab, 11, -2.0f, 2.0f);            // (V, C)
    float *out0 = host_rand(nout, 12, -1.0f, 1.0f);             // (N, C) the output's prior contents
    fsdp_bf16 *t16 = malloc(sizeof(fsdp_bf16) * (ntab ? ntab : 1));  // (V, C)
    for (size_t i = 0; i < ntab; i++) t16[i] = i % 13 == 5 ? (fsdp_bf16)0x8000u : fsdp_f32_to_bf16(table[i]);  // -0 too
    int32_t *gidx = dev_ids(idx, (size_t)N);
    float *gtab = dev_floats(table, ntab);
    fsdp_bf16 *gt16 = cuda_test_upload(&T, t16, sizeof(fsdp_bf16) * (ntab ? ntab : 1));
    for (int acc = 0; acc < 2; acc++) {
        // fp32 table
        float *cout = host_dup(out0, nout), *gout = dev_floats(out0, nout);
        T.kc[B]->embedding_forward(T.cs, cout, idx, table, N, C, acc);
        T.kg[B]->embedding_forward(T.gs, gout, gidx, gtab, N, C, acc);
        float *hout = get_floats(gout, nout);
        check_bytes(label("embedding_forward N=%d C=%d V=%d accumulate=%d", N, C, V, acc), hout, cout,
                    sizeof(float) * nout);
        free(hout), free(cout), dev_free(gout);
        // bf16 table
        cout = host_dup(out0, nout), gout = dev_floats(out0, nout);
        T.kc[B]->embedding_forward_b16(T.cs, cout, idx, t16, N, C, acc);
        T.kg[B]->embedding_forward_b16(T.gs, gout, gidx, gt16, N, C, acc);
        hout = get_floats(gout, nout);
        check_bytes(label("embedding_forward_b16 N=%d C=%d V=%d accumulate=%d", N, C, V, acc), hout, cout,
                    sizeof(float) * nout);
        free(hout), free(cout), dev_free(gout);
    }
    // backward: dtable += scattered dout, into nonzero values
    float *dout = host_rand(nout, 13, -1.0f, 1.0f), *dt0 = host_rand(ntab, 14, -0.5f, 0.5f);
    float *cdt = host_dup(dt0, ntab);
    T.kc[B]->embedding_backward(T.cs, cdt, dout, idx, N, C);
    float *gdout = dev_floats(dout, nout), *gdt = dev_floats(dt0, ntab);
    T.kg[B]->embedding_backward(T.gs, gdt, gdout, gidx, N, C);
    float *hdt = get_floats(gdt, ntab);
    check_close(label("embedding_backward N=%d C=%d V=%d", N, C, V), hdt, cdt, ntab, 0.0, EXACT_RTOL);
    free(hdt), free(cdt), free(dout), free(dt0), dev_free(gdout), dev_free(gdt);
    free(idx), free(table), free(out0), free(t16), dev_free(gidx), dev_free(gtab), dev_free(gt16);
}

static void test_embedding(void) {
    embedding_case(1, 1, 1);
    embedding_case(1, 129, 1001);
    embedding_case(37, 129, 1001);
    embedding_case(37, 129, 5);    // every id repeats
    embedding_case(300, 64, 1);    // one row takes every token
    if (B == 0) embedding_case(1024, 256, 50257);
}

// ---- cross-entropy ----

static void cross_entropy_case(int N, int V, float spread) {
    size_t n = (size_t)N * V;
    float *logits = host_rand(n, 20 + (unsigned)V, -spread, spread);  // (N, V)
    int32_t *tg = host_ids((size_t)N, V, 21);                         // (N,)
    float *closses = malloc(sizeof(float) * N), *cstats = malloc(sizeof(float) * 2 * N);
    double closs = 0.0;
    T.kc[B]->cross_entropy_forward(T.cs, &closs, closses, cstats, logits, tg, N, V);

    float *glogits = dev_floats(logits, n), *glosses = dev_floats(closses, (size_t)N);
    float *gstats = dev_floats(cstats, 2 * (size_t)N);
    int32_t *gtg = dev_ids(tg, (size_t)N);
    double *gloss = dev_double(-1.0);
    // the outputs start as garbage
    float *junk = host_rand(2 * (size_t)N, 22, 50.0f, 60.0f);
    CHECK(fsdp_copy_h2d(T.gs, glosses, junk, sizeof(float) * N) == FSDP_OK);
    CHECK(fsdp_copy_h2d(T.gs, gstats, junk, sizeof(float) * 2 * N) == FSDP_OK);
    T.kg[B]->cross_entropy_forward(T.gs, gloss, glosses, gstats, glogits, gtg, N, V);
    check_double(label("cross_entropy_forward N=%d V=%d: loss", N, V), get_double(gloss), closs, 1e-7, LOSS_RTOL);
    float *hlosses = get_floats(glosses, (size_t)N), *hstats = get_floats(gstats, 2 * (size_t)N);
    check_close(label("cross_entropy_forward N=%d V=%d: losses", N, V), hlosses, closses, (size_t)N, 1e-6, CE_RTOL);
    float *gmax = malloc(sizeof(float) * N), *cmax = malloc(sizeof(float) * N);
    float *ginv = malloc(sizeof(float) * N), *cinv = malloc(sizeof(float) * N);
    for (int r = 0; r < N; r++) gmax[r] = hstats[2 * r], cmax[r] = cstats[2 * r];
    for (int r = 0; r < N; r++) ginv[r] = hstats[2 * r + 1], cinv[r] = cstats[2 * r + 1];
    check_close(label("cross_entropy_forward N=%d V=%d: row max", N, V), gmax, cmax, (size_t)N, 0.0, 0.0);
    check_close(label("cross_entropy_forward N=%d V=%d: 1 / sum exp", N, V), ginv, cinv, (size_t)N, 0.0, CE_RTOL);

    // backward from the CPU's stats (the same on both), out of place and in place
    for (int inplace = 0; inplace < 2; inplace++) {
        float dloss = inplace ? 2.5f : 1.0f / (float)N;
        float *cd = inplace ? host_dup(logits, n) : host_rand(n, 23, 5.0f, 6.0f);
        T.kc[B]->cross_entropy_backward(T.cs, cd, inplace ? cd : logits, cstats, tg, dloss, N, V);
        float *gz = inplace ? dev_floats(logits, n) : glogits;  // (N, V) the logits
        float *gd = gz;                                           // (N, V) the gradient: gz in place
        if (!inplace) {
            float *h = host_rand(n, 23, 5.0f, 6.0f);
            gd = dev_floats(h, n);
            free(h);
        }
        float *gcs = dev_floats(cstats, 2 * (size_t)N);  // (N, 2) the CPU's stats
        T.kg[B]->cross_entropy_backward(T.gs, gd, gz, gcs, gtg, dloss, N, V);
        float *hd = get_floats(gd, n);
        check_close(label("cross_entropy_backward N=%d V=%d%s", N, V, inplace ? " in place" : ""), hd, cd, n,
                    1e-6 * dloss, CE_RTOL);
        free(hd), free(cd), dev_free(gcs);
        if (inplace) dev_free(gz);
        else dev_free(gd);
    }
    free(logits), free(tg), free(closses), free(cstats), free(junk), free(hlosses), free(hstats);
    free(gmax), free(cmax), free(ginv), free(cinv);
    dev_free(glogits), dev_free(glosses), dev_free(gstats), dev_free(gtg), dev_free(gloss);
}

// GPU only (the CPU reads outside the row): a target outside [0, V) makes its row's loss (and the mean)
// NaN, and backward gives that row no one-hot term (every gradient of it positive)
static void cross_entropy_bad_target(void) {
    const int N = 3, V = 5;
    float *logits = host_rand((size_t)N * V, 24, -1.0f, 1.0f);
    int32_t tg[3] = {2, 5, -1};
    float *gz = dev_floats(logits, (size_t)N * V), *glosses = dev_floats(logits, (size_t)N);
    float *gstats = dev_floats(logits, 2 * (size_t)N), *gd = dev_floats(logits, (size_t)N * V);
    int32_t *gtg = dev_ids(tg, 3);
    double *gloss = dev_double(0.0);
    T.kg[B]->cross_entropy_forward(T.gs, gloss, glosses, gstats, gz, gtg, N, V);
    T.kg[B]->cross_entropy_backward(T.gs, gd, gz, gstats, gtg, 1.0f, N, V);
    double loss = get_double(gloss);
    float *hl = get_floats(glosses, (size_t)N), *hd = get_floats(gd, (size_t)N * V);
    int ok = isnan(loss) && !isnan(hl[0]) && isnan(hl[1]) && isnan(hl[2]) && hd[2] < 0.0f;
    for (int v = 0; v < V; v++) ok = ok && hd[V + v] > 0.0f && hd[2 * V + v] > 0.0f;
    if (!ok) {
        fprintf(stderr, "FAIL %s: loss %g, losses %g %g %g\n", label("cross_entropy out-of-range targets"), loss,
                hl[0], hl[1], hl[2]);
        test_failures++;
    } else {
        printf("ok %s\n", label("cross_entropy out-of-range targets: NaN rows, no one-hot term"));
    }
    free(logits), free(hl), free(hd);
    dev_free(gz), dev_free(glosses), dev_free(gstats), dev_free(gd), dev_free(gtg), dev_free(gloss);
}

static void test_cross_entropy(void) {
    cross_entropy_case(1, 1, 3.0f);
    cross_entropy_case(1, 1001, 3.0f);
    cross_entropy_case(37, 1001, 8.0f);
    cross_entropy_case(37, 129, 30.0f);  // most probabilities tiny
    cross_entropy_case(2, 17, 0.0f);     // every logit 0: uniform
    if (B == 0) cross_entropy_case(1024, 50257, 6.0f);
    cross_entropy_bad_target();
}

// ---- abs_mean, sum_squares ----

// values of x (n,) in [-2, 2) with exact zeros (+0, -0) and some tiny and huge ones, malloc'd
static float *sum_inputs(size_t n, unsigned seed) {
    float *x = host_rand(n, seed, -2.0f, 2.0f);
    for (size_t i = 3; i < n; i += 17) x[i] = 0.0f;
    for (size_t i = 5; i < n; i += 23) x[i] = -0.0f;
    for (size_t i = 7; i < n; i += 29) x[i] *= 1e-30f;
    for (size_t i = 9; i < n; i += 31) x[i] *= 1e15f;
    return x;
}

static void test_sums(void) {
    // 1 value, one block, 257 blocks of 4096, and over 1024 blocks (the CPU's blocks widen)
    const size_t sizes[] = {1, 37 * 129, (1u << 20) + 3, 5000003};
    const size_t nsizes = B == 0 ? 4 : 3;
    for (size_t s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        float *x = sum_inputs(n, 30 + (unsigned)s), *x2 = sum_inputs(n, 40 + (unsigned)s);
        float *gx = dev_floats(x, n), *gx2 = dev_floats(x2, n);
        // abs_mean forward and backward
        double cm = 0.0;
        T.kc[B]->abs_mean_forward(T.cs, &cm, x, n);
        double *gm = dev_double(-3.0);
        T.kg[B]->abs_mean_forward(T.gs, gm, gx, n);
        check_double(label("abs_mean_forward n=%zu", n), get_double(gm), cm, 0.0, SUM_RTOL);
        float *cdy = host_rand(n, 31, 3.0f, 4.0f), *gdy = dev_floats(cdy, n);
        T.kc[B]->abs_mean_backward(T.cs, cdy, x, n, 1.7f);
        T.kg[B]->abs_mean_backward(T.gs, gdy, gx, n, 1.7f);
        float *hdy = get_floats(gdy, n);
        check_bytes(label("abs_mean_backward n=%zu", n), hdy, cdy, sizeof(float) * n);
        // sum_squares: two buffers into one nonzero accumulator
        double cacc = 0.75;
        T.kc[B]->sum_squares(T.cs, &cacc, x, n);
        T.kc[B]->sum_squares(T.cs, &cacc, x2, n);
        double *gacc = dev_double(0.75);
        T.kg[B]->sum_squares(T.gs, gacc, gx, n);
        T.kg[B]->sum_squares(T.gs, gacc, gx2, n);
        check_double(label("sum_squares n=%zu (twice, +=)", n), get_double(gacc), cacc, 0.0, SUM_RTOL);
        free(x), free(x2), free(cdy), free(hdy);
        dev_free(gx), dev_free(gx2), dev_free(gm), dev_free(gdy), dev_free(gacc);
    }
    // abs_mean_backward's sign(0) = 0, and one value
    float y[4] = {0.0f, -0.0f, -3.0f, 2.0f}, cdy[4], *gy = dev_floats(y, 4), *gdy = dev_floats(y, 4);
    T.kc[B]->abs_mean_backward(T.cs, cdy, y, 4, 1.0f);
    T.kg[B]->abs_mean_backward(T.gs, gdy, gy, 4, 1.0f);
    float *hdy = get_floats(gdy, 4);
    check_bytes(label("abs_mean_backward signs"), hdy, cdy, sizeof cdy);
    free(hdy), dev_free(gy), dev_free(gdy);
}

// ---- optimizers ----

static void adamw_case(size_t n, float weight_decay) {
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float *p = host_rand(n, 50, -1.0f, 1.0f);   // (n,) param
    float *m = calloc(n ? n : 1, sizeof(float));  // (n,) first moment, from 0
    float *v = calloc(n ? n : 1, sizeof(float));  // (n,) second moment, from 0
    float *gp = dev_floats(p, n), *gm = dev_floats(m, n), *gv = dev_floats(v, n);
    for (int t = 1; t <= 3; t++) {
        float *g = host_rand(n, 51 + (unsigned)t, -1.0f, 1.0f);
        for (size_t i = (size_t)t; i < n; i += 19) g[i] = 0.0f;
        for (size_t i = 2; i < n; i += 37) g[i] *= 1e-6f;
        float *gg = dev_floats(g, n);
        float step_size = (float)(lr / (1.0 - pow(beta1, t))), bias2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
        T.kc[B]->adamw_update(T.cs, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step_size, bias2_sqrt);
        T.kg[B]->adamw_update(T.gs, gp, gg, gm, gv, n, lr, beta1, beta2, eps, weight_decay, step_size, bias2_sqrt);
        float *hp = get_floats(gp, n), *hm = get_floats(gm, n), *hv = get_floats(gv, n);
        check_close(label("adamw n=%zu wd=%g step %d: param", n, weight_decay, t), hp, p, n, 0.0, ADAM_RTOL);
        check_close(label("adamw n=%zu wd=%g step %d: m", n, weight_decay, t), hm, m, n, 0.0, ADAM_RTOL);
        check_close(label("adamw n=%zu wd=%g step %d: v", n, weight_decay, t), hv, v, n, 0.0, ADAM_RTOL);
        free(g), free(hp), free(hm), free(hv), dev_free(gg);
    }
    free(p), free(m), free(v), dev_free(gp), dev_free(gm), dev_free(gv);
}

static void sgd_case(size_t n, float momentum, float dampening, float weight_decay, int nesterov) {
    const float lr = 0.05f;
    float *p = host_rand(n, 60, -1.0f, 1.0f), *buf = host_rand(n, 61, 7.0f, 8.0f);  // buf: garbage before step 1
    float *gp = dev_floats(p, n), *gbuf = momentum != 0.0f ? dev_floats(buf, n) : NULL;
    for (int t = 1; t <= 3; t++) {
        float *g = host_rand(n, 62 + (unsigned)t, -1.0f, 1.0f);
        float *gg = dev_floats(g, n);
        T.kc[B]->sgd_update(T.cs, p, g, momentum != 0.0f ? buf : NULL, n, lr, momentum, dampening, weight_decay,
                            nesterov, t == 1);
        T.kg[B]->sgd_update(T.gs, gp, gg, gbuf, n, lr, momentum, dampening, weight_decay, nesterov, t == 1);
        float *hp = get_floats(gp, n);
        check_close(label("sgd n=%zu momentum=%g dampening=%g wd=%g nesterov=%d step %d: param", n, momentum,
                          dampening, weight_decay, nesterov, t),
                    hp, p, n, 0.0, EXACT_RTOL);
        if (gbuf) {
            float *hb = get_floats(gbuf, n);
            check_close(label("sgd n=%zu momentum=%g dampening=%g wd=%g nesterov=%d step %d: buffer", n, momentum,
                              dampening, weight_decay, nesterov, t),
                        hb, buf, n, 0.0, EXACT_RTOL);
            free(hb);
        }
        free(g), free(hp), dev_free(gg);
    }
    free(p), free(buf), dev_free(gp);
    if (gbuf) dev_free(gbuf);
}

static void test_optimizers(void) {
    const size_t sizes[] = {1, 37 * 129, (1u << 20) + 5};
    const size_t nsizes = B == 0 ? 3 : 2;
    for (size_t s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        adamw_case(n, 0.0f);
        adamw_case(n, 0.1f);
        for (int mo = 0; mo < 2; mo++)
            for (int da = 0; da < 2; da++)
                for (int wd = 0; wd < 2; wd++)
                    for (int ne = 0; ne < 2; ne++)
                        sgd_case(n, mo ? 0.9f : 0.0f, da ? 0.25f : 0.0f, wd ? 0.01f : 0.0f, ne);
    }
}

// ---- fixed point ----

// values of g (n,) of every magnitude the format sees, with the special ones first: NaN, +-Inf, zeros,
// a subnormal, the fp32 maximum, ties of the grid, and the range's edge (just inside, rounding up to it;
// at it; beyond it). malloc'd
static float *fixed_inputs(size_t n, const fsdp_fixed_format *f, unsigned seed) {
    float *g = host_rand(n, seed, -1.0f, 1.0f);
    unsigned long long s = 0xF1C5ull ^ seed;
    for (size_t i = 0; i < n; i++) g[i] = ldexpf(g[i], (int)(next_u32(&s) % 64) - 40);  // 2^-40 .. 2^23
    double grid = ldexp(1.0, -f->frac_bits), edge = ldexp(1.0, f->limbs * f->limb_bits - 1 - f->frac_bits);
    float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, 3.4e38f, -3.4e38f,
                       (float)(0.5 * grid), (float)(1.5 * grid), (float)(-2.5 * grid), (float)(-0.5 * grid),
                       nextafterf((float)edge, 0.0f), (float)edge, -(float)edge, nextafterf((float)edge, INFINITY),
                       nextafterf(-(float)edge, 0.0f), (float)(3.0 * grid)};
    size_t ns = sizeof special / sizeof special[0];
    for (size_t i = 0; i < ns && i < n; i++) g[i] = special[i];
    return g;
}

static void fixed_case(const fsdp_fixed_format *f, size_t n, size_t block) {
    const size_t K = (size_t)f->limbs, nblk = (n + block - 1) / block, len = K * nblk * block;  // digits (padded)
    float *g = fixed_inputs(n, f, 70 + (unsigned)n);
    float *climbs = malloc(sizeof(float) * len);  // (nblk, K, block)
    memset(climbs, 0xa5, sizeof(float) * len);    // the padding of the last block is never written
    float *glimbs = dev_floats(climbs, len), *gg = dev_floats(g, n);
    T.kc[B]->fixed_quantize(T.cs, climbs, g, n, block, f);
    T.kg[B]->fixed_quantize(T.gs, glimbs, gg, n, block, f);
    float *hl = get_floats(glimbs, len);
    check_bytes(label("fixed_quantize (%d, %d, %d) n=%zu block=%zu", f->limbs, f->limb_bits, f->frac_bits, n, block),
                hl, climbs, sizeof(float) * len);
    free(g), free(climbs), free(hl), dev_free(glimbs), dev_free(gg);
}

static void finalize_case(const fsdp_fixed_format *f, size_t n, double scale) {
    const size_t K = (size_t)f->limbs;
    float *acc = malloc(sizeof(float) * K * n);  // (K, n) digit sums of a few contributions
    unsigned long long s = 0xACC0ull ^ n;
    const uint32_t span = 1u << f->limb_bits;  // digits in [-2^limb_bits, 2^limb_bits): two contributions' worth
    for (size_t i = 0; i < K * n; i++) acc[i] = (float)((int64_t)(next_u32(&s) % (2 * span)) - (int64_t)span);
    if (n > 3) acc[3] = NAN;  // a poisoned element (digit 0 of element 3)
    if (n > 5) acc[(K - 1) * n + 5] = (float)(span / 2);  // the top digit at its bound
    float *cout = host_rand(n, 80, 5.0f, 6.0f), *gout = dev_floats(cout, n), *gacc = dev_floats(acc, K * n);
    T.kc[B]->fixed_finalize(T.cs, cout, acc, n, f, scale);
    T.kg[B]->fixed_finalize(T.gs, gout, gacc, n, f, scale);
    float *hout = get_floats(gout, n);
    // exactly, NaN where the CPU has NaN (a GPU's NaN from arithmetic is its canonical one, not x86's bits)
    check_close(label("fixed_finalize (%d, %d, %d) n=%zu scale=%g", f->limbs, f->limb_bits, f->frac_bits, n, scale),
                hout, cout, n, 0.0, 0.0);
    free(acc), free(cout), free(hout), dev_free(gout), dev_free(gacc);
}

static void test_fixed(void) {
    // fsdp_det_format(1), (256) and a small format whose range the inputs exceed often
    const fsdp_fixed_format formats[] = {{5, 24, 64}, {6, 17, 64}, {2, 12, 10}};
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        const fsdp_fixed_format *f = &formats[k];
        fixed_case(f, 1, 1);
        fixed_case(f, 37, 37);
        fixed_case(f, 37, 7);  // the last block partial
        fixed_case(f, 37 * 129 + 5, 1024);
        fixed_case(f, 37 * 129 + 5, 1);
        fixed_case(f, 37 * 129 + 5, 100000);  // one block longer than the values
        if (B == 0) fixed_case(f, (1u << 20) + 3, 1u << 18);
        finalize_case(f, 1, 1.0);
        finalize_case(f, 37 * 129 + 5, 1.0);
        finalize_case(f, 37 * 129 + 5, 1.0 / 3.0);
        if (B == 0) finalize_case(f, 1u << 20, 0.125);
    }
}

// x (n,) of random finite bit patterns (every exponent, subnormals, both signs) with zeros and the fp32
// maximum, malloc'd
static float *xsum_inputs(size_t n, unsigned seed) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    unsigned long long s = 0x5EED5ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = next_u32(&s);
        if (((bits >> 23) & 0xffu) == 0xffu) bits ^= 0x00800000u;  // not Inf / NaN
        if (i % 11 == 3) bits &= 0x807fffffu;                      // a subnormal
        if (i % 13 == 4) bits &= 0x80000000u;                      // a zero
        if (i % 101 == 6) bits = 0x7f7fffffu;                      // the maximum
        memcpy(&x[i], &bits, sizeof bits);
    }
    return x;
}

// words (FSDP_XSUM_WORDS,) += the exact sum of squares of x (n,) on both, starting from w0: compared exactly;
// cw (FSDP_XSUM_WORDS,) gets the CPU's result
// (cw may be w0)
static void xsum_case(const char *what, int64_t *cw, const int64_t *w0, const float *x, size_t n) {
    int64_t start[FSDP_XSUM_WORDS];
    memcpy(start, w0, sizeof start);
    memcpy(cw, start, sizeof start);
    T.kc[B]->sum_squares_exact(T.cs, cw, x, n);
    int64_t *gw = cuda_test_upload(&T, start, sizeof start);
    float *gx = dev_floats(x, n);
    T.kg[B]->sum_squares_exact(T.gs, gw, gx, n);
    int64_t *hw = cuda_test_download(&T, gw, sizeof(int64_t) * FSDP_XSUM_WORDS);
    check_words(what, hw, cw);
    free(hw), dev_free(gw), dev_free(gx);
}

static void test_sum_squares_exact(void) {
    const size_t sizes[] = {1, 37 * 129, (1u << 20) + 7};
    const size_t nsizes = B == 0 ? 3 : 2;
    int64_t zero[FSDP_XSUM_WORDS] = {0}, w1[FSDP_XSUM_WORDS], w2[FSDP_XSUM_WORDS], raw[FSDP_XSUM_WORDS] = {0};
    raw[0] = (5ll << 32) + 7, raw[3] = -(3ll << 32) + 11, raw[9] = 0x1ffffffffll, raw[FSDP_XSUM_WORDS - 1] = 2;
    for (size_t s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        float *x = xsum_inputs(n, 90 + (unsigned)s), *x2 = xsum_inputs(n, 95 + (unsigned)s);
        xsum_case(label("sum_squares_exact n=%zu from 0", n), w1, zero, x, n);
        xsum_case(label("sum_squares_exact n=%zu accumulated", n), w2, w1, x2, n);  // onto the carried words
        xsum_case(label("sum_squares_exact n=%zu from uncarried words", n), w2, raw, x, n);
        // a NaN (and an Inf) marks the sum; words already marked stay as they are
        float keep = x[n / 2];
        x[n / 2] = NAN;
        xsum_case(label("sum_squares_exact n=%zu with a NaN", n), w2, raw, x, n);
        if (w2[FSDP_XSUM_WORDS - 1] != -1) {
            fprintf(stderr, "FAIL %s: the CPU did not mark the sum\n", label("sum_squares_exact NaN"));
            test_failures++;
        }
        x[n / 2] = -INFINITY;
        xsum_case(label("sum_squares_exact n=%zu with -Inf", n), w1, w1, x, n);
        x[n / 2] = keep;
        xsum_case(label("sum_squares_exact n=%zu onto a marked sum", n), w1, w2, x, n);
        free(x), free(x2);
    }
    // one maximum value and one smallest subnormal: the highest and lowest words the squares reach
    float ends[3] = {3.4028235e38f, 1e-45f, -1e-45f};
    xsum_case(label("sum_squares_exact: the largest and smallest squares"), w1, zero, ends, 3);
    // many maxima: carries into the top words
    float *big = malloc(sizeof(float) * 100000);
    for (size_t i = 0; i < 100000; i++) big[i] = i % 2 ? 3.4028235e38f : -3.4028235e38f;
    xsum_case(label("sum_squares_exact: 100000 maxima"), w1, zero, big, 100000);
    free(big);
}

int main(void) {
    cuda_test_open(&T);
    for (B = 0; B < 2; B++) {
        printf("== %s against %s\n", T.kg[B]->name, T.kc[B]->name);
        test_zero_sizes();
        test_embedding();
        test_cross_entropy();
        test_sums();
        test_optimizers();
        test_fixed();
        test_sum_squares_exact();
    }
    cuda_test_close(&T);
    if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures);
    else printf("all checks passed\n");
    return test_failures ? 1 : 0;
}
