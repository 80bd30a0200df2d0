// test_core.c: the counter-based RNG and dropout masks (independent of ranges, offsets and thread
// counts), allocation accounting, bf16/f16 conversions, AdamW and SGD against double-precision
// references of torch.optim's formulas, the clipping coefficient and the LR schedule.
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "optim/optim.h"
#include "tensor/tensor.h"
#include "test.h"

// ---------------------------------------------------------------------------------------------
// (a) RNG and dropout

#define RNG_N 1000

static void test_rng_ranges(void) {
    fsdp_rng rng = {2024, fsdp_hash_name("layer.weight")};
    static const size_t cuts[] = {0, 1, 3, 10, 517, 518, 999, RNG_N};  // odd boundaries, not multiples of 4
    float full_u[RNG_N], part_u[RNG_N], full_n[RNG_N], part_n[RNG_N], full_r[RNG_N];
    fsdp_rng_uniform(rng, 0, full_u, RNG_N);
    fsdp_rng_normal(rng, 0, full_n, RNG_N, 0.5f, 2.0f);
    fsdp_rng_uniform_range(rng, 0, full_r, RNG_N, -3.0f, 5.0f);
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
        size_t a = cuts[c], b = cuts[c + 1];
        fsdp_rng_uniform(rng, a, part_u + a, b - a);
        fsdp_rng_normal(rng, a, part_n + a, b - a, 0.5f, 2.0f);
    }
    CHECK(memcmp(full_u, part_u, sizeof full_u) == 0);
    CHECK(memcmp(full_n, part_n, sizeof full_n) == 0);
    int at_ok = 1, range_ok = 1;
    for (int i = 0; i < RNG_N; i++) {
        at_ok &= fsdp_rng_uniform_at(rng, (uint64_t)i) == full_u[i];
        range_ok &= full_r[i] == -3.0f + 8.0f * full_u[i] && full_r[i] >= -3.0f && full_r[i] < 5.0f;
    }
    CHECK(at_ok);
    CHECK(range_ok);
    // other seeds and streams give other numbers
    float other[16];
    fsdp_rng_uniform((fsdp_rng){2025, rng.stream}, 0, other, 16);
    CHECK(memcmp(other, full_u, sizeof other) != 0);
    fsdp_rng_uniform((fsdp_rng){2024, rng.stream + 1}, 0, other, 16);
    CHECK(memcmp(other, full_u, sizeof other) != 0);
    CHECK(fsdp_hash_name("a") != fsdp_hash_name("b"));
}

static void test_rng_distribution(void) {
    size_t n = 100000;
    float *u = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));
    fsdp_rng rng = {7, 99};
    fsdp_rng_uniform(rng, 12345, u, n);
    fsdp_rng_normal(rng, 12345, z, n, 0.0f, 1.0f);
    double umin = 1, umax = 0, usum = 0, zsum = 0, zsq = 0;
    for (size_t i = 0; i < n; i++) {
        umin = fmin(umin, u[i]), umax = fmax(umax, u[i]), usum += u[i];
        zsum += z[i], zsq += (double)z[i] * z[i];
    }
    double zmean = zsum / n, zstd = sqrt(zsq / n - zmean * zmean);
    printf("rng: uniform in [%g, %g] mean %.4f; normal mean %.4f std %.4f\n", umin, umax, usum / n, zmean, zstd);
    CHECK(umin >= 0.0 && umax < 1.0);
    CHECK_NEAR(usum / n, 0.5, 0.005);
    CHECK_NEAR(zmean, 0.0, 0.015);
    CHECK_NEAR(zstd, 1.0, 0.015);
    free(u), free(z);
}

static void test_dropout(void) {
    const fsdp_kernels *k = fsdp_kernels_cpu();
    size_t n = 100003;
    float p = 0.3f;
    fsdp_rng rng = {1234, 5678};
    float *x = malloc(n * sizeof(float)), *o1 = malloc(n * sizeof(float)), *o2 = malloc(n * sizeof(float));
    float *d = malloc(n * sizeof(float)), *ones = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 97) * 0.01f, ones[i] = 1.0f;
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    k->dropout_forward(o1, x, n, p, rng);
    omp_set_num_threads(2);
    k->dropout_forward(o2, x, n, p, rng);
    CHECK(memcmp(o1, o2, n * sizeof(float)) == 0);
    k->dropout_backward(d, ones, n, p, rng);  // the same mask from the same rng
    omp_set_num_threads(saved);

    float scale = 1.0f / (1.0f - p);
    size_t kept = 0;
    int values_ok = 1, mask_ok = 1, bwd_ok = 1;
    for (size_t i = 0; i < n; i++) {
        int keep = o1[i] != 0.0f;
        kept += (size_t)keep;
        values_ok &= !keep || o1[i] == x[i] * scale;
        mask_ok &= keep == (fsdp_rng_uniform_at(rng, i) >= p);  // the contract in kernels.h
        bwd_ok &= d[i] == (keep ? scale : 0.0f);
    }
    printf("dropout p=%.1f: kept %.4f of %zu\n", p, (double)kept / n, n);
    CHECK_NEAR((double)kept / n, 1.0 - p, 0.005);
    CHECK(values_ok);
    CHECK(mask_ok);
    CHECK(bwd_ok);
    memcpy(o2, x, n * sizeof(float));  // in place gives the same result
    k->dropout_forward(o2, o2, n, p, rng);
    CHECK(memcmp(o1, o2, n * sizeof(float)) == 0);
    k->dropout_forward(o2, x, n, 0.0f, rng);  // p = 0 is the identity
    CHECK(memcmp(o2, x, n * sizeof(float)) == 0);
    free(x), free(o1), free(o2), free(d), free(ones);
}

// ---------------------------------------------------------------------------------------------
// (b) allocation accounting

static void test_alloc(void) {
    size_t p0 = fsdp_mem_current(FSDP_MEM_PARAMS), g0 = fsdp_mem_current(FSDP_MEM_GRADS);
    size_t t0 = fsdp_mem_current_total();
    fsdp_mem_reset_peaks();
    CHECK_EQ_INT(fsdp_mem_peak(FSDP_MEM_PARAMS), p0);
    unsigned char *a = fsdp_alloc(1000, FSDP_MEM_PARAMS);
    unsigned char *b = fsdp_alloc(3000, FSDP_MEM_GRADS);
    unsigned char *c = fsdp_alloc(500, FSDP_MEM_PARAMS);
    CHECK(a && b && c);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_PARAMS), p0 + 1500);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_GRADS), g0 + 3000);
    CHECK_EQ_INT(fsdp_mem_current_total(), t0 + 4500);
    CHECK_EQ_INT(fsdp_mem_peak(FSDP_MEM_PARAMS), p0 + 1500);
    CHECK_EQ_INT(fsdp_mem_peak_total(), t0 + 4500);
    int zero = 1;
    for (int i = 0; i < 1000; i++) zero &= a[i] == 0;
    CHECK(zero);
    memset(a, 0xAB, 1000);  // the whole block is writable (ASan builds would complain otherwise)
    fsdp_free(a);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_PARAMS), p0 + 500);
    CHECK_EQ_INT(fsdp_mem_peak(FSDP_MEM_PARAMS), p0 + 1500);  // free does not lower the peak
    CHECK_EQ_INT(fsdp_mem_current_total(), t0 + 3500);
    CHECK_EQ_INT(fsdp_mem_peak_total(), t0 + 4500);
    fsdp_mem_reset_peaks();
    CHECK_EQ_INT(fsdp_mem_peak(FSDP_MEM_PARAMS), p0 + 500);
    CHECK_EQ_INT(fsdp_mem_peak_total(), t0 + 3500);
    fsdp_free(b);
    fsdp_free(c);
    fsdp_free(NULL);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_PARAMS), p0);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_GRADS), g0);
    CHECK_EQ_INT(fsdp_mem_current_total(), t0);
    CHECK_EQ_INT(FSDP_ALIGNMENT, 64);
    static const size_t sizes[] = {0, 1, 3, 63, 64, 65, 1000, 4097, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = fsdp_alloc(sizes[i], FSDP_MEM_OTHER);
        CHECK(p != NULL);
        CHECK_EQ_INT((uintptr_t)p % 64, 0);
        fsdp_free(p);
    }
    CHECK(strcmp(fsdp_mem_category_name(FSDP_MEM_OPTIM), "optimizer") == 0);
    CHECK(strcmp(fsdp_mem_category_name(FSDP_MEM_WORKSPACE), "workspace") == 0);
    CHECK(fsdp_mem_os_peak_rss() > 0);
    // a large block freed and asked for again (the root unit's gradient each step) reuses its hole
    // instead of growing the heap past the accounted peak
    fsdp_mem_init();
    const size_t big = (size_t)48 << 20;
    unsigned char *first = fsdp_alloc(big, FSDP_MEM_GRADS);
    void *after = fsdp_alloc(1 << 20, FSDP_MEM_OTHER);  // keeps the hole from merging with the heap top
    CHECK(first != NULL && after != NULL);
    fsdp_free(first);
    unsigned char *again = fsdp_alloc(big, FSDP_MEM_GRADS);
#ifndef __SANITIZE_ADDRESS__  // ASan's quarantine holds freed blocks back on purpose
    CHECK(again == first);
#endif
    fsdp_free(again);
    fsdp_free(after);
}

// ---------------------------------------------------------------------------------------------
// (c) bf16 / f16

static void test_half_conversions(void) {
    // f16: exact values, limits, round to nearest even
    static const struct { float f; uint16_t h; } f16[] = {
        {1.0f, 0x3C00}, {-2.5f, 0xC100}, {65504.0f, 0x7BFF}, {0.0f, 0x0000}, {-0.0f, 0x8000},
        {0.5f, 0x3800}, {0x1p-24f, 0x0001}, {0x1p-14f, 0x0400}, {0x1.ff8p-15f, 0x03FF},
    };
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++) {
        CHECK_EQ_INT(fsdp_f32_to_f16(f16[i].f), f16[i].h);
        CHECK(fsdp_f16_to_f32(f16[i].h) == f16[i].f);
    }
    CHECK(signbit(fsdp_f16_to_f32(0x8000)));
    CHECK_EQ_INT(fsdp_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);         // tie -> even (down)
    CHECK_EQ_INT(fsdp_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);     // tie -> even (up)
    CHECK_EQ_INT(fsdp_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // above the tie
    CHECK_EQ_INT(fsdp_f32_to_f16(0x1p-25f), 0x0000);                // subnormal tie -> even
    CHECK_EQ_INT(fsdp_f32_to_f16(3 * 0x1p-25f), 0x0002);
    CHECK_EQ_INT(fsdp_f32_to_f16(65519.0f), 0x7BFF);                // below the overflow tie
    CHECK_EQ_INT(fsdp_f32_to_f16(65520.0f), 0x7C00);                // overflow -> inf
    CHECK_EQ_INT(fsdp_f32_to_f16(-INFINITY), 0xFC00);
    CHECK(isinf(fsdp_f16_to_f32(0x7C00)));
    CHECK(isnan(fsdp_f16_to_f32(fsdp_f32_to_f16(NAN))));
    int rt = 1;  // every non-NaN half survives f16 -> f32 -> f16
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7C00) != 0x7C00 || (h & 0x3FF) == 0) rt &= fsdp_f32_to_f16(fsdp_f16_to_f32((uint16_t)h)) == h;
    CHECK(rt);

    // bf16
    static const struct { float f; fsdp_bf16 h; } bf[] = {
        {1.0f, 0x3F80}, {-2.5f, 0xC020}, {0.0f, 0x0000}, {-0.0f, 0x8000}, {65504.0f, 0x4780},
        {INFINITY, 0x7F80}, {1.0f + 0x1p-8f, 0x3F80}, {1.0f + 3 * 0x1p-8f, 0x3F82},
        {1.0f + 0x1p-8f + 0x1p-20f, 0x3F81}, {FLT_MAX, 0x7F80},
    };
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++) CHECK_EQ_INT(fsdp_f32_to_bf16(bf[i].f), bf[i].h);
    CHECK(fsdp_bf16_to_f32(0x3F80) == 1.0f && fsdp_bf16_to_f32(0xC020) == -2.5f);
    CHECK(isnan(fsdp_bf16_to_f32(fsdp_f32_to_bf16(NAN))));
    rt = 1;
    for (uint32_t h = 0; h < 0x10000; h++)
        if ((h & 0x7F80) != 0x7F80 || (h & 0x7F) == 0) rt &= fsdp_f32_to_bf16(fsdp_bf16_to_f32((fsdp_bf16)h)) == h;
    CHECK(rt);
    float src[3] = {1.0f, -2.5f, 3.0f + 0x1p-7f}, back[3];
    fsdp_bf16 mid[3];
    fsdp_f32_to_bf16_array(mid, src, 3);
    fsdp_bf16_to_f32_array(back, mid, 3);
    CHECK(back[0] == 1.0f && back[1] == -2.5f && back[2] == 3.0f);  // 3 + 2^-7 is a tie -> 3
}

// ---------------------------------------------------------------------------------------------
// (d) AdamW vs torch.optim.AdamW in double

#define OPT_N 6
#define OPT_STEPS 3

static const float opt_p0[OPT_N] = {1.0f, -0.5f, 0.25f, 2.0f, -1.5f, 0.0f};
static float opt_grad(int step, int i) {  // varying signs and magnitudes, one exact zero
    static const float g[OPT_STEPS][OPT_N] = {
        {0.1f, -0.2f, 0.0f, 1e-4f, 3.0f, -0.7f},
        {-0.3f, 0.2f, 0.5f, 2e-4f, 1.0f, 0.1f},
        {0.05f, 0.4f, -0.5f, -1e-4f, -2.0f, 0.3f},
    };
    return g[step][i];
}

static void test_adamw(void) {
    const fsdp_kernels *k = fsdp_kernels_cpu();
    fsdp_adamw_config cfg = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f};
    float lr = 5e-2f;  // overrides cfg.lr (as a schedule does); weight decay uses it too
    fsdp_adamw full, halves;
    CHECK(fsdp_adamw_create(&full, cfg, OPT_N) == FSDP_OK);
    CHECK(fsdp_adamw_create(&halves, cfg, OPT_N) == FSDP_OK);
    float p[OPT_N], q[OPT_N], g[OPT_N];
    double rp[OPT_N], rm[OPT_N] = {0}, rv[OPT_N] = {0};
    for (int i = 0; i < OPT_N; i++) p[i] = q[i] = opt_p0[i], rp[i] = opt_p0[i];
    double b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps, wd = cfg.weight_decay, dlr = lr;
    for (int t = 1; t <= OPT_STEPS; t++) {
        for (int i = 0; i < OPT_N; i++) g[i] = opt_grad(t - 1, i);
        fsdp_adamw_begin_step(&full);
        fsdp_adamw_begin_step(&halves);
        fsdp_adamw_update(k, &full, lr, p, g, 0, OPT_N);
        fsdp_adamw_update(k, &halves, lr, q, g, 0, 2);  // two slices addressed by offset
        fsdp_adamw_update(k, &halves, lr, q + 2, g + 2, 2, OPT_N - 2);
        for (int i = 0; i < OPT_N; i++) {
            double gi = g[i];
            rp[i] *= 1.0 - dlr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            rp[i] -= dlr / (1 - pow(b1, t)) * rm[i] / (sqrt(rv[i]) / sqrt(1 - pow(b2, t)) + eps);
        }
    }
    CHECK_EQ_INT(full.step, OPT_STEPS);
    double worst = 0;
    for (int i = 0; i < OPT_N; i++) {
        worst = fmax(worst, fabs(p[i] - rp[i]));
        CHECK_NEAR(p[i], rp[i], 2e-6);
        CHECK_NEAR(full.m[i], rm[i], 1e-6);
        CHECK_NEAR(full.v[i], rv[i], 1e-6);
    }
    printf("adamw: 3 steps, worst |param - reference| %.2e\n", worst);
    CHECK(memcmp(p, q, sizeof p) == 0);
    CHECK(memcmp(full.m, halves.m, sizeof(float) * OPT_N) == 0 && memcmp(full.v, halves.v, sizeof(float) * OPT_N) == 0);
    fsdp_adamw_free(&full);
    fsdp_adamw_free(&halves);
    fsdp_adamw_config d = fsdp_adamw_defaults();
    CHECK(d.lr == 1e-3f && d.beta1 == 0.9f && d.beta2 == 0.999f && d.eps == 1e-8f && d.weight_decay == 0.01f);
}

// ---------------------------------------------------------------------------------------------
// (e) SGD vs torch.optim.SGD in double (the first step's buffer is the gradient itself)

static void test_sgd_case(float momentum, float dampening, float wd, int nesterov) {
    fsdp_sgd_config cfg = {0.1f, momentum, dampening, wd, nesterov};
    float lr = 0.05f;
    fsdp_sgd opt, sliced;
    CHECK(fsdp_sgd_create(&opt, cfg, OPT_N) == FSDP_OK);
    CHECK(fsdp_sgd_create(&sliced, cfg, OPT_N) == FSDP_OK);
    CHECK((opt.momentum_buf != NULL) == (momentum != 0.0f));
    float p[OPT_N], q[OPT_N], g[OPT_N];
    double rp[OPT_N], buf[OPT_N] = {0};
    for (int i = 0; i < OPT_N; i++) p[i] = q[i] = opt_p0[i], rp[i] = opt_p0[i];
    for (int t = 1; t <= OPT_STEPS; t++) {
        for (int i = 0; i < OPT_N; i++) g[i] = opt_grad(t - 1, i);
        fsdp_sgd_begin_step(&opt);
        fsdp_sgd_begin_step(&sliced);
        fsdp_sgd_update(&opt, lr, p, g, 0, OPT_N);
        fsdp_sgd_update(&sliced, lr, q + 3, g + 3, 3, OPT_N - 3);
        fsdp_sgd_update(&sliced, lr, q, g, 0, 3);
        for (int i = 0; i < OPT_N; i++) {
            double d = (double)g[i] + (double)wd * rp[i];
            if (momentum != 0.0f) {
                buf[i] = t == 1 ? d : (double)momentum * buf[i] + (1.0 - (double)dampening) * d;
                d = nesterov ? d + (double)momentum * buf[i] : buf[i];
            }
            rp[i] -= (double)lr * d;
        }
    }
    double worst = 0;
    for (int i = 0; i < OPT_N; i++) worst = fmax(worst, fabs(p[i] - rp[i]));
    printf("sgd: momentum %.1f dampening %.1f wd %.2f nesterov %d: worst |param - reference| %.2e\n",
           momentum, dampening, wd, nesterov, worst);
    CHECK(worst < 1e-6);
    CHECK(memcmp(p, q, sizeof p) == 0);
    fsdp_sgd_free(&opt);
    fsdp_sgd_free(&sliced);
}

// ---------------------------------------------------------------------------------------------
// (f) clipping coefficient and warmup + cosine schedule

static void test_schedule(void) {
    CHECK_NEAR(fsdp_clip_coefficient(2.0, 1.0f), 1.0 / (2.0 + 1e-6), 1e-7);
    CHECK_NEAR(fsdp_clip_coefficient(10.0, 0.5f), 0.05, 1e-7);
    CHECK(fsdp_clip_coefficient(0.5, 1.0f) == 1.0f);
    CHECK(fsdp_clip_coefficient(0.0, 1.0f) == 1.0f);
    CHECK(fsdp_clip_coefficient(1.0, 1.0f) < 1.0f);  // norm + 1e-6 in the denominator

    float base = 1e-3f, lo = 1e-4f;  // warmup 10 steps, cosine to step 110
    for (int s = 0; s < 10; s++)  // linear ramp: step s (from 0) gets base * (s + 1) / warmup
        CHECK_NEAR(fsdp_lr_warmup_cosine(s, base, 10, 110, lo), base * (s + 1) / 10.0, 1e-9);
    CHECK_NEAR(fsdp_lr_warmup_cosine(10, base, 10, 110, lo), base, 1e-9);
    CHECK_NEAR(fsdp_lr_warmup_cosine(60, base, 10, 110, lo), (base + lo) / 2, 1e-9);
    CHECK_NEAR(fsdp_lr_warmup_cosine(35, base, 10, 110, lo), lo + (base - lo) * 0.5 * (1 + cos(3.14159265358979323846 / 4)), 1e-9);
    CHECK_NEAR(fsdp_lr_warmup_cosine(110, base, 10, 110, lo), lo, 1e-9);
    CHECK_NEAR(fsdp_lr_warmup_cosine(500, base, 10, 110, lo), lo, 1e-9);  // stays at min
    CHECK(fsdp_lr_warmup_cosine(59, base, 10, 110, lo) > fsdp_lr_warmup_cosine(61, base, 10, 110, lo));
    CHECK_NEAR(fsdp_lr_warmup_cosine(0, base, 0, 100, lo), base, 1e-9);    // no warmup
    CHECK_NEAR(fsdp_lr_warmup_cosine(50, base, 0, 100, 0.0f), base / 2, 1e-9);
    CHECK_NEAR(fsdp_lr_warmup_cosine(20, base, 10, 10, lo), base, 1e-9);   // total <= warmup: constant
}

int main(void) {
    test_rng_ranges();
    test_rng_distribution();
    test_dropout();
    test_alloc();
    test_half_conversions();
    test_adamw();
    test_sgd_case(0.9f, 0.0f, 0.01f, 0);
    test_sgd_case(0.9f, 0.0f, 0.01f, 1);
    test_sgd_case(0.9f, 0.1f, 0.0f, 0);
    test_sgd_case(0.0f, 0.0f, 0.01f, 0);
    test_schedule();
    TEST_MAIN_END();
}
