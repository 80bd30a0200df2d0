// abs_mean.c: the seed's loss, model(x).abs().mean(), and its gradient (moved from nn/loss.c unchanged:
// the same OpenMP reduction, so the sum is the same bits).
#include "kernels/cpu/cpu_kernels.h"

double cpu_abs_mean_forward(const float *y, size_t n) {
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (size_t i = 0; i < n; i++) total += y[i] < 0 ? -(double)y[i] : (double)y[i];
    return total / (double)n;
}

void cpu_abs_mean_backward(float *dy, const float *y, size_t n, float dloss) {
    float g = dloss / (float)n;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dy[i] = y[i] > 0 ? g : (y[i] < 0 ? -g : 0.0f);
}
