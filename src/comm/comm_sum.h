// comm_sum.h: the one reduction of bf16 payloads every transport uses (comm_sum.c), so they all give
// the same values. Not part of the public API.
#pragma once
#include <stddef.h>

#include "tensor/tensor.h"

// dst (n,) = bf16(scale * sum over r < nsrc of src[r] (n,)), summed in fp32 in the order of src, rounded
// once. src: (nsrc,) pointers.
void comm_sum_bf16(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int nsrc, size_t n, float scale);
