// optim.h: optimizers over contiguous fp32 arrays (a whole model, or one rank's shard of each unit):
// torch.optim.AdamW and torch.optim.SGD semantics, gradient clipping by global norm, LR schedules.
// State is addressed by offset, so a caller that owns several shards updates each slice in turn.
// State, parameters and gradients are device memory; updates are kernels enqueued on the caller's stream.
#pragma once
#include <stdint.h>

#include "core/status.h"
#include "device/device.h"
#include "kernels/kernels.h"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} fsdp_adamw_config;

fsdp_adamw_config fsdp_adamw_defaults(void);  // lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01

typedef struct {
    fsdp_adamw_config cfg;
    int64_t n;      // state size
    float *m, *v;   // (n,) first and second moments, device memory (FSDP_MEM_OPTIM)
    int64_t step;   // steps taken
    fsdp_dev *dev;  // where m and v live
} fsdp_adamw;

// m and v zero-filled on dev
fsdp_status fsdp_adamw_create(fsdp_adamw *opt, fsdp_adamw_config cfg, int64_t n, fsdp_dev *dev);
void fsdp_adamw_free(fsdp_adamw *opt);
void fsdp_adamw_begin_step(fsdp_adamw *opt);  // step += 1 (bias corrections use the new step)
// Updates params/grads (n,) (device) whose state lives at [offset, offset + n); lr overrides cfg.lr
// (schedules). k: the device's table; the update is enqueued on st.
void fsdp_adamw_update(const fsdp_kernels *k, fsdp_stream *st, fsdp_adamw *opt, float lr, float *params,
                       const float *grads, int64_t offset, int64_t n);

typedef struct {
    float lr, momentum, dampening, weight_decay;
    int nesterov;
} fsdp_sgd_config;

typedef struct {
    fsdp_sgd_config cfg;
    int64_t n;
    float *momentum_buf;  // (n,) device memory (FSDP_MEM_OPTIM); NULL when momentum == 0
    int64_t step;
    fsdp_dev *dev;        // where momentum_buf lives
} fsdp_sgd;

fsdp_status fsdp_sgd_create(fsdp_sgd *opt, fsdp_sgd_config cfg, int64_t n, fsdp_dev *dev);
void fsdp_sgd_free(fsdp_sgd *opt);
void fsdp_sgd_begin_step(fsdp_sgd *opt);
// As fsdp_adamw_update: params/grads (n,) device, state at [offset, offset + n), enqueued on st.
void fsdp_sgd_update(const fsdp_kernels *k, fsdp_stream *st, fsdp_sgd *opt, float lr, float *params,
                     const float *grads, int64_t offset, int64_t n);

// torch.nn.utils.clip_grad_norm_: given the global L2 norm of all gradients, the factor to
// multiply them by: min(1, max_norm / (norm + 1e-6)).
float fsdp_clip_coefficient(double total_norm, float max_norm);

// Linear warmup over `warmup` steps (step s gets base_lr*(s+1)/warmup, as llm.c), then cosine decay to min_lr at `total` steps.
// step counts from 0; total <= warmup means constant after warmup.
float fsdp_lr_warmup_cosine(int64_t step, float base_lr, int64_t warmup, int64_t total, float min_lr);
