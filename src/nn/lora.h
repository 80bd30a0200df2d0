// lora.h: a low-rank adapter on a linear layer, as Hugging Face PEFT's LoraLayer:
//   y = W x + b + (alpha / r) * B (A dropout(x)),  A (r, in), B (out, r)
// whatever the base layer's weight layout (the path is x A^T B^T for Conv1D too). A is initialised as
// PEFT does (kaiming_uniform_(a=sqrt(5)): U(+-1/sqrt(in))), B to zero, so training starts at the base
// model. The adapter's parameters are "<layer prefix>lora_A.weight" and "lora_B.weight" (PEFT's names
// without its "base_model.model." prefix) and carry nn_param.adapter.
#pragma once
#include "nn/nn_ctx.h"
#include "nn/param.h"

typedef struct {
    nn_param *A;       // (r, in)
    nn_param *B;       // (out, r)
    int r, in, out;
    float scale;       // alpha / r
    float dropout;     // on the adapter's input only (PEFT's lora_dropout)
    int module_index;  // dropout stream: (module_index, site) of nn_dropout_rng
    int site;
    // activations of the last forward (device memory of dev), allocated at the first forward of a shape
    fsdp_dev *dev;
    size_t capacity_rows;
    float *u;          // (N, r): scale * dropout(x) A^T, kept for backward
    float *xd;         // (N, in): dropout(x), kept for backward (only when dropout > 0)
    float *du;         // (N, r): backward scratch
    float *dx;         // (N, in): backward scratch for dropout's backward (only when dropout > 0)
} nn_lora;

// Registers the adapter's two parameters after the layer's (prefix: the layer's, e.g. "h.0.attn.c_attn.").
void nn_lora_init(nn_lora *a, nn_params *ps, const char *prefix, int in, int out, int r, float alpha, float dropout,
                  int module_index, int site);
void nn_lora_free(nn_lora *a);
// out (N, out) += scale * B (A dropout(inp)); inp: (N, in)
fsdp_status nn_lora_forward(const nn_ctx *ctx, nn_lora *a, float *out, const float *inp, int N);
// dA, dB += (when bound: an adapter may be frozen too); dinp (N, in) += the adapter's input gradient
// (dinp may be NULL). dout: (N, out); inp: (N, in), the forward's input. Runs after the base layer's
// backward, which wrote dinp.
void nn_lora_backward(const nn_ctx *ctx, nn_lora *a, float *dinp, const float *dout, const float *inp, int N);
