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
    int64_t total = 0;
    for (int ui = 0; ui < s->n_units; ui++) total += s->units[ui].padded;
    float *all = fsdp_alloc(sizeof(float) * (size_t)(total ? total : 1), FSDP_MEM_UNSHARDED);
    if (!all) return FSDP_ERR_NOMEM;
    fsdp_status st = FSDP_OK;
    int64_t off = 0;
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
        st = fsdp_gather_flat(s, &s->units[ui], grads, all + off);
        off += s->units[ui].padded;
    }
    int write_ok = 1;
    if (st == FSDP_OK && fsdp_comm_rank(s->world) == 0) {
        st_writer *w = st_writer_new(path);
        st = w ? FSDP_OK : FSDP_ERR_NOMEM;
        // parameters in the model's order, each a view into the gathered flats
        for (int pi = 0; pi < s->model.params->count && st == FSDP_OK; pi++) {
            const nn_param *p = &s->model.params->items[pi];
            const float *src = NULL;
            int64_t base = 0;
            for (int ui = 0; ui < s->n_units && !src; ui++) {
                const fsdp_unit *u = &s->units[ui];
                for (int i = 0; i < u->n_params; i++)
                    if (u->params[i] == p) src = all + base + u->offsets[i];
                base += u->padded;
            }
            st = st_writer_add(w, p->name, ST_F32, p->ndim, p->shape, src);
        }
        if (w) st = st == FSDP_OK ? st_writer_commit(w) : (st_writer_free(w), st);
        write_ok = st == FSDP_OK;
    }
    float ok = (float)write_ok;  // every rank learns whether rank 0's write worked
    fsdp_status bs = fsdp_broadcast(s->world, &ok, 1, FSDP_F32, 0);
    fsdp_free(all);
    if (st != FSDP_OK) return st;
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
