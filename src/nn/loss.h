// loss.h: the seed's loss, mean(|y|), and its gradient, through the device's kernels.
#pragma once
#include <stddef.h>

#include "nn/nn_ctx.h"

// loss (1,) device = mean(|y|) over n values, summed in double. y: (n,) device. The host reads the value
// with fsdp_dev_read where it needs it.
void nn_abs_mean_forward(const nn_ctx *ctx, double *loss, const float *y, size_t n);
// dy (n,) = sign(y) / n * dloss   (sign(0) = 0, as torch.abs's backward). dy, y: device
void nn_abs_mean_backward(const nn_ctx *ctx, float *dy, const float *y, size_t n, float dloss);
