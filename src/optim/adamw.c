// adamw.c: torch.optim.AdamW over slices of a flat state.
#include <math.h>
#include <string.h>

#include "optim/optim.h"

fsdp_adamw_config fsdp_adamw_defaults(void) {
    fsdp_adamw_config c = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
    return c;
}

fsdp_status fsdp_adamw_create(fsdp_adamw *opt, fsdp_adamw_config cfg, int64_t n, fsdp_dev *dev) {
    memset(opt, 0, sizeof *opt);
    opt->cfg = cfg;
    opt->n = n;
    opt->dev = dev;
    opt->m = fsdp_dev_alloc(dev, (size_t)n * sizeof(float), FSDP_MEM_OPTIM);
    opt->v = fsdp_dev_alloc(dev, (size_t)n * sizeof(float), FSDP_MEM_OPTIM);
    return (opt->m && opt->v) ? FSDP_OK : FSDP_ERR_NOMEM;
}

void fsdp_adamw_free(fsdp_adamw *opt) {
    if (opt->m) fsdp_dev_free(opt->dev, opt->m);
    if (opt->v) fsdp_dev_free(opt->dev, opt->v);
    memset(opt, 0, sizeof *opt);
}

void fsdp_adamw_begin_step(fsdp_adamw *opt) { opt->step++; }

void fsdp_adamw_update(const fsdp_kernels *k, fsdp_stream *st, fsdp_adamw *opt, float lr, float *params,
                       const float *grads, int64_t offset, int64_t n) {
    FSDP_ASSERT(offset >= 0 && offset + n <= opt->n && opt->step > 0);
    const fsdp_adamw_config *c = &opt->cfg;
    double bias1 = 1.0 - pow((double)c->beta1, (double)opt->step);
    double bias2 = 1.0 - pow((double)c->beta2, (double)opt->step);
    float step_size = (float)(lr / bias1);
    float bias2_sqrt = (float)sqrt(bias2);
    k->adamw_update(st, params, grads, opt->m + offset, opt->v + offset, (size_t)n, lr, c->beta1, c->beta2,
                    c->eps, c->weight_decay, step_size, bias2_sqrt);
}
