// fixed_point.c: exact, order-independent sums for the deterministic mode (fsdp/deterministic.c).
//
// Gradients. A value g becomes the integer v = rint(g * 2^frac_bits), written as `limbs` balanced
// digits of limb_bits bits: v = sum_k d_k 2^(k * limb_bits), |d_k| <= 2^(limb_bits - 1), each digit
// stored as a float (exact: limb_bits <= 24). Adding such digit vectors in fp32 is exact in any order
// as long as every partial sum stays below 2^24 in magnitude, which the format's choice of limb_bits
// guarantees for the number of contributions it was made for; so reduce-scatters and all-reduces of
// digits (any algorithm, any rank count) give the same bits. The digits are turned back into one
// value per element only after the last contribution (cpu_fixed_finalize).
//
// Sums of squares. Each square of an fp32 value is an integer m^2 < 2^48 times 2^(2e); it is added,
// shifted to its place, into FSDP_XSUM_WORDS words of 32 bits (held in int64 so carries can wait),
// which hold every such sum exactly; the words are carried after each call.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "device/cpu/cpu_fixed.h"

#define FIXED_MAX_LIMBS 16

// Rounding to nearest even without a library call, so the loops vectorize: below 2^51 in magnitude,
// adding and subtracting 1.5 x 2^52 leaves the rounded value (the sum's last bit is the units bit).
#define ROUND_MAGIC 6755399441055744.0   // 1.5 x 2^52
#define ROUND_LIMIT 2251799813685248.0   // 2^51
#define FIXED_TILE 256                   // elements converted together (their digits one limb at a time)

// Digits of elements [i0, i0 + m) of g (m <= FIXED_TILE); digit k of element i0 + j at out[k * block + j].
static void quantize_tile(float *out, const float *g, size_t m, size_t block, int K, double to_fixed, double bound,
                          const double *place, const double *inv_place) {
    double v[FIXED_TILE];
    int poison = 0;
    for (size_t j = 0; j < m; j++) {
        double x = (double)g[j] * to_fixed;
        // an fp32 value times a power of two: at or above 2^51 it has no fraction bits left
        v[j] = fabs(x) < ROUND_LIMIT ? (x + ROUND_MAGIC) - ROUND_MAGIC : x;
        poison |= !(fabs(v[j]) < bound);  // NaN, Inf, or out of range
    }
    for (int k = K - 1; k >= 0; k--) {
        float *o = out + (size_t)k * block;
        for (size_t j = 0; j < m; j++) {
            // |v| < 2^(k B + B - 1) here (the higher digits are off), so the scaled value is below 2^51
            double d = (v[j] * inv_place[k] + ROUND_MAGIC) - ROUND_MAGIC;  // balanced digit
            v[j] -= d * place[k];  // exact: the remainder keeps v's significant bits
            o[j] = (float)d;
        }
    }
    if (poison)  // rare: the element's digit 0 becomes NaN, the others 0
        for (size_t j = 0; j < m; j++) {
            double x = (double)g[j] * to_fixed;
            if (fabs(x) < bound) continue;
            for (int k = 0; k < K; k++) out[(size_t)k * block + j] = k == 0 ? NAN : 0.0f;
        }
}

void cpu_fixed_quantize(float *limbs, const float *g, size_t n, size_t block, const fsdp_fixed_format *f) {
    const int K = f->limbs, B = f->limb_bits;
    const double to_fixed = ldexp(1.0, f->frac_bits);
    const double bound = ldexp(1.0, K * B - 1);  // |v| must stay below: the top digit's range
    double place[FIXED_MAX_LIMBS], inv_place[FIXED_MAX_LIMBS];  // 2^(k B) and 2^-(k B)
    for (int k = 0; k < K && k < FIXED_MAX_LIMBS; k++) place[k] = ldexp(1.0, k * B), inv_place[k] = ldexp(1.0, -k * B);
    for (size_t q = 0; q < (n + block - 1) / block; q++) {
        size_t lo = q * block, hi = lo + block < n ? lo + block : n;
        float *out = limbs + q * (size_t)K * block;  // this block's digits: (K, block)
        size_t tiles = (hi - lo + FIXED_TILE - 1) / FIXED_TILE;
#pragma omp parallel for schedule(static) if (hi - lo > 65536)
        for (size_t t = 0; t < tiles; t++) {
            size_t j0 = t * FIXED_TILE, m = hi - lo - j0 < FIXED_TILE ? hi - lo - j0 : FIXED_TILE;
            quantize_tile(out + j0, g + lo + j0, m, block, K, to_fixed, bound, place, inv_place);
        }
    }
}

void cpu_fixed_finalize(float *out, const float *acc, size_t n, const fsdp_fixed_format *f, double scale) {
    const int K = f->limbs, B = f->limb_bits;
    const double unit = ldexp(scale, -f->frac_bits);
    double place[FIXED_MAX_LIMBS];
    for (int k = 0; k < K && k < FIXED_MAX_LIMBS; k++) place[k] = ldexp(1.0, k * B);
    size_t tiles = (n + FIXED_TILE - 1) / FIXED_TILE;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t t = 0; t < tiles; t++) {
        size_t i0 = t * FIXED_TILE, m = n - i0 < FIXED_TILE ? n - i0 : FIXED_TILE;
        double v[FIXED_TILE];
        for (size_t j = 0; j < m; j++) v[j] = 0.0;
        for (int k = K - 1; k >= 0; k--)  // from the top digit down, the same order for every element
            for (size_t j = 0; j < m; j++) v[j] += (double)acc[(size_t)k * n + i0 + j] * place[k];
        for (size_t j = 0; j < m; j++) out[i0 + j] = (float)(v[j] * unit);
    }
}

// Word w holds bits [32 w, 32 w + 32) of the sum counted from 2^FSDP_XSUM_LOW (the smallest square of
// an fp32 subnormal is 2^-298).
#define XSUM_LOW FSDP_XSUM_LOW

void cpu_sum_squares_exact(int64_t *words, const float *x, size_t n) {
    int64_t local[FSDP_XSUM_WORDS];
    memset(local, 0, sizeof local);
    int nonfinite = 0;
    uint64_t since_carry = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        uint32_t exp = (bits >> 23) & 0xffu, man = bits & 0x7fffffu;
        if (exp == 0xffu) {
            nonfinite = 1;
            continue;
        }
        if (exp == 0 && man == 0) continue;
        uint64_t m = exp ? (man | 0x800000u) : man;  // x = m * 2^e
        int e = exp ? (int)exp - 150 : -149;
        uint64_t sq = m * m;  // < 2^48, placed at bit (2e - XSUM_LOW) of the sum
        int w = (2 * e - XSUM_LOW) / 32, sh = (2 * e - XSUM_LOW) % 32;
        uint64_t lo = sq << sh, hi = sh ? sq >> (64 - sh) : 0;  // the 80-bit shifted square
        local[w] += (int64_t)(lo & 0xffffffffu);
        local[w + 1] += (int64_t)(lo >> 32);
        local[w + 2] += (int64_t)hi;
        if (++since_carry == ((uint64_t)1 << 30)) {  // words stay below 2^62
            for (int k = 0; k + 1 < FSDP_XSUM_WORDS; k++) {
                local[k + 1] += local[k] >> 32;
                local[k] &= 0xffffffff;
            }
            since_carry = 0;
        }
    }
    if (nonfinite) words[FSDP_XSUM_WORDS - 1] = -1;  // marks the sum as non-finite (never a real sum)
    if (words[FSDP_XSUM_WORDS - 1] < 0) return;
    for (int k = 0; k < FSDP_XSUM_WORDS; k++) words[k] += local[k];
    for (int k = 0; k + 1 < FSDP_XSUM_WORDS; k++) {
        words[k + 1] += words[k] >> 32;
        words[k] &= 0xffffffff;
    }
}
