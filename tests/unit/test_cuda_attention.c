// test_cuda_attention.c: the CUDA table's fused attention (device/cuda/attention_cuda.cu) against the CPU
// table's (device/cpu/attention.c), on the same inputs, in both tables (fp32 and bf16 mixed precision):
//  - forward: out and stats (each query row's log-sum-exp) from the same qkv;
//  - backward: dqkv from the same qkv, a random dout and the CPU forward's out and stats, fed to both
//    devices (so the backward is compared on identical inputs, not through the forward's differences);
//    dqkv starts as a sentinel on the GPU: every element must be overwritten;
//  - every combination of: causal or not; dropout 0 and 0.1 (the mask is the same Philox stream on both
//    devices, so a wrong element index shows as a large difference); batch-first (stride_b T, stride_t 1)
//    and seq-first (1, B) rows; head dims 8, 24 (not a multiple of the warp), 64, 128 and 256 (the
//    largest the CUDA kernels take); T in {1, 5, 67, 300} (300: two of the CPU's 256-key blocks, so the
//    running maximum rescales); B and H small;
//  - grouped-query attention (kv_heads < H: 2 and 1 key/value heads for 4 query heads) with qkv
//    interleaved and planar, on the row kernels (head dims 8, 24), the tiles and the tensor cores (64,
//    128), and planar with kv_heads = H;
//  - the GPU's results the same bits when run again (no atomics: deterministic);
//  - B = 0 or T = 0: nothing written.
// Tolerances. fp32: atol 1e-5, rtol 1e-4 (summation order and expf against the CPU's exp differ; values
// are O(1)). bf16: out and dqkv atol 4e-3, rtol 2e-2. The bf16 operands are rounded at the same points on
// both devices and their products are exact in fp32, so the sums differ only in order, by fp32 rounding;
// but such a difference in an fp32 value that is then rounded to bf16 (a probability, scale * dS) can
// flip that rounding by one bf16 ulp (2^-8 of the value, relatively), and that propagates into the sums:
// one term of size <= |P| (<= 1/(1-p) = 1.11) or |scale dS| (< 1 here) times an operand <= 1 moves by up
// to 2^-8 * 1.11 = 4.3e-3 in the worst case, in practice far less (the probabilities of T > 1 rows are
// well below 1). The stats are fp32 sums of exact products in both tables: fp32's tolerance.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cuda_check.h"

static cuda_test T;

#define F32_ATOL 1e-5
#define F32_RTOL 1e-4
#define B16_ATOL 4e-3
#define B16_RTOL 2e-2

// host floats (n,) in [lo, hi), malloc'd
static float *host_rand(size_t n, unsigned seed, float lo, float hi) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    cuda_test_fill(h, n, seed, lo, hi);
    return h;
}

// host floats (n,), every byte 0x7f (3.39e38: a sentinel no kernel writes here), malloc'd
static float *host_sentinel(size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    memset(h, 0x7f, sizeof(float) * n);
    return h;
}

// device copy (n,) of host floats h (n,)
static float *dev_floats(const float *h, size_t n) { return cuda_test_upload(&T, h, sizeof(float) * (n ? n : 1)); }
// host copy (n,) of device floats d (n,)
static float *get_floats(const float *d, size_t n) { return cuda_test_download(&T, d, sizeof(float) * n); }
static void dev_free(void *p) { fsdp_dev_free(T.gpu, p); }

// the same bytes in got and want (n floats)
static void check_same_bits(const char *what, const float *got, const float *want, size_t n) {
    if (memcmp(got, want, sizeof(float) * n) != 0) {
        fprintf(stderr, "FAIL %s: a second run gave other bits\n", what);
        test_failures++;
    }
}

// One case: forward and backward on both devices, compared. kv key/value heads (0: H), planar qkv or not.
static void run_case(int bf16, int Bn, int H, int hd, int Tn, int causal, float p, int seq_first, int kv, int planar,
                     unsigned seed) {
    int C = H * hd;
    size_t rows = (size_t)Bn * Tn, no = rows * C, ns = (size_t)Bn * H * Tn;
    size_t nq = rows * (size_t)(H + 2 * (kv ? kv : H)) * hd;  // qkv: the query, key and value heads of every row
    fsdp_attention_dims d = {.B = Bn, .T = Tn, .C = C, .H = H,
                             .stride_b = seq_first ? 1 : Tn, .stride_t = seq_first ? Bn : 1,
                             .causal = causal, .dropout_p = p, .rng = {20240601u + seed, 7u * seed + 1u},
                             .kv_heads = kv, .planar = planar};
    char what[200];
    snprintf(what, sizeof what, "[%s] B=%d H=%d kv=%d%s hd=%d T=%d causal=%d p=%g %s", bf16 ? "bf16" : "fp32", Bn, H,
             kv ? kv : H, planar ? " planar" : "", hd, Tn, causal, (double)p, seq_first ? "seq-first" : "batch-first");
    double atol = bf16 ? B16_ATOL : F32_ATOL, rtol = bf16 ? B16_RTOL : F32_RTOL;

    float *qkv = host_rand(nq, seed * 3 + 1, -1.0f, 1.0f);   // (nq,)
    float *dout = host_rand(no, seed * 3 + 2, -1.0f, 1.0f);  // (rows, C)
    float *sent = host_sentinel(nq);                          // (nq,) sentinel for every GPU output

    // CPU: forward, then backward from its own out and stats
    float *cout = malloc(sizeof(float) * no);     // (rows, C)
    float *cstats = malloc(sizeof(float) * ns);   // (B, H, T)
    float *cdqkv = malloc(sizeof(float) * nq);    // (nq,): qkv's layout
    T.kc[bf16]->attention_forward(T.cs, cout, cstats, qkv, &d);
    T.kc[bf16]->attention_backward(T.cs, cdqkv, dout, qkv, cout, cstats, &d);

    // GPU forward (twice: the same bits)
    float *g_qkv = dev_floats(qkv, nq);      // (nq,)
    float *g_out = dev_floats(sent, no);     // (rows, C)
    float *g_stats = dev_floats(sent, ns);   // (B, H, T)
    float *g_out2 = dev_floats(sent, no);    // (rows, C)
    float *g_stats2 = dev_floats(sent, ns);  // (B, H, T)
    T.kg[bf16]->attention_forward(T.gs, g_out, g_stats, g_qkv, &d);
    T.kg[bf16]->attention_forward(T.gs, g_out2, g_stats2, g_qkv, &d);
    float *out = get_floats(g_out, no), *stats = get_floats(g_stats, ns);      // (rows, C), (B, H, T)
    float *out2 = get_floats(g_out2, no), *stats2 = get_floats(g_stats2, ns);  // (rows, C), (B, H, T)
    char name[260];
    snprintf(name, sizeof name, "%s forward out", what);
    cuda_test_compare(name, out, cout, no, atol, rtol);
    check_same_bits(name, out2, out, no);
    snprintf(name, sizeof name, "%s forward stats", what);
    cuda_test_compare(name, stats, cstats, ns, F32_ATOL, F32_RTOL);
    check_same_bits(name, stats2, stats, ns);

    // GPU backward from the CPU's out and stats (twice: the same bits)
    float *g_dout = dev_floats(dout, no);     // (rows, C)
    float *g_cout = dev_floats(cout, no);     // (rows, C)
    float *g_cstats = dev_floats(cstats, ns); // (B, H, T)
    float *g_dqkv = dev_floats(sent, nq);     // (nq,)
    float *g_dqkv2 = dev_floats(sent, nq);    // (nq,)
    T.kg[bf16]->attention_backward(T.gs, g_dqkv, g_dout, g_qkv, g_cout, g_cstats, &d);
    T.kg[bf16]->attention_backward(T.gs, g_dqkv2, g_dout, g_qkv, g_cout, g_cstats, &d);
    float *dqkv = get_floats(g_dqkv, nq), *dqkv2 = get_floats(g_dqkv2, nq);  // (nq,) each
    snprintf(name, sizeof name, "%s backward dqkv", what);
    cuda_test_compare(name, dqkv, cdqkv, nq, atol, rtol);
    check_same_bits(name, dqkv2, dqkv, nq);

    dev_free(g_qkv), dev_free(g_out), dev_free(g_stats), dev_free(g_out2), dev_free(g_stats2);
    dev_free(g_dout), dev_free(g_cout), dev_free(g_cstats), dev_free(g_dqkv), dev_free(g_dqkv2);
    free(qkv), free(dout), free(sent), free(cout), free(cstats), free(cdqkv);
    free(out), free(stats), free(out2), free(stats2), free(dqkv), free(dqkv2);
}

// B = 0 or T = 0: no rows, nothing written
static void test_empty(int bf16) {
    float *sent = host_sentinel(16);  // (16,)
    float *g = dev_floats(sent, 16);  // (16,) every pointer
    for (int k = 0; k < 2; k++) {
        fsdp_attention_dims d = {.B = k ? 2 : 0, .T = k ? 0 : 4, .C = 8, .H = 2, .stride_b = 4, .stride_t = 1,
                                 .causal = 1, .dropout_p = 0.1f, .rng = {1, 2}};
        T.kg[bf16]->attention_forward(T.gs, g, g, g, &d);
        T.kg[bf16]->attention_backward(T.gs, g, g, g, g, g, &d);
    }
    float *h = get_floats(g, 16);  // (16,)
    if (memcmp(h, sent, sizeof(float) * 16) != 0) {
        fprintf(stderr, "FAIL [%s] empty attention wrote something\n", bf16 ? "bf16" : "fp32");
        test_failures++;
    } else {
        printf("ok [%s] empty attention: nothing written\n", bf16 ? "bf16" : "fp32");
    }
    dev_free(g);
    free(sent), free(h);
}

int main(void) {
    cuda_test_open(&T);
    static const int SHAPES[][3] = {{3, 2, 8}, {2, 3, 24}, {2, 2, 64}, {1, 2, 128}, {1, 1, 256}};  // (B, H, hd)
    static const int TS[] = {1, 5, 67, 128, 300};  // 128: whole 64-row tiles of the tiled kernels
    static const float PS[] = {0.0f, 0.1f};
    unsigned seed = 1;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        printf("== %s against %s\n", T.kg[bf16]->name, T.kc[bf16]->name);
        test_empty(bf16);
        for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
            for (size_t t = 0; t < sizeof TS / sizeof TS[0]; t++)
                for (int causal = 0; causal < 2; causal++)
                    for (size_t p = 0; p < sizeof PS / sizeof PS[0]; p++)
                        for (int seq_first = 0; seq_first < 2; seq_first++)
                            run_case(bf16, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], TS[t], causal, PS[p], seq_first,
                                     0, 0, seed++);
        // grouped-query (B, H 4, kv, hd, planar): the row kernels, the tiles / tensor cores, planar kv = H
        static const int GQA[][5] = {{2, 4, 2, 8, 0}, {2, 4, 1, 24, 1}, {2, 4, 2, 64, 1}, {1, 4, 1, 64, 0},
                                     {2, 4, 2, 128, 0}, {1, 4, 4, 64, 1}, {2, 4, 4, 24, 1}};
        static const int GTS[] = {5, 67, 300};
        for (size_t s = 0; s < sizeof GQA / sizeof GQA[0]; s++)
            for (size_t t = 0; t < sizeof GTS / sizeof GTS[0]; t++)
                for (int causal = 0; causal < 2; causal++)
                    run_case(bf16, GQA[s][0], GQA[s][1], GQA[s][3], GTS[t], causal, causal ? 0.1f : 0.0f,
                             (int)(t % 2), GQA[s][2], GQA[s][4], seed++);
    }
    cuda_test_close(&T);
    if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures);
    else printf("all checks passed\n");
    return test_failures ? 1 : 0;
}
