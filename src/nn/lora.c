// lora.c: the low-rank adapter's forward and backward (lora.h).
#include "nn/lora.h"

#include <math.h>
#include <string.h>

#include "nn/gemm_param.h"

void nn_lora_init(nn_lora *a, nn_params *ps, const char *prefix, int in, int out, int r, float alpha, float dropout,
                  int module_index, int site) {
    memset(a, 0, sizeof *a);
    int64_t ashape[2] = {r, in}, bshape[2] = {out, r};
    // kaiming_uniform_(a=sqrt(5)) on fan_in = in: bound gain * sqrt(3 / in) with gain sqrt(2 / 6)
    a->A = nn_params_add(ps, prefix, "lora_A.weight", 2, ashape, (nn_init){NN_INIT_UNIFORM, 1.0f / sqrtf((float)in)});
    a->B = nn_params_add(ps, prefix, "lora_B.weight", 2, bshape, (nn_init){NN_INIT_ZEROS, 0});
    a->A->adapter = a->B->adapter = 1;
    a->r = r, a->in = in, a->out = out;
    a->scale = alpha / (float)r;
    a->dropout = dropout;
    a->module_index = module_index;
    a->site = site;
}

void nn_lora_free(nn_lora *a) {
    float **bufs[] = {&a->u, &a->xd, &a->du, &a->dx};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) fsdp_dev_free(a->dev, *bufs[i]);
        *bufs[i] = NULL;
    }
    a->capacity_rows = 0;
}

static fsdp_status ensure_buffers(nn_lora *a, fsdp_dev *dev, size_t N) {
    if (a->dev == dev && N <= a->capacity_rows) return FSDP_OK;
    nn_lora_free(a);
    a->dev = dev;
    size_t r = (size_t)a->r, in = a->dropout > 0.0f ? (size_t)a->in : 0;
    struct { float **p; size_t n; } want[] = {{&a->u, N * r}, {&a->du, N * r}, {&a->xd, N * in}, {&a->dx, N * in}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!want[i].n) continue;
        *want[i].p = fsdp_dev_alloc(dev, want[i].n * sizeof(float), FSDP_MEM_ACTIVATIONS);
        if (!*want[i].p) return fsdp_error(FSDP_ERR_NOMEM, "out of device memory for a LoRA adapter's activations");
    }
    a->capacity_rows = N;
    return FSDP_OK;
}

// dropout(inp) (into xd when active), the adapter's input
static const float *adapter_input(const nn_ctx *ctx, nn_lora *a, const float *inp, int N) {
    if (!(a->dropout > 0.0f)) return inp;
    if (ctx->training) {
        ctx->k->dropout_forward(ctx->stream, a->xd, inp, (size_t)N * a->in, a->dropout,
                                nn_dropout_rng(ctx, a->module_index, a->site));
        return a->xd;
    }
    return inp;
}

fsdp_status nn_lora_forward(const nn_ctx *ctx, nn_lora *a, float *out, const float *inp, int N) {
    FSDP_CHECK(ensure_buffers(a, ctx->dev, (size_t)N));
    const float *x = adapter_input(ctx, a, inp, N);  // (N, in)
    // u (N, r) = x A^T, then scaled; out (N, out) += u B^T
    nn_gemm_param(ctx, 0, 1, N, a->r, a->in, x, a->in, a->A, a->in, 0.0f, a->u, a->r);
    ctx->k->scale(ctx->stream, a->u, a->scale, (size_t)N * a->r);
    nn_gemm_param(ctx, 0, 1, N, a->out, a->r, a->u, a->r, a->B, a->r, 1.0f, out, a->out);
    return FSDP_OK;
}

void nn_lora_backward(const nn_ctx *ctx, nn_lora *a, float *dinp, const float *dout, const float *inp, int N) {
    const fsdp_kernels *k = ctx->k;
    fsdp_stream *st = ctx->stream;
    int dropped = a->dropout > 0.0f && ctx->training;
    if (a->B->grad)  // dB (out, r) += dout^T u
        k->gemm(st, 1, 0, a->out, a->r, N, 1.0f, dout, a->out, a->u, a->r, 1.0f, a->B->grad, a->r);
    // du (N, r) = scale * dout B
    nn_gemm_param(ctx, 0, 0, N, a->r, a->out, dout, a->out, a->B, a->r, 0.0f, a->du, a->r);
    k->scale(st, a->du, a->scale, (size_t)N * a->r);
    if (a->A->grad)  // dA (r, in) += du^T x, x the adapter's input (dropped out as in forward)
        k->gemm(st, 1, 0, a->r, a->in, N, 1.0f, a->du, a->r, dropped ? a->xd : inp, a->in, 1.0f, a->A->grad, a->in);
    if (!dinp) return;
    if (dropped) {  // dinp += dropout_backward(du A)
        nn_gemm_param(ctx, 0, 0, N, a->in, a->r, a->du, a->r, a->A, a->in, 0.0f, a->dx, a->in);
        k->dropout_backward(st, a->dx, a->dx, (size_t)N * a->in, a->dropout,
                            nn_dropout_rng(ctx, a->module_index, a->site));
        k->add_inplace(st, dinp, a->dx, (size_t)N * a->in);
    } else {  // dinp += du A
        nn_gemm_param(ctx, 0, 0, N, a->in, a->r, a->du, a->r, a->A, a->in, 1.0f, dinp, a->in);
    }
}
