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
    int B, T, C, H;        // batch, sequence, channels, heads (C % H == 0)
    int64_t stride_b;      // row of token (b, t) is b*stride_b + t*stride_t
    int64_t stride_t;      // batch_first: (T, 1); seq-first (PyTorch default): (1, B)
    int causal;            // mask future positions
    float dropout_p;       // dropout on attention probabilities
    fsdp_rng rng;          // dropout stream
} fsdp_attention_dims;

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
