// loss.h: the seed's loss, mean(|y|), and its gradient.
#pragma once
#include <stddef.h>

// returns mean(|y|) over n values, summed in double. y: (n,)
double nn_abs_mean_forward(const float *y, size_t n);
// dy (n,) = sign(y) / n * dloss   (sign(0) = 0, as torch.abs's backward)
void nn_abs_mean_backward(float *dy, const float *y, size_t n, float dloss);
