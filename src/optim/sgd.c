// sgd.c: torch.optim.SGD (momentum, dampening, nesterov, L2 weight decay) over slices of a flat state.
#include <string.h>

#include "optim/optim.h"

fsdp_status fsdp_sgd_create(fsdp_sgd *opt, fsdp_sgd_config cfg, int64_t n, fsdp_dev *dev) {
    memset(opt, 0, sizeof *opt);
    opt->cfg = cfg;
    opt->n = n;
    opt->dev = dev;
    if (cfg.momentum != 0.0f) {
        opt->momentum_buf = fsdp_dev_alloc(dev, (size_t)n * sizeof(float), FSDP_MEM_OPTIM);
        if (!opt->momentum_buf) return FSDP_ERR_NOMEM;
    }
    return FSDP_OK;
}

void fsdp_sgd_free(fsdp_sgd *opt) {
    if (opt->momentum_buf) fsdp_dev_free(opt->dev, opt->momentum_buf);
    memset(opt, 0, sizeof *opt);
}

void fsdp_sgd_begin_step(fsdp_sgd *opt) { opt->step++; }

void fsdp_sgd_update(const fsdp_kernels *k, fsdp_stream *st, fsdp_sgd *opt, float lr, float *params,
                     const float *grads, int64_t offset, int64_t n) {
    FSDP_ASSERT(offset >= 0 && offset + n <= opt->n && opt->step > 0);
    const fsdp_sgd_config *c = &opt->cfg;
    float *buf = opt->momentum_buf ? opt->momentum_buf + offset : NULL;
    int first = opt->step == 1;  // the buffer starts as the (decayed) gradient
    k->sgd_update(st, params, grads, buf, (size_t)n, lr, c->momentum, c->dampening, c->weight_decay, c->nesterov,
                  first);
}
