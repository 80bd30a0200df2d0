// hf_writer.c: a Hugging Face model directory streamed into a temporary one, then put in place
// (hf_writer.h).
#include "ckpt/hf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_dir.h"
#include "ckpt/st_alloc.h"

typedef struct {
    char *name;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t bytes;
    int shard;  // the file it goes to (after begin)
} hf_tensor;

struct hf_writer {
    char dir[4000], tmp[4200];  // tmp: "" until begin made it
    st_dtype dtype;
    uint64_t max_bytes, total_bytes;
    int n, cap;
    hf_tensor *tensors;    // (n,) in file order
    int nmeta, metacap;
    char **meta;           // (2 nmeta,) key, value, ...
    int n_files;
    st_writer **writers;   // (n_files,) the shards' streams
    char (*files)[64];     // (n_files, 64) their names
};

hf_writer *hf_writer_new(const char *dir, st_dtype dtype, uint64_t max_shard_bytes) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;  // "out/" -> "out": its temporary is "out.tmp.<pid>"
    hf_writer *w = len < sizeof w->dir ? calloc(1, sizeof *w) : NULL;
    if (!w) {
        fsdp_error(len < sizeof w->dir ? FSDP_ERR_NOMEM : FSDP_ERR_INVALID_ARG, "%.200s: %s", dir,
                   len < sizeof w->dir ? "out of memory" : "path too long");
        return NULL;
    }
    memcpy(w->dir, dir, len);
    w->dtype = dtype;
    w->max_bytes = max_shard_bytes ? max_shard_bytes : UINT64_MAX;
    return w;
}

fsdp_status hf_writer_add(hf_writer *w, const char *name, int ndim, const int64_t *shape) {
    FSDP_ASSERT(ndim >= 0 && ndim <= ST_MAX_DIMS && !w->writers);
    hf_tensor *grown = grow(w->tensors, &w->cap, w->n + 1, sizeof *grown);
    char *copy = dupstr(name);
    if (grown) w->tensors = grown;
    if (!grown || !copy) {
        free(copy);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", w->dir);
    }
    hf_tensor *t = &w->tensors[w->n++];
    *t = (hf_tensor){.name = copy, .ndim = ndim};
    t->bytes = st_dtype_size(w->dtype);
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d], t->bytes *= (uint64_t)shape[d];
    return FSDP_OK;
}

fsdp_status hf_writer_add_metadata(hf_writer *w, const char *key, const char *value) {
    char **grown = grow(w->meta, &w->metacap, 2 * w->nmeta + 2, sizeof *grown);
    if (grown) w->meta = grown;
    char *k = dupstr(key), *v = dupstr(value);
    if (!grown || !k || !v) {
        free(k);
        free(v);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", w->dir);
    }
    w->meta[2 * w->nmeta] = k;
    w->meta[2 * w->nmeta++ + 1] = v;
    return FSDP_OK;
}

// save_pretrained's cut: tensors in order, a new shard when the next would pass the size.
static void cut_shards(hf_writer *w) {
    uint64_t in_shard = 0;
    w->n_files = 0;
    for (int i = 0; i < w->n; i++) {
        hf_tensor *t = &w->tensors[i];
        if (w->n_files == 0 || (in_shard > 0 && in_shard + t->bytes > w->max_bytes)) {
            w->n_files++;
            in_shard = 0;
        }
        in_shard += t->bytes;
        w->total_bytes += t->bytes;
        t->shard = w->n_files - 1;
    }
    if (w->n_files == 0) w->n_files = 1;  // a model without tensors: one empty model.safetensors
}

fsdp_status hf_writer_begin(hf_writer *w) {
    cut_shards(w);
    w->writers = calloc((size_t)w->n_files, sizeof *w->writers);
    w->files = calloc((size_t)w->n_files, sizeof *w->files);
    if (!w->writers || !w->files) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", w->dir);
    fsdp_status st = hf_dir_begin(w->dir, w->tmp, sizeof w->tmp);
    if (st != FSDP_OK) {
        w->tmp[0] = 0;  // none made: nothing for hf_writer_free to remove
        return st;
    }
    char path[4400];
    for (int k = 0; k < w->n_files; k++) {
        hf_shard_name(k, w->n_files, w->files[k], sizeof w->files[k]);
        snprintf(path, sizeof path, "%.4200s/%s", w->tmp, w->files[k]);
        if (!(w->writers[k] = st_writer_new_stream(path))) return FSDP_ERR_NOMEM;
        FSDP_CHECK(st_writer_add_metadata(w->writers[k], "format", "pt"));
        for (int i = 0; i < w->nmeta; i++)
            FSDP_CHECK(st_writer_add_metadata(w->writers[k], w->meta[2 * i], w->meta[2 * i + 1]));
    }
    for (int i = 0; i < w->n; i++) {
        const hf_tensor *t = &w->tensors[i];
        FSDP_CHECK(st_writer_add(w->writers[t->shard], t->name, w->dtype, t->ndim, t->shape, NULL));
    }
    for (int k = 0; k < w->n_files; k++) FSDP_CHECK(st_writer_stream_begin(w->writers[k]));
    return FSDP_OK;
}

st_writer *hf_writer_stream(hf_writer *w, int t) { return w->writers[w->tensors[t].shard]; }

int hf_writer_file_count(const hf_writer *w) { return w->n_files; }

// The index of a sharded directory into the temporary one.
static fsdp_status write_index(const hf_writer *w) {
    const char **names = malloc(sizeof *names * (size_t)w->n), **shards = malloc(sizeof *shards * (size_t)w->n);
    fsdp_status st = names && shards ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", w->dir);
    for (int i = 0; st == FSDP_OK && i < w->n; i++) names[i] = w->tensors[i].name, shards[i] = w->files[w->tensors[i].shard];
    if (st == FSDP_OK) st = hf_index_write(w->tmp, w->total_bytes, w->n, names, shards);
    free(names);
    free(shards);
    return st;
}

fsdp_status hf_writer_commit(hf_writer *w, const hf_config *cfg) {
    FSDP_ASSERT(w->writers && w->tmp[0]);
    fsdp_status st = FSDP_OK;
    for (int k = 0; k < w->n_files; k++) {  // (each commit frees its writer, even when it fails)
        if (st == FSDP_OK) st = st_writer_stream_commit(w->writers[k]);
        else st_writer_free(w->writers[k]);
        w->writers[k] = NULL;
    }
    if (st == FSDP_OK && w->n_files > 1) st = write_index(w);
    hf_config c = *cfg;
    snprintf(c.torch_dtype, sizeof c.torch_dtype, "%s", w->dtype == ST_BF16 ? "bfloat16" : "float32");
    char path[4400];
    snprintf(path, sizeof path, "%.4200s/%s", w->tmp, HF_CONFIG_NAME);
    if (st == FSDP_OK) st = hf_config_write(&c, path);
    if (st == FSDP_OK) st = hf_dir_commit(w->dir, w->tmp);
    if (st == FSDP_OK) w->tmp[0] = 0;  // in place: nothing to remove
    hf_writer_free(w);
    return st;
}

void hf_writer_free(hf_writer *w) {
    if (!w) return;
    for (int k = 0; w->writers && k < w->n_files; k++) st_writer_free(w->writers[k]);  // (drops temporaries)
    if (w->tmp[0]) hf_dir_abort(w->tmp);
    for (int i = 0; i < w->n; i++) free(w->tensors[i].name);
    for (int i = 0; i < 2 * w->nmeta; i++) free(w->meta[i]);
    free(w->tensors);
    free(w->meta);
    free(w->writers);
    free(w->files);
    free(w);
}
