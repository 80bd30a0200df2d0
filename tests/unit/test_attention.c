// test_attention.c: the fused attention kernels (online softmax over key blocks, probabilities
// recomputed in backward from saved log-sum-exps) against the unfused computation in double: scores,
// masked softmax, dropout on the probabilities, P V, and the backward through all of them. Shapes cross
// the kernel's query blocks (64 rows) and key blocks (256 columns, so the running maximum rescales),
// with the causal mask and without, dropout on and off, seq-first and batch_first rows; fp32 and the
// bf16 table's products (to bf16's distance). The dropout mask is the contract of kernels.h:
// probability (i, j) of pair bh is kept iff uniform(rng, bh*T*T + i*T + j) >= p.
// Grouped-query attention (kv_heads < H, down to one key/value head) with qkv interleaved ((H + 2 kv) hd
// floats per token) and planar (three planes), the reference's addressing written from kernels.h's
// contract here: against the reference, and its forward the same bits as the same attention with the
// keys and values repeated for every query head (kv_heads = H), its backward's dk / dv within rounding
// of the repeated attention's per-head gradients summed over each group.
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
    double *dqkv;   // qkv's layout: qkv_floats(d)
} reference;

static size_t row_of(const fsdp_attention_dims *d, int b, int t) { return (size_t)(b * d->stride_b + t * d->stride_t); }

static int kv_of(const fsdp_attention_dims *d) { return d->kv_heads ? d->kv_heads : d->H; }

// floats of qkv: B*T tokens of H query heads and kv_heads key and value heads of hd
static size_t qkv_floats(const fsdp_attention_dims *d) {
    return (size_t)d->B * d->T * (size_t)(d->H + 2 * kv_of(d)) * (size_t)(d->C / d->H);
}

// Where element c of token (b, t)'s query head h (part 0), or key (part 1) / value (part 2) head h is in
// qkv, as kernels.h's fsdp_attention_dims describes it: interleaved rows of (H + 2 kv) hd floats, q | k |
// v; planar, planes of N = B*T rows, q (N, H hd), then k (N, kv hd), then v (N, kv hd)
static size_t at_of(const fsdp_attention_dims *d, int part, int b, int t, int h, int c) {
    size_t hd = (size_t)(d->C / d->H), kv = (size_t)kv_of(d), H = (size_t)d->H, N = (size_t)d->B * d->T;
    size_t row = row_of(d, b, t);
    if (!d->planar) return row * (H + 2 * kv) * hd + (part == 0 ? 0 : part == 1 ? H : H + kv) * hd + h * hd + c;
    if (part == 0) return row * H * hd + h * hd + c;
    return N * H * hd + (part == 2 ? N * kv * hd : 0) + row * kv * hd + h * hd + c;
}

// the unfused attention in double: forward (out, lse) and backward (dqkv) for upstream gradient dout
static reference unfused(const float *qkv, const float *dout, const fsdp_attention_dims *d) {
    int B = d->B, T = d->T, C = d->C, H = d->H, hd = C / H, group = H / kv_of(d);
    double scale = 1.0 / sqrt((double)hd), keep = 1.0 / (1.0 - d->dropout_p);
    reference r = {calloc((size_t)B * T * C, sizeof(double)), calloc((size_t)B * H * T, sizeof(double)),
                   calloc(qkv_floats(d), sizeof(double))};
    double *s = malloc(sizeof(double) * (size_t)T * T), *p = malloc(sizeof(double) * (size_t)T * T);
    double *z = malloc(sizeof(double) * (size_t)T * T), *dp = malloc(sizeof(double) * (size_t)T * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int bh = b * H + h, kvh = h / group;  // the key/value head query head h reads
#define Q(t, c) ((double)qkv[at_of(d, 0, b, t, h, c)])
#define KK(t, c) ((double)qkv[at_of(d, 1, b, t, kvh, c)])
#define V(t, c) ((double)qkv[at_of(d, 2, b, t, kvh, c)])
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
                    r.dqkv[at_of(d, 0, b, i, h, c)] = aq;  // dk, dv: the sum over the group's query heads
                    r.dqkv[at_of(d, 1, b, i, kvh, c)] += ak;
                    r.dqkv[at_of(d, 2, b, i, kvh, c)] += av;
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

// the dims of a case: kv key/value heads (0: H), planar or interleaved qkv
static fsdp_attention_dims dims(int B, int T, int C, int H, int kv, int planar, int causal, int batch_first, float p) {
    return (fsdp_attention_dims){.B = B, .T = T, .C = C, .H = H, .stride_b = batch_first ? T : 1,
                                 .stride_t = batch_first ? 1 : B, .causal = causal, .dropout_p = p,
                                 .rng = {2024, 99}, .kv_heads = kv, .planar = planar};
}

static const char *layout_name(const fsdp_attention_dims *d) { return d->planar ? "planar" : "interleaved"; }

static void check_case(fsdp_attention_dims d, int bf16) {
    int B = d.B, T = d.T, C = d.C, H = d.H, causal = d.causal, batch_first = d.stride_t == 1;
    float p = d.dropout_p;
    size_t rows = (size_t)B * T, n3 = qkv_floats(&d);
    float *qkv = malloc(sizeof(float) * n3), *dout = malloc(sizeof(float) * rows * C);
    float *out = malloc(sizeof(float) * rows * C), *stats = malloc(sizeof(float) * (size_t)B * H * T);
    float *dqkv = malloc(sizeof(float) * n3);
    fsdp_rng_uniform_range((fsdp_rng){5, 6}, 0, qkv, n3, -2.5f, 2.5f);  // peaked rows: maxima move
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
    double e_d = rel_err(dqkv, r.dqkv, n3);
    double tol = bf16 ? 2e-2 : 1e-5;
    printf("attention B%d T%d C%d H%d kv%d %s %s %s p=%.1f %s: rel err out %.2e lse %.2e dqkv %.2e\n", B, T, C, H,
           kv_of(&d), layout_name(&d), causal ? "causal" : "full", batch_first ? "batch_first" : "seq-first", p,
           bf16 ? "bf16" : "fp32", e_out, e_lse, e_d);
    CHECK(e_out <= tol);
    CHECK(e_lse <= (bf16 ? 1e-2 : 1e-6));
    CHECK(e_d <= tol);
    free(qkv), free(dout), free(out), free(stats), free(dqkv);
    free(r.out), free(r.lse), free(r.dqkv);
}

// The bf16 attention on tiles packed once per head and query block against the same attention through
// cpu_gemm_bf16 per block (which packs on every call): the same tiles, so the same bits.
static void check_tiles_match(fsdp_attention_dims d) {
    int B = d.B, T = d.T, C = d.C, H = d.H, causal = d.causal;
    float p = d.dropout_p;
    size_t rows = (size_t)B * T, n3 = qkv_floats(&d), n1 = rows * C, ns = (size_t)B * H * T;
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
    printf("bf16 tiles vs per-call products B%d T%d C%d H%d kv%d %s %s p=%.1f: %s\n", B, T, C, H, kv_of(&d),
           layout_name(&d), causal ? "causal" : "full", p, same ? "same bits" : "differ");
    CHECK(finite);
    CHECK(memcmp(out[0], out[1], sizeof(float) * n1) == 0);
    CHECK(memcmp(stats[0], stats[1], sizeof(float) * ns) == 0);
    CHECK(memcmp(dqkv[0], dqkv[1], sizeof(float) * n3) == 0);
    for (int t = 0; t <= 1; t++) free(out[t]), free(stats[t]), free(dqkv[t]);
    free(qkv), free(dout);
}

// Grouped-query attention against the same attention with each key/value head repeated for its query
// heads (kv_heads = H, interleaved): the forward's products are the same products on the same values, so
// out and stats are the same bits; dq likewise; dk and dv are the repeated attention's per-head gradients
// summed over each group (in head order: within rounding, the sums being made in another order).
static void check_repeated(fsdp_attention_dims d, int bf16) {
    int T = d.T, C = d.C, H = d.H, hd = C / H, kv = kv_of(&d), group = H / kv;
    size_t rows = (size_t)d.B * T, n3 = qkv_floats(&d), n1 = rows * C, ns = (size_t)d.B * H * T;
    fsdp_attention_dims r = d;
    r.kv_heads = 0, r.planar = 0;
    size_t r3 = qkv_floats(&r);
    float *qkv = malloc(sizeof(float) * n3), *rqkv = malloc(sizeof(float) * r3), *dout = malloc(sizeof(float) * n1);
    fsdp_rng_uniform_range((fsdp_rng){5, 10}, 0, qkv, n3, -2.5f, 2.5f);
    fsdp_rng_uniform_range((fsdp_rng){5, 11}, 0, dout, n1, -1.0f, 1.0f);
    for (int b = 0; b < d.B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int c = 0; c < hd; c++) {
                    rqkv[at_of(&r, 0, b, t, h, c)] = qkv[at_of(&d, 0, b, t, h, c)];
                    rqkv[at_of(&r, 1, b, t, h, c)] = qkv[at_of(&d, 1, b, t, h / group, c)];
                    rqkv[at_of(&r, 2, b, t, h, c)] = qkv[at_of(&d, 2, b, t, h / group, c)];
                }
    float *out = malloc(sizeof(float) * n1), *rout = malloc(sizeof(float) * n1);
    float *stats = malloc(sizeof(float) * ns), *rstats = malloc(sizeof(float) * ns);
    float *dqkv = malloc(sizeof(float) * n3), *rdqkv = malloc(sizeof(float) * r3);
    void (*fwd)(float *, float *, const float *, const fsdp_attention_dims *) =
        bf16 ? cpu_attention_forward_bf16 : cpu_attention_forward;
    void (*bwd)(float *, const float *, const float *, const float *, const float *, const fsdp_attention_dims *) =
        bf16 ? cpu_attention_backward_bf16 : cpu_attention_backward;
    fwd(out, stats, qkv, &d), fwd(rout, rstats, rqkv, &r);
    bwd(dqkv, dout, qkv, out, stats, &d), bwd(rdqkv, dout, rqkv, rout, rstats, &r);
    int fwd_same = !memcmp(out, rout, sizeof(float) * n1) && !memcmp(stats, rstats, sizeof(float) * ns);
    double worst = 0, scale = 1e-30;  // dk, dv against the group sums; dq exactly
    int dq_same = 1;
    for (int b = 0; b < d.B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < hd; c++) {
                for (int h = 0; h < H; h++) dq_same &= dqkv[at_of(&d, 0, b, t, h, c)] == rdqkv[at_of(&r, 0, b, t, h, c)];
                for (int j = 0; j < kv; j++)
                    for (int part = 1; part <= 2; part++) {
                        double sum = 0;
                        for (int g = 0; g < group; g++) sum += rdqkv[at_of(&r, part, b, t, j * group + g, c)];
                        float got = dqkv[at_of(&d, part, b, t, j, c)];
                        worst = fmax(worst, isnan(got) ? INFINITY : fabs(got - sum));
                        scale = fmax(scale, fabs(sum));
                    }
            }
    printf("attention B%d T%d C%d H%d kv%d %s %s vs kv repeated: forward %s, dq %s, dk dv rel err %.2e\n", d.B, T,
           C, H, kv, layout_name(&d), bf16 ? "bf16" : "fp32", fwd_same ? "same bits" : "DIFFERENT",
           dq_same ? "same bits" : "DIFFERENT", worst / scale);
    CHECK(fwd_same);
    CHECK(dq_same);
    CHECK(worst / scale <= (bf16 ? 1e-5 : 1e-6));
    free(qkv), free(rqkv), free(dout), free(out), free(rout), free(stats), free(rstats), free(dqkv), free(rdqkv);
}

int main(void) {
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        check_case(dims(2, 5, 16, 2, 0, 0, 1, 0, 0.0f), bf16);     // tiny, seq-first, causal
        check_case(dims(2, 5, 16, 4, 0, 0, 0, 1, 0.3f), bf16);     // tiny, dropout
        check_case(dims(1, 300, 64, 2, 0, 0, 1, 1, 0.1f), bf16);   // 5 query blocks, 2 key blocks, causal
        check_case(dims(2, 520, 32, 1, 0, 0, 0, 0, 0.2f), bf16);   // 3 key blocks, full rows, seq-first
        check_case(dims(1, 257, 32, 2, 0, 0, 0, 1, 0.0f), bf16);   // a 1-column last key block
        // grouped-query: interleaved and planar, causal, odd T, down to one key/value head
        check_case(dims(2, 5, 16, 4, 2, 0, 1, 0, 0.0f), bf16);     // tiny, seq-first
        check_case(dims(2, 37, 24, 6, 3, 1, 1, 1, 0.1f), bf16);    // planar, hd 4, dropout
        check_case(dims(3, 37, 24, 6, 2, 0, 0, 0, 0.0f), bf16);    // groups of 3, full rows, seq-first
        check_case(dims(1, 300, 64, 4, 1, 1, 1, 1, 0.0f), bf16);   // one key/value head, 5 query blocks
        check_case(dims(2, 261, 48, 4, 2, 1, 0, 0, 0.2f), bf16);   // planar seq-first, 2 key blocks
        check_case(dims(2, 19, 32, 4, 0, 1, 1, 1, 0.0f), bf16);    // planar, kv_heads = H
        check_repeated(dims(2, 37, 24, 6, 3, 1, 1, 1, 0.1f), bf16);
        check_repeated(dims(2, 70, 64, 4, 1, 0, 1, 0, 0.0f), bf16);
        check_repeated(dims(1, 300, 128, 4, 2, 1, 0, 1, 0.0f), bf16);
    }
    if (cpu_bf16_tiles_available()) {
        check_tiles_match(dims(2, 5, 16, 2, 0, 0, 1, 0, 0.0f));    // tiny, seq-first (rows B apart), hd 8
        check_tiles_match(dims(1, 300, 128, 2, 0, 0, 1, 1, 0.1f)); // hd 64, 5 query blocks, 2 key blocks, dropout
        check_tiles_match(dims(2, 520, 96, 2, 0, 0, 0, 0, 0.0f));  // hd 48, 3 key blocks (the last 8 keys), seq-first
        check_tiles_match(dims(1, 257, 64, 1, 0, 0, 1, 1, 0.2f));  // hd 64, a 1-row last query block
        check_tiles_match(dims(2, 256, 512, 8, 0, 0, 1, 1, 0.0f)); // the GPT bench model's heads
        check_tiles_match(dims(2, 300, 256, 4, 2, 1, 1, 1, 0.1f)); // grouped, planar, hd 64
        check_tiles_match(dims(2, 77, 192, 6, 2, 0, 0, 0, 0.0f));  // grouped, interleaved, hd 32, seq-first
    } else {
        printf("bf16 tiles: not on this CPU (emulated bf16 products); their comparison skipped\n");
    }
    TEST_MAIN_END();
}
