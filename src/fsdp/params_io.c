// params_io.c: filling shards (deterministic init, or slices read from safetensors), writing the
// full state dict from rank 0, and the use_orig_params view of named parameters.
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "core/alloc.h"
#include "fsdp/fsdp_internal.h"

typedef struct {
    int64_t elem_begin;  // first element of the parameter inside this rank's shard
    int64_t count;       // number of its elements there
    int64_t shard_pos;   // where they start in the shard
} shard_piece;

// The part of parameter i of unit u that this rank's shard holds (count 0 when none).
static shard_piece piece_of(const fsdp_unit *u, int i) {
    shard_piece pc = {0, 0, 0};
    int64_t p0 = u->offsets[i], p1 = p0 + u->params[i]->numel;
    int64_t s0 = u->shard_begin, s1 = s0 + u->shard_numel;
    int64_t a = p0 > s0 ? p0 : s0, b = p1 < s1 ? p1 : s1;
    if (a >= b) return pc;
    pc.elem_begin = a - p0;
    pc.count = b - a;
    pc.shard_pos = a - s0;
    return pc;
}

fsdp_status fsdp_init_params(fsdp_state *s, uint64_t seed) {
    for (int ui = 0; ui < s->n_units; ui++) {
        fsdp_unit *u = &s->units[ui];
        memset(u->shard, 0, sizeof(float) * (size_t)u->shard_numel);
        for (int i = 0; i < u->n_params; i++) {
            shard_piece pc = piece_of(u, i);
            if (pc.count) nn_param_init_slice(u->params[i], seed, pc.elem_begin, pc.count, u->shard + pc.shard_pos);
        }
    }
    return s->cfg.sync_module_states ? fsdp_sync_module_states(s) : FSDP_OK;
}

fsdp_status fsdp_sync_module_states(fsdp_state *s) {
    fsdp_comm *c = s->replicated ? s->world : s->replica_comm;  // sharded ranks own disjoint pieces
    for (int ui = 0; c && ui < s->n_units; ui++)
        FSDP_CHECK(fsdp_broadcast(c, s->units[ui].shard, (size_t)s->units[ui].shard_numel, FSDP_F32, 0));
    return FSDP_OK;
}

fsdp_status fsdp_load_params(fsdp_state *s, const char *path, const char *alt_prefix) {
    st_file *f = NULL;
    FSDP_CHECK(st_open(path, &f));
    fsdp_status st = FSDP_OK;
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
        fsdp_unit *u = &s->units[ui];
        memset(u->shard, 0, sizeof(float) * (size_t)u->shard_numel);
        for (int i = 0; i < u->n_params && st == FSDP_OK; i++) {
            nn_param *p = u->params[i];
            const char *name = p->name;
            char alt[NN_NAME_MAX + 64];
            if (!st_find(f, name) && alt_prefix) {
                snprintf(alt, sizeof alt, "%s%s", alt_prefix, p->name);
                if (st_find(f, alt)) name = alt;
            }
            shard_piece pc = piece_of(u, i);
            // every rank validates every tensor, so a bad file fails on all ranks alike
            st = st_read_f32_range(f, name, u->shard + pc.shard_pos, p->ndim, p->shape, pc.elem_begin, pc.count);
        }
    }
    st_close(f);
    return st;
}

fsdp_status fsdp_save_full(fsdp_state *s, const char *path, int grads) {
    // One unit at a time: every rank gathers the unit's flat buffer (the only extra memory, about one
    // unit), rank 0 streams its parameters into the file, whose header listed every tensor up front.
    int R = fsdp_comm_rank(s->world);
    int64_t max_unit = 1;
    for (int ui = 0; ui < s->n_units; ui++) max_unit = s->units[ui].padded > max_unit ? s->units[ui].padded : max_unit;
    float *flat = fsdp_alloc(sizeof(float) * (size_t)max_unit, FSDP_MEM_UNSHARDED);
    if (!flat) return FSDP_ERR_NOMEM;
    st_writer *w = NULL;
    fsdp_status st = FSDP_OK;  // rank 0's file status
    if (R == 0) {
        w = st_writer_new_stream(path);
        st = w ? FSDP_OK : FSDP_ERR_NOMEM;
        for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++)
            for (int i = 0; i < s->units[ui].n_params && st == FSDP_OK; i++) {
                const nn_param *p = s->units[ui].params[i];
                st = st_writer_add(w, p->name, ST_F32, p->ndim, p->shape, NULL);
            }
        if (st == FSDP_OK) st = st_writer_stream_begin(w);
    }
    fsdp_status cs = FSDP_OK;  // collective status: every rank takes part in every gather
    for (int ui = 0; ui < s->n_units && cs == FSDP_OK; ui++) {
        fsdp_unit *u = &s->units[ui];
        cs = fsdp_gather_flat(s, u, grads, flat);
        for (int i = 0; R == 0 && cs == FSDP_OK && st == FSDP_OK && i < u->n_params; i++)
            st = st_writer_stream_data(w, flat + u->offsets[i], sizeof(float) * (size_t)u->params[i]->numel);
    }
    if (w) {
        if (st == FSDP_OK && cs == FSDP_OK) st = st_writer_stream_commit(w);
        else st_writer_free(w);
    }
    fsdp_free(flat);
    if (cs != FSDP_OK) return cs;
    float ok = (float)(st == FSDP_OK);  // every rank learns whether rank 0's write worked
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    fsdp_status bs = fsdp_broadcast(s->world, &ok, 1, FSDP_F32, 0);
    if (st != FSDP_OK) return fsdp_error(st, "%s", msg);
    if (bs != FSDP_OK) return bs;
    return ok != 0.0f ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: rank 0 failed to write the state dict", path);
}

int fsdp_named_param_count(const fsdp_state *s) { return s->model.params->count; }

fsdp_named_param fsdp_named_param_at(const fsdp_state *s, int index) {
    fsdp_named_param np;
    memset(&np, 0, sizeof np);
    const nn_param *p = &s->model.params->items[index];
    np.name = p->name;
    np.ndim = p->ndim;
    np.shape = p->shape;
    np.numel = p->numel;
    for (int ui = 0; ui < s->n_units; ui++) {
        const fsdp_unit *u = &s->units[ui];
        for (int i = 0; i < u->n_params; i++)
            if (u->params[i] == p) {
                shard_piece pc = piece_of(u, i);
                np.shard_offset = pc.elem_begin;
                np.shard_numel = pc.count;
                np.shard_data = u->shard + pc.shard_pos;
                np.shard_grad = u->shard_grad + pc.shard_pos;
            }
    }
    return np;
}
