// hf_save.c: fsdp_save_hf, the model written as a Hugging Face model directory (config.json and
// model.safetensors, or shards and an index), streamed from the shards as fsdp_save_params streams one
// file: every rank gathers one unit at a time, rank 0 writes its tensors through the bounded staging,
// in the model's parameter order (Hugging Face's), not the units'.
#include "fsdp/hf_save.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_dir.h"
#include "fsdp/fsdp_internal.h"

// The plan every rank can compute: the set's parameters in the model's order (nn_params: Hugging Face's
// state_dict order), the unit holding each, and the shard file each goes to.
typedef struct {
    int n;                    // tensors written
    const nn_param **params;  // (n,) in the model's order
    int *unit, *slot;         // (n,) the unit holding each and its index among the unit's parameters
    int *shard_of;            // (n,) the shard file each goes to
    int n_shards;
    uint64_t total_bytes;
} save_plan;

// Shards as save_pretrained cuts them: tensors in order, a new shard when the next one would take the
// current one past max_bytes (a tensor larger than max_bytes has a shard of its own).
static fsdp_status plan_shards(const fsdp_state *s, fsdp_param_set set, size_t elem_bytes, uint64_t max_bytes,
                               save_plan *p) {
    memset(p, 0, sizeof *p);
    const nn_params *ps = s->model.params;
    size_t cap = (size_t)(ps->count ? ps->count : 1);
    p->params = malloc(sizeof *p->params * cap);
    p->unit = malloc(sizeof *p->unit * cap), p->slot = malloc(sizeof *p->slot * cap);
    p->shard_of = malloc(sizeof *p->shard_of * cap);
    if (!p->params || !p->unit || !p->slot || !p->shard_of)
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory planning the shards");
    uint64_t in_shard = 0;
    for (int k = 0; k < ps->count; k++) {
        const nn_param *q = &ps->items[k];
        int keep = set == FSDP_PARAMS_ALL || (set == FSDP_PARAMS_ADAPTERS) == (q->adapter != 0), ui = 0, i = -1;
        for (; keep && ui < s->n_units && i < 0; ui++)
            for (int j = 0; j < s->units[ui].n_params && i < 0; j++)
                if (s->units[ui].params[j] == q) i = j;
        if (!keep || i < 0) continue;  // (every parameter has a unit: the root takes what no block took)
        uint64_t bytes = (uint64_t)q->numel * elem_bytes;
        if (p->n_shards == 0 || (in_shard > 0 && in_shard + bytes > max_bytes)) {
            p->n_shards++;
            in_shard = 0;
        }
        in_shard += bytes;
        p->total_bytes += bytes;
        p->params[p->n] = q, p->unit[p->n] = ui - 1, p->slot[p->n] = i;
        p->shard_of[p->n++] = p->n_shards - 1;
    }
    return FSDP_OK;
}

static void plan_free(save_plan *p) {
    free(p->params);
    free(p->unit);
    free(p->slot);
    free(p->shard_of);
}

// Rank 0: the temporary directory's writers, one per shard, with every tensor announced and the
// headers written. writers, names: (n_shards,); names: (n_shards, 64)
static fsdp_status open_writers(fsdp_state *s, const save_plan *p, const char *tmp, st_dtype dtype,
                                st_writer **writers, char (*names)[64]) {
    char path[4400];
    for (int k = 0; k < p->n_shards; k++) {
        hf_shard_name(k, p->n_shards, names[k], sizeof names[k]);
        snprintf(path, sizeof path, "%.4200s/%s", tmp, names[k]);
        if (!(writers[k] = st_writer_new_stream(path))) return FSDP_ERR_NOMEM;
        FSDP_CHECK(st_writer_add_metadata(writers[k], "format", "pt"));  // what from_pretrained asks of a file
        FSDP_CHECK(fsdp_add_file_metadata(s, writers[k]));
    }
    for (int t = 0; t < p->n; t++)
        FSDP_CHECK(st_writer_add(writers[p->shard_of[t]], p->params[t]->name, dtype, p->params[t]->ndim,
                                 p->params[t]->shape, NULL));
    for (int k = 0; k < p->n_shards; k++) FSDP_CHECK(st_writer_stream_begin(writers[k]));
    return FSDP_OK;
}

// Rank 0, after the data: the shards renamed into place, the index, config.json, then the directory.
static fsdp_status finish(const save_plan *p, const char *dir, const char *tmp, const hf_config *cfg, fsdp_dtype dtype,
                          st_writer **writers, char (*names)[64]) {
    fsdp_status st = FSDP_OK;
    for (int k = 0; k < p->n_shards; k++) {  // (each commit frees its writer, even when it fails)
        if (st == FSDP_OK) st = st_writer_stream_commit(writers[k]);
        else st_writer_free(writers[k]);
        writers[k] = NULL;
    }
    if (st == FSDP_OK && p->n_shards > 1) {
        const char **tensors = malloc(sizeof *tensors * (size_t)p->n), **shards = malloc(sizeof *shards * (size_t)p->n);
        if (tensors && shards) {
            for (int t = 0; t < p->n; t++) tensors[t] = p->params[t]->name, shards[t] = names[p->shard_of[t]];
            st = hf_index_write(tmp, p->total_bytes, p->n, tensors, shards);
        } else {
            st = fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", dir);
        }
        free(tensors);
        free(shards);
    }
    hf_config c = *cfg;
    snprintf(c.torch_dtype, sizeof c.torch_dtype, "%s", dtype == FSDP_BF16 ? "bfloat16" : "float32");
    char path[4400];
    snprintf(path, sizeof path, "%.4200s/%s", tmp, HF_CONFIG_NAME);
    if (st == FSDP_OK) st = hf_config_write(&c, path);
    if (st == FSDP_OK) st = hf_dir_commit(dir, tmp);
    return st;
}

fsdp_status fsdp_save_hf(fsdp_state *s, const char *dir_arg, const hf_config *cfg, fsdp_param_set set, fsdp_dtype dtype,
                         uint64_t max_shard_bytes) {
    int R = fsdp_comm_rank(s->world);
    char dir[4000];  // dir_arg without trailing slashes: "out/" -> "out" (its temporary is "out.tmp.<pid>")
    size_t len = strlen(dir_arg);
    while (len > 1 && dir_arg[len - 1] == '/') len--;
    if (len >= sizeof dir) return fsdp_error(FSDP_ERR_INVALID_ARG, "%.200s...: path too long", dir_arg);
    memcpy(dir, dir_arg, len);
    dir[len] = 0;
    save_plan p;
    fsdp_status st = plan_shards(s, set, dtype == FSDP_BF16 ? 2 : 4, max_shard_bytes ? max_shard_bytes : UINT64_MAX, &p);
    float *flat = st == FSDP_OK ? fsdp_alloc_unit_buffer(s) : NULL;
    if (!flat) {
        plan_free(&p);
        return st == FSDP_OK ? fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory for a unit", dir) : st;
    }
    st_writer **writers = calloc((size_t)p.n_shards + 1, sizeof *writers);  // (n_shards,)
    char(*names)[64] = calloc((size_t)p.n_shards + 1, sizeof *names);      // (n_shards, 64)
    char tmp[4200] = "";
    fsdp_stage g = {s, NULL};
    st = writers && names ? FSDP_OK : fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", dir);  // rank 0's status
    if (R == 0 && st == FSDP_OK) st = fsdp_stage_open(s, &g);
    if (R == 0 && st == FSDP_OK) st = hf_dir_begin(dir, tmp, sizeof tmp);
    if (R == 0 && st == FSDP_OK) st = open_writers(s, &p, tmp, dtype == FSDP_BF16 ? ST_BF16 : ST_F32, writers, names);
    fsdp_status cs = FSDP_OK;  // collective status: every rank takes part in every gather
    // the plan's order: a unit is gathered when its first tensor comes, again if the order comes back to
    // it (the root's embeddings first and final norm last: gathered twice); one unit in memory at a time
    for (int t = 0, gathered = -1; t < p.n && cs == FSDP_OK; t++) {
        fsdp_unit *u = &s->units[p.unit[t]];
        if (p.unit[t] != gathered) cs = fsdp_gather_flat(s, u, u->shard, flat, 0);  // (the same on every rank)
        gathered = p.unit[t];
        if (R == 0 && cs == FSDP_OK && st == FSDP_OK)
            st = fsdp_stage_write_as(&g, writers[p.shard_of[t]], flat + u->offsets[p.slot[t]], p.params[t]->numel,
                                     dtype);
    }
    if (R == 0 && writers) {
        if (st == FSDP_OK && cs == FSDP_OK) st = finish(&p, dir, tmp, cfg, dtype, writers, names);
        for (int k = 0; k < p.n_shards; k++) st_writer_free(writers[k]);  // (what finish did not take)
        if (st != FSDP_OK && tmp[0]) hf_dir_abort(tmp);
    }
    fsdp_stage_close(&g);
    fsdp_dev_free(s->dev, flat);
    free(writers);
    free(names);
    plan_free(&p);
    if (cs != FSDP_OK) return cs;
    return fsdp_share_write_status(s, R == 0 ? st : FSDP_OK, dir);
}
