// sgd.c: torch.optim.SGD (momentum, dampening, nesterov, L2 weight decay) over slices of a flat state.
#include <string.h>

#include "core/alloc.h"
#include "optim/optim.h"

fsdp_status fsdp_sgd_create(fsdp_sgd *opt, fsdp_sgd_config cfg, int64_t n) {
    memset(opt, 0, sizeof *opt);
    opt->cfg = cfg;
    opt->n = n;
    if (cfg.momentum != 0.0f) {
        opt->momentum_buf = fsdp_alloc((size_t)n * sizeof(float), FSDP_MEM_OPTIM);
        if (!opt->momentum_buf) return FSDP_ERR_NOMEM;
    }
    return FSDP_OK;
}

void fsdp_sgd_free(fsdp_sgd *opt) {
    fsdp_free(opt->momentum_buf);
    memset(opt, 0, sizeof *opt);
}

void fsdp_sgd_begin_step(fsdp_sgd *opt) { opt->step++; }

void fsdp_sgd_update(fsdp_sgd *opt, float lr, float *params, const float *grads, int64_t offset, int64_t n) {
    FSDP_ASSERT(offset >= 0 && offset + n <= opt->n && opt->step > 0);
    const fsdp_sgd_config *c = &opt->cfg;
    float *buf = opt->momentum_buf ? opt->momentum_buf + offset : NULL;
    int first = opt->step == 1;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = grads[i];
        if (c->weight_decay != 0.0f) g += c->weight_decay * params[i];
        if (buf) {
            buf[i] = first ? g : c->momentum * buf[i] + (1.0f - c->dampening) * g;
            g = c->nesterov ? g + c->momentum * buf[i] : buf[i];
        }
        params[i] -= lr * g;
    }
}
