// encoder_stack.c: builds the Sequential of TransformerEncoderLayers and its parameter list.
#include "nn/encoder_stack.h"

#include <stdio.h>
#include <string.h>

fsdp_status nn_encoder_stack_create(nn_encoder_stack *m, nn_block_config layer, int n_layers) {
    memset(m, 0, sizeof *m);
    m->layer = layer;
    m->n_layers = n_layers;
    FSDP_CHECK(nn_params_create(&m->params, 12 * n_layers));
    FSDP_CHECK(nn_sequential_create(&m->seq, n_layers));
    for (int i = 0; i < n_layers; i++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "%d.", i);
        nn_block_init_encoder(&m->seq.blocks[i], &m->params, prefix, layer, i);
    }
    return FSDP_OK;
}

void nn_encoder_stack_free(nn_encoder_stack *m) {
    nn_sequential_free(&m->seq);
    nn_params_destroy(&m->params);
}
