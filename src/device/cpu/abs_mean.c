// abs_mean.c: the seed's loss, model(x).abs().mean(), and its gradient. The sum of |y| is taken in
// double over fixed blocks (block_sum.h), so its bits do not depend on the thread count.
#include <math.h>

#include "kernels/block_sum.h"
#include "device/cpu/cpu_kernels.h"

#define ABS_MEAN_MIN_BLOCK 4096  // values per block at least (one block, no threads, up to this many)

// sum of |y| over y (n,) in double, element i into lane i % 8 (eight independent chains: vectorizes,
// and the order is fixed)
static double block_abs_sum(const float *y, size_t n) {
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += fabs((double)y[i + j]);
    for (; i < n; i++) acc[i % 8] += fabs((double)y[i]);
    return cpu_sum_lanes8(acc);
}

void cpu_abs_mean_forward(double *loss, const float *y, size_t n) {
    double part[CPU_SUM_MAX_BLOCKS];  // (nb,) block sums
    size_t bs = cpu_sum_block(n, ABS_MEAN_MIN_BLOCK), nb = cpu_sum_nblocks(n, bs);
#pragma omp parallel for schedule(static) if (nb > 1)
    for (size_t b = 0; b < nb; b++) part[b] = block_abs_sum(y + b * bs, n - b * bs < bs ? n - b * bs : bs);
    *loss = cpu_sum_in_order(part, nb) / (double)n;
}

void cpu_abs_mean_backward(float *dy, const float *y, size_t n, float dloss) {
    float g = dloss / (float)n;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dy[i] = y[i] > 0 ? g : (y[i] < 0 ? -g : 0.0f);
}
