// hf_dir.h: writing a Hugging Face model directory without ever leaving a half-written one: the files
// go into a temporary directory beside it ("DIR.tmp.<pid>"), which is renamed into place when complete.
// A DIR that exists is replaced only when this tool could have written it: a directory holding
// config.json and model safetensors files (model.safetensors, model-NNNNN-of-NNNNN.safetensors,
// model.safetensors.index.json) and nothing else, or an empty one; the old one is renamed aside
// ("DIR.old.<pid>") and removed after the new one is in place. Anything else (a file, a directory with
// a tokenizer or other files in it) is a one-line error and nothing is touched.
// Also: shard names as save_pretrained spells them, and the index file.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define HF_WEIGHTS_NAME "model.safetensors"
#define HF_INDEX_NAME "model.safetensors.index.json"
#define HF_CONFIG_NAME "config.json"
#define HF_DEFAULT_SHARD_BYTES 5000000000ull  // save_pretrained's max_shard_size "5GB"

// Whether dir may be written: absent (its parent must exist), or a directory as above. FSDP_OK, or a
// one-line error naming dir and what is in the way.
fsdp_status hf_dir_check_target(const char *dir);
// Creates the temporary directory for dir; tmp: (cap,) its path.
fsdp_status hf_dir_begin(const char *dir, char *tmp, size_t cap);
// Puts tmp in dir's place (replacing an old dir as above) and fsyncs the parent.
fsdp_status hf_dir_commit(const char *dir, const char *tmp);
// Removes tmp and what it holds (after a failure).
void hf_dir_abort(const char *tmp);
// The name of shard i (0-based) of n: "model-00001-of-00003.safetensors", or model.safetensors when
// n == 1. name: (cap,)
void hf_shard_name(int i, int n, char *name, size_t cap);
// Writes model.safetensors.index.json into dir: {"metadata": {"total_size": total_bytes}, "weight_map":
// {tensor: shard file}} with the names sorted, as save_pretrained writes it. names, shards: (n,)
fsdp_status hf_index_write(const char *dir, uint64_t total_bytes, int n, const char *const *names,
                           const char *const *shards);
