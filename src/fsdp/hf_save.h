// hf_save.h: the model's parameters written as a Hugging Face model directory (fsdp_save_hf). Beside
// fsdp.h rather than in it: an hf_config (ckpt/hf_config.h) describes the directory, and the ckpt headers
// are the tools', not the installed API's.
#pragma once
#include <stdint.h>

#include "ckpt/hf_config.h"
#include "fsdp/fsdp.h"

// Writes the set's parameters as a Hugging Face model directory (ckpt/hf_writer.h): dir/config.json (cfg,
// with torch_dtype set to the weights' dtype) and dir/model.safetensors, or, when the tensors pass
// max_shard_bytes (0: no limit), save_pretrained's shards model-00001-of-0000N.safetensors and
// model.safetensors.index.json. Tensors in the model's parameter order and under their own names, in
// dtype (FSDP_F32, or FSDP_BF16 rounded to nearest even); each file's metadata is {"format": "pt"} and
// the fsdp_set_file_metadata pairs. Streamed as fsdp_save_params: one unit gathered at a time, rank 0
// writing into a temporary directory renamed into place at the end (an old dir this tool wrote is
// replaced, anything else refused: nothing is touched then). Collective; every rank returns rank 0's
// outcome.
fsdp_status fsdp_save_hf(fsdp_state *s, const char *dir, const hf_config *cfg, fsdp_param_set set, fsdp_dtype dtype,
                         uint64_t max_shard_bytes);
