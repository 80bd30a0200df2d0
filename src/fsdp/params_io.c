// params_io.c: filling shards (deterministic init, or slices read from safetensors), writing the
// full state dict from rank 0, the bounded host staging all file I/O goes through, and the
// use_orig_params view of named parameters.
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "ckpt/st_source.h"
#include "core/alloc.h"
#include "fsdp/fsdp_internal.h"

fsdp_status fsdp_stage_open(fsdp_state *s, fsdp_stage *g) {
    g->s = s;
    g->host = fsdp_dev_host_alloc(s->dev, sizeof(float) * FSDP_STAGE_FLOATS, FSDP_MEM_OTHER);
    return g->host ? FSDP_OK : FSDP_ERR_NOMEM;
}

void fsdp_stage_close(fsdp_stage *g) {
    if (g->host) fsdp_dev_host_free(g->s->dev, g->host);
    g->host = NULL;
}

fsdp_status fsdp_stage_write(fsdp_stage *g, st_writer *w, const float *src, int64_t count) {
    return fsdp_stage_write_as(g, w, src, count, FSDP_F32);
}

fsdp_status fsdp_stage_write_as(fsdp_stage *g, st_writer *w, const float *src, int64_t count, fsdp_dtype dtype) {
    for (int64_t c0 = 0; c0 < count; c0 += (int64_t)FSDP_STAGE_FLOATS) {
        size_t c = (size_t)(count - c0 < (int64_t)FSDP_STAGE_FLOATS ? count - c0 : (int64_t)FSDP_STAGE_FLOATS);
        FSDP_CHECK(fsdp_dev_read(g->s->compute, g->host, src + c0, sizeof(float) * c));
        if (dtype == FSDP_BF16) fsdp_f32_to_bf16_in_place(g->host, c);  // round to nearest even, as the kernels
        FSDP_CHECK(st_writer_stream_data(w, g->host, (dtype == FSDP_BF16 ? 2 : 4) * c));
    }
    return FSDP_OK;
}

fsdp_status fsdp_stage_read(fsdp_stage *g, const st_file *f, const char *name, int ndim, const int64_t *shape,
                            int64_t first, int64_t count, float *dst) {
    if (count == 0) return st_read_f32_range(f, name, g->host, ndim, shape, first, 0);  // still validates
    for (int64_t c0 = 0; c0 < count; c0 += (int64_t)FSDP_STAGE_FLOATS) {
        int64_t c = count - c0 < (int64_t)FSDP_STAGE_FLOATS ? count - c0 : (int64_t)FSDP_STAGE_FLOATS;
        FSDP_CHECK(st_read_f32_range(f, name, g->host, ndim, shape, first + c0, c));
        FSDP_CHECK(fsdp_copy_h2d(g->s->compute, dst + c0, g->host, sizeof(float) * (size_t)c));
        FSDP_CHECK(fsdp_stream_synchronize(g->s->compute));  // the staging buffer is reused next
    }
    return FSDP_OK;
}

fsdp_status fsdp_init_params(fsdp_state *s, uint64_t seed) {
    // values are made on the host (counter-based: element i depends only on seed, name and i, so a
    // chunk at a time gives the same values) and copied into the device shards
    fsdp_stage g;
    FSDP_CHECK(fsdp_stage_open(s, &g));
    fsdp_status st = FSDP_OK;
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
        fsdp_unit *u = &s->units[ui];
        st = fsdp_dev_memset(s->compute, u->shard, 0, sizeof(float) * (size_t)u->shard_numel);
        for (int i = 0; i < u->n_params && st == FSDP_OK; i++) {
            fsdp_piece pc = fsdp_piece_at(u, i);
            for (int64_t c0 = 0; c0 < pc.count && st == FSDP_OK; c0 += (int64_t)FSDP_STAGE_FLOATS) {
                int64_t c = pc.count - c0 < (int64_t)FSDP_STAGE_FLOATS ? pc.count - c0 : (int64_t)FSDP_STAGE_FLOATS;
                nn_param_init_slice(u->params[i], seed, pc.elem_begin + c0, c, g.host);
                st = fsdp_copy_h2d(s->compute, u->shard + pc.shard_pos + c0, g.host, sizeof(float) * (size_t)c);
                if (st == FSDP_OK) st = fsdp_stream_synchronize(s->compute);
            }
        }
    }
    fsdp_stage_close(&g);
    FSDP_CHECK(st);
    return s->cfg.sync_module_states ? fsdp_sync_module_states(s) : FSDP_OK;
}

fsdp_status fsdp_sync_module_states(fsdp_state *s) {
    fsdp_comm *c = s->replicated ? s->world : s->replica_comm;  // sharded ranks own disjoint pieces
    for (int ui = 0; c && ui < s->n_units; ui++)
        FSDP_CHECK(fsdp_dev_broadcast(s->compute, c, s->units[ui].shard, (size_t)s->units[ui].shard_numel, FSDP_F32, 0));
    return fsdp_stream_synchronize(s->compute);
}

// Whether name ends with suffix.
static int ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

// Tensors Hugging Face files carry that are not parameters of ours: GPT-2's attention-mask buffers, a
// tied head, older Llama files' rotary inv_freq buffers.
static int ignorable(const char *name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           ends_with(name, ".rotary_emb.inv_freq") || strcmp(name, "lm_head.weight") == 0;
}

// Appends ", name" to a bounded list; counts what did not fit.
static void list_add(char *buf, size_t cap, int *count, const char *name) {
    size_t len = strlen(buf);
    if (*count < 8 && len + strlen(name) + 3 < cap) snprintf(buf + len, cap - len, "%s%s", *count ? ", " : "", name);
    (*count)++;
}

// Whether parameter p belongs to the set.
static int in_set(const nn_param *p, fsdp_param_set set) {
    return set == FSDP_PARAMS_ALL || (set == FSDP_PARAMS_ADAPTERS) == (p->adapter != 0);
}

// fsdp_load_params over a set: FSDP_PARAMS_ALL reads every parameter, adapters optional (a base-weights
// file has none: they keep their values); FSDP_PARAMS_ADAPTERS reads only adapters, and any other
// tensor of the file is unexpected. path: a file or a Hugging Face directory (st_source.h); each rank
// reads only its shard's elements of each tensor, from the file that holds it.
static fsdp_status load_set(fsdp_state *s, const char *path, const char *alt_prefix, int strict, char *report,
                            size_t report_cap, fsdp_param_set set) {
    st_source *src = NULL;
    FSDP_CHECK(st_source_open(path, &src));
    char missing[512] = "", unexpected[512] = "";
    int n_missing = 0, n_unexpected = 0;
    size_t plen = alt_prefix ? strlen(alt_prefix) : 0;
    for (int i = 0; i < st_source_count(src); i++) {  // tensors of the files that are no parameter
        const char *name = st_source_entry_at(src, i, NULL)->name;
        const char *bare = plen && strncmp(name, alt_prefix, plen) == 0 ? name + plen : name;
        const nn_param *p = nn_params_find(s->model.params, bare);
        if ((!p || !in_set(p, set)) && (set == FSDP_PARAMS_ADAPTERS || !ignorable(bare)))
            list_add(unexpected, sizeof unexpected, &n_unexpected, name);
    }
    fsdp_stage g;
    fsdp_status st = fsdp_stage_open(s, &g);
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {
        fsdp_unit *u = &s->units[ui];
        for (int i = 0; i < u->n_params && st == FSDP_OK; i++) {
            nn_param *p = u->params[i];
            const char *name = p->name;
            char alt[NN_NAME_MAX + 64];
            if (!in_set(p, set)) continue;
            const st_file *f = NULL;
            if (!st_source_find(src, name, &f) && alt_prefix) {
                snprintf(alt, sizeof alt, "%s%s", alt_prefix, p->name);
                if (st_source_find(src, alt, &f)) name = alt;
            }
            if (!f) {
                if (set == FSDP_PARAMS_ADAPTERS || !p->adapter) list_add(missing, sizeof missing, &n_missing, p->name);
                continue;
            }
            fsdp_piece pc = fsdp_piece_at(u, i);
            st = fsdp_stage_read(&g, f, name, p->ndim, p->shape, pc.elem_begin, pc.count, u->shard + pc.shard_pos);
        }
    }
    fsdp_stage_close(&g);
    st_source_close(src);
    if (st != FSDP_OK) return st;
    if (strict && n_missing)
        return fsdp_error(FSDP_ERR_MISSING, "%s: missing %d tensor(s): %s%s", path, n_missing, missing,
                          n_missing > 8 ? ", ..." : "");
    if (strict && n_unexpected)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: %d unexpected tensor(s) (not parameters of this model): %s%s",
                          path, n_unexpected, unexpected, n_unexpected > 8 ? ", ..." : "");
    if (report && report_cap) {
        report[0] = 0;
        if (n_missing)
            snprintf(report, report_cap, "%s: %d parameter(s) not in the file kept their initial values: %s%s", path,
                     n_missing, missing, n_missing > 8 ? ", ..." : "");
        if (n_unexpected) {
            size_t len = strlen(report);
            snprintf(report + len, report_cap - len, "%s%s: %d tensor(s) in the file are not parameters: %s%s",
                     len ? "\n" : "", path, n_unexpected, unexpected, n_unexpected > 8 ? ", ..." : "");
        }
    }
    return FSDP_OK;
}

fsdp_status fsdp_load_params(fsdp_state *s, const char *path, const char *alt_prefix, int strict, char *report,
                             size_t report_cap) {
    return load_set(s, path, alt_prefix, strict, report, report_cap, FSDP_PARAMS_ALL);
}

fsdp_status fsdp_load_adapters(fsdp_state *s, const char *path, const char *alt_prefix) {
    int any = 0;
    for (int i = 0; i < s->model.params->count; i++) any |= s->model.params->items[i].adapter;
    if (!any) return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: the model has no adapters to load", path);
    return load_set(s, path, alt_prefix, 1, NULL, 0, FSDP_PARAMS_ADAPTERS);
}

float *fsdp_alloc_unit_buffer(const fsdp_state *s) {
    int64_t max_unit = 1;
    for (int ui = 0; ui < s->n_units; ui++) max_unit = s->units[ui].padded > max_unit ? s->units[ui].padded : max_unit;
    return fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)max_unit, FSDP_MEM_UNSHARDED);
}

// Writes the set's parameters (their gradients with grads: trainable ones only; frozen ones have none)
// as name_prefix + name. One unit at a time: every rank gathers the unit's flat buffer on the device
// (the only extra memory, about one unit), rank 0 streams its parameters into the file through the
// bounded host staging; the file's header listed every tensor up front.
static fsdp_status save_set(fsdp_state *s, const char *path, int grads, fsdp_param_set set, const char *name_prefix) {
    int R = fsdp_comm_rank(s->world);
    float *flat = fsdp_alloc_unit_buffer(s);
    if (!flat) return FSDP_ERR_NOMEM;
    fsdp_stage g = {s, NULL};
    st_writer *w = NULL;
    fsdp_status st = FSDP_OK;  // rank 0's file status
    if (R == 0) st = fsdp_stage_open(s, &g);
    if (R == 0 && st == FSDP_OK) {
        w = st_writer_new_stream(path);
        st = w ? FSDP_OK : FSDP_ERR_NOMEM;
        for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++)
            for (int i = 0; i < s->units[ui].n_params && st == FSDP_OK; i++) {
                const nn_param *p = s->units[ui].params[i];
                char name[NN_NAME_MAX + 64];
                snprintf(name, sizeof name, "%s%s", name_prefix ? name_prefix : "", p->name);
                if ((!grads || !p->frozen) && in_set(p, set)) st = st_writer_add(w, name, ST_F32, p->ndim, p->shape, NULL);
            }
        if (st == FSDP_OK) st = fsdp_add_file_metadata(s, w);
        if (st == FSDP_OK) st = st_writer_stream_begin(w);
    }
    fsdp_status cs = FSDP_OK;  // collective status: every rank takes part in every gather
    for (int ui = 0; ui < s->n_units && cs == FSDP_OK; ui++) {
        fsdp_unit *u = &s->units[ui];
        int wanted = 0;  // whether the file takes any of the unit's tensors (the same on every rank)
        for (int i = 0; i < u->n_params; i++) wanted |= (!grads || !u->params[i]->frozen) && in_set(u->params[i], set);
        if (!wanted) continue;
        cs = fsdp_gather_flat(s, u, grads ? u->shard_grad : u->shard, flat, grads);
        for (int i = 0; R == 0 && cs == FSDP_OK && st == FSDP_OK && i < u->n_params; i++)
            if ((!grads || !u->params[i]->frozen) && in_set(u->params[i], set))
                st = fsdp_stage_write(&g, w, flat + u->offsets[i], u->params[i]->numel);
    }
    if (w) {
        if (st == FSDP_OK && cs == FSDP_OK) st = st_writer_stream_commit(w);
        else st_writer_free(w);
    }
    fsdp_stage_close(&g);
    fsdp_dev_free(s->dev, flat);
    if (cs != FSDP_OK) return cs;
    return fsdp_share_write_status(s, st, path);
}

fsdp_status fsdp_share_write_status(fsdp_state *s, fsdp_status st, const char *path) {
    float ok = (float)(st == FSDP_OK);  // every rank learns whether rank 0's write worked
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    fsdp_status bs = fsdp_broadcast(s->world, &ok, 1, FSDP_F32, 0);
    if (st != FSDP_OK) return fsdp_error(st, "%s", msg);
    if (bs != FSDP_OK) return bs;
    return ok != 0.0f ? FSDP_OK : fsdp_error(FSDP_ERR_IO, "%s: rank 0 failed to write the state dict", path);
}

fsdp_status fsdp_save_full(fsdp_state *s, const char *path, int grads) {
    return save_set(s, path, grads, FSDP_PARAMS_ALL, NULL);
}

fsdp_status fsdp_save_params(fsdp_state *s, const char *path, fsdp_param_set set, const char *name_prefix) {
    return save_set(s, path, 0, set, name_prefix);
}

fsdp_status fsdp_set_file_metadata(fsdp_state *s, int n, const char *const *keys, const char *const *values) {
    char **kv = calloc((size_t)(2 * n + 1), sizeof(char *));  // (2n,) key, value, ...
    int ok = kv != NULL;
    for (int i = 0; ok && i < n; i++) {
        kv[2 * i] = strdup(keys[i]);
        kv[2 * i + 1] = strdup(values[i]);
        ok = kv[2 * i] && kv[2 * i + 1];
    }
    if (!ok) {
        for (int i = 0; kv && i < 2 * n; i++) free(kv[i]);
        free(kv);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory for the file metadata");
    }
    for (int i = 0; i < 2 * s->n_file_meta; i++) free(s->file_meta[i]);
    free(s->file_meta);
    s->file_meta = kv;
    s->n_file_meta = n;
    return FSDP_OK;
}

fsdp_status fsdp_add_file_metadata(const fsdp_state *s, st_writer *w) {
    for (int i = 0; i < s->n_file_meta; i++)
        FSDP_CHECK(st_writer_add_metadata(w, s->file_meta[2 * i], s->file_meta[2 * i + 1]));
    return FSDP_OK;
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
                fsdp_piece pc = fsdp_piece_at(u, i);
                np.shard_offset = pc.elem_begin;
                np.shard_numel = pc.count;
                np.shard_data = u->shard + pc.shard_pos;
                np.shard_grad = p->frozen ? NULL : u->shard_grad + pc.shard_pos;
            }
    }
    return np;
}
