// cpu_fixed.h: the CPU kernels of exact, order-independent sums (fixed_point.c; contracts in kernels.h).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

void cpu_fixed_quantize(float *limbs, const float *g, size_t n, size_t block, const fsdp_fixed_format *f);
void cpu_fixed_finalize(float *out, const float *acc, size_t n, const fsdp_fixed_format *f, double scale);
void cpu_sum_squares_exact(int64_t *words, const float *x, size_t n);
