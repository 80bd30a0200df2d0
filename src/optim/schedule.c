// schedule.c: gradient clipping coefficient and the warmup + cosine learning-rate schedule.
#include <math.h>

#include "optim/optim.h"

float fsdp_clip_coefficient(double total_norm, float max_norm) {
    double coef = (double)max_norm / (total_norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

float fsdp_lr_warmup_cosine(int64_t step, float base_lr, int64_t warmup, int64_t total, float min_lr) {
    if (warmup > 0 && step < warmup) return base_lr * (float)(step + 1) / (float)warmup;
    if (total <= warmup) return base_lr;
    double progress = (double)(step - warmup) / (double)(total - warmup);
    if (progress > 1.0) progress = 1.0;
    double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return (float)(min_lr + (base_lr - min_lr) * cosine);
}
