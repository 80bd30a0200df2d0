// safetensors.h: read and write the safetensors format (https://github.com/huggingface/safetensors).
// File = u64 little-endian header length N, N bytes of JSON header, then the data section.
// Header: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//          "__metadata__": {"key": "value", ...}}; offsets are relative to the data section.
// The reader validates the header against the file size as the format requires: every tensor's size
// consistent with dtype x shape, names unique, and the tensors covering the data section exactly (no
// overlap, no gap, no trailing bytes; a zero-size tensor sits where the previous one ends). It reads
// what Hugging Face's library writes: a header padded with spaces, "__metadata__" present or absent,
// zero-size tensors, F16/BF16/F64 (read as f32: F16/BF16 exactly, F64 rounded to nearest). Every error message names the file and, where there is one,
// the tensor, e.g. "x.safetensors: tensor 'wte.weight' has shape [3, 4], expected [5, 4]".
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define ST_MAX_DIMS 8
#define ST_NAME_MAX 256

typedef enum { ST_F32, ST_BF16, ST_F16, ST_I32, ST_I64, ST_U8, ST_F64 } st_dtype;

typedef struct {
    char name[ST_NAME_MAX];
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;  // byte offsets into the data section
} st_entry;

typedef struct st_file st_file;  // opaque: an open, validated file

const char *st_dtype_name(st_dtype dt);
size_t st_dtype_size(st_dtype dt);

fsdp_status st_open(const char *path, st_file **out);
// The same checks over a file's bytes in memory (name is used in messages); the bytes must outlive the
// st_file, whose reads copy from them. bytes: (len,)
fsdp_status st_open_mem(const char *name, const void *bytes, size_t len, st_file **out);
void st_close(st_file *f);
const char *st_path(const st_file *f);
int st_count(const st_file *f);
const st_entry *st_entry_at(const st_file *f, int i);
const st_entry *st_find(const st_file *f, const char *name);  // NULL if absent
const char *st_metadata(const st_file *f, const char *key);   // NULL if absent
int st_metadata_count(const st_file *f);
// The i-th metadata pair in file order (0 <= i < st_metadata_count); *value may be NULL when not wanted.
const char *st_metadata_at(const st_file *f, int i, const char **value);

// Reads tensor `name` as f32 into dst (F32, BF16, F16 or F64 on disk). The tensor must exist and have
// exactly shape[ndim]; otherwise FSDP_ERR_MISSING / FSDP_ERR_SHAPE / FSDP_ERR_DTYPE with a message.
// dst: (numel,)
fsdp_status st_read_f32(const st_file *f, const char *name, float *dst, int ndim, const int64_t *shape);
// Reads elements [first, first + count) (flat, row-major) of such a tensor. dst: (count,)
fsdp_status st_read_f32_range(const st_file *f, const char *name, float *dst, int ndim, const int64_t *shape,
                              int64_t first, int64_t count);
// Reads integer tensor `name` (I32 or I64 on disk) as int32. dst: (numel,)
fsdp_status st_read_i32(const st_file *f, const char *name, int32_t *dst, int ndim, const int64_t *shape);
// Reads a byte range [byte_begin, byte_end) of tensor `name`'s raw data. dst: (byte_end-byte_begin,)
fsdp_status st_read_raw(const st_file *f, const char *name, void *dst, uint64_t byte_begin, uint64_t byte_end);

// Writer: collect tensors, then commit writes "path.tmp.<pid>" and renames it over `path`, so a
// failure never leaves a half-written file or destroys the previous one. Data pointers passed to
// st_writer_add must stay valid until st_writer_commit returns.
typedef struct st_writer st_writer;
st_writer *st_writer_new(const char *path);
fsdp_status st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim,
                          const int64_t *shape, const void *data);
fsdp_status st_writer_add_metadata(st_writer *w, const char *key, const char *value);
fsdp_status st_writer_commit(st_writer *w);  // writes and frees the writer
void st_writer_free(st_writer *w);           // discards without writing

// Streaming: add every tensor with data NULL, then stream_begin writes the header to the temporary
// file, stream_data appends the tensors' bytes in the order they were added (any chunking), and
// stream_commit checks the byte count, fsyncs and renames (and frees the writer). Only one tensor's
// worth of data needs to be in memory at a time.
st_writer *st_writer_new_stream(const char *path);
fsdp_status st_writer_stream_begin(st_writer *w);
fsdp_status st_writer_stream_data(st_writer *w, const void *data, size_t bytes);
fsdp_status st_writer_stream_commit(st_writer *w);
