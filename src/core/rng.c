// rng.c: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
#include "core/rng.h"

#include <math.h>

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

static inline float u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float fsdp_rng_uniform_at(fsdp_rng rng, uint64_t index) {
    uint32_t w[4];
    fsdp_philox4x32(rng.seed, rng.stream, index >> 2, w);
    return u32_to_unit(w[index & 3]);
}

void fsdp_rng_uniform(fsdp_rng rng, uint64_t offset, float *out, size_t n) {
    size_t k = 0;
    while (k < n) {
        uint64_t idx = offset + k;
        uint32_t w[4];
        fsdp_philox4x32(rng.seed, rng.stream, idx >> 2, w);
        for (unsigned j = (unsigned)(idx & 3); j < 4 && k < n; j++, k++) out[k] = u32_to_unit(w[j]);
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
