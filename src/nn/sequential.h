// sequential.h: torch.nn.Sequential of transformer blocks, with per-block hooks. The hooks are where
// FSDP's unit lifecycle (unshard before forward/backward, reshard and reduce-scatter after) attaches.
#pragma once
#include "nn/transformer_block.h"

typedef struct {
    void *user;
    // each may be NULL; `block` is the index into the Sequential
    fsdp_status (*pre_forward)(void *user, int block);
    fsdp_status (*post_forward)(void *user, int block);
    fsdp_status (*pre_backward)(void *user, int block);
    fsdp_status (*post_backward)(void *user, int block);
} nn_hooks;

typedef struct {
    int count;
    nn_block *blocks;  // (count,)
    const nn_hooks *hooks;  // may be NULL
    int checkpointing;      // activation checkpointing: blocks keep only their output; backward
                            // recomputes each block's forward (same dropout masks) before its backward
    // backward ping-pong buffers and shared scratch (device memory), sized on first backward
    float *grad_a, *grad_b;  // (N, C)
    float *scratch;          // nn_block_scratch_floats
    size_t grad_floats, scratch_floats;
    fsdp_dev *dev;           // the device they were allocated from
} nn_sequential;

fsdp_status nn_sequential_create(nn_sequential *s, int count);
void nn_sequential_free(nn_sequential *s);
// Turns activation checkpointing on or off (frees the blocks' activation buffers).
void nn_sequential_set_checkpointing(nn_sequential *s, int on);
// inp: (N, C); returns the last block's output (N, C) through *out
fsdp_status nn_sequential_forward(const nn_ctx *ctx, nn_sequential *s, const float *inp, int B, int T,
                                  const float **out);
// Allocates every block's activation buffers and the backward's buffers for (B, T) in ctx now, so the
// first step does not pay for their first touch (nn_block_reserve)
fsdp_status nn_sequential_reserve(const nn_ctx *ctx, nn_sequential *s, int B, int T);
// dout: (N, C) gradient of the output; dinp: (N, C) written (may be NULL when not needed)
fsdp_status nn_sequential_backward(const nn_ctx *ctx, nn_sequential *s, const float *dout, const float *inp,
                                   float *dinp);
