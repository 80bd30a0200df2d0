// adamw.c: one torch.optim.AdamW step (decoupled weight decay, bias correction), elementwise.
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

void cpu_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float step_size,
                      float bias2_sqrt) {
    float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        float p = param[i] * decay;
        float mi = m[i] * beta1 + (1.0f - beta1) * g;
        float vi = v[i] * beta2 + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bias2_sqrt + eps;
        param[i] = p - step_size * (mi / denom);
    }
}
