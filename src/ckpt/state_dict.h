// state_dict.h: a model's named parameters to and from safetensors files, by PyTorch name.
#pragma once
#include "core/status.h"
#include "nn/param.h"

// Loads every parameter of ps from path (F32/BF16/F16 on disk). A name may also be found with
// `alt_prefix` in front (e.g. "transformer." for Hugging Face GPT-2 files); extra tensors in the file
// (attn.bias buffers, lm_head.weight) are ignored. Missing tensors and wrong shapes are errors that
// name the file and tensor.
fsdp_status nn_params_load(const char *path, nn_params *ps, const char *alt_prefix);

typedef enum { FSDP_SAVE_VALUES, FSDP_SAVE_GRADS } fsdp_save_what;
// Writes all parameters (or their gradients) as F32 under their names, atomically.
fsdp_status nn_params_save(const char *path, const nn_params *ps, fsdp_save_what what);
