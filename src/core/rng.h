// rng.h: counter-based random numbers (Philox4x32-10).
// Value i of a stream is a pure function of (seed, stream, i): it does not depend on how many
// threads or ranks produce the stream, nor in which order. A rank that owns elements [a, b) of a
// tensor draws exactly the values a one-process run would have drawn for them.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t seed;    // the user's --seed
    uint64_t stream;  // which tensor / which call (e.g. hash of a parameter name, or a step counter)
} fsdp_rng;

// Four 32-bit words for counter `block` (elements 4*block .. 4*block+3).
void fsdp_philox4x32(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]);
// The same for blocks first .. first+nblocks-1, 16 at a time with AVX-512: out[4*b + j] is word j
// of block first+b, i.e. the words of elements 4*first .. 4*(first+nblocks)-1 in order.  out: (4*nblocks,)
void fsdp_philox4x32_blocks(uint64_t seed, uint64_t stream, uint64_t first, size_t nblocks, uint32_t *out);

// out[k] = the 32-bit word of element (offset + k), k < n: uniform(i) is (word(i) >> 8) * 2^-24.  out: (n,)
void fsdp_rng_words(fsdp_rng rng, uint64_t offset, uint32_t *out, size_t n);
// out[k] = uniform [0,1) value of element (offset + k), k < n.          out: (n,)
void fsdp_rng_uniform(fsdp_rng rng, uint64_t offset, float *out, size_t n);
// out[k] = lo + (hi - lo) * uniform(offset + k).                         out: (n,)
void fsdp_rng_uniform_range(fsdp_rng rng, uint64_t offset, float *out, size_t n, float lo, float hi);
// out[k] = mean + std * normal(offset + k) (Box-Muller on a pair per element). out: (n,)
void fsdp_rng_normal(fsdp_rng rng, uint64_t offset, float *out, size_t n, float mean, float std);
// A single uniform [0,1) value of element `index`.
float fsdp_rng_uniform_at(fsdp_rng rng, uint64_t index);

// 64-bit FNV-1a of a string: a stable stream id for a parameter name.
uint64_t fsdp_hash_name(const char *name);
