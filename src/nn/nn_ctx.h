// nn_ctx.h: what every forward/backward call receives: the device, the stream its work goes on, the
// device's kernel table, train/eval mode, and the coordinates that make dropout masks reproducible
// (seed, step, micro-batch) on any rank count. Modules allocate their activations (lazily, at the first
// forward of a shape) from ctx->dev and remember it to free them.
#pragma once
#include <stdint.h>

#include "core/rng.h"
#include "device/device.h"
#include "kernels/kernels.h"

typedef struct {
    const fsdp_kernels *k;  // fsdp_dev_kernels(dev, bf16)
    fsdp_dev *dev;          // where activations live
    fsdp_stream *stream;    // every kernel and copy of the call goes here (the device's compute stream)
    int training;           // dropout active only when training
    int act_bf16;           // bf16 mixed precision: activations that only feed matrix products are kept in
                            // bf16 (the values those bf16 products would round them to: same results)
    uint64_t seed;          // --seed
    uint64_t step;          // optimizer step (and micro-batch) counter: new masks every step
    uint64_t sample_offset; // reserved for FSDP: global index of this rank's first sample (not used yet)
} nn_ctx;

// A dropout stream for (module index, site) at the context's step.
static inline fsdp_rng nn_dropout_rng(const nn_ctx *ctx, int module_index, int site) {
    uint64_t s = (uint64_t)module_index * 0x9E3779B97F4A7C15ull ^ ((uint64_t)site << 56) ^
                 (ctx->step * 0xD1B54A32D192ED03ull);
    fsdp_rng rng = {ctx->seed ^ 0x5DEECE66Dull, s};
    return rng;
}
