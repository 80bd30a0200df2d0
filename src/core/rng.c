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
// Philox for 8 blocks, one per 64-bit lane: each word lives in the low half of its lane, so
// _mm512_mul_epu32 (which reads only low halves) gives the full 64-bit product in one instruction. The
// high halves carry leftovers that nothing reads. c0..c3 on return: the words, in the low halves.
static inline void philox_x8(__m512i *c0, __m512i *c1, __m512i *c2, __m512i *c3, uint64_t seed) {
    const __m512i m0 = _mm512_set1_epi64(PHILOX_M0), m1 = _mm512_set1_epi64(PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        __m512i p0 = _mm512_mul_epu32(*c0, m0), p1 = _mm512_mul_epu32(*c2, m1);
        // n0 = hi(p1) ^ c1 ^ k0, n2 = hi(p0) ^ c3 ^ k1 (0x96: three-way xor)
        __m512i n0 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p1, 32), *c1, _mm512_set1_epi32((int)k0), 0x96);
        __m512i n2 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p0, 32), *c3, _mm512_set1_epi32((int)k1), 0x96);
        *c0 = n0, *c1 = p1, *c2 = n2, *c3 = p0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
}

// The low halves of 8 lanes of words 0..3 (8 blocks) stored in element order: out[4*b + j].  out: (32,)
static inline void store_x8(uint32_t *out, __m512i c0, __m512i c1, __m512i c2, __m512i c3) {
    __m256i a = _mm512_cvtepi64_epi32(c0), b = _mm512_cvtepi64_epi32(c1);
    __m256i c = _mm512_cvtepi64_epi32(c2), d = _mm512_cvtepi64_epi32(c3);
    __m256i ab_lo = _mm256_unpacklo_epi32(a, b), ab_hi = _mm256_unpackhi_epi32(a, b);  // a0 b0 a1 b1 | a4 b4 a5 b5
    __m256i cd_lo = _mm256_unpacklo_epi32(c, d), cd_hi = _mm256_unpackhi_epi32(c, d);
    __m256i r0 = _mm256_unpacklo_epi64(ab_lo, cd_lo), r1 = _mm256_unpackhi_epi64(ab_lo, cd_lo);  // blocks 0 | 4, 1 | 5
    __m256i r2 = _mm256_unpacklo_epi64(ab_hi, cd_hi), r3 = _mm256_unpackhi_epi64(ab_hi, cd_hi);  // blocks 2 | 6, 3 | 7
    _mm256_storeu_si256((__m256i *)out, _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 16), _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256((__m256i *)(out + 24), _mm256_permute2x128_si256(r2, r3, 0x31));
}

// Philox for the 16 blocks first .. first+15, words stored in element order: out[4*b + j].  out: (64,)
// Two independent sets of 8 blocks, interleaved by the compiler (the multiplies' latency is hidden).
static void philox_x16(uint64_t seed, uint64_t stream, uint64_t first, uint32_t *out) {
    const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    __m512i lo0 = _mm512_add_epi64(_mm512_set1_epi64((long long)first), lane);  // 64-bit counters: carries included
    __m512i lo1 = _mm512_add_epi64(lo0, _mm512_set1_epi64(8));
    __m512i hi0 = _mm512_srli_epi64(lo0, 32), hi1 = _mm512_srli_epi64(lo1, 32);
    __m512i s2 = _mm512_set1_epi64((long long)(uint32_t)stream), s3 = _mm512_set1_epi64((long long)(stream >> 32));
    __m512i a2 = s2, a3 = s3, b2 = s2, b3 = s3;
    philox_x8(&lo0, &hi0, &a2, &a3, seed);
    philox_x8(&lo1, &hi1, &b2, &b3, seed);
    store_x8(out, lo0, hi0, a2, a3);
    store_x8(out + 32, lo1, hi1, b2, b3);
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

void fsdp_rng_words(fsdp_rng rng, uint64_t offset, uint32_t *out, size_t n) {
    uint32_t block[4];
    size_t k = 0;
    if (offset & 3) {  // the rest of the first block
        fsdp_philox4x32(rng.seed, rng.stream, offset >> 2, block);
        for (size_t j = (size_t)(offset & 3); j < 4 && k < n; j++) out[k++] = block[j];
    }
    size_t whole = (n - k) / 4;  // whole blocks, written in place
    fsdp_philox4x32_blocks(rng.seed, rng.stream, (offset + k) >> 2, whole, out + k);
    k += 4 * whole;
    if (k < n) {  // the start of the last block
        fsdp_philox4x32(rng.seed, rng.stream, (offset + k) >> 2, block);
        for (size_t j = 0; k < n; j++) out[k++] = block[j];
    }
}

void fsdp_rng_uniform(fsdp_rng rng, uint64_t offset, float *out, size_t n) {
    uint32_t words[256];
    for (size_t k = 0; k < n; k += 256) {
        size_t len = n - k < 256 ? n - k : 256;
        fsdp_rng_words(rng, offset + k, words, len);
        for (size_t j = 0; j < len; j++) out[k + j] = u32_to_unit(words[j]);
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
