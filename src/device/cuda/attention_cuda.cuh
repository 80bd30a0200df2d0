// attention_cuda.cuh: what the CUDA attention kernels share: the arguments, token rows and where each
// head is in qkv (kernels.h's fsdp_attention_layout: grouped-query heads, interleaved or planar), the
// dropout stream and the bf16 table's operand rounding. attention_cuda.cu: one query or key row per block, any
// head dim up to 256; for head dims 64 and 128, 64 x 64 tiles: the fp32 table's on CUDA cores
// (attention_tiles_cuda.cu), the bf16 table's on tensor cores (attention_mma_cuda.cu).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "cuda_common.cuh"

namespace cuattn {

// What the kernels need of fsdp_attention_dims, plus the derived constants
struct Args {
    int B, T, H, C, hd;
    int KV, group;               // key/value heads; query heads per key/value head (query head h reads h / group)
    int64_t row_q, row_kv;       // qkv's layout (fsdp_attention_layout): floats per row of the queries, of k / v
    int64_t k_base, v_base;      // floats from qkv to the keys, the values of row 0, head 0
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

// floats from qkv (or dqkv) to column 0 of query head h of token (b, t), and to key / value head j's
__device__ __forceinline__ int64_t q_at(const Args &a, int b, int t, int h) {
    return (int64_t)token_row(a, b, t) * a.row_q + (int64_t)h * a.hd;
}
__device__ __forceinline__ int64_t k_at(const Args &a, int b, int t, int j) {
    return a.k_base + (int64_t)token_row(a, b, t) * a.row_kv + (int64_t)j * a.hd;
}
__device__ __forceinline__ int64_t v_at(const Args &a, int b, int t, int j) {
    return a.v_base + (int64_t)token_row(a, b, t) * a.row_kv + (int64_t)j * a.hd;
}
// floats from one token's queries to the next token's (of the same head), and likewise for k and v
__device__ __forceinline__ int64_t q_step(const Args &a) { return a.stride_t * a.row_q; }
__device__ __forceinline__ int64_t kv_step(const Args &a) { return a.stride_t * a.row_kv; }

// index of probability (i, j) of pair bh in the dropout stream
__device__ __forceinline__ uint64_t drop_index(const Args &a, int bh, int i, int j) {
    return ((uint64_t)bh * (uint64_t)a.T + (uint64_t)i) * (uint64_t)a.T + (uint64_t)j;
}

// probability (i, j) kept by the dropout (only called when a.dropout)
__device__ __forceinline__ bool kept(const Args &a, int bh, int i, int j) {
    return cu_uniform_at(a.rng, drop_index(a, bh, i, j)) >= a.p;
}

// Lets `kernel` take `bytes` of dynamic shared memory (over the default 48 KB) on the current device;
// false (an error noted on st) when it cannot.
template <typename Kernel>
bool allow_shared(fsdp_stream *st, Kernel kernel, size_t bytes) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) == cudaSuccess) return true;
    fsdp_cuda_check(st, "attention (dynamic shared memory)", 0);  // the failure, from cudaGetLastError
    return false;
}

// The tiled kernels (attention_tiles_cuda.cu, attention_mma_cuda.cu) take head dims 64 and 128.
inline bool tiles_fit(const Args &a) { return a.hd == 64 || a.hd == 128; }

// The fp32 table's tiled forward: out (rows of C), stats (B, H, T) from qkv (the layout of Args), as the
// row kernels compute them (attention_tiles_cuda.cu).
void tiles_forward(fsdp_stream *st, float *out, float *stats, const float *qkv, const Args &a);

// The fp32 table's tiled backward: dqkv (qkv's layout, every element of the heads' columns written) from
// dout (rows of C), qkv, stats and dd (B, H, T) = dO . O per row.
void tiles_backward(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *stats,
                    const float *dd, const Args &a);

// The bf16 table's forward and backward for head dims 64 and 128 on tensor cores
// (attention_mma_cuda.cu); the same arguments as tiles_forward / tiles_backward, and for the backward
// mma_backward_scratch(a) bytes of the stream's scratch (256-byte aligned) for its bf16 operands (the
// forward takes the scratch itself).
void mma_forward(fsdp_stream *st, float *out, float *stats, const float *qkv, const Args &a);
size_t mma_backward_scratch(const Args &a);
void mma_backward(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *stats,
                  const float *dd, const Args &a, void *scratch);

}  // namespace cuattn
