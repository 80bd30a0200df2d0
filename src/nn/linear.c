// linear.c: Linear / Conv1D forward and backward through the kernel table's GEMM.
#include "nn/linear.h"

#include <math.h>

void nn_linear_init(nn_linear *l, nn_params *ps, const char *prefix, const char *wname,
                    const char *bname, int in, int out, int conv1d) {
    float bound = 1.0f / sqrtf((float)in);
    int64_t wshape[2] = {conv1d ? in : out, conv1d ? out : in};
    int64_t bshape[1] = {out};
    l->weight = nn_params_add(ps, prefix, wname, 2, wshape, (nn_init){NN_INIT_UNIFORM, bound});
    l->bias = bname ? nn_params_add(ps, prefix, bname, 1, bshape, (nn_init){NN_INIT_UNIFORM, bound}) : NULL;
    l->weight->grad_overwrite = 1;  // written only by the dW product below (nn_grad_beta)
    l->in = in;
    l->out = out;
    l->conv1d = conv1d;
    l->lora = NULL;  // nn_gpt2_add_lora attaches one
}

// nn_gemm_param with A given as a layer input (fp32 or bf16)
static void gemm_input_param(const nn_ctx *ctx, int trans_b, int M, int N, int K, nn_input A, int lda,
                             const nn_param *P, int ldb, float beta, float *C, int ldc) {
    const fsdp_kernels *k = ctx->k;
    if (!A.b16) nn_gemm_param(ctx, 0, trans_b, M, N, K, A.f32, lda, P, ldb, beta, C, ldc);
    else if (P->data_b16) k->gemm_a16_b16(ctx->stream, 0, trans_b, M, N, K, 1.0f, A.b16, lda, P->data_b16, ldb, beta, C, ldc);
    else k->gemm_a16(ctx->stream, 0, trans_b, M, N, K, 1.0f, A.b16, lda, P->data, ldb, beta, C, ldc);
}

// out = beta * out + inp W^T (Conv1D: inp W), plus the adapter's term
static fsdp_status linear_product(const nn_ctx *ctx, const nn_linear *l, float *out, nn_input inp, int N, float beta) {
    FSDP_ASSERT(!(l->lora && inp.b16));  // adapters read fp32 inputs
    if (l->conv1d) gemm_input_param(ctx, 0, N, l->out, l->in, inp, l->in, l->weight, l->out, beta, out, l->out);
    else gemm_input_param(ctx, 1, N, l->out, l->in, inp, l->in, l->weight, l->in, beta, out, l->out);
    return l->lora ? nn_lora_forward(ctx, l->lora, out, inp.f32, N) : FSDP_OK;
}

fsdp_status nn_linear_forward(const nn_ctx *ctx, const nn_linear *l, float *out, const float *inp, int N) {
    return nn_linear_forward_in(ctx, l, out, nn_in_f32(inp), N);
}

fsdp_status nn_linear_forward_in(const nn_ctx *ctx, const nn_linear *l, float *out, nn_input inp, int N) {
    // out rows start as the bias, then the GEMM accumulates (beta = 1), as torch.addmm. A bias bound in
    // bf16 is widened into its device scratch first (nn_param_f32). No bias: the product alone.
    if (!l->bias) return linear_product(ctx, l, out, inp, N, 0.0f);
    const float *bias = nn_param_f32(ctx, l->bias);
    FSDP_ASSERT(bias != NULL);
    const fsdp_bf16 *w = l->weight->data_b16;
    if (nn_linear_bias_in_product(l)) {  // the bias joins where the product's rows are stored (same bits)
        int trans_b = !l->conv1d, ldb = l->conv1d ? l->out : l->in;
        if (inp.b16)
            ctx->k->gemm_a16_b16_bias(ctx->stream, trans_b, N, l->out, l->in, inp.b16, l->in, w, ldb, bias, out, l->out);
        else
            ctx->k->gemm_b16_bias(ctx->stream, trans_b, N, l->out, l->in, inp.f32, l->in, w, ldb, bias, out, l->out);
        return FSDP_OK;
    }
    ctx->k->fill_rows(ctx->stream, out, bias, N, l->out);
    return linear_product(ctx, l, out, inp, N, 1.0f);
}

int nn_linear_bias_in_product(const nn_linear *l) { return l->bias && l->weight->data_b16 && !l->lora; }

fsdp_status nn_linear_forward_no_bias(const nn_ctx *ctx, const nn_linear *l, float *out, nn_input inp, int N) {
    return linear_product(ctx, l, out, inp, N, 0.0f);
}

void nn_linear_backward(const nn_ctx *ctx, const nn_linear *l, float *dinp, int accumulate_dinp,
                        const float *dout, const float *inp, int N) {
    nn_linear_backward_in(ctx, l, dinp, accumulate_dinp, dout, nn_in_f32(inp), N);
}

void nn_linear_backward_in(const nn_ctx *ctx, const nn_linear *l, float *dinp, int accumulate_dinp,
                           const float *dout, nn_input inp, int N) {
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    if (dinp) {
        float beta = accumulate_dinp ? 1.0f : 0.0f;
        if (l->conv1d) nn_gemm_param(ctx, 0, 1, N, l->in, l->out, dout, l->out, l->weight, l->out, beta, dinp, l->in);
        else nn_gemm_param(ctx, 0, 0, N, l->in, l->out, dout, l->out, l->weight, l->in, beta, dinp, l->in);
    }
    // a frozen weight or bias (requires_grad=False) has no gradient view: its product is skipped; a bf16
    // input is the A (Conv1D) or B (Linear) operand in bf16, the values the bf16 product rounds fp32 to
    // (with a bf16 input and a bias gradient, one call takes both: the bias's sums ride on dout's packing)
    float *dw = l->weight->grad, bw = dw ? nn_grad_beta(l->weight) : 1.0f;  // bw 0: a fresh view is stored
    float *db = l->bias ? l->bias->grad : NULL;
    int fused = dw && db && inp.b16;
    if (fused && l->conv1d)          // dW (in, out) += inp^T dout
        k->gemm_a16_dbias(st, l->in, l->out, N, inp.b16, l->in, dout, bw, dw, l->out, db);
    else if (fused)                  // dW (out, in) += dout^T inp
        k->gemm_b16_dbias(st, l->out, l->in, N, dout, inp.b16, l->in, bw, dw, l->in, db);
    else if (dw && l->conv1d && inp.b16)
        k->gemm_a16(st, 1, 0, l->in, l->out, N, 1.0f, inp.b16, l->in, dout, l->out, bw, dw, l->out);
    else if (dw && l->conv1d)
        k->gemm(st, 1, 0, l->in, l->out, N, 1.0f, inp.f32, l->in, dout, l->out, bw, dw, l->out);
    else if (dw && inp.b16)
        k->gemm_b16(st, 1, 0, l->out, l->in, N, 1.0f, dout, l->out, inp.b16, l->in, bw, dw, l->in);
    else if (dw)
        k->gemm(st, 1, 0, l->out, l->in, N, 1.0f, dout, l->out, inp.f32, l->in, bw, dw, l->in);
    if (db && !fused) k->bias_backward(st, db, dout, N, l->out);
    if (l->lora) nn_lora_backward(ctx, l->lora, dinp, dout, inp.f32, N);
}
