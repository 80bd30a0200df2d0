// attention_cuda.cuh: what the CUDA attention kernels share (attention_cuda.cu: one query or key row per
// block, any head dim up to 256; attention_tiles_cuda.cu: 64 x 64 tiles for head dims 64 and 128): the
// arguments, token rows, the dropout stream and the bf16 table's operand rounding.
#pragma once
#include <stdint.h>

#include "cuda_common.cuh"

namespace cuattn {

// What the kernels need of fsdp_attention_dims, plus the derived constants
struct Args {
    int B, T, H, C, hd;
    int64_t stride_b, stride_t;  // rows: token (b, t) at b * stride_b + t * stride_t
    int causal;
    int dropout;                 // dropout_p > 0
    float p;                     // dropout_p
    float keep;                  // the scale of kept values: 1 / (1 - p) (0 for p >= 1), as cpu_dropout_range
    float scale;                 // softmax scale 1 / sqrt(hd), as attention.c
    fsdp_rng rng;
};

// an operand of a product: rounded to bf16 in the bf16 table
template <bool kB16>
__device__ __forceinline__ float opnd(float x) {
    if (kB16) return cu_round_bf16(x);
    return x;
}

// row index of token (b, t)
__device__ __forceinline__ size_t token_row(const Args &a, int b, int t) {
    return (size_t)((int64_t)b * a.stride_b + (int64_t)t * a.stride_t);
}

// index of probability (i, j) of pair bh in the dropout stream
__device__ __forceinline__ uint64_t drop_index(const Args &a, int bh, int i, int j) {
    return ((uint64_t)bh * (uint64_t)a.T + (uint64_t)i) * (uint64_t)a.T + (uint64_t)j;
}

// probability (i, j) kept by the dropout (only called when a.dropout)
__device__ __forceinline__ bool kept(const Args &a, int bh, int i, int j) {
    return cu_uniform_at(a.rng, drop_index(a, bh, i, j)) >= a.p;
}

// The tiled kernels (attention_tiles_cuda.cu) take head dims 64 and 128.
inline bool tiles_fit(const Args &a) { return a.hd == 64 || a.hd == 128; }

// Tiled forward: out (rows of C), stats (B, H, T) from qkv (rows of 3C), as the row kernels compute them.
void tiles_forward(fsdp_stream *st, bool bf16, float *out, float *stats, const float *qkv, const Args &a);

// Tiled backward: dqkv (rows of 3C, every element of the heads' columns written) from dout (rows of C),
// qkv, stats and dd (B, H, T) = dO . O per row.
void tiles_backward(fsdp_stream *st, bool bf16, float *dqkv, const float *dout, const float *qkv, const float *stats,
                    const float *dd, const Args &a);

}  // namespace cuattn
