// linear.h: torch.nn.Linear (weight (out, in)) and Hugging Face's Conv1D (weight (in, out)).
#pragma once
#include "nn/gemm_param.h"  // nn_gemm_param, declared here before it had its own file
#include "nn/lora.h"
#include "nn/nn_ctx.h"
#include "nn/param.h"

// A layer's input rows: fp32, or the same rows kept in bf16 (nn_ctx.act_bf16). Exactly one is set.
typedef struct {
    const float *f32;
    const fsdp_bf16 *b16;
} nn_input;

static inline nn_input nn_in_f32(const float *p) {
    nn_input in = {p, NULL};
    return in;
}

static inline nn_input nn_in_b16(const fsdp_bf16 *p) {
    nn_input in = {NULL, p};
    return in;
}

typedef struct {
    nn_param *weight;  // (out, in) for Linear; (in, out) when conv1d
    nn_param *bias;    // (out,), or NULL: a layer without bias (bias=False)
    int in, out;
    int conv1d;        // Hugging Face GPT-2 layout
    nn_lora *lora;     // a low-rank adapter added to the output, or NULL (owned by whoever attached it)
} nn_linear;

// Registers "<prefix>weight" and "<prefix>bias" (or the given names; bname NULL: no bias, as
// torch.nn.Linear(bias=False)). Init as torch.nn.Linear (U(+-1/sqrt(in)) for both) unless the caller
// overrides p->init afterwards.
void nn_linear_init(nn_linear *l, nn_params *ps, const char *prefix, const char *wname,
                    const char *bname, int in, int out, int conv1d);
// out: (N, out) = inp (N, in) @ W^T + b (+ the adapter's term)
fsdp_status nn_linear_forward(const nn_ctx *ctx, const nn_linear *l, float *out, const float *inp, int N);
// The same from an input in either storage: a bf16 one goes through the table's gemm_a16 entries (a
// layer with an adapter takes fp32 input only)
fsdp_status nn_linear_forward_in(const nn_ctx *ctx, const nn_linear *l, float *out, nn_input inp, int N);
// Whether nn_linear_forward_in adds the bias inside its product (the table's gemm_*_bias: bf16 weights,
// no adapter), with no pass over the output of its own; else its output starts as the bias (fill_rows)
int nn_linear_bias_in_product(const nn_linear *l);
// The same product without the bias: out (N, out) = inp W^T (+ the adapter's term), for a caller whose
// next kernel adds the bias itself (bias_act_dropout_forward) where the product would not
fsdp_status nn_linear_forward_no_bias(const nn_ctx *ctx, const nn_linear *l, float *out, nn_input inp, int N);
// dW, db += ... (skipped for a frozen weight or bias: grad NULL); dinp (N, in) = dout @ W (+= when
// accumulate_dinp), plus the adapter's term; dinp may be NULL
void nn_linear_backward(const nn_ctx *ctx, const nn_linear *l, float *dinp, int accumulate_dinp,
                        const float *dout, const float *inp, int N);
// The same for an input in either storage (the forward's)
void nn_linear_backward_in(const nn_ctx *ctx, const nn_linear *l, float *dinp, int accumulate_dinp,
                           const float *dout, nn_input inp, int N);
