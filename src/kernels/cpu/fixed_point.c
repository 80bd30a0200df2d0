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

#include "kernels/cpu/cpu_fixed.h"

#define FIXED_MAX_LIMBS 16

void cpu_fixed_quantize(float *limbs, const float *g, size_t n, size_t block, const fsdp_fixed_format *f) {
    const int K = f->limbs, B = f->limb_bits;
    const double to_fixed = ldexp(1.0, f->frac_bits);
    const double bound = ldexp(1.0, K * B - 1);  // |v| must stay below: the top digit's range
    double place[FIXED_MAX_LIMBS], inv_place[FIXED_MAX_LIMBS];  // 2^(k B) and 2^-(k B)
    for (int k = 0; k < K && k < FIXED_MAX_LIMBS; k++) place[k] = ldexp(1.0, k * B), inv_place[k] = ldexp(1.0, -k * B);
    for (size_t q = 0; q < (n + block - 1) / block; q++) {
        size_t lo = q * block, hi = lo + block < n ? lo + block : n;
        float *out = limbs + q * (size_t)K * block - lo;  // digit k of element i at out[k * block + i]
#pragma omp parallel for schedule(static) if (hi - lo > 65536)
        for (size_t i = lo; i < hi; i++) {
            double v = rint((double)g[i] * to_fixed);  // exact: g has 24 significant bits
            if (!(fabs(v) < bound)) {  // NaN, Inf, or out of range: poison the element
                out[i] = NAN;
                for (int k = 1; k < K; k++) out[(size_t)k * block + i] = 0.0f;
                continue;
            }
            for (int k = K - 1; k >= 0; k--) {
                double d = rint(v * inv_place[k]);  // exact scaling by a power of two; balanced digit
                v -= d * place[k];                  // exact: the remainder keeps v's significant bits
                out[(size_t)k * block + i] = (float)d;
            }
        }
    }
}

void cpu_fixed_finalize(float *out, const float *acc, size_t n, const fsdp_fixed_format *f, double scale) {
    const int K = f->limbs, B = f->limb_bits;
    const double unit = ldexp(scale, -f->frac_bits);
    double place[FIXED_MAX_LIMBS];
    for (int k = 0; k < K && k < FIXED_MAX_LIMBS; k++) place[k] = ldexp(1.0, k * B);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        double v = 0.0;
        for (int k = K - 1; k >= 0; k--) v += (double)acc[(size_t)k * n + i] * place[k];
        out[i] = (float)(v * unit);
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
