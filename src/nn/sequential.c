// sequential.c: runs blocks in order (forward) and in reverse (backward), calling the hooks around each.
#include "nn/sequential.h"

#include <stdlib.h>
#include <string.h>


fsdp_status nn_sequential_create(nn_sequential *s, int count) {
    memset(s, 0, sizeof *s);
    s->blocks = calloc((size_t)count, sizeof(nn_block));
    if (!s->blocks) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for %d blocks", count);
    s->count = count;
    return FSDP_OK;
}

static void free_backward_buffers(nn_sequential *s) {
    float **bufs[] = {&s->grad_a, &s->grad_b, &s->scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) fsdp_dev_free(s->dev, *bufs[i]);
        *bufs[i] = NULL;
    }
    s->grad_floats = s->scratch_floats = 0;
}

void nn_sequential_free(nn_sequential *s) {
    for (int i = s->count - 1; i >= 0; i--) nn_block_free(&s->blocks[i]);  // borrowers before the owner
    free(s->blocks);
    free_backward_buffers(s);
    memset(s, 0, sizeof *s);
}

void nn_sequential_set_checkpointing(nn_sequential *s, int on) {
    for (int i = s->count - 1; i >= 0; i--) nn_block_free(&s->blocks[i]);  // borrowers first
    for (int i = 0; i < s->count; i++) s->blocks[i].share = on && i > 0 ? &s->blocks[0] : NULL;
    s->checkpointing = on;
}

#define CALL_HOOK(s, fn, i)                                      \
    do {                                                         \
        if ((s)->hooks && (s)->hooks->fn)                        \
            FSDP_CHECK((s)->hooks->fn((s)->hooks->user, (i)));   \
    } while (0)

fsdp_status nn_sequential_forward(const nn_ctx *ctx, nn_sequential *s, const float *inp, int B, int T,
                                  const float **out) {
    const float *x = inp;
    for (int i = 0; i < s->count; i++) {
        CALL_HOOK(s, pre_forward, i);
        FSDP_CHECK(nn_block_forward(ctx, &s->blocks[i], x, B, T));
        CALL_HOOK(s, post_forward, i);
        x = s->blocks[i].out;
    }
    *out = x;
    return FSDP_OK;
}

static fsdp_status ensure_backward_buffers(nn_sequential *s, fsdp_dev *dev, size_t grad_floats,
                                          size_t scratch_floats) {
    if (s->dev != dev) {  // buffers of another device (or none yet)
        free_backward_buffers(s);
        s->dev = dev;
    }
    if (grad_floats > s->grad_floats) {
        if (s->grad_a) fsdp_dev_free(dev, s->grad_a);
        if (s->grad_b) fsdp_dev_free(dev, s->grad_b);
        s->grad_a = fsdp_dev_alloc(dev, grad_floats * sizeof(float), FSDP_MEM_ACTIVATIONS);
        s->grad_b = fsdp_dev_alloc(dev, grad_floats * sizeof(float), FSDP_MEM_ACTIVATIONS);
        if (!s->grad_a || !s->grad_b) {
            s->grad_floats = 0;
            return FSDP_ERR_NOMEM;
        }
        s->grad_floats = grad_floats;
    }
    if (scratch_floats > s->scratch_floats) {
        if (s->scratch) fsdp_dev_free(dev, s->scratch);
        s->scratch = fsdp_dev_alloc(dev, scratch_floats * sizeof(float), FSDP_MEM_ACTIVATIONS);
        if (!s->scratch) {
            s->scratch_floats = 0;
            return FSDP_ERR_NOMEM;
        }
        s->scratch_floats = scratch_floats;
    }
    return FSDP_OK;
}

// the gradient buffers (N, C) and the largest block's scratch for a backward of (B, T)
static fsdp_status ensure_backward_buffers_for(nn_sequential *s, fsdp_dev *dev, int B, int T) {
    size_t NC = (size_t)B * T * s->blocks[0].cfg.d_model, scratch = 0;
    for (int i = 0; i < s->count; i++) {
        size_t need = nn_block_scratch_floats(&s->blocks[i].cfg, B, T);
        scratch = need > scratch ? need : scratch;
    }
    return ensure_backward_buffers(s, dev, NC, scratch);
}

fsdp_status nn_sequential_reserve(const nn_ctx *ctx, nn_sequential *s, int B, int T) {
    if (s->count == 0) return FSDP_OK;
    for (int i = 0; i < s->count; i++) FSDP_CHECK(nn_block_reserve(ctx, &s->blocks[i], B, T));
    return ensure_backward_buffers_for(s, ctx->dev, B, T);
}

fsdp_status nn_sequential_backward(const nn_ctx *ctx, nn_sequential *s, const float *dout, const float *inp,
                                   float *dinp) {
    if (s->count == 0) return FSDP_OK;
    int B = s->blocks[0].B, T = s->blocks[0].T;
    FSDP_CHECK(ensure_backward_buffers_for(s, ctx->dev, B, T));
    const float *g = dout;
    for (int i = s->count - 1; i >= 0; i--) {
        CALL_HOOK(s, pre_backward, i);
        float *target = (i == 0 && dinp) ? dinp : ((g == s->grad_a) ? s->grad_b : s->grad_a);
        const float *x = i == 0 ? inp : s->blocks[i - 1].out;
        // checkpointing: the shared buffers hold the last block's forward; recompute the others
        if (s->checkpointing && i != s->count - 1) FSDP_CHECK(nn_block_forward(ctx, &s->blocks[i], x, B, T));
        nn_block_backward(ctx, &s->blocks[i], target, g, x, s->scratch);
        CALL_HOOK(s, post_backward, i);
        g = target;
    }
    return FSDP_OK;
}
