// block_sum.h: reductions whose bits do not depend on the OpenMP thread count. A sum over n values is
// cut into fixed blocks (their size a function of n alone), threads take whole blocks, each block is
// summed the same way whichever thread takes it, and the block sums are added in block order on one
// thread. So 1, 2 or 64 threads give the same bits (the deterministic mode needs that: a rank's results
// may not depend on how many threads it runs); the order is not the serial loop's.
#pragma once
#include <stddef.h>

// The most blocks a sum is cut into: the block sums fit a stack array of this many doubles.
#define CPU_SUM_MAX_BLOCKS 1024

// Values per block for a sum over n values: min_block, or more (a multiple of 16) when n / min_block
// blocks would exceed CPU_SUM_MAX_BLOCKS. A function of n and min_block only, never of the thread count.
static inline size_t cpu_sum_block(size_t n, size_t min_block) {
    size_t b = (n + CPU_SUM_MAX_BLOCKS - 1) / CPU_SUM_MAX_BLOCKS;
    b = (b + 15) / 16 * 16;
    return b > min_block ? b : min_block;
}

// The number of blocks of `block` values that cover n values.
static inline size_t cpu_sum_nblocks(size_t n, size_t block) { return (n + block - 1) / block; }

// part (nb,) added in order into a double that starts at 0.
static inline double cpu_sum_in_order(const double *part, size_t nb) {
    double total = 0.0;
    for (size_t b = 0; b < nb; b++) total += part[b];
    return total;
}

// The 8 lane sums acc (8,) of an interleaved block sum, combined in a fixed tree.
static inline double cpu_sum_lanes8(const double *acc) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
