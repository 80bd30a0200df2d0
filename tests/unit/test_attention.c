// test_attention.c: the fused attention kernels (online softmax over key blocks, probabilities
// recomputed in backward from saved log-sum-exps) against the unfused computation in double: scores,
// masked softmax, dropout on the probabilities, P V, and the backward through all of them. Shapes cross
// the kernel's query blocks (64 rows) and key blocks (256 columns, so the running maximum rescales),
// with the causal mask and without, dropout on and off, seq-first and batch_first rows; fp32 and the
// bf16 table's products (to bf16's distance). The dropout mask is the contract of kernels.h:
// probability (i, j) of pair bh is kept iff uniform(rng, bh*T*T + i*T + j) >= p.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "test.h"

typedef struct {
    double *out;    // (B*T, C)
    double *lse;    // (B, H, T)
    double *dqkv;   // (B*T, 3C)
} reference;

static size_t row_of(const fsdp_attention_dims *d, int b, int t) { return (size_t)(b * d->stride_b + t * d->stride_t); }

// the unfused attention in double: forward (out, lse) and backward (dqkv) for upstream gradient dout
static reference unfused(const float *qkv, const float *dout, const fsdp_attention_dims *d) {
    int B = d->B, T = d->T, C = d->C, H = d->H, hd = C / H;
    double scale = 1.0 / sqrt((double)hd), keep = 1.0 / (1.0 - d->dropout_p);
    reference r = {calloc((size_t)B * T * C, sizeof(double)), calloc((size_t)B * H * T, sizeof(double)),
                   calloc((size_t)B * T * 3 * C, sizeof(double))};
    double *s = malloc(sizeof(double) * (size_t)T * T), *p = malloc(sizeof(double) * (size_t)T * T);
    double *z = malloc(sizeof(double) * (size_t)T * T), *dp = malloc(sizeof(double) * (size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int bh = b * H + h;
#define Q(t, c) ((double)qkv[row_of(d, b, t) * 3 * C + (size_t)h * hd + (c)])
#define KK(t, c) ((double)qkv[row_of(d, b, t) * 3 * C + C + (size_t)h * hd + (c)])
#define V(t, c) ((double)qkv[row_of(d, b, t) * 3 * C + 2 * C + (size_t)h * hd + (c)])
#define DO(t, c) ((double)dout[row_of(d, b, t) * C + (size_t)h * hd + (c)])
            for (int i = 0; i < T; i++) {
                int valid = d->causal ? i + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < valid; j++) {
                    double acc = 0;
                    for (int c = 0; c < hd; c++) acc += Q(i, c) * scale * KK(j, c);
                    s[i * T + j] = acc;
                    mx = fmax(mx, acc);
                }
                for (int j = 0; j < valid; j++) sum += exp(s[i * T + j] - mx);
                r.lse[(size_t)bh * T + i] = mx + log(sum);
                for (int j = 0; j < T; j++) {
                    p[i * T + j] = j < valid ? exp(s[i * T + j] - mx) / sum : 0.0;
                    uint64_t idx = ((uint64_t)bh * T + (uint64_t)i) * T + (uint64_t)j;
                    z[i * T + j] = d->dropout_p > 0 ? (fsdp_rng_uniform_at(d->rng, idx) >= d->dropout_p ? keep : 0.0) : 1.0;
                }
                for (int c = 0; c < hd; c++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++) acc += p[i * T + j] * z[i * T + j] * V(j, c);
                    r.out[row_of(d, b, i) * C + (size_t)h * hd + c] = acc;
                }
            }
            double *dq = r.dqkv, *dk = r.dqkv + C, *dv = r.dqkv + 2 * C;  // rows of 3C
            for (int i = 0; i < T; i++) {
                double dot = 0;
                for (int j = 0; j < T; j++) {
                    double acc = 0;
                    for (int c = 0; c < hd; c++) acc += DO(i, c) * V(j, c);
                    dp[i * T + j] = acc * z[i * T + j];
                    dot += p[i * T + j] * dp[i * T + j];
                }
                for (int j = 0; j < T; j++) dp[i * T + j] = p[i * T + j] * (dp[i * T + j] - dot);  // dS
            }
            for (int i = 0; i < T; i++)
                for (int c = 0; c < hd; c++) {
                    double aq = 0, ak = 0, av = 0;
                    for (int j = 0; j < T; j++) {
                        aq += dp[i * T + j] * KK(j, c) * scale;
                        ak += dp[j * T + i] * Q(j, c) * scale;
                        av += p[j * T + i] * z[j * T + i] * DO(j, c);
                    }
                    size_t at = row_of(d, b, i) * 3 * C + (size_t)h * hd + c;
                    dq[at] = aq, dk[at] = ak, dv[at] = av;
                }
#undef Q
#undef KK
#undef V
#undef DO
        }
    free(s), free(p), free(z), free(dp);
    return r;
}

// max |got - want| over n values, relative to max |want|; NaN counts as a failure
static double rel_err(const float *got, const double *want, size_t n) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (isnan(got[i])) e = INFINITY;
        worst = fmax(worst, e);
        scale = fmax(scale, fabs(want[i]));
    }
    return worst / scale;
}

static void check_case(int B, int T, int C, int H, int causal, int batch_first, float p, int bf16) {
    fsdp_attention_dims d = {B, T, C, H, batch_first ? T : 1, batch_first ? 1 : B, causal, p, {2024, 99}};
    size_t rows = (size_t)B * T;
    float *qkv = malloc(sizeof(float) * rows * 3 * C), *dout = malloc(sizeof(float) * rows * C);
    float *out = malloc(sizeof(float) * rows * C), *stats = malloc(sizeof(float) * (size_t)B * H * T);
    float *dqkv = malloc(sizeof(float) * rows * 3 * C);
    fsdp_rng_uniform_range((fsdp_rng){5, 6}, 0, qkv, rows * 3 * C, -2.5f, 2.5f);  // peaked rows: maxima move
    fsdp_rng_uniform_range((fsdp_rng){5, 7}, 0, dout, rows * C, -1.0f, 1.0f);
    if (bf16) {
        cpu_attention_forward_bf16(out, stats, qkv, &d);
        cpu_attention_backward_bf16(dqkv, dout, qkv, out, stats, &d);
    } else {
        cpu_attention_forward(out, stats, qkv, &d);
        cpu_attention_backward(dqkv, dout, qkv, out, stats, &d);
    }
    reference r = unfused(qkv, dout, &d);
    double e_out = rel_err(out, r.out, rows * C), e_lse = rel_err(stats, r.lse, (size_t)B * H * T);
    double e_d = rel_err(dqkv, r.dqkv, rows * 3 * C);
    double tol = bf16 ? 2e-2 : 2e-5;
    printf("attention B%d T%d C%d H%d %s %s p=%.1f %s: rel err out %.2e lse %.2e dqkv %.2e\n", B, T, C, H,
           causal ? "causal" : "full", batch_first ? "batch_first" : "seq-first", p, bf16 ? "bf16" : "fp32", e_out,
           e_lse, e_d);
    CHECK(e_out <= tol);
    CHECK(e_lse <= (bf16 ? 1e-2 : 1e-6));
    CHECK(e_d <= tol);
    free(qkv), free(dout), free(out), free(stats), free(dqkv);
    free(r.out), free(r.lse), free(r.dqkv);
}

// The bf16 attention on tiles packed once per head and query block against the same attention through
// cpu_gemm_bf16 per block (which packs on every call): the same tiles, so the same bits.
static void check_tiles_match(int B, int T, int C, int H, int causal, int batch_first, float p) {
    fsdp_attention_dims d = {B, T, C, H, batch_first ? T : 1, batch_first ? 1 : B, causal, p, {2024, 99}};
    size_t rows = (size_t)B * T, n3 = rows * 3 * C, n1 = rows * C, ns = (size_t)B * H * T;
    float *qkv = malloc(sizeof(float) * n3), *dout = malloc(sizeof(float) * n1);
    float *out[2], *stats[2], *dqkv[2];
    fsdp_rng_uniform_range((fsdp_rng){5, 8}, 0, qkv, n3, -2.5f, 2.5f);
    fsdp_rng_uniform_range((fsdp_rng){5, 9}, 0, dout, n1, -1.0f, 1.0f);
    for (int tiles = 0; tiles <= 1; tiles++) {
        out[tiles] = malloc(sizeof(float) * n1), stats[tiles] = malloc(sizeof(float) * ns);
        dqkv[tiles] = malloc(sizeof(float) * n3);
        cpu_attention_bf16_use_tiles(tiles);
        cpu_attention_forward_bf16(out[tiles], stats[tiles], qkv, &d);
        cpu_attention_backward_bf16(dqkv[tiles], dout, qkv, out[tiles], stats[tiles], &d);
    }
    cpu_attention_bf16_use_tiles(1);
    int finite = 1;
    for (size_t i = 0; i < n3; i++) finite &= isfinite(dqkv[1][i]) && (i >= n1 || isfinite(out[1][i]));
    int same = !memcmp(out[0], out[1], sizeof(float) * n1) && !memcmp(dqkv[0], dqkv[1], sizeof(float) * n3);
    printf("bf16 tiles vs per-call products B%d T%d C%d H%d %s p=%.1f: %s\n", B, T, C, H, causal ? "causal" : "full", p,
           same ? "same bits" : "differ");
    CHECK(finite);
    CHECK(memcmp(out[0], out[1], sizeof(float) * n1) == 0);
    CHECK(memcmp(stats[0], stats[1], sizeof(float) * ns) == 0);
    CHECK(memcmp(dqkv[0], dqkv[1], sizeof(float) * n3) == 0);
    for (int t = 0; t <= 1; t++) free(out[t]), free(stats[t]), free(dqkv[t]);
    free(qkv), free(dout);
}

int main(void) {
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        check_case(2, 5, 16, 2, 1, 0, 0.0f, bf16);     // tiny, seq-first, causal
        check_case(2, 5, 16, 4, 0, 1, 0.3f, bf16);     // tiny, dropout
        check_case(1, 300, 64, 2, 1, 1, 0.1f, bf16);   // 5 query blocks, 2 key blocks, causal
        check_case(2, 520, 32, 1, 0, 0, 0.2f, bf16);   // 3 key blocks, full rows, seq-first
        check_case(1, 257, 32, 2, 0, 1, 0.0f, bf16);   // a 1-column last key block
    }
    if (cpu_bf16_tiles_available()) {
        check_tiles_match(2, 5, 16, 2, 1, 0, 0.0f);    // tiny, seq-first (rows B apart), hd 8
        check_tiles_match(1, 300, 128, 2, 1, 1, 0.1f); // hd 64, 5 query blocks, 2 key blocks, dropout
        check_tiles_match(2, 520, 96, 2, 0, 0, 0.0f);  // hd 48, 3 key blocks (the last 8 keys), seq-first
        check_tiles_match(1, 257, 64, 1, 1, 1, 0.2f);  // hd 64, a 1-row last query block
        check_tiles_match(2, 256, 512, 8, 1, 1, 0.0f); // the GPT bench model's heads
    } else {
        printf("bf16 tiles: not on this CPU (emulated bf16 products); their comparison skipped\n");
    }
    TEST_MAIN_END();
}
