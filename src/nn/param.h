// param.h: named parameters. A module never owns parameter storage: each nn_param is a view that
// whoever owns the memory binds (one contiguous block in a plain run, a unit's flat buffer under FSDP),
// which is how original names and shapes stay visible (use_orig_params).
#pragma once
#include <stdint.h>

#include "core/rng.h"
#include "core/status.h"
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
    float *data;  // (numel,) bound view, not owned
    float *grad;  // (numel,) bound view, not owned
    const fsdp_bf16 *data_b16;  // (numel,) bf16 view bound instead of `data` (mixed precision), or NULL
} nn_param;

typedef struct {
    nn_param *items;  // (capacity,) fixed at creation so nn_param pointers stay valid
    int count;
    int capacity;
} nn_params;

fsdp_status nn_params_create(nn_params *ps, int capacity);
void nn_params_destroy(nn_params *ps);
// Appends "prefix" + "name" with the shape; returns the new parameter (never NULL: capacity is asserted).
nn_param *nn_params_add(nn_params *ps, const char *prefix, const char *name, int ndim,
                        const int64_t *shape, nn_init init);
nn_param *nn_params_find(const nn_params *ps, const char *name);
int64_t nn_params_numel(const nn_params *ps);
// Binds all parameters, in order, to consecutive views of data and grad. data, grad: (numel total,)
void nn_params_bind_flat(nn_params *ps, float *data, float *grad);
// The parameter's values as fp32: `data` when bound in fp32, else its bf16 view widened into a new
// buffer stored in *owned, which the caller frees (*owned stays NULL otherwise). NULL when out of memory.
const float *nn_param_f32(const nn_param *p, float **owned);
// Fills elements [offset, offset + n) of p's initial values (counter-based per name and --seed, so
// any rank can produce any slice). dst: (n,)
void nn_param_init_slice(const nn_param *p, uint64_t seed, int64_t offset, int64_t n, float *dst);
