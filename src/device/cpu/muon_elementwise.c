// muon_elementwise.c: the elementwise kernels Muon needs (kernels/kernel_list.h: axpby, divide_by_norm):
// the lerps and the decoupled update as y = a y + b x, and the division by the Frobenius norm.
#include <math.h>

#include "device/cpu/cpu_kernels.h"

void cpu_axpby(float *y, const float *x, float a, float b, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float ay = a * y[i], bx = b * x[i];  // two roundings, then the sum (the CUDA kernel's order)
        y[i] = ay + bx;
    }
}

void cpu_divide_by_norm(float *x, const double *sum_sq, float eps, size_t n) {
    float d = (float)(sqrt(*sum_sq) + (double)eps);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] /= d;
}
