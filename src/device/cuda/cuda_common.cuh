// cuda_common.cuh: what every CUDA kernel file shares: the project's C headers, the stream's native
// handles, launch checking, bf16 conversions with the CPU's rounding, and Philox4x32-10 on the device
// (the same counter stream as core/rng.c, so dropout masks are identical on both devices).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "device/cuda/cuda_device.h"
#include "kernels/kernels.h"
}

static inline cudaStream_t cu_stream(fsdp_stream *st) { return (cudaStream_t)fsdp_cuda_stream_handle(st); }

// Blocks of `threads` covering n items, capped (grid-stride loops cover the rest).
static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    if (b > 65535u * 4u) b = 65535u * 4u;
    return b ? (unsigned)b : 1u;
}

// dbias (cols,) += the column sums of x (rows, cols) dense, each summed from zero in row order and then
// added (cpu_bias_backward's bits); rows <= 0 adds zero sums (gemm_cuda.cu).
void cu_col_sums_in_order(fsdp_stream *st, float *dbias, const float *x, int rows, int cols, const char *what);

// Checks the launch just made (kernel name `what`).
#define CU_LAUNCHED(st, what) fsdp_cuda_check((st), (what), 0)

// bf16 <-> fp32 exactly as tensor/tensor.h's fsdp_f32_to_bf16 / fsdp_bf16_to_f32 (nearest even, NaN
// stays NaN, quietened).
__device__ __forceinline__ uint16_t cu_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}
__device__ __forceinline__ float cu_bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float cu_round_bf16(float f) { return cu_bf16_to_f32(cu_f32_to_bf16(f)); }

// Philox4x32-10 of core/rng.c: the four words of counter `block`.
__device__ __forceinline__ void cu_philox4x32(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// uniform [0,1) of element `index` of the stream rng: fsdp_rng_uniform_at's value, bit for bit.
__device__ __forceinline__ float cu_uniform_at(fsdp_rng rng, uint64_t index) {
    uint32_t w[4];
    cu_philox4x32(rng.seed, rng.stream, index >> 2, w);
    return (float)(w[index & 3] >> 8) * (1.0f / 16777216.0f);
}
