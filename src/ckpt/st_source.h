// st_source.h: a model's weights as one set of named tensors, wherever they lie: a .safetensors file,
// or a Hugging Face model directory holding model.safetensors or, for a sharded model,
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor name: shard file name}})
// and the shard files it names. Each file is opened once (st_open validates its header; no tensor
// data is read), and a tensor is found across them by name; reads then go to its own file, so a reader
// of a few byte ranges (one rank's shard of every tensor) touches only those bytes, never a whole file.
//
// A directory's index is checked against its shards before anything is read, one line naming the file
// and the tensor on the first problem: a malformed index (not JSON, no "weight_map" object, a shard
// name that is not a plain file name), a shard file that does not exist, a tensor the index lists in a
// shard that does not hold it, a tensor present in two shards, a shard tensor the index does not list.
// When a directory holds both model.safetensors and an index, model.safetensors is read (as
// transformers' from_pretrained does); a directory with neither but PEFT's adapter_model.safetensors
// (a LoRA adapter directory) is that file.
#pragma once
#include "ckpt/safetensors.h"

typedef struct st_source st_source;  // opaque

// Opens path (a file, or a directory as above); *out is NULL on failure.
fsdp_status st_source_open(const char *path, st_source **out);
void st_source_close(st_source *s);  // NULL is fine
const char *st_source_path(const st_source *s);  // the path as given
int st_source_is_dir(const st_source *s);
// The tensors of every file, in name order; *file (when not NULL) is the file holding entry i.
int st_source_count(const st_source *s);
const st_entry *st_source_entry_at(const st_source *s, int i, const st_file **file);
// Tensor `name`, or NULL when no file holds it; *file (when not NULL) is its file.
const st_entry *st_source_find(const st_source *s, const char *name, const st_file **file);
// The files (one, or the index's shards in name order).
int st_source_file_count(const st_source *s);
const st_file *st_source_file_at(const st_source *s, int i);
