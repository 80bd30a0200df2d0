// test_fixed_point.c: the deterministic mode's exact sums (device/cpu/fixed_point.c).
// - fixed_quantize + fp32 sums of the digits + fixed_finalize give the same bits whatever the order and
//   grouping of the additions (forward, reverse, and grouped as 2, 3 or 4 ranks would add them), for
//   values from 1e-12 to 1e6, zeros, subnormals, negatives and exact cancellation;
// - that result is the exact sum (an integer count of 2^-frac_bits, computed here in 128-bit integers)
//   divided by the count, within 1 ulp of fp32;
// - the digits obey the format's bounds, and NaN, Inf and out-of-range values poison the element (NaN);
// - sum_squares_exact is the same for any split of the array, agrees with a long double sum to 1e-15,
//   and marks NaN/Inf;
// - the formats fsdp_det_format picks keep every partial sum below 2^24.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/fsdp.h"
#include "device/cpu/cpu_fixed.h"
#include "test.h"

__extension__ typedef __int128 i128;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform(void) {  // [0, 1)
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

// a value of varied magnitude and sign for element i of chunk c
static float sample(size_t i, int c) {
    double mag = pow(10.0, -12.0 + 18.0 * uniform());
    float v = (float)(uniform() < 0.5 ? -mag : mag);
    if (i % 17 == 0) v = 0.0f;
    if (i % 23 == 0) v = 1e-40f;  // subnormal: below the grid, rounds to 0
    if (i % 29 == 0) v = c % 2 ? 3.0f : -3.0f;  // cancels exactly over an even count
    return v;
}

// digit sums over the chunks in `order`, grouped into `groups` partial sums added at the end (as ranks
// would): acc (limbs, n)
static void sum_digits(float *acc, const float *digits, int chunks, const int *order, int groups, size_t n, int K) {
    size_t len = (size_t)K * n;
    float *part = calloc(len, sizeof(float));
    memset(acc, 0, len * sizeof(float));
    int per = chunks / groups;
    for (int g = 0; g < groups; g++) {
        memset(part, 0, len * sizeof(float));
        for (int j = 0; j < per; j++) {
            const float *d = digits + (size_t)order[g * per + j] * len;
            for (size_t e = 0; e < len; e++) part[e] += d[e];
        }
        for (size_t e = 0; e < len; e++) acc[e] += part[e];
    }
    free(part);
}

static void check_sums(int chunks) {
    const size_t n = 4099;
    fsdp_fixed_format f = fsdp_det_format(chunks);
    int K = f.limbs;
    CHECK(f.limb_bits <= 24 && (double)chunks * ldexp(1.0, f.limb_bits - 1) <= ldexp(1.0, 24));
    CHECK(K * f.limb_bits - 1 - f.frac_bits >= 32);  // |g| < 2^32 fits
    float *g = malloc(sizeof(float) * n * chunks);                        // (chunks, n)
    float *digits = malloc(sizeof(float) * (size_t)K * n * chunks);       // (chunks, limbs, n)
    float *acc = malloc(sizeof(float) * (size_t)K * n), *out = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n);
    i128 *exact = calloc(n, sizeof(i128));
    int bounded = 1;
    for (int c = 0; c < chunks; c++) {
        for (size_t i = 0; i < n; i++) {
            g[(size_t)c * n + i] = sample(i, c);
            exact[i] += (i128)rint(ldexp((double)g[(size_t)c * n + i], f.frac_bits));
        }
        cpu_fixed_quantize(digits + (size_t)c * K * n, g + (size_t)c * n, n, n, &f);
        for (size_t e = 0; e < (size_t)K * n; e++)
            bounded &= fabsf(digits[(size_t)c * K * n + e]) <= ldexpf(1.0f, f.limb_bits - 1);
    }
    CHECK(bounded);
    int order[256];
    for (int c = 0; c < chunks; c++) order[c] = c;
    sum_digits(acc, digits, chunks, order, 1, n, K);
    cpu_fixed_finalize(ref, acc, n, &f, 1.0 / chunks);
    // within 1 ulp of the exact mean
    int close = 1, zeros = 1;
    for (size_t i = 0; i < n; i++) {
        double want = ldexp((double)exact[i], -f.frac_bits) / chunks;
        close &= fabs((double)ref[i] - want) <= fabs(want) * 1.2e-7 + 1e-45;
        if (i % 29 == 0 && chunks % 2 == 0) zeros &= ref[i] == 0.0f;
    }
    CHECK(close);
    CHECK(zeros);
    // other orders and groupings: the same bits
    int same = 1;
    for (int trial = 0; trial < 6; trial++) {
        for (int c = 0; c < chunks; c++) order[c] = trial % 2 ? chunks - 1 - c : c;
        for (int c = chunks - 1; trial >= 2 && c > 0; c--) {  // shuffled
            int j = (int)(uniform() * (c + 1)), t = order[c];
            order[c] = order[j], order[j] = t;
        }
        int groups = (trial % 3) + 2;
        while (chunks % groups) groups--;
        sum_digits(acc, digits, chunks, order, groups, n, K);
        cpu_fixed_finalize(out, acc, n, &f, 1.0 / chunks);
        same &= memcmp(out, ref, sizeof(float) * n) == 0;
    }
    CHECK(same);
    // the plain fp32 sum in another order does differ somewhere: the test can see a difference
    float *fwd = calloc(n, sizeof(float)), *rev = calloc(n, sizeof(float));
    for (int c = 0; c < chunks; c++)
        for (size_t i = 0; i < n; i++) fwd[i] += g[(size_t)c * n + i], rev[i] += g[(size_t)(chunks - 1 - c) * n + i];
    if (chunks >= 4) CHECK(memcmp(fwd, rev, sizeof(float) * n) != 0);
    printf("%d chunks: %d digits of %d bits, grid 2^-%d; exact within 1 ulp, 6 orders identical\n", chunks, K,
           f.limb_bits, f.frac_bits);
    free(fwd), free(rev), free(g), free(digits), free(acc), free(out), free(ref), free(exact);
}

static void check_poison(void) {
    fsdp_fixed_format f = fsdp_det_format(8);
    float g[5] = {NAN, INFINITY, ldexpf(1.0f, 60), -ldexpf(1.0f, 60), 1.5f};  // 2^60: past the range
    float digits[5 * 16], acc[5 * 16], out[5];
    cpu_fixed_quantize(digits, g, 5, 5, &f);
    memcpy(acc, digits, sizeof(float) * 5 * (size_t)f.limbs);
    cpu_fixed_finalize(out, acc, 5, &f, 1.0);
    CHECK(isnan(out[0]) && isnan(out[1]) && isnan(out[2]) && isnan(out[3]));
    CHECK(out[4] == 1.5f);
    // blocked layout: element i's digit k at ((i / block) * limbs + k) * block + i % block
    float h[6] = {1, 2, 3, 4, 5, 6}, d[6 * 16];
    cpu_fixed_quantize(d, h, 6, 3, &f);
    float a1[3 * 16];
    memcpy(a1, d + 3 * f.limbs, sizeof(float) * 3 * (size_t)f.limbs);  // the second block's digits
    float o1[3];
    cpu_fixed_finalize(o1, a1, 3, &f, 1.0);
    CHECK(o1[0] == 4.0f && o1[1] == 5.0f && o1[2] == 6.0f);
}

static double xsum(const int64_t *w) {
    double v = 0.0;
    for (int k = FSDP_XSUM_WORDS - 1; k >= 0; k--) v += ldexp((double)w[k], 32 * k + FSDP_XSUM_LOW);
    return v;
}

static void check_squares(void) {
    const size_t n = 100003;
    float *x = malloc(sizeof(float) * n);
    long double ref = 0.0L;
    for (size_t i = 0; i < n; i++) {
        x[i] = sample(i, 1) * (i % 1000 == 0 ? 1e12f : 1.0f);
        if (i % 31 == 0) x[i] = 1e-42f;  // subnormal squares: still counted exactly
        ref += (long double)x[i] * x[i];
    }
    int64_t whole[FSDP_XSUM_WORDS] = {0}, split[FSDP_XSUM_WORDS] = {0};
    cpu_sum_squares_exact(whole, x, n);
    size_t cut[] = {0, 1, 777, 50000, 50001, 99999, n};
    for (int k = 0; k + 1 < (int)(sizeof cut / sizeof *cut); k++) cpu_sum_squares_exact(split, x + cut[k], cut[k + 1] - cut[k]);
    CHECK(memcmp(whole, split, sizeof whole) == 0);
    CHECK(fabs(xsum(whole) - (double)ref) <= 1e-15 * (double)ref);
    int64_t tiny[FSDP_XSUM_WORDS] = {0};
    float sub = 1e-45f;  // the smallest subnormal: 2^-149, its square 2^-298, the lowest bit
    cpu_sum_squares_exact(tiny, &sub, 1);
    CHECK(tiny[0] == 1);
    x[5] = NAN;
    int64_t bad[FSDP_XSUM_WORDS] = {0};
    cpu_sum_squares_exact(bad, x, n);
    CHECK(bad[FSDP_XSUM_WORDS - 1] < 0);
    cpu_sum_squares_exact(bad, x + 6, 10);  // stays marked
    CHECK(bad[FSDP_XSUM_WORDS - 1] < 0);
    printf("sum of squares of %zu values: exact, split-independent, %.17g\n", n, xsum(whole));
    free(x);
}

int main(void) {
    for (int chunks = 1; chunks <= 128; chunks *= 2) check_sums(chunks);
    check_sums(12);
    check_sums(96);
    check_poison();
    check_squares();
    for (int c = 1; c <= 65536; c *= 4) {
        fsdp_fixed_format f = fsdp_det_format(c);
        CHECK(c * ldexp(1.0, f.limb_bits - 1) <= ldexp(1.0, 24));
        CHECK(f.limbs * f.limb_bits - 1 - f.frac_bits >= 32);
    }
    TEST_MAIN_END();
}
