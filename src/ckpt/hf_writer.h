// hf_writer.h: a Hugging Face model directory written as a stream (fsdp_save_hf from a model's shards,
// fsdp-ckpt consolidate from a checkpoint): announce every tensor in file order, begin, stream each
// tensor's bytes in that order through its shard's st_writer, commit with the config. The directory is
// what save_pretrained writes: config.json and model.safetensors, or, when the tensors pass
// max_shard_bytes, shards model-0000k-of-0000n.safetensors cut in order (a new shard when the next
// tensor would take the current one past the size; a larger tensor has one of its own) and
// model.safetensors.index.json. Each file's metadata: {"format": "pt"} (from_pretrained checks it),
// then the pairs added. Everything goes through hf_dir.h's temporary directory: nothing is left of a
// writer freed before its commit, or of a commit that fails.
#pragma once
#include <stdint.h>

#include "ckpt/hf_config.h"
#include "ckpt/safetensors.h"

typedef struct hf_writer hf_writer;  // opaque

// A writer for dir (trailing slashes dropped) of tensors stored as dtype (ST_F32 or ST_BF16), shards
// of at most max_shard_bytes (0: one file). NULL when out of memory (message set).
hf_writer *hf_writer_new(const char *dir, st_dtype dtype, uint64_t max_shard_bytes);
// The next tensor of the files (name and shape copied). shape: (ndim,)
fsdp_status hf_writer_add(hf_writer *w, const char *name, int ndim, const int64_t *shape);
// A metadata pair every file carries (copied).
fsdp_status hf_writer_add_metadata(hf_writer *w, const char *key, const char *value);
// Cuts the shards, creates the temporary directory (hf_dir_begin: refused when dir may not be replaced)
// and writes every file's header.
fsdp_status hf_writer_begin(hf_writer *w);
// The stream tensor t's bytes (st_writer_stream_data: numel x the dtype's size, any chunking) go to,
// after those of tensor t - 1.
st_writer *hf_writer_stream(hf_writer *w, int t);
// The number of weight files (after begin).
int hf_writer_file_count(const hf_writer *w);
// Completes the shards, writes the index and config.json (cfg, torch_dtype set to the dtype), puts the
// directory in place (hf_dir_commit) and frees w, whatever happens.
fsdp_status hf_writer_commit(hf_writer *w, const hf_config *cfg);
// Frees w without writing: its temporary directory is removed. NULL is fine.
void hf_writer_free(hf_writer *w);
