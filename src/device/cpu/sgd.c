// sgd.c: one torch.optim.SGD step (L2 weight decay, momentum with dampening, nesterov), elementwise
// (moved from optim/sgd.c unchanged).
#include "device/cpu/cpu_kernels.h"

void cpu_sgd_update(float *param, const float *grad, float *momentum_buf, size_t n, float lr, float momentum,
                    float dampening, float weight_decay, int nesterov, int first) {
    float *buf = momentum_buf;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        if (weight_decay != 0.0f) g += weight_decay * param[i];
        if (buf) {
            buf[i] = first ? g : momentum * buf[i] + (1.0f - dampening) * g;
            g = nesterov ? g + momentum * buf[i] : buf[i];
        }
        param[i] -= lr * g;
    }
}
