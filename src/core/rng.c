// rng.c: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
#include "core/rng.h"

#include <math.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void fsdp_philox4x32(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

#ifdef __AVX512F__
// 32x32 -> 64-bit products of each 32-bit lane with m: the high and low halves, lane by lane.
static inline void mul_hi_lo(__m512i a, __m512i m, __m512i *hi, __m512i *lo) {
    __m512i even = _mm512_mul_epu32(a, m);                          // lanes 0, 2, ...: 64-bit products
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);    // lanes 1, 3, ...
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// Philox for the 16 blocks first .. first+15, words stored in element order: out[4*b + j].  out: (64,)
static void philox_x16(uint64_t seed, uint64_t stream, uint64_t first, uint32_t *out) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)first), lane);
    // the high word carries where the low word wrapped
    __mmask16 carry = _mm512_cmplt_epu32_mask(c0, _mm512_set1_epi32((int)(uint32_t)first));
    __m512i c1 = _mm512_mask_add_epi32(_mm512_set1_epi32((int)(uint32_t)(first >> 32)), carry,
                                       _mm512_set1_epi32((int)(uint32_t)(first >> 32)), _mm512_set1_epi32(1));
    __m512i c2 = _mm512_set1_epi32((int)(uint32_t)stream), c3 = _mm512_set1_epi32((int)(uint32_t)(stream >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m512i m0 = _mm512_set1_epi64(PHILOX_M0), m1 = _mm512_set1_epi64(PHILOX_M1);
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        mul_hi_lo(c0, m0, &hi0, &lo0);
        mul_hi_lo(c2, m1, &hi1, &lo1);
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    // (word j of block b) -> element 4b + j: a 4 x 16 transpose
    __m512i a_lo = _mm512_unpacklo_epi32(c0, c1), a_hi = _mm512_unpackhi_epi32(c0, c1);
    __m512i b_lo = _mm512_unpacklo_epi32(c2, c3), b_hi = _mm512_unpackhi_epi32(c2, c3);
    __m512i r0 = _mm512_unpacklo_epi64(a_lo, b_lo), r1 = _mm512_unpackhi_epi64(a_lo, b_lo);
    __m512i r2 = _mm512_unpacklo_epi64(a_hi, b_hi), r3 = _mm512_unpackhi_epi64(a_hi, b_hi);
    __m512i t0 = _mm512_shuffle_i32x4(r0, r1, 0x44), t1 = _mm512_shuffle_i32x4(r2, r3, 0x44);
    __m512i t2 = _mm512_shuffle_i32x4(r0, r1, 0xEE), t3 = _mm512_shuffle_i32x4(r2, r3, 0xEE);
    _mm512_storeu_si512(out, _mm512_shuffle_i32x4(t0, t1, 0x88));
    _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(t0, t1, 0xDD));
    _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(t2, t3, 0x88));
    _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(t2, t3, 0xDD));
}
#endif

void fsdp_philox4x32_blocks(uint64_t seed, uint64_t stream, uint64_t first, size_t nblocks, uint32_t *out) {
    size_t b = 0;
#ifdef __AVX512F__
    for (; b + 16 <= nblocks; b += 16) philox_x16(seed, stream, first + b, out + 4 * b);
#endif
    for (; b < nblocks; b++) fsdp_philox4x32(seed, stream, first + b, out + 4 * b);
}

static inline float u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float fsdp_rng_uniform_at(fsdp_rng rng, uint64_t index) {
    uint32_t w[4];
    fsdp_philox4x32(rng.seed, rng.stream, index >> 2, w);
    return u32_to_unit(w[index & 3]);
}

void fsdp_rng_uniform(fsdp_rng rng, uint64_t offset, float *out, size_t n) {
    uint32_t words[256];  // up to 64 blocks through the batched generator per pass
    for (size_t k = 0; k < n;) {
        uint64_t idx = offset + k;
        size_t skip = (size_t)(idx & 3), want = n - k < 256 - skip ? n - k : 256 - skip;
        fsdp_philox4x32_blocks(rng.seed, rng.stream, idx >> 2, (skip + want + 3) / 4, words);
        for (size_t j = 0; j < want; j++) out[k + j] = u32_to_unit(words[skip + j]);
        k += want;
    }
}

void fsdp_rng_uniform_range(fsdp_rng rng, uint64_t offset, float *out, size_t n, float lo, float hi) {
    fsdp_rng_uniform(rng, offset, out, n);
    for (size_t k = 0; k < n; k++) out[k] = lo + (hi - lo) * out[k];
}

void fsdp_rng_normal(fsdp_rng rng, uint64_t offset, float *out, size_t n, float mean, float std) {
    // element i uses words (2i mod 4, 2i+1 mod 4) of block (2i)/4: two uniforms per element
    for (size_t k = 0; k < n; k++) {
        uint64_t i = offset + k;
        uint32_t w[4];
        fsdp_philox4x32(rng.seed, rng.stream, i >> 1, w);
        uint32_t a = w[(i & 1) * 2], b = w[(i & 1) * 2 + 1];
        double u1 = ((double)(a >> 8) + 1.0) / 16777217.0;  // (0, 1]
        double u2 = (double)(b >> 8) / 16777216.0;
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        out[k] = (float)(mean + std * z);
    }
}

uint64_t fsdp_hash_name(const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}
