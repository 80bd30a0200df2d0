// table.c: the CPU kernel table and the device lookup.
#include "kernels/cpu/cpu_kernels.h"

static const fsdp_kernels cpu_table = {
    .name = "cpu",
    .device = FSDP_DEV_CPU,
    .gemm = cpu_gemm,
    .gemm_b16 = cpu_gemm_bf16_b16,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .add = cpu_add,
    .add_inplace = cpu_add_inplace,
    .scale = cpu_scale,
    .bias_add = cpu_bias_add,
    .bias_backward = cpu_bias_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_forward_b16 = cpu_embedding_forward_b16,
    .embedding_backward = cpu_embedding_backward,
    .cross_entropy_forward = cpu_cross_entropy_forward,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .adamw_update = cpu_adamw_update,
    .sum_squares = cpu_sum_squares,
};

// bf16 mixed precision: every matrix product takes bf16 operands and accumulates in fp32; LayerNorm,
// softmax, the loss and every elementwise kernel stay fp32 (autocast's split).
static fsdp_kernels cpu_bf16_table;

const fsdp_kernels *fsdp_kernels_cpu(void) { return &cpu_table; }

const fsdp_kernels *fsdp_kernels_cpu_bf16(void) {
    if (!cpu_bf16_table.name) {
        fsdp_kernels t = cpu_table;
        t.name = "cpu-bf16";
        t.gemm = cpu_gemm_bf16;
        t.attention_forward = cpu_attention_forward_bf16;
        t.attention_backward = cpu_attention_backward_bf16;
        cpu_bf16_table = t;
    }
    return &cpu_bf16_table;
}

const fsdp_kernels *fsdp_kernels_for(fsdp_device dev) {
    return dev == FSDP_DEV_CPU ? &cpu_table : NULL;
}
