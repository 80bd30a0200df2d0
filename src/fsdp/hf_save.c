// hf_save.c: fsdp_save_hf, the model written as a Hugging Face model directory (ckpt/hf_writer.h),
// streamed from the shards as fsdp_save_params streams one file: every rank gathers one unit at a time,
// rank 0 writes its tensors through the bounded staging, in the model's parameter order (Hugging Face's
// state_dict order), not the units'.
#include "fsdp/hf_save.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_writer.h"
#include "fsdp/fsdp_internal.h"

// The set's parameters in the model's order (nn_params), with the unit holding each: what every rank
// gathers, in the same order.
typedef struct {
    int n;
    const nn_param **params;  // (n,) in the model's order
    int *unit, *slot;         // (n,) the unit holding each and its index among the unit's parameters
} save_order;

static fsdp_status order_params(const fsdp_state *s, fsdp_param_set set, save_order *o) {
    memset(o, 0, sizeof *o);
    const nn_params *ps = s->model.params;
    size_t cap = (size_t)(ps->count ? ps->count : 1);
    o->params = malloc(sizeof *o->params * cap);
    o->unit = malloc(sizeof *o->unit * cap), o->slot = malloc(sizeof *o->slot * cap);
    if (!o->params || !o->unit || !o->slot) return fsdp_error(FSDP_ERR_NOMEM, "out of memory ordering the parameters");
    for (int k = 0; k < ps->count; k++) {
        const nn_param *q = &ps->items[k];
        int keep = set == FSDP_PARAMS_ALL || (set == FSDP_PARAMS_ADAPTERS) == (q->adapter != 0), ui = 0, i = -1;
        for (; keep && ui < s->n_units && i < 0; ui++)
            for (int j = 0; j < s->units[ui].n_params && i < 0; j++)
                if (s->units[ui].params[j] == q) i = j;
        if (!keep || i < 0) continue;  // (every parameter has a unit: the root takes what no block took)
        o->params[o->n] = q, o->unit[o->n] = ui - 1, o->slot[o->n++] = i;
    }
    return FSDP_OK;
}

static void order_free(save_order *o) {
    free(o->params);
    free(o->unit);
    free(o->slot);
}

// Rank 0: the writer with every tensor and metadata pair announced and the files begun.
static fsdp_status open_writer(const fsdp_state *s, const save_order *o, const char *dir, st_dtype dtype,
                               uint64_t max_shard_bytes, hf_writer **out) {
    hf_writer *w = *out = hf_writer_new(dir, dtype, max_shard_bytes);
    if (!w) return FSDP_ERR_NOMEM;
    for (int i = 0; i < s->n_file_meta; i++)
        FSDP_CHECK(hf_writer_add_metadata(w, s->file_meta[2 * i], s->file_meta[2 * i + 1]));
    for (int t = 0; t < o->n; t++) FSDP_CHECK(hf_writer_add(w, o->params[t]->name, o->params[t]->ndim, o->params[t]->shape));
    return hf_writer_begin(w);
}

fsdp_status fsdp_save_hf(fsdp_state *s, const char *dir, const hf_config *cfg, fsdp_param_set set, fsdp_dtype dtype,
                         uint64_t max_shard_bytes) {
    int R = fsdp_comm_rank(s->world);
    save_order o;
    fsdp_status st = order_params(s, set, &o);
    float *flat = st == FSDP_OK ? fsdp_alloc_unit_buffer(s) : NULL;
    if (!flat) {
        order_free(&o);
        return st == FSDP_OK ? fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory for a unit", dir) : st;
    }
    fsdp_stage g = {s, NULL};
    hf_writer *w = NULL;
    if (R == 0) st = fsdp_stage_open(s, &g);  // st: rank 0's file status
    if (R == 0 && st == FSDP_OK) st = open_writer(s, &o, dir, dtype == FSDP_BF16 ? ST_BF16 : ST_F32, max_shard_bytes, &w);
    fsdp_status cs = FSDP_OK;  // collective status: every rank takes part in every gather
    // the model's order: a unit is gathered when its first tensor comes, again if the order comes back to
    // it (the root's embeddings first and final norm last: gathered twice); one unit in memory at a time
    for (int t = 0, gathered = -1; t < o.n && cs == FSDP_OK; t++) {
        fsdp_unit *u = &s->units[o.unit[t]];
        if (o.unit[t] != gathered) cs = fsdp_gather_flat(s, u, u->shard, flat, 0);  // (the same on every rank)
        gathered = o.unit[t];
        if (R == 0 && cs == FSDP_OK && st == FSDP_OK)
            st = fsdp_stage_write_as(&g, hf_writer_stream(w, t), flat + u->offsets[o.slot[t]], o.params[t]->numel, dtype);
    }
    if (w && st == FSDP_OK && cs == FSDP_OK) st = hf_writer_commit(w, cfg);  // (frees w)
    else hf_writer_free(w);
    fsdp_stage_close(&g);
    fsdp_dev_free(s->dev, flat);
    order_free(&o);
    if (cs != FSDP_OK) return cs;
    return fsdp_share_write_status(s, R == 0 ? st : FSDP_OK, dir);
}
