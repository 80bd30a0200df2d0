// train_hf.h: fsdp-train's Hugging Face model directories (docs/formats.md): --init DIR (its
// config.json gives the model's sizes through model_config.h's fields, its weights are read by
// fsdp_load_params) and --save PATH: a path ending in .safetensors is one file as before, any other
// path a directory (config.json + model.safetensors, or shards + index above --save-shard-size) in
// --save-dtype, for GPT-2 and the Llama family (the model-specific parts: check_config and save_config
// in train_hf.c).
#pragma once
#include <stdint.h>

#include "cli/output_paths.h"
#include "cli/train_flags.h"
#include "fsdp/hf_save.h"

// Whether --save PATH writes a Hugging Face directory (any path not ending in ".safetensors").
int train_hf_save_is_dir(const char *path);
// The output-path kind cli_check_output_paths checks --save PATH as.
cli_output_kind train_hf_save_kind(const char *path);
// Parses a --save-shard-size value: a number of bytes, or one with a suffix KB/MB/GB (10^3, 10^6, 10^9
// bytes, as save_pretrained's max_shard_size) or KiB/MiB/GiB (2^10, 2^20, 2^30), case-insensitive.
// Returns 0 and *bytes, or -1.
int train_hf_parse_size(const char *text, uint64_t *bytes);

// The checks made once the flags and --init's configuration are known, before the world starts:
// --save-dtype and --save-shard-size need a directory --save (and a valid size); an --init directory's
// config.json must describe a model of the run's architecture (GPT-2: n_inner 4 x n_embd, tied embeddings) and
// its weights (st_source.h: the index against its shards) must open; an --init file goes to
// dims_from_file as before. Returns 0, or the exit status after one line on stderr (2 for bad input, 1
// when dims_from_file fails).
int train_hf_prepare(train_options *o, fsdp_status (*dims_from_file)(train_options *));

// --save: a .safetensors path as cli_save_weights; a directory through fsdp_save_hf with the config of
// the model trained (an --init directory's other keys, bos/eos ids and the like, kept), then rank 0
// prints one line saying what is on disk. Collective.
fsdp_status train_hf_save_weights(const char *prog, const train_options *o, fsdp_state *fs, int rank);
