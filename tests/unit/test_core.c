// test_core.c: the counter-based RNG and dropout masks (independent of ranges, offsets and thread
// counts), allocation accounting, bf16/f16 conversions, AdamW and SGD against double-precision
// references of torch.optim's formulas, the clipping coefficient and the LR schedule, and the kernels
// that moved into the table with the device layer (bf16 addends, row fill, conversions, the abs-mean
// loss, the SGD step, the device-double scalars) against plain reference loops.
// Kernels run through the default device's table ($FSDP_DEVICE) on device buffers written and read
// with copies, so the test passes on the guard device too (FSDP_DEVICE=guard).
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "device/device.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "optim/optim.h"
#include "tensor/tensor.h"
#include "test.h"

static fsdp_dev *DEV;
static fsdp_stream *ST;
static const fsdp_kernels *K;  // fsdp_dev_kernels(DEV, 0)

static void *dalloc(size_t bytes) {
    void *p = fsdp_dev_alloc(DEV, bytes ? bytes : 1, FSDP_MEM_ACTIVATIONS);
    FSDP_ASSERT(p != NULL);
    return p;
}
static void dfree(void *p) { fsdp_dev_free(DEV, p); }
static void upload(void *dev_dst, const void *host_src, size_t bytes) {
    CHECK(fsdp_copy_h2d(ST, dev_dst, host_src, bytes) == FSDP_OK);
}
static void download(void *host_dst, const void *dev_src, size_t bytes) {
    CHECK(fsdp_copy_d2h(ST, host_dst, dev_src, bytes) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(ST) == FSDP_OK);
}
// a device copy of host data
static void *dcopy(const void *host_src, size_t bytes) {
    void *d = dalloc(bytes);
    upload(d, host_src, bytes);
    return d;
}
static double read_double(const double *dev_src) {
    double v = 0.0;
    CHECK(fsdp_dev_read(ST, &v, dev_src, sizeof v) == FSDP_OK);
    return v;
}

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

// Random123's known-answer vectors for Philox4x32-10 (kat_vectors: ctr, key -> out), and the batched
// generator (AVX-512, 16 blocks a pass) word for word against the scalar one, across the 2^32 carry
// of the counter's low word and at the end of the counter space.
static void test_philox(void) {
    static const struct { uint64_t seed, stream, block; uint32_t out[4]; } kat[] = {
        {0, 0, 0, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {~0ull, ~0ull, ~0ull, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull,
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t w[4];
        fsdp_philox4x32(kat[i].seed, kat[i].stream, kat[i].block, w);
        CHECK(memcmp(w, kat[i].out, sizeof w) == 0);
    }
    static const uint64_t firsts[] = {0, 5, 0xFFFFFFF8ull, 0x1FFFFFFF5ull, ~0ull - 40};
    uint32_t batched[4 * 130];
    int same = 1;
    for (size_t f = 0; f < sizeof firsts / sizeof firsts[0]; f++)
        for (size_t nb = 0; nb <= 130; nb += 13) {
            fsdp_philox4x32_blocks(77, 0xABCDEF0123ull, firsts[f], nb, batched);
            for (size_t b = 0; b < nb; b++) {
                uint32_t w[4];
                fsdp_philox4x32(77, 0xABCDEF0123ull, firsts[f] + b, w);
                same &= memcmp(w, batched + 4 * b, sizeof w) == 0;
            }
        }
    CHECK(same);
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
    size_t n = 100003, bytes = n * sizeof(float);
    float p = 0.3f;
    fsdp_rng rng = {1234, 5678};
    float *x = malloc(n * sizeof(float)), *o1 = malloc(n * sizeof(float)), *o2 = malloc(n * sizeof(float));
    float *d = malloc(n * sizeof(float)), *ones = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = 1.0f + (float)(i % 97) * 0.01f, ones[i] = 1.0f;
    float *xd = dcopy(x, bytes), *onesd = dcopy(ones, bytes), *od = dalloc(bytes), *dd = dalloc(bytes);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    K->dropout_forward(ST, od, xd, n, p, rng);
    download(o1, od, bytes);
    omp_set_num_threads(2);
    K->dropout_forward(ST, od, xd, n, p, rng);
    download(o2, od, bytes);
    CHECK(memcmp(o1, o2, n * sizeof(float)) == 0);
    K->dropout_backward(ST, dd, onesd, n, p, rng);  // the same mask from the same rng
    download(d, dd, bytes);
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
    upload(od, x, bytes);  // in place gives the same result
    K->dropout_forward(ST, od, od, n, p, rng);
    download(o2, od, bytes);
    CHECK(memcmp(o1, o2, n * sizeof(float)) == 0);
    K->dropout_forward(ST, od, xd, n, 0.0f, rng);  // p = 0 is the identity
    download(o2, od, bytes);
    CHECK(memcmp(o2, x, n * sizeof(float)) == 0);
    // the boundary: an element whose uniform equals p is kept, and dropped when p is one float above it
    // (below 0.5, where that float is not a multiple of 2^-24)
    size_t at = 4097;
    while (fsdp_rng_uniform_at(rng, at) >= 0.5f) at++;
    float u = fsdp_rng_uniform_at(rng, at);
    K->dropout_forward(ST, od, xd, n, u, rng);
    download(o2, od, bytes);
    CHECK(o2[at] != 0.0f);
    K->dropout_forward(ST, od, xd, n, nextafterf(u, 1.0f), rng);
    download(o2, od, bytes);
    CHECK(o2[at] == 0.0f);
    free(x), free(o1), free(o2), free(d), free(ones);
    dfree(xd), dfree(onesd), dfree(od), dfree(dd);
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
    // the arrays (16 at a time where the CPU has AVX-512) round every bit pattern as the scalar does:
    // signs, denormals, ties, infinities, NaNs with payloads in the low bits; odd length for the tail
    enum { PATTERNS = 1 << 20 };
    uint32_t *bits = malloc(sizeof(uint32_t) * PATTERNS);
    fsdp_bf16 *arr = malloc(sizeof(fsdp_bf16) * PATTERNS);
    uint32_t x = 12345u;
    for (uint32_t i = 0; i < PATTERNS; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t low = i % 4 == 0 ? 0x8000u : i % 4 == 1 ? 0x7fffu : x & 0xffffu;  // ties and near-ties too
        bits[i] = (x & 0xffff0000u) | low;
    }
    bits[0] = 0x7f800001u, bits[1] = 0xffc00000u, bits[2] = 0x00000001u, bits[3] = 0x807fffffu;
    float *vals = malloc(sizeof(float) * PATTERNS);
    memcpy(vals, bits, sizeof(float) * PATTERNS);
    size_t odd = PATTERNS - 5;
    fsdp_f32_to_bf16_array(arr, vals, odd);
    int same = 1;
    for (size_t i = 0; i < odd; i++) same &= arr[i] == fsdp_f32_to_bf16(vals[i]);
    CHECK(same);
    fsdp_f32_to_bf16_in_place(bits, odd);  // the first 2 * odd bytes now hold the same bf16 values
    CHECK(memcmp(bits, arr, sizeof(fsdp_bf16) * odd) == 0);
    free(bits), free(arr), free(vals);
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
    fsdp_adamw_config cfg = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f};
    float lr = 5e-2f;  // overrides cfg.lr (as a schedule does); weight decay uses it too
    fsdp_adamw full, halves;
    CHECK(fsdp_adamw_create(&full, cfg, OPT_N, DEV) == FSDP_OK);
    CHECK(fsdp_adamw_create(&halves, cfg, OPT_N, DEV) == FSDP_OK);
    CHECK(full.dev == DEV);
    float p[OPT_N], q[OPT_N], g[OPT_N];
    double rp[OPT_N], rm[OPT_N] = {0}, rv[OPT_N] = {0};
    for (int i = 0; i < OPT_N; i++) p[i] = q[i] = opt_p0[i], rp[i] = opt_p0[i];
    float *pd = dcopy(p, sizeof p), *qd = dcopy(q, sizeof q), *gd = dalloc(sizeof g);
    double b1 = cfg.beta1, b2 = cfg.beta2, eps = cfg.eps, wd = cfg.weight_decay, dlr = lr;
    for (int t = 1; t <= OPT_STEPS; t++) {
        for (int i = 0; i < OPT_N; i++) g[i] = opt_grad(t - 1, i);
        upload(gd, g, sizeof g);
        fsdp_adamw_begin_step(&full);
        fsdp_adamw_begin_step(&halves);
        fsdp_adamw_update(K, ST, &full, lr, pd, gd, 0, OPT_N);
        fsdp_adamw_update(K, ST, &halves, lr, qd, gd, 0, 2);  // two slices addressed by offset
        fsdp_adamw_update(K, ST, &halves, lr, qd + 2, gd + 2, 2, OPT_N - 2);
        for (int i = 0; i < OPT_N; i++) {
            double gi = g[i];
            rp[i] *= 1.0 - dlr * wd;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            rp[i] -= dlr / (1 - pow(b1, t)) * rm[i] / (sqrt(rv[i]) / sqrt(1 - pow(b2, t)) + eps);
        }
    }
    CHECK_EQ_INT(full.step, OPT_STEPS);
    float fm[OPT_N], fv[OPT_N], hm[OPT_N], hv[OPT_N];
    download(p, pd, sizeof p), download(q, qd, sizeof q);
    download(fm, full.m, sizeof fm), download(fv, full.v, sizeof fv);
    download(hm, halves.m, sizeof hm), download(hv, halves.v, sizeof hv);
    double worst = 0;
    for (int i = 0; i < OPT_N; i++) {
        worst = fmax(worst, fabs(p[i] - rp[i]));
        CHECK_NEAR(p[i], rp[i], 2e-6);
        CHECK_NEAR(fm[i], rm[i], 1e-6);
        CHECK_NEAR(fv[i], rv[i], 1e-6);
    }
    printf("adamw: 3 steps, worst |param - reference| %.2e\n", worst);
    CHECK(memcmp(p, q, sizeof p) == 0);
    CHECK(memcmp(fm, hm, sizeof fm) == 0 && memcmp(fv, hv, sizeof fv) == 0);
    dfree(pd), dfree(qd), dfree(gd);
    fsdp_adamw_free(&full);
    fsdp_adamw_free(&halves);
    fsdp_adamw_config d = fsdp_adamw_defaults();
    CHECK(d.lr == 1e-3f && d.beta1 == 0.9f && d.beta2 == 0.999f && d.eps == 1e-8f && d.weight_decay == 0.01f);
}

// The vectorized kernel (16 lanes, chunks of 4096 over threads) against the scalar formula in float,
// in the same order: the same bits for every element, including the tails of chunks and vectors.
static void test_adamw_lanes(void) {
    size_t n = 3 * 4096 + 16 * 7 + 5, bytes = n * sizeof(float);
    float *p = malloc(bytes), *g = malloc(bytes), *m = malloc(bytes), *v = malloc(bytes);
    float *rp = malloc(bytes), *rm = malloc(bytes), *rv = malloc(bytes);
    fsdp_rng rng = {31, 32};
    fsdp_rng_uniform_range(rng, 0, p, n, -2.0f, 2.0f);
    fsdp_rng_uniform_range(rng, n, g, n, -1.0f, 1.0f);
    fsdp_rng_uniform_range(rng, 2 * n, m, n, -0.1f, 0.1f);
    fsdp_rng_uniform_range(rng, 3 * n, v, n, 0.0f, 0.01f);
    g[7] = 0.0f, v[7] = 0.0f, m[7] = 0.0f;  // denominator eps alone
    float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, step_size = 0.02f, b2s = 0.3f;
    float decay = 1.0f - lr * wd;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i], pi = p[i] * decay;
        float mi = m[i] * b1 + (1.0f - b1) * gi;
        float vi = v[i] * b2 + (1.0f - b2) * gi * gi;
        rm[i] = mi, rv[i] = vi;
        rp[i] = pi - step_size * (mi / (sqrtf(vi) / b2s + eps));
    }
    float *pd = dcopy(p, bytes), *gd = dcopy(g, bytes), *md = dcopy(m, bytes), *vd = dcopy(v, bytes);
    K->adamw_update(ST, pd, gd, md, vd, n, lr, b1, b2, eps, wd, step_size, b2s);
    download(p, pd, bytes), download(m, md, bytes), download(v, vd, bytes);
    CHECK(memcmp(p, rp, bytes) == 0);
    CHECK(memcmp(m, rm, bytes) == 0);
    CHECK(memcmp(v, rv, bytes) == 0);
    dfree(pd), dfree(gd), dfree(md), dfree(vd);
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv);
}

// ---------------------------------------------------------------------------------------------
// (e) SGD vs torch.optim.SGD in double (the first step's buffer is the gradient itself)

static void test_sgd_case(float momentum, float dampening, float wd, int nesterov) {
    fsdp_sgd_config cfg = {0.1f, momentum, dampening, wd, nesterov};
    float lr = 0.05f;
    fsdp_sgd opt, sliced;
    CHECK(fsdp_sgd_create(&opt, cfg, OPT_N, DEV) == FSDP_OK);
    CHECK(fsdp_sgd_create(&sliced, cfg, OPT_N, DEV) == FSDP_OK);
    CHECK((opt.momentum_buf != NULL) == (momentum != 0.0f));
    float p[OPT_N], q[OPT_N], g[OPT_N];
    double rp[OPT_N], buf[OPT_N] = {0};
    for (int i = 0; i < OPT_N; i++) p[i] = q[i] = opt_p0[i], rp[i] = opt_p0[i];
    float *pd = dcopy(p, sizeof p), *qd = dcopy(q, sizeof q), *gd = dalloc(sizeof g);
    for (int t = 1; t <= OPT_STEPS; t++) {
        for (int i = 0; i < OPT_N; i++) g[i] = opt_grad(t - 1, i);
        upload(gd, g, sizeof g);
        fsdp_sgd_begin_step(&opt);
        fsdp_sgd_begin_step(&sliced);
        fsdp_sgd_update(K, ST, &opt, lr, pd, gd, 0, OPT_N);
        fsdp_sgd_update(K, ST, &sliced, lr, qd + 3, gd + 3, 3, OPT_N - 3);
        fsdp_sgd_update(K, ST, &sliced, lr, qd, gd, 0, 3);
        for (int i = 0; i < OPT_N; i++) {
            double d = (double)g[i] + (double)wd * rp[i];
            if (momentum != 0.0f) {
                buf[i] = t == 1 ? d : (double)momentum * buf[i] + (1.0 - (double)dampening) * d;
                d = nesterov ? d + (double)momentum * buf[i] : buf[i];
            }
            rp[i] -= (double)lr * d;
        }
    }
    download(p, pd, sizeof p), download(q, qd, sizeof q);
    dfree(pd), dfree(qd), dfree(gd);
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


// ---------------------------------------------------------------------------------------------
// (g) the kernels the device layer moved into the table, against plain reference loops. Sizes on both
// sides of the kernels' 65536-element threshold for opening a parallel region.

static const size_t kernel_sizes[] = {1, 7, 1000, 70001};

static float test_value(size_t i, int salt) {  // varied signs and magnitudes, some exact zeros
    if ((i + (size_t)salt) % 13 == 0) return 0.0f;
    return fsdp_rng_uniform_at((fsdp_rng){31, (uint64_t)salt}, i) * 8.0f - 4.0f;
}

static void test_add_inplace_b16(void) {
    int ok = 1;
    for (size_t s = 0; s < sizeof kernel_sizes / sizeof kernel_sizes[0]; s++) {
        size_t n = kernel_sizes[s];
        float *acc = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
        fsdp_bf16 *b = malloc(n * sizeof(fsdp_bf16));
        for (size_t i = 0; i < n; i++) {
            acc[i] = test_value(i, 1);
            b[i] = fsdp_f32_to_bf16(test_value(i, 2) * 1.001f);
            ref[i] = acc[i] + fsdp_bf16_to_f32(b[i]);  // engine.c's add_bf16
        }
        float *accd = dcopy(acc, n * sizeof(float));
        fsdp_bf16 *bd = dcopy(b, n * sizeof(fsdp_bf16));
        K->add_inplace_b16(ST, accd, bd, n);
        download(acc, accd, n * sizeof(float));
        ok &= memcmp(acc, ref, n * sizeof(float)) == 0;
        free(acc), free(ref), free(b), dfree(accd), dfree(bd);
    }
    CHECK(ok);
}

static void test_fill_rows_and_broadcasts(void) {
    static const int shapes[][2] = {{1, 1}, {3, 5}, {300, 257}};  // the last over the threshold
    int ok = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int N = shapes[s][0], C = shapes[s][1];
        size_t nc = (size_t)N * C;
        float *out = malloc(nc * sizeof(float)), *ref = malloc(nc * sizeof(float)), *row = malloc(C * sizeof(float));
        for (int c = 0; c < C; c++) row[c] = test_value((size_t)c, 3);
        for (size_t i = 0; i < nc; i++) out[i] = 777.0f, ref[i] = row[i % (size_t)C];
        float *outd = dcopy(out, nc * sizeof(float)), *rowd = dcopy(row, C * sizeof(float));
        K->fill_rows(ST, outd, rowd, N, C);
        download(out, outd, nc * sizeof(float));
        ok &= memcmp(out, ref, nc * sizeof(float)) == 0;
        // bias_add and scale pass their arguments through the table as cpu_bias_add / cpu_scale take them
        K->bias_add(ST, outd, rowd, N, C);
        K->scale(ST, outd, 0.75f, nc);
        cpu_bias_add(ref, row, N, C);
        cpu_scale(ref, 0.75f, nc);
        download(out, outd, nc * sizeof(float));
        ok &= memcmp(out, ref, nc * sizeof(float)) == 0;
        free(out), free(ref), free(row), dfree(outd), dfree(rowd);
    }
    CHECK(ok);
}

static void test_conversion_kernels(void) {
    int ok_to = 1, ok_from = 1, ok_in_place = 1;
    static const float specials[] = {0.0f, -0.0f, 1.0f, -2.5f, INFINITY, -INFINITY, NAN, FLT_MAX, 1e-40f,
                                     1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.0f + 0x1p-7f};
    size_t nspecial = sizeof specials / sizeof specials[0];
    for (size_t s = 0; s < sizeof kernel_sizes / sizeof kernel_sizes[0]; s++) {
        size_t n = kernel_sizes[s] + nspecial;
        float *src = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
        fsdp_bf16 *h = malloc(n * sizeof(fsdp_bf16)), *ref = malloc(n * sizeof(fsdp_bf16));
        for (size_t i = 0; i < n; i++) {
            src[i] = i < nspecial ? specials[i] : test_value(i, 4) * 1.0001f;
            ref[i] = fsdp_f32_to_bf16(src[i]);
        }
        float *srcd = dcopy(src, n * sizeof(float)), *f32d = dalloc(n * sizeof(float));
        fsdp_bf16 *b16d = dalloc(n * sizeof(fsdp_bf16));
        K->f32_to_bf16(ST, b16d, srcd, n);
        download(h, b16d, n * sizeof(fsdp_bf16));
        ok_to &= memcmp(h, ref, n * sizeof(fsdp_bf16)) == 0;
        K->bf16_to_f32(ST, f32d, b16d, n);
        download(back, f32d, n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            float want = fsdp_bf16_to_f32(ref[i]);
            ok_from &= memcmp(&back[i], &want, sizeof want) == 0;
        }
        K->f32_to_bf16_in_place(ST, srcd, n);  // the first 2n bytes become the bf16 values
        download(h, srcd, n * sizeof(fsdp_bf16));
        ok_in_place &= memcmp(h, ref, n * sizeof(fsdp_bf16)) == 0;
        free(src), free(back), free(h), free(ref), dfree(srcd), dfree(f32d), dfree(b16d);
    }
    // every bf16 pattern widens to itself << 16
    size_t all = 0x10000;
    fsdp_bf16 *pat = malloc(all * sizeof(fsdp_bf16));
    uint32_t *wide = malloc(all * sizeof(uint32_t));
    for (size_t i = 0; i < all; i++) pat[i] = (fsdp_bf16)i;
    fsdp_bf16 *patd = dcopy(pat, all * sizeof(fsdp_bf16));
    float *wided = dalloc(all * sizeof(float));
    K->bf16_to_f32(ST, wided, patd, all);
    download(wide, wided, all * sizeof(float));
    for (size_t i = 0; i < all; i++) ok_from &= wide[i] == (uint32_t)i << 16;
    free(pat), free(wide), dfree(patd), dfree(wided);
    CHECK(ok_to);
    CHECK(ok_from);
    CHECK(ok_in_place);
}

// abs_mean and sum_squares reduce over threads in fixed blocks: one thread and the default team must
// give the same bits (test_thread_determinism checks 1..4 threads), within rounding of the serial loop
static void test_abs_mean_kernels(void) {
    int saved = omp_get_max_threads();
    for (size_t s = 0; s < sizeof kernel_sizes / sizeof kernel_sizes[0]; s++) {
        size_t n = kernel_sizes[s];
        float *y = malloc(n * sizeof(float)), *dy = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) y[i] = test_value(i, 5);
        double total = 0.0;
        for (size_t i = 0; i < n; i++) total += y[i] < 0 ? -(double)y[i] : (double)y[i];
        double want = total / (double)n;
        float dloss = 3.0f, g = dloss / (float)n;
        for (size_t i = 0; i < n; i++) ref[i] = y[i] > 0 ? g : (y[i] < 0 ? -g : 0.0f);
        float *yd = dcopy(y, n * sizeof(float)), *dyd = dalloc(n * sizeof(float));
        double garbage = 123.0, *lossd = dcopy(&garbage, sizeof garbage);  // overwritten, not added to
        omp_set_num_threads(1);
        K->abs_mean_forward(ST, lossd, yd, n);
        double one = read_double(lossd);
        omp_set_num_threads(saved);
        K->abs_mean_forward(ST, lossd, yd, n);
        double team = read_double(lossd);
        CHECK(memcmp(&one, &team, sizeof team) == 0);
        CHECK_NEAR(team, want, 1e-13 * want);
        K->abs_mean_backward(ST, dyd, yd, n, dloss);
        download(dy, dyd, n * sizeof(float));
        CHECK(memcmp(dy, ref, n * sizeof(float)) == 0);
        free(y), free(dy), free(ref), dfree(yd), dfree(dyd), dfree(lossd);
    }
}

static void test_sum_squares_accumulates(void) {
    int saved = omp_get_max_threads();
    size_t n1 = 70001, n2 = 333;
    float *x = malloc((n1 + n2) * sizeof(float));
    for (size_t i = 0; i < n1 + n2; i++) x[i] = test_value(i, 6);
    long double s1 = 0.0L, s2 = 0.0L;  // the sums of the two buffers, in extended precision
    for (size_t i = 0; i < n1; i++) s1 += (long double)x[i] * x[i];
    for (size_t i = n1; i < n1 + n2; i++) s2 += (long double)x[i] * x[i];
    double start = 0.5, want = (double)(start + s1 + s2);
    float *xd = dcopy(x, (n1 + n2) * sizeof(float));
    double *accd = dcopy(&start, sizeof start);
    omp_set_num_threads(1);
    K->sum_squares(ST, accd, xd, n1);
    K->sum_squares(ST, accd, xd + n1, n2);
    double one = read_double(accd);
    omp_set_num_threads(saved);
    upload(accd, &start, sizeof start);
    K->sum_squares(ST, accd, xd, n1);
    K->sum_squares(ST, accd, xd + n1, n2);
    double team = read_double(accd);
    CHECK(memcmp(&one, &team, sizeof team) == 0);
    CHECK_NEAR(team, want, 1e-13 * want);
    double host = start;  // the host kernel (it adds into the double), summed the way the engine did: the same bits
    cpu_sum_squares(&host, x, n1);
    cpu_sum_squares(&host, x + n1, n2);
    CHECK(memcmp(&host, &team, sizeof team) == 0);
    free(x), dfree(xd), dfree(accd);
}

static void test_cross_entropy_device_loss(void) {
    enum { N = 5, V = 7 };
    static const int32_t tgt[N] = {0, 6, 3, 3, 1};
    float logits[N * V], stats[2 * N], losses[N], dstats[2 * N], dlosses[N];
    for (int i = 0; i < N * V; i++) logits[i] = test_value((size_t)i, 7);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    double want = 0.0;
    cpu_cross_entropy_forward(&want, losses, stats, logits, tgt, N, V);  // on the host
    float *logitsd = dcopy(logits, sizeof logits), *statsd = dalloc(sizeof stats), *lossesd = dalloc(sizeof losses);
    int32_t *tgtd = dcopy(tgt, sizeof tgt);
    double garbage = -1.0, *lossd = dcopy(&garbage, sizeof garbage);
    K->cross_entropy_forward(ST, lossd, lossesd, statsd, logitsd, tgtd, N, V);
    double got = read_double(lossd);
    omp_set_num_threads(saved);
    download(dstats, statsd, sizeof dstats), download(dlosses, lossesd, sizeof dlosses);
    CHECK(memcmp(&got, &want, sizeof want) == 0);
    CHECK(memcmp(dstats, stats, sizeof stats) == 0 && memcmp(dlosses, losses, sizeof losses) == 0);
    double mean = 0.0;
    for (int n = 0; n < N; n++) mean += losses[n];
    CHECK_NEAR(got, mean / N, 1e-6);
    dfree(logitsd), dfree(statsd), dfree(lossesd), dfree(tgtd), dfree(lossd);
}

// the SGD kernel against the loop optim/sgd.c ran before it moved (the same float expressions)
static void test_sgd_kernel(void) {
    static const struct { float momentum, dampening, wd; int nesterov, first; } cases[] = {
        {0.0f, 0.0f, 0.0f, 0, 1}, {0.0f, 0.0f, 0.01f, 0, 0}, {0.9f, 0.0f, 0.01f, 0, 1},
        {0.9f, 0.1f, 0.01f, 0, 0}, {0.9f, 0.0f, 0.0f, 1, 0}, {0.8f, 0.2f, 0.05f, 1, 1},
    };
    float lr = 0.05f;
    int ok = 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = c % 2 ? 70001 : 1000;
        float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
        float *rp = malloc(n * sizeof(float)), *rb = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) {
            p[i] = rp[i] = test_value(i, 8);
            g[i] = test_value(i, 9);
            b[i] = rb[i] = test_value(i, 10);
        }
        float momentum = cases[c].momentum, dampening = cases[c].dampening, weight_decay = cases[c].wd;
        int nesterov = cases[c].nesterov, first = cases[c].first;
        float *buf = momentum != 0.0f ? rb : NULL;
        for (size_t i = 0; i < n; i++) {
            float gi = g[i];
            if (weight_decay != 0.0f) gi += weight_decay * rp[i];
            if (buf) {
                buf[i] = first ? gi : momentum * buf[i] + (1.0f - dampening) * gi;
                gi = nesterov ? gi + momentum * buf[i] : buf[i];
            }
            rp[i] -= lr * gi;
        }
        float *pd = dcopy(p, n * sizeof(float)), *gd = dcopy(g, n * sizeof(float)), *bd = dcopy(b, n * sizeof(float));
        K->sgd_update(ST, pd, gd, buf ? bd : NULL, n, lr, momentum, dampening, weight_decay, nesterov, first);
        download(p, pd, n * sizeof(float)), download(b, bd, n * sizeof(float));
        ok &= memcmp(p, rp, n * sizeof(float)) == 0 && memcmp(b, rb, n * sizeof(float)) == 0;
        free(p), free(g), free(b), free(rp), free(rb), dfree(pd), dfree(gd), dfree(bd);
    }
    CHECK(ok);
}

// every entry (kernels/kernel_list.h) of both tables of the device and of both CPU tables is set
static void test_tables_complete(void) {
    const fsdp_kernels *tables[] = {fsdp_dev_kernels(DEV, 0), fsdp_dev_kernels(DEV, 1), fsdp_kernels_cpu(),
                                    fsdp_kernels_cpu_bf16()};
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        const fsdp_kernels *k = tables[t];
        CHECK(k != NULL && k->name != NULL);
        if (!k) continue;
#define FSDP_KERNEL(fn, ...) CHECK(k->fn != NULL);
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL
    }
    CHECK(fsdp_kernels_cpu()->gemm != fsdp_kernels_cpu_bf16()->gemm);  // the bf16 table's own products
    CHECK(strcmp(fsdp_kernels_cpu_bf16()->name, "cpu-bf16") == 0);
}

int main(void) {
    DEV = fsdp_dev_default();
    ST = fsdp_dev_stream(DEV, FSDP_STREAM_COMPUTE);
    K = fsdp_dev_kernels(DEV, 0);
    printf("device %s, kernels %s\n", fsdp_dev_name(DEV), K->name);
    test_rng_ranges();
    test_philox();
    test_rng_distribution();
    test_dropout();
    test_alloc();
    test_half_conversions();
    test_adamw();
    test_adamw_lanes();
    test_sgd_case(0.9f, 0.0f, 0.01f, 0);
    test_sgd_case(0.9f, 0.0f, 0.01f, 1);
    test_sgd_case(0.9f, 0.1f, 0.0f, 0);
    test_sgd_case(0.0f, 0.0f, 0.01f, 0);
    test_schedule();
    test_tables_complete();
    test_add_inplace_b16();
    test_fill_rows_and_broadcasts();
    test_conversion_kernels();
    test_abs_mean_kernels();
    test_sum_squares_accumulates();
    test_cross_entropy_device_loss();
    test_sgd_kernel();
    TEST_MAIN_END();
}
