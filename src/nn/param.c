// param.c: the parameter list and its deterministic, shardable initialization.
#include "nn/param.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fsdp_status nn_params_create(nn_params *ps, int capacity) {
    ps->items = calloc((size_t)capacity, sizeof(nn_param));
    ps->count = 0;
    ps->capacity = capacity;
    return ps->items ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "out of memory for %d parameters", capacity);
}

void nn_params_destroy(nn_params *ps) {
    for (int i = 0; i < ps->count; i++)
        if (ps->items[i].widened) fsdp_dev_free(ps->items[i].widened_dev, ps->items[i].widened);
    free(ps->items);
    ps->items = NULL;
    ps->count = ps->capacity = 0;
}

nn_param *nn_params_add(nn_params *ps, const char *prefix, const char *name, int ndim,
                        const int64_t *shape, nn_init init) {
    FSDP_ASSERT(ps->count < ps->capacity);
    nn_param *p = &ps->items[ps->count++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s%s", prefix, name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= shape[i];
    }
    p->init = init;
    return p;
}

nn_param *nn_params_find(const nn_params *ps, const char *name) {
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->items[i].name, name) == 0) return &ps->items[i];
    return NULL;
}

int64_t nn_params_numel(const nn_params *ps) {
    int64_t n = 0;
    for (int i = 0; i < ps->count; i++) n += ps->items[i].numel;
    return n;
}

void nn_params_bind_flat(nn_params *ps, float *data, float *grad) {
    int64_t off = 0;
    for (int i = 0; i < ps->count; i++) {
        ps->items[i].data = data ? data + off : NULL;
        ps->items[i].grad = grad ? grad + off : NULL;
        ps->items[i].data_b16 = NULL;  // bound in fp32 now: no stale bf16 view may win
        off += ps->items[i].numel;
    }
}

const float *nn_param_f32(const nn_ctx *ctx, nn_param *p) {
    if (p->data || !p->data_b16) return p->data;
    if (p->widened && p->widened_dev != ctx->dev) {  // another device: its copy is of no use here
        fsdp_dev_free(p->widened_dev, p->widened);
        p->widened = NULL;
    }
    if (!p->widened) {
        p->widened = fsdp_dev_alloc(ctx->dev, sizeof(float) * (size_t)p->numel, FSDP_MEM_ACTIVATIONS);
        if (!p->widened) return NULL;
        p->widened_dev = ctx->dev;
    }
    ctx->k->bf16_to_f32(ctx->stream, p->widened, p->data_b16, (size_t)p->numel);
    return p->widened;
}

void nn_param_init_slice(const nn_param *p, uint64_t seed, int64_t offset, int64_t n, float *dst) {
    fsdp_rng rng = {seed, fsdp_hash_name(p->name)};
    // chunks are independent: element i's value depends only on (seed, name, offset + i)
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c0 = 0; c0 < n; c0 += 16384) {
        int64_t c = n - c0 < 16384 ? n - c0 : 16384;
        float *d = dst + c0;
        uint64_t at = (uint64_t)(offset + c0);
        switch (p->init.kind) {
        case NN_INIT_ZEROS: memset(d, 0, sizeof(float) * (size_t)c); break;
        case NN_INIT_ONES:
            for (int64_t i = 0; i < c; i++) d[i] = 1.0f;
            break;
        case NN_INIT_UNIFORM:
            fsdp_rng_uniform_range(rng, at, d, (size_t)c, -p->init.scale, p->init.scale);
            break;
        case NN_INIT_NORMAL: fsdp_rng_normal(rng, at, d, (size_t)c, 0.0f, p->init.scale); break;
        }
    }
}
