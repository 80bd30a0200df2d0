// param.h: named parameters. A module never owns parameter storage: each nn_param is a view that
// whoever owns the memory binds (one contiguous block in a plain run, a unit's flat buffer under FSDP),
// which is how original names and shapes stay visible (use_orig_params).
#pragma once
#include <stdint.h>

#include "core/rng.h"
#include "core/status.h"
#include "nn/nn_ctx.h"
#include "tensor/tensor.h"

#define NN_NAME_MAX 128

typedef enum { NN_INIT_ZEROS, NN_INIT_ONES, NN_INIT_UNIFORM, NN_INIT_NORMAL } nn_init_kind;

typedef struct {
    nn_init_kind kind;
    float scale;  // UNIFORM: bound b of U(-b, b); NORMAL: std
} nn_init;

typedef struct {
    char name[NN_NAME_MAX];  // PyTorch state_dict() name, e.g. "0.self_attn.in_proj_weight"
    int ndim;
    int64_t shape[4];
    int64_t numel;
    nn_init init;
    int frozen;   // requires_grad=False: no gradient (grad stays NULL), no optimizer state; set before fsdp_wrap
                  // (fsdp_config.freeze sets it there), fixed after: the unit's layout follows it
    int adapter;  // a LoRA adapter's (nn/lora.h): optional in a base-weights file (fsdp_load_params)
    float *data;  // (numel,) bound view, not owned
    float *grad;  // (numel,) bound view, not owned; NULL for a frozen parameter (modules skip its gradient)
    // Gradients are added into `grad` (+=). A module that writes a parameter's gradient only through
    // products whose beta comes from nn_grad_beta sets grad_overwrite at creation; the FSDP engine may then
    // bind that view without clearing it and set grad_fresh (its values undefined, as after PyTorch's
    // zero_grad(set_to_none=True)): the first product of the backward stores its result (beta 0), later
    // ones add. A parameter still fresh when the backward ends is cleared by the engine.
    int grad_overwrite;
    int grad_fresh;
    const fsdp_bf16 *data_b16;  // (numel,) bf16 view bound instead of `data` (mixed precision), or NULL
    float *widened;             // (numel,) device: data_b16 widened by nn_param_f32, or NULL (owned)
    fsdp_dev *widened_dev;      // the device `widened` was allocated from
} nn_param;

typedef struct {
    nn_param *items;  // (capacity,) fixed at creation so nn_param pointers stay valid
    int count;
    int capacity;
} nn_params;

// The beta of a product that adds into p's gradient: 0 when the view is fresh (then no longer), else 1.
static inline float nn_grad_beta(nn_param *p) {
    float beta = p->grad_fresh ? 0.0f : 1.0f;
    p->grad_fresh = 0;
    return beta;
}

fsdp_status nn_params_create(nn_params *ps, int capacity);
void nn_params_destroy(nn_params *ps);  // frees the parameters' widened copies too
// Appends "prefix" + "name" with the shape; returns the new parameter (never NULL: capacity is asserted).
nn_param *nn_params_add(nn_params *ps, const char *prefix, const char *name, int ndim,
                        const int64_t *shape, nn_init init);
nn_param *nn_params_find(const nn_params *ps, const char *name);
int64_t nn_params_numel(const nn_params *ps);
// Binds all parameters, in order, to consecutive views of data and grad. data, grad: (numel total,)
void nn_params_bind_flat(nn_params *ps, float *data, float *grad);
// The parameter's values as fp32 (device memory), for the kernels that take fp32 parameters (LayerNorm's
// weight and bias, a Linear's bias): `data` when bound in fp32; when mixed precision bound only the bf16
// view, that view widened on the device (ctx->k->bf16_to_f32, enqueued on ctx->stream) into p->widened.
// The widened copy is the parameter's own device scratch of numel floats: allocated from ctx->dev at the
// first widening (accounted as activations, like the modules' other lazily allocated buffers), refilled
// by every later call (no allocation per call; the same stream orders each refill after the kernels
// that read the previous one) and freed by nn_params_destroy. Only the small 1-D parameters are ever
// widened (the matrix products read bf16 directly), so it costs one (C,) buffer per such parameter.
// NULL (with fsdp_error set) when out of device memory.
const float *nn_param_f32(const nn_ctx *ctx, nn_param *p);
// Fills elements [offset, offset + n) of p's initial values (counter-based per name and --seed, so
// any rank can produce any slice). dst: (n,)
void nn_param_init_slice(const nn_param *p, uint64_t seed, int64_t offset, int64_t n, float *dst);
