// llama_block.h: the forward and backward of a block in Llama's form (Hugging Face's LlamaDecoderLayer),
// called by nn_block_forward / nn_block_backward once the block's buffers are in place.
#pragma once
#include "nn/transformer_block.h"

// r1 = x + o_proj(attn(rope(q, k), v)) of input_layernorm(x); out = r1 + down(silu(gate(h)) * up(h)),
// h = post_attention_layernorm(r1). inp: (N, C); dims: the block's (planar, grouped-query).
fsdp_status nn_block_forward_llama(const nn_ctx *ctx, nn_block *blk, const fsdp_attention_dims *dims,
                                   const float *inp);
// dinp: (N, C) overwritten; scratch: nn_block_scratch_floats() of the block's config. Overwrites the
// block's gate and up buffers (f1, f3) with their gradients.
void nn_block_backward_llama(const nn_ctx *ctx, nn_block *blk, const fsdp_attention_dims *dims, float *dinp,
                             const float *dout, const float *inp, float *scratch);
