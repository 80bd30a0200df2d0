// kernels.h: the per-device kernel table. nn/, optim/ and fsdp/ call kernels only through this
// table, so a CUDA table slots in beside the CPU one without a second implementation above it. The
// kernels themselves, their parameters and contracts, are listed once, in kernel_list.h.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "kernels/kernel_params.h"
#include "tensor/tensor.h"

typedef struct fsdp_stream fsdp_stream;  // device/device.h

// The feed-forward activations: ReLU, exact GELU, and GELU with PyTorch's approximate='tanh'
typedef enum { FSDP_ACT_RELU, FSDP_ACT_GELU, FSDP_ACT_GELU_TANH } fsdp_activation;

typedef struct {
    int B, T, C, H;        // batch, sequence, attention width H*hd, query heads (C % H == 0; hd = C / H)
    int64_t stride_b;      // row of token (b, t) is b*stride_b + t*stride_t
    int64_t stride_t;      // batch_first: (T, 1); seq-first (PyTorch default): (1, B)
    int causal;            // mask future positions
    float dropout_p;       // dropout on attention probabilities
    fsdp_rng rng;          // dropout stream
    int kv_heads;          // key/value heads (0: H); H % kv_heads == 0; query head h reads key/value head
                           // h / (H / kv_heads); K and V are never repeated in memory
    int planar;            // 0: qkv rows of (H + 2 kv_heads) hd floats (q | k | v; today's 3C when kv_heads = H);
                           // 1: three planes, q (N, H hd) at qkv, k (N, kv_heads hd) after it, v (N, kv_heads hd)
                           // after that, N = B*T rows (each plane's rows in the token order stride_b/stride_t give)
} fsdp_attention_dims;

// Where the heads of qkv (and of dqkv: the same layout) are, from fsdp_attention_dims: with r = b*stride_b
// + t*stride_t the row of token (b, t), query head h's hd floats start at r*row_q + h*hd, key/value head
// j's key at k_base + r*row_kv + j*hd and its value at v_base + r*row_kv + j*hd (floats from qkv).
typedef struct {
    int kv_heads;            // key/value heads (the dims' kv_heads, H when that is 0)
    int group;               // query heads per key/value head: H / kv_heads
    int64_t row_q, row_kv;   // floats from one row to the next: of the queries, of the keys and values
    int64_t k_base, v_base;  // floats from qkv to the keys and to the values of row 0, head 0
} fsdp_attention_layout;

static inline fsdp_attention_layout fsdp_attention_layout_of(const fsdp_attention_dims *d) {
    int hd = d->H > 0 ? d->C / d->H : 0, kv = d->kv_heads > 0 ? d->kv_heads : d->H;
    fsdp_attention_layout l = {kv, kv > 0 ? d->H / kv : 0, 0, 0, 0, 0};
    int64_t kv_width = (int64_t)kv * hd;  // floats of one row's keys (and of its values)
    if (d->planar) {
        int64_t rows = (int64_t)d->B * d->T;
        l.row_q = d->C, l.row_kv = kv_width;
        l.k_base = rows * d->C, l.v_base = l.k_base + rows * kv_width;
    } else {
        l.row_q = l.row_kv = d->C + 2 * kv_width;
        l.k_base = d->C, l.v_base = d->C + kv_width;
    }
    return l;
}

// Floats of a qkv (or dqkv) buffer of these dims, either layout: B*T rows of q, k and v, (H + 2 kv_heads) hd
static inline size_t fsdp_attention_qkv_floats(const fsdp_attention_dims *d) {
    int hd = d->H > 0 ? d->C / d->H : 0, kv = d->kv_heads > 0 ? d->kv_heads : d->H;
    return (size_t)d->B * (size_t)d->T * ((size_t)d->C + 2 * (size_t)kv * (size_t)hd);
}

// Fixed point for exact sums in any order (the deterministic mode, fsdp/deterministic.c): a value g is
// the integer v = rint(g * 2^frac_bits), stored as `limbs` balanced digits of limb_bits bits each
// (v = sum_k d_k 2^(k limb_bits), |d_k| <= 2^(limb_bits-1)), every digit a float. fp32 sums of up to
// 2^(25 - limb_bits) such digit vectors are exact, hence the same whatever their order.
typedef struct {
    int limbs;      // digits per value
    int limb_bits;  // bits per digit (<= 24)
    int frac_bits;  // fraction bits: the grid is 2^-frac_bits
} fsdp_fixed_format;

// Words of an exact sum of squares (sum_squares_exact): word w holds bits [32 w, 32 w + 32) of the sum
// counted from 2^-298 (the square of the smallest fp32 subnormal), carried; the last word is -1 when a
// square was NaN or Inf.
#define FSDP_XSUM_WORDS 20
#define FSDP_XSUM_LOW (-298)

// The table: a name, the device its pointers address, then one member per entry of kernel_list.h,
// `void (*name)(fsdp_stream *st, parameters...)`, in the list's order (the contracts are there).
typedef struct fsdp_kernels {
    const char *name;
    fsdp_device device;
#define FSDP_KERNEL(fn, ...) void (*fn)(fsdp_stream * st, FSDP_KPARAMS(__VA_ARGS__));
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL
} fsdp_kernels;
