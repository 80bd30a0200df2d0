// encoder_stack.h: the seed model, nn.Sequential(*[nn.TransformerEncoderLayer(...) for _ in range(L)]),
// with parameters named "0.self_attn.in_proj_weight", ... as PyTorch's state_dict().
#pragma once
#include "nn/sequential.h"

typedef struct {
    nn_block_config layer;  // every layer's configuration
    int n_layers;
    nn_params params;
    nn_sequential seq;
} nn_encoder_stack;

fsdp_status nn_encoder_stack_create(nn_encoder_stack *m, nn_block_config layer, int n_layers);
void nn_encoder_stack_free(nn_encoder_stack *m);
